package mysql_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/mysql"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/mytest"
)

// ownServer is a server of the test's own with two clients, "a" and "b",
// contending for the election "x", each on a backend of its own.
type ownServer struct {
	srv  *mytest.Server
	exp  *expiries
	log  *termLog
	taps []*tap
	c    map[string]*simba.Client
}

func startOwnServer(t *testing.T, ttl time.Duration) *ownServer {
	t.Helper()
	srv := mytest.StartServer(t)
	o := &ownServer{srv: srv, log: newTermLog(), c: map[string]*simba.Client{}}
	o.exp = logExpiries(t, srv.DSN())
	for _, name := range []string{"a", "b"} {
		b, err := mysql.New(srv.DSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		tp := &tap{Backend: b}
		c, err := simba.New(tp, simba.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			await.For(t, await.Returned(c.Close), closeWait, "client %s: Close did not return", name)
		})
		if _, err := c.Election("x").RunWhileLeader(o.log.Task(name, c)); err != nil {
			t.Fatal(err)
		}
		o.taps = append(o.taps, tp)
		o.c[name] = c
	}
	return o
}

// expiredTerm checks the term of holder, which the fault ended by its
// deadline, against the term next that followed it: next began strictly
// after holder's end, with a larger token, and holder's end came strictly
// before the server's expiry of its session (check.AgainstGrants). It
// returns the gap from holder's end to next's start.
func (o *ownServer) expiredTerm(t *testing.T, holder, next *seenTerm) time.Duration {
	t.Helper()
	end := holder.Term.Deadline()
	gap := next.Term.Start().Sub(end)
	if gap <= 0 {
		t.Errorf("term %d of %s began %v before term %d of %s ended", next.Term.Token(), next.Node, -gap, holder.Term.Token(), holder.Node)
	}
	if next.Term.Token() <= holder.Term.Token() {
		t.Errorf("token %d after %d", next.Term.Token(), holder.Term.Token())
	}
	expiresAt, ok := o.exp.expired(t, holder.Session)
	if !ok {
		t.Errorf("session %s of %s was not deleted past its expiry before term %d began", holder.Session, holder.Node, next.Term.Token())
		return gap
	}
	minGap, errs := check.AgainstGrants(
		[]check.Term{{Name: "x", Token: holder.Term.Token(), Start: holder.Term.Start(), End: end}},
		[]check.Grant{{Name: "x", Token: holder.Term.Token(), Start: holder.Term.Start(), End: expiresAt, Ended: true, Expired: true}})
	for _, err := range errs {
		t.Error(err)
	}
	t.Logf("term %d of %s ended %v before the server's expiry of its session and %v before term %d of %s began",
		holder.Term.Token(), holder.Node, minGap.Round(time.Microsecond), gap.Round(time.Microsecond), next.Term.Token(), next.Node)
	return gap
}

// checkAll runs the checkers over every term and register write.
func (o *ownServer) checkAll(t *testing.T) {
	t.Helper()
	for _, err := range o.log.CheckTerms() {
		t.Error(err)
	}
	errs, acc, ref := staleWrites(o.log, o.taps...)
	for _, err := range errs {
		t.Error(err)
	}
	t.Logf("register writes: %d accepted, %d refused", acc, ref)
}

// acceptedSince counts the register writes of node accepted after since.
func (o *ownServer) acceptedSince(node string, since time.Time) int {
	n := 0
	for _, w := range o.log.Writes() {
		if w.Node == node && w.Accepted && w.At.After(since) {
			n++
		}
	}
	return n
}

// noNewTerm fails t if a term began since the last one taken from the log.
func (o *ownServer) noNewTerm(t *testing.T, what string) {
	t.Helper()
	select {
	case st := <-o.log.Elected():
		t.Fatalf("%s: term %d of %s began", what, st.Term.Token(), st.Node)
	default:
	}
}

