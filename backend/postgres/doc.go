// Package postgres implements [backend.Backend] on PostgreSQL, with
// github.com/jackc/pgx/v5: simba's sessions, named leases with fencing
// tokens, group membership and records, as rows of the tables of one
// schema, for teams that have a database and no etcd.
//
//	b, err := postgres.New("postgres://simba@db:5432/app?sslmode=verify-full")
//	...
//	client, err := simba.New(b)
//	...
//	defer b.Close() // after client.Close
//
// [New] parses the DSN (an error if it does not parse) and owns its pool;
// [NewFromPool] uses the caller's *pgxpool.Pool and leaves it open on
// [Backend.Close]. Neither connects: the first Open or View does, creates
// the tables if the schema ([WithSchema], default "simba") has none, and
// checks them.
//
// # Why it is safe
//
// An advisory lock is not a lease: the server frees it when the
// connection ends, while the old holder may still believe it leads, and
// nothing fences its writes. This backend keeps no state in connections.
// A session is a row; a lease is the oldest live candidacy row of a name;
// a connection that drops (pg_terminate_backend, a pooler's cull, a
// network cut) loses nothing: the pool opens another and the next
// statement carries on. Each choice below keeps one invariant of package
// backend:
//
//   - Sessions expire by the database's clock, never the client's:
//     Open inserts expires_at = clock_timestamp() + ttl, and KeepAlive is
//     one statement, UPDATE … SET expires_at = clock_timestamp() + ttl
//     WHERE id = $1 AND expires_at > clock_timestamp(). The statement runs
//     after the call began, so the server never expires the session before
//     the call's start plus the TTL (the contract of Session.KeepAlive);
//     and it extends only a live session, so an expired session never
//     comes back: once a waiter has seen it expire, no write of its can
//     succeed again. Every query tests liveness with clock_timestamp(),
//     never now() (the transaction's start, which can be long past).
//     Expired rows are dead everywhere and are deleted lazily (by a waiter
//     whose queue they block, by the session itself once it learns that it
//     is over, and a few by each Open). One renewal
//     statement per client per TTL/3, whatever it holds.
//   - Tokens strictly increase per name and are never reused: Acquire
//     bumps the name's counter, INSERT INTO lease_names … ON CONFLICT DO
//     UPDATE SET last = last + 1 RETURNING last, and inserts its candidacy
//     with that token in the same statement. The counter's row lock
//     serialises registrations of a name until each commits, so a
//     candidacy with a smaller token is never made visible after one with
//     a larger token; a sequence would not do (its values are handed out
//     outside the transaction order). Tokens of different names are not
//     comparable.
//   - One holder: the holder of a name is its live candidacy with the
//     lowest token. New candidacies get larger tokens and an expired
//     session never revives, so once a candidacy holds no older live one
//     can appear: it holds until it is deleted (Release, the session's
//     Close, which deletes the session row and its candidacies by ON
//     DELETE CASCADE) or its session expires. The one exception is a
//     release that a crash of the server lost (see "Restarts and
//     failovers"): its candidacy comes back ahead of the holder granted
//     after it, which then holds no more by the fence (its fenced writes
//     are refused; nobody else is granted) until the released
//     candidacy's session deletes it again, with its next renewal.
//   - Revoked before anyone else is granted: a waiter that finds its
//     predecessor's session expired deletes that session's row before it
//     takes the lease, in the statement that reads the queue; a fenced
//     write locks the writer's candidacy and session rows (FOR KEY SHARE)
//     until it commits, so the deletion waits for an in-flight write, and
//     the write's check (the session alive by the database's clock) ran
//     before the expiry the waiter saw. The holder's own deadline, from
//     the start of its last KeepAlive plus the TTL, ends before that
//     expiry. Only the deletion counts, never an expiry read in a
//     snapshot: a renewal that passed its liveness test before the expiry
//     and commits after it holds the row's lock meanwhile, so the
//     waiter's DELETE waits for it and leaves the renewed row, which then
//     stays ahead although the statement's snapshot shows it expired
//     (TestRenewalStraddlingExpiryKeepsTheLease). The same holds for a
//     session's own view of its end: it is over when its renewal finds it
//     expired (an UPDATE, which takes the lock) or its row is gone, not
//     when a read shows a past expiry.
//   - Fencing: Condition{Lease, Token} holds iff this session's candidacy
//     (Lease, Token) exists, its session is alive and no candidacy is ahead
//     of it (an expired one counts until the successor deletes it: a
//     holding starts only then), checked in the same statement as the write (a CTE); a
//     record written with a larger token is never replaced; IfVersion is a
//     compare-and-set on the version, which a sequence assigns (a deleted
//     and re-created key never repeats a version).
//   - Release and ReleaseWithRecords are one statement (one round trip,
//     one transaction), conditional on the candidacy (name, session,
//     token) still being there and the session alive: a stale Release
//     never frees a newer holding. ReleaseWithRecords locks the
//     candidacy (FOR UPDATE) and the session's row (FOR KEY SHARE) in a
//     CTE, and writes the records (fenced by the token) and deletes the
//     candidacy only if that CTE found them.
//
// # Waiting without polling
//
// Triggers on candidacies, members and records NOTIFY one channel per
// schema ("simba.<schema>") with a payload naming what changed: "c
// <lease>", "m <group>", "r <key>". Each Backend holds one connection of
// its pool in LISTEN and wakes its waiters and watchers from it. A waiting
// Acquire wakes on a notification of its name (a release, a withdrawal, a
// session's Close), and otherwise sleeps until the earliest expiry of the
// candidacies ahead of it, computed by the database as an interval
// (so that the clocks of client and server need not agree), then reads the
// queue again. A session's expiry writes nothing and so notifies nobody:
// that timer is what notices it. WatchMembers also wakes at the earliest
// expiry of a member's session.
//
// A held lease's Lost closes when a notification of its name, or the
// session's own check past its deadline, shows its candidacy gone, and
// with the session's end.
//
// With [WithoutListen], or through a connection pooler (see "Behind a
// pooler in transaction mode"), the backend never LISTENs: waiters read the queue
// at the expiry times of the candidacies ahead and at least every
// interval, and watches send a hint every interval. The same fallback runs
// while the listening connection is down, and until a probe (a NOTIFY sent
// on another connection of the pool) has come back on it: a LISTEN that
// succeeds but hears nothing, as through a pooler in transaction mode,
// leaves the backend on the fallback, with a warning in the log after five
// seconds. When the probe arrives, every waiter and watcher reads again.
//
// While a holder renews, a waiter's timer (the holder's expiry) fires
// about once per TTL and reads the queue once; a holder reads its
// candidacies once per notification of a name it holds (a waiter joining
// or leaving, a hand-off), so that Lost is not late.
//
// # Statements in flight
//
// pgxpool hands out its connections in the order they were asked for, so
// a keep-alive asked for behind a queue waits for the whole queue. A
// client that starts 10,000 elections at once asks for a connection for
// each Acquire's registration and queue read, and each term's status
// write; unbounded, its keep-alive came back after the session's deadline
// at TTL 3 s, every term ended, and the client started again, in a loop (a
// pool of 32 connections did no better). So the backend's statements whose
// number grows with what its sessions hold (Acquire's registration and
// queue reads, withdrawals, releases, record reads and writes, candidate
// lists, a view's record reads) each first wait for one of
// [WithMaxRequests]' slots (default 64), per backend, as its pool is; and
// the bound in effect ([Backend.MaxRequests]) is at most the pool's
// MaxConns minus one. At least one connection of the pool is then never
// held by a bounded statement, and the statements that go around the
// bound find it: the sessions' keep-alives above all, and those whose
// number does not grow with the leases held (Open and Close of a session,
// its monitor's read of its own row, group membership, which a group's
// view must read and write without waiting behind the Acquires it starts
// and stops, and held-lease listings). The pool must allow at least two
// connections; New and NewFromPool refuse one. The listening connection
// leaves the pool (pgxpool's Hijack), and so does not count.
//
// A statement waits for its slot without a connection and within its
// caller's ctx (and its session's life); one that gives up meanwhile has
// sent nothing, so an Acquire that gave up there leaves no candidacy and
// needs no withdrawal. An Acquire waiting for its turn at a lease holds
// no slot while it sleeps, only during each read of the queue. The
// withdrawal of an Acquire whose ctx ended is bounded too (thousands end
// at once when a group's view moves its partitions away): within a second
// it runs or goes on in the background, as when the server cannot be
// reached. With a pool shared with the application ([NewFromPool]), the
// bound counts the backend's statements only: the application's queries
// can take the connection left for the renewals, so give the backend a
// pool of its own or one with room to spare.
//
// # Behind a pooler in transaction mode
//
// Through PgBouncer (or another pooler) in pool_mode=transaction, each
// transaction, and each statement outside one, may run on another server
// connection. Every statement of this backend is a transaction of its own
// or part of one, and the schema's creation locks with a transaction-level
// advisory lock, so nothing it does depends on the server connection but
// two things, and a user behind such a pooler sets both:
//
//   - default_query_exec_mode=exec in the DSN (simple_protocol and
//     cache_describe work too; with [NewFromPool], set the pool's
//     ConnConfig.DefaultQueryExecMode to pgx.QueryExecModeExec). pgx's
//     default prepares named statements and caches them per connection,
//     and PgBouncer before 1.21 does not carry them from one server
//     connection to another: statements then fail with "prepared
//     statement "stmtcache_…" does not exist" (SQLSTATE 26000) or "already
//     exists" (42P05), and the backend's error says to set this. PgBouncer
//     1.21 and later with max_prepared_statements above zero support pgx's
//     default (not tested here).
//   - Nothing for LISTEN: a LISTEN through the pooler would register on
//     whichever server connection ran it, and that connection would then
//     receive every notification of the schema while PgBouncer has lent it
//     to no client, which PgBouncer logs ("got packet 'A' from server when
//     not linked") and which PgBouncer 1.18 to 1.20 can exit on (FATAL
//     "server in bad state: 11", its issue 822), taking every application
//     behind it down. So before it LISTENs, the backend asks the server for
//     its process ID (pg_backend_pid()) and compares it with the one the
//     connection announced at its start: a pooler announces one of its own
//     (PgBouncer does: the key of its own cancel requests), and on a
//     mismatch the backend never LISTENs, logs a warning once, and reads
//     as with [WithoutListen]. A hand-off then reaches a waiter about one
//     poll interval (a second) after the release; a fail-over takes the
//     holder's expiry, as with LISTEN. The same check makes a pooler in
//     session mode read rather than LISTEN, where LISTEN would have been
//     safe; pass [WithoutListen] to say so outright, and to cover a pooler
//     that announces the server's process ID (the probe below then
//     leaves the backend on its reads, but a LISTEN has been sent).
//
// pool_mode=statement cannot work: the backend needs transactions of
// several statements.
//
// The tests run the conformance suite through PgBouncer 1.18 in
// transaction mode with both settings, a crash fail-over through it, the
// detection of the pooler (with notifications flowing, PgBouncer's log
// stays free of "not linked"), and the probe's fallback with the
// detection off (pooler_test.go).
//
// # Restarts and failovers
//
// Everything this backend knows is in committed rows, so what holds across
// a server's troubles is what PostgreSQL's durability gives:
//
//   - A restart of the server (a crash, a fast shutdown and start) loses
//     nothing that was committed with synchronous_commit = on, the
//     default: sessions, candidacies, the token counters and the records
//     come back from the WAL. Expiry is absolute, by the database's clock:
//     a restart shorter than the TTL keeps every session and term (the
//     client retries its renewal meanwhile), one longer ends them, on the
//     holders' clocks before the server can grant the leases to anyone
//     else (TestServerRestart).
//   - A release, with records or without, commits with
//     synchronous_commit off for its own transaction (set_config(...,
//     true) in the statement): the server does not wait for the WAL
//     flush, one disk flush less on a hand-off's path. It frees only what
//     the session's expiry would free. A crash of the server before the WAL reaches
//     the disk past it (within
//     wal_writer_delay; any durable commit of any session flushes it
//     sooner) loses it: the candidacy comes back, ahead of the queue and
//     of the waiter granted meanwhile, under a session that no longer
//     counts it as held, so nobody holds twice; the granted waiter's
//     term stays valid by its clock but the fence refuses its writes,
//     and nobody else is granted. The session keeps the candidacies it
//     released so (and those whose release returned an error, which may
//     have been applied: TestReleaseOfUnknownOutcomeRedone) until a
//     renewal confirms them: every renewal deletes
//     them again in its own statement, and is a durable commit sent after
//     they returned, so once it returns they are on disk. The lease is
//     then free, or back with the granted waiter, one renewal (TTL/3)
//     after the restart, or at the session's expiry if its client died
//     too (TestCrashLosesAsyncRelease). The records of a release
//     (ReleaseWithRecords: a term's last status) are lost with it, and
//     the next renewal first runs the release's statement again, durably,
//     which writes them again, as they were, fenced as the release was,
//     where the candidacy came back; until
//     then readers see the records as they stood before the release (or
//     for good, if the client died too). Their version is not drawn from
//     the sequence at the release, whose advance a crash would lose with
//     the release, handing out again a version that readers had seen,
//     but when the candidacy registered, in that durable commit: one
//     version per candidacy, for all the records of its release.
//   - synchronous_commit = off (or local with a crash of the host) can
//     lose the last transactions before the crash: a renewal (the server
//     then expires the session earlier than its holder's deadline, and two
//     terms may overlap), or a counter bump (the next candidacy gets a
//     token again that a holder has already used). Do not run this
//     backend's schema with it off; it can be set per database or role.
//   - A failover to a standby (see "Replication and failover" below).
//   - The clock: expiry uses the clock of the server that runs the
//     statement. After a failover the new primary's clock takes over, so
//     its offset from the old primary's adds to the error the drift margin
//     (simba.WithDriftMargin) must cover; keep the servers' clocks
//     synchronised (NTP), well within the margin. clock_timestamp() is the
//     server's wall clock, not a monotonic one (SQL has none). While a
//     time daemon slews it, it runs fast or slow by the slew rate: ntpd
//     slews by at most 0.05%, which the margin (10% of the TTL by default)
//     covers many times over, but chrony by default by up to 8.3%
//     (maxslewrate 83333 ppm), most of the margin: on the database server
//     set chrony's maxslewrate to 500 or so.
//   - A clock stepped forward (date -s, a time daemon's step, a host
//     frozen and then set right, a failover to a primary whose clock is
//     ahead) makes every session look expired early by the step. Clients
//     do not act on that alone: each follows the database's clock against
//     its own monotonic clock, through the times its statements read
//     (renewals every TTL/3 among them), and takes over an expired session
//     only by a database time its own clock has confirmed and only once
//     its chain of agreeing readings covers that session's last renewal
//     (or is older than 1.1 × its TTL); a session's own client deletes its
//     expired row only past its own deadline. So a step ends the sessions
//     (their renewals fail), and their leases pass on no sooner than their
//     holders' deadlines (TestClockStepForward). The cost: after a step,
//     or for a client that has just started, a crashed holder's lease
//     passes on up to 1.1 × TTL later than the database's clock alone
//     would have it. Steps smaller than 5 ms plus 5% of the time between
//     two readings go unseen, as a clock that runs that much fast would:
//     the drift margin covers them. Still, keep steps off the database
//     server (chrony's makestep only at boot, ntpd -x): every step ends
//     every session.
//
// # Replication and failover
//
// A promoted standby starts a new timeline, and this backend qualifies by
// it whatever must never repeat (see timeline.go): a name's token counter
// moves to at least (timeline − 1) << 32, and session ids and record
// versions are offset by the same, so the first token granted after a
// failover is above every token of the old primary, whatever commits the
// standby missed. Every statement that reads the database's clock reads
// the timeline too, and:
//
//   - a server on a timeline below one this Backend has seen (an old
//     primary back, a client sent to it) is refused: no grant, no renewal;
//   - a change of timeline restarts the client's chain of clock readings,
//     so an expired session on the new server is taken over only once the
//     client's own clock vouches for it (the new server's copy of a
//     holder's row may predate renewals the holder counted on);
//   - a grant is held back for 1.1 × the TTL (a TTL plus the default
//     drift margin) after the client first heard from a new server, and,
//     for a client started after the failover, until a term of the name
//     has been granted on the new timeline after such a hold (the first
//     grant marks the name's counter): a holder whose candidacy the standby
//     lost keeps its term until then by its own clock, so the hold assumes
//     that clients of one lease use the same TTL (a longer TTL elsewhere
//     needs a longer hold: configure them alike);
//   - the first renewal on a new timeline reads the session's candidacies
//     in the same statement (by name and token: tokens count per name),
//     and a holding whose candidacy the new server lost ends before that
//     renewal counts; a candidacy the session gave up on the old server
//     only is deleted.
//
// What each replication mode guarantees:
//
//   - Synchronous replication (synchronous_standby_names naming the
//     standbys, synchronous_commit on or remote_apply, and promotion of a
//     synchronous standby only, as Patroni's synchronous_mode with
//     synchronous_mode_strict does): nothing acknowledged is lost; the
//     guards above cost only the hold after a server change.
//   - Asynchronous replication (the default of most tools): the standby
//     may miss the last commits; the guards above keep tokens strictly
//     increasing and terms disjoint, at a cost: a crash fail-over after a
//     server change waits up to 1.1 × TTL longer. [Backend] logs a warning
//     at its first use when the server replicates asynchronously.
//
// A new client that never saw the old timeline, granted a name that was
// first granted on the old primary in its last moments and never reached
// the standby, is held back too: the name's counter shows no grant on the
// new timeline, also when the first client to ask for it after the
// failover gave up within its hold and this one asked behind it. The
// first grant after a hold marks the counter (its token range moves up by
// 2³¹), and candidacies registered after the mark are not held back.
//
// # Schema
//
// The tables are created on first use, in one transaction under an
// advisory lock, so that two clients starting together do not race and a
// failure (a schema the user may not create, say) leaves nothing behind.
// A meta table holds the schema's version; a schema of a newer version
// than the code knows is refused ("simba/postgres: schema "x" is version
// N, this code knows up to M"), and so is a table whose columns differ
// from these. A DBA who applies migrations by hand runs [SchemaSQL]'s
// text, which for the schema simba is:
//
//	CREATE SCHEMA IF NOT EXISTS "simba";
//	CREATE TABLE "simba".meta (
//		key   text COLLATE "C" PRIMARY KEY,
//		value bigint NOT NULL
//	);
//	CREATE SEQUENCE "simba".session_ids;
//	CREATE TABLE "simba".sessions (
//		id         bigint PRIMARY KEY DEFAULT nextval('"simba".session_ids'),
//		ttl        interval NOT NULL CHECK (ttl > interval '0'),
//		expires_at timestamptz NOT NULL,
//		reg_floor  bigint NOT NULL DEFAULT 0
//	);
//	CREATE TABLE "simba".lease_names (
//		name text COLLATE "C" PRIMARY KEY,
//		last bigint NOT NULL CHECK (last > 0)
//	);
//	CREATE TABLE "simba".candidacies (
//		name    text COLLATE "C" NOT NULL,
//		token   bigint NOT NULL CHECK (token > 0),
//		session bigint NOT NULL REFERENCES "simba".sessions (id) ON DELETE CASCADE,
//		reg     bigint NOT NULL DEFAULT 0,
//		PRIMARY KEY (name, token)
//	);
//	CREATE INDEX candidacies_session ON "simba".candidacies (session);
//	CREATE TABLE "simba".members (
//		grp     text COLLATE "C" NOT NULL,
//		session bigint NOT NULL REFERENCES "simba".sessions (id) ON DELETE CASCADE,
//		id      text NOT NULL,
//		data    bytea NOT NULL CHECK (octet_length(data) <= 1024),
//		PRIMARY KEY (grp, session)
//	);
//	CREATE INDEX members_session ON "simba".members (session);
//	CREATE SEQUENCE "simba".record_versions;
//	CREATE TABLE "simba".records (
//		key     text COLLATE "C" PRIMARY KEY,
//		value   bytea NOT NULL CHECK (octet_length(value) <= 65536),
//		version bigint NOT NULL CHECK (version > 0),
//		token   bigint NOT NULL CHECK (token >= 0)
//	);
//	CREATE FUNCTION "simba".notify() RETURNS trigger LANGUAGE plpgsql AS $$
//	DECLARE r record;
//	BEGIN
//		IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
//		PERFORM pg_notify(TG_ARGV[0], TG_ARGV[1] || ' ' || (to_jsonb(r) ->> TG_ARGV[2]));
//		RETURN NULL;
//	END $$;
//	CREATE TRIGGER candidacies_notify AFTER INSERT OR UPDATE OR DELETE ON "simba".candidacies
//		FOR EACH ROW EXECUTE FUNCTION "simba".notify('simba.simba', 'c', 'name');
//	CREATE TRIGGER members_notify AFTER INSERT OR UPDATE OR DELETE ON "simba".members
//		FOR EACH ROW EXECUTE FUNCTION "simba".notify('simba.simba', 'm', 'grp');
//	CREATE TRIGGER records_notify AFTER INSERT OR UPDATE OR DELETE ON "simba".records
//		FOR EACH ROW EXECUTE FUNCTION "simba".notify('simba.simba', 'r', 'key');
//	INSERT INTO "simba".meta (key, value) VALUES ('version', 2);
//
// A schema of version 1 (before the registrations' numbers: reg_floor and
// reg, which keep a registration that reaches the server after its
// Acquire gave up from changing anything) is upgraded on first use, in
// the same transaction:
//
//	ALTER TABLE "simba".sessions ADD COLUMN IF NOT EXISTS reg_floor bigint NOT NULL DEFAULT 0;
//	ALTER TABLE "simba".candidacies ADD COLUMN IF NOT EXISTS reg bigint NOT NULL DEFAULT 0;
//	UPDATE "simba".meta SET value = 2 WHERE key = 'version' AND value = 1;
//
// The user then needs SELECT, INSERT, UPDATE and DELETE on the tables and
// USAGE on the sequences; a View needs SELECT only (it writes nothing).
// Text columns sort in byte order (COLLATE "C"), as the other backends'
// listings do. The CHECK constraints mean that no row can be anything but
// a record or member of this backend: the listings skip nothing, and
// [backend.SkipReporter]'s methods report nothing.
//
// Session IDs are the session rows' ids in decimal, from a sequence: never
// reused.
package postgres
