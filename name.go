package simba

import (
	"fmt"

	"github.com/simba-go/simba/backend"
)

// checkName reports whether s is a valid lease name under the one rule of
// [backend.CheckName]; the error says what the name is for (an "election",
// a "group") and matches [backend.ErrInvalidName].
func checkName(what, s string) error {
	if err := backend.CheckName(s); err != nil {
		return fmt.Errorf("simba: %s %w", what, err)
	}
	return nil
}
