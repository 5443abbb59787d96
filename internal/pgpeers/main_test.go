package pgpeers_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// dsn returns the test server's DSN, set by scripts/with-postgres-redis.sh,
// or skips t (fails it under SIMBA_REQUIRE_SERVERS=1).
func dsn(t *testing.T) string {
	t.Helper()
	d := os.Getenv("SIMBA_PG_DSN")
	if d == "" {
		if os.Getenv("SIMBA_REQUIRE_SERVERS") == "1" {
			t.Fatal("no PostgreSQL server: SIMBA_PG_DSN is not set (SIMBA_REQUIRE_SERVERS=1: a missing server is a failure)")
		}
		t.Skip("no PostgreSQL server: SIMBA_PG_DSN is not set; run the tests through scripts/with-postgres-redis.sh or set it")
	}
	return d
}
