package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kit/candidacy"
	"github.com/simba-go/simba/backend/kit/limit"
	"github.com/simba-go/simba/backend/kit/view"
	"github.com/simba-go/simba/backend/kit/wake"
	"github.com/simba-go/simba/internal/plant"
)

var _ backend.Session = (*session)(nil)

// session is one row of the sessions table. It renews only when the
// caller calls KeepAlive (one UPDATE, whatever it holds); a monitor
// goroutine reads the row when the caller's renewals stop past the TTL
// (to close Done) and when a notification says that a candidacy of a name
// it holds changed (to close Lost).
type session struct {
	// Done, End, OverErr, the leases it holds, and Acquire: it registers
	// and reads candidacies through queue (lease.go).
	*candidacy.Session
	// Records' and groups' reads, through source (records.go).
	*view.Reader

	b   *Backend
	id  int64
	sid string
	// grantPrefix is SessionOptions.GrantRecords: the records a grant's
	// queue read lists (see ahead).
	grantPrefix string

	ctx   context.Context // Session's Context: ends with the session or the backend
	check chan struct{}   // wakes the monitor: re-read the held candidacies
	renew chan struct{}   // wakes the monitor: the deadline moved

	mu       sync.Mutex
	ttl      time.Duration
	deadline time.Time // start of the last successful renewal (or Open) + ttl
	deleting bool      // deleteAtDeadline has run
	// older are the candidacies of names last granted on an older
	// timeline: their grant is held back (see holdBack).
	older map[candidacyKey]bool
	// known are the candidacies this session registered and has neither
	// withdrawn nor released, each with the record version reserved for
	// its release, drawn when it registered (see queue.Register); tl is
	// the timeline of its last renewal, and
	// recheck is set when a renewal came from another one (which ended
	// the holdings whose candidacy the new server lacks: loseMissing):
	// the monitor then deletes the candidacies the new server has that
	// the session no longer knows (a release or a withdrawal the new
	// server never got).
	known   map[candidacyKey]int64
	tl      int64
	recheck bool
	// unflushed are the candidacies this session released with
	// synchronous_commit off (see queue.Release) that no renewal has
	// confirmed durable yet, with the records of each release (nil: none):
	// the next renewal does each release again.
	unflushed map[candidacyKey]*releaseRecords

	// regs numbers the session's registrations (see queue.Register), and
	// registering counts those in flight: a read of the candidacies takes
	// one it does not know for an orphan only when none was in flight
	// while it ran (see look).
	regs, registering atomic.Int64
}

// releaseRecords are the records of a release, as written: keys and values
// in the same order, and the version they all took.
type releaseRecords struct {
	keys    []string
	values  [][]byte
	version int64
}

func newSession(b *Backend, id int64, ttl time.Duration, start time.Time, tl int64) *session {
	s := &session{
		b: b, id: id, sid: strconv.FormatInt(id, 10),
		check: make(chan struct{}, 1), renew: make(chan struct{}, 1),
		ttl: ttl, deadline: start.Add(ttl), older: map[candidacyKey]bool{}, known: map[candidacyKey]int64{},
		unflushed: map[candidacyKey]*releaseRecords{}, tl: tl,
	}
	s.Session = candidacy.New(b.ctx, candidacy.Config{
		Prefix: "simba/postgres", ID: s.sid, Logger: b.log, WaitGroup: &b.wg, TTL: s.TTL,
		Queue: queue{s},
	})
	s.ctx = s.Context()
	s.Reader = view.NewReader("simba/postgres", s.ctx, s.OverErr, source{b})
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
	s.End()
	return fmt.Errorf("simba/postgres: %s: session %s is over on the server: %w", op, s.sid, backend.ErrSessionDone)
}

// fail wraps an error of the pool or the server for op, ctx being the
// caller's.
func (s *session) fail(ctx context.Context, op string, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("simba/postgres: %s: %w", op, context.Cause(ctx))
	case errors.Is(err, limit.ErrNotSent) && s.b.closed():
		return fmt.Errorf("simba/postgres: %s: %w", op, backend.ErrClosed)
	case errors.Is(err, limit.ErrNotSent) && s.ctx.Err() != nil:
		return fmt.Errorf("simba/postgres: %s: session %s: %w", op, s.sid, backend.ErrSessionDone)
	}
	return s.b.connErr(op, err)
}

