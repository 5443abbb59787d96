package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/backendtest"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/faultproxy"
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
	poll(t, func() error {
		if got := candidates(t, s, name); !slices.Equal(got, want) {
			return fmt.Errorf("candidates of %q: %q, want %q", name, got, want)
		}
		return nil
	})
}

// poll calls check every 5ms until it returns nil, and fails the test with
// its last error if that takes longer than opTimeout.
func poll(t testing.TB, check func() error) {
	t.Helper()
	deadline := time.Now().Add(opTimeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", opTimeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestQueuedCandidacy: waiting candidacies are keys of their own, in the
// order of their creation; the holder's Release hands the lease to the
// next-oldest, whose fenced writes then pass and the former holder's
// fail, and HeldLeases lists the name once.
func TestQueuedCandidacy(t *testing.T) {
	srv := startServer(t)
	cli := newClient(t, srv)
	prefix := testPrefix(t)
	a := open(t, newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix)), 10*time.Second)
	b := open(t, newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix)), 10*time.Second)
	c := open(t, newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix)), 10*time.Second)
	la, err := a.Acquire(op(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	wb := backendtest.AcquireAsync(op(t), b, "x")
	awaitCandidates(t, a, "x", a.ID(), b.ID())
	wc := backendtest.AcquireAsync(op(t), c, "x")
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
	if rb.Err != nil {
		t.Fatal(rb.Err)
	}
	if rb.Lease.Token() <= la.Token() {
		t.Errorf("b's token %d after a's %d", rb.Lease.Token(), la.Token())
	}
	select {
	case r := <-wc:
		t.Fatalf("c's Acquire returned before b's release: %v, %v", r.Lease, r.Err)
	default:
	}
	// Fenced by b's holding, not by c's waiting candidacy.
	rec, ok := b.(backend.Records)
	if !ok {
		t.Fatal("no Records")
	}
	if _, err := rec.PutRecord(op(t), "r", []byte("b"), backend.Condition{Lease: "x", Token: rb.Lease.Token()}); err != nil {
		t.Errorf("fenced write of the holder: %v", err)
	}
	if err := rb.Lease.(backend.RecordReleaser).ReleaseWithRecords(op(t), []backend.Record{{Key: "r", Value: []byte("b, last")}}); err != nil {
		t.Fatal(err)
	}
	rc := await.For(t, wc, opTimeout, "c's Acquire after b's Release")
	if rc.Err != nil {
		t.Fatal(rc.Err)
	}
	if rc.Lease.Token() <= rb.Lease.Token() {
		t.Errorf("c's token %d after b's %d", rc.Lease.Token(), rb.Lease.Token())
	}
	if _, err := rec.PutRecord(op(t), "r", []byte("b, stale"), backend.Condition{Lease: "x", Token: rb.Lease.Token()}); !errors.Is(err, backend.ErrConflict) {
		t.Errorf("fenced write of the former holder: %v, want ErrConflict", err)
	}
	if err := rc.Lease.Release(op(t)); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, cli, prefix+"lease/"); len(got) != 0 {
		t.Errorf("lease keys left: %q", got)
	}
}

func sorted(s ...string) []string { slices.Sort(s); return s }

// TestWithdrawnOnCtxEnd: an Acquire that waits in the queue when its ctx
// ends has deleted its candidacy when it returns, or its session deletes
// it soon after.
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
	wb := backendtest.AcquireAsync(ctx, b, "x")
	awaitCandidates(t, a, "x", a.ID(), b.ID())
	awaitWaiting(t, b, "x")
	cancel()
	r := await.For(t, wb, opTimeout, "b's Acquire after its ctx ended")
	if !errors.Is(r.Err, context.Canceled) || r.Lease != nil {
		t.Fatalf("Acquire = %v, %v; want context.Canceled", r.Lease, r.Err)
	}
	if got := candidates(t, a, "x"); !slices.Equal(got, []string{a.ID()}) {
		// Acquire withdraws before it returns when it can; when its ctx
		// ended during a transaction, or no request slot was free (a
		// loaded machine), the session's undo worker withdraws soon after
		// (lease.go, withdraw; the package documentation).
		t.Logf("candidates when Acquire returned: %q; waiting for the session's undo", got)
		awaitCandidates(t, a, "x", a.ID())
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
	cli, prefix, px, a, b, la := holderAndProxiedWaiter(t)
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
	cli, prefix, px, a, b, la := holderAndProxiedWaiter(t)
	wb := backendtest.AcquireAsync(op(t), b, "x")
	awaitCandidates(t, a, "x", a.ID(), b.ID())
	// The candidacy shows before b's transaction has its reply: cut
	// before that, b's Acquire returns the transport's error (the undo
	// cleans up after it), and this test is about a waiter.
	awaitWaiting(t, b, "x")
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
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Lease.Token() <= la.Token() || closed(r.Lease.Lost()) {
		t.Errorf("token %d after %d, lost %v", r.Lease.Token(), la.Token(), closed(r.Lease.Lost()))
	}
}

// awaitWaiting waits until an Acquire of name on s waits for its turn.
func awaitWaiting(t *testing.T, s backend.Session, name string) {
	t.Helper()
	poll(t, func() error {
		if etcd.Waiting(s, name) == 0 {
			return fmt.Errorf("no Acquire of %q on session %s waiting", name, s.ID())
		}
		return nil
	})
}

// holderAndProxiedWaiter starts a server and two sessions under one
// prefix: a, which holds "x" (la), and b, whose link goes through px.
// cli is a client of the server's own.
func holderAndProxiedWaiter(t *testing.T) (cli *clientv3.Client, prefix string, px *faultproxy.Proxy, a, b backend.Session, la backend.Lease) {
	t.Helper()
	srv := startServer(t)
	cli = newClient(t, srv)
	prefix = testPrefix(t)
	px = newProxy(t, srv.Endpoints()[0])
	a = open(t, newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix)), 10*time.Second)
	b = open(t, newBackend(t, []string{px.Addr()}, etcd.WithPrefix(prefix)), 10*time.Second)
	la, err := a.Acquire(op(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	return cli, prefix, px, a, b, la
}
