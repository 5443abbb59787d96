package chaos

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/postgres"
)

// PostgreSQL lays a lease out as a queue of candidacies: the rows (name,
// token, session) of <schema>.candidacies, inserted by Acquire with the
// next token of the name's counter (lease_names.last, bumped in the same
// statement, under the counter row's lock, so that tokens are committed in
// their order), deleted by Release, a withdrawal, or with their session's
// row. The holder of a name is its oldest live candidacy: the lowest token
// whose session's expires_at is still ahead of the server's clock. A
// session's expiry writes nothing; an expired session never comes back (a
// renewal extends only a live one), and its rows are dead everywhere until
// someone deletes them (backend/postgres's package documentation).
//
// The watcher of the test process polls the schema on a connection of its
// own to the server (not through any client's proxy), every pgPollEvery
// and at once when a notification of the schema's channel (a candidacy
// inserted or deleted) arrives: one statement, and so one snapshot, that
// reads every candidacy with its session's expires_at, and every counter.
// A poll sent at s and answered at g saw the rows as committed at an
// instant in [s, g]; expires_at is the server's clock, which on this
// machine is the test's. For each name, in token order:
//
//   - a candidacy Y it shows blocks the later ones until at least
//     min(s, E_Y): it was not deleted before the snapshot, and its session
//     cannot expire before the expires_at it had then (renewals only push
//     it on). A candidacy first shown in this poll was not committed by the
//     previous poll's send. A grant's Start is the latest of these bounds:
//     at or before the instant its candidacy became the oldest live one;
//   - a candidacy Z holds once every older one shown has E_Y ≤ s (expired
//     before the snapshot, for good) and its own E_Z > g (alive at the
//     snapshot): its grant's Seen is g, at or after its start;
//   - a holding ends when a poll no longer shows it (End is that poll's g,
//     at or after the delete), or when a poll shows it with E_Z ≤ s: it
//     expired at E_Z, exactly, by the server's clock, and the grant is
//     marked Expired, the stronger check of check.Observed (no task may be
//     promised its term until that instant or later). Unlike etcd's and
//     ZooKeeper's, this watcher can tell an expiry from a release.
//
// Steps of the clocks: the expiry by the server's clock is what the
// backend goes by only while that clock moves as the clients' monotonic
// clocks do. When it steps forward (on this machine: the whole machine
// frozen, its monotonic clock stopped, and its wall clock set right after,
// by up to seconds), sessions look expired early, and the backend does
// not act on that (its step guard, backend/postgres/clock.go): their
// candidacies keep their place until their rows are deleted. The watcher
// sees such a step as its own wall clock moving more than its monotonic
// clock between two polls, and from then on counts a session renewed
// before the step (expires_at − ttl before it) as alive until its row is
// gone: no expiry is marked for it, and the ones behind it stay blocked.
//
// Blind spots: a token of the name's counter that no poll showed (a
// candidacy inserted and deleted between two polls), a candidacy shown
// waiting and gone by the next poll with no older live one to have blocked
// it all along, and one whose older ones and own session expired between
// two polls may each have held unseen: a blind range of one token each.
//
// Failovers: the watcher of a replicated server reaches the primary
// through its VIP (failover_postgres_test.go), and reads the server's
// timeline on each connection it opens. On a new timeline, what the last
// server granted is taken to have lasted until its sessions could have
// expired there (pgGrantWatch.serverChanged), unless the new server goes
// on with it; what the new server grants is taken in afresh.
const pgPollEvery = 20 * time.Millisecond

// pgStepMin is how much more the wall clock must move than the monotonic
// clock between two polls for the watcher to count a step.
const pgStepMin = 50 * time.Millisecond

func (p *postgresWorld) watchGrants(schema string) (*grantWatch, error) {
	return watchPGGrants(p.dsn, schema)
}

