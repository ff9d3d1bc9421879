package supervisor

import (
	"testing"
	"time"
)

// Polling sidecars of a fleet must not stay in step: every interval lies in
// [0.8, 1.2) of the setting, the draws spread across that range, and the
// mean stays near the setting (tolerance 5% over 2,000 draws).
func TestJitterPollSpreadsAroundTheInterval(t *testing.T) {
	const d = time.Second
	const n = 2000
	var sum time.Duration
	lo, hi := d, time.Duration(0)
	for range n {
		v := jitterPoll(d)
		if v < 8*d/10 || v >= 12*d/10 {
			t.Fatalf("jitterPoll(%s) = %s, want within [0.8s, 1.2s)", d, v)
		}
		sum += v
		lo, hi = min(lo, v), max(hi, v)
	}
	if mean := sum / n; mean < 95*d/100 || mean > 105*d/100 {
		t.Errorf("mean of %d draws = %s, want 1s ± 5%%", n, mean)
	}
	if hi-lo < 300*time.Millisecond {
		t.Errorf("draws span only %s..%s: not spread", lo, hi)
	}
}
