package supervisor

import (
	"strconv"
	"strings"
	"time"
)

// The last_error texts Soniq's own worker writes, so that a row reads the
// same whoever ran it: dashboards, alerts and `soniq dead-letter` output
// match on them.

// timeoutText is what Soniq writes for a job that ran past its timeout:
// "Job timed out after 300.0s". Soniq formats the timeout as the Python
// float its job_timeout setting is (300 becomes "300.0").
func timeoutText(timeout time.Duration) string {
	return "Job timed out after " + pyFloat(timeout.Seconds()) + "s"
}

// permanentText is what Soniq writes when a job is dead-lettered with
// reason permanent_failure (its retry policy declined another attempt):
// the error, prefixed. The sidecar's permanent failures are the handler's
// own refusals (`retryable: false`), the same decision taken in the handler.
func permanentText(text string) string {
	return "Retry policy declined: " + text
}

// pyFloat formats f as Python's repr(float) does: the shortest digits that
// read back as f, an integral value with ".0", exponent form (two exponent
// digits at least: 1e-05, 1e+16) below 1e-4 and from 1e16.
func pyFloat(f float64) string {
	if abs := max(f, -f); abs != 0 && (abs < 1e-4 || abs >= 1e16) {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}