// watchPGGrants creates schema's tables (as a DBA would, with SchemaSQL)
// and starts a watcher of its grants, after a first poll.
func watchPGGrants(dsn, schema string) (*grantWatch, error) {
	w := &pgGrantWatch{dsn: dsn, schema: schema, q: pgx.Identifier{schema}.Sanitize(), log: newGrantLog(),
		names: map[string]*pgQueue{}, poke: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	octx, ocancel := context.WithTimeout(ctx, pgOpTimeout)
	defer ocancel()
	conn, err := pgx.Connect(octx, dsn)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("the grant watch: %w", err)
	}
	if _, err := conn.Exec(octx, postgres.SchemaSQL(schema)); err != nil {
		conn.Close(context.Background())
		cancel()
		return nil, fmt.Errorf("the grant watch: creating schema %s: %w", schema, err)
	}
	if err := w.poll(octx, conn); err != nil {
		conn.Close(context.Background())
		cancel()
		return nil, fmt.Errorf("the grant watch: %w", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { w.loop(ctx, conn) })
	wg.Go(func() { w.listen(ctx) })
	return &grantWatch{log: w.log, stop: func() {
		cancel()
		wg.Wait()
	}}, nil
}

type pgGrantWatch struct {
	dsn, schema, q string
	log            *grantLog
	poke           chan struct{} // a notification came: poll now

	// Owned by the polling goroutine.
	names    map[string]*pgQueue
	prevSent time.Time // the send instant of the last poll answered
	prevNow  time.Time // the last poll's send, with its monotonic reading
	stepAt   time.Time // the wall time of the last step of the clocks seen

	// Failovers (see failover_postgres_test.go): the server's timeline,
	// read once per connection, and the grants open when it changed.
	tlConn   *pgx.Conn
	timeline int64
	changed  time.Time                  // the first poll's send on the last new server
	floors   map[grantKey]time.Time     // no grant ends before
	carried  map[grantKey]time.Duration // open at a change, not yet held on the new server: its session's TTL
}

// pgQueue is a name's candidacies as the last poll showed them.
type pgQueue struct {
	last  uint64 // tokens up to last are accounted for
	cands map[uint64]*pgCandidacy
}

type pgCandidacy struct {
	start time.Time // at or before the instant its older ones were gone
	held  bool      // its grant has begun
	over  bool      // its grant ended by expiry, or it can hold no more
	ttl   time.Duration
}

// pgRow is one row of a poll: a counter (token is its last) or a
// candidacy.
type pgRow struct {
	counter bool
	name    string
	token   uint64
	expires time.Time
	renewed time.Time // expires − the session's TTL: its last renewal
	ttl     time.Duration
}

// loop polls until ctx ends, on conn and then on the connections it opens
// again after a failure (the server restarted, paused, or slow).
func (w *pgGrantWatch) loop(ctx context.Context, conn *pgx.Conn) {
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	tick := time.NewTicker(pgPollEvery)
	defer tick.Stop()
	for attempt := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-w.poke:
		case <-tick.C:
		}
		var err error
		if conn == nil {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			conn, err = pgx.Connect(cctx, w.dsn)
			cancel()
		}
		if err == nil {
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err = w.poll(qctx, conn)
			cancel()
			if err != nil {
				conn.Close(context.Background())
			}
		}
		if err != nil {
			conn = nil
			attempt++
			if !backoff.Sleep(ctx, backoff.Wait(attempt, 200*time.Millisecond)) {
				return
			}
			continue
		}
		attempt = 0
	}
}

// listen pokes the loop at each notification of the schema's channel, on
// a connection of its own, connecting again after a failure.
func (w *pgGrantWatch) listen(ctx context.Context) {
	channel := "simba." + w.schema
	for attempt := 1; ctx.Err() == nil; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, w.dsn)
		if err == nil {
			if _, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err == nil {
				attempt = 0
			}
		}
		cancel()
		for err == nil {
			if _, err = conn.WaitForNotification(ctx); err == nil {
				select {
				case w.poke <- struct{}{}:
				default:
				}
			}
		}
		if conn != nil {
			conn.Close(context.Background())
		}
		backoff.Sleep(ctx, backoff.Wait(attempt, 500*time.Millisecond))
	}
}

// poll reads every candidacy and counter of the schema in one statement,
// and takes in what changed.
func (w *pgGrantWatch) poll(ctx context.Context, conn *pgx.Conn) error {
	now := time.Now()
	sent := now.Round(0)
	if !w.prevNow.IsZero() {
		if step := sent.Sub(w.prevNow.Round(0)) - now.Sub(w.prevNow); step > pgStepMin {
			w.stepAt = sent
			w.log.notef("server: the wall clock stepped %v ahead of the monotonic clock: expiries of sessions renewed before are not counted", step.Round(time.Millisecond))
		}
	}
	w.prevNow = now
	if conn != w.tlConn {
		if err := w.readTimeline(ctx, conn, sent); err != nil {
			return err
		}
	}
	rows, err := conn.Query(ctx, `SELECT true, name, last, NULL::timestamptz, NULL::timestamptz FROM `+w.q+`.lease_names
		UNION ALL SELECT false, c.name, c.token, x.expires_at, x.expires_at - x.ttl FROM `+w.q+`.candidacies c JOIN `+w.q+`.sessions x ON x.id = c.session`)
	if err != nil {
		return err
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pgRow, error) {
		var row pgRow
		var token int64
		var expires, renewed *time.Time
		err := r.Scan(&row.counter, &row.name, &token, &expires, &renewed)
		row.token = uint64(token)
		if expires != nil {
			row.expires = *expires
		}
		if renewed != nil {
			row.renewed = *renewed
			row.ttl = row.expires.Sub(row.renewed)
		}
		if !row.counter && !w.stepAt.IsZero() && row.renewed.Before(w.stepAt) {
			// Renewed before a step: alive until its row is gone.
			row.expires = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
		}
		return row, err
	})
	if err != nil {
		return fmt.Errorf("polling the candidacies of %s: %w", w.schema, err)
	}
	w.take(sent, time.Now().Round(0), got)
	return nil
}

