// Package admin reads what simba's nodes keep in a backend — the status and
// history of every election, job and partition (each status with the
// lease's last terms: who held it, when, how each term ended), the members
// of groups, each client's recent renewals (Health) — and writes the cluster-wide operations every node obeys: disable and
// enable, trigger, resign, drain and undrain. The simba command and its
// console are built on it.
//
// It needs a backend with records (see backend.Records): memory, etcd,
// ZooKeeper, PostgreSQL and Kubernetes all have them. On a backend without, Open (or, on a backend
// with a View, the first operation) returns an error matching
// backend.ErrRecordsUnsupported.
//
// # Reading costs reads only
//
// When the backend implements backend.Viewer (all five of this module's
// tree do), Open opens a read-only View and no session: Snapshot, Elections,
// Groups, Status, History, Ops and Audit open no session, grant no lease,
// create no znode and write nothing, so they work for a user whose
// credentials may only read the backend's keys, and a command run every
// second costs reads only. The first operation opens the Admin's session
// (renewed in the background until Close); an operation that finds it
// ended (it expired while the backend was away) opens another, and a View
// works again by itself once the backend answers, so an Admin recovers from
// an outage of any length. With a user that may only read, an operation
// fails with the backend's refusal (etcd: "permission denied") and writes
// nothing. A backend without a View is read through the session, which Open
// opens then.
//
//	a, err := admin.Open(ctx, etcdBackend, admin.WithOperator("alice"))
//	if err != nil { ... }
//	defer a.Close()
//	elections, err := a.Elections(ctx)
//	err = a.Disable(ctx, "billing", "maintenance window")
//
// # Operations
//
// Operations are records under ops/ that every node watches:
//
//   - Disable(name): the election, job or group runs nothing anywhere: its
//     holder hands off and no node contends for it, until Enable(name).
//     Disable returns once the operation is recorded; its holder may still
//     be running, or start a run before its watch delivers the disable
//     (within a renewal period, usually milliseconds). Once nothing of the
//     name is held (Elections, Groups), no run of it starts anywhere: a
//     node that wins its lease later reads the operations before the
//     term's first run. The simba command's disable waits for that.
//     Disable and Enable take a partition's lease ("billing.3") too: that
//     partition alone stops, or resumes. A schedule that pauses itself
//     after failed runs in a row (simba.WithPauseAfter) writes the same
//     disable, of its election or of its partition's lease, marked
//     Op.Paused; DescribeOp says "paused after failures", and Enable
//     resumes it.
//   - Trigger(lease), TriggerWith(lease, args): the holder of a scheduled
//     election runs it once as soon as it can, then deletes the request.
//     The run receives args (simba.RunInfo) and its history entry keeps
//     them (Run.Args). Arguments are key=value pairs within the bounds of
//     CheckArgs; ParseArgs reads them as the simba command and the console
//     take them, FormatArgs writes them.
//   - Resign(lease, token): the holder hands off gracefully and sits out one
//     lease term, so that another member takes over with a higher token.
//     The lease key is never deleted from outside: that would let a new
//     holder start while the old one still believes it holds the lease.
//   - Drain(member): the member hands off everything it holds, leaves its
//     groups and contends for nothing until Undrain(member).
//
// Every operation takes a reason, recorded in its operation record with
// who asked (WithOperator, or As for one of several operators) and when:
// Ops.Disables and Ops.Drains, Election.Disable, Group.Disable and
// Member.Drain show them, and DescribeOp puts them in words ("by alice@h1
// since 2025-03-04 16:02:00 UTC: maintenance").
//
// # Audit trail
//
// Every operation also appends an entry to the audit trail, records under
// audit/ keyed by time: who, why, when, the operation and its target,
// whether it changed what is in force, and what it changed in words
// ("disabled; was enabled", "enabled; was disabled by bob since ...",
// "trigger requested with arguments day=2025-03-04", "resign of token 7
// held by m1", "drain of m1, who held 3 leases"; what
// the Admin reads just before, from the records, and knows). The backend
// cannot write both records in one atomic step, so the operation is
// written first and its entry after it: an entry never tells of an
// operation that did not happen, and an operation whose entry could not be
// written returns an error wrapping ErrAuditNotWritten (it took effect: do
// not repeat it). The writer of an entry keeps the newest 1000 entries and
// none older than 30 days, deleting at most 100 per write. Audit lists the
// entries, newest first, filtered by name, time or number, with the
// problems of entries it cannot use.
//
// # Records that cannot be used
//
// A record whose value is not the JSON of its kind (a status, a run, an
// operation, a member's record), whose key names nothing simba writes, or
// whose stored value the backend cannot read as a record or member at all
// (backend.MalformedError, reported where the backend implements
// backend.SkipReporter), does not make a read fail: it is skipped, and
// reported as a Problem —
// its key and why, both cut to a bounded length. Snapshot lists every
// record it skipped, Ops and Group those of their own, HistoryWithProblems
// those of a history; Status returns a *RecordError for a status record
// that cannot be used. Elections, Groups and History skip such records
// silently. An error is returned only when the backend could not be read.
package admin
