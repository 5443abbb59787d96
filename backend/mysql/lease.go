package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/candidacy"
	"github.com/simba-go/simba/backend/kit/dbclock"
	"github.com/simba-go/simba/backend/kit/limit"
	"github.com/simba-go/simba/internal/plant"
)

// queue is the session's side of Acquire and Release (see
// candidacy.Queue): a candidacy is a row of the candidacies table, with
// the next token of the name's counter, and its Acquire waits until it is
// the oldest live candidacy of name.
type queue struct{ *session }

var _ candidacy.Queue = queue{}

// Watch calls f when this Backend changes the queue of name, and when the
// holder's bell rings (see bells.go).
func (s queue) Watch(name string, f func()) (cancel func()) { return s.b.hub.subscribe("c "+name, f) }

// Changed wakes the monitor, which reads the session's candidacies.
func (s queue) Changed(string) { s.poke() }

// errServerChanged says that a statement found another server than the
// epoch row names: the epoch must be bumped (sampleOn) before anything is
// done there.
var errServerChanged = errors.New("simba/mysql: the server changed")

// errSessionOver says that a statement found the session expired or gone.
var errSessionOver = errors.New("simba/mysql: session over")

// Register inserts the candidacy and returns its token, in one
// transaction: the epoch row is read with a shared lock (no bump before it
// commits), the name's counter is bumped (its row lock serialises
// registrations of name until each commits, so tokens strictly increase
// in commit order), the session's older candidacies for name go, and the
// new one is inserted if the session is alive, last: the insert's foreign
// key locks the session's row (shared) until the commit, and a renewal
// waits for no more than that statement and the commit, never for the
// counter's lock.
func (s queue) Register(ctx context.Context, name string) (uint64, error) {
	op := fmt.Sprintf("acquire %q", name)
	t := s.b.t
	for attempt := 0; ; attempt++ {
		var (
			token, settledEpoch, epoch int64
			smp                        sample
		)
		sent := time.Now()
		err := s.b.boundedTx(ctx, s.ctx, func(tx *sql.Tx) error {
			var us, srv, server int64
			err := tx.QueryRowContext(ctx, `SELECT `+nowUS+`, v, srv, @@server_id FROM `+t.meta+` WHERE k = 'epoch' LOCK IN SHARE MODE`).Scan(&us, &epoch, &srv, &server)
			if err != nil {
				return err
			}
			if srv != server {
				return errServerChanged
			}
			smp = sample{db: time.UnixMicro(us), epoch: epoch}
			start := base(epoch)
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+t.leaseNames+` (name, last, settled_epoch) VALUES (?, GREATEST(1, ?), 0)
				ON DUPLICATE KEY UPDATE last = GREATEST(last + 1, ?)`, name, start, start); err != nil {
				return err
			}
			if err := tx.QueryRowContext(ctx, `SELECT last, settled_epoch FROM `+t.leaseNames+` WHERE name = ?`, name).Scan(&token, &settledEpoch); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+t.candidacies+` WHERE name = ? AND session = ?`, name, s.id); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `INSERT INTO `+t.candidacies+` (name, token, session)
				SELECT ?, ?, x.id FROM `+t.sessions+` x WHERE x.id = ? AND x.expires_us > `+nowUS, name, token, s.id)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				return errSessionOver
			}
			return nil
		})
		switch {
		case errors.Is(err, errSessionOver):
			return 0, s.doneErr(op)
		case errors.Is(err, errServerChanged) && attempt < 2:
			if err := s.resample(ctx, op); err != nil {
				return 0, s.fail(ctx, op, err)
			}
			continue
		case err != nil:
			if !errors.Is(err, limit.ErrNotSent) {
				// The outcome is unknown (a COMMIT whose reply was lost):
				// a candidacy may exist.
				s.withdrawAll(name)
			}
			return 0, s.fail(ctx, op, err)
		}
		if err := s.b.noteClock(op, sent, time.Now(), smp.db, smp.epoch); err != nil {
			s.withdrawAll(name)
			return 0, err
		}
		s.registered(name, token)
		s.b.hub.changed(name)
		if epoch > 1 && settledEpoch != epoch && !plant.Is(plant.KeepChainOnFailover) {
			s.mu.Lock()
			s.older[candidacyKey{name, token}] = true // see holdBack
			s.mu.Unlock()
		}
		return uint64(token), nil
	}
}

