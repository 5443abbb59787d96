package backendtest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/backendtest"
	"github.com/simba-go/simba/backend/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// plantedEnv names the planted bug that TestPlanted runs the suite against.
const plantedEnv = "BACKENDTEST_PLANTED_BUG"

// bugs are faults planted in the memory backend, each with the cases that
// must catch it. A suite that cannot fail proves nothing.
var bugs = []struct {
	name   string
	caught []string
}{
	{"none", nil},
	{"stale-release-frees-newer", []string{"ReleaseNeverFreesNewer"}},
	{"ttl-overstated", []string{"ExpiryEndsSession"}},
	{"acquire-ignores-ctx", []string{"AcquireHonoursContext"}},
	{"no-name-check", []string{"InvalidInputs"}},
	{"lost-never-closed", []string{"ReleaseNeverFreesNewer", "CloseEndsSession", "ExpiryEndsSession", "LostOnExpiry"}},
	{"no-hints", []string{"Membership"}},
	{"members-unsorted", []string{"Membership"}},
	{"close-keeps-leases", []string{"CloseEndsSession", "QueueLeaveOnClose"}},
	{"candidates-reversed", []string{"QueueFIFO", "QueueLeaveOnContext", "Candidates"}},
	{"withdrawal-lost", []string{"QueueLeaveOnContext"}},
	{"reacquire-keeps-holding", []string{"QueueReacquire", "TokensIncrease"}},
	{"fence-unchecked", []string{"QueueFencing", "RecordsFenced"}},
	{"held-per-candidacy", []string{"QueueHeldLeases"}},
	{"view-writes", []string{"ViewWritesNothing"}},
	{"view-no-hints", []string{"ViewWatch"}},
}

// memoryFingerprint is what the memory backend stores, for
// backendtest.WithFingerprint: its sessions, every grant, every record,
// and how many sessions were opened.
func memoryFingerprint(t *testing.T, b backend.Backend) string {
	var mb *memory.Backend
	switch b := b.(type) {
	case *memory.Backend:
		mb = b
	case faultyViewer:
		mb = b.Backend
	default:
		t.Fatalf("memoryFingerprint of a %T", b)
	}
	return fmt.Sprintf("sessions %v, opened %d, grants %v, records %v", mb.Sessions(), mb.Stats().Open, mb.History(), mb.Records())
}

// TestRun runs the suite against the memory backend, in virtual time.
func TestRun(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b := memory.New()
		t.Cleanup(func() { b.Close() })
		return b
	}, backendtest.WithSynctest(), backendtest.WithFingerprint(memoryFingerprint))
}

// TestPlantedBugs runs the suite, in a child process, against the memory
// backend with each planted bug and checks that the expected cases fail.
func TestPlantedBugs(t *testing.T) {
	if os.Getenv(plantedEnv) != "" {
		t.Skip("in a child process")
	}
	for _, bug := range bugs {
		t.Run(bug.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestPlanted$", "-test.v")
			cmd.Env = append(os.Environ(), plantedEnv+"="+bug.name)
			out, err := cmd.CombinedOutput()
			var failed []string
			for _, line := range strings.Split(string(out), "\n") {
				if name, ok := strings.CutPrefix(strings.TrimSpace(line), "--- FAIL: TestPlanted/"); ok {
					failed = append(failed, strings.Fields(name)[0])
				}
			}
			switch {
			case bug.caught == nil && err != nil:
				t.Errorf("the suite fails on the unmodified backend: %v\n%s", err, out)
			case bug.caught != nil && err == nil:
				t.Errorf("the suite passes a backend with bug %q\n%s", bug.name, out)
			}
			for _, c := range bug.caught {
				if !slices.Contains(failed, c) {
					t.Errorf("case %s did not catch bug %q; failed cases: %v", c, bug.name, failed)
				}
			}
			if testing.Verbose() {
				t.Logf("bug %q: failed cases %v", bug.name, failed)
			}
		})
	}
}

