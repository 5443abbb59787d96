package kubetest

import "syscall"

// sysProcAttr has the server killed if the test process dies without
// stopping it (a panic, go test's timeout), so that it does not linger on
// its port.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
