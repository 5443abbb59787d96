package postgres_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/backendtest"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/pgtest"
)

// newBackend returns a backend on the test server in a fresh schema of
// its own, closed at the end of the test.
func newBackend(t *testing.T, opts ...postgres.Option) *postgres.Backend {
	t.Helper()
	return newBackendAt(t, pgtest.DSN(t), opts...)
}

// TestConformance runs the conformance suite on the test server, each
// case in a schema of its own. The TTL is 2s, as for etcd, so that the
// suite's renewals every TTL/3 keep their sessions alive on a busy
// machine under the race detector.
func TestConformance(t *testing.T) {
	t.Parallel() // with the other suites, after the package's other tests
	pgtest.DSN(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend { return newBackend(t) },
		backendtest.WithTTL(2*time.Second), backendtest.WithFingerprint(fingerprint), backendtest.WithServerClockRate(serverClockRate))
}

// serverClockRate is how much faster than the tests' monotonic clock the
// server's may run: expiry is by clock_timestamp(), the wall clock, which
// a time daemon slews (by 0.5% on this project's test machines at times).
const serverClockRate = 0.02

// TestConformanceWithoutListen runs the suite with the fallback of a
// pooler in transaction mode: no LISTEN, reads at expiry times and every
// poll interval.
func TestConformanceWithoutListen(t *testing.T) {
	t.Parallel()
	pgtest.DSN(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend { return newBackend(t, postgres.WithoutListen(200*time.Millisecond)) },
		backendtest.WithTTL(2*time.Second), backendtest.WithFingerprint(fingerprint), backendtest.WithServerClockRate(serverClockRate))
}

// fingerprint describes every row of the backend's tables but the
// sessions' expiry (which renewals move) and the sequences' positions.
func fingerprint(t *testing.T, b backend.Backend) string {
	pb := b.(*postgres.Backend)
	q := `"` + pb.Schema() + `"`
	var sb strings.Builder
	for _, query := range []string{
		"SELECT id::text || ' ' || ttl::text FROM " + q + ".sessions ORDER BY id",
		"SELECT name || ' ' || last FROM " + q + ".lease_names ORDER BY name",
		"SELECT name || ' ' || token || ' ' || session FROM " + q + ".candidacies ORDER BY name, token",
		"SELECT grp || ' ' || session || ' ' || id || ' ' || encode(data, 'hex') FROM " + q + ".members ORDER BY grp, session",
		"SELECT key || ' ' || version || ' ' || token || ' ' || encode(value, 'hex') FROM " + q + ".records ORDER BY key",
		"SELECT last_value::text FROM " + q + ".session_ids",
		"SELECT last_value::text FROM " + q + ".record_versions",
	} {
		rows, err := pb.Pool().Query(t.Context(), query)
		if err != nil {
			t.Fatalf("fingerprint: %s: %v", query, err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatalf("fingerprint: %v", err)
			}
			fmt.Fprintf(&sb, "%s; ", s)
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("fingerprint: %v", err)
		}
		sb.WriteString("| ")
	}
	return sb.String()
}
