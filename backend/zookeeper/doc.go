// Package zookeeper is a [backend.Backend] on Apache ZooKeeper (3.5 or
// later), built on github.com/go-zookeeper/zk.
//
//	b, err := zookeeper.New([]string{"zk1:2181", "zk2:2181", "zk3:2181"},
//		zookeeper.WithRoot("/myapp/simba"),
//		// The ensemble's syncLimit × tickTime + tickTime + a third of the
//		// session timeout: 5 × 2 s + 2 s + 10 s (see WithLeaderLag).
//		zookeeper.WithLeaderLag(22*time.Second))
//	if err != nil {
//		return err
//	}
//	defer b.Close()
//	// A 30 s session; its terms last 30 s − the lag.
//	client, err := simba.New(b, simba.WithTTL(30*time.Second))
//
// # Sessions
//
// A simba session is one ZooKeeper session, on a go-zookeeper connection of
// its own: when the session is over (closed, or expired on the server) its
// connection is shut down, and the client opens a new session on a new
// connection. A session never acts on a ZooKeeper session other than the
// one it was opened with: go-zookeeper, once a session has expired, would
// quietly start a new one on the same connection; the backend refuses that
// connection and reports the old session over instead ([backend.ErrSessionDone],
// Done closed).
//
// The session timeout is negotiated: the server clamps the requested one
// between its minSessionTimeout and maxSessionTimeout (by default 2 and 20
// ticks). go-zookeeper v1.0.4 keeps the granted timeout private, so the
// backend reads it from the server's connect response on every connection
// (the dialer is wrapped: see [WithDialer]) and reports the smallest one
// granted as Session.TTL. The same wrapper stops go-zookeeper's own pings: a
// ZooKeeper session lives as long as the server hears from the client, and
// a session that pinged by itself would outlive a process whose keeper has
// stopped. The session is kept alive by KeepAlive alone, an exists request
// on the root: the server expires a session one timeout after the last
// packet it received, and that packet was sent after KeepAlive was called,
// so the timeout is guaranteed from the call's start, as package backend
// requires. (Against an ensemble, set [WithLeaderLag]: a follower answers
// renewals that the leader, which expires sessions, may never hear of; the
// first Open warns without it.) In place of
// go-zookeeper's read timeout, which would fire on a quiet connection, the
// wrapper closes a connection when a request has had no answer for two
// thirds of the timeout, so that go-zookeeper reconnects, to another server
// of an ensemble.
//
// Each connection attempt (the dial, a TLS handshake within it, and the
// server's answer to the session request) is bounded by
// [WithConnectTimeout] (default 10 s) until the session is granted, not by
// go-zookeeper's second, which a TLS handshake with a loaded server can
// exceed; once the session lives, an attempt to reconnect has the granted
// timeout shared among the servers (at least a second), as the Java
// client's, so that every server can be tried before the session expires.
//
// Watches are not relied on across a reconnection. go-zookeeper sets them
// again with a setWatches request that may fail unnoticed (its goroutine
// gives up at the first error), and v1.0.4 reads the last zxid it sends
// with it while its receiving goroutine writes it, a data race the wire
// avoids by keeping the zxid itself (see wire.go; TestGoZookeeperVersion
// pins the version this was checked against). After each reconnection the
// session reads again what its watches would have told it: a waiting
// Acquire reads its candidacy and the older ones it counts, a held lease
// its znode (Lost closes if it is gone), and HeldLeases, WatchRecords and
// WatchMembers start again as if their watches had fired.
//
// Events come through go-zookeeper's event callback, never through its
// event channel, which holds 6 events and drops the rest.
//
// # Znodes
//
// Under the root (default [DefaultRoot], "/simba"):
//
//	<root>/lease/<name>                  container: the queue of lease <name>
//	<root>/lease/<name>/<sid>-<n>-<seq>  ephemeral sequential: a candidacy of
//	                                     session <sid> (16 hex digits), made
//	                                     by its Acquire attempt <n> (16 hex
//	                                     digits); no data
//	<root>/group/<group>/<session ID>    ephemeral: a member of <group>;
//	                                     data: the member ID and data
//	<root>/rec/<key>/=                   persistent: the record at <key>
//	                                     (see Records)
//
// The directories are container znodes, which the server deletes once they
// are empty (every minute by default, see znode.container.checkIntervalMs),
// so a closed client leaves nothing under the root for long but its
// records, which outlive sessions by design.
//
// # Access control
//
// Every znode the backend creates (the root and its missing parents, the
// directories, lease and member znodes, records) gets the ACL of
// [WithACL]. Without WithACL, a backend given credentials ([WithAuth])
// creates them with zk.AuthACL(zk.PermAll), ZooKeeper's CREATOR_ALL_ACL:
// all permissions to the identities its session authenticated as (for
// "digest", the user and a hash of the password), none to anyone else.
// Without credentials the ACL stays zk.WorldACL(zk.PermAll), anyone's.
//
// Anyone who can create or delete znodes under the root can break the
// one-leader guarantee (delete a candidacy znode, so that a second session
// acquires while the holder still holds; create one, so that nobody
// does), and can forge records: operations, statuses (docs/OPERATING.md,
// "Who can break the one-leader guarantee"). So the default takes away
// writes, and reads too: records hold what applications store
// (checkpoints, audit records with who and why) and member data, and
// what reads them (package admin, and the tools built on it) is given the
// deployment's credentials like the nodes. To let anyone read, and only
// the creator write:
//
//	zookeeper.WithACL(append(zk.AuthACL(zk.PermAll), zk.WorldACL(zk.PermRead)...)...)
//
// ZooKeeper does not check exists: anyone can learn whether a lease,
// member or record of a given name exists, and its stat (when it was
// created and changed, how many children it has).
//
// What an ACL protects is decided by ZooKeeper's rules, which follow:
//
//   - Create and delete are checked against the parent's ACL, reads and
//     writes against the znode's own. It is the directories' ACLs
//     (<root>/lease, <root>/group/<group>, <root>/rec/...) that keep others
//     from deleting a lease or member znode or from creating one; and each
//     directory has the ACL of the client that created it first.
//   - zk.AuthACL names identities, not sessions: every client with the same
//     credentials has the same rights, so clients of one deployment share
//     directories and contend for leases as without an ACL. A client with
//     other credentials, or none, gets errors matching zk.ErrNoAuth from
//     every read and write under the root (its keep-alives work: exists is
//     not checked), so it cannot take part; Acquire returns the refusal at
//     once rather than retrying until its ctx ends. For several
//     identities, name each in the ACL (zk.DigestACL) and give every
//     client the same WithACL.
//   - A znode keeps the ACL it was created with. Lease and member znodes
//     are created again with each holding and each Join, but the root and
//     the directories stay as long as something is under them (the records
//     keep the root and <root>/rec for good): a deployment that configures
//     credentials after running without them keeps world-writable
//     directories, under which anyone can still delete candidacy znodes, and
//     world-writable records. Set the ACLs once, with the credentials the
//     clients use, before relying on them: with zkCli.sh, "addauth digest
//     user:password", then "setAcl -R <root> auth::cdrwa". Parents of the
//     root that existed already are left as they are.
//   - With TLS client certificates (ZooKeeper's x509 provider) a session
//     is authenticated without WithAuth, and the default stays world: give
//     WithACL(zk.AuthACL(zk.PermAll)...) explicitly. The "auth" scheme
//     fails (zk.ErrInvalidACL) on a session that has not authenticated.
//   - A server's super user (zookeeper.DigestAuthenticationProvider.superDigest)
//     passes every check, and a server run with zookeeper.skipACL=yes checks
//     nothing.
//
// # Leases and tokens
//
// Acquire is queued candidacy (see [backend.Session]): it creates a
// candidacy, an ephemeral sequential znode under the lease's container
// (created on demand, and again when the server has reaped it between the
// check and the create), and the oldest candidacy, the lowest sequence
// number, holds the lease. The fencing token is the candidacy's czxid, the
// zxid of the transaction that created it, never its sequence number (an
// int32 per container that overflows). A candidacy holds only once every
// older one is gone, and every candidacy created later has a larger czxid,
// so tokens strictly increase from holding to holding. Ordering by
// sequence number assumes the container's counter has not wrapped (2^31
// creates and deletes of candidacies in one life of the container).
//
// Registration is two round trips. The create, with a listing of the
// container's children sent right behind it (the server answers a
// session's requests in order, so the listing sees the create): the older
// candidacies are those listed with a lower sequence number, and none can
// appear later. Then, sent together, an exists watch on the new znode (its
// stat gives the token; the watch closes Lost), an exists watch on each
// older candidacy, and a delete of any candidacy of this session's left by
// an earlier attempt (found by the session ID in its name, the way
// Curator's "protected" nodes are). The waiter counts the older ones'
// delete events and holds the lease when the last is gone: a hand-off is
// the holder's delete and one notification, with no read or write by the
// waiter. Each waiter watches every candidacy older than its own rather
// than its predecessor only: with the predecessor alone, a waiter behind a
// withdrawn one would have to read on each notification to learn whether
// older ones remain. A queue of n candidacies costs n(n-1)/2 watches on
// the server and each delete n-1 events; contenders per lease are few
// (the nodes that run the task: for a partition group, its owner and
// perhaps the next), so at 10,000 leases with one waiter each that is
// 10,000 watches and 20,000 znodes, a waiting candidacy costing one znode,
// one watch on the server and one map entry in the client, no goroutine
// and no request while it waits.
//
// When Acquire's ctx ends, it deletes its candidacy (by the version seen)
// before it returns, waiting up to a second; after that, or when the
// outcome of a create is unknown (a lost reply), a goroutine of the
// session deletes what is left, finding it by name. Until then the
// candidacy keeps its place in the queue and may hold the lease unused,
// delaying the others, never letting two hold it. A re-Acquire by the
// holder releases the holding (its Lost closes) and queues again at the
// back. Release deletes the candidacy with the version seen. Leases
// implement [backend.LostNotifier] (no goroutine per held lease: the watch
// event runs the functions), and sessions [backend.LeaseLister] and
// [backend.CandidateLister].
//
// HeldLeases lists <root>/lease, then lists each container whose name
// matches (up to 256 in flight) with a child watch, and caches whether it
// has candidacies until that watch fires: a later call lists only the
// containers that changed, so a group's members, which list their held
// leases every half grace period, pay one request per call while the
// holders stay, whatever the group's size. A container with no children is
// not a lease held, though it stays until the server's next container
// check (znode.container.checkIntervalMs, a minute by default).
// Candidates lists one container and sorts it by sequence number.
//
// The layout is not that of simba before queued candidacy, where a lease
// was one ephemeral znode <root>/lease/<name>: clients of both versions
// must not run against one root at once (an Acquire that finds such a
// znode fails with zk.ErrNoChildrenForEphemerals until its session ends).
//
// # Records
//
// Sessions implement [backend.Records], and leases [backend.RecordReleaser]
// (the records and the delete of the candidacy znode in one multi-operation).
// The record at key is the
// persistent znode <root>/rec/<key>/= under container directories, one per
// key segment, so that "a" and "a/b" can both be records (a segment "." or
// ".." is stored as "%2E" or "%2E%2E"). Its data is the token of the write
// that stored it, 8 bytes big-endian, then the value. Its Version is its
// mzxid, the zxid of the transaction that wrote it last: never the same for
// two writes, even of a record deleted and created again (the znode's own
// data version would start again at 0). Beside it, a persistent znode
// <root>/rec/<key>/=<czxid> (the directory's czxid in base 36), empty,
// marks the directory's life: the first write of the record creates it, the
// delete of the record deletes it. A record written before there were
// markers gets its marker at its next write.
//
// A leaf whose data is shorter than the token, or a member znode whose data
// is not a member record, was written by another client: ListRecords and
// Members skip it (and log it), GetRecord returns a
// [*backend.MalformedError] for it, and the session's
// [backend.SkipReporter] methods list what was skipped.
//
// A write reads, then writes. The reads go out together, in one round
// trip: the record, its directory, and for a fenced write the session's
// own candidacy znode that holds the lease. The condition is checked on
// what was read, and the write is one multi-operation that applies only
// if, atomically:
//
//   - the record is the one read: its data version and its directory's
//     data version are unchanged (every delete of the record increases its
//     directory's, so a record deleted and created again since the read,
//     whose own data version is back to 0, is caught), or it is still
//     absent for a create. IfVersion, and a fence's token order (never
//     replacing a record written with a higher token), are therefore
//     atomic with the write. The directory read is still the one there:
//     the write checks, or creates, the marker named by the czxid read,
//     and the delete deletes the markers read. A directory the server's
//     container reaper deleted after the record was deleted, and that was
//     created again with the record since the read, has versions that
//     start again and may match, but not that marker. (The one exception
//     is a record whose directory has no marker yet, written before there
//     were markers: its first write creates the marker, and cannot tell
//     the two lives apart.);
//   - for a fenced write, the candidacy znode still exists with the data
//     version read.
//
// What is checked just before the write, in the reads, not atomically
// with it: that the candidacy's czxid is the fence's token and its
// ephemeralOwner this session. ZooKeeper's multi-operations compare data
// versions only; but a candidacy's name is its session's and its
// attempt's alone, so only a client outside simba creating that very path
// again could pass the check with another czxid. Once a candidacy holds
// the lease no older one can appear, so its existence is the holding. A
// session that knows its holding is over refuses the write without asking
// the server.
//
// ReleaseWithRecords makes no read: the session remembers, per record
// (up to 65,536 of them), the data versions of its leaf and directory, the
// directory's czxid and whether it has its marker, and the token stored, as it last read them (GetRecord reads the directory
// too, in the same round trip) or wrote them, and builds the
// multi-operation from those and from its candidacy's version: one round
// trip in all. A stale entry fails the versions, and the release reads and
// tries again, as it does for a record not remembered, or remembered with
// a token newer than the holding's (left as it is, if it still is). The
// core's status records hit it: the status record is written in the term,
// and the core reads the history slot a run will end in when the run
// starts. A record whose directory the session has not seen (the first
// write of a key, and of each of the 50 history slots) costs the read.
//
// A write that finds, on writing, that something it read has changed reads
// and checks again; it fails with [backend.ErrConflict] only when the
// condition does not hold.
//
// Every write also increases the data version of the directory of its
// key's first segment (for "ops/disabled/x", <root>/rec/ops), in the same
// transaction: WatchRecords for a prefix with a "/" is one exists watch on
// that directory, not a watch per znode. (A prefix without "/" watches the
// children of <root>/rec and each first-segment directory that matches.)
// ListRecords walks the directories under the deepest one that the prefix
// names in full, a level per round trip.
//
// # Reading without a session's writes
//
// [Backend.View] (backend.Viewer) reads on a connection of its own, made
// like the sessions' (dialer, credentials, root): getData, exists and
// getChildren only, so it creates no znode and changes no data. Its
// connection has a server session, as every ZooKeeper connection does,
// renewed by a read of the root every third of its timeout and closed with
// the view; when it has expired (the view was cut off for longer than its
// timeout), the view's next call opens another, and the watches set on the
// old one are closed, for the caller to set again.
//
// # Membership
//
// Join creates the member's ephemeral znode (joining again replaces it in
// one multi-operation, so that watches fire); Members reads the children;
// WatchMembers turns child watches into hints, each sent once the next
// watch is set, so that a read after a hint misses nothing.
//
// # Deadlines
//
// The backend keeps no deadline: the client's session keeper does, from the
// send time of each KeepAlive plus the TTL it returned, minus a drift
// margin. Lost and Done are hints that may be late (a cut-off client hears
// of nothing until it reconnects); the deadline is what keeps terms apart.
//
// # No constructor from a *zk.Conn
//
// New takes server addresses, not a connection the caller made. A
// *zk.Conn is one session at a time and starts another by itself after an
// expiry, so it cannot stand for the series of sessions a client goes
// through; its granted timeout can be learnt only by a dialer installed
// when it is made; its events arrive on a channel that drops them; and its
// pings keep a session alive whether or not the client renews. [WithDialer],
// [WithAuth] and [WithACL] cover what such a connection would be made for:
// TLS, proxies, credentials.
//
// # Goroutines
//
// Each open session runs go-zookeeper's connection goroutines (three while
// connected) and one per member or record watch; a request runs on a
// goroutine of its own, so that its caller can give up (go-zookeeper's
// calls take no context). Session.Close (within its ctx) and
// [Backend.Close] wait until all of them have exited; Backend.Close
// abandons the sessions still open, which then expire on the server.
// Neither waits longer than the session timeout plus 5 s: a connection
// whose Close does not end its reads, or a dialer that ignores its ctx,
// cannot hold them up; what is left then keeps running, and Backend.Close
// returns an error naming the sessions. (A dial runs on a goroutine of its
// own, given up at its deadline, so that a dialer ignoring its ctx holds
// up neither go-zookeeper nor the shutdown.)
//
// # Requests in flight
//
// ZooKeeper answers a session's requests in order, so a keep-alive sent
// behind a queue of requests is answered only after all of them. A session
// therefore sends at most [WithMaxRequests] calls at once (default 64; an
// Acquire's create and the read right behind it count as one each); the
// others wait their turn within their caller's ctx and send nothing if it
// ends meanwhile. Keep-alives take no turn. Without the bound, one client
// starting 10,000 elections with status records queued some 50,000
// requests, its keep-alives missed the session's deadline, every term was
// dropped and contended again, and the loop went on (docs/BENCHMARKS.md,
// Scale).
package zookeeper
