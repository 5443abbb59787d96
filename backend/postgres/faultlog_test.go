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

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/termlog"
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

// The terms and the register's writes the tasks saw (internal/termlog).
type (
	seenTerm = termlog.Seen
	termLog  = termlog.Log
)

func newTermLog() *termLog { return termlog.New(opTimeout) }

var eventually = termlog.Eventually

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
	for _, w := range l.Writes() {
		if w.Accepted {
			accepted++
		} else {
			refused++
		}
	}
	return check.StaleWrites(writes), accepted, refused
}
