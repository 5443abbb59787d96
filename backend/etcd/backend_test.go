package etcd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/await"
	simbarecords "github.com/simba-go/simba/internal/records"
)

func TestOptionsRefuseBadValues(t *testing.T) {
	cases := map[string][]etcd.Option{
		"empty prefix":          {etcd.WithPrefix("")},
		"prefix without slash":  {etcd.WithPrefix("/simba")},
		"prefix too long":       {etcd.WithPrefix("/" + strings.Repeat("p", 512) + "/")},
		"prefix not UTF-8":      {etcd.WithPrefix("/\xff/")},
		"nil logger":            {etcd.WithLogger(nil)},
		"no requests in flight": {etcd.WithMaxRequests(0)},
		"nil option":            {nil},
		"good then bad options": {etcd.WithPrefix("/ok/"), etcd.WithPrefix("bad")},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			b, err := etcd.New([]string{"127.0.0.1:2379"}, opts...)
			if err == nil {
				b.Close()
				t.Fatal("New accepted the options")
			}
			if !strings.HasPrefix(err.Error(), "simba/etcd: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
	if _, err := etcd.New(nil); err == nil {
		t.Error("New accepted no endpoints")
	}
	if _, err := etcd.New([]string{" "}); err == nil {
		t.Error("New accepted an empty endpoint")
	}
	if _, err := etcd.NewFromClient(nil); err == nil {
		t.Error("NewFromClient accepted a nil client")
	}
	b, err := etcd.New([]string{"127.0.0.1:2379"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Prefix() != etcd.DefaultPrefix || etcd.DefaultPrefix != "/simba/" {
		t.Errorf("default prefix %q", b.Prefix())
	}
}

// TestOpenUnreachable: an unreachable cluster makes Open fail when its ctx
// ends, saying so, and simba.New does not wait for it.
func TestOpenUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	b := newBackend(t, []string{addr})

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = b.Open(ctx, backend.SessionOptions{TTL: time.Second})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Open: %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "not connected to etcd at "+addr) {
		t.Errorf("Open's error does not say the cluster is unreachable: %v", err)
	}
	t.Logf("Open: %v", err)

	c, err := simba.New(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.SessionID() != "" {
		t.Error("a session without a server")
	}
	c.Close()
}

func TestGrantedTTLIsRoundedUp(t *testing.T) {
	srv := startServer(t)
	b := newBackend(t, srv.Endpoints(), etcd.WithPrefix(testPrefix(t)))
	for _, c := range []struct{ requested, granted time.Duration }{
		{time.Nanosecond, time.Second}, // etcd's minimum here
		{time.Second, time.Second},
		{1001 * time.Millisecond, 2 * time.Second},
		{2500 * time.Millisecond, 3 * time.Second},
	} {
		s := open(t, b, c.requested)
		if s.TTL() != c.granted {
			t.Errorf("requested %v: TTL() = %v, want %v", c.requested, s.TTL(), c.granted)
		}
		ttl, err := s.KeepAlive(op(t))
		if err != nil || ttl != c.granted {
			t.Errorf("requested %v: KeepAlive = %v, %v, want %v", c.requested, ttl, err, c.granted)
		}
	}
	if _, err := b.Open(op(t), backend.SessionOptions{}); err == nil {
		t.Error("Open accepted a zero TTL")
	}
}

// TestKeyLayout checks the keys the backend writes, their values and leases,
// and that tokens are the lease keys' create revisions.
func TestKeyLayout(t *testing.T) {
	srv := startServer(t)
	cli := newClient(t, srv)
	prefix := testPrefix(t)
	b := newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix))
	s := open(t, b, 5*time.Second)
	l, err := s.Acquire(op(t), "ingest")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Join(op(t), "billing", backend.Member{ID: "node-a", Data: []byte{1, 2}}); err != nil {
		t.Fatal(err)
	}
	want := []string{"group/billing/" + s.ID(), "lease/ingest/" + s.ID(), "session/" + s.ID()}
	if got := keys(t, cli, prefix); !slices.Equal(got, want) {
		t.Fatalf("keys %q, want %q", got, want)
	}
	resp, err := cli.Get(op(t), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if got := clientv3.LeaseID(kv.Lease); got == clientv3.NoLease || strings.TrimLeft(s.ID(), "0") != strings.TrimLeft(strconvHex(int64(got)), "0") {
			t.Errorf("key %s bound to lease %x, want the session's %s", kv.Key, kv.Lease, s.ID())
		}
		switch k := strings.TrimPrefix(string(kv.Key), prefix); k {
		case "lease/ingest/" + s.ID():
			if uint64(kv.CreateRevision) != l.Token() || string(kv.Value) != s.ID() {
				t.Errorf("lease key: create revision %d value %q, want token %d and the session ID", kv.CreateRevision, kv.Value, l.Token())
			}
		case "group/billing/" + s.ID():
			var rec struct {
				ID   string `json:"id"`
				Data []byte `json:"data"`
			}
			if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.ID != "node-a" || !slices.Equal(rec.Data, []byte{1, 2}) {
				t.Errorf("member value %s: %+v, %v", kv.Value, rec, err)
			}
		}
	}

	// Released: the lease key goes and Lost stays open.
	if err := l.Release(op(t)); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, cli, prefix+"lease/"); len(got) != 0 {
		t.Errorf("lease keys after Release: %q", got)
	}
	if closed(l.Lost()) {
		t.Error("Lost closed by the holding's own Release")
	}

	// Close revokes the lease: nothing is left.
	if err := s.Close(op(t)); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, cli, prefix); len(got) != 0 {
		t.Errorf("keys after Close: %q", got)
	}
}