// KeepAlive extends the session by its TTL from the statement's instant,
// by the database's clock, only if it is still alive then: an expired
// session never comes back. It goes around the bound on statements (see
// WithMaxRequests): the pool always has a connection that no bounded
// statement holds.
func (s *session) KeepAlive(ctx context.Context) (time.Duration, error) {
	const op = "keep-alive"
	if err := s.OverErr(op); err != nil {
		return 0, err
	}
	s.mu.Lock()
	was := s.tl
	redoNames, redoTokens := s.unflushedArrays()
	redo := s.unflushedReleases()
	s.mu.Unlock()
	// First the releases with records again (see redoRelease), each a
	// durable commit of its own, before the renewal: its "redo" would
	// delete their candidacies without their records.
	for _, r := range redo {
		if err := s.redoRelease(ctx, r); err != nil {
			return 0, s.fail(ctx, op, err)
		}
	}
	start := time.Now()
	var (
		ttl    time.Duration
		db     time.Time
		tl     int64
		names  []string // the session's candidacies, read only when the
		tokens []int64  // server's timeline is not was
	)
	// The renewal is a durable commit: once it returns, the WAL is on disk
	// past every release that returned before it was sent, and "redo" has
	// deleted again those a crash of the server lost (see queue.Release).
	err := s.b.pool.QueryRow(ctx, "WITH redo AS (DELETE FROM "+s.b.q+".candidacies WHERE session = $1 AND (name, token) IN (SELECT * FROM unnest($3::text[], $4::bigint[]))) "+
		"UPDATE "+s.b.q+".sessions SET expires_at = clock_timestamp() + ttl WHERE id = $1 AND expires_at > clock_timestamp() RETURNING ttl, clock_timestamp(), "+timelineSQL+
		", "+s.candidaciesSQL("$1", timelineSQL+" <> $2"), s.id, was, redoNames, redoTokens).Scan(&ttl, &db, &tl, &names, &tokens)
	if err == nil {
		s.flushed(redoNames, redoTokens)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		// The UPDATE took the row's lock (none: the row is gone): this
		// expiry is final, whatever clearExpired finds.
		_, _ = s.clearExpired(ctx)
		return 0, s.doneErr(op)
	}
	if err != nil {
		return 0, s.fail(ctx, op, err)
	}
	if err := s.b.noteClock(op, start, time.Now(), db, tl); err != nil {
		return 0, err // an old primary: no renewal counts there
	}
	if tl != was {
		// The first renewal on a new server: before it counts, the
		// holdings granted on an older timeline whose candidacy the new
		// server lacks (a commit it never got) end, from the same
		// snapshot as the renewal. Left to the monitor's next look, they
		// would stay valid, renewed here, for as long as that look takes
		// (a pooled connection to the old server can hang it for
		// lookTimeout), while the new server's queue grants the lease to
		// another client once its hold is over.
		s.loseMissing(tl, candidacySet(names, tokens))
	}
	s.mu.Lock()
	if tl != s.tl {
		// The monitor reads the session's candidacies at once, and
		// deletes the ones this session gave up on the old server (see
		// recheck).
		s.tl, s.recheck = tl, true
		wake.Poke(s.check)
	}
	s.ttl = ttl
	if d := start.Add(ttl); d.After(s.deadline) {
		s.deadline = d
	}
	s.mu.Unlock()
	wake.Poke(s.renew)
	return ttl, nil
}

