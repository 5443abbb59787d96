package mysql_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/mytest"
)

// renewer keeps a session alive as simba's client does, every TTL/3,
// retrying transient errors, and keeps the session's local deadline: the
// start of the last successful KeepAlive plus the granted TTL.
type renewer struct {
	s      backend.Session
	mu     sync.Mutex
	until  time.Time
	stop   context.CancelFunc
	done   chan struct{}
	failed int
}

func renew(t *testing.T, s backend.Session) *renewer {
	ctx, cancel := context.WithCancel(context.Background())
	r := &renewer{s: s, stop: cancel, done: make(chan struct{}), until: time.Now().Add(s.TTL())}
	go func() {
		defer close(r.done)
		for n := 0; ; {
			start := time.Now()
			ttl, err := s.KeepAlive(ctx)
			switch {
			case err == nil:
				n = 0
				r.mu.Lock()
				r.until = start.Add(ttl)
				r.mu.Unlock()
			case ctx.Err() != nil, errors.Is(err, backend.ErrSessionDone):
				return
			default:
				n++
				r.mu.Lock()
				r.failed++
				r.mu.Unlock()
				if !backoff.Sleep(ctx, backoff.Wait(n, s.TTL()/10)) {
					return
				}
				continue
			}
			if !backoff.Sleep(ctx, s.TTL()/3) {
				return
			}
		}
	}()
	t.Cleanup(func() { r.stop(); <-r.done })
	return r
}

// deadline is the session's local deadline.
func (r *renewer) deadline() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.until
}

// halt stops renewing (a crash of the holder) and returns the deadline.
func (r *renewer) halt() time.Time {
	r.stop()
	<-r.done
	return r.deadline()
}

// retrying runs f until it returns nil or an error wrapping one of the
// final errors, for up to opTimeout; the connection just terminated may
// fail the first tries.
func retrying(t *testing.T, what string, f func() error, final ...error) error {
	t.Helper()
	end := time.Now().Add(opTimeout)
	for n := 1; ; n++ {
		err := f()
		if err == nil {
			return nil
		}
		for _, e := range final {
			if errors.Is(err, e) {
				return err
			}
		}
		if time.Now().After(end) {
			t.Fatalf("%s: still failing after %v: %v", what, opTimeout, err)
		}
		backoff.Sleep(t.Context(), backoff.Wait(n, 200*time.Millisecond))
	}
}

