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

	"github.com/go-sql-driver/mysql"

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

// errDupKey says that a record's INSERT met a row inserted meanwhile: the
// write is tried again.
var errDupKey = errors.New("simba/mysql: a record inserted meanwhile")

// PutRecord writes value at key if cond holds, checked in the same
// transaction as the write, under the locks of the fence's candidacy row
// (see fenceSQL) and of the record's row.
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
	var version int64
	err := s.fenced(ctx, op, cond, func(tx *sql.Tx, epoch int64) error {
		var err error
		version, err = s.b.writeRecordV(ctx, tx, key, value, int64(cond.Token), epoch, cond, op)
		return err
	})
	if err != nil {
		return backend.Record{}, err
	}
	s.b.hub.recordChanged(key)
	return backend.Record{Key: key, Value: append([]byte{}, value...), Version: uint64(version), Token: cond.Token}, nil
}

// fenced runs f in a transaction after checking cond's fence (when its
// token is not zero), reading the epoch: f gets the epoch. It maps the
// outcomes to errors for op.
func (s *session) fenced(ctx context.Context, op string, cond backend.Condition, f func(*sql.Tx, int64) error) error {
	t := s.b.t
	for attempt := 0; ; attempt++ {
		err := s.b.boundedTx(ctx, s.ctx, func(tx *sql.Tx) error {
			epoch, err := s.b.lockEpoch(ctx, tx)
			if err != nil {
				return err
			}
			if cond.Token != 0 {
				var held bool
				if err := tx.QueryRowContext(ctx, fenceSQL(t, "", "c.session = ?"), fenceArgs(nil, cond.Lease, int64(cond.Token), s.id)...).Scan(&held); err != nil {
					return err
				}
				if !held {
					return fmt.Errorf("simba/mysql: %s: lease %q is not held with token %d by session %s: %w", op, cond.Lease, cond.Token, s.sid, backend.ErrConflict)
				}
			}
			return f(tx, epoch)
		})
		switch {
		case (errors.Is(err, errServerChanged) || errors.Is(err, errDupKey)) && attempt < 2:
			if errors.Is(err, errServerChanged) {
				if err := s.resample(ctx, op); err != nil {
					return s.fail(ctx, op, err)
				}
			}
			continue
		case errors.Is(err, backend.ErrConflict):
			return err
		case err != nil:
			return s.fail(ctx, op, err)
		}
		return nil
	}
}

// curRecord is a record's row, read with its lock.
type curRecord struct {
	exists, deleted bool
	version, token  int64
}

func (b *Backend) lockRecord(ctx context.Context, tx *sql.Tx, key string) (curRecord, error) {
	var c curRecord
	err := tx.QueryRowContext(ctx, "SELECT version, token, deleted FROM "+b.t.records+" WHERE rkey = ? FOR UPDATE", key).Scan(&c.version, &c.token, &c.deleted)
	if errors.Is(err, sql.ErrNoRows) {
		return curRecord{}, nil
	}
	c.exists = err == nil
	return c, err
}

// nextVersion is the version of the next write of a record whose row is
// c, in epoch: above every version it had, and above every version of an
// earlier epoch (a deleted record's row stays, deleted, so that a key
// written again never repeats a version).
func nextVersion(c curRecord, epoch int64) int64 { return max(c.version+1, base(epoch)+1) }