// clearExpired deletes the session's row if it has expired, within
// withdrawTimeout, and reports whether the session is over for good: its
// row deleted now, or gone already. Its candidacies go with the row, which
// wakes their waiters now rather than at the expiry they last read (a
// waiter's timer aims at the expiry it saw; the row may have expired
// earlier by the database's clock, or been made to).
//
// An expiry read in a statement's snapshot is no proof that the session is
// over: a renewal that passed its liveness test before the expiry and
// commits after it holds the row's lock meanwhile, and the snapshot shows
// the old expiry. The DELETE waits for that lock and then leaves the
// renewed row alone, and clearExpired reports false: read the row again.
//
// Before the session's own deadline (start of its last renewal + TTL on
// this client's clock) the row is not deleted, only locked and read: the
// database's clock saying it expired that early has stepped forward (see
// clock.go), and the deletion would free the session's leases while the
// core may still count its terms valid. Past the deadline it is deleted.
// Either way an expired row ends the session for this client.
func (s *session) clearExpired(ctx context.Context) (over bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
	defer cancel()
	q := s.b.q
	s.mu.Lock()
	early := time.Now().Before(s.deadline) && !plant.Is(plant.TrustDBClock)
	s.mu.Unlock()
	if early {
		err = s.b.pool.QueryRow(ctx, `SELECT COALESCE((SELECT expires_at <= clock_timestamp() FROM `+q+`.sessions WHERE id = $1 FOR UPDATE), true)`, s.id).Scan(&over)
	} else {
		err = s.b.pool.QueryRow(ctx, `WITH gone AS (DELETE FROM `+q+`.sessions WHERE id = $1 AND expires_at <= clock_timestamp() RETURNING id)
		SELECT EXISTS (SELECT 1 FROM gone) OR NOT EXISTS (SELECT 1 FROM `+q+`.sessions WHERE id = $1)`, s.id).Scan(&over)
	}
	if err != nil {
		s.b.log.Debug("simba/postgres: deleting the expired session's row", "session", s.sid, "err", err)
		return false, err
	}
	if over && early {
		s.deleteAtDeadline()
	}
	return over, nil
}

// deleteAtDeadline deletes the session's expired row once the session's
// own deadline has passed (once per session; the backend's Close stops
// it): the row was found expired before the deadline, by a database clock
// that stepped forward, and its deletion wakes the waiters that the step
// guard holds back. They may delete it before, once their own clocks
// vouch for its expiry.
func (s *session) deleteAtDeadline() {
	s.mu.Lock()
	scheduled := s.deleting
	s.deleting = true
	wait := time.Until(s.deadline) + expiryMargin
	s.mu.Unlock()
	if scheduled || s.b.closed() {
		return
	}
	s.b.wg.Add(1)
	go func() {
		defer s.b.wg.Done()
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-s.b.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(s.b.ctx, withdrawTimeout)
		defer cancel()
		if _, err := s.b.pool.Exec(ctx, "DELETE FROM "+s.b.q+".sessions WHERE id = $1 AND expires_at <= clock_timestamp()", s.id); err != nil {
			s.b.log.Debug("simba/postgres: deleting the expired session's row past its deadline", "session", s.sid, "err", err)
		}
	}()
}

