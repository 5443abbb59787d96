package jobs_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/jobstest"
	"github.com/simba-go/simba/jobs"
)

// tokenLog records, by lease, the tokens of the terms the runs ran in, in
// the order of the runs.
type tokenLog struct {
	mu     sync.Mutex
	tokens map[string][]uint64
}

func (l *tokenLog) run(_ context.Context, term *simba.Term) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tokens == nil {
		l.tokens = map[string][]uint64{}
	}
	l.tokens[term.Name()] = append(l.tokens[term.Name()], term.Token())
	return nil
}

// since returns the tokens of lease's runs after the first n.
func (l *tokenLog) since(lease string, n int) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]uint64(nil), l.tokens[lease][min(n, len(l.tokens[lease])):]...)
}

func (l *tokenLog) count(lease string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.tokens[lease])
}

// updateRegistry has the scheduled handlers report, audit and digest and
// the partitioned billing, all recording to l.
func updateRegistry(l *tokenLog) *jobs.Registry {
	reg := jobs.NewRegistry()
	for _, name := range []string{"report", "audit", "digest"} {
		reg.ScheduledTerm(name, l.run)
	}
	reg.Partitioned("billing", func(ctx context.Context, term *simba.Term, _ int) error { return l.run(ctx, term) })
	return reg
}

const tick = 100 * time.Millisecond

// updateConfig is report, audit and billing of two partitions.
func updateConfig() jobs.Config {
	return jobs.Config{
		Scheduled: []jobs.ScheduledJob{
			{Name: "report", FixedDelay: tick},
			{Name: "audit", FixedDelay: tick},
		},
		Partitioned: []jobs.PartitionedJob{{Group: "billing", Partitions: 2, FixedDelay: tick}},
	}
}

// Update removes audit (another node takes it over at once), changes
// billing (restarted: new terms), adds digest, and leaves report running
// in the term it had.
func TestUpdateAddsChangesAndRemoves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		a := jobstest.NewClient(t, b.Node("a"), simba.WithTTL(jobstest.TTL))
		var runs tokenLog
		var log logBuffer
		j, err := jobs.Start(a, updateRegistry(&runs), updateConfig(), jobstest.NoEnv, jobs.WithLogger(log.logger()))
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		time.Sleep(time.Second)
		// c stands by for audit.
		c := jobstest.NewClient(t, b.Node("c"), simba.WithTTL(jobstest.TTL))
		jc, err := jobs.Start(c, updateRegistry(new(tokenLog)), jobs.Config{Scheduled: []jobs.ScheduledJob{{Name: "audit", FixedDelay: tick}}}, jobstest.NoEnv)
		if err != nil {
			t.Fatal(err)
		}
		defer jc.Close()
		time.Sleep(time.Second)
		for _, lease := range []string{"report", "audit", "billing.0", "billing.1"} {
			if holderNode(b, lease) != "a" {
				t.Fatalf("%s held by %q, want a", lease, holderNode(b, lease))
			}
		}
		_, reportToken, _ := b.Holder("report")
		_, billingToken, _ := b.Holder("billing.0")
		reportRuns := runs.count("report")

		cfg := updateConfig()
		cfg.Scheduled = []jobs.ScheduledJob{cfg.Scheduled[0], {Name: "digest", FixedRate: tick}}
		cfg.Partitioned[0].FixedDelay = 2 * tick
		start := time.Now()
		if err := j.Update(cfg); err != nil {
			t.Fatalf("Update: %v", err)
		}
		took := time.Since(start)
		t.Logf("Update took %v", took)
		// audit is released when Update returns: c takes it at once.
		if s, _, ok := b.Holder("audit"); ok && strings.HasPrefix(s, "a-") {
			t.Errorf("audit still held by a when Update returned")
		}
		time.Sleep(jobstest.TTL / 3)
		if got := holderNode(b, "audit"); got != "c" {
			t.Errorf("audit held by %q %v after the Update, want c", got, jobstest.TTL/3)
		}
		time.Sleep(time.Second)
		// report went on in the same term, running all along.
		if _, tok, _ := b.Holder("report"); tok != reportToken {
			t.Errorf("report's token went from %d to %d: an unchanged job was restarted", reportToken, tok)
		}
		after := runs.since("report", reportRuns)
		if len(after) < 5 {
			t.Errorf("report ran %d times in the %v after the Update began, want it running all along", len(after), took+time.Second+jobstest.TTL/3)
		}
		for _, tok := range after {
			if tok != reportToken {
				t.Errorf("a run of report in term %d, want %d", tok, reportToken)
			}
		}
		// billing was restarted: new terms.
		for _, lease := range []string{"billing.0", "billing.1"} {
			_, tok, ok := b.Holder(lease)
			if !ok || holderNode(b, lease) != "a" || tok <= billingToken {
				t.Errorf("%s: held %v by %q with token %d, want a new term of a's (token above %d)", lease, ok, holderNode(b, lease), tok, billingToken)
			}
		}
		if runs.count("digest") == 0 {
			t.Error("digest, added, never ran")
		}
		got := log.String()
		if want := `msg="jobs updated" added=[digest] changed=[billing] removed=[audit] unchanged=1 failed_to_start=0`; !strings.Contains(got, want) {
			t.Errorf("log lacks %s:\n%s", want, got)
		}
	})
}

