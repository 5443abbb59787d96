// Package admin reads what simba's nodes keep in a backend — the status and
// history of every election, job and partition, the members of groups —
// and writes the cluster-wide operations every node obeys: disable and
// enable, trigger, resign, drain and undrain. The simba command and its
// console are built on it.
//
// It needs a backend with records (see backend.Records): memory, etcd and
// ZooKeeper all have them.
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
//   - Trigger(lease): the holder of a scheduled election runs it once as
//     soon as it can, then deletes the request.
//   - Resign(lease, token): the holder hands off gracefully and sits out one
//     lease term, so that another member takes over with a higher token.
//     The lease key is never deleted from outside: that would let a new
//     holder start while the old one still believes it holds the lease.
//   - Drain(member): the member hands off everything it holds, leaves its
//     groups and contends for nothing until Undrain(member).
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
