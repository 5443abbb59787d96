package fence_test

import (
	"errors"
	"fmt"

	"github.com/simba-go/simba/fence"
)

// Every kind of fence rejects a stale token with a *StaleError, which
// matches ErrStale and tells the highest token recorded.
func ExampleStaleError() {
	var err error = &fence.StaleError{Resource: "ingest", Token: 7, Highest: 8}
	fmt.Println(errors.Is(err, fence.ErrStale))
	var se *fence.StaleError
	if errors.As(err, &se) {
		fmt.Println(se.Highest)
	}
	fmt.Println(err)
	// Output:
	// true
	// 8
	// simba/fence: stale token 7 for resource "ingest": token 8 was recorded
}