// An Update with problems changes nothing and reports them as Start does.
func TestUpdateRefusesABadConfigWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		client := jobstest.NewClient(t, b, simba.WithTTL(jobstest.TTL))
		var runs tokenLog
		var log logBuffer
		reg := updateRegistry(&runs)
		j, err := jobs.Start(client, reg, updateConfig(), jobstest.NoEnv, jobs.WithLogger(log.logger()))
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		time.Sleep(time.Second)
		tokens := map[string]uint64{}
		for _, lease := range []string{"report", "audit", "billing.0", "billing.1"} {
			_, tokens[lease], _ = b.Holder(lease)
		}
		grants := len(b.History())

		bad := updateConfig()
		bad.Scheduled[0].FixedDelay = 0                                                             // no timing
		bad.Scheduled = append(bad.Scheduled, jobs.ScheduledJob{Name: "nightly", FixedDelay: tick}) // no handler
		bad.Partitioned[0].MaxConcurrent = 3                                                        // without overlap allow
		err = j.Update(bad)
		_, startErr := jobs.Start(client, reg, bad, jobstest.NoEnv)
		if err == nil || startErr == nil || err.Error() != startErr.Error() {
			t.Fatalf("Update: %v\nwant Start's error: %v", err, startErr)
		}
		checkProblems(t, err,
			problem{"", sched, "report", "fixedDelay/fixedRate/cron", jobs.ErrTiming, "neither"},
			problem{"", part, "billing", "maxConcurrent", jobs.ErrInvalidValue, "needs overlap: allow"},
			problem{"", sched, "nightly", "name", jobs.ErrNoHandler, `no handler registered as "nightly"`},
		)
		time.Sleep(time.Second)
		for lease, tok := range tokens {
			if _, now, _ := b.Holder(lease); now != tok {
				t.Errorf("%s: token %d, then %d after a refused Update", lease, tok, now)
			}
		}
		if n := len(b.History()); n != grants {
			t.Errorf("%d grants after a refused Update, want %d", n, grants)
		}
		if strings.Contains(log.String(), "jobs updated") {
			t.Errorf("a refused Update logged a change:\n%s", log.String())
		}
	})
}

// After Stop, Update changes nothing and says so; Update and Shutdown may
// race.
func TestUpdateAfterStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		client := jobstest.NewClient(t, b, simba.WithTTL(jobstest.TTL))
		reg := updateRegistry(new(tokenLog))
		j, err := jobs.Start(client, reg, updateConfig(), jobstest.NoEnv)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		more := updateConfig()
		more.Scheduled = append(more.Scheduled, jobs.ScheduledJob{Name: "digest", FixedDelay: tick})
		updated := make(chan error, 1)
		go func() { updated <- j.Update(more) }()
		if err := j.Shutdown(t.Context()); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if err := <-updated; err != nil && !errors.Is(err, jobs.ErrStopped) {
			t.Errorf("Update racing Shutdown: %v, want nil or ErrStopped", err)
		}
		for _, lease := range []string{"report", "audit", "digest", "billing.0", "billing.1"} {
			if s, _, ok := b.Holder(lease); ok {
				t.Errorf("%s still held by %s after Shutdown", lease, s)
			}
		}
		err = j.Update(more)
		if !errors.Is(err, jobs.ErrStopped) || !strings.HasPrefix(err.Error(), "simba/jobs: update: ") {
			t.Errorf("Update after Shutdown: %v, want ErrStopped", err)
		}
		time.Sleep(time.Second)
		for _, lease := range []string{"report", "digest"} {
			if s, _, ok := b.Holder(lease); ok {
				t.Errorf("%s held by %s after an Update after Shutdown", lease, s)
			}
		}
	})
}

// Disabling scheduling stops every job, enabling it starts them again; a
// job that fails to start is named, the others start, and the next Update
// tries it again.
func TestUpdateSwitchAndAJobThatFailsToStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		client := jobstest.NewClient(t, b, simba.WithTTL(jobstest.TTL))
		var runs tokenLog
		j, err := jobs.Start(client, updateRegistry(&runs), updateConfig(), jobstest.NoEnv)
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		time.Sleep(time.Second)
		off := updateConfig()
		off.Disabled = true
		if err := j.Update(off); err != nil {
			t.Fatal(err)
		}
		for _, lease := range []string{"report", "audit", "billing.0"} {
			if s, _, ok := b.Holder(lease); ok {
				t.Errorf("%s held by %s once scheduling was disabled", lease, s)
			}
		}
		// digest is taken by other code on the client: it cannot start.
		other, err := client.Election("digest").RunWhileLeader(noopTerm)
		if err != nil {
			t.Fatal(err)
		}
		on := updateConfig()
		on.Scheduled = append(on.Scheduled, jobs.ScheduledJob{Name: "digest", FixedDelay: tick})
		err = j.Update(on)
		if !errors.Is(err, simba.ErrAlreadyStarted) || !strings.Contains(err.Error(), `start scheduled job "digest"`) {
			t.Errorf("Update: %v, want digest's ErrAlreadyStarted", err)
		}
		time.Sleep(time.Second)
		for _, lease := range []string{"report", "audit", "billing.0", "billing.1"} {
			if holderNode(b, lease) == "" {
				t.Errorf("%s not held once scheduling was enabled again", lease)
			}
		}
		other.Close()
		if err := j.Update(on); err != nil {
			t.Fatalf("Update once digest is free: %v", err)
		}
		n := runs.count("digest")
		time.Sleep(time.Second)
		if runs.count("digest") == n {
			t.Error("digest does not run after the second Update")
		}
	})
}
