//go:build unix

package etcdtest

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// lockFile takes an exclusive flock(2) on the file at path (created if
// missing), waiting up to timeout for another process to release it, and
// returns the function that releases it.
func lockFile(path string, timeout time.Duration) (unlock func(), _ error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("waited %v for another process's build (lock %s)", timeout, path)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
