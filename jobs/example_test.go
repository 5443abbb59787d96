package jobs_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/jobs"
)

// A scheduled job declared in YAML and run until its ctx ends: Run starts
// the job and, once ctx ends, stops it and waits until it has handed off
// before it returns; the client closes after.
func Example() {
	b := memory.New()
	defer b.Close()
	client, err := simba.New(b)
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	reg := jobs.NewRegistry()
	var once sync.Once
	reg.ScheduledTerm("report", func(ctx context.Context, term *simba.Term) error {
		once.Do(func() {
			fmt.Println("report runs with token", term.Token())
			cancel() // shut down after the first run
		})
		return nil
	})

	cfg, err := jobs.Load(strings.NewReader(`
scheduled:
  - name: report
    fixedDelay: 1m
`), jobs.YAML)
	if err != nil {
		fmt.Println(err)
		return
	}
	err = jobs.Run(ctx, client, reg, cfg)
	fmt.Println("Run returned:", err)
	_, _, held := b.Holder("report")
	fmt.Println("report's lease held after Run:", held)
	client.Close()
	// Output:
	// report runs with token 1
	// Run returned: <nil>
	// report's lease held after Run: false
}

// Jobs started with Start, stopped from a handler with Stop, and waited for
// with Shutdown, bounded by a ctx.
func ExampleStart() {
	b := memory.New()
	defer b.Close()
	client, err := simba.New(b)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close() // after the jobs: they stop first

	var running *jobs.Jobs
	started := make(chan struct{})
	reg := jobs.NewRegistry()
	reg.ScheduledTerm("report", func(ctx context.Context, term *simba.Term) error {
		<-started
		fmt.Println("report runs with token", term.Token())
		running.Stop() // returns at once; Shutdown(ctx) here would return an error
		return nil
	})
	cfg := jobs.Config{Scheduled: []jobs.ScheduledJob{{Name: "report", FixedDelay: time.Minute}}}
	running, err = jobs.Start(client, reg, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	close(started)

	<-running.Done() // the handler stopped the jobs
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println("Shutdown:", running.Shutdown(ctx))
	_, _, held := b.Holder("report")
	fmt.Println("report's lease held:", held)
	// Output:
	// report runs with token 1
	// Shutdown: <nil>
	// report's lease held: false
}

// A partitioned job whose handler receives each partition's sharding-item
// parameter.
func ExampleRegistry_PartitionedWithParam() {
	b := memory.New()
	defer b.Close()
	client, _ := simba.New(b)
	defer client.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu   sync.Mutex
		seen = map[int]string{}
	)
	reg := jobs.NewRegistry()
	reg.PartitionedWithParam("billing", func(ctx context.Context, term *simba.Term, p jobs.Partition) error {
		mu.Lock()
		defer mu.Unlock()
		seen[p.Index] = fmt.Sprintf("%s %q", term.Name(), p.Param)
		if len(seen) == 3 {
			cancel()
		}
		return nil
	})
	cfg := jobs.Config{Partitioned: []jobs.PartitionedJob{{
		Group:      "billing",
		Partitions: 3,
		FixedRate:  time.Minute,
		Params:     map[int]string{0: "Beijing", 1: "Shanghai"},
	}}}
	if err := jobs.Run(ctx, client, reg, cfg); err != nil {
		fmt.Println(err)
	}
	for p := range 3 {
		fmt.Println(seen[p])
	}
	// Output:
	// billing.0 "Beijing"
	// billing.1 "Shanghai"
	// billing.2 ""
}

// Jobs with a command instead of a handler, run by the function given to
// WithCommandRunner: `simba run --jobs FILE` starts the command there as a
// child process; this one only prints what it is given.
func ExampleWithCommandRunner() {
	b := memory.New()
	defer b.Close()
	client, err := simba.New(b)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	cfg, err := jobs.Load(strings.NewReader(`
scheduled:
  - name: vacuum
    fixedDelay: 1h
    command: [vacuumdb, --all]
partitioned:
  - group: export
    partitions: 2
    fixedRate: 1m
    shardingItemParameters: 0=north,1=south
    command: [export.sh]
`), jobs.YAML)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu   sync.Mutex
		runs []string
	)
	runner := func(ctx context.Context, term *simba.Term, r jobs.CommandRun) error {
		mu.Lock()
		defer mu.Unlock()
		runs = append(runs, fmt.Sprintf("%s: %+v", term.Name(), r))
		if len(runs) == 3 { // vacuum and both partitions of export
			cancel()
		}
		return nil
	}
	err = jobs.Run(ctx, client, nil, cfg, jobs.WithCommandRunner(runner))
	fmt.Println("Run returned:", err)
	sort.Strings(runs)
	for _, r := range runs {
		fmt.Println(r)
	}
	// Output:
	// Run returned: <nil>
	// export.0: {Job:export Command:[export.sh] Partitioned:true Partition:{Index:0 Param:north} ProgressTimeout:0s}
	// export.1: {Job:export Command:[export.sh] Partitioned:true Partition:{Index:1 Param:south} ProgressTimeout:0s}
	// vacuum: {Job:vacuum Command:[vacuumdb --all] Partitioned:false Partition:{Index:0 Param:} ProgressTimeout:0s}
}

