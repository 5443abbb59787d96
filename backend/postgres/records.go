package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/view"
	"github.com/simba-go/simba/backend/kit/wake"
)

// fenceSQL is the CTE "fence" of a fenced write: the candidacy ($4 the
// lease, $3 the token) of session $5 (of any session when sess is ""),
// alive, with no candidacy ahead of it, locked (FOR KEY SHARE) until
// the write commits so that neither can be deleted meanwhile (a waiter's
// deletion of the expired session waits for it). "fenced" is the
// condition of the write: no fence (token 0) or the fence holds.
func fenceSQL(q, tok, name, sess string) (cte, fenced string) {
	r := strings.NewReplacer("$TOK", tok, "$NAME", name, "$SESS", sess)
	ofSession := ""
	if sess != "" {
		ofSession = ` AND c.session = $SESS::bigint`
	}
	cte = r.Replace(`fence AS (SELECT 1 FROM ` + q + `.candidacies c JOIN ` + q + `.sessions x ON x.id = c.session
		WHERE $TOK::bigint <> 0 AND c.name = $NAME::text AND c.token = $TOK` + ofSession + ` AND x.expires_at > clock_timestamp()
		AND NOT EXISTS (SELECT 1 FROM ` + q + `.candidacies o WHERE o.name = $NAME AND o.token < $TOK)
		FOR KEY SHARE OF c, x)`)
	return cte, r.Replace(`($TOK::bigint = 0 OR EXISTS (SELECT 1 FROM fence))`)
}

// LeaseFenceSQL returns the query with which a transaction of the caller's
// fences itself with the lease rows of schema (the name given to
// [WithSchema]; "" means "simba"), for package
// github.com/simba-go/simba/backend/postgres/pglease. With $1 the lease's
// name and $2 a token, it returns one row (held boolean, last bigint):
// held is true when the candidacy (name, token) exists, its session is
// alive by the database's clock and no candidacy is ahead of it (the
// term holds the lease), and the query has then locked the candidacy and
// session rows FOR KEY SHARE until the transaction ends, so that no
// successor can take the lease over before it does; last is the name's
// last granted token, 0 if none. It is the check of this backend's fenced
// writes, on the term's candidacy whichever session holds it.
func LeaseFenceSQL(schema string) (string, error) {
	if schema == "" {
		schema = "simba"
	}
	if !validSchema.MatchString(schema) {
		return "", fmt.Errorf("simba/postgres: schema name %q: want 1-57 characters of a-z 0-9 _, starting with a letter", schema)
	}
	q := pgx.Identifier{schema}.Sanitize()
	fence, _ := fenceSQL(q, "$2", "$1", "")
	return `WITH ` + fence + ` SELECT EXISTS (SELECT 1 FROM fence), COALESCE((SELECT last FROM ` + q + `.lease_names WHERE name = $1), 0)`, nil
}

// checkCond checks a condition's fields.
func checkCond(op string, cond backend.Condition) error {
	if cond.Token > 1<<62 {
		return fmt.Errorf("simba/postgres: %s: lease %q is not held with token %d: %w", op, cond.Lease, cond.Token, backend.ErrConflict)
	}
	if cond.Token != 0 && !backend.ValidName(cond.Lease) {
		return fmt.Errorf("simba/postgres: %s: invalid fence lease name %q: %w", op, cond.Lease, backend.ErrConflict)
	}
	if cond.IfVersion && cond.Version > 1<<62 {
		return fmt.Errorf("simba/postgres: %s: version %d differs: %w", op, cond.Version, backend.ErrConflict)
	}
	return nil
}

// source is the backend's SELECTs for sessions and views (view.Source):
// they need no session row.
type source struct{ b *Backend }

var _ view.Source = source{}

// The session's reads are view.Reader's, on source.
var (
	_ backend.LeaseLister  = (*session)(nil)
	_ backend.Records      = (*session)(nil)
	_ backend.SkipReporter = (*session)(nil)
)

// GetRecord reads the record at key.
func (src source) GetRecord(ctx, stop context.Context, key string) (backend.Record, error) {
	b := src.b
	op := fmt.Sprintf("get record %q", key)
	r := backend.Record{Key: key}
	var version, token int64
	err := b.queryRow(ctx, stop, "SELECT value, version, token FROM "+b.q+".records WHERE key = $1", key).Scan(&r.Value, &version, &token)
	if errors.Is(err, pgx.ErrNoRows) {
		return backend.Record{}, fmt.Errorf("simba/postgres: %s: %w", op, backend.ErrNoRecord)
	}
	if err != nil {
		return backend.Record{}, b.connErr(op, err)
	}
	r.Version, r.Token = uint64(version), uint64(token)
	return r, nil
}

