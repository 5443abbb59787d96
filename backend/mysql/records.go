package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/view"
	"github.com/simba-go/simba/backend/kit/wake"
)

// source is the backend's SELECTs for sessions and views (view.Source).
type source struct{ b *Backend }

var _ view.Source = source{}

var (
	_ backend.LeaseLister  = (*session)(nil)
	_ backend.Records      = (*session)(nil)
	_ backend.SkipReporter = (*session)(nil)
)

// checkCond checks a condition's fields.
func checkCond(op string, cond backend.Condition) error {
	if cond.Token > 1<<62 {
		return fmt.Errorf("simba/mysql: %s: lease %q is not held with token %d: %w", op, cond.Lease, cond.Token, backend.ErrConflict)
	}
	if cond.Token != 0 && !backend.ValidName(cond.Lease) {
		return fmt.Errorf("simba/mysql: %s: invalid fence lease name %q: %w", op, cond.Lease, backend.ErrConflict)
	}
	if cond.IfVersion && cond.Version > 1<<62 {
		return fmt.Errorf("simba/mysql: %s: version %d differs: %w", op, cond.Version, backend.ErrConflict)
	}
	return nil
}

// GetRecord reads the record at key.
func (src source) GetRecord(ctx, stop context.Context, key string) (backend.Record, error) {
	b := src.b
	op := fmt.Sprintf("get record %q", key)
	r := backend.Record{Key: key}
	var version, token int64
	err := b.queryRow(ctx, stop, "SELECT value, version, token FROM "+b.t.records+" WHERE rkey = ? AND NOT deleted", key).Scan(&r.Value, &version, &token)
	if errors.Is(err, sql.ErrNoRows) {
		return backend.Record{}, fmt.Errorf("simba/mysql: %s: %w", op, backend.ErrNoRecord)
	}
	if err != nil {
		return backend.Record{}, b.connErr(op, err)
	}
	if r.Value == nil {
		r.Value = []byte{}
	}
	r.Version, r.Token = uint64(version), uint64(token)
	return r, nil
}

// prefixSQL is the condition that column col starts with prefix, as a
// range of its ascii_bin values (names and keys are ASCII below 0x7f),
// and its arguments.
func prefixSQL(col, prefix string) (string, []any) {
	if prefix == "" {
		return "TRUE", nil
	}
	return "(" + col + " >= ? AND " + col + " < ?)", []any{prefix, prefix + "\x7f"}
}

// ListRecords lists the records under prefix, by key. A row of the
// records table is always a record: nothing is ever skipped.
func (src source) ListRecords(ctx, stop context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	b := src.b
	cond, args := prefixSQL("rkey", prefix)
	var list []backend.Record
	err := b.query(ctx, stop, func(rows *sql.Rows) error {
		var r backend.Record
		var version, token int64
		if err := rows.Scan(&r.Key, &r.Value, &version, &token); err != nil {
			return err
		}
		if r.Value == nil {
			r.Value = []byte{}
		}
		r.Version, r.Token = uint64(version), uint64(token)
		list = append(list, r)
		return nil
	}, "SELECT rkey, value, version, token FROM "+b.t.records+" WHERE NOT deleted AND "+cond+" ORDER BY rkey", args...)
	if err != nil {
		return nil, nil, b.connErr("list records", err)
	}
	return list, nil, nil
}

// PutRecord writes value at key if cond holds, checked in the same
// transaction as the write (one round trip: see batch), under the locks of
// the fence's candidacy row (see fenceSQL) and of the record's row.
func (s *session) PutRecord(ctx context.Context, key string, value []byte, cond backend.Condition) (backend.Record, error) {
	if err := backend.CheckRecord(key, value); err != nil {
		return backend.Record{}, fmt.Errorf("simba/mysql: %w", err)
	}
	op := fmt.Sprintf("put record %q", key)
	if err := s.OverErr(op); err != nil {
		return backend.Record{}, err
	}
	if err := checkCond(op, cond); err != nil {
		return backend.Record{}, err
	}
	w := s.b.recordWrite(key, value, int64(cond.Token), cond)
	o, err := s.fenced(ctx, op, cond, w)
	if err != nil {
		return backend.Record{}, err
	}
	if !o.written {
		return backend.Record{}, s.conflict(op, cond, o)
	}
	s.b.hub.recordChanged(key)
	return backend.Record{Key: key, Value: append([]byte{}, value...), Version: uint64(o.version), Token: cond.Token}, nil
}

// outcome is what a fenced batch reports.
type outcome struct {
	held, written bool
	version       int64 // written
	cur           curRecord
}