// TestPlanted runs the suite against the memory backend with the bug named
// in the environment; TestPlantedBugs starts it.
func TestPlanted(t *testing.T) {
	bug := os.Getenv(plantedEnv)
	if bug == "" {
		t.Skip("run by TestPlantedBugs")
	}
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b := memory.New()
		t.Cleanup(func() { b.Close() })
		switch {
		case bug == "none":
			return b
		case strings.HasPrefix(bug, "view-"):
			return faultyViewer{b, bug}
		case bug == "fence-unchecked":
			return fenceless{b}
		}
		return faulty{b, bug}
	}, backendtest.WithSynctest(), backendtest.WithFingerprint(memoryFingerprint))
}

// faultyViewer is the memory backend with a planted bug in its views.
type faultyViewer struct {
	*memory.Backend
	bug string
}

func (f faultyViewer) View(ctx context.Context) (backend.View, error) {
	v, err := f.Backend.View(ctx)
	if err != nil {
		return nil, err
	}
	return &faultyView{View: v, b: f.Backend, bug: f.bug}, nil
}

type faultyView struct {
	backend.View
	b   *memory.Backend
	bug string
}

// Close writes a record through a session of its own, under view-writes.
func (v *faultyView) Close() error {
	if v.bug == "view-writes" {
		s, err := v.b.Open(context.Background(), backend.SessionOptions{TTL: time.Second})
		if err != nil {
			return err
		}
		defer s.Close(context.Background())
		if _, err := s.(backend.Records).PutRecord(context.Background(), "viewed", []byte("x"), backend.Condition{}); err != nil {
			return err
		}
	}
	return v.View.Close()
}

// WatchRecords never hints, under view-no-hints.
func (v *faultyView) WatchRecords(ctx context.Context, prefix string) (<-chan struct{}, error) {
	ch, err := v.View.WatchRecords(ctx, prefix)
	if err != nil || v.bug != "view-no-hints" {
		return ch, err
	}
	silent := make(chan struct{})
	go func() {
		for range ch {
		}
		close(silent)
	}()
	return silent, nil
}

// faulty wraps a backend with a planted bug.
type faulty struct {
	backend.Backend
	bug string
}

func (f faulty) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	s, err := f.Backend.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	return &faultySession{Session: s, bug: f.bug, current: make(map[string]backend.Lease), held: make(map[string]*faultyLease)}, nil
}

type faultySession struct {
	backend.Session
	bug string

	mu      sync.Mutex
	current map[string]backend.Lease // latest holding by name
	held    map[string]*faultyLease  // holdings not released, by name
}

// Candidates lists the queue newest first, under candidates-reversed.
func (s *faultySession) Candidates(ctx context.Context, name string) ([]string, error) {
	ids, err := s.Session.(backend.CandidateLister).Candidates(ctx, name)
	if s.bug == "candidates-reversed" {
		slices.Reverse(ids)
	}
	return ids, err
}

// HeldLeases lists a name once per candidacy, under held-per-candidacy.
func (s *faultySession) HeldLeases(ctx context.Context, prefix string) ([]string, error) {
	names, err := s.Session.(backend.LeaseLister).HeldLeases(ctx, prefix)
	if err != nil || s.bug != "held-per-candidacy" {
		return names, err
	}
	var out []string
	for _, name := range names {
		ids, err := s.Candidates(ctx, name)
		if err != nil {
			return nil, err
		}
		for range ids {
			out = append(out, name)
		}
	}
	return out, nil
}

func (s *faultySession) TTL() time.Duration {
	if s.bug == "ttl-overstated" {
		return 2 * s.Session.TTL()
	}
	return s.Session.TTL()
}

func (s *faultySession) KeepAlive(ctx context.Context) (time.Duration, error) {
	ttl, err := s.Session.KeepAlive(ctx)
	if s.bug == "ttl-overstated" {
		ttl *= 2
	}
	return ttl, err
}

