package core_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/internal/scenario"
	"github.com/simba-go/simba/tests/internal/etcdclient"
)

// On a real etcd server, in real time: Client.Shutdown hands off
// gracefully. The leader's run cleans up for a while after its ctx is
// cancelled; Shutdown returns once it has exited, the lease is released and
// the session's lease is revoked on the server; the other node's term
// begins only after the run exited, with a higher token.
func TestEtcdShutdownHandsOff(t *testing.T) {
	if testing.Short() {
		t.Skip("real time on a real etcd server: skipped with -short")
	}
	const cleanUp = 300 * time.Millisecond
	srv := etcdtest.Start(t)
	prefix := "/" + t.Name() + "/"
	h := scenario.NewHistory()
	var mu sync.Mutex
	var exited time.Time
	start := func(name string) *simba.Client {
		b, err := etcd.New(srv.Endpoints(), etcd.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Errorf("backend of %s: Close: %v", name, err)
			}
		})
		c, err := simba.New(b, simba.WithTTL(etcdGroupTTL), simba.WithEventHandler(h.Event), simba.WithLogger(scenario.Logger(t, name)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err, late := await.Within(await.Returned(c.Close), scenario.GroupWait, "%s: Close did not return", name); late != nil {
				t.Error(late)
			} else if err != nil {
				t.Errorf("%s: Close: %v", name, err)
			}
		})
		ctx, cancel := context.WithTimeout(t.Context(), scenario.GroupWait)
		defer cancel()
		if err := c.Ready(ctx); err != nil {
			t.Fatalf("%s: no session: %v", name, err)
		}
		return c
	}
	a, z := start("a"), start("z")
	leading := make(chan struct{})
	_, err := a.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		h.SawTerm("a", term)
		close(leading)
		<-ctx.Done()
		time.Sleep(cleanUp) // a graceful task's clean-up, within its term
		mu.Lock()
		exited = time.Now()
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	await.For(t, leading, scenario.GroupWait, "a did not lead")
	zLeads := make(chan struct{})
	_, err = z.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		h.SawTerm("z", term)
		close(zLeads)
		<-ctx.Done()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	session := a.SessionID()

	ctx, cancel := context.WithTimeout(t.Context(), scenario.GroupWait)
	defer cancel()
	stopAt := time.Now()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatalf("a's Shutdown: %v", err)
	}
	returned := time.Now()
	mu.Lock()
	ranUntil := exited
	mu.Unlock()
	switch {
	case ranUntil.IsZero():
		t.Fatal("Shutdown returned before a's run exited")
	case ranUntil.Sub(stopAt) < cleanUp:
		t.Errorf("a's run exited %v after the stop, before its clean-up of %v", ranUntil.Sub(stopAt), cleanUp)
	}
	t.Logf("Shutdown returned %v after the stop; the run exited after %v", returned.Sub(stopAt), ranUntil.Sub(stopAt))
	if a.Health().State != simba.SessionClosed {
		t.Errorf("a's state %q after Shutdown, want %q", a.Health().State, simba.SessionClosed)
	}

	// The session's lease is gone on the server: Shutdown ended it there.
	cli := etcdclient.New(t, srv)
	leases, err := cli.Leases(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	open := map[string]bool{}
	for _, l := range leases.Leases {
		open[fmt.Sprintf("%016x", int64(l.ID))] = true // the etcd backend's session IDs
	}
	if open[session] {
		t.Errorf("a's session %s still open on the server after Shutdown", session)
	}
	if !open[z.SessionID()] {
		t.Errorf("z's session %s not among the server's leases %v: the check above is blind", z.SessionID(), open)
	}

	await.For(t, zLeads, scenario.GroupWait, "z did not take over after a's Shutdown")
	terms := h.Terms()
	if len(terms) != 2 || h.Owner(terms[1]) != "z" {
		t.Fatalf("terms %v, want a's then z's", terms)
	}
	if terms[1].Token() <= terms[0].Token() {
		t.Errorf("z's token %d not above a's %d", terms[1].Token(), terms[0].Token())
	}
	if terms[1].Start().Before(ranUntil) {
		t.Errorf("z's term began %v before a's run exited", ranUntil.Sub(terms[1].Start()))
	}
	scenario.CloseAll(t, scenario.GroupWait, z)
	var ended []string
	for _, e := range scenario.EventsOf[simba.HandedOff](h) {
		if e.Election == "e" && e.Token == terms[0].Token() {
			ended = append(ended, "handed off")
			if !e.Released {
				t.Errorf("a's hand-off did not release the lease: %+v", e)
			}
		}
	}
	if len(ended) != 1 {
		t.Errorf("a's term had %d HandedOff events, want 1", len(ended))
	}
}