// writeRecordV writes a record in tx, with the record's lock, if the
// token order and cond's version hold; it returns the version written.
func (b *Backend) writeRecordV(ctx context.Context, tx *sql.Tx, key string, value []byte, token, epoch int64, cond backend.Condition, op string) (int64, error) {
	c, err := b.lockRecord(ctx, tx, key)
	if err != nil {
		return 0, err
	}
	live := c.exists && !c.deleted
	switch {
	case token != 0 && live && c.token > token:
		return 0, fmt.Errorf("simba/mysql: %s: written with token %d, newer than %d: %w", op, c.token, token, backend.ErrConflict)
	case cond.IfVersion && cond.Version == 0 && live:
		return 0, fmt.Errorf("simba/mysql: %s: version %d, want no record: %w", op, c.version, backend.ErrConflict)
	case cond.IfVersion && cond.Version != 0 && !live:
		return 0, fmt.Errorf("simba/mysql: %s: no record, want version %d: %w", op, cond.Version, backend.ErrConflict)
	case cond.IfVersion && cond.Version != 0 && uint64(c.version) != cond.Version:
		return 0, fmt.Errorf("simba/mysql: %s: version %d, want %d: %w", op, c.version, cond.Version, backend.ErrConflict)
	}
	v := nextVersion(c, epoch)
	if c.exists {
		_, err = tx.ExecContext(ctx, "UPDATE "+b.t.records+" SET value = ?, version = ?, token = ?, deleted = FALSE WHERE rkey = ?", nonNil(value), v, token, key)
	} else {
		_, err = tx.ExecContext(ctx, "INSERT INTO "+b.t.records+" (rkey, value, version, token, deleted) VALUES (?, ?, ?, ?, FALSE)", key, nonNil(value), v, token)
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == errDupEntry {
			return 0, errDupKey
		}
	}
	return v, err
}

// writeRecord is writeRecordV for a release: the version is not needed.
func (b *Backend) writeRecord(ctx context.Context, tx *sql.Tx, key string, value []byte, token, epoch int64, cond backend.Condition, _ bool) error {
	_, err := b.writeRecordV(ctx, tx, key, value, token, epoch, cond, fmt.Sprintf("put record %q", key))
	if err == nil {
		b.hub.recordChanged(key)
	}
	return err
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
	deleted := false
	err := s.fenced(ctx, op, cond, func(tx *sql.Tx, epoch int64) error {
		deleted = false
		c, err := s.b.lockRecord(ctx, tx, key)
		if err != nil {
			return err
		}
		live := c.exists && !c.deleted
		switch {
		case !live && cond.IfVersion && cond.Version != 0:
			return fmt.Errorf("simba/mysql: %s: no record, want version %d: %w", op, cond.Version, backend.ErrConflict)
		case !live:
			return nil
		case cond.Token != 0 && uint64(c.token) > cond.Token:
			return fmt.Errorf("simba/mysql: %s: written with token %d, newer than %d: %w", op, c.token, cond.Token, backend.ErrConflict)
		case cond.IfVersion && uint64(c.version) != cond.Version:
			return fmt.Errorf("simba/mysql: %s: version %d, want %d: %w", op, c.version, cond.Version, backend.ErrConflict)
		}
		_, err = tx.ExecContext(ctx, "UPDATE "+s.b.t.records+" SET value = '', version = ?, token = 0, deleted = TRUE WHERE rkey = ?", nextVersion(c, epoch), key)
		deleted = err == nil
		return err
	})
	if err != nil {
		return err
	}
	if deleted {
		s.b.hub.recordChanged(key)
	}
	return nil
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
	return fenceSQL(t, `, COALESCE((SELECT l.last FROM `+t.leaseNames+` l WHERE l.name = ?), 0)`, "TRUE"), nil
}

// fenceSQL is the check of a fenced write, with the arguments of
// fenceArgs (the placeholders of more, then the lease's name and token,
// then those of sess): one row, whether the candidacy (name, token)
// exists with its session alive by the database's clock and no candidacy
// ahead of it, where sess holds (an SQL condition on c, the candidacy),
// and the columns more adds (", expr, …"). It locks the candidacy's row
// (LOCK IN SHARE MODE) until the transaction ends and nothing else: a
// waiter's deletion of the expired session, which deletes the candidacy
// too, waits for the write's commit, while the session's renewals (an
// UPDATE of its row) do not. The query's FROM is the candidacy: the
// select list's subqueries read without locks.
func fenceSQL(t tables, more, sess string) string {
	return `SELECT COALESCE(MAX((SELECT x.expires_us > ` + nowUS + ` FROM ` + t.sessions + ` x WHERE x.id = c.session)
			AND NOT EXISTS (SELECT 1 FROM ` + t.candidacies + ` o WHERE o.name = c.name AND o.token < c.token)), FALSE)` + more + `
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
