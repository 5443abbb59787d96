package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"sync"
	"time"

	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kit/candidacy"
)

// Bells: a hand-off between processes without a poll.
//
// MySQL cannot notify another connection of a committed change, but it
// can wake one blocked on a named lock (GET_LOCK) when its holder frees it.
// So the holder of a lease also holds a named lock for it, its bell, on one
// connection per Backend kept for that, and frees the bell right after
// its release commits; a waiter in another process blocks on the bell
// (on a connection of the pool, for at most maxBellWait at a time), and
// when it gets it, frees it at once and reads the queue. A hand-off
// between processes then costs the release, the unlock and one read:
// about the cost of a hand-off within a process.
//
// The bell is a hint, never a lock: who holds the lease is what the rows
// say, and a waiter still wakes at the earliest expiry ahead of it. A
// bell lost with its connection (a KILL, a restart) or not yet taken by a
// new holder costs only latency: a waiter that finds the bell free while
// a holder is ahead reads the queue again after a backoff (25 ms doubling
// to a second), not at once, and looks at the bell again: the holder may
// have released between two of its waits. Named locks are per server:
// across a failover they are simply gone, and taken again on the new
// server.
//
// A named lock belongs to the connection, and a pooled connection
// outlives its use: a bell left on one would be held by nobody's
// holding, so that the next holder could not take it and the waiters of
// other Backends would block on it, deaf to releases, until the expiries
// ahead of them. So a connection that may hold a bell never goes back to
// the pool: a waiter frees the bell it got even when its wait is no
// longer wanted (see waitOnce), and a connection whose bells could not be
// freed is dropped, which frees them on the server.
//
// Blocked waits hold a connection each, so they are bounded per Backend
// (a quarter of the statement bound, at most 8) and each takes a
// statement slot (WithMaxRequests); a waiter beyond the bound reads its
// queue after a backoff of 25 ms doubling to a second, and tries again for
// a slot: a group's member taking over hundreds of partitions at once
// hears of most releases within a second, not at the holders' expiries. The bells' own connection is one more, which the statement
// bound leaves out. A lock's name is "simba:" and 40 hex digits
// of the SHA-256 of the database, the table prefix and the lease name
// (MySQL allows 64 characters).

// maxBellWait bounds one blocked GET_LOCK.
const maxBellWait = 30 * time.Second

// lockName is the named lock of kind ("bell", "schema") for key.
func lockName(kind, key string) string {
	sum := sha256.Sum256([]byte(kind + "\x00" + key))
	return "simba:" + hex.EncodeToString(sum[:20])
}

// bellName is the bell of lease name of b's tables.
func (b *Backend) bellName(name string) string {
	return lockName("bell", b.dbName+"\x00"+b.prefix+"\x00"+name)
}

// ringer is a holding whose bell the Backend holds; seen is set once the
// session was seen to hold it (the holding is made after its grant, which
// takes the bell).
type ringer struct {
	s     *session
	token uint64
	seen  bool
}

// bells holds the bells of this Backend's holdings, on a connection of
// its own, and serves its waiters' blocked waits.
type bells struct {
	b     *Backend
	waits chan struct{} // slots of blocked waits

	mu   sync.Mutex
	want map[string]ringer // the bells to hold, by lease name
	poke chan struct{}
	once sync.Once
}

func newBells(b *Backend) *bells {
	n := min(8, b.lim.Cap()/4)
	bl := &bells{b: b, want: map[string]ringer{}, poke: make(chan struct{}, 1)}
	if n > 0 {
		bl.waits = make(chan struct{}, n)
	}
	return bl
}

func (bl *bells) wake() {
	select {
	case bl.poke <- struct{}{}:
	default:
	}
}

// hold takes the bell of name for the holding (s, token).
func (bl *bells) hold(s *session, name string, token uint64) {
	bl.once.Do(func() { bl.b.wg.Go(bl.keep) })
	bl.mu.Lock()
	bl.want[name] = ringer{s: s, token: token}
	bl.mu.Unlock()
	bl.wake()
}

