package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Limit is the caps of one scope: a job's own `limit:` (the scope is the
// job's name) or an entry of the top-level `limits:` list shared by every
// job naming it (`limit: {group: NAME}`; the scope is the group's name).
// The caps hold across every sidecar claiming from the database
// (docs/limits.md).
type Limit struct {
	// Scope names the scope: the job name, or the group's name.
	Scope string
	// Group is true when the scope is a group of the `limits:` list.
	Group bool
	// Concurrency is the most rows of the scope processing at once in the
	// whole database (per key value when Key is set); 0 = no such cap.
	Concurrency int
	// Rate is the most claims of the scope in any window of Rate.Per (per
	// key value when Key is set); nil = no such cap.
	Rate *Rate
	// Key is the path into the job's args whose value the caps apply per
	// (`key: args.tenant_id` is ["tenant_id"]); nil = one cap for the
	// whole scope. A missing field or a value that is not a string, a
	// number or a boolean is the key null, one key like any other.
	Key []string
	// Line is where the scope is declared.
	Line int
}

// KeyString is the key as the manifest writes it ("args.tenant_id"), ""
// without a key.
func (l Limit) KeyString() string {
	if len(l.Key) == 0 {
		return ""
	}
	return "args." + strings.Join(l.Key, ".")
}

// String is the caps as the manifest writes them, for log lines:
// "concurrency 5, rate 100/1m0s, key args.tenant_id".
func (l Limit) String() string {
	var parts []string
	if l.Concurrency > 0 {
		parts = append(parts, "concurrency "+strconv.Itoa(l.Concurrency))
	}
	if l.Rate != nil {
		parts = append(parts, "rate "+l.Rate.String())
	}
	if k := l.KeyString(); k != "" {
		parts = append(parts, "key "+k)
	}
	return strings.Join(parts, ", ")
}

// Rate is N claims in any window of Per.
type Rate struct {
	N   int
	Per time.Duration
}

// String is "N/DURATION".
func (r Rate) String() string { return fmt.Sprintf("%d/%s", r.N, r.Per) }

// ParseRate reads "N/DURATION" (N ≥ 1, DURATION ≥ 1s, a Go duration or a
// bare unit: 100/1m, 25/s). It is the manifest's and the command line's
// one reading of a rate.
func ParseRate(s string) (Rate, error) {
	n, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Rate{}, fmt.Errorf("rate %q is not N/DURATION (like 100/1m or 25/1s)", s)
	}
	count, err := strconv.Atoi(strings.TrimSpace(n))
	if err != nil {
		return Rate{}, fmt.Errorf("rate %q: %q is not a whole number of claims", s, n)
	}
	if count < 1 {
		return Rate{}, fmt.Errorf("rate %q: the number of claims must be at least 1, got %d", s, count)
	}
	per = strings.TrimSpace(per)
	if per != "" && per[0] >= 'a' && per[0] <= 'z' {
		per = "1" + per // "25/s" is 25 per second
	}
	d, err := time.ParseDuration(per)
	if err != nil {
		return Rate{}, fmt.Errorf("rate %q: %q is not a duration (like 1s, 1m or 1h)", s, per)
	}
	if d < time.Second {
		return Rate{}, fmt.Errorf("rate %q: the window must be at least 1s, got %s", s, d)
	}
	if d%time.Second != 0 {
		return Rate{}, fmt.Errorf("rate %q: the window must be whole seconds, got %s", s, d)
	}
	return Rate{N: count, Per: d}, nil
}

// ParseLimitKey reads a key as the manifest writes it, "args." and a dot
// path of field names (letters, digits, '_' and '-', not starting with a
// digit), into the path.
func ParseLimitKey(s string) ([]string, error) {
	rest, ok := strings.CutPrefix(s, "args.")
	if !ok || rest == "" {
		return nil, fmt.Errorf("key %q must be args. and a path into the job's args, like args.tenant_id", s)
	}
	path := strings.Split(rest, ".")
	for _, seg := range path {
		if !validKeySegment(seg) {
			return nil, fmt.Errorf("key %q: %q is not a field name (letters, digits, '_' and '-', not starting with a digit)", s, seg)
		}
	}
	return path, nil
}

func validKeySegment(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')) {
			return false
		}
	}
	return true
}
