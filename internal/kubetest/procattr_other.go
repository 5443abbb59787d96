//go:build !linux

package kubetest

import "syscall"

// sysProcAttr: only Linux kills a child when its parent dies.
func sysProcAttr() *syscall.SysProcAttr { return nil }