// curRecord is a record's row as the batch found it.
type curRecord struct {
	exists, deleted bool
	version, token  int64
}

// conflict is the error of a write whose condition failed.
func (s *session) conflict(op string, cond backend.Condition, o outcome) error {
	live := o.cur.exists && !o.cur.deleted
	switch {
	case !o.held:
		return fmt.Errorf("simba/mysql: %s: lease %q is not held with token %d by session %s: %w", op, cond.Lease, cond.Token, s.sid, backend.ErrConflict)
	case cond.Token != 0 && live && uint64(o.cur.token) > cond.Token:
		return fmt.Errorf("simba/mysql: %s: written with token %d, newer than %d: %w", op, o.cur.token, cond.Token, backend.ErrConflict)
	case cond.IfVersion && cond.Version == 0 && live:
		return fmt.Errorf("simba/mysql: %s: version %d, want no record: %w", op, o.cur.version, backend.ErrConflict)
	case cond.IfVersion && !live:
		return fmt.Errorf("simba/mysql: %s: no record, want version %d: %w", op, cond.Version, backend.ErrConflict)
	default:
		return fmt.Errorf("simba/mysql: %s: version %d, want %d: %w", op, o.cur.version, cond.Version, backend.ErrConflict)
	}
}

// write is the statements of a record's write in a batch, and their
// arguments.
type write struct {
	stmts []string
	args  []any
}

// recordWrite returns the statements that write value at key with token,
// if cond's version holds and no record of a higher token is there (when
// token is not 0), in a batch that has set @simba_go (the fence held, or
// none) and @simba_e (the epoch): they lock the record's row, set
// @simba_ok (the write's conditions) and @simba_nv (its version), and
// write it, setting @simba_w to the rows written. A row inserted by
// another client since the read makes the INSERT write nothing
// (@simba_ok and no row written: the caller tries again). A deleted
// record's row stays, marked deleted, so that a key written again never
// repeats a version: @simba_nv is above every version the key had, and
// above every version of an earlier epoch.
func (b *Backend) recordWrite(key string, value []byte, token int64, cond backend.Condition) write {
	t := b.t
	ver := "TRUE"
	var vargs []any
	switch {
	case cond.IfVersion && cond.Version == 0:
		ver = "NOT @simba_live"
	case cond.IfVersion:
		ver = "@simba_live AND @simba_cv = ?"
		vargs = []any{int64(cond.Version)}
	}
	stmts := []string{
		`SET @simba_cv = NULL, @simba_ct = NULL, @simba_cd = NULL, @simba_w = 0`,
		`SELECT version, token, deleted INTO @simba_cv, @simba_ct, @simba_cd FROM ` + t.records + ` WHERE rkey = ? AND @simba_go FOR UPDATE`,
		`SET @simba_live = COALESCE(@simba_cv IS NOT NULL AND NOT @simba_cd, FALSE)`,
		`SET @simba_ok = COALESCE(@simba_go AND NOT (? <> 0 AND @simba_live AND @simba_ct > ?) AND ` + ver + `, FALSE)`,
		`SET @simba_nv = GREATEST(COALESCE(@simba_cv, 0) + 1, ` + baseOfSQL("@simba_e") + ` + 1)`,
		`INSERT INTO ` + t.records + ` (rkey, value, version, token, deleted) SELECT ?, ?, @simba_nv, ?, FALSE FROM DUAL
			WHERE @simba_ok AND @simba_cv IS NULL ON DUPLICATE KEY UPDATE rkey = rkey`,
		`SET @simba_w = ROW_COUNT()`,
		`UPDATE ` + t.records + ` SET value = ?, version = @simba_nv, token = ?, deleted = FALSE WHERE rkey = ? AND @simba_ok AND @simba_cv IS NOT NULL`,
		`SET @simba_w = @simba_w + ROW_COUNT()`,
	}
	args := []any{key, token, token}
	args = append(args, vargs...)
	args = append(args, key, nonNil(value), token, nonNil(value), token, key)
	return write{stmts, args}
}

