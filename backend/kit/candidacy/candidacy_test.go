package candidacy_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/candidacy"
	"github.com/simba-go/simba/backend/kit/wake"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is a fake backend's store of queues, shared by its sessions.
type server struct {
	mu     sync.Mutex
	last   map[string]uint64
	queues map[string][]entry
	subs   wake.Registry // topic: the lease name

	aheadErr func(w *candidacy.Waiter) error // injected before a read of Ahead's
	released []string                        // the name of each release, with its records' keys
	wg       sync.WaitGroup                  // the sessions' goroutines
}

type entry struct {
	token uint64
	sid   string
}

func newServer() *server {
	return &server{last: map[string]uint64{}, queues: map[string][]entry{}}
}

// remove deletes the candidacies of sid for name (token 0: all of them)
// and tells the watchers; it reports whether there were any.
func (v *server) remove(name, sid string, token uint64) bool {
	v.mu.Lock()
	q, removed := v.queues[name][:0:0], false
	for _, e := range v.queues[name] {
		if e.sid == sid && (token == 0 || e.token == token) {
			removed = true
			continue
		}
		q = append(q, e)
	}
	v.queues[name] = q
	v.mu.Unlock()
	if removed {
		wake.Call(v.subs.Collect([]string{name}, nil))
	}
	return removed
}

func (v *server) queue(name string) []entry {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]entry(nil), v.queues[name]...)
}

// session is a fake backend session on v: its Queue is itself.
type session struct {
	*candidacy.Session
	v   *server
	sid string
}

func (v *server) open(t *testing.T, sid string) *session {
	s := &session{v: v, sid: sid}
	s.Session = candidacy.New(t.Context(), candidacy.Config{Prefix: "simba/fake", ID: sid, Queue: s, WaitGroup: &v.wg})
	t.Cleanup(func() { s.End() })
	return s
}

// bubble runs f in a synctest bubble, on a fake server, and waits for
// the goroutines of its sessions.
func bubble(t *testing.T, f func(t *testing.T, v *server)) {
	synctest.Test(t, func(t *testing.T) {
		v := newServer()
		defer v.wg.Wait()
		f(t, v)
	})
}

// acquire is s.Acquire(name), which must succeed.
func acquire(t *testing.T, s *session, name string) backend.Lease {
	t.Helper()
	l, err := s.Acquire(t.Context(), name)
	if err != nil {
		t.Fatalf("Acquire(%q) by %s: %v", name, s.sid, err)
	}
	return l
}

func (s *session) Watch(name string, f func()) func() { return s.v.subs.Subscribe(name, f) }

func (s *session) Register(ctx context.Context, name string) (uint64, error) {
	if err := s.OverErr("register"); err != nil {
		return 0, err
	}
	v := s.v
	v.mu.Lock()
	q := v.queues[name][:0:0]
	for _, e := range v.queues[name] {
		if e.sid != s.sid {
			q = append(q, e)
		}
	}
	v.last[name]++
	token := v.last[name]
	v.queues[name] = append(q, entry{token, s.sid})
	v.mu.Unlock()
	wake.Call(v.subs.Collect([]string{name}, nil))
	return token, nil
}

func (s *session) Ahead(ctx context.Context, w *candidacy.Waiter) (time.Duration, error) {
	if f := s.v.aheadErr; f != nil {
		if err := f(w); err != nil {
			return 0, err
		}
	}
	q := s.v.queue(w.Name)
	for i, e := range q {
		if e == (entry{w.Token, s.sid}) {
			if i == 0 {
				return -1, nil
			}
			return time.Hour, nil // woken by Watch
		}
	}
	return 0, candidacy.ErrGone
}

func (s *session) Withdraw(name string, token uint64) { s.v.remove(name, s.sid, token) }

// Changed is the monitor's read: the holdings whose candidacy is gone
// are lost.
func (s *session) Changed(name string) {
	q := s.v.queue(name)
	s.LoseIf(func(h *candidacy.Holding) bool {
		if h.Name() != name {
			return false
		}
		for _, e := range q {
			if e == (entry{h.Token(), s.sid}) {
				return false
			}
		}
		return true
	})
}

func (s *session) Release(ctx context.Context, h *candidacy.Holding, op string, records []backend.Record) (bool, error) {
	if !s.v.remove(h.Name(), s.sid, h.Token()) {
		return false, nil
	}
	s.v.mu.Lock()
	r := h.Name()
	for _, rec := range records {
		r += " " + rec.Key
	}
	s.v.released = append(s.v.released, r)
	s.v.mu.Unlock()
	return true, nil
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

type acquired struct {
	l   backend.Lease
	err error
}

func acquireAsync(ctx context.Context, s *session, name string) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := s.Acquire(ctx, name)
		ch <- acquired{l, err}
	}()
	return ch
}

