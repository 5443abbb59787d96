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
	{"close-keeps-leases", []string{"CloseEndsSession"}},
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
	return &faultySession{Session: s, bug: f.bug, current: make(map[string]backend.Lease)}, nil
}

type faultySession struct {
	backend.Session
	bug string

	mu      sync.Mutex
	current map[string]backend.Lease // latest holding by name
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
	}
	l, err := s.Session.Acquire(ctx, name)
	if err != nil && s.bug == "no-name-check" && ctx.Err() == nil { // take another name instead
		l, err = s.Session.Acquire(ctx, fmt.Sprintf("n%.60x", name))
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.current[name] = l
	s.mu.Unlock()
	return &faultyLease{Lease: l, s: s, never: make(chan struct{})}, nil
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
	if l.s.bug == "stale-release-frees-newer" {
		l.s.mu.Lock()
		cur := l.s.current[l.Name()]
		l.s.mu.Unlock()
		return cur.Release(ctx)
	}
	return l.Lease.Release(ctx)
}
