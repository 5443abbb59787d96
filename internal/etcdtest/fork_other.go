//go:build !linux

package etcdtest

import "os/exec"

// startProcess starts cmd. Only Linux kills a child when its parent dies:
// elsewhere a server outlives a test process that dies without stopping it.
func startProcess(cmd *exec.Cmd) (reaped func(), _ error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() {}, nil
}
