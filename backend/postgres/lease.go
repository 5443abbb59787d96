package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kit/lost"
)

var (
	_ backend.Lease          = (*lease)(nil)
	_ backend.LostNotifier   = (*lease)(nil)
	_ backend.RecordReleaser = (*lease)(nil)
)

// checkName returns an error for an invalid lease or group name.
func checkName(what, name string) error {
	if !backend.ValidName(name) {
		return fmt.Errorf("simba/postgres: invalid %s name %q: want 1-128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", what, name)
	}
	return nil
}

// Acquire registers this session's candidacy for name, with the next
// token of the name's counter, and waits until it is the oldest live
// candidacy of name.
func (s *session) Acquire(ctx context.Context, name string) (backend.Lease, error) {
	op := fmt.Sprintf("acquire %q", name)
	if err := checkName("lease", name); err != nil {
		return nil, err
	}
	if err := s.overErr(op); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("simba/postgres: %s: %w", op, context.Cause(ctx))
	}
	// Subscribe before registering, so that no hand-off goes unseen.
	wake := make(chan struct{}, 1)
	unsub := s.b.hub.subscribe("c "+name, func() { poke(wake) })
	defer unsub()
	token, err := s.register(ctx, op, name)
	if err != nil {
		return nil, err
	}
	s.replaced(name, uint64(token))
	if err := s.waitOldest(ctx, op, name, token, wake); err != nil {
		return nil, err
	}
	l := &lease{s: s, name: name, token: uint64(token), sig: lost.New()}
	l.unsub = s.b.hub.subscribe("c "+name, func() { poke(s.check) })
	s.mu.Lock()
	if s.over {
		s.mu.Unlock()
		l.unsub()
		return nil, fmt.Errorf("simba/postgres: %s: session %s: %w", op, s.sid, backend.ErrSessionDone)
	}
	s.held[l] = struct{}{}
	s.mu.Unlock()
	select {
	case <-wake: // a change since the last read: the monitor reads again
		poke(s.check)
	default:
	}
	return l, nil
}

// register inserts the candidacy and returns its token, in one
// statement: the counter's row lock serialises registrations of name, so
// tokens strictly increase in commit order; the session must be alive;
// this session's older candidacies for name go (a re-Acquire frees the
// old holding and queues at the back).
func (s *session) register(ctx context.Context, op, name string) (int64, error) {
	q := s.b.q
	var token int64
	err := s.b.queryRow(ctx, s.ctx, `WITH alive AS (
			SELECT id FROM `+q+`.sessions WHERE id = $2 AND expires_at > clock_timestamp() FOR KEY SHARE),
		old AS (DELETE FROM `+q+`.candidacies WHERE name = $1 AND session = $2 AND EXISTS (SELECT 1 FROM alive)),
		bump AS (INSERT INTO `+q+`.lease_names AS l (name, last) SELECT $1, 1 FROM alive
			ON CONFLICT (name) DO UPDATE SET last = l.last + 1 RETURNING last)
		INSERT INTO `+q+`.candidacies (name, token, session) SELECT $1, last, $2 FROM bump RETURNING token`,
		name, s.id).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, s.doneErr(op)
	}
	if err != nil {
		if !errors.Is(err, errNotSent) {
			// The outcome is unknown: a candidacy may exist, or be about to.
			s.withdrawAll(name)
		}
		return 0, s.fail(ctx, op, err)
	}
	return token, nil
}