// free frees the bell of name if the holding (s, token) holds it.
func (bl *bells) free(s *session, name string, token uint64) {
	bl.mu.Lock()
	if r, ok := bl.want[name]; ok && r.s == s && r.token == token {
		delete(bl.want, name)
	}
	bl.mu.Unlock()
	bl.wake()
}

// freeSession frees the bells of s's holdings.
func (bl *bells) freeSession(s *session) {
	bl.mu.Lock()
	for name, r := range bl.want {
		if r.s == s {
			delete(bl.want, name)
		}
	}
	bl.mu.Unlock()
	bl.wake()
}

// wanted returns the bells to hold: those of holdings still held, or not
// yet seen held (a holding lost without a release, its candidacy deleted,
// drops its bell). It reads each session's holdings once.
func (bl *bells) wanted() map[string]bool {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	held := map[*session]map[candidacyKey]bool{}
	out := map[string]bool{}
	for name, r := range bl.want {
		hs, ok := held[r.s]
		if !ok {
			hs = holdingsOf(r.s)
			held[r.s] = hs
		}
		switch {
		case hs[candidacyKey{name, int64(r.token)}]:
			r.seen = true
			bl.want[name] = r
			out[name] = true
		case r.seen || r.s.Over():
			delete(bl.want, name)
		default:
			out[name] = true
		}
	}
	return out
}

// holdingsOf returns the holdings of s, by name and token (none once s is
// over).
func holdingsOf(s *session) map[candidacyKey]bool {
	out := map[candidacyKey]bool{}
	if s.Over() {
		return out
	}
	for _, h := range s.Holdings() {
		out[candidacyKey{h.Name(), int64(h.Token())}] = true
	}
	return out
}

// keep holds the wanted bells on a connection of its own, taking and
// freeing them as holdings come and go, until the Backend closes; a
// connection lost is made again and the bells taken again.
func (bl *bells) keep() {
	b := bl.b
	var conn *sql.Conn
	have := map[string]bool{}
	failures := 0
	defer func() {
		if conn != nil {
			dropConn(conn) // the server frees the named locks with it; the caller's pool (NewFromDB) stays open
		}
	}()
	tick := time.NewTicker(time.Second) // holdings lost without a release
	defer tick.Stop()
	for {
		retry := time.Duration(0)
		err := func() error {
			ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
			defer cancel()
			if conn == nil {
				c, err := b.db.Conn(ctx)
				if err != nil {
					return err
				}
				conn, have = c, map[string]bool{}
			}
			want := bl.wanted()
			for name := range have {
				if !want[name] {
					if _, err := conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", b.bellName(name)); err != nil {
						return err
					}
					delete(have, name)
				}
			}
			for name := range want {
				if have[name] {
					continue
				}
				var got sql.NullInt64
				if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", b.bellName(name)).Scan(&got); err != nil {
					return err
				}
				if got.Int64 == 1 {
					have[name] = true
				} else {
					// A waiter frees it in a moment.
					retry = 20 * time.Millisecond
				}
			}
			return nil
		}()
		if err != nil {
			if b.closed() {
				return
			}
			if conn != nil {
				dropConn(conn) // never back in the pool with bells held
				conn = nil
			}
			failures++
			retry = backoff.Wait(failures, 5*time.Second)
			b.log.Debug("simba/mysql: holding the bells", "err", err)
		} else {
			failures = 0
		}
		var after <-chan time.Time
		var timer *time.Timer
		if retry > 0 {
			timer = time.NewTimer(retry)
			after = timer.C
		}
		select {
		case <-b.ctx.Done():
		case <-bl.poke:
		case <-tick.C:
		case <-after:
		}
		if timer != nil {
			timer.Stop()
		}
		if b.closed() {
			return
		}
	}
}

