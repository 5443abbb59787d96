package jobs_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/jobs"
)

// Bad input found by review: each is refused with a clear, bounded error
// instead of a panic or an error as large as the input.

func TestPartitionsAtMostMaxPartitions(t *testing.T) {
	for _, n := range []string{"1099511627776", fmt.Sprint(simba.MaxPartitions + 1)} {
		in := "partitioned:\n- group: billing\n  partitions: " + n + "\n  fixedDelay: 1s\n"
		_, err := jobs.Load(strings.NewReader(in), jobs.YAML, noEnv)
		checkProblems(t, err, problem{"line 3", part, "billing", "partitions", jobs.ErrInvalidValue, fmt.Sprintf("at most %d, got %s", simba.MaxPartitions, n)})
	}
	cfg, err := jobs.Load(strings.NewReader(fmt.Sprintf("partitioned:\n- group: billing\n  partitions: %d\n  fixedDelay: 1s\n", simba.MaxPartitions)), jobs.YAML, noEnv)
	if err != nil {
		t.Fatalf("MaxPartitions refused: %v", err)
	}

	cfg.Partitioned[0].Partitions = 1 << 40 // in code
	err = jobs.Validate(nil, cfg)
	var found bool
	for _, fe := range fieldErrors(t, err) {
		found = found || fe.Key == "partitions" && strings.Contains(fe.Error(), "at most")
	}
	if !found {
		t.Errorf("Validate of 1<<40 partitions: %v", err)
	}
}