// take takes in one poll, sent at sent and answered at got.
func (w *pgGrantWatch) take(sent, got time.Time, rows []pgRow) {
	prev := w.prevSent
	w.prevSent = sent
	present := map[string][]pgRow{}
	last := map[string]uint64{}
	for _, r := range rows {
		if r.counter {
			last[r.name] = r.token
		} else {
			present[r.name] = append(present[r.name], r)
		}
	}
	for name := range present {
		if w.names[name] == nil {
			w.names[name] = &pgQueue{cands: map[uint64]*pgCandidacy{}}
		}
	}
	for name, q := range w.names {
		shown := present[name]
		slices.SortFunc(shown, func(a, b pgRow) int { return cmp.Compare(a.token, b.token) })
		w.gone(name, q, shown, got)
		// Tokens the counter gave out that no poll showed.
		if l := last[name]; l > q.last {
			first := firstIssued(q.last, l)
			if l-first > 64 { // not token by token (a counter moved far, as by a failover): one range
				w.log.missed(first-1, l, fmt.Sprintf("tokens of %s from %d that no poll showed", name, first))
				first = l + 1
			}
			for t := first; t <= l; t++ {
				if q.cands[t] == nil && !slices.ContainsFunc(shown, func(r pgRow) bool { return r.token == t }) {
					w.log.missed(t-1, t, fmt.Sprintf("candidacy %d of %s inserted and deleted between two polls", t, name))
				}
			}
			q.last = l
		}
		// The queue in token order: what each candidacy tells of the
		// ones after it.
		var bound time.Time // the older ones blocked until at least then
		clear := true       // every older one expired before the snapshot
		for _, r := range shown {
			c := q.cands[r.token]
			if c == nil {
				c = &pgCandidacy{start: prev}
				q.cands[r.token] = c
			}
			c.ttl = r.ttl
			dead := !r.expires.After(sent)
			alive := r.expires.After(got)
			if !c.held && !c.over {
				if bound.After(c.start) {
					c.start = bound
				}
				switch {
				case clear && alive:
					c.held = true
					w.log.begin(name, r.token, c.start, w.seen(got, r.ttl))
				case clear && dead:
					// Its session and the older ones both went since the
					// last poll: it held in between if they went first.
					c.over = true
					if c.start.Before(r.expires) {
						w.log.missed(r.token-1, r.token, fmt.Sprintf("candidacy %d of %s expired between two polls, as the ones before it went", r.token, name))
					}
				case dead:
					c.over = true // an older one outlived it: it never held
				}
			}
			if c.held && !c.over && dead {
				c.over = true
				w.expire(name, r.token, r.expires)
			}
			if r.expires.Before(sent) {
				bound = later(bound, r.expires)
			} else {
				bound = later(bound, sent)
			}
			clear = clear && dead
		}
		w.settleCarried(name, q, got)
	}
}

// gone takes in the candidacies of q that the poll answered at got no
// longer shows.
func (w *pgGrantWatch) gone(name string, q *pgQueue, shown []pgRow, got time.Time) {
	for token, c := range q.cands {
		if slices.ContainsFunc(shown, func(r pgRow) bool { return r.token == token }) {
			continue
		}
		delete(q.cands, token)
		switch {
		case c.held && !c.over:
			w.end(name, token, got)
		case c.held || c.over:
		case !slices.ContainsFunc(shown, func(r pgRow) bool { return r.token < token && r.expires.After(got) }):
			// No older candidacy alive at the snapshot, and so
			// throughout its life, to have blocked it.
			w.log.missed(token-1, token, fmt.Sprintf("candidacy %d of %s was gone by the next poll, as were the ones before it", token, name))
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
