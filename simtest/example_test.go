package simtest_test

import (
	"fmt"
	"time"

	"github.com/simba-go/simba/simtest"
)

// A scripted schedule, the faults a test names instead of drawing them
// from the seed: set it as Config.Script, and every seed runs it (the
// seeds then differ only in the tasks' own choices, Node.Rand). A failing
// seed's report prints its schedule this way.
func Example_script() {
	const ttl = 3 * time.Second
	script := []simtest.Fault{
		simtest.Pause(2, 10*time.Second, 3*ttl), // longer than the TTL: the term ends while n2 is frozen
		simtest.Partition(1, 25*time.Second, 2*ttl),
		simtest.Slow(3, 30*time.Second, 5*time.Second, 100*time.Millisecond, time.Second),
		simtest.HandOff("hits", 40*time.Second), // an operator moves the lease mid-run
		simtest.Crash(2, 45*time.Second),
		simtest.Restart(1, 50*time.Second),
	}
	cfg := simtest.Config{TTL: ttl, Script: script, Seeds: 20}
	_ = cfg // simtest.Run(t, cfg, setup) in a test
	for _, f := range script {
		fmt.Println(f)
	}
	// Output:
	//    10.000s  pause n2 for 9s
	//    25.000s  partition n1 for 6s
	//    30.000s  slow n3 for 5s (requests +100ms, replies +1s)
	//    40.000s  hand-off of hits
	//    45.000s  crash n2
	//    50.000s  restart n1
}
