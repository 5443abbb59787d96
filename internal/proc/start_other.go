//go:build !unix

package proc

import (
	"fmt"
	"runtime"
	"syscall"
)

// guarantee is what this platform promises; see [Guarantee].
var guarantee = "simba run is not supported on " + runtime.GOOS + "."

// ShimMain does nothing on this platform: there is no shim. It is safe to
// call first in main everywhere.
func ShimMain() {}

type childSys struct{}

// Start returns an error: simba run is not supported on this platform.
func Start(s Spec) (*Child, error) {
	return nil, fmt.Errorf("simba run: not supported on %s", runtime.GOOS)
}

func (c *Child) reaped() {}

// Kill does nothing on this platform (no child can be started).
func (c *Child) Kill() {}

func (c *Child) killGroup(syscall.Signal) {}

func signalName(s syscall.Signal) string { return s.String() }
