//go:build linux

package transport

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// childSysProcAttr puts a child in its own process group (terminal signals
// reach only the sidecar) and has the kernel kill it when the thread that
// forked it exits (see Spawner).
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// waitExited blocks until the process pid has exited, leaving it a zombie
// (WNOWAIT): until it is reaped its pid, which is its process group id,
// cannot be reused, so signalling the group afterwards is safe.
func waitExited(pid int) {
	for {
		err := unix.Waitid(unix.P_PID, pid, nil, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return // exited, or cannot wait at all: cmd.Wait reports that
		}
	}
}
