package mysql_test

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

	"database/sql"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/mysql"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/termlog"
)

// This file holds what the fault tests of the simba client on this backend
// share: a record of the terms the tasks saw, the fenced register they
// write, and the server's own record of when each session expired.

// closeWait bounds a clean-up's wait for a client's Close.
const closeWait = 30 * time.Second

// execOn runs each statement on a connection of its own to dsn, failing
// t on an error.
func execOn(t testing.TB, dsn string, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("connecting to %s: %v", dsn, err)
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// expiries is the server's record of the sessions it deleted: a trigger of
// the test's own on the sessions table keeps, for each deleted row, the
// expires_us it had, which is when the server took the session, and so
// each of its holdings, to have ended. A waiter deletes an expired
// session's row before it takes the lease, so the holding of a session
// deleted past its expiry ended at that expiry, on the server's clock,
// which on this machine is the tests' clock too.
type expiries struct{ dsn string }

// logExpiries creates the backend's tables (as a DBA would, with
// SchemaSQL), a table simba_test_deleted and the trigger that fills it.
func logExpiries(t testing.TB, dsn string) *expiries {
	t.Helper()
	text, err := mysql.SchemaSQL("")
	if err != nil {
		t.Fatal(err)
	}
	var stmts []string
	for stmt := range strings.SplitSeq(strings.TrimSpace(text), ";\n") {
		stmts = append(stmts, strings.TrimSuffix(stmt, ";"))
	}
	execOn(t, dsn, append(stmts,
		"CREATE TABLE simba_test_deleted (id BIGINT NOT NULL, expires_us BIGINT NOT NULL, deleted_us BIGINT NOT NULL) ENGINE=InnoDB",
		"CREATE TRIGGER simba_test_log_deleted AFTER DELETE ON simba_sessions FOR EACH ROW INSERT INTO simba_test_deleted VALUES (OLD.id, OLD.expires_us, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)))")...)
	return &expiries{dsn: dsn}
}

// expired returns when the server deleted session id and the expiry it
// had then; ok is false if the session's row was not deleted, or was
// deleted while it was still alive (a Close, not an expiry).
func (e *expiries) expired(t testing.TB, id string) (expiresAt time.Time, ok bool) {
	t.Helper()
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		t.Fatalf("session ID %q: %v", id, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	db, err := sql.Open("mysql", e.dsn)
	if err != nil {
		t.Fatalf("reading the expiries: %v", err)
	}
	defer db.Close()
	var exp, deleted int64
	err = db.QueryRowContext(ctx, "SELECT expires_us, deleted_us FROM simba_test_deleted WHERE id = ?", n).Scan(&exp, &deleted)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false
	}
	if err != nil {
		t.Fatalf("reading the expiry of session %s: %v", id, err)
	}
	return time.UnixMicro(exp), deleted >= exp
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
// order the server applied them: the versions of one key increase in the
// order its writes commit (the order their answers came back is
// another: an answer held by a cut link comes back late); and, for the
// planted bug, overstate the TTL granted by extra.
type tap struct {
	*mysql.Backend
	extra time.Duration
	mu    sync.Mutex
	log   []tapWrite
}

type tapWrite struct {
	lease   string
	token   uint64
	version uint64
}

// tapSession is the full set of a mysql session's interfaces, so that
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
