// Package mylease fences the caller's MySQL or MariaDB transaction with
// simba's own lease rows, for leaders elected by the MySQL backend
// (github.com/simba-go/simba/backend/mysql) whose writes go to the same
// database: the transaction commits only while the term's lease is held
// with that token, and a deposed leader's write is refused with
// [fence.ErrStale] even when no newer leader has written anything, or
// none has been elected yet. No fence table and no claim are needed.
//
// Check first, in the transaction, then write, then commit:
//
//	f := mylease.Fence{TablePrefix: b.TablePrefix()} // b the *mysql.Backend
//	tx, err := db.BeginTx(ctx, nil)                  // db on the backend's database
//	if err != nil {
//		return err
//	}
//	defer tx.Rollback() // a no-op after Commit
//	if err := f.Check(ctx, tx, term.Name(), term.Token()); err != nil {
//		return err // errors.Is(err, fence.ErrStale): the term is over; stop.
//	}
//	if _, err := tx.ExecContext(ctx, "UPDATE cursor SET position = ? WHERE name = 'ingest'", position); err != nil {
//		return err
//	}
//	return tx.Commit()
//
// The check runs the backend's own fence query (mysql.LeaseFenceSQL, with
// the arguments of mysql.LeaseFenceArgs), the one its fenced records use,
// through database/sql, with the backend's driver
// (github.com/go-sql-driver/mysql) or another for MySQL.
//
// # What is guaranteed
//
// The check passes when the term's candidacy row (lease, token) exists,
// its session row is alive by the database's clock (UTC_TIMESTAMP at the
// statement's start) and no candidacy is ahead of it (an expired one
// counts until a successor has deleted it): the term holds the lease. Its
// locking read (LOCK IN SHARE MODE) then holds a shared lock on the
// candidacy's row until the transaction commits or rolls back. A
// successor takes the lease only after deleting the expired session's
// row, which deletes the session's candidacies with it (ON DELETE
// CASCADE); a release deletes the candidacy, a Close the session's row:
// all wait for that lock. So the successor's term begins after the
// transaction has ended, and every check of the old term made after that
// fails: no write of a deposed term commits once a successor holds, and
// none that passed its check lands inside a successor's term. The
// session's renewals (an UPDATE of its row) go on meanwhile, but at
// SERIALIZABLE (see below), and so do new candidates' registrations (the
// backend finds a session's older candidacies through an index of its
// own, locking no other session's). A transaction that outlasts the TTL
// delays the successor by as much; it never overlaps it. Keep fenced
// transactions short, and bound them on the server (MariaDB's
// idle_transaction_timeout and max_statement_time; MySQL's wait_timeout,
// which closes an idle connection and so rolls its transaction back): a
// leader paused, or cut off from the server, in the middle of its
// transaction holds its successor off until the server ends that
// transaction, which without such a bound is wait_timeout's eight hours;
// innodb_lock_wait_timeout bounds the waiters, not the transaction. (The
// backend's own transactions are each one round trip, so that none is
// ever left open by a client that vanished.)
//
// A refused check may have locked the candidacy it found too (one of an
// expired session, say): roll the transaction back at once, or the
// successor waits for it.
//
// The check is of the moment it runs: once it passed, the transaction's
// writes commit even if the session expires before the COMMIT (only no
// successor can have begun). Run it before the writes it guards; run it
// again just before COMMIT to narrow that window.
//
// # Isolation levels
//
// The locking read reads the term's candidacy as last committed,
// whatever the isolation level, and waits for a takeover or a release in
// progress (then fails). The rest of the check is subqueries: the
// session's expiry, whether a candidacy is ahead of the term's, the
// lease's last token. At READ COMMITTED they read the latest committed
// rows. At SERIALIZABLE InnoDB makes them locking reads too: they read
// the latest committed rows, and the session's row stays locked until the
// transaction ends, holding off its renewals meanwhile. At REPEATABLE
// READ (InnoDB's default) they read the transaction's snapshot, which
// InnoDB takes at the transaction's first plain read. Make the check the
// transaction's first statement, as above, and that snapshot is the
// check's own.
//
// A snapshot taken earlier (by a plain SELECT before the check) can make
// a term's check fail wrongly, never pass wrongly. It may lack the term's
// session, or show a predecessor's candidacy that has gone since: then a
// term that holds is refused. But a term's candidacy exists now only if
// its session's row does (it goes with the row), a session's expiry only
// moves forward, and a term's token was granted once no candidacy was
// ahead of it and none can come ahead of it later (tokens only grow): a
// deposed term is refused. (A token never granted, still queued behind
// another, is no term's: with a snapshot older than its queue, its check
// can pass.) The [*fence.StaleError]'s Highest may then be below the
// lease's last token. With MariaDB's innodb_snapshot_isolation on, such a
// check may fail instead with error 1020 (record has changed since last
// read): roll back, and retry in a new transaction while the term holds.
//
// InnoDB may also roll a check back for a deadlock (error 1213) or end its
// wait for a lock (error 1205). Roll back; the term may still hold: retry
// while it does.
//
// The transaction must run on the database, and the tables of the prefix,
// of the backend that elected the term, and the user needs SELECT on its
// sessions, candidacies and lease_names tables: the backend's own user
// has it.
//
// Errors have the prefix "simba/fence: "; a refused term is a
// [*fence.StaleError] whose Resource is the lease's name and Highest the
// lease's last granted token (Token itself when no candidate came after
// the term); bad input matches [fence.ErrInvalidArgument].
package mylease