// ListRecords lists the records under prefix, by key. A row of the
// records table is always a record: nothing is ever skipped.
func (src source) ListRecords(ctx, stop context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	b := src.b
	rows, err := b.query(ctx, stop, "SELECT key, value, version, token FROM "+b.q+".records WHERE starts_with(key, $1) ORDER BY key", prefix)
	if err != nil {
		return nil, nil, b.connErr("list records", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (backend.Record, error) {
		var r backend.Record
		var version, token int64
		err := row.Scan(&r.Key, &r.Value, &version, &token)
		r.Version, r.Token = uint64(version), uint64(token)
		return r, err
	})
	if err != nil {
		return nil, nil, b.connErr("list records", err)
	}
	return list, nil, nil
}

// PutRecord writes value at key if cond holds, checked in the same
// statement as the write.
func (s *session) PutRecord(ctx context.Context, key string, value []byte, cond backend.Condition) (backend.Record, error) {
	if err := backend.CheckRecord(key, value); err != nil {
		return backend.Record{}, fmt.Errorf("simba/postgres: %w", err)
	}
	op := fmt.Sprintf("put record %q", key)
	if err := s.OverErr(op); err != nil {
		return backend.Record{}, err
	}
	if err := checkCond(op, cond); err != nil {
		return backend.Record{}, err
	}
	q := s.b.q
	fence, fenced := fenceSQL(q, "$3", "$4", "$5")
	seq := "(nextval('" + q + ".record_versions') + " + baseSQL() + ")"
	var write string
	args := []any{key, nonNil(value), int64(cond.Token), cond.Lease, s.id}
	switch {
	case cond.IfVersion && cond.Version != 0:
		write = `UPDATE ` + q + `.records AS r SET value = $2, version = ` + seq + `, token = $3
			WHERE r.key = $1 AND r.version = $6 AND ` + fenced + ` AND ($3 = 0 OR r.token <= $3) RETURNING version`
		args = append(args, int64(cond.Version))
	case cond.IfVersion:
		write = `INSERT INTO ` + q + `.records (key, value, version, token) SELECT $1, $2, ` + seq + `, $3 WHERE ` + fenced + `
			ON CONFLICT (key) DO NOTHING RETURNING version`
	default:
		write = `INSERT INTO ` + q + `.records AS r (key, value, version, token) SELECT $1, $2, ` + seq + `, $3 WHERE ` + fenced + `
			ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version, token = EXCLUDED.token
			WHERE ($3 = 0 OR r.token <= EXCLUDED.token) RETURNING version`
	}
	var held bool
	var version, curVersion, curToken *int64
	err := s.b.queryRow(ctx, s.ctx, `WITH `+fence+`, cur AS (SELECT version, token FROM `+q+`.records WHERE key = $1), w AS (`+write+`)
		SELECT `+fenced+`, (SELECT version FROM w), (SELECT version FROM cur), (SELECT token FROM cur)`, args...).Scan(&held, &version, &curVersion, &curToken)
	if err != nil {
		return backend.Record{}, s.fail(ctx, op, err)
	}
	if version == nil {
		return backend.Record{}, s.conflict(op, cond, held, curVersion, curToken)
	}
	return backend.Record{Key: key, Value: append([]byte{}, value...), Version: uint64(*version), Token: cond.Token}, nil
}

// conflict is the error of a write whose condition failed.
func (s *session) conflict(op string, cond backend.Condition, held bool, curVersion, curToken *int64) error {
	switch {
	case !held:
		return fmt.Errorf("simba/postgres: %s: lease %q is not held with token %d by session %s: %w", op, cond.Lease, cond.Token, s.sid, backend.ErrConflict)
	case curToken != nil && cond.Token != 0 && uint64(*curToken) > cond.Token:
		return fmt.Errorf("simba/postgres: %s: written with token %d, newer than %d: %w", op, *curToken, cond.Token, backend.ErrConflict)
	case curVersion == nil:
		return fmt.Errorf("simba/postgres: %s: no record, want version %d: %w", op, cond.Version, backend.ErrConflict)
	default:
		return fmt.Errorf("simba/postgres: %s: version %d, want %d: %w", op, *curVersion, cond.Version, backend.ErrConflict)
	}
}

// DeleteRecord deletes the record at key if cond holds.
func (s *session) DeleteRecord(ctx context.Context, key string, cond backend.Condition) error {
	if err := backend.CheckKey(key); err != nil {
		return fmt.Errorf("simba/postgres: %w", err)
	}
	op := fmt.Sprintf("delete record %q", key)
	if err := s.OverErr(op); err != nil {
		return err
	}
	if err := checkCond(op, cond); err != nil {
		return err
	}
	q := s.b.q
	fence, fenced := fenceSQL(q, "$2", "$3", "$4")
	var version any // nil: any version
	if cond.IfVersion {
		version = int64(cond.Version)
	}
	var held, deleted bool
	var curVersion, curToken *int64
	err := s.b.queryRow(ctx, s.ctx, `WITH `+fence+`, cur AS (SELECT version, token FROM `+q+`.records WHERE key = $1),
		d AS (DELETE FROM `+q+`.records r WHERE r.key = $1 AND `+fenced+` AND ($2 = 0 OR r.token <= $2)
			AND ($5::bigint IS NULL OR r.version = $5) RETURNING 1)
		SELECT `+fenced+`, EXISTS (SELECT 1 FROM d), (SELECT version FROM cur), (SELECT token FROM cur)`,
		key, int64(cond.Token), cond.Lease, s.id, version).Scan(&held, &deleted, &curVersion, &curToken)
	if err != nil {
		return s.fail(ctx, op, err)
	}
	switch {
	case deleted:
		return nil
	case !held:
		return s.conflict(op, cond, false, nil, nil)
	case curVersion == nil && !(cond.IfVersion && cond.Version != 0):
		return nil
	}
	return s.conflict(op, cond, true, curVersion, curToken)
}

// WatchRecords hints changes of records under prefix, from the records
// table's NOTIFY trigger.
func (src source) WatchRecords(ctx, stop context.Context, prefix string) <-chan struct{} {
	return src.b.watch(ctx, stop, func(f func()) func() { return src.b.hub.subscribeRecords(prefix, f) }, nil)
}

// watch returns a hint channel fed by subscribe, closed when ctx or stop
// ends; next, if not nil, returns when the next hint is due with no
// notification (a member's expiry; negative: none), and the hint comes
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
// membership (Join, Leave, Members, WatchMembers' reads) goes around the
// bound on statements (see WithMaxRequests): a group's view decides which
// of thousands of Acquires to start or stop, and must not wait behind
// them.
func (s *session) Join(ctx context.Context, group string, m backend.Member) error {
	if err := s.CheckGroup(group); err != nil {
		return err
	}
	if len(m.Data) > backend.MaxMemberData {
		return fmt.Errorf("simba/postgres: join %q: member data of %d bytes, more than %d", group, len(m.Data), backend.MaxMemberData)
	}
	op := fmt.Sprintf("join %q", group)
	if err := s.OverErr(op); err != nil {
		return err
	}
	tag, err := s.b.pool.Exec(ctx, `INSERT INTO `+s.b.q+`.members (grp, session, id, data)
		SELECT $1, id, $3, $4 FROM `+s.b.q+`.sessions WHERE id = $2 AND expires_at > clock_timestamp()
		ON CONFLICT (grp, session) DO UPDATE SET id = EXCLUDED.id, data = EXCLUDED.data`, group, s.id, m.ID, nonNil(m.Data))
	if err != nil {
		return s.fail(ctx, op, err)
	}
	if tag.RowsAffected() == 0 {
		return s.doneErr(op)
	}
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
	if _, err := s.b.pool.Exec(ctx, "DELETE FROM "+s.b.q+".members WHERE grp = $1 AND session = $2", group, s.id); err != nil {
		return s.fail(ctx, op, err)
	}
	return nil
}

// Members lists the members of group whose sessions are alive. A member
// row always decodes: nothing is ever skipped.
func (src source) Members(ctx, _ context.Context, group string) ([]backend.Member, []backend.MalformedError, error) {
	b := src.b
	rows, err := b.pool.Query(ctx, `SELECT m.id, m.session, m.data FROM `+b.q+`.members m JOIN `+b.q+`.sessions x ON x.id = m.session
		WHERE m.grp = $1 AND x.expires_at > clock_timestamp()`, group)
	if err != nil {
		return nil, nil, b.connErr("members", err)
	}
	ms, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (backend.Member, error) {
		var m backend.Member
		var id int64
		err := row.Scan(&m.ID, &id, &m.Data)
		m.Session = strconv.FormatInt(id, 10)
		return m, err
	})
	if err != nil {
		return nil, nil, b.connErr("members", err)
	}
	slices.SortFunc(ms, func(a, c backend.Member) int { return strings.Compare(a.Session, c.Session) })
	return ms, nil, nil
}

// WatchMembers hints changes of group: the members table's NOTIFY
// trigger, and a wake at the earliest expiry of a member's session (an
// expiry writes nothing, so notifies nobody).
func (src source) WatchMembers(ctx, stop context.Context, group string) <-chan struct{} {
	b := src.b
	return b.watch(ctx, stop, func(f func()) func() { return b.hub.subscribe("m "+group, f) }, func(ctx context.Context) time.Duration {
		rctx, cancel := context.WithTimeout(ctx, lookTimeout)
		defer cancel()
		var left *float64
		err := b.pool.QueryRow(rctx, `SELECT EXTRACT(EPOCH FROM min(x.expires_at) - clock_timestamp())::float8
			FROM `+b.q+`.members m JOIN `+b.q+`.sessions x ON x.id = m.session
			WHERE m.grp = $1 AND x.expires_at > clock_timestamp()`, group).Scan(&left)
		switch {
		case err != nil:
			return b.poll // look again soon
		case left == nil:
			return -1
		}
		return max(time.Duration(*left*float64(time.Second)), 0)
	})
}