// TestHandOff: a second session's Acquire waits while the first holds the
// lease, and holds it, with a larger token, once the first releases; the
// released holding is never lost.
func TestHandOff(t *testing.T) {
	bubble(t, func(t *testing.T, v *server) {
		a, b := v.open(t, "a"), v.open(t, "b")
		la, err := a.Acquire(t.Context(), "x")
		if err != nil || la.Token() != 1 || la.Name() != "x" {
			t.Fatalf("Acquire by a: %v, %v", la, err)
		}
		ch := acquireAsync(t.Context(), b, "x")
		synctest.Wait()
		select {
		case r := <-ch:
			t.Fatalf("b's Acquire returned while a held the lease: %v, %v", r.l, r.err)
		default:
		}
		if err := la.(backend.RecordReleaser).ReleaseWithRecords(t.Context(), []backend.Record{{Key: "status/x", Value: []byte("done")}}); err != nil {
			t.Fatalf("a's release: %v", err)
		}
		r := <-ch
		if r.err != nil || r.l.Token() != 2 {
			t.Fatalf("b's Acquire after the release: %v, %v; want token 2", r.l, r.err)
		}
		synctest.Wait()
		if closed(la.Lost()) {
			t.Error("a's released holding was lost")
		}
		if len(v.released) != 1 || v.released[0] != "x status/x" {
			t.Errorf("released %q, want x with its record", v.released)
		}
		if err := la.Release(t.Context()); !errors.Is(err, backend.ErrNotHeld) {
			t.Errorf("a second Release: %v, want ErrNotHeld", err)
		}
		if hs := a.Holdings(); len(hs) != 0 {
			t.Errorf("a still counts %d holdings after its release", len(hs))
		}
	})
}

// TestGiveUpWithdraws: an Acquire whose ctx ends while it waits returns
// an error wrapping the ctx's, and leaves no candidacy behind.
func TestGiveUpWithdraws(t *testing.T) {
	bubble(t, func(t *testing.T, v *server) {
		a, b := v.open(t, "a"), v.open(t, "b")
		acquire(t, a, "x")
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err := b.Acquire(ctx, "x")
		if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), `simba/fake: acquire "x": `) {
			t.Fatalf("Acquire whose ctx ended: %v, want an error wrapping DeadlineExceeded", err)
		}
		if q := v.queue("x"); len(q) != 1 || q[0].sid != "a" {
			t.Errorf("queue after b gave up: %v, want only a's candidacy", q)
		}
	})
}

// TestReacquire: a second Acquire of a name the session holds replaces
// the holding, which is lost.
func TestReacquire(t *testing.T) {
	bubble(t, func(t *testing.T, v *server) {
		a := v.open(t, "a")
		l1 := acquire(t, a, "x")
		l2, err := a.Acquire(t.Context(), "x")
		if err != nil || l2.Token() <= l1.Token() {
			t.Fatalf("re-Acquire: %v, %v; want a token above %d", l2, err, l1.Token())
		}
		if !closed(l1.Lost()) {
			t.Error("the replaced holding's Lost is open")
		}
		h := l2.(*candidacy.Holding)
		if closed(l2.Lost()) || !h.Held() {
			t.Error("the new holding is not held")
		}
		a.Lose(h)
		if !closed(l2.Lost()) || h.Held() || len(a.Holdings()) != 0 {
			t.Error("Lose left the holding held")
		}
	})
}

// TestLossFoundByTheBackend: a candidacy deleted on the server is lost
// once the backend reads the queue (Changed), and OnLost runs; its
// release then fails with ErrNotHeld.
func TestLossFoundByTheBackend(t *testing.T) {
	bubble(t, func(t *testing.T, v *server) {
		a := v.open(t, "a")
		l := acquire(t, a, "x")
		ran := false
		l.(backend.LostNotifier).OnLost(func() { ran = true })
		v.remove("x", "a", l.Token()) // an operator deletes it
		if !closed(l.Lost()) || !ran {
			t.Fatalf("after its candidacy was deleted: Lost closed %v, OnLost ran %v", closed(l.Lost()), ran)
		}
		if err := l.Release(t.Context()); !errors.Is(err, backend.ErrNotHeld) {
			t.Errorf("Release of a lost holding: %v, want ErrNotHeld", err)
		}
	})
}

