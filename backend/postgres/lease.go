package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/candidacy"
	"github.com/simba-go/simba/backend/kit/limit"
	"github.com/simba-go/simba/backend/kit/wake"
	"github.com/simba-go/simba/internal/plant"
)

// queue is the session's side of Acquire and Release (see
// candidacy.Queue): a candidacy is a row of the candidacies table, with
// the next token of the name's counter, and its Acquire waits until it is
// the oldest live candidacy of name.
type queue struct{ *session }

var _ candidacy.Queue = queue{}

// Watch calls f on the notifications of name's candidacies.
func (s queue) Watch(name string, f func()) (cancel func()) { return s.b.hub.subscribe("c "+name, f) }

// Changed wakes the monitor, which reads the session's candidacies.
func (s queue) Changed(string) { wake.Poke(s.check) }

// Register inserts the candidacy and returns its token, in one
// statement: the counter's row lock serialises registrations of name, so
// tokens strictly increase in commit order; the session must be alive;
// this session's older candidacies for name go (a re-Acquire frees the
// old holding and queues at the back). The statement also draws a record
// version from the sequence for the candidacy's release with records (see
// Release): its commit is durable, so no crash can hand that version out
// again.
//
// Each attempt has a number of the session's, reg, kept in the candidacy
// row: the DELETE takes only candidacies of smaller numbers, and nothing
// is written once the session's floor (reg_floor) has reached reg, read
// with a key-share lock on the session's row: it waits for withdrawAll's
// row lock, then reads the row it wrote (and never waits for a renewal,
// which changes no key). An attempt whose outcome is unknown (its ctx
// ended with the statement sent) may still run on the server at any later
// time; withdrawAll raises the floor to its number, so that it then
// changes nothing, and deletes its candidacy if it ran before: such a
// late statement never deletes the candidacy of a later Acquire, nor
// leaves one that nobody knows of (TestLateRegistrationOfCancelledAcquire).
func (s queue) Register(ctx context.Context, name string) (uint64, error) {
	op := fmt.Sprintf("acquire %q", name)
	s.registering.Add(1)
	defer s.registering.Add(-1)
	for attempt := 0; ; attempt++ {
		token, err := s.register(ctx, op, name)
		if errors.Is(err, errSuperseded) && attempt < 4 {
			// The withdrawal of another Acquire of the session, whose
			// outcome was unknown, raised the floor past this number.
			continue
		}
		return token, err
	}
}

// errSuperseded says that a registration found the session's floor at or
// past its number (see Register).
var errSuperseded = errors.New("the registration was superseded by the withdrawal of another whose outcome was unknown")

// register is one attempt of Register's.
func (s queue) register(ctx context.Context, op, name string) (uint64, error) {
	q := s.b.q
	var (
		token, tl, version int64
		prev               *int64
		db                 time.Time
	)
	reg := s.regs.Add(1)
	sent := time.Now()
	err := s.b.queryRow(ctx, s.ctx, `WITH alive AS (
			SELECT id FROM `+q+`.sessions WHERE id = $2 AND expires_at > clock_timestamp() AND reg_floor < $3 FOR KEY SHARE),
		old AS (DELETE FROM `+q+`.candidacies WHERE name = $1 AND session = $2 AND reg < $3 AND EXISTS (SELECT 1 FROM alive)),
		bump AS (INSERT INTO `+q+`.lease_names AS l (name, last) SELECT $1, GREATEST(1, `+baseSQL()+`) FROM alive
			ON CONFLICT (name) DO UPDATE SET last = GREATEST(l.last + 1, `+baseSQL()+`) RETURNING last),
		ins AS (INSERT INTO `+q+`.candidacies (name, token, session, reg) SELECT $1, last, $2, $3 FROM bump RETURNING token)
		SELECT token, (SELECT last FROM `+q+`.lease_names WHERE name = $1), clock_timestamp(), `+timelineSQL+`,
			nextval('`+q+`.record_versions') + `+baseSQL()+` FROM ins`,
		name, s.id, reg).Scan(&token, &prev, &db, &tl, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		// The session is over, or its floor has reached reg.
		var above bool
		err := s.b.queryRow(ctx, s.ctx, `SELECT reg_floor >= $2 FROM `+q+`.sessions WHERE id = $1 AND expires_at > clock_timestamp()`, s.id, reg).Scan(&above)
		switch {
		case err == nil && above:
			return 0, fmt.Errorf("simba/postgres: %s: session %s: %w", op, s.sid, errSuperseded)
		case err == nil || errors.Is(err, pgx.ErrNoRows):
			return 0, s.doneErr(op)
		default:
			return 0, s.fail(ctx, op, err)
		}
	}
	if err != nil {
		if !errors.Is(err, limit.ErrNotSent) {
			// The outcome is unknown: a candidacy may exist, or be about to.
			s.withdrawAll(name, reg)
		}
		return 0, s.fail(ctx, op, err)
	}
	if err := s.b.noteClock(op, sent, time.Now(), db, tl); err != nil {
		s.withdrawAll(name, reg)
		return 0, err
	}
	// prev is the name's counter in the statement's snapshot, before the
	// bump (or a later one, which only makes this more careful): whether
	// a term of the name was granted on this timeline already.
	last := int64(0)
	if prev != nil {
		last = *prev
	}
	s.registered(name, token, version)
	if tl > 1 && !settled(last, tl) && !plant.Is(plant.KeepChainOnFailover) {
		s.mu.Lock()
		s.older[candidacyKey{name, token}] = true // see holdBack
		s.mu.Unlock()
	}
	return uint64(token), nil
}

