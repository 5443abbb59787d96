package etcd_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/await"
)

// candidates returns the session IDs queued for name, oldest first.
func candidates(t testing.TB, s backend.Session, name string) []string {
	t.Helper()
	ids, err := s.(backend.CandidateLister).Candidates(op(t), name)
	if err != nil {
		t.Fatalf("Candidates(%q): %v", name, err)
	}
	return ids
}

// awaitCandidates waits until the candidates of name, as s reads them, are
// want.
func awaitCandidates(t testing.TB, s backend.Session, name string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(opTimeout)
	for {
		got := candidates(t, s, name)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("candidates of %q: %q, want %q", name, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// acquireAsync runs Acquire on a goroutine; the channel delivers its
// outcome.
func acquireAsync(ctx context.Context, s backend.Session, name string) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := s.Acquire(ctx, name)
		ch <- acquired{l, err}
	}()
	return ch
}

type acquired struct {
	l   backend.Lease
	err error
}

// TestQueuedCandidacy: waiting candidacies are keys of their own, in the
// order of their creation; the holder's Release hands the lease to the
// next-oldest, whose fenced writes then pass and the former holder's
// fail, and HeldLeases lists the name once.
func TestQueuedCandidacy(t *testing.T) {
	srv := startServer(t)
	cli := srv.Client(t)
	prefix := testPrefix(t)
	a := open(t, newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix)), 10*time.Second)
	b := open(t, newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix)), 10*time.Second)
	c := open(t, newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix)), 10*time.Second)
	la, err := a.Acquire(op(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	wb := acquireAsync(op(t), b, "x")
	awaitCandidates(t, a, "x", a.ID(), b.ID())
	wc := acquireAsync(op(t), c, "x")
	awaitCandidates(t, a, "x", a.ID(), b.ID(), c.ID())
	if got := keys(t, cli, prefix+"lease/"); !slices.Equal(got, sorted("x/"+a.ID(), "x/"+b.ID(), "x/"+c.ID())) {
		t.Errorf("lease keys %q", got)
	}
	held, err := a.(backend.LeaseLister).HeldLeases(op(t), "")
	if err != nil || !slices.Equal(held, []string{"x"}) {
		t.Errorf("HeldLeases = %q, %v; want [x]", held, err)
	}

	// The hand-off: b's Acquire returns on the watch's event.
	if err := la.Release(op(t)); err != nil {
		t.Fatal(err)
	}
	rb := await.For(t, wb, opTimeout, "b's Acquire after a's Release")
	if rb.err != nil {
		t.Fatal(rb.err)
	}
	if rb.l.Token() <= la.Token() {
		t.Errorf("b's token %d after a's %d", rb.l.Token(), la.Token())
	}
	select {
	case r := <-wc:
		t.Fatalf("c's Acquire returned before b's release: %v, %v", r.l, r.err)
	default:
	}
	// Fenced by b's holding, not by c's waiting candidacy.
	rec, ok := b.(backend.Records)
	if !ok {
		t.Fatal("no Records")
	}
	if _, err := rec.PutRecord(op(t), "r", []byte("b"), backend.Condition{Lease: "x", Token: rb.l.Token()}); err != nil {
		t.Errorf("fenced write of the holder: %v", err)
	}
	if err := rb.l.(backend.RecordReleaser).ReleaseWithRecords(op(t), []backend.Record{{Key: "r", Value: []byte("b, last")}}); err != nil {
		t.Fatal(err)
	}
	rc := await.For(t, wc, opTimeout, "c's Acquire after b's Release")
	if rc.err != nil {
		t.Fatal(rc.err)
	}
	if rc.l.Token() <= rb.l.Token() {
		t.Errorf("c's token %d after b's %d", rc.l.Token(), rb.l.Token())
	}
	if _, err := rec.PutRecord(op(t), "r", []byte("b, stale"), backend.Condition{Lease: "x", Token: rb.l.Token()}); !errors.Is(err, backend.ErrConflict) {
		t.Errorf("fenced write of the former holder: %v, want ErrConflict", err)
	}
	if err := rc.l.Release(op(t)); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, cli, prefix+"lease/"); len(got) != 0 {
		t.Errorf("lease keys left: %q", got)
	}
}

