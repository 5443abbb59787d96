package kubernetes_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/internal/kubetest"
)

// deleteGate is a transport of a contender's backend that holds back the
// first DELETE of one session object (the take-over's write) until the
// test lets it go, and reports its answer and the contender's next GET of
// that object.
type deleteGate struct {
	rt   http.RoundTripper
	path string // the URL path of the session object

	once     sync.Once
	arrived  chan string // the DELETE's body (its options, quoted), once it is held
	release  chan struct{}
	answered chan gateAnswer // the DELETE's answer, once the server gave it

	mu     sync.Mutex
	done   bool          // the DELETE has been answered
	reread chan struct{} // closed at the first GET of the object after that
	rOnce  sync.Once
}

type gateAnswer struct {
	code int
	err  error
}

func newDeleteGate(ns, obj string) *deleteGate {
	return &deleteGate{
		path:    "/apis/coordination.k8s.io/v1/namespaces/" + ns + "/leases/" + obj,
		arrived: make(chan string, 1), release: make(chan struct{}), answered: make(chan gateAnswer, 1),
		reread: make(chan struct{}),
	}
}

func (g *deleteGate) wrap(rt http.RoundTripper) http.RoundTripper { g.rt = rt; return g }

func (g *deleteGate) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path != g.path {
		return g.rt.RoundTrip(req)
	}
	if req.Method == http.MethodGet {
		g.mu.Lock()
		after := g.done
		g.mu.Unlock()
		if after {
			g.rOnce.Do(func() { close(g.reread) })
		}
		return g.rt.RoundTrip(req)
	}
	first := false
	if req.Method == http.MethodDelete {
		g.once.Do(func() { first = true })
	}
	if !first {
		return g.rt.RoundTrip(req)
	}
	body := "(none)"
	if req.GetBody != nil {
		if rc, err := req.GetBody(); err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			body = fmt.Sprintf("%q", bytes.TrimSpace(b)) // protobuf or JSON
		}
	}
	g.arrived <- body
	select {
	case <-g.release:
	case <-req.Context().Done():
		err := context.Cause(req.Context())
		g.answered <- gateAnswer{err: err}
		return nil, err
	}
	resp, err := g.rt.RoundTrip(req)
	a := gateAnswer{err: err}
	if err == nil {
		a.code = resp.StatusCode
	}
	g.mu.Lock()
	g.done = true
	g.mu.Unlock()
	g.answered <- a
	return resp, err
}

