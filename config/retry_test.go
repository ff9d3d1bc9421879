package config

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRetryPolicyDelay(t *testing.T) {
	secs := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	list := []time.Duration{time.Second, 5 * time.Second, 30 * time.Second}
	// Expected values were computed with Soniq's compute_retry_delay_seconds
	// and an RNG whose random() returns rnd.
	tests := []struct {
		name    string
		policy  RetryPolicy
		attempt int
		rnd     float64
		want    time.Duration
	}{
		{"default retries at once", DefaultRetryPolicy(), 1, 0.5, 0},
		{"default, later attempt", DefaultRetryPolicy(), 3, 0.5, 0},
		{"fixed delay", RetryPolicy{Delays: []time.Duration{2 * time.Second}, Jitter: true}, 1, 0.5, 2 * time.Second},
		{"fixed delay ignores jitter", RetryPolicy{Delays: []time.Duration{2 * time.Second}, Jitter: true}, 5, 0.5, 2 * time.Second},
		{"backoff first attempt", RetryPolicy{Delays: []time.Duration{time.Second}, Backoff: true}, 1, 0.5, time.Second},
		{"backoff doubles", RetryPolicy{Delays: []time.Duration{time.Second}, Backoff: true}, 4, 0.5, 8 * time.Second},
		{"backoff from zero starts at 1s", RetryPolicy{Backoff: true}, 4, 0.5, 8 * time.Second},
		{"backoff capped", RetryPolicy{Delays: []time.Duration{time.Second}, Backoff: true, MaxDelay: 5 * time.Minute, MaxDelaySet: true}, 10, 0.5, 300 * time.Second},
		{"jitter low end is half", RetryPolicy{Delays: []time.Duration{time.Second}, Backoff: true, Jitter: true}, 4, 0, 4 * time.Second},
		{"jitter middle", RetryPolicy{Delays: []time.Duration{time.Second}, Backoff: true, Jitter: true}, 4, 0.5, 6 * time.Second},
		{"jitter high end", RetryPolicy{Delays: []time.Duration{time.Second}, Backoff: true, Jitter: true}, 4, 0.999, secs(7.996)},
		{"jitter after cap", RetryPolicy{Delays: []time.Duration{time.Second}, Backoff: true, MaxDelay: 5 * time.Minute, MaxDelaySet: true, Jitter: true}, 10, 0.5, 225 * time.Second},
		{"per-attempt list", RetryPolicy{Delays: list}, 2, 0.5, 5 * time.Second},
		{"per-attempt list repeats last", RetryPolicy{Delays: list}, 7, 0.5, 30 * time.Second},
		{"per-attempt list with backoff", RetryPolicy{Delays: list, Backoff: true}, 2, 0.5, 10 * time.Second},
		{"cap without backoff", RetryPolicy{Delays: []time.Duration{10 * time.Second}, MaxDelaySet: true, MaxDelay: 4 * time.Second}, 3, 0.5, 4 * time.Second},
		{"attempt below 1 counts as 1", RetryPolicy{Delays: []time.Duration{500 * time.Millisecond}, Backoff: true}, 0, 0.5, 500 * time.Millisecond},
		{"sub-second jitter", RetryPolicy{Delays: []time.Duration{250 * time.Millisecond}, Backoff: true, Jitter: true}, 3, 0.5, 750 * time.Millisecond},
		{"zero cap", RetryPolicy{Delays: []time.Duration{time.Second}, Backoff: true, MaxDelaySet: true, Jitter: true}, 2, 0.5, 0},
		{"huge attempt saturates", RetryPolicy{Delays: []time.Duration{time.Second}, Backoff: true}, 1000, 0.5, time.Duration(math.MaxInt64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.policy.Delay(tt.attempt, func() float64 { return tt.rnd })
			assert.InDelta(t, float64(tt.want), float64(got), float64(time.Microsecond), "got %v, want %v", got, tt.want)
		})
	}
}

func TestRetryPolicyDelayDefaultRandom(t *testing.T) {
	p := RetryPolicy{Delays: []time.Duration{time.Second}, Backoff: true, Jitter: true}
	for range 100 {
		d := p.Delay(3, nil)
		require.GreaterOrEqual(t, d, 2*time.Second)
		require.LessOrEqual(t, d, 4*time.Second)
	}
}

func TestRetryPolicyString(t *testing.T) {
	tests := []struct {
		p    RetryPolicy
		want string
	}{
		{DefaultRetryPolicy(), "delay=0s backoff=false jitter=true"},
		{RetryPolicy{Delays: []time.Duration{time.Second}, Backoff: true, MaxDelay: 5 * time.Minute, MaxDelaySet: true},
			"delay=1s backoff=true max_delay=5m0s jitter=false"},
		{RetryPolicy{Delays: []time.Duration{time.Second, 2 * time.Second}}, "delay=[1s,2s] backoff=false jitter=false"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.p.String())
	}
}
