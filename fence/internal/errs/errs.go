// Package errs makes the errors the fence packages share.
package errs

import (
	"fmt"

	"github.com/simba-go/simba/fence"
)

// Invalid returns an error matching [fence.ErrInvalidArgument] with detail.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", fence.ErrInvalidArgument, fmt.Sprintf(format, args...))
}
