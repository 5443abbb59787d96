//go:build !linux

package proc

import "os/exec"

// StartTied starts cmd. Only Linux kills a child when its parent dies:
// elsewhere a process started with it outlives a parent that dies without
// stopping it. The returned function is to be called once cmd has been
// reaped.
func StartTied(cmd *exec.Cmd) (reaped func(), _ error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() {}, nil
}