// Ahead reads the queue once (see ahead): the wait it returns ends at the
// earliest expiry ahead, or within the poll interval while not listening.
func (s queue) Ahead(ctx context.Context, w *candidacy.Waiter) (time.Duration, error) {
	mine, alive, wait, atGrant, err := s.ahead(ctx, w.Name, int64(w.Token))
	switch {
	case err != nil:
		return 0, err
	case !alive:
		// Expired in the read's snapshot: over only once its row is
		// gone (see clearExpired); else a renewal was in flight.
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
			s.settle(ctx, w.Name, int64(w.Token))
		}
		w.AtGrant = atGrant
		return -1, nil
	}
	d := wait + expiryMargin
	if !s.b.hub.isListening() {
		d = min(d, s.b.poll)
	}
	return d, nil
}

// ahead reads the queue of name for the candidacy token: whether it is
// still there, whether its session is alive, and how long until the
// earliest expiry of the candidacies ahead of it (negative: none, it holds
// the lease; zero: read again at once). It first deletes the expired
// sessions ahead of it: the DELETE waits for a fenced write of theirs that
// holds their row's lock, so that a holding starts after its predecessor's
// last write.
//
// When the session was opened with SessionOptions.GrantRecords, the same
// statement lists the records under that prefix if none is ahead (the
// read grants the lease): atGrant, the grant's snapshot (see
// backend.GrantSnapshot).
//
// Only the sessions that DELETE removed count as gone, whatever their
// expiry looks like in the statement's snapshot: a renewal that passed its
// liveness test just before the expiry and commits just after it holds the
// row's lock, so the DELETE waits for it, finds the row renewed and leaves
// it, while the snapshot, taken before that commit, still shows the old,
// past expiry. Such a candidacy stays ahead (with a wait of zero: the next
// read, in a new snapshot, sees the renewal); trusting the snapshot's
// expiry there would grant the lease while the renewed holder's term goes
// on.
//
// The DELETE goes by the database time this client has verified, and
// only once its chain of agreeing samples vouches for the session's
// expiry (see clock.go): a session that expired by the statement's own
// clock but not by the verified time stays ahead with a wait of zero (the
// statement's own sample verifies a later time for the next read), and
// one whose expiry the chain cannot vouch for yet stays ahead until it can.
func (s *session) ahead(ctx context.Context, name string, token int64) (mine, alive bool, wait time.Duration, atGrant *candidacy.Snapshot, err error) {
	q := s.b.q
	var (
		left     *float64
		db       time.Time
		tl       int64
		keys     []string
		values   [][]byte
		versions []int64
		tokens   []int64
	)
	sent := time.Now()
	v, c, a := guardArgs(s.b.clock.Guard(sent))
	err = s.b.queryRow(ctx, s.ctx, `WITH gone AS (
			DELETE FROM `+q+`.sessions x WHERE `+expiredGuardSQL("x", "$4", "$5", "$6")+`
			AND x.id IN (SELECT session FROM `+q+`.candidacies WHERE name = $1 AND token < $2) RETURNING id),
		ahead AS (SELECT EXTRACT(EPOCH FROM min(GREATEST(x.expires_at - clock_timestamp(),
					CASE WHEN x.expires_at - x.ttl >= $5::timestamptz THEN interval '0'
					ELSE x.ttl * `+trustSQL+` - $6::interval END)))::float8 AS wait
				FROM `+q+`.candidacies c JOIN `+q+`.sessions x ON x.id = c.session
				WHERE c.name = $1 AND c.token < $2
				AND x.id NOT IN (SELECT id FROM gone)),
		listed AS (SELECT array_agg(key ORDER BY key) AS keys, array_agg(value ORDER BY key) AS vals,
				array_agg(version ORDER BY key) AS versions, array_agg(token ORDER BY key) AS tokens
			FROM `+q+`.records WHERE $7 <> '' AND (SELECT wait FROM ahead) IS NULL AND starts_with(key, $7))
		SELECT
			COALESCE((SELECT expires_at > clock_timestamp() FROM `+q+`.sessions WHERE id = $3), false),
			EXISTS (SELECT 1 FROM `+q+`.candidacies WHERE name = $1 AND token = $2 AND session = $3),
			(SELECT wait FROM ahead),
			clock_timestamp(), `+timelineSQL+`,
			(SELECT keys FROM listed), (SELECT vals FROM listed), (SELECT versions FROM listed), (SELECT tokens FROM listed)`,
		name, token, s.id, v, c, a, s.grantPrefix).Scan(&alive, &mine, &left, &db, &tl, &keys, &values, &versions, &tokens)
	if err != nil {
		return false, false, 0, nil, err
	}
	if err := s.b.noteClock(fmt.Sprintf("acquire %q", name), sent, time.Now(), db, tl); err != nil {
		return false, false, 0, nil, candidacy.Final(err)
	}
	if left == nil {
		if s.grantPrefix != "" {
			atGrant = &candidacy.Snapshot{Prefix: s.grantPrefix, Records: make([]backend.Record, len(keys))}
			for i := range keys {
				atGrant.Records[i] = backend.Record{Key: keys[i], Value: values[i], Version: uint64(versions[i]), Token: uint64(tokens[i])}
			}
		}
		return mine, alive, -1, atGrant, nil
	}
	return mine, alive, max(time.Duration(*left*float64(time.Second)), 0), nil, nil
}

