package postgres

import (
	"strconv"
	"sync"
	"time"

	"github.com/simba-go/simba/internal/plant"
)

// Steps of the database's clock.
//
// Sessions expire by the database's clock, clock_timestamp(), which is the
// server's wall clock: SQL has no monotonic one. A step of that clock
// forward by J (an administrator's date -s, a time daemon's step, a host
// frozen and then set right, a failover to a primary whose clock is ahead)
// makes every session look expired J early, before its holder's deadline,
// which its client computes on its own monotonic clock: a contender that
// deleted such a session would start a term while the holder's still runs.
//
// So a client trusts the database's clock only as far as its own
// monotonic clock confirms it. Every statement that reads
// clock_timestamp() is a sample: (sent, received) on the client's
// monotonic clock and the database time in between. Two samples agree
// when the database time between them is no more than the monotonic time
// from the first's sending to the second's receipt, plus stepRate of it
// and stepSlack: a clock running fast by more, or stepped forward, is a
// step. From a step on (and from the backend's first sample, since what
// came before is unknown) the client's chain of agreeing samples starts
// anew.
//
// A contender deletes an expired session only (see [dbClock.guard]):
//
//   - by a database time it has verified: expires_at at or before the
//     database time of its latest agreeing sample, never by the
//     statement's own clock_timestamp(), which may have stepped since;
//   - and when its chain of agreeing samples began before that session's
//     last renewal (expires_at − ttl at or after the chain's first
//     database time), so that no step between the renewal and now went
//     unseen; or else once the chain is older than 1.1 × the session's
//     TTL on the contender's own clock, by when the holder's deadline has
//     passed whatever the database's clock did before the chain began.
//
// A session's own client deletes its own expired row only past its own
// deadline (see clearExpired). The cost: after a step, or when a client
// has just started, an expired session is taken over up to 1.1 × its TTL
// later than the database's clock alone would; the verified time lags the
// database's by at most one round trip, which costs a crash fail-over one
// more read. A step backward only delays expiry. Steps smaller than
// stepSlack plus stepRate of the time between two samples (at most a
// third of the TTL apart, the renewals' period) go unseen, as a clock
// running that much fast does: the drift margin covers them.
const (
	stepRate  = 0.05
	stepSlack = 5 * time.Millisecond
	// trustFactor: a chain of agreeing samples older than trustFactor ×
	// a session's TTL vouches for its expiry, whenever it was renewed.
	trustFactor = 1.1
)

// dbClock follows the database's clock against the client's monotonic
// clock; one per Backend, fed by every statement that reads the
// database's time.
type dbClock struct {
	mu       sync.Mutex
	have     bool
	sent     time.Time // the latest agreeing sample: when its statement was sent
	db       time.Time // and the database's time it read
	chainAt  time.Time // when the chain's first sample was received (monotonic)
	chainDB  time.Time // and the database's time of that sample
	steps    int       // steps seen
	lastStep time.Duration
	tl       int64 // the timeline of the latest sample (see timeline.go)
	// changed is whether the chain began at a change of server (another
	// timeline) rather than at the first sample.
	changed bool
}

// note records a sample: a statement sent at sent, answered at received,
// that read the database time db on timeline tl. It reports the step it
// found, if any (0: the sample agrees with the chain), and whether the
// sample came from another server than the last (another timeline): the
// chain then starts anew, as after a step, since the new server's clock
// and rows vouch for nothing the old one's did.
func (k *dbClock) note(sent, received, db time.Time, tl int64) (step time.Duration, changed bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.have || tl != k.tl {
		changed = k.have && !plant.Is(plant.KeepChainOnFailover)
		if !k.have || changed {
			k.sent, k.db = sent, db
			k.chainAt, k.chainDB = received, db
			k.changed = changed
		}
		k.have, k.tl = true, tl
		return 0, changed
	}
	// The database's time between the two executions is at most the
	// monotonic time from the baseline's sending to this receipt.
	window := received.Sub(k.sent)
	allowed := window + time.Duration(float64(window)*stepRate) + stepSlack
	if ahead := db.Sub(k.db) - allowed; ahead > 0 {
		k.steps++
		k.lastStep = ahead
		k.sent, k.db = sent, db
		k.chainAt, k.chainDB = received, db
		return ahead, false
	}
	if sent.After(k.sent) {
		k.sent, k.db = sent, db
	}
	return 0, false
}

// chainAge is how long ago, on the monotonic clock, the chain began, and
// whether it began at a change of server.
func (k *dbClock) chainAge(now time.Time) (age time.Duration, changed bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.have {
		return 0, false
	}
	return now.Sub(k.chainAt), k.changed
}

// guard returns the arguments of a DELETE of expired sessions for a
// statement sent now: the verified database time (expires_at at or before
// it), the chain's first database time (a session renewed at or after it
// may go) and the chain's age on the monotonic clock (a session whose TTL ×
// trustFactor is at most that may go too). With no sample yet, nothing
// may go: verified is the zero time, which callers pass as NULL.
func (k *dbClock) guard(now time.Time) (verified, chainDB time.Time, age time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.have {
		return time.Time{}, time.Time{}, 0
	}
	return k.db, k.chainDB, now.Sub(k.chainAt)
}

// stepsSeen reports how many steps were seen and the size of the last.
func (k *dbClock) stepsSeen() (int, time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.steps, k.lastStep
}

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