// resample reads the epoch on a connection of its own, bumping it on a
// new server.
func (s *session) resample(ctx context.Context, op string) error {
	return s.b.onConn(ctx, func(conn *sql.Conn) error {
		_, err := s.b.sampleOn(ctx, conn, op, time.Now())
		return err
	})
}

// Ahead reads the queue once (see ahead).
func (s queue) Ahead(ctx context.Context, w *candidacy.Waiter) (time.Duration, error) {
	mine, alive, wait, err := s.ahead(ctx, w.Name, int64(w.Token))
	switch {
	case err != nil:
		return 0, err
	case !alive:
		over, err := s.clearExpired(ctx)
		if over {
			return 0, candidacy.Final(s.doneErr(w.Op))
		}
		return 0, err
	case !mine:
		s.gone(w.Name, int64(w.Token))
		return 0, candidacy.ErrGone
	case wait < 0:
		hold, held := s.holdBack(w.Name, int64(w.Token))
		if hold > 0 {
			return hold, nil
		}
		if held {
			s.settle(ctx, w.Name)
		}
		s.b.hub.granted(s.session, w.Name, w.Token)
		return -1, nil
	case wait == 0:
		return 0, nil
	}
	s.b.hub.follow(w, s.session)
	return wait + expiryMargin, nil
}

// guardArgs are the arguments of guardSQL for a statement sent now (see
// dbclock.Clock.Guard): the verified database time, the chain's first
// database time and the chain's age, in microseconds. With no sample yet
// no session may go: nothing expires at or before the verified time.
func (b *Backend) guardArgs(now time.Time) (verified, chainDB, age int64) {
	v, c, a := b.clock.Guard(now)
	if v.IsZero() {
		return -1 << 62, 1 << 62, 0
	}
	return v.UnixMicro(), c.UnixMicro(), a.Microseconds()
}

// trustSQL is dbclock.TrustFactor as an SQL literal.
var trustSQL = strconv.FormatFloat(dbclock.TrustFactor, 'f', -1, 64)

// guardSQL is the condition that a session row x may be deleted as
// expired, with guardArgs' values as the three placeholders: expired by a
// database time this client verified, and renewed within its chain of
// agreeing samples or that chain older than TrustFactor × its TTL (see
// package dbclock).
func guardSQL() string {
	if plant.Is(plant.TrustDBClock) {
		// The placeholders are taken, and never NULL: the condition is
		// the statement's own clock alone.
		return "(x.expires_us <= " + nowUS + " OR ? IS NULL OR ? IS NULL OR ? IS NULL)"
	}
	return "(x.expires_us <= ? AND (x.expires_us - x.ttl_us >= ? OR CAST(x.ttl_us * " + trustSQL + " AS SIGNED) <= ?))"
}

// guardVals are the placeholders' values of guardSQL.
func guardVals(v, c, a int64) []any { return []any{v, c, a} }

// ahead reads the queue of name for the candidacy token: whether it is
// still there, whether its session is alive, and how long until the
// earliest expiry of the candidacies ahead of it (negative: none, it holds
// the lease; zero: read again at once). When a session ahead is expired
// by the guard (a database time this client's clock has confirmed, see
// package dbclock), it deletes that session's row first, with the guard
// checked again by the DELETE: the DELETE waits for a renewal or a fenced
// write that holds the row's lock, and leaves a renewed row. Only the
// rows the DELETE removed count as gone; the queue is then read again.
func (s *session) ahead(ctx context.Context, name string, token int64) (mine, alive bool, wait time.Duration, err error) {
	t := s.b.t
	op := fmt.Sprintf("acquire %q", name)
	sent := time.Now()
	v, c, a := s.b.guardArgs(sent)
	var (
		us, epoch, srv, server, nAhead, deletable int64
		left                                      sql.NullInt64
	)
	args := []any{s.id, name, token, s.id, name, token, c, a, name, token}
	args = append(args, guardVals(v, c, a)...)
	args = append(args, name, token)
	err = s.b.queryRow(ctx, s.ctx, `SELECT
			COALESCE((SELECT x.expires_us > `+nowUS+` FROM `+t.sessions+` x WHERE x.id = ?), 0),
			EXISTS (SELECT 1 FROM `+t.candidacies+` WHERE name = ? AND token = ? AND session = ?),
			(SELECT COUNT(*) FROM `+t.candidacies+` WHERE name = ? AND token < ?),
			(SELECT MIN(GREATEST(x.expires_us - `+nowUS+`, CASE WHEN x.expires_us - x.ttl_us >= ? THEN 0
					ELSE CAST(x.ttl_us * `+trustSQL+` AS SIGNED) - ? END))
				FROM `+t.candidacies+` c JOIN `+t.sessions+` x ON x.id = c.session WHERE c.name = ? AND c.token < ?),
			(SELECT COUNT(*) FROM `+t.candidacies+` c JOIN `+t.sessions+` x ON x.id = c.session WHERE `+guardSQL()+` AND c.name = ? AND c.token < ?),
			`+nowUS+`, m.v, m.srv, @@server_id
		FROM `+t.meta+` m WHERE m.k = 'epoch'`, args...).Scan(&alive, &mine, &nAhead, &left, &deletable, &us, &epoch, &srv, &server)
	if err != nil {
		return false, false, 0, err
	}
	if srv != server {
		return false, false, 0, s.resample(ctx, op)
	}
	if err := s.b.noteClock(op, sent, time.Now(), time.UnixMicro(us), epoch); err != nil {
		return false, false, 0, candidacy.Final(err)
	}
	if !alive || !mine {
		return mine, alive, 0, nil
	}
	if nAhead == 0 {
		return true, true, -1, nil
	}
	if deletable > 0 {
		if err := s.deleteExpiredAhead(ctx, name, token); err != nil {
			return false, false, 0, err
		}
		return true, true, 0, nil
	}
	if !left.Valid {
		return true, true, 0, nil
	}
	return true, true, max(time.Duration(left.Int64)*time.Microsecond, 0), nil
}