// TestKillConnections ends every connection of the backends with KILL
// CONNECTION (as an operator's cull, a proxy's restart or wait_timeout
// does) around a hand-off and an expiry: the holder's, the waiter's, and
// the connections of their bells. Sessions live by their rows, not their
// connections: they survive, their leases are not lost, a waiter whose
// connections were killed still gets the lease, and the invariants hold:
// no two valid terms, strictly increasing tokens, each term over before
// its holding was freed, and no stale fenced write accepted.
func TestKillConnections(t *testing.T) {
	dsn := mytest.DatabaseDSN(t)
	db := dbName(t, dsn)
	bA, bB := newBackendAt(t, dsn), newBackendAt(t, dsn)
	const ttl = 2 * time.Second
	a, c := open(t, bA, ttl), open(t, bB, ttl)
	ra, rc := renew(t, a), renew(t, c)
	recA, recC := a.(backend.Records), c.(backend.Records)
	var terms []check.Term
	var grants []check.Grant
	// The records table is the fenced register: every write it answered,
	// accepted or refused, for check.StaleWrites.
	var writes []check.Write
	write := func(s backend.Session, rec backend.Records, l backend.Lease, node string) error {
		return retrying(t, "fenced write by "+node, func() error {
			_, err := rec.PutRecord(ctxT(t), "status/x", []byte(node), backend.Condition{Lease: "x", Token: l.Token()})
			if err == nil || errors.Is(err, backend.ErrConflict) || errors.Is(err, backend.ErrSessionDone) {
				writes = append(writes, check.Write{Lease: "x", Token: l.Token(), Node: node, At: time.Now(), Accepted: err == nil})
			}
			return err
		}, backend.ErrConflict, backend.ErrSessionDone)
	}

	// 1. A holds x; every connection of both backends ends.
	la, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	startA := time.Now()
	mytest.MustKill(t, mytest.DSN(t), db)
	if err := write(a, recA, la, "a"); err != nil {
		t.Fatalf("fenced write by the holder after its connections ended: %v", err)
	}
	before := ra.deadline()
	for ra.deadline().Equal(before) { // a renewal on a new connection
		backoff.Sleep(t.Context(), ttl/10)
	}
	select {
	case <-la.Lost():
		t.Fatal("the lease was lost when its connections ended; sessions live by their rows")
	case <-a.Done():
		t.Fatal("the session ended when its connections ended")
	default:
	}

	// 2. C waits on B; every connection (C's bell wait and A's bell among
	// them) then ends; A hands off.
	wc := make(chan backend.Lease, 1)
	go func() {
		l, err := c.Acquire(ctxT(t), "x")
		if err != nil {
			t.Errorf("waiting Acquire on the killed backend: %v", err)
		}
		wc <- l
	}()
	if err := retrying(t, "queue", func() error {
		ids, err := c.(backend.CandidateLister).Candidates(ctxT(t), "x")
		if err == nil && len(ids) != 2 {
			err = errors.New("C not queued yet")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	mytest.MustKill(t, mytest.DSN(t), db)
	endA := time.Now()
	if err := retrying(t, "Release", func() error { return la.Release(ctxT(t)) }); err != nil {
		t.Fatal(err)
	}
	lc := <-wc
	if lc == nil {
		t.FailNow()
	}
	startC := time.Now()
	terms = append(terms, check.Term{Name: "x", Token: la.Token(), Start: startA, End: endA})
	grants = append(grants, check.Grant{Name: "x", Token: la.Token(), Start: startA, End: startC, Ended: true})
	if err := write(c, recC, lc, "c"); err != nil {
		t.Fatalf("fenced write by the new holder: %v", err)
	}
	if err := write(a, recA, la, "a"); !errors.Is(err, backend.ErrConflict) {
		t.Errorf("fenced write by the deposed holder: error %v, want one wrapping ErrConflict", err)
	}

	// 3. A waits; C stops renewing (a crash) and A's connections end.
	wa := make(chan backend.Lease, 1)
	go func() {
		l, err := a.Acquire(ctxT(t), "x")
		if err != nil {
			t.Errorf("waiting Acquire: %v", err)
		}
		wa <- l
	}()
	// A's connections end while it waits, not while its candidacy is
	// being written (a statement cut mid-way fails, and is not retried).
	if err := retrying(t, "queue", func() error {
		ids, err := a.(backend.CandidateLister).Candidates(ctxT(t), "x")
		if err == nil && len(ids) != 2 {
			err = errors.New("A not queued yet")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	endC := rc.halt()
	mytest.MustKill(t, mytest.DSN(t), db)
	la2 := <-wa
	if la2 == nil {
		t.FailNow()
	}
	startA2 := time.Now()
	terms = append(terms, check.Term{Name: "x", Token: lc.Token(), Start: startC, End: endC})
	grants = append(grants, check.Grant{Name: "x", Token: lc.Token(), Start: startC, End: startA2, Ended: true, Expired: true})
	if err := write(a, recA, la2, "a2"); err != nil {
		t.Fatalf("fenced write by the holder after the expiry: %v", err)
	}
	if err := write(c, recC, lc, "c"); !errors.Is(err, backend.ErrConflict) && !errors.Is(err, backend.ErrSessionDone) {
		t.Errorf("fenced write by the expired holder: error %v, want ErrConflict or ErrSessionDone", err)
	}
	terms = append(terms, check.Term{Name: "x", Token: la2.Token(), Start: startA2, End: time.Now()})
	grants = append(grants, check.Grant{Name: "x", Token: la2.Token(), Start: startA2})

	for _, err := range check.Terms(terms) {
		t.Error(err)
	}
	minGap, errs := check.AgainstGrants(terms, grants)
	for _, err := range errs {
		t.Error(err)
	}
	for _, err := range check.StaleWrites(writes) {
		t.Error(err)
	}
	t.Logf("tokens %d, %d, %d; smallest gap between a term's end and its holding's end: %v; renewals that failed on an ended connection: A %d, C %d",
		la.Token(), lc.Token(), la2.Token(), minGap, ra.failed, rc.failed)
}