// Close deletes the session's row: its candidacies and memberships go
// with it (ON DELETE CASCADE), which notifies their waiters and watchers.
func (s *session) Close(ctx context.Context) error {
	if s.Over() {
		return nil
	}
	_, err := s.b.pool.Exec(ctx, "DELETE FROM "+s.b.q+".sessions WHERE id = $1", s.id)
	s.End()
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
				s.End()
				return
			}
			// Renewed meanwhile, or not known: read again soon.
			failures++
			retry = time.After(backoff.Wait(failures, s.TTL()/3))
			continue
		}
		if why == "deadline" {
			// Alive for remaining on the server's clock: look again then.
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
// has left by the database's clock (0 when gone or expired). Like
// KeepAlive, it goes around the bound on statements: one at a time per
// session, and what tells a holder of its loss. again asks for another
// read soon: a holding granted while this one was on its way was missing
// from it (see candidacy.Session.LoseMissing), or, after a failover, a
// registration in flight kept it from telling the orphans.
func (s *session) look() (_ time.Duration, again bool, _ error) {
	ctx, cancel := context.WithTimeout(s.ctx, lookTimeout)
	defer cancel()
	var (
		left   float64
		names  []string
		tokens []int64
		db     time.Time
		tl     int64
	)
	mark, regs := s.Mark(), s.regs.Load()
	sent := time.Now()
	err := s.b.pool.QueryRow(ctx, `SELECT EXTRACT(EPOCH FROM x.expires_at - clock_timestamp())::float8, `+
		s.candidaciesSQL("x.id", "true")+`, clock_timestamp(), `+timelineSQL+`
		FROM `+s.b.q+`.sessions x WHERE x.id = $1`, s.id).Scan(&left, &names, &tokens, &db, &tl)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if err := s.b.noteClock("reading the session", sent, time.Now(), db, tl); err != nil {
		return 0, false, err
	}
	if left <= 0 {
		return 0, false, nil
	}
	have := candidacySet(names, tokens)
	again = s.LoseMissing(mark, func(h *candidacy.Holding) bool { return !have[candidacyKey{h.Name(), int64(h.Token())}] })
	s.mu.Lock()
	var orphanNames []string
	var orphans []int64
	if s.recheck {
		// A registration in flight while the read ran may have
		// committed a candidacy it does not know yet.
		if s.registering.Load() > 0 || s.regs.Load() != regs {
			again = true
		} else {
			s.recheck = false
			for i, t := range tokens {
				if _, ok := s.known[candidacyKey{names[i], t}]; !ok {
					orphanNames, orphans = append(orphanNames, names[i]), append(orphans, t)
				}
			}
		}
	}
	s.mu.Unlock()
	if len(orphans) > 0 {
		// Candidacies of this session that it released or withdrew on
		// the old server, which the new one never heard of: left there,
		// they would stay ahead of every waiter while the session lives.
		if _, err := s.b.pool.Exec(ctx, `DELETE FROM `+s.b.q+`.candidacies WHERE session = $1
			AND (name, token) IN (SELECT * FROM unnest($2::text[], $3::bigint[]))`, s.id, orphanNames, orphans); err != nil {
			s.mu.Lock()
			s.recheck = true // the next look tries again
			s.mu.Unlock()
			return 0, false, err
		}
		s.b.log.Warn("simba/postgres: after a failover, deleted candidacies the session had given up on the old server", "session", s.sid, "names", orphanNames, "tokens", orphans)
	}
	return time.Duration(left * float64(time.Second)), again, nil
}

// candidacyKey names a candidacy: tokens count per name, and candidacies
// of two names may have the same token.
type candidacyKey struct {
	name  string
	token int64
}

// candidaciesSQL selects the candidacies of the session id (an SQL
// expression) as two arrays, their names and their tokens in the same
// order, when cond holds (NULLs otherwise); see candidacySet.
func (s *session) candidaciesSQL(id, cond string) string {
	sel := func(col string) string {
		return `CASE WHEN ` + cond + ` THEN ARRAY(SELECT ` + col + ` FROM ` + s.b.q + `.candidacies c WHERE c.session = ` + id + ` ORDER BY c.name, c.token) END`
	}
	return sel("c.name") + ", " + sel("c.token")
}

// candidacySet is the set of candidacies read by candidaciesSQL.
func candidacySet(names []string, tokens []int64) map[candidacyKey]bool {
	set := make(map[candidacyKey]bool, len(tokens))
	for i, t := range tokens {
		set[candidacyKey{names[i], t}] = true
	}
	return set
}

// loseMissing ends the holdings of the session whose candidacy a server
// on timeline tl lacks, have being the session's candidacies there. A
// holding granted on timeline tl or later is left alone: its candidacy was
// registered after the snapshot that read have.
func (s *session) loseMissing(tl int64, have map[candidacyKey]bool) {
	s.LoseIf(func(h *candidacy.Holding) bool {
		t := int64(h.Token())
		return timelineOfToken(t) < tl && !have[candidacyKey{h.Name(), t}]
	})
}

// releasedAsync notes a candidacy this session released with
// synchronous_commit off, and the records written with it (nil: none):
// until a renewal confirms it, a crash of the server may bring it back
// (see queue.Release).
func (s *session) releasedAsync(name string, token int64, records *releaseRecords) {
	s.mu.Lock()
	s.unflushed[candidacyKey{name, token}] = records
	s.mu.Unlock()
}

// unflushedArrays returns the unflushed candidacies as two arrays, their
// names and tokens in the same order (empty under the planted bug
// KeepAsyncRelease). s.mu is held.
func (s *session) unflushedArrays() (names []string, tokens []int64) {
	names, tokens = []string{}, []int64{}
	if plant.Is(plant.KeepAsyncRelease) {
		return names, tokens
	}
	for k := range s.unflushed {
		names, tokens = append(names, k.name), append(tokens, k.token)
	}
	return names, tokens
}

// flushed drops the candidacies that a renewal confirmed gone for good.
func (s *session) flushed(names []string, tokens []int64) {
	if len(tokens) == 0 {
		return
	}
	s.mu.Lock()
	for i, t := range tokens {
		delete(s.unflushed, candidacyKey{names[i], t})
	}
	s.mu.Unlock()
}

// unflushedRelease is an unflushed release with records.
type unflushedRelease struct {
	name  string
	token int64
	*releaseRecords
}

// unflushedReleases returns the unflushed releases with records (none
// under the planted bug KeepAsyncRelease). s.mu is held.
func (s *session) unflushedReleases() []unflushedRelease {
	if plant.Is(plant.KeepAsyncRelease) {
		return nil
	}
	var out []unflushedRelease
	for k, r := range s.unflushed {
		if r != nil {
			out = append(out, unflushedRelease{k.name, k.token, r})
		}
	}
	return out
}

// redoRelease runs the release with records r again, committed durably:
// the same statement (releaseSQL), with the records and the version the
// release gave them. Its candidacy is still there only if a crash of the
// server lost the release (a token is never registered twice): then the
// records are written again, fenced as the release was, and readers who
// saw them before the crash see them again as they were; else it changes
// nothing. (A statement that writes nothing commits nothing; the renewal
// after it is the durable commit that confirms the release.)
func (s *session) redoRelease(ctx context.Context, r unflushedRelease) error {
	var released bool
	return s.b.pool.QueryRow(ctx, releaseSQL(s.b.q, true, false), r.name, r.token, s.id, r.keys, r.values, r.version).Scan(&released)
}

// registered notes a candidacy this session registered, and the record
// version reserved for its release.
func (s *session) registered(name string, token, version int64) {
	s.mu.Lock()
	s.known[candidacyKey{name, token}] = version
	s.mu.Unlock()
}

// releaseVersion returns the record version reserved for the release of
// the candidacy (name, token), and false when there is none.
func (s *session) releaseVersion(name string, token int64) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.known[candidacyKey{name, token}]
	return v, ok
}

