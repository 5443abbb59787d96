package mysql

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// errSuperseded says that a registration found the session's floor at or
// past its number (see Register), attempt after attempt.
var errSuperseded = errors.New("the registration was superseded by the withdrawal of another whose outcome was unknown")

// Register inserts the candidacy and returns its token, in one
// transaction of one round trip (see batch): the epoch row is read with a
// shared lock (no bump before it commits), the name's counter is bumped
// (its row lock serialises registrations of name until each commits, so
// tokens strictly increase in commit order), the session's row is read
// (without a lock: a renewal never waits for a registration), the
// session's older candidacies for name go (found by the (session, name)
// index, so that the DELETE locks no other session's candidacy: a fenced
// transaction holds the holder's), and the new one is inserted if the
// session is alive. Nothing is written on a server the epoch row does not
// name.
//
// Each attempt has a number of the session's, reg, kept in the candidacy
// row: the DELETE takes only candidacies of smaller numbers, and nothing
// is written once the session's floor (reg_floor) has reached reg. An
// attempt whose outcome is unknown (its ctx ended with the batch sent)
// may still run on the server at any later time; withdrawAll raises the
// floor to its number, so that it then changes nothing, and deletes its
// candidacy if it ran before: such a late batch never deletes the
// candidacy of a later Acquire, nor leaves one that nobody knows of
// (TestLateRegistrationOfCancelledAcquire). The name's counter row orders
// the two: each takes its lock first, and the floor is read after it.
func (s queue) Register(ctx context.Context, name string) (uint64, error) {
	op := fmt.Sprintf("acquire %q", name)
	t := s.b.t
	s.registering.Add(1)
	defer s.registering.Add(-1)
	for attempt := 0; ; attempt++ {
		var (
			same                sql.NullBool
			epoch, us           sql.NullInt64
			token, settledEpoch sql.NullInt64
			floor               sql.NullInt64
			inserted            int64
		)
		reg := s.regs.Add(1)
		sent := time.Now()
		err := s.b.boundedBatch(ctx, s.ctx, []string{
			`SET @simba_e = NULL, @simba_same = NULL, @simba_now = NULL, @simba_t = NULL, @simba_s = NULL, @simba_ins = 0, @simba_live = NULL, @simba_floor = NULL`,
			`SELECT v, srv = @@server_id, ` + nowUS + ` INTO @simba_e, @simba_same, @simba_now FROM ` + t.meta + ` WHERE k = 'epoch' LOCK IN SHARE MODE`,
			`INSERT INTO ` + t.leaseNames + ` (name, last, settled_epoch) SELECT ?, GREATEST(1, ` + baseOfSQL("@simba_e") + `), 0 FROM DUAL WHERE @simba_same
				ON DUPLICATE KEY UPDATE last = GREATEST(last + 1, ` + baseOfSQL("@simba_e") + `)`,
			`SELECT last, settled_epoch INTO @simba_t, @simba_s FROM ` + t.leaseNames + ` WHERE name = ? AND @simba_same`,
			`SELECT expires_us > ` + nowUS + `, reg_floor INTO @simba_live, @simba_floor FROM ` + t.sessions + ` WHERE id = ? AND @simba_same`,
			`SET @simba_go = @simba_same AND @simba_live AND @simba_floor < ?`,
			`DELETE c FROM ` + t.candidacies + ` c FORCE INDEX (session) WHERE c.session = ? AND c.name = ? AND c.reg < ? AND @simba_go`,
			`INSERT INTO ` + t.candidacies + ` (name, token, session, reg) SELECT ?, @simba_t, ?, ? FROM DUAL WHERE @simba_go AND @simba_t IS NOT NULL`,
			`SET @simba_ins = ROW_COUNT()`,
		}, `SELECT @simba_same, @simba_e, @simba_now, @simba_t, @simba_s, @simba_ins, @simba_floor`,
			[]any{name, name, s.id, reg, s.id, name, reg, name, s.id, reg},
			&same, &epoch, &us, &token, &settledEpoch, &inserted, &floor)
		if err == nil && !same.Bool {
			err = errServerChanged
		}
		if err == nil && inserted == 0 {
			err = errSessionOver
			if floor.Valid && floor.Int64 >= reg {
				err = errSuperseded
			}
		}
		switch {
		case errors.Is(err, errSessionOver):
			return 0, s.doneErr(op)
		case errors.Is(err, errSuperseded) && attempt < 4:
			// The withdrawal of another Acquire of the session, whose
			// outcome was unknown, raised the floor past this number.
			continue
		case errors.Is(err, errServerChanged) && attempt < 2:
			if err := s.resample(ctx, op); err != nil {
				return 0, s.fail(ctx, op, err)
			}
			continue
		case errors.Is(err, errSuperseded):
			return 0, fmt.Errorf("simba/mysql: %s: session %s: %w", op, s.sid, err)
		case err != nil:
			if !errors.Is(err, limit.ErrNotSent) {
				// The outcome is unknown (a COMMIT whose reply was lost):
				// a candidacy may exist, or be about to.
				s.withdrawAll(name, reg)
			}
			return 0, s.fail(ctx, op, err)
		}
		if err := s.b.noteClock(op, sent, time.Now(), time.UnixMicro(us.Int64), epoch.Int64); err != nil {
			s.withdrawAll(name, reg)
			return 0, err
		}
		s.registered(name, token.Int64)
		s.b.hub.changed(name)
		if epoch.Int64 > 1 && settledEpoch.Int64 != epoch.Int64 && !plant.Is(plant.KeepChainOnFailover) {
			s.mu.Lock()
			s.older[candidacyKey{name, token.Int64}] = true // see holdBack
			s.mu.Unlock()
		}
		return uint64(token.Int64), nil
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
	mine, alive, wait, atGrant, err := s.ahead(ctx, w.Name, int64(w.Token))
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
		w.AtGrant = atGrant
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

// guardSQL is the condition that a session row x (an alias or the
// table's name) may be deleted as
// expired, with guardArgs' values as the three placeholders: expired by a
// database time this client verified, and renewed within its chain of
// agreeing samples or that chain older than TrustFactor × its TTL (see
// package dbclock).
func guardSQL(x string) string {
	if plant.Is(plant.TrustDBClock) {
		// The placeholders are taken, and never NULL: the condition is
		// the statement's own clock alone.
		return "(" + x + ".expires_us <= " + nowUS + " OR ? IS NULL OR ? IS NULL OR ? IS NULL)"
	}
	return "(" + x + ".expires_us <= ? AND (" + x + ".expires_us - " + x + ".ttl_us >= ? OR CAST(" + x + ".ttl_us * " + trustSQL + " AS SIGNED) <= ?))"
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
//
// When the session was opened with SessionOptions.GrantRecords, the same
// statement lists the records under that prefix if none is ahead (the
// read grants the lease): atGrant, the grant's consistent read (see
// backend.GrantSnapshot).
func (s *session) ahead(ctx context.Context, name string, token int64) (mine, alive bool, wait time.Duration, atGrant *candidacy.Snapshot, err error) {
	t := s.b.t
	op := fmt.Sprintf("acquire %q", name)
	sent := time.Now()
	v, c, a := s.b.guardArgs(sent)
	var (
		us, epoch, srv, server, nAhead, deletable int64
		left                                      sql.NullInt64
		listed                                    sql.NullString
	)
	args := []any{s.id, name, token, s.id, name, token, c, a, name, token}
	args = append(args, guardVals(v, c, a)...)
	args = append(args, name, token)
	args = append(args, s.grantPrefix, s.grantPrefix, s.grantPrefix+"\x7f", name, token)
	err = s.b.queryRow(ctx, s.ctx, `SELECT
			COALESCE((SELECT x.expires_us > `+nowUS+` FROM `+t.sessions+` x WHERE x.id = ?), 0),
			EXISTS (SELECT 1 FROM `+t.candidacies+` WHERE name = ? AND token = ? AND session = ?),
			(SELECT COUNT(*) FROM `+t.candidacies+` WHERE name = ? AND token < ?),
			(SELECT MIN(GREATEST(x.expires_us - `+nowUS+`, CASE WHEN x.expires_us - x.ttl_us >= ? THEN 0
					ELSE CAST(x.ttl_us * `+trustSQL+` AS SIGNED) - ? END))
				FROM `+t.candidacies+` c JOIN `+t.sessions+` x ON x.id = c.session WHERE c.name = ? AND c.token < ?),
			(SELECT COUNT(*) FROM `+t.candidacies+` c JOIN `+t.sessions+` x ON x.id = c.session WHERE `+guardSQL("x")+` AND c.name = ? AND c.token < ?),
			(SELECT JSON_ARRAYAGG(JSON_ARRAY(r.rkey, HEX(r.value), r.version, r.token)) FROM `+t.records+` r
				WHERE ? <> '' AND NOT r.deleted AND r.rkey >= ? AND r.rkey < ?
				AND NOT EXISTS (SELECT 1 FROM `+t.candidacies+` WHERE name = ? AND token < ?)),
			`+nowUS+`, m.v, m.srv, @@server_id
		FROM `+t.meta+` m WHERE m.k = 'epoch'`, args...).Scan(&alive, &mine, &nAhead, &left, &deletable, &listed, &us, &epoch, &srv, &server)
	if err != nil {
		return false, false, 0, nil, err
	}
	if srv != server {
		return false, false, 0, nil, s.resample(ctx, op)
	}
	if err := s.b.noteClock(op, sent, time.Now(), time.UnixMicro(us), epoch); err != nil {
		return false, false, 0, nil, candidacy.Final(err)
	}
	if !alive || !mine {
		return mine, alive, 0, nil, nil
	}
	if nAhead == 0 {
		if s.grantPrefix != "" {
			list, err := decodeListed(listed)
			if err != nil {
				return false, false, 0, nil, fmt.Errorf("simba/mysql: %s: the records listed at the grant: %w", op, err)
			}
			atGrant = &candidacy.Snapshot{Prefix: s.grantPrefix, Records: list}
		}
		return true, true, -1, atGrant, nil
	}
	if deletable > 0 {
		if err := s.deleteExpiredAhead(ctx, name, token); err != nil {
			return false, false, 0, nil, err
		}
		return true, true, 0, nil, nil
	}
	if !left.Valid {
		return true, true, 0, nil, nil
	}
	return true, true, max(time.Duration(left.Int64)*time.Microsecond, 0), nil, nil
}

// decodeListed decodes the records a queue read listed (see ahead): a JSON
// array of [key, value in hex, version, token], or NULL for none; sorted
// by key.
func decodeListed(listed sql.NullString) ([]backend.Record, error) {
	if !listed.Valid {
		return []backend.Record{}, nil
	}
	var rows [][]json.RawMessage
	if err := json.Unmarshal([]byte(listed.String), &rows); err != nil {
		return nil, err
	}
	out := make([]backend.Record, 0, len(rows))
	for _, row := range rows {
		if len(row) != 4 {
			return nil, fmt.Errorf("a row of %d fields, want 4", len(row))
		}
		var (
			r            backend.Record
			value        string
			version, tok int64
		)
		for i, dst := range []any{&r.Key, &value, &version, &tok} {
			if err := json.Unmarshal(row[i], dst); err != nil {
				return nil, err
			}
		}
		v, err := hex.DecodeString(value)
		if err != nil {
			return nil, err
		}
		r.Value, r.Version, r.Token = v, uint64(version), uint64(tok)
		out = append(out, r)
	}
	slices.SortFunc(out, func(x, y backend.Record) int { return strings.Compare(x.Key, y.Key) })
	return out, nil
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
	}, `SELECT DISTINCT x.id FROM `+t.candidacies+` c JOIN `+t.sessions+` x ON x.id = c.session WHERE `+guardSQL("x")+` AND c.name = ? AND c.token < ?`, args...)
	if err != nil {
		return err
	}
	deleted := false
	for _, id := range ids {
		res, err := s.b.exec(ctx, s.ctx, `DELETE x FROM `+t.sessions+` x WHERE x.id = ? AND `+guardSQL("x"), append([]any{id}, guardVals(v, c, a)...)...)
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

// withdrawAll withdraws what a registration whose outcome is unknown,
// numbered reg, may have left (see Register): it raises the session's
// floor to reg, so that the registration, if it runs later, changes
// nothing, then deletes the session's candidacies for name numbered up to
// reg. It first takes the lock of the name's counter row, making the row
// if there is none (a registration's own lock, taken as it makes the row,
// would not wait for a read of a row that was not there): a registration
// in flight that holds it commits first, and the DELETE, a later
// statement, sees its candidacy; one that takes it after reads the new
// floor. A later Acquire's candidacy has a larger number: the withdrawal
// never takes it, even when it runs late (retried in the background, or a
// batch that reached the server after its ctx ended).
func (s *session) withdrawAll(name string, reg int64) {
	t := s.b.t
	s.retry(fmt.Sprintf("withdrawing the candidacies for %q", name), func(ctx context.Context) error {
		err := s.b.boundedBatch(ctx, s.ctx, []string{
			`INSERT INTO ` + t.leaseNames + ` (name, last, settled_epoch) VALUES (?, 1, 0) ON DUPLICATE KEY UPDATE last = last`,
			`UPDATE ` + t.sessions + ` SET reg_floor = GREATEST(reg_floor, ?) WHERE id = ?`,
			`DELETE c FROM ` + t.candidacies + ` c FORCE INDEX (session) WHERE c.session = ? AND c.name = ? AND c.reg <= ?`,
		}, "", []any{name, reg, s.id, s.id, name, reg})
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
// transaction of one round trip (see batch) that first locks the
// candidacy's row (a waiter's deletion of the session, which would delete
// it too, waits for the commit). On a server the epoch row does not name
// it writes nothing, bumps the epoch, and fails: the caller retries.
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
		stmts := []string{
			`SET @simba_e = NULL, @simba_same = NULL, @simba_held = NULL, @simba_rel = 0`,
			`SELECT v, srv = @@server_id INTO @simba_e, @simba_same FROM ` + t.meta + ` WHERE k = 'epoch' LOCK IN SHARE MODE`,
			`SELECT COALESCE(MAX((SELECT x.expires_us > ` + nowUS + ` FROM ` + t.sessions + ` x WHERE x.id = c.session)), FALSE) INTO @simba_held
				FROM ` + t.candidacies + ` c WHERE c.name = ? AND c.token = ? AND c.session = ? FOR UPDATE`,
			`SET @simba_go = @simba_same AND @simba_held`,
		}
		args := []any{name, token, s.id}
		for _, r := range records {
			w := s.b.recordWrite(r.Key, r.Value, token, backend.Condition{})
			stmts, args = append(stmts, w.stmts...), append(args, w.args...)
		}
		stmts = append(stmts, `DELETE FROM `+t.candidacies+` WHERE name = ? AND token = ? AND session = ? AND @simba_go`, `SET @simba_rel = ROW_COUNT()`)
		args = append(args, name, token, s.id)
		var same sql.NullBool
		var rel int64
		err = s.b.boundedBatch(ctx, s.ctx, stmts, `SELECT @simba_same, @simba_rel`, args, &same, &rel)
		if err == nil && !same.Bool {
			if err = s.resample(ctx, op); err == nil {
				err = errServerChanged
			}
		}
		released = rel > 0
		if err == nil {
			for _, r := range records {
				s.b.hub.recordChanged(r.Key)
			}
		}
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
