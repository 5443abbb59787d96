package postgres_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/check"
)

// This file holds what the fault tests of the simba client on this backend
// share: a record of the terms the tasks saw, the fenced register they
// write, and the server's own record of when each session expired.

// closeWait bounds a clean-up's wait for a client's Close.
const closeWait = 30 * time.Second

// execOn runs sql on a connection of its own to dsn, failing t on an error.
func execOn(t testing.TB, dsn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting to %s: %v", dsn, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// expiries is the server's record of the sessions it deleted: a trigger of
// the test's own on the sessions table keeps, for each deleted row, the
// expires_at it had, which is when the server took the session, and so
// each of its holdings, to have ended. A waiter deletes an expired
// session's row before it takes the lease, so the holding of a session
// deleted past its expiry ended at that expiry, on the server's clock,
// which on this machine is the tests' clock too.
type expiries struct {
	dsn, table string
}

// logExpiries creates the schema's tables (as a DBA would, with
// SchemaSQL) and the trigger; logSchema, a schema of the test's own, holds
// the log and the trigger's function, and dropping it drops the trigger.
func logExpiries(t testing.TB, dsn, schema, logSchema string) *expiries {
	t.Helper()
	execOn(t, dsn, postgres.SchemaSQL(schema))
	ls, s := pgx.Identifier{logSchema}.Sanitize(), pgx.Identifier{schema}.Sanitize()
	execOn(t, dsn, fmt.Sprintf(`CREATE SCHEMA %[1]s;
CREATE TABLE %[1]s.deleted (id bigint NOT NULL, expires_at timestamptz NOT NULL, deleted_at timestamptz NOT NULL);
CREATE FUNCTION %[1]s.log_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO %[1]s.deleted VALUES (OLD.id, OLD.expires_at, clock_timestamp());
	RETURN NULL;
END $$;
CREATE TRIGGER log_deleted AFTER DELETE ON %[2]s.sessions FOR EACH ROW EXECUTE FUNCTION %[1]s.log_deleted();`, ls, s))
	return &expiries{dsn: dsn, table: ls + ".deleted"}
}

// expired returns when the server deleted session id and the expires_at
// it had then; ok is false if the session's row was not deleted, or was
// deleted while it was still alive (a Close, not an expiry).
func (e *expiries) expired(t testing.TB, id string) (expiresAt time.Time, ok bool) {
	t.Helper()
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		t.Fatalf("session ID %q: %v", id, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatalf("reading the expiries: %v", err)
	}
	defer conn.Close(context.Background())
	var deleted time.Time
	err = conn.QueryRow(ctx, "SELECT expires_at, deleted_at FROM "+e.table+" WHERE id = $1", n).Scan(&expiresAt, &deleted)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false
	}
	if err != nil {
		t.Fatalf("reading the expiry of session %s: %v", id, err)
	}
	return expiresAt, !deleted.Before(expiresAt)
}

// seenTerm is one term as its task saw it.
type seenTerm struct {
	node    string
	session string // the client's session when the term began
	term    *simba.Term
	ended   chan struct{} // closed when the task saw the revocation
}

// termLog records the terms the tasks of several clients saw, and the
// writes they made to the fenced register: the record "reg", written by
// each holder with Term.PutRecord every writeEvery while its term is
// valid.
type termLog struct {
	mu      sync.Mutex
	terms   []*seenTerm
	writes  []check.Write // as answered, in the order of the answers
	elected chan *seenTerm
}

// writeEvery is the interval of the holders' fenced writes.
const writeEvery = 100 * time.Millisecond

func newTermLog() *termLog { return &termLog{elected: make(chan *seenTerm, 256)} }