// fenced runs the batch of w after the epoch's read and cond's fence (when
// its token is not zero), and returns what it found and did; on a server
// the epoch row does not name it writes nothing and runs again after the
// epoch's bump, and a record inserted meanwhile by another client runs it
// again.
func (s *session) fenced(ctx context.Context, op string, cond backend.Condition, w write) (outcome, error) {
	t := s.b.t
	for attempt := 0; ; attempt++ {
		stmts := []string{
			`SET @simba_e = NULL, @simba_same = NULL, @simba_held = TRUE, @simba_ok = NULL, @simba_nv = NULL, @simba_w = 0, @simba_cv = NULL, @simba_ct = NULL, @simba_cd = NULL`,
			`SELECT v, srv = @@server_id INTO @simba_e, @simba_same FROM ` + t.meta + ` WHERE k = 'epoch' LOCK IN SHARE MODE`,
		}
		var args []any
		if cond.Token != 0 {
			stmts = append(stmts, fenceSQL(t, "", "c.session = ?", "@simba_held"))
			args = fenceArgs(nil, cond.Lease, int64(cond.Token), s.id)
		}
		stmts = append(stmts, `SET @simba_go = COALESCE(@simba_same AND @simba_held, FALSE)`)
		stmts = append(stmts, w.stmts...)
		args = append(args, w.args...)
		var (
			same, held, ok, deleted sql.NullBool
			written                 int64
			nv, cv, ct              sql.NullInt64
		)
		err := s.b.boundedBatch(ctx, s.ctx, stmts, `SELECT @simba_same, @simba_held, @simba_ok, @simba_w, @simba_nv, @simba_cv, @simba_ct, @simba_cd`,
			args, &same, &held, &ok, &written, &nv, &cv, &ct, &deleted)
		if err != nil {
			return outcome{}, s.fail(ctx, op, err)
		}
		if !same.Bool {
			if attempt < 2 {
				if err := s.resample(ctx, op); err != nil {
					return outcome{}, s.fail(ctx, op, err)
				}
				continue
			}
			return outcome{}, fmt.Errorf("simba/mysql: %s: the server's identity keeps changing", op)
		}
		if ok.Bool && written == 0 && attempt < 2 {
			continue // a record inserted meanwhile
		}
		o := outcome{held: held.Bool, written: written > 0, version: nv.Int64,
			cur: curRecord{exists: cv.Valid, deleted: deleted.Bool, version: cv.Int64, token: ct.Int64}}
		return o, nil
	}
}

// DeleteRecord deletes the record at key if cond holds: its row stays,
// marked deleted, so that the key's versions never repeat.
func (s *session) DeleteRecord(ctx context.Context, key string, cond backend.Condition) error {
	if err := backend.CheckKey(key); err != nil {
		return fmt.Errorf("simba/mysql: %w", err)
	}
	op := fmt.Sprintf("delete record %q", key)
	if err := s.OverErr(op); err != nil {
		return err
	}
	if err := checkCond(op, cond); err != nil {
		return err
	}
	t := s.b.t
	ver := "TRUE"
	var vargs []any
	if cond.IfVersion {
		ver = "@simba_cv = ?"
		vargs = []any{int64(cond.Version)}
	}
	w := write{stmts: []string{
		`SET @simba_cv = NULL, @simba_ct = NULL, @simba_cd = NULL, @simba_w = 0`,
		`SELECT version, token, deleted INTO @simba_cv, @simba_ct, @simba_cd FROM ` + t.records + ` WHERE rkey = ? AND @simba_go FOR UPDATE`,
		`SET @simba_live = COALESCE(@simba_cv IS NOT NULL AND NOT @simba_cd, FALSE)`,
		`SET @simba_ok = COALESCE(@simba_go AND @simba_live AND NOT (? <> 0 AND @simba_ct > ?) AND ` + ver + `, FALSE)`,
		`SET @simba_nv = GREATEST(COALESCE(@simba_cv, 0) + 1, ` + baseOfSQL("@simba_e") + ` + 1)`,
		`UPDATE ` + t.records + ` SET value = '', version = @simba_nv, token = 0, deleted = TRUE WHERE rkey = ? AND @simba_ok`,
		`SET @simba_w = ROW_COUNT()`,
	}, args: append(append([]any{key, int64(cond.Token), int64(cond.Token)}, vargs...), key)}
	o, err := s.fenced(ctx, op, cond, w)
	if err != nil {
		return err
	}
	live := o.cur.exists && !o.cur.deleted
	switch {
	case o.written:
		s.b.hub.recordChanged(key)
		return nil
	case !o.held:
		return s.conflict(op, cond, o)
	case !live && !(cond.IfVersion && cond.Version != 0):
		return nil
	}
	return s.conflict(op, cond, o)
}

// WatchRecords hints changes of records under prefix: those made through
// this Backend at once, and every poll interval.
func (src source) WatchRecords(ctx, stop context.Context, prefix string) <-chan struct{} {
	return src.b.watch(ctx, stop, func(f func()) func() { return src.b.hub.subscribeRecords(prefix, f) }, nil)
}