// Every problem of a configuration is reported at once, with its line, job
// and key, before anything starts.
func ExampleLoad_errors() {
	_, err := jobs.Load(strings.NewReader(`
scheduled:
  - name: report
    fixedDelay: 1m
    fixedRate: 30s
  - name: report
    fixedDelay: ${REPORT_DELAY_THAT_IS_NOT_SET}
partitioned:
  - group: billing
    partitions: 0
    fixedRate: 1fortnight
`), jobs.YAML)
	fmt.Println(err)
	// Output:
	// simba/jobs: 5 problems in the job configuration:
	// 	line 3: scheduled job "report": fixedDelay/fixedRate/cron: exactly one of fixedDelay, fixedRate and cron must be set: both are set (fixedDelay 1m0s, fixedRate 30s)
	// 	line 6: scheduled job "report": name: duplicate name: "report" is also the name of scheduled job #1, line 3
	// 	line 7: scheduled job "report": fixedDelay: bad placeholder: ${REPORT_DELAY_THAT_IS_NOT_SET} is not set (neither in the environment nor in the properties) and has no default; write ${REPORT_DELAY_THAT_IS_NOT_SET:default} to give one
	// 	line 10: partitioned job "billing": partitions: invalid value: must be positive, got 0
	// 	line 11: partitioned job "billing": fixedRate: invalid duration "1fortnight": unknown unit "fortnight" (units: ns, us, ms, s, m, h, d)
}

// A handler registered in code with no job in the configuration, and a job
// with no handler, are reported by Validate (and by Run, before it starts
// anything).
func ExampleValidate() {
	reg := jobs.NewRegistry()
	reg.Scheduled("cleanup", func(ctx context.Context) {})
	reg.Partitioned("billing", func(ctx context.Context, term *simba.Term, partition int) error { return nil })
	cfg := jobs.Config{
		Scheduled:   []jobs.ScheduledJob{{Name: "clean-up", FixedDelay: time.Hour}},
		Partitioned: []jobs.PartitionedJob{{Group: "billing", Partitions: 4, FixedRate: time.Minute}},
	}
	fmt.Println(jobs.Validate(reg, cfg))
	for _, w := range jobs.Warnings(reg, cfg) {
		fmt.Println("warning:", w)
	}
	// Output:
	// simba/jobs: scheduled job "clean-up": name: no such handler: no handler registered as "clean-up"
	// warning: simba/jobs: handler "cleanup": handler not used by any job: no scheduled job has the name "cleanup" or names it as its handler
}

func ExampleParseDuration() {
	for _, s := range []string{"1m30s", "10s", "500ms", "1d", "5000", "PT1M", "PT0.5S", "P1DT2H"} {
		d, _ := jobs.ParseDuration(s)
		fmt.Printf("%-6s %v\n", s, d)
	}
	_, err := jobs.ParseDuration("P1M")
	fmt.Println(err)
	// Output:
	// 1m30s  1m30s
	// 10s    10s
	// 500ms  500ms
	// 1d     24h0m0s
	// 5000   5s
	// PT1M   1m0s
	// PT0.5S 500ms
	// P1DT2H 26h0m0s
	// simba/jobs: invalid duration "P1M": years, months and weeks have no fixed length: want P[nD][T[nH][nM][n[.f]S]], such as PT1M, PT0.5S or P1DT2H
}

func ExampleExpand() {
	props := map[string]string{
		"app.region": "eu",
		"app.name":   "billing-${app.region}",
	}
	lookup := func(name string) (string, bool) {
		v, ok := props[name]
		return v, ok
	}
	for _, s := range []string{"${app.name}", "${app.zone:${app.region}-1}", `\${app.name}`, "${app.zone}"} {
		v, err := jobs.Expand(s, lookup)
		fmt.Printf("%q %v\n", v, err)
	}
	// Output:
	// "billing-eu" <nil>
	// "eu-1" <nil>
	// "${app.name}" <nil>
	// "" simba/jobs: bad placeholder: ${app.zone} is not set (neither in the environment nor in the properties) and has no default; write ${app.zone:default} to give one
}

func ExampleParseShardingItemParameters() {
	params, err := jobs.ParseShardingItemParameters("0=Beijing, 1=Shanghai, 2=Guangzhou")
	keys := make([]int, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		fmt.Println(k, params[k])
	}
	fmt.Println(err)
	// Output:
	// 0 Beijing
	// 1 Shanghai
	// 2 Guangzhou
	// <nil>
}

// Jobs changed while they run: Update stops and hands off the jobs the new
// configuration removes, starts the ones it adds, and leaves the others
// running; a configuration with problems changes nothing.
func ExampleJobs_Update() {
	b := memory.New()
	defer b.Close()
	client, err := simba.New(b)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	ran := make(chan string, 10)
	reg := jobs.NewRegistry()
	for _, name := range []string{"report", "audit"} {
		reg.ScheduledTerm(name, func(ctx context.Context, term *simba.Term) error {
			ran <- fmt.Sprintf("%s runs with token %d", name, term.Token())
			return nil
		})
	}
	hourly := func(name string) jobs.ScheduledJob { return jobs.ScheduledJob{Name: name, FixedDelay: time.Hour} }
	running, err := jobs.Start(client, reg, jobs.Config{Scheduled: []jobs.ScheduledJob{hourly("report")}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer running.Close()
	fmt.Println(<-ran)

	fmt.Println("Update:", running.Update(jobs.Config{Scheduled: []jobs.ScheduledJob{hourly("audit")}}))
	fmt.Println(<-ran)
	_, _, held := b.Holder("report")
	fmt.Println("report's lease held:", held)

	bad := hourly("report")
	bad.Overlap, bad.MaxConcurrent = simba.OverlapSkip, 2
	fmt.Println("Update:", running.Update(jobs.Config{Scheduled: []jobs.ScheduledJob{bad}}))
	_, token, _ := b.Holder("audit")
	fmt.Println("audit still holds its term:", token)
	// Output:
	// report runs with token 1
	// Update: <nil>
	// audit runs with token 2
	// report's lease held: false
	// Update: simba/jobs: scheduled job "report": maxConcurrent: invalid value: 2 runs at once needs overlap: allow, not skip
	// audit still holds its term: 2
}