// task returns the task of node on client c: it announces its term,
// writes the register until the term is revoked, and records it. A write
// still in flight when the term ends (held by a cut link, say) is waited
// for: its answer is what the fence test is about.
func (l *termLog) task(node string, c *simba.Client) func(context.Context, *simba.Term) error {
	return func(ctx context.Context, term *simba.Term) error {
		st := &seenTerm{node: node, session: c.SessionID(), term: term, ended: make(chan struct{})}
		l.mu.Lock()
		l.terms = append(l.terms, st)
		l.mu.Unlock()
		l.elected <- st
		defer close(st.ended)
		for {
			select {
			case <-term.Revoked():
				return nil
			case <-time.After(writeEvery):
			}
			wctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			err := term.PutRecord(wctx, "reg", []byte(node))
			cancel()
			switch {
			case err == nil, errors.Is(err, backend.ErrConflict), errors.Is(err, backend.ErrSessionDone):
				l.mu.Lock()
				l.writes = append(l.writes, check.Write{Lease: term.Name(), Token: term.Token(), Node: node, At: time.Now(), Accepted: err == nil})
				l.mu.Unlock()
			}
		}
	}
}

// next waits up to d for the next term, of node unless node is "", and
// returns nil if none began.
func (l *termLog) next(node string, d time.Duration) *seenTerm {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case st := <-l.elected:
			if node == "" || st.node == node {
				return st
			}
		case <-timer.C:
			return nil
		}
	}
}

// checkTerms runs check.Terms (I1, I2) over every term recorded: each
// term's end is its Deadline, once it was revoked, or now.
func (l *termLog) checkTerms() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var terms []check.Term
	for _, st := range l.terms {
		terms = append(terms, check.Term{Name: st.term.Name(), Token: st.term.Token(), Start: st.term.Start(), End: st.term.Deadline()})
	}
	return check.Terms(terms)
}

// tap is a backend whose sessions record the version of each accepted
// write of the register, so that check.StaleWrites sees the writes in the
// order the server applied them (the order their answers came back is
// another: an answer held by a cut link comes back late); and, for the
// planted bug, overstate the TTL granted by extra.
type tap struct {
	*postgres.Backend
	extra time.Duration
	mu    sync.Mutex
	log   []tapWrite
}

type tapWrite struct {
	lease   string
	token   uint64
	version uint64
}

// tapSession is the full set of a postgres session's interfaces, so that
// the client sees what it would see without the tap.
type tapSession interface {
	backend.Session
	backend.Records
	backend.CandidateLister
	backend.LeaseLister
	backend.SkipReporter
}

type tapped struct {
	tapSession
	b *tap
}

func (b *tap) Open(ctx context.Context, opts backend.SessionOptions) (backend.Session, error) {
	s, err := b.Backend.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	return tapped{s.(tapSession), b}, nil
}

func (s tapped) TTL() time.Duration { return s.tapSession.TTL() + s.b.extra }

func (s tapped) KeepAlive(ctx context.Context) (time.Duration, error) {
	ttl, err := s.tapSession.KeepAlive(ctx)
	if err != nil {
		return ttl, err
	}
	return ttl + s.b.extra, nil
}

func (s tapped) PutRecord(ctx context.Context, key string, value []byte, cond backend.Condition) (backend.Record, error) {
	r, err := s.tapSession.PutRecord(ctx, key, value, cond)
	if err == nil && strings.HasSuffix(key, "reg") {
		s.b.mu.Lock()
		s.b.log = append(s.b.log, tapWrite{cond.Lease, cond.Token, r.Version})
		s.b.mu.Unlock()
	}
	return r, err
}

// staleWrites runs check.StaleWrites (I3) over the accepted writes of the
// register recorded by the taps, in the order of their versions, which the
// server assigns in the order it applies them; it also returns the number
// of writes accepted and refused.
func staleWrites(l *termLog, taps ...*tap) (errs []error, accepted, refused int) {
	var ws []tapWrite
	for _, b := range taps {
		b.mu.Lock()
		ws = append(ws, b.log...)
		b.mu.Unlock()
	}
	slices.SortFunc(ws, func(a, b tapWrite) int { return cmp.Compare(a.version, b.version) })
	writes := make([]check.Write, len(ws))
	for i, w := range ws {
		writes[i] = check.Write{Lease: w.lease, Token: w.token, Node: fmt.Sprint("v", w.version), Accepted: true}
	}
	l.mu.Lock()
	for _, w := range l.writes {
		if w.Accepted {
			accepted++
		} else {
			refused++
		}
	}
	l.mu.Unlock()
	return check.StaleWrites(writes), accepted, refused
}

// eventually polls cond every 20ms for up to d and reports whether it
// became true.
func eventually(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}
