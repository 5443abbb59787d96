package postgres

import (
	"strconv"
	"time"

	"github.com/simba-go/simba/backend/kit/dbclock"
	"github.com/simba-go/simba/internal/plant"
)

// Steps of the database's clock: see package dbclock. The guard's SQL is
// here: a contender deletes an expired session only by a database time
// its own clock has confirmed ([dbclock.Clock.Guard]), and a session's own
// client deletes its own expired row only past its own deadline (see
// clearExpired).

// trustFactor is dbclock.TrustFactor.
const trustFactor = dbclock.TrustFactor

// guardArgs converts guard's results into statement arguments: a NULL
// verified time (no sample yet) makes the comparison NULL, and so no row
// qualifies.
func guardArgs(verified, chainDB time.Time, age time.Duration) (any, any, time.Duration) {
	if verified.IsZero() {
		return nil, nil, 0
	}
	return verified, chainDB, age
}

// trustSQL is trustFactor as an SQL literal.
var trustSQL = strconv.FormatFloat(trustFactor, 'f', -1, 64)

// expiredGuardSQL is the condition that a session row x (alias) may be
// deleted as expired, with the arguments of guardArgs as the placeholders
// v, c and a: see "Steps of the database's clock" above.
func expiredGuardSQL(x, v, c, a string) string {
	if plant.Is(plant.TrustDBClock) {
		return "(" + x + ".expires_at <= clock_timestamp() OR " + v + "::timestamptz IS NULL AND " + c + "::timestamptz IS NULL AND " + a + "::interval IS NULL)"
	}
	return x + `.expires_at <= ` + v + `::timestamptz AND (` + x + `.expires_at - ` + x + `.ttl >= ` + c +
		`::timestamptz OR ` + x + `.ttl * ` + trustSQL + ` <= ` + a + `::interval)`
}
