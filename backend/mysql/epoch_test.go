package mysql_test

import (
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend/kit/dbclock"
	"github.com/simba-go/simba/internal/mytest"
)

// TestEpochAfterServerChange plays what a failover to a replica that
// missed the last commits shows the backend, on one server: the epoch
// row names another @@server_id than the server's (as a promoted replica's
// copy does), and the holder's candidacy is gone (a commit the replica
// never got). The first renewal there starts epoch 2 and, before it
// counts, ends the holding whose candidacy the server lacks; a client
// started after the change is granted the lease no sooner than 1.1 × TTL
// after it first heard from the server (the old holder may hold it by its
// own clock until then), with a token above every token of epoch 1; its
// grant settles the name in epoch 2; and an old primary back (the epoch
// row at 1 again) is refused.
//
// With SIMBA_PLANT=untimed-tokens the token is not in epoch 2's range;
// with SIMBA_PLANT=keep-chain-on-failover the new client is granted at
// once: both fail this test.
func TestEpochAfterServerChange(t *testing.T) {
	const ttl = 2 * time.Second
	dsn := mytest.DatabaseDSN(t)
	b1 := newBackendAt(t, dsn)
	a := open(t, b1, ttl)
	la, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	exec(t, b1, "DELETE FROM simba_candidacies WHERE name = 'x'")
	exec(t, b1, "UPDATE simba_meta SET srv = srv + 1000 WHERE k = 'epoch'")
	if _, err := a.KeepAlive(ctxT(t)); err != nil {
		t.Fatalf("the first renewal on the new server: %v", err)
	}
	select {
	case <-la.Lost():
	default:
		t.Fatal("the holding whose candidacy the new server lacks is still held after the first renewal there")
	}
	var epoch int64
	if err := b1.DB().QueryRowContext(ctxT(t), "SELECT v FROM simba_meta WHERE k = 'epoch'").Scan(&epoch); err != nil {
		t.Fatal(err)
	}
	if epoch != 2 {
		t.Fatalf("epoch %d after the server changed, want 2", epoch)
	}

	opened := time.Now()
	b2 := newBackendAt(t, dsn)
	c := open(t, b2, ttl)
	renew(t, c)
	lc, err := c.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	waited := time.Since(opened)
	if min := time.Duration(float64(ttl) * dbclock.TrustFactor); waited < min {
		t.Errorf("a client started after the server changed was granted %v after it opened its session, want at least %v (the old holder's term may run until then)", waited, min)
	}
	if lc.Token() < 1<<40 {
		t.Errorf("token %d granted in epoch 2, want one at or above %d (above every token of epoch 1)", lc.Token(), uint64(1)<<40)
	}
	var settled int64
	if err := b1.DB().QueryRowContext(ctxT(t), "SELECT settled_epoch FROM simba_lease_names WHERE name = 'x'").Scan(&settled); err != nil {
		t.Fatal(err)
	}
	if settled != 2 {
		t.Errorf("settled_epoch %d after the first grant in epoch 2, want 2", settled)
	}
	t.Logf("granted %v after the new client opened its session (TTL %v), token %d", waited.Round(time.Millisecond), ttl, lc.Token())

	exec(t, b1, "UPDATE simba_meta SET v = 1, srv = @@server_id WHERE k = 'epoch'")
	if _, err := c.KeepAlive(ctxT(t)); err == nil || !strings.Contains(err.Error(), "below epoch 2") {
		t.Errorf("a renewal on a server in epoch 1 after epoch 2: error %v, want the refusal of an old epoch", err)
	}
}