// TestServerRestart restarts the server (a fast shutdown, which writes
// everything committed to disk, then a start), first for much less than
// the TTL: sessions and leases are rows, so they survive; the holder keeps
// its term and its session, and its fenced writes go on being accepted.
// Then for longer than the TTL: the holder's term ends by its own deadline
// while the server is down, before the server's expiry of its session and
// strictly before anyone else holds; the next term has a larger token.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	// A TTL long enough that the fast restart (a shutdown and a start of
	// mariadbd, 0.57-0.67 s quiet, 1.5 s seen while the rest of the suite
	// ran beside it, 3.02 s with the chaos run and two busy loops beside
	// it, which at a TTL of 6 s failed the check below) stays well under
	// it on a loaded machine. Under half the TTL the holder's term
	// survives whenever its last renewal came: at most TTL/3 before the
	// stop, and the term ends a drift margin (10%) short of the TTL.
	const ttl = 10 * time.Second
	o := startOwnServer(t, ttl)
	holder := o.log.Next("", opTimeout)
	if holder == nil {
		t.Fatalf("no first term within %v", opTimeout)
	}

	// A fast restart.
	stopped := time.Now()
	o.srv.Stop()
	o.srv.Start()
	restarted := time.Now()
	down := restarted.Sub(stopped)
	if down >= ttl/2 {
		t.Fatalf("the fast restart took %v, not well under the TTL %v: the machine is too loaded for this test to mean anything", down, ttl)
	}
	if !eventually(opTimeout, func() bool { return o.acceptedSince(holder.Node, restarted) > 0 }) {
		t.Fatalf("no fenced write of %s accepted within %v of the restart", holder.Node, opTimeout)
	}
	time.Sleep(time.Until(restarted.Add(ttl))) // past the TTL since the last renewal before the stop
	select {
	case <-holder.Term.Revoked():
		t.Fatalf("term %d of %s revoked by a restart of %v (TTL %v): %v", holder.Term.Token(), holder.Node, down, ttl, holder.Term.EnsureValid())
	default:
	}
	if id := o.c[holder.Node].SessionID(); id != holder.Session {
		t.Fatalf("session of %s %q after a restart of %v, want %q", holder.Node, id, down, holder.Session)
	}
	o.noNewTerm(t, "after a fast restart")
	t.Logf("fast restart of %v (TTL %v): term %d of %s and session %s kept", down.Round(time.Millisecond), ttl, holder.Term.Token(), holder.Node, holder.Session)

	// A restart longer than the TTL.
	o.srv.Stop()
	stopped = time.Now()
	select {
	case <-holder.Term.Revoked():
	case <-time.After(ttl + 5*time.Second):
		t.Fatalf("term %d not revoked %v into the outage", holder.Term.Token(), ttl+5*time.Second)
	}
	if end := holder.Term.Deadline(); end.After(stopped.Add(ttl)) {
		t.Errorf("term %d valid until %v after the server stopped, past the TTL %v", holder.Term.Token(), end.Sub(stopped), ttl)
	}
	time.Sleep(time.Until(stopped.Add(ttl + time.Second)))
	o.srv.Start()
	next := o.log.Next("", opTimeout)
	if next == nil {
		t.Fatalf("no term within %v of the restart", opTimeout)
	}
	t.Logf("restart of %v (TTL %v)", time.Since(stopped).Round(time.Millisecond), ttl)
	o.expiredTerm(t, holder, next)
	o.checkAll(t)
}

// TestServerPaused stops every process of the server with SIGSTOP for
// twice the TTL, then continues it: the holder's term ends by its own
// deadline during the pause; its renewal and fenced write held by the
// paused server are refused when it continues (the server's clock has
// passed the session's expiry); the next term begins strictly after the
// old one ended, with a larger token; no two terms overlap; and after a
// hand-off tokens still increase.
func TestServerPaused(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	o := startOwnServer(t, ttl)
	holder := o.log.Next("", opTimeout)
	if holder == nil {
		t.Fatalf("no first term within %v", opTimeout)
	}
	time.Sleep(ttl / 2) // a few renewals and writes
	o.srv.Pause()
	t.Cleanup(o.srv.Resume) // before the clients close, if the test fails while paused
	paused := time.Now()
	select {
	case <-holder.Term.Revoked():
	case <-time.After(ttl + 5*time.Second):
		o.srv.Resume()
		t.Fatalf("term %d not revoked %v into the pause (valid %v, deadline %v after the pause began)", holder.Term.Token(), ttl+5*time.Second, holder.Term.Valid(), holder.Term.Deadline().Sub(paused))
	}
	if end := holder.Term.Deadline(); end.After(paused.Add(ttl)) {
		t.Errorf("term %d valid until %v after the server paused, past the TTL %v", holder.Term.Token(), end.Sub(paused), ttl)
	}
	time.Sleep(time.Until(paused.Add(2 * ttl)))
	o.srv.Resume()
	resumed := time.Now()
	next := o.log.Next("", opTimeout)
	if next == nil {
		t.Fatalf("no term within %v of the resumption", opTimeout)
	}
	t.Logf("paused for %v (TTL %v)", resumed.Sub(paused).Round(time.Millisecond), ttl)
	o.expiredTerm(t, holder, next)

	// A hand-off after it: the other client's term, larger again.
	if !eventually(opTimeout, func() bool { return o.acceptedSince(next.Node, resumed) > 0 }) {
		t.Fatalf("no fenced write of %s accepted within %v of its term", next.Node, opTimeout)
	}
	other := map[string]string{"a": "b", "b": "a"}[next.Node]
	if err := o.c[next.Node].Close(); err != nil {
		t.Fatal(err)
	}
	last := o.log.Next(other, opTimeout)
	if last == nil {
		t.Fatalf("no term of %s within %v of %s's Close", other, opTimeout, next.Node)
	}
	if last.Term.Token() <= next.Term.Token() {
		t.Errorf("token %d after %d", last.Term.Token(), next.Term.Token())
	}
	o.checkAll(t)
	t.Logf("tokens %s", fmt.Sprint(holder.Term.Token(), next.Term.Token(), last.Term.Token()))
}