// waitOldest waits until the candidacy (name, token) is the oldest live
// one: it reads the queue, then sleeps until a notification of name or
// the earliest expiry ahead (at most the poll interval while not
// listening), and reads again. When ctx ends it withdraws the candidacy.
func (s *session) waitOldest(ctx context.Context, op, name string, token int64, wake <-chan struct{}) error {
	gaveUp := func() error {
		s.withdraw(name, token)
		return fmt.Errorf("simba/postgres: %s: %w", op, context.Cause(ctx))
	}
	over := func() error {
		return fmt.Errorf("simba/postgres: %s: session %s: %w", op, s.sid, backend.ErrSessionDone)
	}
	for attempt := 0; ; {
		mine, alive, wait, err := s.ahead(ctx, name, token)
		switch {
		case err != nil && ctx.Err() != nil:
			return gaveUp()
		case err != nil && s.ctx.Err() != nil: // the session is over, or the backend closed
			return over()
		case err != nil:
			attempt++
			s.b.log.Debug("simba/postgres: reading the queue", "lease", name, "err", err)
			if !backoff.Sleep(ctx, backoff.Wait(attempt, time.Second)) {
				return gaveUp()
			}
			continue
		case !alive:
			// Expired in the read's snapshot: over only once its row is
			// gone (see clearExpired); else a renewal was in flight.
			if over, err := s.clearExpired(ctx); over {
				return s.doneErr(op)
			} else if err != nil && ctx.Err() != nil {
				return gaveUp()
			}
			continue
		case !mine:
			return fmt.Errorf("simba/postgres: %s: the candidacy with token %d was deleted while it waited", op, token)
		case wait < 0:
			return nil
		}
		attempt = 0
		d := wait + expiryMargin
		if !s.b.hub.isListening() {
			d = min(d, s.b.poll)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return gaveUp()
		case <-s.ctx.Done(): // the session is over, or the backend closed
			t.Stop()
			return over()
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// ahead reads the queue of name for the candidacy token: whether it is
// still there, whether its session is alive, and how long until the
// earliest expiry of the candidacies ahead of it (negative: none, it holds
// the lease; zero: read again at once). It first deletes the expired
// sessions ahead of it: the DELETE waits for a fenced write of theirs that
// holds their row's lock, so that a holding starts after its predecessor's
// last write.
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
func (s *session) ahead(ctx context.Context, name string, token int64) (mine, alive bool, wait time.Duration, err error) {
	q := s.b.q
	var (
		left *float64
		db   time.Time
	)
	sent := time.Now()
	v, c, a := guardArgs(s.b.clock.guard(sent))
	err = s.b.queryRow(ctx, s.ctx, `WITH gone AS (
			DELETE FROM `+q+`.sessions x WHERE `+expiredGuardSQL("x", "$4", "$5", "$6")+`
			AND x.id IN (SELECT session FROM `+q+`.candidacies WHERE name = $1 AND token < $2) RETURNING id)
		SELECT
			COALESCE((SELECT expires_at > clock_timestamp() FROM `+q+`.sessions WHERE id = $3), false),
			EXISTS (SELECT 1 FROM `+q+`.candidacies WHERE name = $1 AND token = $2 AND session = $3),
			(SELECT EXTRACT(EPOCH FROM min(GREATEST(x.expires_at - clock_timestamp(),
					CASE WHEN x.expires_at - x.ttl >= $5::timestamptz THEN interval '0'
					ELSE x.ttl * `+trustSQL+` - $6::interval END)))::float8
				FROM `+q+`.candidacies c JOIN `+q+`.sessions x ON x.id = c.session
				WHERE c.name = $1 AND c.token < $2
				AND x.id NOT IN (SELECT id FROM gone)),
			clock_timestamp()`,
		name, token, s.id, v, c, a).Scan(&alive, &mine, &left, &db)
	if err != nil {
		return false, false, 0, err
	}
	s.b.noteClock(sent, time.Now(), db)
	if left == nil {
		return mine, alive, -1, nil
	}
	return mine, alive, max(time.Duration(*left*float64(time.Second)), 0), nil
}

// replaced closes Lost of this session's earlier holdings of name, which
// the Acquire that registered token deleted.
func (s *session) replaced(name string, token uint64) {
	var old []*lease
	s.mu.Lock()
	for l := range s.held {
		if l.name == name && l.token < token {
			old = append(old, l)
			delete(s.held, l)
		}
	}
	s.mu.Unlock()
	for _, l := range old {
		l.lose()
	}
}

// withdraw deletes the candidacy (name, token) of a giving-up Acquire,
// now or, when the server cannot be reached, in the background until it
// can or the session is over.
func (s *session) withdraw(name string, token int64) {
	s.retry(fmt.Sprintf("withdrawing the candidacy %q/%d", name, token), func(ctx context.Context) error {
		_, err := s.b.exec(ctx, s.ctx, "DELETE FROM "+s.b.q+".candidacies WHERE name = $1 AND token = $2 AND session = $3", name, token, s.id)
		return err
	})
}

// withdrawAll deletes every candidacy of this session for name, after a
// registration whose outcome is unknown (its ctx ended, its connection
// broke: the server may still commit it). It first takes the lock of the
// name's counter row, with a write that changes nothing, so that it waits
// for a registration still in flight; the DELETE, a later statement of the
// same transaction, then sees that registration's candidacy if it
// committed. Retried in the background as withdraw is.
func (s *session) withdrawAll(name string) {
	q := s.b.q
	s.retry(fmt.Sprintf("withdrawing the candidacies for %q", name), func(ctx context.Context) error {
		return s.b.beginFunc(ctx, s.ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO `+q+`.lease_names AS l (name, last) VALUES ($1, 1)
				ON CONFLICT (name) DO UPDATE SET last = l.last`, name); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "DELETE FROM "+q+".candidacies WHERE name = $1 AND session = $2", name, s.id)
			return err
		})
	})
}

// withdrawTimeout bounds the withdrawal an Acquire makes before it
// returns; past it, the withdrawal goes on in the background.
const withdrawTimeout = time.Second

// retry runs f now, and retries it with backoff in the background until
// it succeeds or the session is over.
func (s *session) retry(what string, f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(s.ctx, withdrawTimeout)
	err := f(ctx)
	cancel()
	if err == nil || s.ctx.Err() != nil {
		return
	}
	if errors.Is(err, errNotSent) {
		// Its turn among the bounded statements did not come in time.
		s.b.log.Debug("simba/postgres: "+what+" waits for a statement slot; retrying in the background", "session", s.sid)
	} else {
		s.b.log.Warn("simba/postgres: "+what+" failed; retrying in the background", "session", s.sid, "err", err)
	}
	s.b.wg.Add(1)
	go func() {
		defer s.b.wg.Done()
		for attempt := 1; ; attempt++ {
			if !backoff.Sleep(s.ctx, backoff.Wait(attempt, s.TTL()/3)) {
				return
			}
			ctx, cancel := context.WithTimeout(s.ctx, lookTimeout)
			err := f(ctx)
			cancel()
			if err == nil {
				return
			}
		}
	}()
}

// Candidates lists the sessions of the live candidacies of name, oldest
// first.
func (s *session) Candidates(ctx context.Context, name string) ([]string, error) {
	if err := checkName("lease", name); err != nil {
		return nil, err
	}
	if err := s.overErr("candidates"); err != nil {
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

// HeldLeases lists the names under prefix with a live candidacy.
func (s *session) HeldLeases(ctx context.Context, prefix string) ([]string, error) {
	if err := s.overErr("held leases"); err != nil {
		return nil, err
	}
	return s.b.heldLeases(ctx, prefix)
}

// heldLeases goes around the bound on statements (see WithMaxRequests):
// a group's view reads it every half grace period, whatever it holds.
func (b *Backend) heldLeases(ctx context.Context, prefix string) ([]string, error) {
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

// lease is one holding: the candidacy (name, token) of its session.
type lease struct {
	s     *session
	name  string
	token uint64
	unsub func()
	// sig is Lost. A loss seen while the owner's release is in flight
	// waits for its outcome: the release's own DELETE of the candidacy,
	// seen by the session's monitor before the release returns, is no
	// loss.
	sig *lost.Signal
}

func (l *lease) Name() string          { return l.name }
func (l *lease) Token() uint64         { return l.token }
func (l *lease) Lost() <-chan struct{} { return l.sig.C() }

// lose closes Lost and runs the OnLost functions, unless released.
func (l *lease) lose() {
	if l.sig.Lose() {
		l.unsub()
	}
}

// OnLost runs f once when Lost closes.
func (l *lease) OnLost(f func()) (stop func() bool) { return l.sig.OnLost(f) }

// forget marks the holding released by its owner: Lost stays open.
func (l *lease) forget() {
	l.sig.Released()
	l.unsub()
	l.s.mu.Lock()
	delete(l.s.held, l)
	l.s.mu.Unlock()
}

// Release deletes the candidacy (name, session, token) if it is still
// there and the session alive: one statement.
func (l *lease) Release(ctx context.Context) error {
	return l.ReleaseWithRecords(ctx, nil)
}

// ReleaseWithRecords writes records, fenced by this holding, and deletes
// its candidacy, in one transaction that first locks the candidacy and the
// session's row.
func (l *lease) ReleaseWithRecords(ctx context.Context, records []backend.Record) error {
	s := l.s
	op := fmt.Sprintf("release %q (token %d)", l.name, l.token)
	for _, r := range records {
		if err := backend.CheckRecord(r.Key, r.Value); err != nil {
			return fmt.Errorf("simba/postgres: %s: %w", op, err)
		}
	}
	if s.overErr(op) != nil {
		return fmt.Errorf("simba/postgres: %s: the session is over: %w", op, backend.ErrNotHeld)
	}
	l.sig.BeginRelease()
	done := false // the holding was released: forget it
	defer func() {
		if l.sig.EndRelease(done) {
			l.unsub() // lost while the release was in flight, and the release failed
		}
	}()
	q := s.b.q
	held := `SELECT 1 FROM ` + q + `.candidacies c JOIN ` + q + `.sessions x ON x.id = c.session
		WHERE c.name = $1 AND c.token = $2 AND c.session = $3 AND x.expires_at > clock_timestamp()`
	var n int64
	if len(records) == 0 {
		tag, err := s.b.exec(ctx, s.ctx, `DELETE FROM `+q+`.candidacies WHERE name = $1 AND token = $2 AND session = $3
			AND EXISTS (SELECT 1 FROM `+q+`.sessions x WHERE x.id = $3 AND x.expires_at > clock_timestamp())`, l.name, int64(l.token), s.id)
		if err != nil {
			return l.releaseErr(ctx, op, err)
		}
		n = tag.RowsAffected()
	} else {
		err := s.b.beginFunc(ctx, s.ctx, func(tx pgx.Tx) error {
			var one int
			if err := tx.QueryRow(ctx, held+` FOR UPDATE OF c FOR KEY SHARE OF x`, l.name, int64(l.token), s.id).Scan(&one); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				return err
			}
			batch := &pgx.Batch{}
			for _, r := range records {
				batch.Queue(`INSERT INTO `+q+`.records AS r (key, value, version, token) VALUES ($1, $2, nextval('`+q+`.record_versions'), $3)
					ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version, token = EXCLUDED.token
					WHERE r.token <= EXCLUDED.token`, r.Key, nonNil(r.Value), int64(l.token))
			}
			batch.Queue(`DELETE FROM `+q+`.candidacies WHERE name = $1 AND token = $2 AND session = $3`, l.name, int64(l.token), s.id)
			if err := tx.SendBatch(ctx, batch).Close(); err != nil {
				return err
			}
			n = 1
			return nil
		})
		if err != nil {
			return l.releaseErr(ctx, op, err)
		}
	}
	if n == 0 {
		l.s.mu.Lock()
		_, mine := l.s.held[l]
		l.s.mu.Unlock()
		if mine {
			poke(s.check) // Lost, or the session's end, follows
		}
		return fmt.Errorf("simba/postgres: %s: %w", op, backend.ErrNotHeld)
	}
	done = true
	l.forget()
	return nil
}

// releaseErr is the error of a release that failed: ErrNotHeld when the
// session ended while it waited for a statement slot (it sent nothing).
func (l *lease) releaseErr(ctx context.Context, op string, err error) error {
	if errors.Is(err, errNotSent) && ctx.Err() == nil && l.s.overErr(op) != nil {
		return fmt.Errorf("simba/postgres: %s: the session is over: %w", op, backend.ErrNotHeld)
	}
	return l.s.fail(ctx, op, err)
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