// lookTimeout bounds a read of the monitor's.
const lookTimeout = 10 * time.Second

// holdBack is how long the grant of the candidacy (name, token) must wait
// (0: none): trustFactor × the TTL after this client first heard from the
// server, when that was a change of server (a failover) or no term of the
// name had been granted on the server's timeline when the candidacy
// registered (a client that started after the failover). The holder of a
// term granted on the old primary, whose candidacy the new one may have
// lost, keeps its term until then by its own clock, if its TTL is at most
// this session's (see "Failover to a standby" in timeline.go). held
// reports, once the hold is over, that there was one: the grant may be
// the first after the hold on the timeline (see settle).
func (s *session) holdBack(name string, token int64) (hold time.Duration, held bool) {
	s.mu.Lock()
	older, ttl := s.older[candidacyKey{name, token}], s.ttl
	s.mu.Unlock()
	age, changed := s.b.clock.ChainAge(time.Now())
	if plant.Is(plant.KeepChainOnFailover) || !older && !changed {
		s.forget(name, token)
		return 0, false
	}
	hold = time.Duration(float64(ttl)*trustFactor) - age
	if hold <= 0 {
		s.forget(name, token)
		return 0, true
	}
	s.b.log.Info("simba/postgres: a grant held back after a failover", "session", s.sid, "name", name, "token", token, "for", hold.Round(time.Millisecond))
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
