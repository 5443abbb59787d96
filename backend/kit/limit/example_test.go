package limit_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/simba-go/simba/backend/kit/limit"
)

func Example() {
	lim, err := limit.New(1)
	if err != nil {
		fmt.Println(err)
		return
	}

	// A request waits for a slot within its caller's ctx, and frees it
	// once answered.
	n, err := limit.Do(context.Background(), lim, func() (int, error) {
		fmt.Println("slots in use while the request runs:", lim.InUse())
		return 42, nil
	})
	fmt.Println(n, err)

	// A request whose caller has gone is never sent: nothing to undo.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = lim.Take(ctx)
	fmt.Println(errors.Is(err, limit.ErrNotSent), errors.Is(err, context.Canceled))
	// Output:
	// slots in use while the request runs: 1
	// 42 <nil>
	// true true
}
