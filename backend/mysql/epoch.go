package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba/internal/plant"
)

// Failover to a replica.
//
// MySQL has no timeline: a replica promoted to primary goes on from what
// it has, which after asynchronous (or semi-synchronous, when it fell back)
// replication may miss the last commits of the old primary: token
// counters, session rows and renewals, records. So the backend keeps an
// epoch of its own, a row of the meta table (k = 'epoch') holding a number
// and the @@server_id of the server it was last seen on. Every statement
// that samples the database's clock reads both: when @@server_id differs
// from the row's server, the server changed (a failover, a restore onto
// another server), and the first client to see it bumps the epoch, under
// the row's lock, before it does anything else there. The epoch then
// plays the part of PostgreSQL's timeline (see backend/postgres):
//
//   - tokens: a name's counter moves to GREATEST(last + 1, (epoch − 1) <<
//     40), so the first token granted after a failover is above every
//     token of an earlier epoch (fewer than 2⁴⁰ bumps per epoch), and
//     record versions likewise;
//   - a sample from another epoch restarts the client's chain of clock
//     samples (package dbclock), so that an expired session on the new
//     server is deleted only once the client's own clock vouches for it;
//   - an epoch below the highest this Backend has seen (an old primary
//     back) is refused: nothing is granted or renewed there;
//   - a grant is held back for 1.1 × TTL after the client first heard
//     from a new server, and, for a client that started after the
//     failover, until a term of the name has been granted in the epoch
//     after such a hold (lease_names.settled_epoch);
//   - the first renewal in a new epoch reads the session's candidacies,
//     and a holding whose candidacy the new server lacks ends before that
//     renewal counts.
//
// A restart of the same server keeps its @@server_id and its committed
// rows: no new epoch. A backup restored onto the same server (rows older
// than what clients saw) is not detected: bump the epoch by hand after a
// restore (UPDATE simba_meta SET v = v + 1 WHERE k = 'epoch').

// nowUS is the database's clock, in microseconds since the Unix epoch,
// UTC: the statement's start (UTC_TIMESTAMP, like NOW, is fixed for a
// statement), free of the session's time zone and of its DST folds.
const nowUS = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"

// epochShift places an epoch's range of tokens and versions.
const epochShift = 40

// base is the first value of epoch's range: (epoch − 1) << 40.
func base(epoch int64) int64 {
	if plant.Is(plant.UntimedTokens) {
		return 0
	}
	return (epoch - 1) << epochShift
}

// baseOfSQL is base in SQL, of the epoch in the SQL expression e.
func baseOfSQL(e string) string {
	if plant.Is(plant.UntimedTokens) {
		return "0"
	}
	return "((" + e + " - 1) << " + strconv.Itoa(epochShift) + ")"
}

// epochOfToken is the epoch a token was granted in.
func epochOfToken(token int64) int64 { return token>>epochShift + 1 }

// sample is one reading of the database's clock and epoch.
type sample struct {
	db    time.Time
	epoch int64
}

// epochSQL selects the database's clock, the epoch, the epoch row's server
// and @@server_id (see scanEpoch).
func (t tables) epochSQL() string {
	return `SELECT ` + nowUS + `, v, srv, @@server_id FROM ` + t.meta + ` WHERE k = 'epoch'`
}

// sampleOn reads the database's clock and epoch on conn, bumping the
// epoch first when the server changed, and notes the sample; sent is
// when the caller's first statement on conn was sent.
func (b *Backend) sampleOn(ctx context.Context, conn *sql.Conn, op string, sent time.Time) (sample, error) {
	for range 3 {
		var us, epoch, srv, server int64
		if err := conn.QueryRowContext(ctx, b.t.epochSQL()).Scan(&us, &epoch, &srv, &server); err != nil {
			return sample{}, err
		}
		if srv != server {
			if err := b.bumpEpoch(ctx, conn, srv, server); err != nil {
				return sample{}, err
			}
			continue
		}
		s := sample{db: time.UnixMicro(us), epoch: epoch}
		if err := b.noteClock(op, sent, time.Now(), s.db, epoch); err != nil {
			return sample{}, err
		}
		return s, nil
	}
	return sample{}, fmt.Errorf("simba/mysql: %s: the server's identity keeps changing", op)
}

// bumpEpoch starts a new epoch on the server whose @@server_id is server,
// where the epoch row says srv: once, whichever client sees it first.
func (b *Backend) bumpEpoch(ctx context.Context, conn *sql.Conn, srv, server int64) error {
	res, err := conn.ExecContext(ctx, `UPDATE `+b.t.meta+` SET v = v + 1, srv = @@server_id WHERE k = 'epoch' AND srv <> @@server_id`)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n > 0 {
		b.log.Warn("simba/mysql: the server changed (its @@server_id is not the one the epoch row names): a new epoch begins",
			"was_server_id", srv, "server_id", server)
	}
	return nil
}

// epochs is the highest epoch a Backend has seen.
type epochs struct{ max atomic.Int64 }

// note records epoch e, read by a statement of op: an error when it is
// below the highest seen, which is kept.
func (t *epochs) note(op string, e int64) error {
	for {
		m := t.max.Load()
		if e < m {
			return &epochError{op: op, epoch: e, seen: m}
		}
		if e == m || t.max.CompareAndSwap(m, e) {
			return nil
		}
	}
}

// epochError is the refusal of a server in an epoch below one seen
// before.
type epochError struct {
	op          string
	epoch, seen int64
}

func (e *epochError) Error() string {
	return fmt.Sprintf("simba/mysql: %s: the server is in epoch %d, below epoch %d seen before (an old primary back after a failover?): refused, nothing is granted or renewed there", e.op, e.epoch, e.seen)
}

// warnAsyncReplicas logs a warning when the server replicates to replicas
// asynchronously (or may: semi-synchronous replication falls back to
// asynchronous after rpl_semi_sync_master_timeout): a failover to one may
// lose the last commits, which simba survives (tokens never repeat,
// grants are held back), at the cost of a slower crash fail-over. It needs
// the PROCESS privilege to see the replicas' connections; without it, it
// says nothing.
func (b *Backend) warnAsyncReplicas(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var replicas int
	if err := b.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'`).Scan(&replicas); err != nil {
		b.log.Debug("simba/mysql: reading the replicas' connections", "err", err)
		return
	}
	if replicas == 0 {
		return
	}
	semisync := false
	rows, err := b.db.QueryContext(ctx, `SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_%_status'`)
	if err == nil {
		for rows.Next() {
			var name, value string
			if rows.Scan(&name, &value) == nil && strings.EqualFold(value, "ON") && !strings.Contains(strings.ToLower(name), "slave") && !strings.Contains(strings.ToLower(name), "replica") {
				semisync = true
			}
		}
		rows.Close()
	}
	if semisync {
		b.log.Info("simba/mysql: the server replicates semi-synchronously: a commit is acknowledged once a replica has it (until rpl_semi_sync_master_timeout makes it fall back to asynchronous)", "replicas", replicas)
		return
	}
	b.log.Warn("simba/mysql: the server replicates to replicas asynchronously: a failover to one may lose the last commits. simba qualifies tokens by its epoch and holds grants back for a TTL plus the margin after a failover, so terms stay safe, but a crash fail-over then waits up to 1.1 × the TTL longer (see the package doc, \"Restarts and failovers\")",
		"replicas", replicas)
}
