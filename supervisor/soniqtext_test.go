package supervisor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The expected strings are what Python prints for f"Job timed out after {t}s"
// with t the float Soniq holds (repr(float)).
func TestTimeoutText(t *testing.T) {
	for _, tc := range []struct {
		timeout time.Duration
		want    string
	}{
		{300 * time.Second, "Job timed out after 300.0s"},
		{2 * time.Second, "Job timed out after 2.0s"},
		{1500 * time.Millisecond, "Job timed out after 1.5s"},
		{250 * time.Millisecond, "Job timed out after 0.25s"},
		{time.Millisecond, "Job timed out after 0.001s"},
		{100 * time.Microsecond, "Job timed out after 0.0001s"},
		{10 * time.Microsecond, "Job timed out after 1e-05s"},
		{15 * time.Nanosecond, "Job timed out after 1.5e-08s"},
		{90 * time.Minute, "Job timed out after 5400.0s"},
		{333333333 * time.Nanosecond, "Job timed out after 0.333333333s"},
	} {
		assert.Equal(t, tc.want, timeoutText(tc.timeout), "%s", tc.timeout)
	}
}

func TestPyFloatLargeAndNegative(t *testing.T) {
	for f, want := range map[float64]string{
		1e16: "1e+16", 9999999999999998: "9999999999999998.0", -2: "-2.0", -0.5: "-0.5", 0: "0.0", 1e22: "1e+22",
	} {
		assert.Equal(t, want, pyFloat(f), "%v", f)
	}
}

func TestPermanentText(t *testing.T) {
	assert.Equal(t, "Retry policy declined: PermanentError: never", permanentText("PermanentError: never"))
}