func sorted(s ...string) []string { slices.Sort(s); return s }

// TestWithdrawnOnCtxEnd: an Acquire that waits in the queue when its ctx
// ends has deleted its candidacy when it returns.
func TestWithdrawnOnCtxEnd(t *testing.T) {
	srv := startServer(t)
	prefix := testPrefix(t)
	a := open(t, newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix)), 10*time.Second)
	b := open(t, newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix)), 10*time.Second)
	la, err := a.Acquire(op(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wb := acquireAsync(ctx, b, "x")
	awaitCandidates(t, a, "x", a.ID(), b.ID())
	cancel()
	r := await.For(t, wb, opTimeout, "b's Acquire after its ctx ended")
	if !errors.Is(r.err, context.Canceled) || r.l != nil {
		t.Fatalf("Acquire = %v, %v; want context.Canceled", r.l, r.err)
	}
	if got := candidates(t, a, "x"); !slices.Equal(got, []string{a.ID()}) {
		t.Errorf("candidates after the withdrawal: %q, want only a's", got)
	}
	if err := la.Release(op(t)); err != nil {
		t.Fatal(err)
	}
	// b queues again, and takes the free lease at once.
	lb, err := b.Acquire(op(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= la.Token() {
		t.Errorf("token %d after %d", lb.Token(), la.Token())
	}
}

// TestInterruptedQueuedAcquireUndone: a waiter's transaction cut off on
// its way, while another session holds the lease, leaves no candidacy
// once the link heals, and the holder's Release frees the lease.
func TestInterruptedQueuedAcquireUndone(t *testing.T) {
	srv := startServer(t)
	cli := srv.Client(t)
	prefix := testPrefix(t)
	px := newProxy(t, srv.Endpoints()[0])
	a := open(t, newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix)), 10*time.Second)
	b := open(t, newBackend(t, []string{px.Addr()}, etcd.WithPrefix(prefix)), 10*time.Second)
	la, err := a.Acquire(op(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	px.Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if l, err := b.Acquire(ctx, "x"); !errors.Is(err, context.DeadlineExceeded) || l != nil {
		t.Fatalf("Acquire over a cut link: %v, %v", l, err)
	}
	px.Heal()
	awaitCandidates(t, a, "x", a.ID())
	if err := la.Release(op(t)); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, cli, prefix+"lease/"); len(got) != 0 {
		t.Errorf("lease keys left: %q", got)
	}
	// b works on, with a new epoch.
	lb, err := b.Acquire(op(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := lb.Release(op(t)); err != nil {
		t.Fatal(err)
	}
}

// TestQueuedWaiterResyncs: while a waiter's client is cut off, the holder
// releases and the history is compacted past the release, so the waiter's
// watch cannot resume where it was; its read of the lease keys shows the
// older candidacy gone, and its Acquire returns.
func TestQueuedWaiterResyncs(t *testing.T) {
	srv := startServer(t)
	cli := srv.Client(t)
	prefix := testPrefix(t)
	px := newProxy(t, srv.Endpoints()[0])
	a := open(t, newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix)), 10*time.Second)
	b := open(t, newBackend(t, []string{px.Addr()}, etcd.WithPrefix(prefix)), 10*time.Second)
	la, err := a.Acquire(op(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	wb := acquireAsync(op(t), b, "x")
	awaitCandidates(t, a, "x", a.ID(), b.ID())
	px.Refuse()
	if err := la.Release(op(t)); err != nil {
		t.Fatal(err)
	}
	put, err := cli.Put(op(t), prefix+"other", "1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(op(t), put.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	px.Accept()
	r := await.For(t, wb, opTimeout, "b's Acquire after the resync")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.l.Token() <= la.Token() || closed(r.l.Lost()) {
		t.Errorf("token %d after %d, lost %v", r.l.Token(), la.Token(), closed(r.l.Lost()))
	}
}
