package simba_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
)

// A lost lease ends its term's validity on the backend's own goroutine,
// before the backend goes on: a backend that hands the lease to another
// session right after closing Lost (the Kubernetes backend's hand-off to
// spec.preferredHolder withdraws the candidacy next) must find the term
// over by then, not only once the client's revoke has run on a goroutine
// of its own. Without it, the term was still valid when OnLost returned.
func TestLostEndsValidityBeforeOnLostReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		node := srv.Node("a")
		var (
			term                atomic.Pointer[simba.Term]
			checked, stillValid atomic.Bool
		)
		b := wrapSessions{Backend: node, wrap: func(s backend.Session) backend.Session {
			return &afterLostSession{Session: s, after: func() {
				if tm := term.Load(); tm != nil {
					stillValid.Store(tm.Valid())
					checked.Store(true)
				}
			}}
		}}
		c, err := simba.New(b)
		if err != nil {
			t.Fatal(err)
		}
		defer closeAll(t, c)
		started := make(chan struct{})
		_, err = c.Election("x").RunWhileLeader(func(ctx context.Context, tm *simba.Term) error {
			term.Store(tm)
			close(started)
			<-ctx.Done()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		await.For(t, started, closeBound, "no term")
		node.Expire()
		synctest.Wait()
		if !checked.Load() {
			t.Fatal("the lease's OnLost functions did not run after the session expired")
		}
		if stillValid.Load() {
			t.Fatal("the term was still valid when the client's OnLost function returned: a backend handing the lease on next would start a second valid term")
		}
	})
}

// afterLostSession wraps the leases it acquires so that after runs right
// after the client's OnLost function, on the backend's goroutine, and when
// the lease is lost even if the client withdrew its function first (a
// revoke for the session's end, seen before the lease's loss, does so):
// the term must not be valid then either.
type afterLostSession struct {
	backend.Session
	after func()
}

func (s *afterLostSession) Acquire(ctx context.Context, name string) (backend.Lease, error) {
	l, err := s.Session.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	n, ok := l.(backend.LostNotifier)
	if !ok {
		return l, nil
	}
	return &afterLostLease{Lease: l, n: n, after: s.after}, nil
}

type afterLostLease struct {
	backend.Lease
	n     backend.LostNotifier
	after func()
}

func (l *afterLostLease) OnLost(f func()) (stop func() bool) {
	stop = l.n.OnLost(f)
	l.n.OnLost(l.after) // after f, which it registered first; not withdrawn with it
	return stop
}
