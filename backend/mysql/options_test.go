package mysql_test

import (
	"database/sql"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend/mysql"
)

// neverDSN names a server never connected to.
const neverDSN = "simba:x@tcp(127.0.0.1:1)/none"

// TestOptionsRefuseBadValues: each option refuses a bad value, and New
// returns its error instead of correcting it (it never connects).
func TestOptionsRefuseBadValues(t *testing.T) {
	for _, tc := range []struct {
		opt  mysql.Option
		want string
	}{
		{mysql.WithTablePrefix(""), `simba/mysql: table prefix ""`},
		{mysql.WithTablePrefix("Has-Dash"), `simba/mysql: table prefix "Has-Dash"`},
		{mysql.WithTablePrefix(strings.Repeat("s", 41)), "want 1-40 characters"},
		{mysql.WithLogger(nil), "simba/mysql: WithLogger: nil logger"},
		{mysql.WithPollInterval(-time.Second), "simba/mysql: WithPollInterval: -1s"},
		{mysql.WithMaxRequests(0), "simba/mysql: max requests must be positive"},
		{nil, "simba/mysql: nil option"},
	} {
		b, err := mysql.New(neverDSN, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with a bad option: %v, want an error containing %q", err, tc.want)
		}
		if b != nil {
			b.Close()
		}
	}
	b, err := mysql.New(neverDSN, mysql.WithTablePrefix("s_1_"), mysql.WithLogger(slog.New(slog.DiscardHandler)),
		mysql.WithPollInterval(time.Minute), mysql.WithoutBells(), mysql.WithMaxRequests(1))
	if err != nil {
		t.Fatalf("New with good options: %v", err)
	}
	defer b.Close()
	if b.TablePrefix() != "s_1_" || b.MaxRequests() != 1 {
		t.Errorf("prefix %q, max requests %d: the options were not applied", b.TablePrefix(), b.MaxRequests())
	}
}

// TestMaxRequestsOptions: the bound in effect, and the error of a pool too
// small to leave a connection for renewals.
func TestMaxRequestsOptions(t *testing.T) {
	for _, tc := range []struct {
		conns int
		opts  []mysql.Option
		want  int
	}{
		{0, nil, mysql.DefaultMaxRequests}, // no limit on the pool
		{32, nil, 30},                      // one for the renewals, one for the bells
		{32, []mysql.Option{mysql.WithoutBells()}, 31},
		{3, nil, 2}, // too small for bells: one for the renewals only
		{2, nil, 1},
		{100, []mysql.Option{mysql.WithMaxRequests(5)}, 5},
	} {
		db, err := sql.Open("mysql", neverDSN)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(tc.conns)
		b, err := mysql.NewFromDB(db, tc.opts...)
		if err != nil {
			t.Fatalf("NewFromDB on a pool of %d: %v", tc.conns, err)
		}
		if got := b.MaxRequests(); got != tc.want {
			t.Errorf("MaxRequests on a pool of %d (%d options) = %d, want %d", tc.conns, len(tc.opts), got, tc.want)
		}
		b.Close()
		db.Close()
	}
	db, err := sql.Open("mysql", neverDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := mysql.NewFromDB(db); err == nil || !strings.Contains(err.Error(), "want at least 2") {
		t.Errorf("NewFromDB on a pool of 1: %v, want it refused", err)
	}
}