// TestEnd: the end of the session loses its holdings, closes Done, and
// fails later calls.
func TestEnd(t *testing.T) {
	bubble(t, func(t *testing.T, v *server) {
		a := v.open(t, "a")
		l := acquire(t, a, "x")
		if !a.End() || a.End() {
			t.Error("End: want true once, then false")
		}
		if !closed(l.Lost()) || !closed(a.Done()) || a.Context().Err() == nil || !a.Over() {
			t.Error("after End: a holding, Done or Context still open")
		}
		if _, err := a.Acquire(t.Context(), "y"); !errors.Is(err, backend.ErrSessionDone) {
			t.Errorf("Acquire after End: %v, want ErrSessionDone", err)
		}
		if err := l.Release(t.Context()); !errors.Is(err, backend.ErrNotHeld) || !strings.Contains(err.Error(), "session is over") {
			t.Errorf("Release after End: %v, want ErrNotHeld saying the session is over", err)
		}
	})
}

// TestEndWhileWaiting: a waiting Acquire returns ErrSessionDone when its
// session ends.
func TestEndWhileWaiting(t *testing.T) {
	bubble(t, func(t *testing.T, v *server) {
		a, b := v.open(t, "a"), v.open(t, "b")
		acquire(t, a, "x")
		ch := acquireAsync(t.Context(), b, "x")
		synctest.Wait()
		b.End()
		if r := <-ch; !errors.Is(r.err, backend.ErrSessionDone) {
			t.Fatalf("waiting Acquire when its session ended: %v, want ErrSessionDone", r.err)
		}
	})
}

// TestBadInput: an invalid name is refused before anything is sent, and
// the records of a release are checked.
func TestBadInput(t *testing.T) {
	bubble(t, func(t *testing.T, v *server) {
		a := v.open(t, "a")
		for _, name := range []string{"", "a/b", ".x", strings.Repeat("x", backend.MaxNameLen+1)} {
			if _, err := a.Acquire(t.Context(), name); !errors.Is(err, backend.ErrInvalidName) || !strings.HasPrefix(err.Error(), "simba/fake: lease name: ") {
				t.Errorf("Acquire(%q): %v, want an invalid-name error", name, err)
			}
		}
		if len(v.last) != 0 {
			t.Errorf("invalid names registered candidacies: %v", v.last)
		}
		l := acquire(t, a, "x")
		if err := l.(backend.RecordReleaser).ReleaseWithRecords(t.Context(), []backend.Record{{Key: "//"}}); err == nil || errors.Is(err, backend.ErrNotHeld) {
			t.Errorf("a release with an invalid record: %v, want the record's error", err)
		}
		if !l.(*candidacy.Holding).Held() {
			t.Error("a refused release ended the holding")
		}
		_, err := candidacy.New(t.Context(), candidacy.Config{Prefix: "simba/none"}).Acquire(t.Context(), "x")
		if err == nil || !strings.Contains(err.Error(), "no Queue") {
			t.Errorf("Acquire without a Queue: %v", err)
		}
	})
}

// TestAheadErrors: a transient error is read again with backoff, a Final
// one ends the wait with itself, ErrGone with an error that says so.
func TestAheadErrors(t *testing.T) {
	bubble(t, func(t *testing.T, v *server) {
		a := v.open(t, "a")
		fails := 0
		v.aheadErr = func(*candidacy.Waiter) error {
			if fails < 3 {
				fails++
				return errors.New("the server is restarting")
			}
			return nil
		}
		start := time.Now()
		if _, err := a.Acquire(t.Context(), "x"); err != nil || fails != 3 {
			t.Fatalf("Acquire after 3 transient errors: %v (%d errors)", err, fails)
		}
		if time.Since(start) == 0 {
			t.Error("transient errors were read again without backoff")
		}

		bad := errors.New("simba/fake: the queue does not decode")
		v.aheadErr = func(*candidacy.Waiter) error { return candidacy.Final(bad) }
		if _, err := a.Acquire(t.Context(), "y"); err != bad {
			t.Errorf("Acquire with a Final error: %v, want it as it is", err)
		}
		if fe := candidacy.Final(bad); !errors.Is(fe, bad) || fe.Error() != bad.Error() {
			t.Errorf("Final(bad) = %v, want an error that is bad and says so", fe)
		}
		if candidacy.Final(nil) != nil {
			t.Error("Final(nil) is not nil")
		}

		v.aheadErr = func(*candidacy.Waiter) error { return candidacy.ErrGone }
		if _, err := a.Acquire(t.Context(), "z"); err == nil || !strings.Contains(err.Error(), "deleted while it waited") {
			t.Errorf("Acquire whose candidacy is gone: %v", err)
		}
	})
}

