package etcd

import "fmt"

// nameError is the error for an invalid lease or group name.
func nameError(what, name string) error {
	return fmt.Errorf("simba/etcd: invalid %s name %q: want 1-128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", what, name)
}
