package etcd

import (
	"fmt"

	"github.com/simba-go/simba/backend"
)

// checkName is [backend.CheckName] with the package prefix and what the
// name is for ("lease", "group").
func checkName(what, name string) error {
	if err := backend.CheckName(name); err != nil {
		return fmt.Errorf("simba/etcd: %s %w", what, err)
	}
	return nil
}
