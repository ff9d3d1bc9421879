//go:build !linux

package postgres

import "syscall"

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist; the
// keepalive probes still apply.
func setUserTimeout(string, string, syscall.RawConn) error { return nil }