func strconvHex(v int64) string {
	const digits = "0123456789abcdef"
	var buf [16]byte
	for i := 15; i >= 0; i-- {
		buf[i] = digits[v&0xf]
		v >>= 4
	}
	return string(buf[:])
}

// TestInterruptedAcquireLeavesNothing cuts the link while Acquire's
// transaction is on its way: Acquire returns when its ctx ends, and once
// the link heals, whatever the transaction did is undone.
func TestInterruptedAcquireLeavesNothing(t *testing.T) {
	srv := startServer(t)
	cli := newClient(t, srv)
	prefix := testPrefix(t)
	px := newProxy(t, srv.Endpoints()[0])
	b := newBackend(t, []string{px.Addr()}, etcd.WithPrefix(prefix))
	s := open(t, b, 5*time.Second)
	other := open(t, newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix)), 5*time.Second)

	px.Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	l, err := s.Acquire(ctx, "x")
	if !errors.Is(err, context.DeadlineExceeded) || l != nil {
		t.Fatalf("Acquire over a cut link: %v, %v", l, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Acquire returned %v after its ctx ended", d-200*time.Millisecond)
	}
	px.Heal()

	// The other session gets the lease once the clean-up is through, even
	// if the held transaction reached the server.
	lo, err := other.Acquire(op(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := lo.Release(op(t)); err != nil {
		t.Fatal(err)
	}
	// The interrupted session can acquire again.
	l, err = s.Acquire(op(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= lo.Token() {
		t.Errorf("token %d after %d", l.Token(), lo.Token())
	}
	if err := l.Release(op(t)); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, cli, prefix+"lease/"); len(got) != 0 {
		t.Errorf("lease keys left: %q", got)
	}
	// The undo bumped the session's epoch, which every Acquire transaction
	// compares: the interrupted one can no longer succeed.
	resp, err := cli.Get(op(t), prefix+"session/"+s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "1" {
		t.Errorf("session key after the undo: %v, want epoch 1", resp.Kvs)
	}
}

// TestInterruptedAcquiresShareOneUndo: many Acquires cut off at once are
// undone by a few transactions (one epoch bump per batch, not per name:
// every bump makes the session's Acquires in flight retry), and an Acquire
// that ended while it waited for a request slot was never sent and is not
// undone at all.
func TestInterruptedAcquiresShareOneUndo(t *testing.T) {
	srv := startServer(t)
	cli := newClient(t, srv)
	prefix := testPrefix(t)
	px := newProxy(t, srv.Endpoints()[0])
	const inFlight, names = 40, 60
	b := newBackend(t, []string{px.Addr()}, etcd.WithPrefix(prefix), etcd.WithMaxRequests(inFlight))
	s := open(t, b, 5*time.Second)
	other := open(t, newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix)), 5*time.Second)

	px.Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for i := range names {
		wg.Go(func() {
			if l, err := s.Acquire(ctx, fmt.Sprintf("n%d", i)); !errors.Is(err, context.DeadlineExceeded) || l != nil {
				t.Errorf("Acquire over a cut link: %v, %v", l, err)
			}
		})
	}
	wg.Wait()
	px.Heal()

	// Every name is free for the other session once the undos are through.
	for i := range names {
		l, err := other.Acquire(op(t), fmt.Sprintf("n%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(op(t)); err != nil {
			t.Fatal(err)
		}
	}
	// The session's epoch counts the undo transactions: the first undo
	// starts at once (its transaction waits for the link), the others
	// queue behind it and go together. Before batching it was one per
	// interrupted Acquire; the 20 that never got a slot need none.
	resp, err := cli.Get(op(t), prefix+"session/"+s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("session key: %v", resp.Kvs)
	}
	if epoch, _ := strconv.Atoi(string(resp.Kvs[0].Value)); epoch < 1 || epoch > 2 {
		t.Errorf("epoch %d after undoing %d interrupted Acquires, want 1 or 2 transactions", epoch, inFlight)
	}
	// The session works on.
	l, err := s.Acquire(op(t), "n0")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(op(t)); err != nil {
		t.Fatal(err)
	}
}

// TestBackendCloseAbandonsSessions: Backend.Close ends the sessions for the
// caller at once but leaves them to expire on the server.
func TestBackendCloseAbandonsSessions(t *testing.T) {
	srv := startServer(t)
	cli := newClient(t, srv)
	prefix := testPrefix(t)
	b, err := etcd.New(srv.Endpoints(), etcd.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, b, time.Second)
	l, err := s.Acquire(op(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Join(op(t), "g", backend.Member{}); err != nil {
		t.Fatal(err)
	}
	watch, err := s.WatchMembers(op(t), "g")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if !closed(s.Done()) || !closed(l.Lost()) {
		t.Error("Done or Lost open after Backend.Close")
	}
	if !waitFor(watch, time.Second) {
		t.Error("member watch open after Backend.Close")
	}
	if _, err := s.KeepAlive(op(t)); !errors.Is(err, backend.ErrSessionDone) {
		t.Errorf("KeepAlive after Backend.Close: %v", err)
	}
	if _, err := b.Open(op(t), backend.SessionOptions{TTL: time.Second}); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Open after Backend.Close: %v", err)
	}
	if got := keys(t, cli, prefix); len(got) != 3 {
		t.Errorf("keys right after Backend.Close: %q, want the abandoned session's three", got)
	}
	// The lease expires by its TTL (1s, checked by etcd every 500ms).
	deadline := time.Now().Add(5 * time.Second)
	for len(keys(t, cli, prefix)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("keys still there 5s after Backend.Close: %q", keys(t, cli, prefix))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestUserClientStaysOpen: a backend made from the caller's client leaves it
// open on Close, and its sessions end when the caller closes the client.
func TestUserClientStaysOpen(t *testing.T) {
	srv := startServer(t)
	cli, err := clientv3.New(clientConfig(srv))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	b, err := etcd.NewFromClient(cli, etcd.WithPrefix(testPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	if b.Client() != cli {
		t.Error("Client() is not the caller's client")
	}
	s := open(t, b, time.Second)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Get(op(t), "/any"); err != nil {
		t.Fatalf("the caller's client after Backend.Close: %v", err)
	}
	if !closed(s.Done()) {
		t.Error("session open after Backend.Close")
	}

	b2, err := etcd.NewFromClient(cli, etcd.WithPrefix(testPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	s2 := open(t, b2, time.Second)
	l, err := s2.Acquire(op(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	if !waitFor(s2.Done(), 5*time.Second) || !waitFor(l.Lost(), 5*time.Second) {
		t.Fatal("session or lease open after the client was closed")
	}
	if _, err := b2.Open(op(t), backend.SessionOptions{TTL: time.Second}); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Open on a closed client: %v, want ErrClosed", err)
	}
}

// TestOnLost: the LostNotifier capability calls back when the holding is
// lost, and not after its own Release or once stopped.
func TestOnLost(t *testing.T) {
	srv := startServer(t)
	prefix := testPrefix(t)
	b := newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix))
	s := open(t, b, 5*time.Second)
	acquire := func(name string) backend.LostNotifier {
		l, err := s.Acquire(op(t), name)
		if err != nil {
			t.Fatal(err)
		}
		n, ok := l.(backend.LostNotifier)
		if !ok {
			t.Fatal("the lease does not implement backend.LostNotifier")
		}
		return n
	}
	calls := make(chan string, 10)
	x := acquire("x")
	stopX := x.OnLost(func() { calls <- "x" })
	y := acquire("y")
	stopY := y.OnLost(func() { calls <- "y" })
	if !stopY() {
		t.Error("stop before the loss reported false")
	}
	z := acquire("z")
	z.OnLost(func() { calls <- "z" })
	if err := z.(backend.Lease).Release(op(t)); err != nil {
		t.Fatal(err)
	}

	// Another holding of x by the same session ends the first.
	if _, err := s.Acquire(op(t), "x"); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-calls:
		if got != "x" {
			t.Fatalf("OnLost of %s called", got)
		}
	case <-time.After(opTimeout):
		t.Fatal("OnLost not called after the holding was replaced")
	}
	if stopX() {
		t.Error("stop after the call reported true")
	}
	// Registered after the loss: called at once.
	called := false
	x.OnLost(func() { called = true })
	if !called {
		t.Error("OnLost on a lost lease did not call at once")
	}
	if err := s.Close(op(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-calls:
		t.Errorf("OnLost of %s called after stop or Release", got)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestUnreachableClusterIsReported: the etcd client waits for a connection
// until the ctx ends, so the core bounds each Open attempt and reports an
// unreachable cluster (it once waited in silence).
func TestUnreachableClusterIsReported(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	b := newBackend(t, []string{addr})
	var mu sync.Mutex
	var logged bytes.Buffer
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := simba.New(b, simba.WithTTL(time.Second), simba.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(3 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "opening a session failed") {
		t.Errorf("3s without a cluster, the client has logged nothing: %q", logged.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestLastRunIsRecordedAtHandOff: a run that ends because its term ended
// (the usual way of a RunWhileLeader task, and of the run in flight at a
// Stop) still reaches the history, while the lease is held (its write was
// once bounded by the term's deadline, passed by then).
func TestLastRunIsRecordedAtHandOff(t *testing.T) {
	srv := startServer(t)
	prefix := testPrefix(t)
	n := newNode(t, "a", srv.Endpoints(), prefix, 2*time.Second)
	running := make(chan struct{}, 1)
	task, err := n.client.Election("report").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		running <- struct{}{}
		<-ctx.Done()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	await.For(t, running, opTimeout, "the task did not run")
	if err := task.Close(); err != nil {
		t.Fatal(err)
	}
	s := open(t, n.backend, 2*time.Second)
	runs, err := records(t, s).ListRecords(op(t), simbarecords.HistoryKeys("report"))
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 {
		t.Fatalf("after a clean hand-off the history holds %d runs, want the one that ran", len(runs))
	}
	var run simbarecords.Run
	if err := simbarecords.Decode(runs[0].Value, &run); err != nil {
		t.Fatal(err)
	}
	if run.Result == simbarecords.Running || run.End.IsZero() {
		t.Errorf("after a clean hand-off the last run is recorded as %q, ended %v", run.Result, run.End)
	}
}