// TestTakeoverRefusedAfterRenewal: a contender that has judged the holder's
// session over (its object unchanged, by the contender's clock, for TTL +
// TTL/10) and sent the DELETE that ends it, must not end it when the
// holder's renewal reaches the server first: the DELETE carries the
// resourceVersion the contender saw, the renewal changed it, and the
// server refuses the DELETE (409 Conflict); the holder keeps its lease and
// the contender observes the object afresh. Such a renewal is legitimate
// whenever the two clocks disagree on how long the object went unchanged
// (a holder's machine suspended, whose monotonic clock stood still; clocks
// whose rates differ by more than the margin).
//
// The interleaving is built, not timed: the contender's sighting of the
// holder's object is dated an hour back (kubernetes.Saw), so it judges the
// holder over at its first read; a transport on the contender's rest
// config holds its DELETE of the holder's object until the holder's
// KeepAlive has returned (acknowledged by the server), then lets it go.
// The contender's next GET of the holder's object, after the DELETE's
// answer, shows it went back to observing instead of taking over (a
// take-over reads the queue and returns the lease, and never reads that
// object again).
//
// Without the precondition (patch: `_ = rv; err = s.b.leases.Delete(ctx,
// obj, metav1.DeleteOptions{})` for the Delete in lease.go's step), this
// test fails with:
//
//	takeover_race_test.go:211: the contender's DELETE of simba-s-88f442ffc1b117d121b5ce1a24e9eaad, sent with "k8s\x00\n'\n\x16coordination.k8s.io/v1\x12\rDeleteOptions\x12\x00\x1a\x00\"\x00", was answered 200 (error <nil>) after the holder's renewal (its object at resourceVersion 212 → 216): want 409 Conflict, a renewal made since the contender's read must refuse the take-over
//	takeover_race_test.go:218: the contender took the lease (token 2) from a holder whose renewal the server had acknowledged before the take-over's write
func TestTakeoverRefusedAfterRenewal(t *testing.T) {
	const ttl = time.Minute // no one expires during the test: the race is built, not waited for
	srv := kubetest.Start(t)
	ns := srv.Namespace(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	bound := func() <-chan time.Time { return time.After(30 * time.Second) }

	hb := backendIn(t, srv, ns, nil)
	holder := open(t, hb, ttl)
	held, err := holder.Acquire(ctx, "x")
	if err != nil {
		t.Fatalf("the holder's Acquire: %v", err)
	}
	obj := "simba-s-" + holder.ID()
	gate := newDeleteGate(ns, obj)
	cfg := srv.Admin()
	cfg.WrapTransport = gate.wrap
	cb, err := kubernetes.New(cfg, kubernetes.WithNamespace(ns),
		kubernetes.WithLogger(slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cb.Close() })
	contender := open(t, cb, ttl)

	admin := hb.Client().CoordinationV1().Leases(ns)
	seen, err := admin.Get(ctx, obj, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the holder's session object: %v", err)
	}
	// The contender has seen it unchanged for an hour by its clock.
	kubernetes.Saw(cb, obj, seen.ResourceVersion, time.Now().Add(-time.Hour))

	type result struct {
		l   backend.Lease
		err error
	}
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	got := make(chan result, 1)
	go func() {
		l, err := contender.Acquire(cctx, "x")
		got <- result{l, err}
	}()
	granted := func(r result) string {
		if r.err != nil {
			return fmt.Sprintf("the contender's Acquire ended: %v", r.err)
		}
		return fmt.Sprintf("the contender took the lease (token %d)", r.l.Token())
	}

	// 1. The contender judged the holder over and sent its DELETE.
	var body string
	select {
	case body = <-gate.arrived:
	case r := <-got:
		t.Fatalf("before any DELETE of the holder's session object: %s", granted(r))
	case <-bound():
		t.Fatalf("the contender sent no DELETE of %s within 30s, though it has seen it unchanged for an hour", obj)
	}
	// 2. The holder renews, and the server acknowledges it.
	if _, err := holder.KeepAlive(ctx); err != nil {
		t.Fatalf("the holder's KeepAlive while the contender's DELETE was held: %v", err)
	}
	renewed, err := admin.Get(ctx, obj, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the holder's session object after its renewal: %v", err)
	}
	if renewed.ResourceVersion == seen.ResourceVersion {
		t.Fatalf("the holder's renewal left its object at resourceVersion %s: the test shows nothing", seen.ResourceVersion)
	}
	// 3. The take-over's write goes on.
	close(gate.release)
	var a gateAnswer
	select {
	case a = <-gate.answered:
	case <-bound():
		t.Fatal("the contender's DELETE, let go, had no answer within 30s")
	}
	if a.err != nil || a.code != http.StatusConflict {
		t.Errorf("the contender's DELETE of %s, sent with %s, was answered %d (error %v) after the holder's renewal (its object at resourceVersion %s → %s): want 409 Conflict, a renewal made since the contender's read must refuse the take-over",
			obj, body, a.code, a.err, seen.ResourceVersion, renewed.ResourceVersion)
	}
	// 4. The contender observes the renewed object rather than take over.
	select {
	case <-gate.reread:
	case r := <-got:
		t.Fatalf("%s from a holder whose renewal the server had acknowledged before the take-over's write", granted(r))
	case <-bound():
		t.Fatalf("the contender neither read %s again nor returned within 30s of its DELETE's answer", obj)
	}
	select {
	case r := <-got:
		t.Fatalf("%s, though it went back to observing the holder", granted(r))
	default:
	}
	if _, err := admin.Get(ctx, obj, metav1.GetOptions{}); err != nil {
		t.Errorf("the holder's session object after the refused take-over: %v, want it kept", err)
	}
	names, err := admin.List(ctx, metav1.ListOptions{LabelSelector: kubetest.SimbaSelector + ",simba.io/kind=" + kubetest.KindLease})
	if err != nil {
		t.Fatal(err)
	}
	if len(names.Items) != 1 {
		t.Fatalf("%d lease name objects, want 1 (x's)", len(names.Items))
	}
	if _, q, _, err := kubetest.Queue(&names.Items[0]); err != nil {
		t.Fatal(err)
	} else if len(q) == 0 || q[0].S != holder.ID() || q[0].T != held.Token() {
		t.Errorf("the queue of x after the refused take-over: %+v, want the holder's candidacy (token %d, session %s) first", q, held.Token(), holder.ID())
	}
	select {
	case <-held.Lost():
		t.Error("the holder's lease is lost after the refused take-over")
	default:
	}
	if _, err := holder.KeepAlive(ctx); err != nil {
		t.Errorf("the holder's next KeepAlive: %v", err)
	}

	// 5. The holder hands off: the contender is granted, with a newer token.
	if err := held.Release(ctx); err != nil {
		t.Fatalf("the holder's Release: %v", err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("the contender's Acquire after the holder's release: %v", r.err)
		}
		if r.l.Token() <= held.Token() {
			t.Errorf("the contender's token %d after the hand-off, want > the holder's %d", r.l.Token(), held.Token())
		}
	case <-bound():
		t.Fatal("the contender was not granted within 30s of the holder's release")
	}
}
