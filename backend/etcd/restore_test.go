package etcd_test

import (
	"errors"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/plant"
)

// restoreRounds is how many terms the scenario grants between the backup
// and the restore: the revisions the restore takes back.
const restoreRounds = 5

// restored is what restoreScenario saw.
type restored struct {
	terms     []check.Term // every term granted, in order, the one after the restore last
	highest   uint64       // the highest token granted before the restore
	keepAlive error        // the error of the KeepAlive after the restore, if first
	acquire   error        // the error of the Acquire after the restore
	open      error        // the error of an Open after it
	ended     bool         // the session was over after the Acquire
	later     uint64       // the token granted after the restore to a backend started after it
}

// restoreScenario grants terms of one lease on one session, takes a
// backup of the server (stopped, its data directory copied), grants
// restoreRounds more, then restores the backup without bumping the
// revision (stopped, its data directory replaced by the copy) and
// acquires the lease again on the same session, after renewing it once if
// keepAliveFirst; then Opens another session on the same backend; then
// acquires another lease on a backend started after the restore.
func restoreScenario(t *testing.T, keepAliveFirst bool) restored {
	return restoreScenarioBump(t, keepAliveFirst, 0)
}

// restoreScenarioBump is restoreScenario, with a restore by etcdutl with
// --bump-revision bump --mark-compacted when bump is positive.
func restoreScenarioBump(t *testing.T, keepAliveFirst bool, bump int64) restored {
	srv := startServer(t)
	prefix := testPrefix(t)
	logger := etcd.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	b := newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix), logger)
	s := open(t, b, 30*time.Second) // not renewed: a TTL that outlasts the test
	var r restored
	grant := func() error {
		start := time.Now()
		l, err := s.Acquire(op(t), "x")
		if err != nil {
			return err
		}
		r.terms = append(r.terms, check.Term{Name: "x", Token: l.Token(), Start: start, End: time.Now()})
		return l.Release(op(t))
	}
	if err := grant(); err != nil {
		t.Fatalf("Acquire before the backup: %v", err)
	}
	backup := filepath.Join(t.TempDir(), "backup")
	srv.Stop()
	if err := srv.Backup(backup); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	for i := range restoreRounds {
		if err := grant(); err != nil {
			t.Fatalf("Acquire %d after the backup: %v", i+1, err)
		}
	}
	r.highest = r.terms[len(r.terms)-1].Token
	srv.Stop()
	restore := srv.RestoreBackup
	if bump > 0 {
		restore = func(src string) error { return srv.RestoreSnapshot(src, bump) }
	}
	if err := restore(backup); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if keepAliveFirst {
		_, r.keepAlive = s.KeepAlive(op(t))
	}
	r.acquire = grant()
	r.ended = closed(s.Done())
	if s2, err := b.Open(op(t), backend.SessionOptions{TTL: 30 * time.Second}); err != nil {
		r.open = err
	} else {
		_ = s2.Close(op(t))
	}

	// A backend started after the restore never saw the revisions it took
	// back: it cannot tell.
	b2 := newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix), logger)
	l, err := open(t, b2, 30*time.Second).Acquire(op(t), "y")
	if err != nil {
		t.Fatalf("Acquire on a backend started after the restore: %v", err)
	}
	r.later = l.Token()
	return r
}

// firstCalls names the call made first after the restore: an Acquire,
// or a renewal (a holder that only renews).
var firstCalls = map[bool]string{false: "Acquire", true: "KeepAlive"}

