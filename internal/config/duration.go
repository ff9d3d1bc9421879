package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseDuration reads a duration the way the manifest and every duration
// flag take it: a Go duration (90s, 1m30s) or a number of seconds (90,
// 1.5), never negative.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if v, err := time.ParseDuration(s); err == nil {
		if v < 0 {
			return 0, fmt.Errorf("duration %q must not be negative", s)
		}
		return v, nil
	}
	if v, err := secondsToDuration(s); err == nil {
		return v, nil
	} else if !errors.Is(err, errNotANumber) {
		return 0, err
	}
	return 0, fmt.Errorf("invalid duration %q (want a Go duration like 30s or 1m30s, or a number of seconds)", s)
}

var errNotANumber = errors.New("not a number")

// secondsToDuration parses a plain number of seconds (fractions allowed),
// the form Soniq uses in its environment variables.
func secondsToDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, errNotANumber
	}
	switch {
	case math.IsNaN(f):
		return 0, fmt.Errorf("invalid duration %q", s)
	case f < 0:
		return 0, fmt.Errorf("duration %q must not be negative", s)
	case math.IsInf(f, 0) || f*float64(time.Second) >= math.MaxInt64:
		return 0, fmt.Errorf("duration %q is too large", s)
	}
	return time.Duration(math.Round(f * float64(time.Second))), nil
}

// envSeconds parses a Soniq-style duration: a number of seconds, fractions
// allowed.
func envSeconds(raw string, zeroValid bool) (time.Duration, error) {
	v, err := secondsToDuration(raw)
	if errors.Is(err, errNotANumber) {
		return 0, errors.New("invalid duration: want a number of seconds, like 30 or 0.5")
	}
	if err != nil {
		return 0, err
	}
	return v, checkDuration(v, zeroValid)
}

func checkDuration(v time.Duration, zeroValid bool) error {
	switch {
	case v < 0:
		return errors.New("must not be negative")
	case v == 0 && !zeroValid:
		return errors.New("must be greater than zero")
	}
	return nil
}

// parseInt reads a whole number the way a number flag takes it.
func parseInt(s string) (int, error) {
	s = strings.TrimSpace(s)
	v, err := strconv.Atoi(s)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return 0, fmt.Errorf("number %q is too large", s)
	case err != nil:
		return 0, fmt.Errorf("invalid number %q (want a whole number, like 500)", s)
	}
	return v, nil
}

// envInt parses a whole number from the environment and checks it.
func envInt(raw string, zeroValid bool) (int, error) {
	v, err := parseInt(raw)
	if err != nil {
		return 0, err
	}
	return v, checkInt(v, zeroValid)
}

func checkInt(v int, zeroValid bool) error {
	switch {
	case v < 0:
		return errors.New("must not be negative")
	case v == 0 && !zeroValid:
		return errors.New("must be greater than zero")
	}
	return nil
}
