// Package kubernetes implements [backend.Backend] on the Kubernetes API, with
// k8s.io/client-go: simba's sessions, named leases with fencing tokens,
// group membership and records, all as coordination.k8s.io/v1 Lease objects
// of one namespace, for services that run on Kubernetes and have no etcd of
// their own to talk to.
//
//	cfg, err := rest.InClusterConfig() // or clientcmd, from a kubeconfig
//	...
//	b, err := kubernetes.New(cfg, kubernetes.WithNamespace("shop"))
//	...
//	client, err := simba.New(b)
//
// [New] makes a clientset from a *rest.Config; [NewFromClient] uses the
// caller's kubernetes.Interface. Neither contacts the server: the first Open
// does.
//
// # Objects
//
// Every object this backend writes is a Lease labelled
// app.kubernetes.io/managed-by=simba, with simba.io/kind naming what it is:
//
//   - A session is one Lease "simba-s-<id>", id 32 random hex digits (never
//     reused: a create of an existing name fails). spec.holderIdentity is
//     the id, spec.leaseDurationSeconds the TTL rounded up to seconds, the
//     annotation simba.io/ttl-ms the TTL in milliseconds (the precise
//     value), spec.renewTime the last renewal's time (for people reading
//     kubectl get leases; this backend never reads it). KeepAlive is one
//     Update carrying the resourceVersion last read: a compare-and-swap, and
//     the one renewal per client whatever it holds.
//   - A lease name is one Lease "simba-l-<h>", h the first 40 hex digits of
//     the SHA-256 of the name (names may hold upper case and _, which object
//     names may not); the annotation simba.io/name holds the name itself,
//     simba.io/last the last token granted (a decimal int64) and
//     simba.io/queue the candidacies, oldest first, as JSON
//     [{"t":token,"s":"session id"},...]; spec.holderIdentity names the
//     session of the first. It is never renewed and never deleted (it keeps
//     the counter).
//   - A record written unfenced is one Lease "simba-r-<h>", h from the key
//     as for names, with annotations simba.io/key, simba.io/value (base64),
//     simba.io/token and simba.io/version. A record written fenced by a
//     lease lives in that lease name's object instead: an annotation
//     r.simba.io/<h> holding {"k":key,"v":value (base64),"t":token,"n":version}
//     and a label r.simba.io/<h>="1", by which a key's copies are found
//     (see "Fenced records").
//   - A group member is a label g.simba.io/<h>="1" (h from the group) on the
//     member's session object, and an annotation m.simba.io/<h> holding
//     {"g":group,"id":member id,"d":data}: membership lives and dies with
//     the session object.
//
// So the Role the backend needs is get, list, watch, create, update and
// delete on leases in its namespace, and nothing else (see [Role]).
//
// Every write of an existing object is an Update of the object as last
// read (a compare-and-swap on its resourceVersion) that changes only what
// this backend owns: the labels and annotations above,
// spec.holderIdentity, and on session objects spec.renewTime and
// spec.leaseDurationSeconds. Everything else another writer put there
// stays: its labels and annotations, and the Lease fields of coordinated
// leader election, spec.strategy and spec.preferredHolder (see "Preferred
// holder").
//
// # Why one object per lease name
//
// The API has no multi-object transaction. A layout of one candidacy object
// per (name, session) and a counter object beside them needs two writes to
// register (bump the counter, create the candidacy), and between them a
// later registrant can bump, create, find itself oldest and hold, and then
// the earlier candidacy, with its smaller token, appears ahead of it: two
// holders. With the queue and the counter in one object, a registration (the
// next token appended with the counter bumped), a withdrawal, a release and
// the removal of a dead session's candidacies are each one compare-and-swap
// Update of that object: a candidacy with a smaller token can never appear
// after one with a larger token, tokens strictly increase per name (the
// counter is an int64; past 2^62 Acquire refuses the name: at a million
// acquisitions a second that is 146,000 years away), and the oldest
// candidacy whose session is alive holds the lease. The cost is contention on
// one object per name: concurrent registrations of a name retry their CAS.
//
// # Liveness without another node's clock
//
// Nothing on the server expires a session: a Lease is data, and its
// renewTime is the writer's wall clock. This backend never compares it with
// its own. Instead:
//
//   - A session's own client ends it at its deadline: the start of its last
//     successful KeepAlive (or of Open) plus the TTL, on its monotonic clock.
//     Past it, KeepAlive, Acquire, Join and every write refuse (ErrSessionDone),
//     and the session deletes its object and its candidacies, which wakes its
//     waiters at once (a client that stopped renewing but still runs).
//   - A contender (a waiter whose queue's first candidacy is another
//     session's) observes that session's object: it notes the
//     resourceVersion it reads (by a get, or from the backend's watch) and
//     the instant, on its own monotonic clock, it first saw that version.
//     Only once the object has stayed at that version for TTL + margin
//     (margin = TTL/10) does it delete it, with a Delete whose precondition
//     is that resourceVersion; then it removes the dead session's
//     candidacies from the queue (a CAS), and holds if its own is first. A
//     session object that is gone (deleted by Close, by its own client at its
//     deadline, or by another contender) is dead: sessions are created before
//     their candidacies and never re-created, so the candidacies of a
//     missing session are removed at once.
//
// Why this keeps "revoked before anyone else is granted": the contender's
// Delete succeeds only if no write of the session's landed after the version
// it observed (a racing renewal changes the version, and the Delete fails:
// the holder lives, and the contender observes afresh); after it succeeds no
// renewal can succeed again (an Update of a deleted Lease is NotFound, never
// a create). Every renewal that did succeed therefore started before the
// observed version was written, which is before the contender first saw it:
// the holder's deadline, its last renewal's start plus TTL on its clock, is
// at most TTL of the holder's clock after the contender's first sight, and
// the contender deletes TTL + margin of its own clock after that sight. With
// clock rates that differ by at most ρ, the holder's TTL lasts at most
// TTL(1+ρ) of the contender's time, so margin ≥ ρ·TTL suffices: TTL/10
// covers clocks whose rates differ by up to 10% (Go's monotonic clock is
// CLOCK_MONOTONIC, which time daemons slew by at most 0.05% (ntpd) to 8.3%
// (chrony's default maxslewrate); cap chrony's maxslewrate on the nodes, as
// for the PostgreSQL backend). The holder's deadline also has simba's drift
// margin taken off by the core. Offsets between the clocks do not matter:
// only durations on each client's own clock are compared. Watches are hints
// only: a lagging watch can only make a contender's view staler, and a stale
// view makes its Delete fail, never succeed wrongly.
//
// What it costs: a client that stops renewing but runs frees its leases at
// its deadline (at most TTL after its last renewal began). A crashed client
// (or one cut off from the API server) frees them TTL + margin after a
// contender first saw its last version, plus the lag of that sight (the
// watch's delivery, or a get every TTL/3 when the watch is down), plus one
// Delete and one Update: about 1.1×TTL + a few round trips when a waiter was
// already watching, and up to 1.1×TTL after a waiter arrives, whenever the
// crash was, since a newcomer cannot know how long the version was unchanged
// before it looked (etcd's server-side expiry frees a lease exactly TTL
// after the last renewal, whoever arrives when).
//
// # Fenced records
//
// A fenced write (Condition.Token set) must commit only while the lease is
// held with that token, and the API has no multi-object transaction: a
// check of the queue followed by a write of another object lets a deposed
// holder's write land after its successor was granted. So a record written
// fenced by a lease is kept in that lease name's own object, the one with
// the queue and the counter, and the write is one compare-and-swap Update of
// that object that also requires this session's candidacy with the token to
// be first (and the session within its deadline): if the queue changed
// since it was read, the Update fails, the write reads again and is refused.
// ReleaseWithRecords is likewise one Update of that object: the records in,
// the candidacy out, all or nothing. A fenced delete of a record in the
// fencing lease's object is one Update too.
//
// A key has its copy where it was last written: unfenced writes go where
// the key's record is (its record object when it has none); fenced writes
// go into the fencing lease's object, moving the record there: the new copy
// is written first (the commit), then the old one is removed with a
// precondition that it is unchanged. Until then, or when that removal fails
// (it is retried by the key's next write), reads see the copy with the
// larger token, a lease object's on a tie (then the smaller object name):
// the record as last written, since a write never replaces a larger token.
// For the same reason the token order against copies elsewhere needs no
// atomic check: a copy with a larger token written meanwhile is read in
// preference to ours. Two cases are not atomic, as on ZooKeeper: a fenced
// delete of a record kept elsewhere than in the fencing lease's object
// (written unfenced or under another lease) checks the lease just before
// the delete; and a move leaves the old copy readable as the loser until it
// is removed.
//
// Size: a Kubernetes object's annotations hold at most 256 KiB in all. The
// records kept in one lease's object are bounded by [MaxLeaseRecordBytes]
// (192 KiB of encoded annotations, about 4/3 of each value plus its key and
// 100 bytes): two records of the largest size (64 KiB), or hundreds of
// small ones; the rest is the queue's (about 60 bytes per candidacy, so
// several hundred waiters). A fenced write or ReleaseWithRecords past the
// bound is refused with an error naming MaxLeaseRecordBytes and writes
// nothing; unfenced records have an object each and only the 64 KiB value
// bound. Deleting a fenced record frees its room.
//
// Versions are random non-zero 63-bit numbers chosen per write, compared
// for equality only, so that a key deleted and written again does not
// repeat one.
//
// # Watches
//
// Each Backend runs one list-and-watch of the namespace's simba Leases; its
// events wake waiting Acquires, held leases' checks (Lost), member and
// record watches, and feed the contenders' observations. After a watch
// error it lists again (jittered backoff) and wakes everything. Every wait
// has a timer as well (a get every TTL/3 of the observed session), so a
// broken watch slows fail-over down but never stops it.
//
// # Preferred holder
//
// Kubernetes' coordinated leader election marks a Lease with spec.strategy
// and spec.preferredHolder, the identity that should hold it, to tell the
// holder to step down. This backend keeps both fields on every write (see
// "Objects"), and honours spec.preferredHolder on a lease name object,
// where it names a session id (32 hex digits), as spec.holderIdentity
// does there: not a group member's id, which names no candidacy. While
// it names a session that has a candidacy in the queue, every other
// session's candidacy yields:
//
//   - a holder's term ends: Lost closes first, then its candidacy is
//     withdrawn (one compare-and-swap; retried in the background when the
//     server cannot be reached), and the next candidacy is first. From the
//     moment the object names the other session, the holder's fenced writes
//     and a ReleaseWithRecords's records are refused as not held, and
//     simba's client, which acquires again after a lost term, queues
//     behind the preferred session rather than contend: the lease is
//     handed off, never fought over;
//   - a waiter that comes first is not granted: its candidacy is withdrawn
//     and its Acquire fails with an error wrapping [ErrYielded] (simba's
//     client acquires again, behind the preferred session). So the waiters
//     queued between the holder and the preferred session stand aside in
//     turn, and the preferred session holds next.
//
// Tokens are untouched (no candidacy moves ahead of an older one): they
// strictly increase, and no two terms are valid at once, as for any
// release. The field stays until someone changes it: while it names a
// session, that session is handed the lease whenever it queues behind
// another. It is ignored when it names this holder, a session with no
// candidacy for the name (gone, or not a simba session), or is empty: then
// nobody is there to take over, and stepping down would leave the lease
// unheld, or bounce it between sessions. The holder sees the field through
// the backend's watch (without the watch permission, at the backend's next
// list, retried every few seconds).
//
// What this is not: the control plane's leader-election controller
// (kube-apiserver with the CoordinatedLeaderElection feature) sets
// spec.preferredHolder only on Leases that LeaseCandidate objects name, and
// expects their holders to renew the Lease's spec.renewTime and may write
// spec.holderIdentity itself. This backend creates no LeaseCandidate, keeps
// liveness on session objects rather than on the lease name object's
// renewTime, and derives spec.holderIdentity from its queue, so its
// objects are not for that controller to manage: do not name them in a
// LeaseCandidate (a holderIdentity the controller wrote would make the
// object corrupt to this backend, see "Malformed objects"). The field is
// for an operator or a tool to move a lease to a chosen session
// (kubectl patch lease simba-l-... --type=merge -p
// '{"spec":{"strategy":"OldestEmulationVersion","preferredHolder":"<session id>"}}';
// the API server requires spec.strategy with it, and keeps both only with
// the CoordinatedLeaderElection feature gate on, beta and off by default
// in Kubernetes 1.37 (with the API coordination.k8s.io/v1beta1 enabled);
// without it the server drops them from every write, and there is nothing
// to honour).
//
// # Malformed objects
//
// A record object whose annotations do not decode, or a record annotation
// of a lease object that does not, is not a record
// ([backend.MalformedError], skipped by listings); a session object in a
// group whose member annotation does not decode is skipped by Members.
//
// A lease name object that is not as this backend writes it (simba.io/name
// not the name, simba.io/last not a token, simba.io/queue not a JSON list
// of candidacies with strictly increasing tokens no larger than the last
// and one per session, spec.holderIdentity not the first candidacy's
// session) fails Acquire, Release and Candidates for that name with a
// [*CorruptObjectError] naming the object and the annotation, and is never
// rewritten by this backend: whoever edited it repairs it (deleting it
// restarts the name's tokens at 1: do not). Other names work on, and
// HeldLeases skips it. A holder of the name keeps its holding (nobody else
// can be granted it) and checks it again, backing off, until it is
// repaired.
//
// A session object whose TTL is spoilt (simba.io/ttl-ms missing, not a
// number, or disagreeing with spec.leaseDurationSeconds, both of which
// Open writes) is counted by contenders and Members as having the longest
// TTL a session may have (24h): a contender never ends a live session
// sooner than its own client would, at the price of waiting 24h plus
// margin for a dead one unless someone deletes its object (the contender
// logs a warning saying so). A live session repairs its object at its next
// renewal, which also restarts the contenders' observation.
//
// # Permissions
//
// A missing permission fails what needs it with an error naming the
// user, the verb, leases and the namespace, as the API server does, and
// pointing at [Role]: create (Open), update (KeepAlive, every write of a
// queue or record), get (Acquire, Release, reads), list (Candidates,
// HeldLeases, Members, record listings), delete (Close, taking over from
// a crashed session). Without watch nothing fails, but waits fall back to
// polling: a released lease passes on when its waiter looks again (its
// timer, up to 1.1×TTL, or the backend's list, retried every few
// seconds) rather than at once, and the backend logs a warning that its
// watch is refused.
package kubernetes
