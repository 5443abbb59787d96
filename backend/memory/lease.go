package memory

import (
	"context"
	"fmt"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/lost"
)

// lease is one candidacy of a session for a lease name (see
// backend.Session.Acquire) and, once it is the head of its queue, its
// holding. It implements [backend.Lease].
type lease struct {
	s     *session
	name  string
	token uint64 // the server's counter at registration
	grant int    // index of its Grant in Backend.history; -1 while it waits

	told       chan struct{} // closed when the node learns the candidacy holds; guarded by s.b.mu
	toldClosed bool

	sig *lost.Signal // Lost, closed (by closeLost) with s.b.mu held
}

// Name returns the lease name.
func (l *lease) Name() string { return l.name }

// Token returns the fencing token of this holding.
func (l *lease) Token() uint64 { return l.token }

// Lost is closed when the node learns that the holding ended other than by
// its own Release: the session expired or was closed, or acquired the name
// again. Like Done it is withheld while the node is partitioned and never
// closed after a crash.
func (l *lease) Lost() <-chan struct{} { return l.sig.C() }

// Release ends the holding if it is still the current one (same token) and
// returns an error wrapping [backend.ErrNotHeld] otherwise.
func (l *lease) Release(ctx context.Context) error {
	return l.ReleaseWithRecords(ctx, nil)
}

// ReleaseWithRecords writes records fenced by the holding and ends it,
// atomically: the optional [backend.RecordReleaser] capability.
func (l *lease) ReleaseWithRecords(ctx context.Context, records []backend.Record) error {
	for _, r := range records {
		if err := checkRecord(r.Key, r.Value); err != nil {
			return err
		}
	}
	s, b := l.s, l.s.b
	return s.n.exchange(ctx, opRelease, s, func() (func(), error) {
		if !s.live {
			return nil, sessionDone(opRelease)
		}
		if b.leases[l.name] != l {
			return nil, errNotHeld(l)
		}
		for _, r := range records {
			if cur, ok := b.records[r.Key]; ok && cur.token > l.token {
				continue // written by a newer holder
			}
			b.recVersion++
			b.records[r.Key] = &record{value: clone(r.Value), version: b.recVersion, token: l.token}
			b.recordChanged(r.Key)
		}
		b.endHolding(l, reasonReleased, false)
		return nil, nil
	})
}

// OnLost calls f when Lost is closed (at once if it is), after the
// functions registered before it: the optional [backend.LostNotifier]
// capability. f runs with the server's lock held and must not block.
func (l *lease) OnLost(f func()) (stop func() bool) {
	b := l.s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	return l.sig.OnLost(f)
}

// closeLost closes Lost, once, and calls the OnLost functions. b.mu is held.
func (l *lease) closeLost() { l.sig.Lose() }

// closeTold tells the node that the candidacy holds the lease, once.
// b.mu is held.
func (l *lease) closeTold() {
	if !l.toldClosed {
		l.toldClosed = true
		close(l.told)
	}
}

// errNotHeld is the error of Release when l is no longer the current holding.
func errNotHeld(l *lease) error {
	return fmt.Errorf("simba/memory: release %q (token %d): %w", l.name, l.token, backend.ErrNotHeld)
}
