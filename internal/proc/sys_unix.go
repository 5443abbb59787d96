//go:build unix

package proc

import (
	"syscall"

	"golang.org/x/sys/unix"
)

func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return s.String()
}

func (c *Child) killGroup(sig syscall.Signal) {
	_ = syscall.Kill(-c.pgid, sig) // ESRCH: the group is gone
}