// TestLossDuringRelease: the release's own deletion, seen by the watch
// before the release returns, is no loss.
func TestLossDuringRelease(t *testing.T) {
	bubble(t, func(t *testing.T, v *server) {
		a := v.open(t, "a")
		l := acquire(t, a, "x")
		// The fake's Release deletes the candidacy, which calls Changed
		// (through Watch) before Release returns: the holding is found
		// gone while its release is in flight.
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if closed(l.Lost()) {
			t.Error("the release's own deletion closed Lost")
		}
	})
}

// follower is a Queue whose waiter waits for another key besides its
// queue: Ahead follows it, and holds the lease once it has fired.
type follower struct {
	*session
	other wake.Registry
	fired bool
	mu    sync.Mutex
}

func (f *follower) Ahead(ctx context.Context, w *candidacy.Waiter) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fired {
		return -1, nil
	}
	w.Follow("k", func(fn func()) func() {
		return f.other.Subscribe("k", func() {
			f.mu.Lock()
			f.fired = true
			f.mu.Unlock()
			fn()
		})
	})
	return time.Hour, nil
}

// TestFollow: a waiter woken by a followed subscription reads again at
// once, and the subscription ends with the wait.
func TestFollow(t *testing.T) {
	bubble(t, func(t *testing.T, v *server) {
		f := &follower{session: &session{v: v, sid: "a"}}
		f.Session = candidacy.New(t.Context(), candidacy.Config{Prefix: "simba/fake", ID: "a", Queue: f, WaitGroup: &v.wg})
		defer f.End()
		ch := acquireAsync(t.Context(), f.session, "x")
		synctest.Wait()
		wake.Call(f.other.Collect([]string{"k"}, nil))
		if r := <-ch; r.err != nil {
			t.Fatalf("Acquire woken by the followed key: %v", r.err)
		}
		if fs := f.other.All(); len(fs) != 0 {
			t.Errorf("%d subscriptions left after the wait", len(fs))
		}
	})
}

// TestRetry: a failed withdrawal goes on in the background until it
// succeeds, and stops with the session.
func TestRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		v := newServer()
		a := v.open(t, "a")
		var mu sync.Mutex
		calls := 0
		err := a.Retry(time.Second, time.Second, func(ctx context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if calls++; calls < 4 {
				return errors.New("unreachable")
			}
			return nil
		})
		if err == nil {
			t.Error("Retry of a failing call returned nil")
		}
		v.wg.Wait()
		if calls != 4 {
			t.Errorf("%d calls, want 4: retried until it succeeded", calls)
		}

		err = a.Retry(time.Second, time.Second, func(ctx context.Context) error { return errors.New("never") })
		if err == nil {
			t.Error("Retry of a failing call returned nil")
		}
		a.End()
		v.wg.Wait() // the background retries stop with the session
		if err := a.Retry(time.Second, time.Second, func(ctx context.Context) error { return ctx.Err() }); err != nil {
			t.Errorf("Retry on a session that is over: %v, want nil", err)
		}
	})
}

// TestLoseMissingSparesLaterGrants: a read of the session's candidacies
// sent before a grant (its mark taken before it) does not end that
// holding, though it missed its candidacy: LoseMissing asks for a read
// again, and one marked after the grant ends only what is gone.
func TestLoseMissingSparesLaterGrants(t *testing.T) {
	bubble(t, func(t *testing.T, v *server) {
		a := v.open(t, "a")
		old := acquire(t, a, "x")
		mark := a.Mark() // the read is sent: it will see x, not y
		l := acquire(t, a, "y")
		gone := func(h *candidacy.Holding) bool { return h.Name() != "x" }
		if again := a.LoseMissing(mark, gone); !again {
			t.Error("LoseMissing with a holding granted after the mark missing: again false, want true")
		}
		if closed(l.Lost()) || closed(old.Lost()) {
			t.Fatalf("after a read marked before the grant: Lost of y closed %v, of x %v; want neither", closed(l.Lost()), closed(old.Lost()))
		}
		// A read marked after the grant that misses y: y is gone.
		if again := a.LoseMissing(a.Mark(), gone); again {
			t.Error("LoseMissing marked after every grant: again true, want false")
		}
		if !closed(l.Lost()) || closed(old.Lost()) {
			t.Errorf("after a read marked after the grant: Lost of y closed %v, of x %v; want y only", closed(l.Lost()), closed(old.Lost()))
		}
	})
}