// TestRestoreWithoutBumpRefused restores the server from a backup without
// bumping the revision (etcd#16028): the backend that saw the revisions
// the restore took back must refuse the next call, an Acquire or a
// renewal, with an error that wraps ErrRestored and ErrSessionDone and
// names the revisions; end its session; refuse the Acquire after a
// refused renewal, and Open; and the tokens it granted stay strictly
// increasing. TestRestoreWithoutBumpCaughtWithoutCheck plants the check
// out.
func TestRestoreWithoutBumpRefused(t *testing.T) {
	for _, keepAliveFirst := range []bool{false, true} {
		t.Run(firstCalls[keepAliveFirst], func(t *testing.T) {
			r := restoreScenario(t, keepAliveFirst)
			for _, err := range check.Terms(r.terms) {
				t.Error(err)
			}
			if r.acquire == nil {
				t.Fatalf("Acquire after the restore granted token %d (highest before: %d): want it refused", r.terms[len(r.terms)-1].Token, r.highest)
			}
			first, err := "Acquire", r.acquire
			if keepAliveFirst {
				first, err = "KeepAlive", r.keepAlive
				if err == nil {
					t.Fatal("KeepAlive after the restore succeeded: want it refused")
				}
			}
			t.Logf("%s after the restore: %v", first, err)
			for what, err := range map[string]error{first: err, "Acquire": r.acquire} {
				if !errors.Is(err, etcd.ErrRestored) || !errors.Is(err, backend.ErrSessionDone) {
					t.Errorf("%s after the restore: error %v, want one wrapping ErrRestored and ErrSessionDone", what, err)
				}
			}
			m := revisions.FindStringSubmatch(err.Error())
			if m == nil || !strings.HasPrefix(err.Error(), "simba/etcd: ") {
				t.Errorf("%s after the restore: error %q, want one that starts with simba/etcd: and names the revisions", first, err)
			} else if at, seen := atoi(t, m[1]), atoi(t, m[2]); at >= seen || seen < r.highest {
				t.Errorf("%s after the restore: error %q names revision %d below %d, want one below a revision at or above %d, the highest token granted", first, err, at, seen, r.highest)
			}
			if !r.ended {
				t.Error("the session was not over after the refusal")
			}
			if !errors.Is(r.open, etcd.ErrRestored) {
				t.Errorf("Open after the refusal: error %v, want one wrapping ErrRestored", r.open)
			}
			// The documented limit: see "etcd restored from a backup".
			t.Logf("a backend started after the restore was granted token %d (highest before the restore: %d)", r.later, r.highest)
		})
	}
}

// TestRestoreWithoutBumpCaughtWithoutCheck plants the check out
// (etcd-trust-revision): the same restore must then grant a token at or
// below one already granted, which check.Terms reports, or
// TestRestoreWithoutBumpRefused proves nothing.
func TestRestoreWithoutBumpCaughtWithoutCheck(t *testing.T) {
	plant.ForTest(t, "etcd-trust-revision")
	for _, keepAliveFirst := range []bool{false, true} {
		t.Run(firstCalls[keepAliveFirst], func(t *testing.T) {
			r := restoreScenario(t, keepAliveFirst)
			if r.keepAlive != nil || r.acquire != nil {
				t.Fatalf("with the check planted out, a call after the restore failed: KeepAlive %v, Acquire %v", r.keepAlive, r.acquire)
			}
			errs := check.Terms(r.terms)
			if len(errs) == 0 {
				t.Fatalf("with the check planted out, the restore granted token %d after %d: the invariant check saw nothing", r.terms[len(r.terms)-1].Token, r.highest)
			}
			for _, err := range errs {
				t.Logf("caught: %v", err)
			}
		})
	}
}

// TestRestoreWithBumpAccepted restores the same backup as
// TestRestoreWithoutBumpRefused, the way etcd's documentation asks:
// etcdutl snapshot restore --bump-revision --mark-compacted, with the
// server's own name, peer URL and cluster token. The cluster is the same
// (its ID is made of those) and its revisions are above every one seen:
// the backend that saw the revisions the restore took back goes on, its
// session's lease restored with the backup, and every token granted after
// the restore, by it or by a backend started after it, is above every
// token granted before.
func TestRestoreWithBumpAccepted(t *testing.T) {
	const bump = 1_000_000
	for _, keepAliveFirst := range []bool{false, true} {
		t.Run(firstCalls[keepAliveFirst], func(t *testing.T) {
			r := restoreScenarioBump(t, keepAliveFirst, bump)
			if r.keepAlive != nil || r.acquire != nil || r.open != nil {
				t.Fatalf("after a restore with --bump-revision: KeepAlive %v, Acquire %v, Open %v; want them to succeed", r.keepAlive, r.acquire, r.open)
			}
			if r.ended {
				t.Error("the session was over after the restore")
			}
			for _, err := range check.Terms(r.terms) {
				t.Error(err)
			}
			after := r.terms[len(r.terms)-1].Token
			if after <= r.highest || r.later <= r.highest {
				t.Errorf("tokens after the restore %d (same backend) and %d (a backend started after it), want both above %d, the highest before", after, r.later, r.highest)
			}
			t.Logf("tokens: highest before the restore %d; after it %d (same backend), %d (a new backend)", r.highest, after, r.later)
		})
	}
}

// revisions finds the revisions in the refusal's error.
var revisions = regexp.MustCompile(`answered at revision (\d+) .*below revision (\d+) `)

func atoi(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
