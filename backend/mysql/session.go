package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kit/candidacy"
	"github.com/simba-go/simba/backend/kit/dbclock"
	"github.com/simba-go/simba/backend/kit/limit"
	"github.com/simba-go/simba/backend/kit/view"
	"github.com/simba-go/simba/backend/kit/wake"
	"github.com/simba-go/simba/internal/plant"
)

var _ backend.Session = (*session)(nil)

// session is one row of the sessions table. It renews only when the
// caller calls KeepAlive (one UPDATE, whatever it holds); a monitor
// goroutine reads the row when the caller's renewals stop past the TTL
// (to close Done) and when the backend sees a change of a name it holds
// (to close Lost).
type session struct {
	*candidacy.Session
	*view.Reader

	b   *Backend
	id  int64
	sid string
	// grantPrefix is SessionOptions.GrantRecords: the records a grant's
	// queue read lists (see ahead).
	grantPrefix string

	ctx   context.Context
	check chan struct{} // wakes the monitor: re-read the held candidacies
	renew chan struct{} // wakes the monitor: the deadline moved

	mu       sync.Mutex
	ttl      time.Duration
	deadline time.Time // start of the last successful renewal (or Open) + ttl
	deleting bool      // deleteAtDeadline has run
	// older are the candidacies of names not settled in the epoch of
	// their registration: their grant is held back (see holdBack).
	older map[candidacyKey]bool
	// known are the candidacies this session registered and has neither
	// withdrawn nor released; epoch is the epoch of its last renewal, and
	// recheck is set when a renewal came from another one: the monitor
	// then deletes the candidacies the new server has that the session no
	// longer knows.
	known   map[candidacyKey]bool
	epoch   int64
	recheck bool

	// regs numbers the session's registrations (see queue.Register), and
	// registering counts those in flight: a read of the candidacies takes
	// one it does not know for an orphan only when none was in flight
	// while it ran (see look).
	regs, registering atomic.Int64
}

func newSession(b *Backend, id int64, ttl time.Duration, start time.Time, epoch int64) *session {
	s := &session{
		b: b, id: id, sid: strconv.FormatInt(id, 10),
		check: make(chan struct{}, 1), renew: make(chan struct{}, 1),
		ttl: ttl, deadline: start.Add(ttl), older: map[candidacyKey]bool{}, known: map[candidacyKey]bool{}, epoch: epoch,
	}
	s.Session = candidacy.New(b.ctx, candidacy.Config{
		Prefix: "simba/mysql", ID: s.sid, Logger: b.log, WaitGroup: &b.wg, TTL: s.TTL,
		Queue: queue{s},
	})
	s.ctx = s.Context()
	s.Reader = view.NewReader("simba/mysql", s.ctx, s.OverErr, source{b})
	b.wg.Go(s.monitor)
	return s
}

// ID is the session row's id, in decimal.
func (s *session) ID() string { return s.sid }

// TTL is the granted TTL: the one requested, rounded to milliseconds.
func (s *session) TTL() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ttl
}

// doneErr ends the session and returns the error of op on a session the
// server says is over.
func (s *session) doneErr(op string) error {
	s.end()
	return fmt.Errorf("simba/mysql: %s: session %s is over on the server: %w", op, s.sid, backend.ErrSessionDone)
}

// end ends the session for this client and frees its bells.
func (s *session) end() {
	if s.End() {
		s.b.hub.sessionEnded(s)
	}
}

// fail wraps an error of the pool or the server for op, ctx being the
// caller's.
func (s *session) fail(ctx context.Context, op string, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("simba/mysql: %s: %w", op, context.Cause(ctx))
	case errors.Is(err, limit.ErrNotSent) && s.b.closed():
		return fmt.Errorf("simba/mysql: %s: %w", op, backend.ErrClosed)
	case errors.Is(err, limit.ErrNotSent) && s.ctx.Err() != nil:
		return fmt.Errorf("simba/mysql: %s: session %s: %w", op, s.sid, backend.ErrSessionDone)
	}
	return s.b.connErr(op, err)
}