// follow has the waiter w of s also wake when the bell of its lease
// rings: a goroutine, while w waits, blocks on the bell (see "Bells").
func (bl *bells) follow(w *candidacy.Waiter, s *session) {
	if bl.waits == nil {
		return
	}
	name := w.Name
	w.Follow("bell", func(f func()) (cancel func()) {
		ctx, stop := context.WithCancel(s.ctx)
		bl.b.wg.Go(func() { bl.await(ctx, name, f) })
		return stop
	})
}

// await calls f each time the bell of name is freed, until ctx ends.
func (bl *bells) await(ctx context.Context, name string, f func()) {
	b := bl.b
	lock := b.bellName(name)
	pause := time.Duration(0)
	for ctx.Err() == nil {
		if pause > 0 {
			backoff.Sleep(ctx, pause)
			if ctx.Err() != nil {
				return
			}
		}
		select {
		case bl.waits <- struct{}{}:
		default:
			// No slot for a blocked wait: read the queue after a backoff
			// (25 ms doubling to a second), and try again for a slot.
			pause = min(max(2*pause, 25*time.Millisecond), time.Second)
			f()
			continue
		}
		if !b.lim.TryTake() {
			<-bl.waits
			pause = min(max(2*pause, 25*time.Millisecond), time.Second)
			f()
			continue
		}
		rang, blocked, err := bl.waitOnce(ctx, lock)
		b.lim.Free()
		<-bl.waits
		switch {
		case rang:
			// Even when the bell could not be freed (its connection is
			// dropped, which frees it): the holder has released.
			pause = 0
			f()
		case err != nil:
			pause = min(max(2*pause, 25*time.Millisecond), time.Second)
		case !blocked:
			// Nobody holds the bell: the holder has released (between two
			// waits of this waiter's), has not taken it yet, or lost its
			// connection. The waiter reads the queue, and the bell is
			// looked at again after a backoff.
			pause = min(max(2*pause, 25*time.Millisecond), time.Second)
			f()
		}
	}
}

// waitOnce blocks on lock for up to maxBellWait, and reports whether it
// got it (rang) and whether it had to wait for it (blocked: someone held
// it).
//
// A bell it got is freed whatever ctx says by then: the waiter may have
// been granted meanwhile by another route (a change of its own Backend),
// which ends ctx between the GET_LOCK's answer and the RELEASE_LOCK. A
// RELEASE_LOCK on an ended ctx is never sent, and the connection, back in
// the pool, would keep the bell: its next holder could not take it, and
// the waiters of other Backends would block on it, deaf to the releases,
// until the expiries ahead of them. So the bell is freed within a
// timeout of its own, and a connection that may still hold it (the
// GET_LOCK's answer lost, the RELEASE_LOCK failed) is dropped, never put
// back in the pool: the server frees its named locks with it.
func (bl *bells) waitOnce(ctx context.Context, lock string) (rang, blocked bool, err error) {
	conn, err := bl.b.db.Conn(ctx)
	if err != nil {
		return false, false, err
	}
	defer conn.Close()
	var used sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", lock).Scan(&used); err != nil {
		return false, false, err
	}
	if !used.Valid {
		return false, false, nil
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", lock, int(maxBellWait/time.Second)).Scan(&got); err != nil {
		dropConn(conn) // the server may have granted it
		return false, true, err
	}
	if got.Int64 != 1 {
		return false, true, nil
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bellFreeTimeout)
	defer cancel()
	if _, err := conn.ExecContext(fctx, "DO RELEASE_LOCK(?)", lock); err != nil {
		dropConn(conn)
		return true, true, err
	}
	return true, true, nil
}

// bellFreeTimeout bounds the RELEASE_LOCK of a bell a waiter got.
const bellFreeTimeout = 5 * time.Second

// dropConn closes conn and keeps it out of the pool (database/sql puts
// back a connection unless it is reported bad), with the named locks it
// may hold: the server frees them when the connection ends.
func dropConn(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}
