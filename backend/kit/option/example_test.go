package option_test

import (
	"fmt"

	"github.com/simba-go/simba/backend/kit/option"
)

type config struct{ maxRequests int }

// Option configures a backend.
type Option func(*config) error

// WithMaxRequests bounds the requests in flight; n must be positive.
func WithMaxRequests(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("simba/mybackend: max requests must be positive, got %d", n)
		}
		c.maxRequests = n
		return nil
	}
}

func Example() {
	cfg := config{maxRequests: 64} // the defaults
	err := option.Apply("simba/mybackend", &cfg, []Option{WithMaxRequests(8)})
	fmt.Println(cfg.maxRequests, err)

	err = option.Apply("simba/mybackend", &cfg, []Option{WithMaxRequests(0)})
	fmt.Println(err)

	err = option.Apply("simba/mybackend", &cfg, []Option{nil})
	fmt.Println(err)
	// Output:
	// 8 <nil>
	// simba/mybackend: max requests must be positive, got 0
	// simba/mybackend: nil option (option 1 of 1)
}
