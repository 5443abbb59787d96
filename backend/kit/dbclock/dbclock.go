// Package dbclock follows a database server's wall clock against the
// client's monotonic clock, for the SQL backends (PostgreSQL, MySQL) whose
// sessions expire by the database's clock: it tells a step of that clock,
// or a change of server, from the passing of time, so that a contender
// deletes an expired session only by a database time its own clock has
// confirmed. The SQL of each backend applies [Clock.Guard]'s bounds; this
// package holds the arithmetic they share.
package dbclock

import (
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
// from the first's sending to the second's receipt, plus StepRate of it
// and StepSlack: a clock running fast by more, or stepped forward, is a
// step. From a step on (and from the backend's first sample, since what
// came before is unknown) the client's chain of agreeing samples starts
// anew.
//
// A contender deletes an expired session only (see [Clock.Guard]):
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
// StepSlack plus StepRate of the time between two samples (at most a
// third of the TTL apart, the renewals' period) go unseen, as a clock
// running that much fast does: the drift margin covers them.
const (
	// StepRate is how much faster than the client's clock the database's
	// may run between two samples before it counts as a step.
	StepRate = 0.05
	// StepSlack is the step, in absolute time, that always goes unseen.
	StepSlack = 5 * time.Millisecond
	// TrustFactor: a chain of agreeing samples older than TrustFactor ×
	// a session's TTL vouches for its expiry, whenever it was renewed.
	TrustFactor = 1.1
)

// Clock follows the database's clock against the client's monotonic
// clock; one per Backend, fed by every statement that reads the
// database's time. The zero Clock has no sample; it is safe for
// concurrent use.
type Clock struct {
	mu       sync.Mutex
	have     bool
	sent     time.Time // the latest agreeing sample: when its statement was sent
	db       time.Time // and the database's time it read
	chainAt  time.Time // when the chain's first sample was received (monotonic)
	chainDB  time.Time // and the database's time of that sample
	steps    int       // steps seen
	lastStep time.Duration
	tl       int64 // the server of the latest sample (a PostgreSQL timeline, a MySQL server's identity)
	// changed is whether the chain began at a change of server rather
	// than at the first sample.
	changed bool
}

// Note records a sample: a statement sent at sent, answered at received,
// that read the database time db on server tl (a PostgreSQL timeline, a
// MySQL server's identity: any number that changes with the server). It
// reports the step it found, if any (0: the sample agrees with the
// chain), and whether the sample came from another server than the last:
// the chain then starts anew, as after a step, since the new server's
// clock and rows vouch for nothing the old one's did.
func (k *Clock) Note(sent, received, db time.Time, tl int64) (step time.Duration, changed bool) {
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
	allowed := window + time.Duration(float64(window)*StepRate) + StepSlack
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

// ChainAge is how long ago, on the monotonic clock, the chain began, and
// whether it began at a change of server.
func (k *Clock) ChainAge(now time.Time) (age time.Duration, changed bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.have {
		return 0, false
	}
	return now.Sub(k.chainAt), k.changed
}

// Guard returns the arguments of a DELETE of expired sessions for a
// statement sent now: the verified database time (expires_at at or before
// it), the chain's first database time (a session renewed at or after it
// may go) and the chain's age on the monotonic clock (a session whose TTL ×
// TrustFactor is at most that may go too). With no sample yet, nothing
// may go: verified is the zero time, which callers pass as NULL.
func (k *Clock) Guard(now time.Time) (verified, chainDB time.Time, age time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.have {
		return time.Time{}, time.Time{}, 0
	}
	return k.db, k.chainDB, now.Sub(k.chainAt)
}

// StepsSeen reports how many steps were seen and the size of the last.
func (k *Clock) StepsSeen() (int, time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.steps, k.lastStep
}
