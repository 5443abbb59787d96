package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba/internal/plant"
)

// Failover to a standby.
//
// A PostgreSQL server that fails over to a standby promotes it onto a new
// timeline (1, 2, 3, …, one more at every promotion). An asynchronous
// standby may miss the last commits of the old primary: counters, sequences
// and rows written in its last moments are older, or absent, on the new
// primary. So everything whose reuse matters is qualified by the timeline:
//
//   - tokens: a name's counter moves to GREATEST(last + 1, (timeline − 1)
//     << 32), so the first token granted on a new timeline is above every
//     token of an older one (fewer than 2³² bumps per timeline), and tokens
//     on timeline 1 (a server that never failed over) are as before;
//   - session ids and record versions: nextval + ((timeline − 1) << 32),
//     so that a session or a version lost with the old primary's last
//     commits is never handed out again (a renewal of an old session id, or
//     a compare-and-set against an old version, then finds nothing).
//
// Every statement that samples the database's clock also reads the
// timeline (timelineSQL). A sample from another timeline than the last
// restarts the client's chain of clock samples (see clock.go), so that an
// expired session on the new server is deleted only once this client's own
// clock vouches for it; a timeline below the highest this Backend has seen
// (an old primary back, or a client sent to it) is refused: its writes
// fail, and nothing is granted or renewed there. A grant is held back for
// trustFactor × TTL (a TTL plus the drift margin) after the client first
// heard from a new server, and, for a client that started after the
// failover, until a term of the name was granted on the new timeline after
// such a hold (see settle): the holder of a term granted on the old
// primary, whose candidacy the new one may have lost, keeps its term until
// then by its own clock. The first renewal on a new timeline reads the
// session's candidacies in the same statement, so that a holding whose
// candidacy was lost ends before that renewal counts (see
// session.loseMissing).

// timelineSQL is the server's current timeline, from the name of the WAL
// file it writes (pg_walfile_name uses the timeline of WAL insertion: the
// new one right after a promotion, before any checkpoint). It fails on a
// standby in recovery, where nothing may be written anyway.
const timelineSQL = `('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint`

// baseSQL is the first value of a timeline's range: (timeline − 1) << 32.
func baseSQL() string {
	if plant.Is(plant.UntimedTokens) {
		return "0"
	}
	return `((` + timelineSQL + ` - 1) << 32)`
}

// timelines is the highest timeline a Backend has seen.
type timelines struct{ max atomic.Int64 }

// note records timeline tl, read by a statement of op: an error when it is
// below the highest seen, which is kept.
func (t *timelines) note(op string, tl int64) error {
	for {
		m := t.max.Load()
		if tl < m {
			return fmt.Errorf("simba/postgres: %s: the server is on timeline %d, below timeline %d seen before (an old primary back after a failover?): refused, nothing is granted or renewed there", op, tl, m)
		}
		if tl == m || t.max.CompareAndSwap(m, tl) {
			return nil
		}
	}
}

// settledBit, set in a name's counter, says that a term of the name was
// granted on the counter's timeline after the hold (see settle): a
// candidacy registered then is not held back. The first token of a
// timeline is its base, and the counter moves to base + settledBit at the
// first grant there, so tokens still strictly increase, with 2³¹ of them
// for the registrations before the first grant of a timeline and 2³¹ for
// those after.
const settledBit = 1 << 31

// settled reports whether last, a name's counter, says that a term of the
// name was granted on timeline tl after the hold.
func settled(last, tl int64) bool {
	return timelineOfToken(last) == tl && last&settledBit != 0
}

// settle marks name's counter as settled on the highest timeline this
// Backend has seen, at a grant of the candidacy token after a hold: the
// terms of older timelines have ended by then, for every client, so that
// a candidacy registered from now on is not held back. Until then every
// candidacy is, whoever registered before it and gave up: a client that
// asks behind one that withdraws within its hold waits out a hold of its
// own. A mark that fails to be written costs only that wait, for the next
// candidacies. A token registered after the mark needs none.
func (s queue) settle(ctx context.Context, name string, token int64) {
	tl := s.b.timelines.max.Load()
	if tl <= 1 || settled(token, tl) {
		return
	}
	mark := (tl-1)<<32 | settledBit
	if _, err := s.b.exec(ctx, s.ctx, `UPDATE `+s.b.q+`.lease_names SET last = GREATEST(last, $2) WHERE name = $1`, name, mark); err != nil {
		s.b.log.Debug("simba/postgres: marking a name granted on a new timeline", "name", name, "err", err)
	}
}

// timelineOfToken is the timeline a token was granted on (see "Failover to
// a standby"); a token below 2³² is of timeline 1.
func timelineOfToken(token int64) int64 { return token>>32 + 1 }

// warnTimeout bounds the read of warnAsyncStandbys.
const warnTimeout = 10 * time.Second

// warnAsyncStandbys logs a warning when the server replicates to standbys
// asynchronously (or may: a role that cannot read pg_stat_replication's
// sync_state sees only synchronous_standby_names): a failover to such a
// standby may lose the last commits, which simba survives (tokens never
// repeat, grants are held back), at the cost of a slower crash fail-over.
func (b *Backend) warnAsyncStandbys(ctx context.Context) {
	var (
		standbys, async, unknown int
		names                    string
	)
	err := b.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE sync_state IN ('async', 'potential')),
		count(*) FILTER (WHERE sync_state IS NULL), current_setting('synchronous_standby_names')
		FROM pg_stat_replication`).Scan(&standbys, &async, &unknown, &names)
	if err != nil {
		b.log.Debug("simba/postgres: reading the standbys' replication mode", "err", err)
		return
	}
	if standbys == 0 {
		return
	}
	if async == 0 && (unknown == 0 || strings.TrimSpace(names) != "") {
		b.log.Info("simba/postgres: the server replicates to its standbys synchronously", "standbys", standbys, "synchronous_standby_names", names)
		return
	}
	b.log.Warn("simba/postgres: the server replicates to standbys asynchronously: a failover to one may lose the last commits. simba qualifies tokens by the timeline and holds grants back for a TTL plus the margin after a failover, so terms stay safe, but a crash fail-over then waits up to 1.1 × the TTL longer (see the package doc, \"Replication and failover\")",
		"standbys", standbys, "async", async, "synchronous_standby_names", names)
}