// deleteExpiredAhead deletes the sessions of the candidacies ahead of
// (name, token) that the guard says have expired: it lists them, then
// deletes each by id with the guard checked again under the row's lock.
func (s *session) deleteExpiredAhead(ctx context.Context, name string, token int64) error {
	t := s.b.t
	v, c, a := s.b.guardArgs(time.Now())
	var ids []int64
	args := append(guardVals(v, c, a), name, token)
	err := s.b.query(ctx, s.ctx, func(rows *sql.Rows) error {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return err
		}
		ids = append(ids, id)
		return nil
	}, `SELECT DISTINCT x.id FROM `+t.candidacies+` c JOIN `+t.sessions+` x ON x.id = c.session WHERE `+guardSQL()+` AND c.name = ? AND c.token < ?`, args...)
	if err != nil {
		return err
	}
	deleted := false
	for _, id := range ids {
		res, err := s.b.exec(ctx, s.ctx, `DELETE x FROM `+t.sessions+` x WHERE x.id = ? AND `+guardSQL(), append([]any{id}, guardVals(v, c, a)...)...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			deleted = true
		}
	}
	if deleted {
		s.b.hub.changed(name)
	}
	return nil
}

// settle marks name as settled in the highest epoch this Backend has
// seen, at a grant after a hold: the terms of older epochs have ended by
// then, for every client, so that a candidacy registered from now on is
// not held back. A mark that fails to be written costs only that wait, for
// the next candidacies.
func (s *session) settle(ctx context.Context, name string) {
	e := s.b.epochs.max.Load()
	if e <= 1 {
		return
	}
	if _, err := s.b.exec(ctx, s.ctx, `UPDATE `+s.b.t.leaseNames+` SET settled_epoch = ? WHERE name = ? AND settled_epoch < ?`, e, name, e); err != nil {
		s.b.log.Debug("simba/mysql: marking a name granted in a new epoch", "name", name, "err", err)
	}
}

// Withdraw deletes the candidacy (name, token) of a giving-up Acquire,
// now or, when the server cannot be reached, in the background until it
// can or the session is over.
func (s queue) Withdraw(name string, token uint64) {
	s.gone(name, int64(token))
	s.retry(fmt.Sprintf("withdrawing the candidacy %q/%d", name, token), func(ctx context.Context) error {
		_, err := s.b.exec(ctx, s.ctx, "DELETE FROM "+s.b.t.candidacies+" WHERE name = ? AND token = ? AND session = ?", name, int64(token), s.id)
		if err == nil {
			s.b.hub.changed(name)
		}
		return err
	})
}