// Withdraw deletes the candidacy (name, token) of a giving-up Acquire,
// now or, when the server cannot be reached, in the background until it
// can or the session is over.
func (s queue) Withdraw(name string, token uint64) {
	s.gone(name, int64(token))
	s.retry(fmt.Sprintf("withdrawing the candidacy %q/%d", name, token), func(ctx context.Context) error {
		_, err := s.b.exec(ctx, s.ctx, "DELETE FROM "+s.b.q+".candidacies WHERE name = $1 AND token = $2 AND session = $3", name, int64(token), s.id)
		return err
	})
}

// withdrawAll withdraws what a registration whose outcome is unknown
// (its ctx ended, its connection broke: the server may still commit it),
// numbered reg, may have left (see Register): it raises the session's
// floor to reg, so that the registration, if it runs later, changes
// nothing, then deletes the session's candidacies for name numbered up to
// reg. It locks the session's row FOR UPDATE first, the one lock that
// conflicts with a registration's key-share lock: a registration holding
// it commits before, and the DELETE, a later statement of the same
// transaction, sees its candidacy; one that waits for it reads the new
// floor. A later Acquire's candidacy has a larger number: the withdrawal
// never takes it, even when it runs late. Retried in the background as
// withdraw is.
func (s *session) withdrawAll(name string, reg int64) {
	q := s.b.q
	s.retry(fmt.Sprintf("withdrawing the candidacies for %q", name), func(ctx context.Context) error {
		return s.b.beginFunc(ctx, s.ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT 1 FROM `+q+`.sessions WHERE id = $1 FOR UPDATE`, s.id); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE `+q+`.sessions SET reg_floor = GREATEST(reg_floor, $2) WHERE id = $1`, s.id, reg); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "DELETE FROM "+q+".candidacies WHERE name = $1 AND session = $2 AND reg <= $3", name, s.id, reg)
			return err
		})
	})
}

// withdrawTimeout bounds the withdrawal an Acquire makes before it
// returns; past it, the withdrawal goes on in the background.
const withdrawTimeout = time.Second