func (s *faultySession) Acquire(ctx context.Context, name string) (backend.Lease, error) {
	switch s.bug {
	case "acquire-ignores-ctx": // waits up to 1.5 TTL whatever the ctx says
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.Session.TTL()*3/2)
		defer cancel()
		ctx = c
	case "reacquire-keeps-holding": // a holding not released is returned again
		s.mu.Lock()
		l := s.held[name]
		s.mu.Unlock()
		if l != nil && !isClosed(l.Lost()) {
			return l, nil
		}
	case "withdrawal-lost": // the candidacy stays queued after ctx ends
		return s.acquireDetached(ctx, name)
	}
	l, err := s.Session.Acquire(ctx, name)
	if err != nil && s.bug == "no-name-check" && ctx.Err() == nil { // take another name instead
		l, err = s.Session.Acquire(ctx, fmt.Sprintf("n%.60x", name))
	}
	if err != nil {
		return nil, err
	}
	fl := &faultyLease{Lease: l, s: s, never: make(chan struct{})}
	s.mu.Lock()
	s.current[name] = l
	s.held[name] = fl
	s.mu.Unlock()
	return fl, nil
}

// acquireDetached runs the Acquire with a ctx that ignores the caller's
// (bounded by twenty TTLs) and returns ctx.Err() when the caller's ends
// first, as if the withdrawal of the candidacy had been lost; a lease got
// after that is released at once.
func (s *faultySession) acquireDetached(ctx context.Context, name string) (backend.Lease, error) {
	inner, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*s.Session.TTL())
	res := make(chan acquireOutcome, 1)
	go func() {
		defer cancel()
		l, err := s.Session.Acquire(inner, name)
		res <- acquireOutcome{l, err}
	}()
	select {
	case r := <-res:
		return r.l, r.err
	case <-ctx.Done():
		go func() {
			if r := <-res; r.l != nil {
				_ = r.l.Release(context.WithoutCancel(ctx))
			}
		}()
		return nil, ctx.Err()
	}
}

type acquireOutcome struct {
	l   backend.Lease
	err error
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (s *faultySession) Members(ctx context.Context, group string) ([]backend.Member, error) {
	ms, err := s.Session.Members(ctx, group)
	if s.bug == "members-unsorted" {
		slices.Reverse(ms)
	}
	return ms, err
}

func (s *faultySession) WatchMembers(ctx context.Context, group string) (<-chan struct{}, error) {
	ch, err := s.Session.WatchMembers(ctx, group)
	if err != nil || s.bug != "no-hints" {
		return ch, err
	}
	silent := make(chan struct{})
	go func() {
		for range ch {
		}
		close(silent)
	}()
	return silent, nil
}

func (s *faultySession) Close(ctx context.Context) error {
	if s.bug == "close-keeps-leases" {
		return nil
	}
	return s.Session.Close(ctx)
}

type faultyLease struct {
	backend.Lease
	s     *faultySession
	never chan struct{} // made in the case's bubble
}

func (l *faultyLease) Lost() <-chan struct{} {
	if l.s.bug == "lost-never-closed" {
		return l.never
	}
	return l.Lease.Lost()
}

func (l *faultyLease) Release(ctx context.Context) error {
	l.s.mu.Lock()
	if l.s.held[l.Name()] == l {
		delete(l.s.held, l.Name())
	}
	l.s.mu.Unlock()
	if l.s.bug == "stale-release-frees-newer" {
		l.s.mu.Lock()
		cur := l.s.current[l.Name()]
		l.s.mu.Unlock()
		return cur.Release(ctx)
	}
	return l.Lease.Release(ctx)
}

// fenceless is the memory backend whose record writes ignore the lease
// fence: the planted bug fence-unchecked.
type fenceless struct{ *memory.Backend }

func (f fenceless) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	s, err := f.Backend.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	return fencelessSession{s.(fullSession)}, nil
}

// fullSession is what a memory session implements.
type fullSession interface {
	backend.Session
	backend.Records
	backend.CandidateLister
	backend.LeaseLister
}

type fencelessSession struct{ fullSession }

func (s fencelessSession) PutRecord(ctx context.Context, key string, value []byte, cond backend.Condition) (backend.Record, error) {
	cond.Lease, cond.Token = "", 0
	return s.fullSession.PutRecord(ctx, key, value, cond)
}

func (s fencelessSession) DeleteRecord(ctx context.Context, key string, cond backend.Condition) error {
	cond.Lease, cond.Token = "", 0
	return s.fullSession.DeleteRecord(ctx, key, cond)
}
