package config

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// RetryPolicy is Soniq's default retry policy (soniq/core/retry.py,
// compute_retry_delay_seconds, used by ExponentialBackoff) with a job's
// retry_delay, retry_backoff, retry_max_delay and retry_jitter.
type RetryPolicy struct {
	// Delays is retry_delay: one delay, or one per attempt with the last
	// repeating. Empty means 0.
	Delays []time.Duration
	// Backoff doubles the delay each attempt from Delays (from 1s when
	// that is 0).
	Backoff bool
	// MaxDelay caps the delay when MaxDelaySet (Soniq's None = no cap).
	MaxDelay    time.Duration
	MaxDelaySet bool
	// Jitter spreads a backoff delay uniformly over [d/2, d]; Soniq
	// ignores it without Backoff.
	Jitter bool
}

// DefaultRetryPolicy returns the defaults of Soniq's @app.job decorator
// (soniq/core/registry.py): retry_delay=0, retry_backoff=False,
// retry_max_delay=None, retry_jitter=True, i.e. retry at once.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Jitter: true}
}

// maxBackoffExponent mirrors Soniq's _MAX_EXPONENT, which keeps the
// doubling finite for absurd attempt counts.
const maxBackoffExponent = 62

// Delay returns how long to wait before retrying after the attempt-th
// attempt failed (1-based: the row's attempts count after the failure, as
// Soniq passes it). rnd returns a float in [0, 1) and is injected for tests;
// nil uses math/rand/v2.
//
// Soniq's docstring calls its jitter "full jitter", but its code draws
// uniform(d/2, d); this follows the code, so Soniq workers and sidecars
// sharing a queue spread retries alike.
func (p RetryPolicy) Delay(attempt int, rnd func() float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	delay := 0.0 // seconds, as Soniq computes
	if n := len(p.Delays); n > 0 {
		delay = p.Delays[min(attempt-1, n-1)].Seconds()
	}
	if p.Backoff {
		base := delay
		if base <= 0 {
			base = 1
		}
		delay = base * math.Exp2(float64(min(attempt-1, maxBackoffExponent)))
	}
	if p.MaxDelaySet {
		delay = math.Min(delay, p.MaxDelay.Seconds())
	}
	if p.Backoff && p.Jitter && delay > 0 {
		if rnd == nil {
			rnd = rand.Float64
		}
		// random.uniform(a, b) is a + (b-a)*random().
		delay = delay/2 + (delay-delay/2)*rnd()
	}
	if delay <= 0 {
		return 0
	}
	if ns := delay * float64(time.Second); ns < math.MaxInt64 {
		return time.Duration(math.Round(ns))
	}
	return time.Duration(math.MaxInt64)
}

// String renders the policy in manifest terms, for logs and `manifest check`.
func (p RetryPolicy) String() string {
	var b strings.Builder
	b.WriteString("delay=")
	switch len(p.Delays) {
	case 0:
		b.WriteString("0s")
	case 1:
		b.WriteString(p.Delays[0].String())
	default:
		parts := make([]string, len(p.Delays))
		for i, d := range p.Delays {
			parts[i] = d.String()
		}
		b.WriteString("[" + strings.Join(parts, ",") + "]")
	}
	b.WriteString(" backoff=" + strconv.FormatBool(p.Backoff))
	if p.MaxDelaySet {
		b.WriteString(" max_delay=" + p.MaxDelay.String())
	}
	b.WriteString(" jitter=" + strconv.FormatBool(p.Jitter))
	return b.String()
}
