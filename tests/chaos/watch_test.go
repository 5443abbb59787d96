package chaos

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/pgtest"
	"github.com/simba-go/simba/internal/zktest"
)

// TestGrantWatch checks the watchers of the grants against the backends
// themselves: the leases they take and release, with their tokens, must
// show as grants that begin no later than Acquire returned and end no
// earlier than the holding was over, or, for a holding too short for the
// watcher to see (ZooKeeper's watches fire once), lie in a blind range of
// the watch; and an observation after a release must fail check.Observed.
func TestGrantWatch(t *testing.T) {
	t.Run("etcd", func(t *testing.T) {
		srv := etcdtest.Start(t)
		host := srv.DirectEndpoints()[0]
		c := &etcdCluster{members: []*etcdMember{{clientHost: host}}}
		space := c.newSpace()
		b, err := etcd.New(srv.Endpoints(), etcd.WithPrefix(space))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		testGrantWatch(t, c, space, b)
	})
	t.Run("zookeeper", func(t *testing.T) {
		z := &zooKeeper{addr: zktest.Addr(t)}
		space := z.newSpace()
		b, err := zookeeper.New([]string{z.addr}, zookeeper.WithRoot(space))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			b.Close()
			if c, closeConn, err := dialZK(z.addr); err == nil {
				zktest.DeleteTree(c, space)
				closeConn()
			}
		})
		testGrantWatch(t, z, space, b)
	})
	t.Run("postgres", func(t *testing.T) {
		p := &postgresWorld{dsn: pgtest.DSN(t), id: "watch"}
		t.Cleanup(p.close) // drops the schema
		space := p.newSpace()
		b, err := postgres.New(p.dsn, postgres.WithSchema(space))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		testGrantWatch(t, p, space, b)
	})
}

func testGrantWatch(t *testing.T, w interface {
	watchGrants(space string) (*grantWatch, error)
}, space string, b backend.Backend) {
	gw, err := w.watchGrants(space)
	if err != nil {
		t.Fatal(err)
	}
	defer gw.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func() backend.Session {
		s, err := b.Open(ctx, backend.SessionOptions{TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	type holding struct {
		name     string
		token    uint64
		acquired time.Time // when Acquire returned
		over     time.Time // when Release or Close was called
	}
	var want []holding
	acquire := func(s backend.Session, name string) backend.Lease {
		l, err := s.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, holding{name: name, token: l.Token(), acquired: time.Now()})
		return l
	}
	release := func(l backend.Lease) {
		want[len(want)-1].over = time.Now()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// seen waits until the watcher has seen the last holding begin: a
	// polling watcher (PostgreSQL's) may miss a holding shorter than its
	// poll on a loaded machine, and the test means to check the holdings
	// a watcher must see (all but the one released at once).
	seen := func() {
		h := want[len(want)-1]
		deadline := time.Now().Add(10 * time.Second)
		for {
			grants, _, err := gw.log.snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(grants, func(g check.Grant) bool { return g.Name == h.name && g.Token == h.token }) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the watcher did not see grant %d of %s within 10s of Acquire", h.token, h.name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	s1, s2 := open(), open()
	l := acquire(s1, "e0")
	seen()
	release(l)
	acquire(s2, "e0")
	seen()
	release(acquire(s1, "g.0"))
	acquire(s1, "g.0")
	seen()
	closed := time.Now() // the sessions' ends free the last two
	want[len(want)-3].over, want[len(want)-1].over = closed, closed
	s2.Close(ctx)
	s1.Close(ctx)
	released := time.Now()

	deadline := time.Now().Add(10 * time.Second)
	var (
		grants []check.Grant
		blind  []tokenRange
	)
	for {
		grants, blind, err = gw.log.snapshot()
		if err != nil {
			t.Fatal(err)
		}
		accounted := 0
		for _, h := range want {
			// A grant seen must be seen to end; a blind range accounts
			// only for a grant not seen at all (a range may reach up to
			// the token of a grant seen after it).
			i := slices.IndexFunc(grants, func(g check.Grant) bool { return g.Name == h.name && g.Token == h.token })
			if (i >= 0 && grants[i].Ended) ||
				(i < 0 && slices.ContainsFunc(blind, func(r tokenRange) bool { return r.holds(h.token) })) {
				accounted++
			}
		}
		if accounted == len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer func() {
		if t.Failed() {
			t.Logf("grants %+v, blind ranges %v", grants, blind)
		}
	}()
	for i, h := range want {
		var g *check.Grant
		for i := range grants {
			if grants[i].Name == h.name && grants[i].Token == h.token {
				g = &grants[i]
			}
		}
		switch {
		case g == nil && i == 2 && slices.ContainsFunc(blind, func(r tokenRange) bool { return r.holds(h.token) }):
			// Released at once: too short for a watcher to be sure to see.
		case g == nil:
			t.Errorf("no grant of %s with token %d, and it is in no blind range", h.name, h.token)
		case g.Start.After(h.acquired):
			t.Errorf("grant %d of %s starts at %v, after Acquire returned at %v", h.token, h.name, g.Start, h.acquired)
		case !g.Ended:
			t.Errorf("grant %d of %s not seen to end", h.token, h.name)
		case g.End.Before(h.over):
			t.Errorf("grant %d of %s ends at %v, before it was released at %v", h.token, h.name, g.End, h.over)
		case g.Expired:
			t.Errorf("grant %d of %s marked expired: a watcher cannot know", h.token, h.name)
		case g.Start.IsZero() || g.Start.Before(h.acquired.Add(-time.Second)):
			t.Errorf("grant %d of %s starts at %v, long before Acquire returned at %v", h.token, h.name, g.Start, h.acquired)
		}
	}
	// The checkers see, through these grants, a task told its term valid
	// after the release, and not one told so before.
	first := want[0]
	early := check.Observation{Name: first.name, Token: first.token, Node: "n", What: "Valid", At: first.acquired.Round(0), Until: first.acquired.Round(0)}
	if errs := check.Observed([]check.Observation{early}, grants); len(errs) > 0 {
		t.Errorf("an observation during the grant: %v", errs)
	}
	late := early
	late.At, late.Until = released.Add(time.Second), released.Add(time.Second)
	if errs := check.Observed([]check.Observation{late}, grants); len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), "I4:") {
		t.Errorf("an observation a second after the release: %v, want one I4 violation", errs)
	}
}

// TestDialZKOnceThroughStartup: the grant watch's connection gets its
// session from a server that first closes every connection it accepts, as
// ZooKeeper does while it starts; it connects again until it has one.
func TestDialZKOnceThroughStartup(t *testing.T) {
	p, err := faultproxy.New(zktest.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Refuse()
	type dialed struct {
		closeConn func()
		err       error
	}
	done := make(chan dialed, 1)
	go func() {
		_, closeConn, err := dialZKOnce(p.Addr())
		done <- dialed{closeConn, err}
	}()
	for p.Accepted() == 0 {
		select {
		case d := <-done:
			t.Fatalf("dialZKOnce returned (%v) before it connected", d.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	p.Accept() // the server serves now
	d := <-done
	if d.err != nil {
		t.Fatalf("dialZKOnce: %v, after the first of %d connections was closed unserved", d.err, p.Accepted())
	}
	d.closeConn()
}
