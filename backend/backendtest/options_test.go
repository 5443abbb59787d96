package backendtest

import (
	"testing"
	"time"
)

// TestOptionsRefuseBadValues: an option given a value it cannot take, or a
// nil option, is an error of the package, which Run fails the test with.
func TestOptionsRefuseBadValues(t *testing.T) {
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{nil, "simba/backendtest: nil Option"},
		{WithTTL(0), "simba/backendtest: WithTTL(0s): the TTL must be positive"},
		{WithTTL(-time.Second), "simba/backendtest: WithTTL(-1s): the TTL must be positive"},
		{WithServerClockRate(-0.01), "simba/backendtest: WithServerClockRate(-0.01): want a rate in [0, 0.05]"},
		{WithServerClockRate(0.06), "simba/backendtest: WithServerClockRate(0.06): want a rate in [0, 0.05]"},
		{WithMalformed(Malformer{}), "simba/backendtest: WithMalformed: the Malformer has no SpoilRecord"},
		{WithFingerprint(nil), "simba/backendtest: WithFingerprint: nil function"},
	} {
		if _, err := configure([]Option{WithSynctest(), tc.opt}); err == nil || err.Error() != tc.want {
			t.Errorf("configure: %v, want %q", err, tc.want)
		}
	}
	cfg, err := configure([]Option{WithTTL(2 * time.Second), WithServerClockRate(0.01), WithSynctest()})
	if err != nil || cfg.ttl != 2*time.Second || cfg.clockRate != 0.01 || !cfg.synctest {
		t.Errorf("configure with good options: %+v, %v", cfg, err)
	}
}