// KeepAlive extends the session by its TTL from the statement's start, by
// the database's clock, only if it is still alive then: an expired
// session never comes back. In the epoch of its last renewal it is one
// UPDATE, which also checks that the epoch and the server are unchanged
// and returns, through LAST_INSERT_ID, the new expiry (which dates the
// statement by the database's clock) and the number of the session's
// candidacies modulo countSpan: when that is not the number the session
// knows of, a candidacy may have been deleted by someone else, and the
// monitor reads them (MySQL has no notification of it). When that UPDATE changes nothing, the session
// reads why on one connection: another epoch (the first renewal there
// ends the holdings whose candidacy the new server lacks before it
// counts), or the session over. It goes around the bound on statements.
func (s *session) KeepAlive(ctx context.Context) (time.Duration, error) {
	const op = "keep-alive"
	if err := s.OverErr(op); err != nil {
		return 0, err
	}
	s.mu.Lock()
	was, ttl := s.epoch, s.ttl
	s.mu.Unlock()
	start := time.Now()
	t := s.b.t
	res, err := s.b.db.ExecContext(ctx, `UPDATE `+t.sessions+` SET expires_us = LAST_INSERT_ID((`+nowUS+` + ttl_us) * `+countSpanSQL+`
			+ (SELECT COUNT(*) FROM `+t.candidacies+` c WHERE c.session = ?) % `+countSpanSQL+`) DIV `+countSpanSQL+`
		WHERE id = ? AND expires_us > `+nowUS+` AND (SELECT m.v FROM `+t.meta+` m WHERE m.k = 'epoch' AND m.srv = @@server_id) = ?`, s.id, s.id, was)
	if err != nil {
		return 0, s.fail(ctx, op, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		v, err := res.LastInsertId()
		if err != nil {
			return 0, s.fail(ctx, op, err)
		}
		db := time.UnixMicro(v / countSpan).Add(-ttl)
		if err := s.b.noteClock(op, start, time.Now(), db, was); err != nil {
			return 0, err
		}
		s.mu.Lock()
		known := len(s.known)
		s.mu.Unlock()
		if v%countSpan != int64(known%countSpan) {
			// The server has another number of candidacies of this
			// session than it knows of: one deleted by someone else (an
			// operator), or a registration or withdrawal in flight. The
			// monitor reads them and ends the holdings whose candidacy is
			// gone.
			s.poke()
		}
		s.renewed(start, ttl)
		return ttl, nil
	}
	return s.keepAliveSlow(ctx, op, start, was, ttl)
}

// keepAliveSlow renews the session when the one-statement renewal changed
// nothing: on one connection, it samples the epoch (bumping it on a new
// server), renews, and in another epoch than was reads the session's
// candidacies there.
func (s *session) keepAliveSlow(ctx context.Context, op string, start time.Time, was int64, ttl time.Duration) (time.Duration, error) {
	t := s.b.t
	var (
		smp  sample
		n    int64
		have map[candidacyKey]bool
	)
	err := s.b.onConn(ctx, func(conn *sql.Conn) error {
		var err error
		if smp, err = s.b.sampleOn(ctx, conn, op, start); err != nil {
			return err
		}
		res, err := conn.ExecContext(ctx, `UPDATE `+t.sessions+` SET expires_us = `+nowUS+` + ttl_us WHERE id = ? AND expires_us > `+nowUS, s.id)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		if n == 1 && smp.epoch != was {
			have, err = s.candidacies(ctx, conn)
		}
		return err
	})
	if err != nil {
		if epochErr(err) {
			return 0, err
		}
		return 0, s.fail(ctx, op, err)
	}
	if n == 0 {
		// The UPDATE took the row's lock (none: the row is gone): this
		// expiry is final, whatever clearExpired finds.
		_, _ = s.clearExpired(ctx)
		return 0, s.doneErr(op)
	}
	if smp.epoch != was {
		// The first renewal on a new server: before it counts, the
		// holdings granted in an older epoch whose candidacy the new
		// server lacks end.
		s.loseMissing(smp.epoch, have)
		s.mu.Lock()
		s.epoch, s.recheck = smp.epoch, true
		s.mu.Unlock()
		wake.Poke(s.check)
	}
	s.renewed(start, ttl)
	return ttl, nil
}

// countSpan: KeepAlive's LAST_INSERT_ID is expiry × countSpan + the number
// of candidacies modulo countSpan (expiries in microseconds fit until the
// year 2255).
const (
	countSpan    = 1024
	countSpanSQL = "1024"
)

// epochErr reports whether err is the refusal of an old epoch (see
// epochs.note): already logged and worded.
func epochErr(err error) bool {
	var ee *epochError
	return errors.As(err, &ee)
}

// renewed moves the deadline after a renewal that started at start.
func (s *session) renewed(start time.Time, ttl time.Duration) {
	s.mu.Lock()
	if d := start.Add(ttl); d.After(s.deadline) {
		s.deadline = d
	}
	s.mu.Unlock()
	wake.Poke(s.renew)
}

// candidacies reads the session's candidacies on conn.
func (s *session) candidacies(ctx context.Context, conn *sql.Conn) (map[candidacyKey]bool, error) {
	rows, err := conn.QueryContext(ctx, "SELECT name, token FROM "+s.b.t.candidacies+" WHERE session = ?", s.id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	have := map[candidacyKey]bool{}
	for rows.Next() {
		var k candidacyKey
		if err := rows.Scan(&k.name, &k.token); err != nil {
			return nil, err
		}
		have[k] = true
	}
	return have, rows.Err()
}

// clearExpired deletes the session's row if it has expired, within
// withdrawTimeout, and reports whether the session is over for good: its
// row deleted now, or gone already. Its candidacies go with the row (ON
// DELETE CASCADE).
//
// Before the session's own deadline the row is not deleted, only locked
// and read: the database's clock saying it expired that early has stepped
// forward (see package dbclock), and the deletion would free the
// session's leases while the core may still count its terms valid. Past
// the deadline it is deleted. Either way an expired row ends the session
// for this client.
func (s *session) clearExpired(ctx context.Context) (over bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
	defer cancel()
	t := s.b.t
	s.mu.Lock()
	early := time.Now().Before(s.deadline) && !plant.Is(plant.TrustDBClock)
	s.mu.Unlock()
	if early {
		// A locking read, in a statement of its own: it waits for a
		// renewal in flight, whose lock it then sees released.
		err = s.b.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(expires_us <= `+nowUS+`), TRUE) FROM `+t.sessions+` WHERE id = ? FOR UPDATE`, s.id).Scan(&over)
	} else {
		err = s.b.onConn(ctx, func(conn *sql.Conn) error {
			res, err := conn.ExecContext(ctx, `DELETE FROM `+t.sessions+` WHERE id = ? AND expires_us <= `+nowUS, s.id)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n > 0 {
				over = true
				return nil
			}
			var one int
			err = conn.QueryRowContext(ctx, `SELECT 1 FROM `+t.sessions+` WHERE id = ?`, s.id).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				over = true
				return nil
			}
			return err
		})
	}
	if err != nil {
		s.b.log.Debug("simba/mysql: deleting the expired session's row", "session", s.sid, "err", err)
		return false, err
	}
	if over {
		s.b.hub.changedSession(s)
	}
	if over && early {
		s.deleteAtDeadline()
	}
	return over, nil
}

// deleteAtDeadline deletes the session's expired row once the session's
// own deadline has passed (once per session; the backend's Close stops
// it).
func (s *session) deleteAtDeadline() {
	s.mu.Lock()
	scheduled := s.deleting
	s.deleting = true
	wait := time.Until(s.deadline) + expiryMargin
	s.mu.Unlock()
	if scheduled || s.b.closed() {
		return
	}
	s.b.wg.Go(func() {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-s.b.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(s.b.ctx, withdrawTimeout)
		defer cancel()
		if _, err := s.b.db.ExecContext(ctx, "DELETE FROM "+s.b.t.sessions+" WHERE id = ? AND expires_us <= "+nowUS, s.id); err != nil {
			s.b.log.Debug("simba/mysql: deleting the expired session's row past its deadline", "session", s.sid, "err", err)
			return
		}
		s.b.hub.changedSession(s)
	})
}

// Close deletes the session's row: its candidacies and memberships go
// with it (ON DELETE CASCADE).
func (s *session) Close(ctx context.Context) error {
	if s.Over() {
		return nil
	}
	_, err := s.b.db.ExecContext(ctx, "DELETE FROM "+s.b.t.sessions+" WHERE id = ?", s.id)
	s.b.hub.changedSession(s)
	s.end()
	if err != nil {
		return s.fail(ctx, "close", err)
	}
	return nil
}

// expiryMargin is how long past the session's local deadline the monitor
// reads its row (the server's expiry is later than the local deadline).
const expiryMargin = 20 * time.Millisecond

// monitor reads the session's row when its renewals stopped past the
// deadline, and when a held lease's candidacy may have changed.
func (s *session) monitor() {
	failures, agains := 0, 0
	var retry <-chan time.Time
	for {
		s.mu.Lock()
		wait := time.Until(s.deadline) + expiryMargin
		s.mu.Unlock()
		t := time.NewTimer(wait)
		why := ""
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-s.renew:
			t.Stop()
			continue
		case <-s.check:
			why = "check"
		case <-retry:
			why = "retry"
		case <-t.C:
			why = "deadline"
		}
		t.Stop()
		retry = nil
		remaining, again, err := s.look()
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			failures++
			retry = time.After(backoff.Wait(failures, s.TTL()/3))
			continue
		}
		failures = 0
		if again {
			// Sooner than a failure's backoff, but growing: a read
			// that cannot tell, again and again (registrations in
			// flight all the time), slows down to a third of the TTL.
			agains++
			retry = time.After(backoff.Step(agains, lookAgain, s.TTL()/3))
		} else {
			agains = 0
		}
		if remaining <= 0 {
			if over, err := s.clearExpired(s.ctx); over || err != nil && s.ctx.Err() != nil {
				s.end()
				return
			}
			failures++
			retry = time.After(backoff.Wait(failures, s.TTL()/3))
			continue
		}
		if why == "deadline" {
			s.mu.Lock()
			if d := time.Now().Add(remaining); d.After(s.deadline) {
				s.deadline = d
			}
			s.mu.Unlock()
		}
	}
}

// lookAgain is how soon the monitor reads again when a read could not
// tell (see look).
const lookAgain = 20 * time.Millisecond

// look reads the session's row and its candidacies: it closes Lost of the
// held leases whose candidacy is gone, and returns how long the session
// has left by the database's clock (0 when gone or expired). again asks
// for another read soon: a holding granted while this one was on its way
// was missing from it (see candidacy.Session.LoseMissing), or, after a
// failover, a registration in flight kept it from telling the orphans.
func (s *session) look() (left time.Duration, again bool, err error) {
	ctx, cancel := context.WithTimeout(s.ctx, lookTimeout)
	defer cancel()
	t := s.b.t
	var (
		gone    bool
		have    map[candidacyKey]bool
		orphans []candidacyKey
	)
	mark, regs := s.Mark(), s.regs.Load()
	sent := time.Now()
	err = s.b.onConn(ctx, func(conn *sql.Conn) error {
		if _, err := s.b.sampleOn(ctx, conn, "reading the session", sent); err != nil {
			return err
		}
		var us int64
		err := conn.QueryRowContext(ctx, `SELECT expires_us - `+nowUS+` FROM `+t.sessions+` WHERE id = ?`, s.id).Scan(&us)
		if errors.Is(err, sql.ErrNoRows) {
			gone = true
			return nil
		}
		if err != nil {
			return err
		}
		if left = time.Duration(us) * time.Microsecond; left <= 0 {
			return nil
		}
		if have, err = s.candidacies(ctx, conn); err != nil {
			return err
		}
		s.mu.Lock()
		if s.recheck {
			// A registration in flight while the read ran may have
			// committed a candidacy it does not know yet.
			if s.registering.Load() > 0 || s.regs.Load() != regs {
				again = true
			} else {
				s.recheck = false
				for k := range have {
					if !s.known[k] {
						orphans = append(orphans, k)
					}
				}
			}
		}
		s.mu.Unlock()
		for _, k := range orphans {
			// A candidacy of this session that it released or withdrew
			// on the old server, which the new one never heard of: left
			// there, it would stay ahead of every waiter.
			if _, err := conn.ExecContext(ctx, `DELETE FROM `+t.candidacies+` WHERE name = ? AND token = ? AND session = ?`, k.name, k.token, s.id); err != nil {
				s.mu.Lock()
				s.recheck = true
				s.mu.Unlock()
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	if gone || left <= 0 {
		return 0, false, nil
	}
	if len(orphans) > 0 {
		s.b.log.Warn("simba/mysql: after a failover, deleted candidacies the session had given up on the old server", "session", s.sid, "candidacies", fmt.Sprint(orphans))
	}
	if s.LoseMissing(mark, func(h *candidacy.Holding) bool { return !have[candidacyKey{h.Name(), int64(h.Token())}] }) {
		again = true
	}
	return left, again, nil
}

// candidacyKey names a candidacy: tokens count per name.
type candidacyKey struct {
	name  string
	token int64
}

// loseMissing ends the holdings of the session whose candidacy a server
// in epoch e lacks, have being the session's candidacies there. A holding
// granted in epoch e or later is left alone.
func (s *session) loseMissing(e int64, have map[candidacyKey]bool) {
	s.LoseIf(func(h *candidacy.Holding) bool {
		t := int64(h.Token())
		return epochOfToken(t) < e && !have[candidacyKey{h.Name(), t}]
	})
}

// registered notes a candidacy this session registered.
func (s *session) registered(name string, token int64) {
	s.mu.Lock()
	s.known[candidacyKey{name, token}] = true
	s.mu.Unlock()
}

// lookTimeout bounds a read of the monitor's.
const lookTimeout = 10 * time.Second

// holdBack is how long the grant of the candidacy (name, token) must wait
// (0: none): TrustFactor × the TTL after this client first heard from the
// server, when that was a change of server or the name was not settled in
// the epoch when the candidacy registered (see epoch.go). held reports,
// once the hold is over, that there was one.
func (s *session) holdBack(name string, token int64) (hold time.Duration, held bool) {
	s.mu.Lock()
	older, ttl := s.older[candidacyKey{name, token}], s.ttl
	s.mu.Unlock()
	age, changed := s.b.clock.ChainAge(time.Now())
	if plant.Is(plant.KeepChainOnFailover) || !older && !changed {
		s.forget(name, token)
		return 0, false
	}
	hold = time.Duration(float64(ttl)*dbclock.TrustFactor) - age
	if hold <= 0 {
		s.forget(name, token)
		return 0, true
	}
	s.b.log.Info("simba/mysql: a grant held back after a failover", "session", s.sid, "name", name, "token", token, "for", hold.Round(time.Millisecond))
	return hold + expiryMargin, false
}

// forget drops what holdBack keeps of the candidacy (name, token).
func (s *session) forget(name string, token int64) {
	s.mu.Lock()
	delete(s.older, candidacyKey{name, token})
	s.mu.Unlock()
}

// gone notes that the candidacy (name, token) was withdrawn, released or
// lost.
func (s *session) gone(name string, token int64) {
	s.mu.Lock()
	delete(s.older, candidacyKey{name, token})
	delete(s.known, candidacyKey{name, token})
	s.mu.Unlock()
}

// poke wakes the monitor, which reads the session's candidacies.
func (s *session) poke() { wake.Poke(s.check) }