// watch returns a hint channel fed by subscribe, closed when ctx or stop
// ends; next, if not nil, returns when the next hint is due with no
// change seen (a member's expiry; negative: none), and the hint comes
// expiryMargin after it.
func (b *Backend) watch(ctx, stop context.Context, subscribe func(func()) func(), next func(context.Context) time.Duration) <-chan struct{} {
	if next != nil {
		due := next
		next = func(ctx context.Context) time.Duration {
			if d := due(ctx); d >= 0 {
				return d + expiryMargin
			}
			return -1
		}
	}
	return wake.Hints(ctx, stop, &b.wg, subscribe, next)
}

// Join inserts or replaces this session's member row of group. Group
// membership goes around the bound on statements: a group's view decides
// which of thousands of Acquires to start or stop, and must not wait
// behind them.
func (s *session) Join(ctx context.Context, group string, m backend.Member) error {
	if err := s.CheckGroup(group); err != nil {
		return err
	}
	if len(m.Data) > backend.MaxMemberData {
		return fmt.Errorf("simba/mysql: join %q: member data of %d bytes, more than %d", group, len(m.Data), backend.MaxMemberData)
	}
	if len(m.ID) > 1024 {
		return fmt.Errorf("simba/mysql: join %q: member ID of %d bytes, more than 1024", group, len(m.ID))
	}
	op := fmt.Sprintf("join %q", group)
	if err := s.OverErr(op); err != nil {
		return err
	}
	t := s.b.t
	res, err := s.b.db.ExecContext(ctx, `INSERT INTO `+t.members+` (grp, session, id, data)
		SELECT ?, x.id, ?, ? FROM `+t.sessions+` x WHERE x.id = ? AND x.expires_us > `+nowUS+`
		ON DUPLICATE KEY UPDATE id = VALUES(id), data = VALUES(data)`, group, []byte(m.ID), nonNil(m.Data), s.id)
	if err != nil {
		return s.fail(ctx, op, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		// Nothing inserted or changed: the same member again, or the
		// session over.
		var one int
		err := s.b.db.QueryRowContext(ctx, `SELECT 1 FROM `+t.sessions+` WHERE id = ? AND expires_us > `+nowUS, s.id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return s.doneErr(op)
		}
		if err != nil {
			return s.fail(ctx, op, err)
		}
	}
	s.b.hub.memberChanged(group)
	return nil
}

// Leave deletes this session's member row of group.
func (s *session) Leave(ctx context.Context, group string) error {
	if err := s.CheckGroup(group); err != nil {
		return err
	}
	op := fmt.Sprintf("leave %q", group)
	if err := s.OverErr(op); err != nil {
		return err
	}
	if _, err := s.b.db.ExecContext(ctx, "DELETE FROM "+s.b.t.members+" WHERE grp = ? AND session = ?", group, s.id); err != nil {
		return s.fail(ctx, op, err)
	}
	s.b.hub.memberChanged(group)
	return nil
}

// Members lists the members of group whose sessions are alive.
func (src source) Members(ctx, _ context.Context, group string) ([]backend.Member, []backend.MalformedError, error) {
	b := src.b
	var ms []backend.Member
	err := queryRows(ctx, b.db, func(rows *sql.Rows) error {
		var m backend.Member
		var id []byte
		var sid int64
		if err := rows.Scan(&id, &sid, &m.Data); err != nil {
			return err
		}
		m.ID, m.Session = string(id), strconv.FormatInt(sid, 10)
		if m.Data == nil {
			m.Data = []byte{}
		}
		ms = append(ms, m)
		return nil
	}, `SELECT m.id, m.session, m.data FROM `+b.t.members+` m JOIN `+b.t.sessions+` x ON x.id = m.session
		WHERE m.grp = ? AND x.expires_us > `+nowUS, group)
	if err != nil {
		return nil, nil, b.connErr("members", err)
	}
	slices.SortFunc(ms, func(a, c backend.Member) int { return strings.Compare(a.Session, c.Session) })
	return ms, nil, nil
}

// WatchMembers hints changes of group: those made through this Backend at
// once, every poll interval, and at the earliest expiry of a member's
// session (an expiry writes nothing).
func (src source) WatchMembers(ctx, stop context.Context, group string) <-chan struct{} {
	b := src.b
	return b.watch(ctx, stop, func(f func()) func() { return b.hub.subscribe("m "+group, f) }, func(ctx context.Context) time.Duration {
		rctx, cancel := context.WithTimeout(ctx, lookTimeout)
		defer cancel()
		var left sql.NullInt64
		err := b.db.QueryRowContext(rctx, `SELECT MIN(x.expires_us) - `+nowUS+`
			FROM `+b.t.members+` m JOIN `+b.t.sessions+` x ON x.id = m.session
			WHERE m.grp = ? AND x.expires_us > `+nowUS, group).Scan(&left)
		switch {
		case err != nil:
			return b.poll
		case !left.Valid:
			return -1
		}
		return max(time.Duration(left.Int64)*time.Microsecond, 0)
	})
}

// HeldLeases lists the names under prefix with a live candidacy. It goes
// around the bound on statements: a group's view reads it every half
// grace period, whatever it holds.
func (src source) HeldLeases(ctx, _ context.Context, prefix string) ([]string, error) {
	b := src.b
	cond, args := prefixSQL("c.name", prefix)
	var names []string
	err := queryRows(ctx, b.db, func(rows *sql.Rows) error {
		var n string
		if err := rows.Scan(&n); err != nil {
			return err
		}
		names = append(names, n)
		return nil
	}, `SELECT DISTINCT c.name FROM `+b.t.candidacies+` c JOIN `+b.t.sessions+` x ON x.id = c.session
		WHERE `+cond+` AND x.expires_us > `+nowUS+` ORDER BY c.name`, args...)
	if err != nil {
		return nil, b.connErr("held leases", err)
	}
	return names, nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// LeaseFenceSQL returns the query with which a transaction of the caller's
// fences itself with the lease rows of the tables of prefix (the one given
// to [WithTablePrefix]; "" means "simba_"), for package
// github.com/simba-go/simba/backend/mysql/mylease. Its arguments are
// those [LeaseFenceArgs] returns for the lease's name and a token. It
// returns one row (held, last): held is 1 when the candidacy (name,
// token) exists, its session is alive by the database's clock and no
// candidacy is ahead of it (the term holds the lease), and the query has
// then locked the candidacy's row (LOCK IN SHARE MODE) until the
// transaction ends, so that no successor can take the lease over before it
// does (its deletion of the expired session deletes that row too, and
// waits), while the holder's renewals go on; last is the name's last
// granted token, 0 if none. It is the check of this backend's fenced
// writes, on the term's candidacy whichever session holds it.
func LeaseFenceSQL(prefix string) (string, error) {
	if prefix == "" {
		prefix = "simba_"
	}
	if !validPrefix.MatchString(prefix) {
		return "", fmt.Errorf("simba/mysql: table prefix %q: want 1-40 characters of a-z 0-9 _, starting with a letter", prefix)
	}
	t := newTables(prefix)
	return fenceSQL(t, `, COALESCE((SELECT l.last FROM `+t.leaseNames+` l WHERE l.name = ?), 0)`, "TRUE", ""), nil
}

// fenceSQL is the check of a fenced write, with the arguments of
// fenceArgs (the placeholders of more, then the lease's name and token,
// then those of sess): one row, whether the candidacy (name, token)
// exists with its session alive by the database's clock and no candidacy
// ahead of it, where sess holds (an SQL condition on c, the candidacy),
// and the columns more adds (", expr, …"); into, unless "", names the
// user variables that receive them. It locks the candidacy's row
// (LOCK IN SHARE MODE) until the transaction ends and nothing else: a
// waiter's deletion of the expired session, which deletes the candidacy
// too, waits for the write's commit, while the session's renewals (an
// UPDATE of its row) do not. The query's FROM is the candidacy: the
// select list's subqueries read without locks.
func fenceSQL(t tables, more, sess, into string) string {
	if into != "" {
		into = " INTO " + into
	}
	return `SELECT COALESCE(MAX((SELECT x.expires_us > ` + nowUS + ` FROM ` + t.sessions + ` x WHERE x.id = c.session)
			AND NOT EXISTS (SELECT 1 FROM ` + t.candidacies + ` o WHERE o.name = c.name AND o.token < c.token)), FALSE)` + more + into + `
		FROM ` + t.candidacies + ` c WHERE c.name = ? AND c.token = ? AND ` + sess + ` LOCK IN SHARE MODE`
}

// fenceArgs are the arguments of fenceSQL: those of more, the lease's
// name and token, and those of sess.
func fenceArgs(more []any, name string, token int64, sess ...any) []any {
	return append(append(more, name, token), sess...)
}

// LeaseFenceArgs returns the arguments of [LeaseFenceSQL]'s query for the
// lease name and token.
func LeaseFenceArgs(name string, token int64) []any { return fenceArgs([]any{name}, name, token) }
