package mysql_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/backendtest"
	"github.com/simba-go/simba/backend/mysql"
	"github.com/simba-go/simba/internal/mytest"
)

// newBackend returns a backend on the test server in a fresh database of
// its own, closed at the end of the test.
func newBackend(t *testing.T, opts ...mysql.Option) *mysql.Backend {
	t.Helper()
	return newBackendAt(t, mytest.DatabaseDSN(t), opts...)
}

// newBackendAt returns a backend on dsn, closed at the end of the test.
func newBackendAt(t *testing.T, dsn string, opts ...mysql.Option) *mysql.Backend {
	t.Helper()
	b, err := mysql.New(dsn, opts...)
	if err != nil {
		t.Fatalf("mysql.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// serverClockRate is how much faster than the tests' monotonic clock the
// server's may run: expiry is by UTC_TIMESTAMP, the wall clock, which a
// time daemon slews.
const serverClockRate = 0.02

// TestConformance runs the conformance suite on the test server, each
// case in a database of its own, with bells (hand-offs between processes
// wake on the holder's named lock).
func TestConformance(t *testing.T) {
	t.Parallel()
	mytest.DSN(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend { return newBackend(t) },
		backendtest.WithTTL(2*time.Second), backendtest.WithFingerprint(fingerprint), backendtest.WithServerClockRate(serverClockRate))
}

// TestConformanceWithoutBells runs the suite with waiters that wake only
// at the expiries ahead of them and on this Backend's own changes.
func TestConformanceWithoutBells(t *testing.T) {
	t.Parallel()
	mytest.DSN(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return newBackend(t, mysql.WithoutBells(), mysql.WithPollInterval(200*time.Millisecond))
	}, backendtest.WithTTL(2*time.Second), backendtest.WithFingerprint(fingerprint), backendtest.WithServerClockRate(serverClockRate))
}

// fingerprint describes every row of the backend's tables but the
// sessions' expiry (which renewals move).
func fingerprint(t *testing.T, b backend.Backend) string {
	mb := b.(*mysql.Backend)
	p := mb.TablePrefix()
	var sb strings.Builder
	for _, query := range []string{
		"SELECT CONCAT(k, ' ', v, ' ', srv) FROM " + p + "meta ORDER BY k",
		"SELECT CONCAT(id, ' ', ttl_us) FROM " + p + "sessions ORDER BY id",
		"SELECT CONCAT(name, ' ', last, ' ', settled_epoch) FROM " + p + "lease_names ORDER BY name",
		"SELECT CONCAT(name, ' ', token, ' ', session) FROM " + p + "candidacies ORDER BY name, token",
		"SELECT CONCAT(grp, ' ', session, ' ', HEX(id), ' ', HEX(data)) FROM " + p + "members ORDER BY grp, session",
		"SELECT CONCAT(rkey, ' ', version, ' ', token, ' ', deleted, ' ', HEX(value)) FROM " + p + "records ORDER BY rkey",
	} {
		rows, err := mb.DB().QueryContext(t.Context(), query)
		if err != nil {
			t.Fatalf("fingerprint: %s: %v", query, err)
		}
		for rows.Next() {
			var s sql.NullString
			if err := rows.Scan(&s); err != nil {
				t.Fatalf("fingerprint: %v", err)
			}
			fmt.Fprintf(&sb, "%s; ", s.String)
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("fingerprint: %v", err)
		}
		rows.Close()
		sb.WriteString("| ")
	}
	return sb.String()
}
