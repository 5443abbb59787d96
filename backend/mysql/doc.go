// Package mysql implements [backend.Backend] on MySQL 8 and MariaDB 10.6
// or later, with github.com/go-sql-driver/mysql: simba's sessions, named
// leases with fencing tokens, group membership and records, as rows of
// InnoDB tables in one database, for teams that run MySQL and no etcd.
//
//	b, err := mysql.New("simba:secret@tcp(db:3306)/app?tls=true")
//	...
//	client, err := simba.New(b)
//	...
//	defer b.Close() // after client.Close
//
// [New] parses the DSN (an error if it does not parse or names no
// database) and owns its pool; [NewFromDB] uses the caller's *sql.DB and
// leaves it open on [Backend.Close]. Neither connects: the first Open or
// View does, creates the tables if the database has none with the prefix
// ([WithTablePrefix], default "simba_"), and checks them.
//
// # Why it is safe
//
// GET_LOCK is not a lease: the server frees it when the connection ends
// (a KILL, a pool's cull, a network cut, go-sql-driver/mysql#1138) while
// the old holder may still run, keeps it for a dead holder until
// wait_timeout, and fences nothing. A lock table with a lock_until column
// times the lock by clocks and issues no token. This backend keeps no
// state in connections. A session is a row; a lease is the oldest live
// candidacy row of a name; a connection that drops loses nothing. Each
// choice below keeps one invariant of package backend, as the PostgreSQL
// backend does (its documentation says why at length):
//
//   - Sessions expire by the database's clock: Open inserts expires_us =
//     now + ttl, and KeepAlive is one statement, UPDATE … SET expires_us =
//     now + ttl_us WHERE id = ? AND expires_us > now (and the epoch is the
//     one of the last renewal, see below). "now" is UTC_TIMESTAMP(6) in
//     microseconds, fixed at the statement's start, which is after the
//     call began: the server never expires the session before the call's
//     start plus the TTL; and only a live session is extended, so an
//     expired session never comes back. One renewal statement per client
//     per TTL/3, whatever it holds.
//   - Tokens strictly increase per name and are never reused: Acquire
//     bumps the name's counter (INSERT … ON DUPLICATE KEY UPDATE last =
//     GREATEST(last + 1, epoch base)) and inserts its candidacy in the
//     same transaction; the counter's row lock serialises registrations of
//     a name until each commits.
//   - One holder: the holder of a name is its live candidacy with the
//     lowest token; new candidacies get larger tokens and an expired
//     session never revives, so once a candidacy holds, it holds until it
//     is deleted (Release, the session's Close: ON DELETE CASCADE) or its
//     session expires.
//   - Revoked before anyone else is granted: a waiter that finds its
//     predecessor's session expired deletes that session's row before it
//     takes the lease, by a DELETE that checks the expiry again under the
//     row's lock; a fenced write locks the writer's candidacy row (LOCK IN
//     SHARE MODE) until it commits, and the deletion, which deletes that
//     row too (ON DELETE CASCADE), waits for an in-flight write. The
//     session's row is not locked: InnoDB has no lock that lets an UPDATE
//     of its expiry through, as PostgreSQL's FOR KEY SHARE does, and a
//     fenced write in a long transaction of the user's (package mylease)
//     must not hold the session's renewals back. Only the deletion counts, never an expiry
//     read: a renewal that passed its test before the expiry and commits
//     after it holds the row's lock meanwhile.
//   - The database's clock is trusted only as far as the client's own
//     monotonic clock confirms it (package dbclock): a step of the
//     server's clock forward ends the sessions (their renewals fail), and
//     their leases pass on no sooner than their holders' deadlines.
//   - Fencing: Condition{Lease, Token} holds iff this session's candidacy
//     (Lease, Token) exists, its session is alive and no candidacy is
//     ahead of it, checked under the candidacy row's shared lock in the
//     write's transaction; a record written with a larger token is never replaced;
//     IfVersion is a compare-and-set on the version. A deleted record's
//     row stays, marked deleted, so that a key written again never repeats
//     a version.
//   - Release and ReleaseWithRecords are conditional on the candidacy
//     (name, session, token) still being there and the session alive: a
//     stale Release never frees a newer holding.
//
// # Transactions
//
// Every transaction of the backend is one round trip: its statements go
// in one query (go-sql-driver/mysql's multiStatements, with the driver
// interpolating the arguments: interpolateParams), passing values to one
// another in user variables (@simba_…). A transaction of several round
// trips whose client is cut off stays open on the server, its row locks
// held, until the server notices (wait_timeout, eight hours by default),
// and a waiter's deletion of the cut-off holder's expired session waits
// for those locks all along; a query held up in the network runs whole
// when it arrives, its checks made then. [New] sets both options on the
// DSN's connections; a pool given to [NewFromDB] must have them
// ([NeedMultiStatements] sets them in a *mysql.Config), and the first Open
// or View checks it. A failed query's connection is dropped, not returned
// to the pool: closing it rolls its transaction back.
//
// Transactions run at READ COMMITTED (each statement reads the latest
// committed rows, and InnoDB takes no gap locks for the backend's
// searches), whatever the server's default; single statements need no
// setting. A deadlock or a lock wait timeout (InnoDB rolls the
// transaction back) runs it again, up to four times. The default
// innodb_lock_wait_timeout (50 s) is never reached but behind a user's
// transaction of package mylease, which holds its term's candidacy row
// (see its documentation). The binary log needs nothing: every statement
// is safe in row and mixed formats (MariaDB's default), and UTC_TIMESTAMP
// replicates in statement format too.
//
// # Waiting
//
// MySQL has no LISTEN/NOTIFY. A waiting Acquire reads its queue when this
// Backend changes it (a registration, a withdrawal, a release, a
// session's end) and otherwise sleeps until the earliest expiry of the
// candidacies ahead of it (the crash case), and is also woken by the
// holder's bell: the holder holds a named lock (GET_LOCK) for each lease
// it holds, on one connection of its Backend, and frees it right after
// its release commits; a waiter of another process blocks on it
// (bells.go). A graceful hand-off between processes costs the release,
// the unlock and one read of the queue; nothing polls. The bell is a
// hint, never what decides who holds. [WithoutBells] turns it off (a
// hand-off between processes then waits for the holder's expiry). Watches
// of members and records hear of this Backend's own changes at once and
// read every [WithPollInterval] otherwise.
//
// # Restarts and failovers
//
// Everything the backend knows is in committed rows: a restart of the
// server shorter than the TTL keeps every session and term (the client
// retries its renewal meanwhile); a longer one ends them, on the holders'
// clocks before the server can grant the leases to anyone else. Run the
// database with innodb_flush_log_at_trx_commit = 1 and sync_binlog = 1 (the
// defaults): with 0 or 2 a crash of the host can lose the last commits, a
// renewal (the session then expires earlier than its holder's deadline)
// or a counter bump (a token handed out twice).
//
// A promoted replica may miss the last commits of the old primary. The
// backend keeps an epoch (epoch.go): a row naming the @@server_id it was
// last seen on, bumped by the first client that finds itself on another
// server. Tokens and record versions are qualified by the epoch
// (GREATEST(last + 1, (epoch − 1) << 40)), so the first token granted
// after a failover is above every token of the old primary; a change of
// epoch restarts the client's chain of clock samples; a server in an epoch
// below one seen (an old primary back) is refused; a grant is held back
// for 1.1 × TTL after a client first heard from a new server, and for a
// client started after the failover until a term of the name was granted
// in the new epoch; the first renewal in a new epoch ends, before it
// counts, the holdings whose candidacy the new server lacks. Give every
// server of a replication group its own server_id (replication requires
// it). After restoring a backup onto the same server, bump the epoch by
// hand: UPDATE simba_meta SET v = v + 1 WHERE k = 'epoch'.
//
// # Schema
//
// The tables are created on first use, under a named lock so that
// clients starting together do not race; MySQL's DDL commits as it goes,
// so a creation that fails drops the tables it created. A meta table holds
// the schema's version; tables of a newer version than the code knows
// are refused, and so are tables that are not InnoDB or whose columns
// differ from these. A DBA who applies them by hand runs [SchemaSQL]'s
// text. Tables of version 1 (before the registrations' numbers,
// sessions.reg_floor and candidacies.reg, which keep a registration that
// reaches the server after its Acquire gave up from changing anything)
// are upgraded on first use: each column that is missing is added with
// ALTER TABLE … ADD COLUMN … BIGINT NOT NULL DEFAULT 0, then the version
// row is set to 2. The user then needs SELECT, INSERT, UPDATE and DELETE on the
// tables (and CREATE, REFERENCES and DROP to create them); a View needs
// SELECT only. Names and keys are ASCII, compared byte by byte
// (ascii_bin), as the other backends' listings sort.
//
// Session IDs are random 62-bit numbers in decimal: never reused, also
// across a failover that lost the rows of some.
package mysql