// retry runs f now, and retries it with backoff in the background until
// it succeeds or the session is over (see candidacy.Session.Retry).
func (s *session) retry(what string, f func(context.Context) error) {
	switch err := s.Retry(withdrawTimeout, lookTimeout, f); {
	case err == nil:
	case errors.Is(err, limit.ErrNotSent):
		// Its turn among the bounded statements did not come in time.
		s.b.log.Debug("simba/postgres: "+what+" waits for a statement slot; retrying in the background", "session", s.sid)
	default:
		s.b.log.Warn("simba/postgres: "+what+" failed; retrying in the background", "session", s.sid, "err", err)
	}
}

var _ backend.CandidateLister = (*session)(nil)

// Candidates lists the sessions of the live candidacies of name, oldest
// first.
func (s *session) Candidates(ctx context.Context, name string) ([]string, error) {
	if err := s.CheckName("candidates", name); err != nil {
		return nil, err
	}
	rows, err := s.b.query(ctx, s.ctx, `SELECT c.session FROM `+s.b.q+`.candidacies c JOIN `+s.b.q+`.sessions x ON x.id = c.session
		WHERE c.name = $1 AND x.expires_at > clock_timestamp() ORDER BY c.token`, name)
	if err != nil {
		return nil, s.fail(ctx, "candidates", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, s.fail(ctx, "candidates", err)
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.FormatInt(id, 10)
	}
	return out, nil
}

// HeldLeases lists the names under prefix with a live candidacy. It goes
// around the bound on statements (see WithMaxRequests): a group's view
// reads it every half grace period, whatever it holds.
func (src source) HeldLeases(ctx, _ context.Context, prefix string) ([]string, error) {
	b := src.b
	rows, err := b.pool.Query(ctx, `SELECT DISTINCT c.name FROM `+b.q+`.candidacies c JOIN `+b.q+`.sessions x ON x.id = c.session
		WHERE starts_with(c.name, $1) AND x.expires_at > clock_timestamp() ORDER BY c.name`, prefix)
	if err != nil {
		return nil, b.connErr("held leases", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, b.connErr("held leases", err)
	}
	return names, nil
}

// Release deletes the candidacy (name, session, token) if it is still
// there and the session alive: one statement, one round trip. With
// records, the same statement also writes them, fenced by the holding
// (see releaseSQL).
//
// Without records, the release commits with synchronous_commit off
// (asyncSQL): the server acknowledges it without waiting for its WAL to
// reach the disk. A crash of the server before it does (within
// wal_writer_delay, unless another commit flushes it first: every durable
// commit flushes the WAL up to itself) loses the release: the candidacy
// comes back, ahead of every waiter, and of the holder granted meanwhile,
// with a session that no longer knows it. Nobody holds twice (the
// released term is over), but the lease would stay stuck behind it for
// as long as the session lives. So the session keeps the candidacies it
// released so (unflushed) until a renewal, a durable commit sent after
// the release returned, confirms that the WAL is on disk past it; the
// renewal deletes them again in the same statement, in case the server
// lost them (see KeepAlive).
//
// The release with records commits so too, and the session keeps its
// records with the candidacy until a renewal confirms it: the renewal
// writes them again, as they were, where the candidacy came back. Their
// version is the one Register drew for the candidacy, by a durable commit,
// not one from the sequence now: a crash that lost the release would lose
// the sequence's advance too (it is WAL-logged once in 32 values, with
// the transaction that crosses the mark), and the server would hand a
// version that readers had seen out again, with another value. Without
// that version (a candidacy this session did not register), the release
// with records commits durably, with versions from the sequence.
//
// The session keeps an asynchronous release so whatever its outcome: an
// error may come after the server applied it (a reply lost, a ctx ended
// first), and the retry then finds the candidacy gone, by the first
// attempt's own release, which a crash can still undo. The renewal's
// redo of a release that was never applied, or whose candidacy went
// otherwise, finds nothing to do, or does the release the caller was
// retrying.
func (s queue) Release(ctx context.Context, h *candidacy.Holding, op string, records []backend.Record) (bool, error) {
	name, token := h.Name(), int64(h.Token())
	q := s.b.q
	var released bool
	if len(records) == 0 {
		err := s.b.queryRow(ctx, s.ctx, `WITH `+asyncSQL+`,
			d AS (DELETE FROM `+q+`.candidacies WHERE name = $1 AND token = $2 AND session = $3
				AND EXISTS (SELECT 1 FROM `+q+`.sessions x WHERE x.id = $3 AND x.expires_at > clock_timestamp()) RETURNING 1)
			SELECT EXISTS (SELECT 1 FROM d), (SELECT v FROM async) IS NOT NULL`, name, token, s.id).Scan(&released, new(bool))
		// Whatever the outcome, the release may have been applied (see
		// releasedAsync's note).
		s.releasedAsync(name, token, nil)
		if err != nil {
			return false, s.releaseErr(ctx, op, err)
		}
		s.gone(name, token)
		return released, nil
	}
	keys, values := recordArrays(records)
	version, reserved := s.releaseVersion(name, token)
	var err error
	if reserved {
		err = s.b.queryRow(ctx, s.ctx, releaseSQL(q, true, true), name, token, s.id, keys, values, version).Scan(&released, new(bool))
		s.releasedAsync(name, token, &releaseRecords{keys: keys, values: values, version: version})
	} else {
		err = s.b.queryRow(ctx, s.ctx, releaseSQL(q, false, false), name, token, s.id, keys, values).Scan(&released)
	}
	if err != nil {
		return false, s.releaseErr(ctx, op, err)
	}
	s.gone(name, token)
	return released, nil
}

// asyncSQL is the CTE "async" of a release, whose statement selects it:
// synchronous_commit off for the statement's transaction only (set_config
// with is_local, as SET LOCAL), the release (see Release).
const asyncSQL = `async AS (SELECT set_config('synchronous_commit', 'off', true) AS v)`

// releaseSQL is the release with records, one statement ($1 the name, $2
// the token, $3 the session, $4 and $5 the records' keys and values; with
// reserved, $6 the version Register drew for the records): the CTE "held"
// locks the candidacy (FOR UPDATE) and the session's row (FOR KEY SHARE,
// so that a waiter's deletion of the expired session waits for the
// release), the session alive by the statement's clock; the records are
// written and the candidacy deleted only if it found them, the records
// fenced by the token as every fenced write is (a record written with a
// newer token stays). All of it commits or none: one statement is one
// transaction. With reserved, the records take version $6; without, they
// take versions from the sequence. With async (reserved only), the
// transaction commits with synchronous_commit off (see Release); without,
// durably. Its row says whether the candidacy was released (and, with
// async, selects the CTE "async").
//
// The CTEs share one snapshot, but "held" locks the rows it returns and
// rechecks them at their latest version (READ COMMITTED's EvalPlanQual);
// the DELETE, if the candidacy went meanwhile, finds nothing; ON CONFLICT
// DO UPDATE fences against the latest committed record.
func releaseSQL(q string, reserved, async bool) string {
	with, version, sel := "WITH ", "nextval('"+q+".record_versions') + "+baseSQL(), ""
	if reserved {
		version = "$6::bigint"
	}
	if async {
		with, sel = "WITH "+asyncSQL+", ", ", (SELECT v FROM async) IS NOT NULL"
	}
	return with + `held AS (
			SELECT 1 FROM ` + q + `.candidacies c JOIN ` + q + `.sessions x ON x.id = c.session
			WHERE c.name = $1 AND c.token = $2 AND c.session = $3 AND x.expires_at > clock_timestamp()
			FOR UPDATE OF c FOR KEY SHARE OF x),
		w AS (INSERT INTO ` + q + `.records AS r (key, value, version, token)
			SELECT u.key, u.value, ` + version + `, $2
			FROM unnest($4::text[], $5::bytea[]) AS u(key, value) WHERE EXISTS (SELECT 1 FROM held)
			ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version, token = EXCLUDED.token
			WHERE r.token <= EXCLUDED.token),
		d AS (DELETE FROM ` + q + `.candidacies WHERE name = $1 AND token = $2 AND session = $3
			AND EXISTS (SELECT 1 FROM held) RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM d)` + sel
}

// recordArrays returns the keys and values of records as two arrays in
// the same order, a key written twice kept once, at its last value (the
// value a statement per record would have left).
func recordArrays(records []backend.Record) (keys []string, values [][]byte) {
	at := make(map[string]int, len(records))
	for _, r := range records {
		if i, ok := at[r.Key]; ok {
			values[i] = nonNil(r.Value)
			continue
		}
		at[r.Key] = len(keys)
		keys, values = append(keys, r.Key), append(values, nonNil(r.Value))
	}
	return keys, values
}

// releaseErr is the error of a release that failed; nil (the holding
// had ended: ErrNotHeld) when the session ended while it waited for a
// statement slot (it sent nothing).
func (s queue) releaseErr(ctx context.Context, op string, err error) error {
	if errors.Is(err, limit.ErrNotSent) && ctx.Err() == nil && s.Over() {
		return nil
	}
	return s.fail(ctx, op, err)
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
