package option

import (
	"errors"
	"testing"
)

type config struct{ n int }

type Option func(*config) error

func withN(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return errors.New("simba/test: n must not be negative")
		}
		c.n = n
		return nil
	}
}

func TestApply(t *testing.T) {
	var cfg config
	if err := Apply("simba/test", &cfg, []Option{withN(1), withN(2)}); err != nil || cfg.n != 2 {
		t.Errorf("Apply: %v, n %d; want nil, 2 (the last one wins)", err, cfg.n)
	}
	if err := Apply("simba/test", &cfg, []Option(nil)); err != nil {
		t.Errorf("Apply of no options: %v", err)
	}
}

func TestApplyStopsAtTheFirstRefusal(t *testing.T) {
	var cfg config
	err := Apply("simba/test", &cfg, []Option{withN(-1), withN(3)})
	if err == nil || err.Error() != "simba/test: n must not be negative" || cfg.n != 0 {
		t.Errorf("Apply: %v, n %d; want the option's own error, and nothing applied after it", err, cfg.n)
	}
	err = Apply("simba/test", &cfg, []Option{withN(4), nil, withN(5)})
	if err == nil || err.Error() != "simba/test: nil option (option 2 of 3)" || cfg.n != 4 {
		t.Errorf("Apply with a nil option: %v, n %d", err, cfg.n)
	}
}
