//go:build !linux

package transport

import (
	"syscall"
)

// childSysProcAttr puts a child in its own process group. There is no
// parent-death signal outside Linux: a child outlives a sidecar killed with
// SIGKILL (the sidecar is only supported on Linux; this keeps the module
// building elsewhere).
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitExited returns at once: without waitid(WNOWAIT) the process cannot be
// waited for without reaping it, so the group is signalled before the reap
// and a leftover started in the same instant may be missed.
func waitExited(int) {}