// withdrawAll deletes every candidacy of this session for name, after a
// registration whose outcome is unknown. It first takes the lock of the
// name's counter row, so that it waits for a registration still in
// flight, whose candidacy the DELETE then sees if it committed.
func (s *session) withdrawAll(name string) {
	t := s.b.t
	s.retry(fmt.Sprintf("withdrawing the candidacies for %q", name), func(ctx context.Context) error {
		err := s.b.boundedTx(ctx, s.ctx, func(tx *sql.Tx) error {
			var last int64
			err := tx.QueryRowContext(ctx, `SELECT last FROM `+t.leaseNames+` WHERE name = ? FOR UPDATE`, name).Scan(&last)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			_, err = tx.ExecContext(ctx, "DELETE FROM "+t.candidacies+" WHERE name = ? AND session = ?", name, s.id)
			return err
		})
		if err == nil {
			s.b.hub.changed(name)
		}
		return err
	})
}

// withdrawTimeout bounds the withdrawal an Acquire makes before it
// returns; past it, the withdrawal goes on in the background.
const withdrawTimeout = time.Second

// retry runs f now, and retries it with backoff in the background until
// it succeeds or the session is over.
func (s *session) retry(what string, f func(context.Context) error) {
	switch err := s.Retry(withdrawTimeout, lookTimeout, f); {
	case err == nil:
	case errors.Is(err, limit.ErrNotSent):
		s.b.log.Debug("simba/mysql: "+what+" waits for a statement slot; retrying in the background", "session", s.sid)
	default:
		s.b.log.Warn("simba/mysql: "+what+" failed; retrying in the background", "session", s.sid, "err", err)
	}
}

var _ backend.CandidateLister = (*session)(nil)

// Candidates lists the sessions of the live candidacies of name, oldest
// first.
func (s *session) Candidates(ctx context.Context, name string) ([]string, error) {
	if err := s.CheckName("candidates", name); err != nil {
		return nil, err
	}
	var out []string
	err := s.b.query(ctx, s.ctx, func(rows *sql.Rows) error {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return err
		}
		out = append(out, strconv.FormatInt(id, 10))
		return nil
	}, `SELECT c.session FROM `+s.b.t.candidacies+` c JOIN `+s.b.t.sessions+` x ON x.id = c.session
		WHERE c.name = ? AND x.expires_us > `+nowUS+` ORDER BY c.token`, name)
	if err != nil {
		return nil, s.fail(ctx, "candidates", err)
	}
	return out, nil
}

// Release deletes the candidacy (name, session, token) if it is still
// there and the session alive: one statement. With records, it writes
// them, fenced by the holding, and deletes the candidacy in one
// transaction that first locks the candidacy's row (a waiter's deletion
// of the session, which would delete it too, waits for the commit).
func (s queue) Release(ctx context.Context, h *candidacy.Holding, op string, records []backend.Record) (bool, error) {
	name, token := h.Name(), int64(h.Token())
	t := s.b.t
	released := false
	var err error
	if len(records) == 0 {
		var res sql.Result
		res, err = s.b.exec(ctx, s.ctx, `DELETE c FROM `+t.candidacies+` c JOIN `+t.sessions+` x ON x.id = c.session
			WHERE c.name = ? AND c.token = ? AND c.session = ? AND x.expires_us > `+nowUS, name, token, s.id)
		if err == nil {
			n, _ := res.RowsAffected()
			released = n > 0
		}
	} else {
		err = s.b.boundedTx(ctx, s.ctx, func(tx *sql.Tx) error {
			released = false
			epoch, err := s.b.lockEpoch(ctx, tx)
			if err != nil {
				return err
			}
			var held bool
			err = tx.QueryRowContext(ctx, `SELECT COALESCE(MAX((SELECT x.expires_us > `+nowUS+` FROM `+t.sessions+` x WHERE x.id = c.session)), FALSE)
				FROM `+t.candidacies+` c WHERE c.name = ? AND c.token = ? AND c.session = ? FOR UPDATE`, name, token, s.id).Scan(&held)
			if err != nil || !held {
				return err
			}
			for _, r := range records {
				if err := s.b.writeRecord(ctx, tx, r.Key, r.Value, token, epoch, backend.Condition{}, true); err != nil && !errors.Is(err, backend.ErrConflict) {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+t.candidacies+` WHERE name = ? AND token = ? AND session = ?`, name, token, s.id); err != nil {
				return err
			}
			released = true
			return nil
		})
	}
	if err != nil {
		if errors.Is(err, limit.ErrNotSent) && ctx.Err() == nil && s.Over() {
			return false, nil
		}
		return false, s.fail(ctx, op, err)
	}
	s.gone(name, token)
	s.b.hub.released(s.session, name, uint64(token))
	return released, nil
}
