package backend

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors that every backend returns, possibly wrapped. Callers test them with
// [errors.Is].
var (
	// ErrSessionDone is returned by every Session method once the session is
	// over: closed by Close, expired on the server, or declared lost by the
	// backend. The session will never be usable again; the caller opens a new
	// one.
	ErrSessionDone = errors.New("simba/backend: session done")

	// ErrClosed is returned by Backend.Open after Backend.Close.
	ErrClosed = errors.New("simba/backend: backend closed")

	// ErrConflict is returned by Records.PutRecord and DeleteRecord when the
	// write's Condition does not hold: the fence's lease is held by another
	// holding, a higher token wrote the record, or its version differs.
	// Nothing was changed.
	ErrConflict = errors.New("simba/backend: write condition failed")

	// ErrNoRecord is returned by Records.GetRecord for a key with no record.
	ErrNoRecord = errors.New("simba/backend: no such record")

	// ErrRecordsUnsupported is matched by the errors of every record
	// operation (simba's Term.GetRecord and Term.PutRecord, admin.Open,
	// the simba command) on a backend that does not implement [Records].
	ErrRecordsUnsupported = errors.New("simba/backend: the backend keeps no records")

	// ErrNotHeld is returned by Lease.Release when the lease was already
	// lost: its key was deleted, it belongs to another holder now, or its
	// session is gone. Nothing was changed on the server.
	ErrNotHeld = errors.New("simba/backend: lease not held")
)

// Backend opens sessions. One simba client opens one session at a time.
//
// A Backend is safe for concurrent use by multiple goroutines.
type Backend interface {
	// Open creates a new session with the requested options. The session is
	// alive on the server from some instant after Open was called, for at
	// least the TTL reported by Session.TTL, unless renewed.
	//
	// Open honours ctx: when ctx ends first, it returns an error wrapping
	// ctx.Err() and leaves no session behind (or one that expires by itself
	// within its TTL).
	Open(ctx context.Context, o SessionOptions) (Session, error)

	// Close releases what the backend owns (connections it created, not ones
	// the user passed in). Sessions still open are abandoned, not closed: they
	// expire by themselves on the server. Close is idempotent.
	Close() error
}

// SessionOptions are the caller's wishes for a new session.
type SessionOptions struct {
	// TTL is the requested time-to-live. The backend may grant a different
	// one (etcd raises small TTLs to its minimum, ZooKeeper negotiates the
	// session timeout within the server's bounds); Session.TTL reports the
	// granted value, which the caller must use.
	TTL time.Duration
	// GrantRecords, when not empty, is a prefix of record keys that a
	// backend whose grant is a read (the queue read of the PostgreSQL and
	// MySQL backends) lists in the same snapshot, for its leases'
	// [GrantSnapshot]. The core asks for the operations' ("ops/"), which
	// a term's start must check (see GrantSnapshot). Other backends
	// ignore it.
	GrantRecords string
}

// Session is one backend session: an etcd lease, a ZooKeeper session, an
// in-memory session. Every Lease and every group membership obtained through a
// Session is bound to it and ends, on the server, when the session ends.
//
// A Session is safe for concurrent use by multiple goroutines. Every method
// that may block takes a ctx and returns promptly, with an error wrapping
// ctx.Err(), when ctx ends. After the session is over every method returns an
// error wrapping ErrSessionDone (Close returns nil).
//
// Other errors are transient: the operation may or may not have taken effect
// on the server, and the caller may retry.
type Session interface {
	// ID identifies the session uniquely within the backend, for as long as
	// the backend keeps its data (it is never reused).
	ID() string

	// TTL is the granted time-to-live: the server does not expire the session
	// earlier than TTL after the start of the last successful KeepAlive (or of
	// Open).
	TTL() time.Duration

	// KeepAlive renews the session once and returns the granted TTL. The TTL
	// is guaranteed from the instant KeepAlive was called, not from the
	// instant it returned: the server will not expire the session before
	// start+TTL. A backend whose renewal counts from an earlier instant (the
	// server's clock for the session started before the call, e.g. at the
	// last heartbeat it received) must return a correspondingly shorter TTL.
	//
	// KeepAlive returns an error wrapping ErrSessionDone when the server says
	// the session no longer exists.
	KeepAlive(ctx context.Context) (time.Duration, error)

	// Done is closed when the backend knows the session is over (expired on
	// the server, closed, or lost for good). It may be closed late or, while
	// the server is unreachable, not at all: callers keep their own deadline
	// from KeepAlive and do not wait for Done.
	Done() <-chan struct{}

	// Acquire blocks until this session holds the lease called name, or ctx
	// ends. Every successful Acquire returns a token strictly greater than the
	// token of every earlier holding of name, by any session. If this session
	// already holds name (a Release that failed, a reply that was lost),
	// Acquire frees that holding and takes a new one with a new token.
	//
	// Acquire is queued candidacy: it first registers this session's
	// candidacy for name on the server (etcd: a key of its own bound to the
	// session; ZooKeeper: an ephemeral sequential znode; memory: an entry in
	// the name's queue), and the oldest candidacy of a name holds the lease.
	// When the holding ends (Release, the end of its session, an operator
	// deleting it), the next-oldest candidacy holds the lease at once: its
	// Acquire returns on the server's notification, with no write of its
	// own, so that a hand-off costs one write (the holder's) and one
	// notification. Candidacies are served in the order the server
	// registered them; a re-Acquire of a name the session holds queues at
	// the back. The token is the candidacy's creation (etcd's create
	// revision, ZooKeeper's czxid, the memory server's counter): a holding
	// starts only once every older candidacy is gone, and every candidacy
	// registered later has a larger creation, so each holding's token is
	// larger than every earlier holding's.
	//
	// When ctx ends first, Acquire returns an error wrapping ctx.Err() and
	// leaves nothing behind: it holds nothing and waits for nothing. Its
	// candidacy is withdrawn before Acquire returns or, when the server
	// cannot be reached (or a request's outcome is unknown), by the session
	// as soon as it can, or with the session: until then the candidacy
	// keeps its place in the queue, and may hold the lease, unused, which
	// delays the candidacies behind it but never lets two hold it.
	//
	// Names are 1–128 characters of A–Z a–z 0–9 . _ - starting with a letter
	// or a digit; the caller checks them.
	Acquire(ctx context.Context, name string) (Lease, error)

	// Join makes this session a member of group with the given member
	// (Member.Session is ignored and set by the backend). Joining again
	// replaces this session's member record. The membership ends when the
	// session ends or on Leave.
	Join(ctx context.Context, group string, m Member) error

	// Leave ends this session's membership of group. Leaving a group the
	// session is not a member of is not an error.
	Leave(ctx context.Context, group string) error

	// Members lists the live members of group, ordered by Session. Several
	// sessions may carry the same Member.ID; the caller decides what that
	// means. A member entry the backend cannot decode (see MalformedError)
	// is skipped: the group's other members are still listed.
	Members(ctx context.Context, group string) ([]Member, error)

	// WatchMembers returns a channel that receives a value (coalesced: a
	// buffer of one) after the members of group may have changed. It is a
	// hint, not a record: the caller re-reads Members. The channel is closed
	// when ctx ends or the session is over. Changes made before WatchMembers
	// returns may or may not be signalled; callers read Members after
	// WatchMembers returns.
	WatchMembers(ctx context.Context, group string) (<-chan struct{}, error)

	// Close ends the session on the server now: every lease and membership it
	// holds is released. Close is idempotent. If the server cannot be reached
	// before ctx ends, Close returns an error and the session expires by
	// itself within its TTL; either way the Session is over for the caller.
	Close(ctx context.Context) error
}

// Lease is one holding of a named lease by a session: a term, as far as the
// backend is concerned.
//
// A Lease is safe for concurrent use by multiple goroutines.
type Lease interface {
	// Name is the lease name given to Acquire.
	Name() string

	// Token is the fencing token of this holding: strictly greater than the
	// token of every earlier holding of the same name.
	Token() uint64

	// Lost is closed when the backend shows that this holding has ended
	// without Release: the lease was deleted, changed owner, or its session is
	// over. Like Session.Done it may be late; the caller's own deadline is
	// what keeps it safe.
	Lost() <-chan struct{}

	// Release ends this holding if, and only if, it is still this holding
	// (compared by token): it never frees a newer holder. It returns an error
	// wrapping ErrNotHeld when the holding had already ended, and a transient
	// error when the server could not be asked; the caller may retry.
	Release(ctx context.Context) error
}

// LostNotifier is an optional capability of a Lease, found by type
// assertion: it calls a function when the lease is lost, so that a client
// holding thousands of leases needs no goroutine per lease waiting on Lost.
type LostNotifier interface {
	// OnLost arranges for f to run once when Lost is closed: on a goroutine
	// of the backend's, possibly with its locks held, or before OnLost
	// returns if Lost is closed already. f must not block. The returned stop
	// cancels the call, reporting whether it did so before f started.
	OnLost(f func()) (stop func() bool)
}

// GrantSnapshot is an optional capability of a Lease whose session
// implements Records, found by type assertion: the records under
// SessionOptions.GrantRecords as the grant saw them, read in the same
// snapshot (one consistent read) as the queue that granted the lease.
// Every record written before the grant is in it; the core's check of a
// term's start against the operations uses it in place of a read of its
// own (one round trip fewer between the grant and the first run).
type GrantSnapshot interface {
	// RecordsAtGrant returns the records under prefix at the grant,
	// sorted by key, and true; false when the grant did not list prefix.
	RecordsAtGrant(prefix string) ([]Record, bool)
}

// RecordReleaser is an optional capability of a Lease whose session
// implements Records, found by type assertion: it writes records and
// releases the lease in one atomic step, so that a holder's last status
// costs its hand-off no write of its own.
type RecordReleaser interface {
	// ReleaseWithRecords writes each record's Value at its Key, fenced by
	// this holding (as PutRecord with Condition{Lease: Name(), Token:
	// Token()}), and ends the holding, all at once. A record already
	// written with a higher token is left as it is; the rest still
	// happens. When the holding had already ended, nothing is written and
	// the error wraps ErrNotHeld; on a transient error the caller may
	// retry, as with Release. Only Key and Value of the records are used.
	ReleaseWithRecords(ctx context.Context, records []Record) error
}

// RecordPrefetcher is an optional capability of a Session that implements
// Records and whose leases implement RecordReleaser, found by type
// assertion: a session that builds ReleaseWithRecords from the versions it
// remembers (ZooKeeper's multi-operations compare versions, which the
// session must know) rather than reading the records first. The caller
// prefetches, off its hand-off's path, the records a later release will
// write; a session without it is not asked to read anything ahead.
type RecordPrefetcher interface {
	// PrefetchRecords reads the records at keys, or their absence, into
	// what the session remembers. An error is no harm: the release reads
	// what it does not know.
	PrefetchRecords(ctx context.Context, keys ...string) error
}

// CandidateLister is an optional capability of a Session, found by type
// assertion: the queue of a lease (see Session.Acquire), for tests and
// for tools that show who waits for a lease.
type CandidateLister interface {
	// Candidates returns the session IDs of the candidacies for the lease
	// name, oldest first: the first holds the lease (or is about to be
	// told it does), the others wait in that order. A session with
	// several candidacies for name (a withdrawal not yet done) appears
	// once per candidacy. No candidacy: an empty list, not an error.
	Candidates(ctx context.Context, name string) ([]string, error)
}

// LeaseLister is an optional capability of a Session, found by type
// assertion: it lists the leases held now. Partition groups use it to find
// partitions that nobody holds (see simba's vacancy grace); without it that
// safety net is off.
type LeaseLister interface {
	// HeldLeases returns the names, sorted, of the leases held now by any
	// session whose names start with prefix: those with at least one
	// candidacy (see Session.Acquire), each name once.
	HeldLeases(ctx context.Context, prefix string) ([]string, error)
}

// Records is an optional capability of a Session, found by type assertion:
// a small store of records (status, operations, checkpoints) with
// conditional writes and watches. Unlike leases and memberships, records
// outlive the session that wrote them.
//
// Keys are 1–512 characters of A–Z a–z 0–9 . _ - and /, starting and ending
// with a letter or digit, without "//". Values are at most MaxRecordValue
// bytes. Errors follow the Session contract, plus ErrConflict and
// ErrNoRecord.
//
// A value stored at a record's place that is not a record the backend
// wrote (see MalformedError) is not a record: GetRecord returns an error
// wrapping a *MalformedError for it, and ListRecords skips it.
type Records interface {
	// GetRecord returns the record at key, or an error wrapping ErrNoRecord,
	// or one wrapping a *MalformedError (see [errors.As]) when what is
	// stored at key is not a record.
	GetRecord(ctx context.Context, key string) (Record, error)

	// ListRecords returns the records whose keys start with prefix, sorted
	// by key. Stored values that are not records are skipped: one of them
	// does not fail the listing (SkipReporter says which were skipped).
	ListRecords(ctx context.Context, prefix string) ([]Record, error)

	// PutRecord writes value at key if cond holds, atomically with the
	// check where the backend can (see Condition), and returns the record
	// as written. It returns an error wrapping ErrConflict, and changes
	// nothing, when cond does not hold.
	PutRecord(ctx context.Context, key string, value []byte, cond Condition) (Record, error)

	// DeleteRecord removes the record at key if cond holds. Deleting a key
	// with no record is not an error (unless cond requires a version).
	DeleteRecord(ctx context.Context, key string, cond Condition) error

	// WatchRecords returns a channel that receives a value (coalesced: a
	// buffer of one) after records under prefix may have changed; like
	// WatchMembers, a hint, closed when ctx ends or the session is over.
	WatchRecords(ctx context.Context, prefix string) (<-chan struct{}, error)
}

// MalformedError describes an entry stored under the backend's keys that is
// not what the backend writes, such as a value put there by another program
// (etcdctl put, zkCli create): a record's stored value without the framing
// the backend puts around a record's value (on etcd and ZooKeeper, the
// 8-byte token in front), or a group member's stored value that does not
// decode. Such an entry is neither a record nor a member: Records.GetRecord
// returns an error wrapping it, Records.ListRecords and Session.Members
// skip it, and SkipReporter lists what was skipped. The backend never deletes
// it; whoever put it there removes it.
type MalformedError struct {
	// Key is the record's key or, for a group member, the part of the
	// member's key that names its session (what Member.Session would be).
	Key string
	// Reason says what is wrong with the stored value, quoting at most its
	// first few bytes.
	Reason string
}

func (e *MalformedError) Error() string {
	return fmt.Sprintf("simba/backend: stored entry %q is malformed: %s", e.Key, e.Reason)
}

// SkipReporter is an optional capability of a Session, found by type
// assertion: the listings of Records and Session, each with the malformed
// entries (see MalformedError) it skipped, so that a tool such as package
// admin can report them. A backend that can store nothing malformed (the
// memory backend) returns none.
type SkipReporter interface {
	// ListRecordsWithSkipped returns what Records.ListRecords returns
	// for prefix, and the malformed records under prefix that it
	// skipped, sorted by Key. Only a session that implements Records
	// implements it.
	ListRecordsWithSkipped(ctx context.Context, prefix string) ([]Record, []MalformedError, error)

	// MembersWithSkipped returns what Session.Members returns for group,
	// and the malformed member entries of group that it skipped, sorted by
	// Key (their session part).
	MembersWithSkipped(ctx context.Context, group string) ([]Member, []MalformedError, error)
}

// Viewer is an optional capability of a Backend, found by type assertion:
// a read-only [View] of what the backend stores, that opens no session and
// writes nothing. A tool that only reads (status pages, a console, a
// command run every second by watch) uses it so that reading costs reads
// only and works for a user whose credentials can only read.
type Viewer interface {
	// View returns a new View. It may contact the backend (ZooKeeper
	// connects, so that an unreachable server or refused credentials are
	// reported now) or not (etcd reads on the backend's client when asked);
	// it returns an error wrapping ctx.Err() when ctx ends first, and one
	// wrapping ErrClosed after Backend.Close.
	View(ctx context.Context) (View, error)
}

// View reads what a Backend stores, as the methods of the same names of
// Records, SkipReporter, LeaseLister and Session do, without a session:
// it holds no lease, joins no group, and writes nothing to the backend.
//
// A View keeps working across outages of any length: while the backend
// cannot be reached its calls fail (with transient errors: they never wrap
// ErrSessionDone), and they work again once it answers, with no action of
// the caller's. Its watches end (the channel is closed) when their ctx
// ends, when the View is closed, or when the backend can no longer tell
// what changed (a ZooKeeper connection's session expired, say): the caller
// reads again and watches again, pausing between attempts while watching
// fails. After Close, or after Backend.Close, every call returns an error
// wrapping ErrClosed.
//
// A View is safe for concurrent use by multiple goroutines.
type View interface {
	// GetRecord is Records.GetRecord.
	GetRecord(ctx context.Context, key string) (Record, error)
	// ListRecordsWithSkipped is SkipReporter.ListRecordsWithSkipped.
	ListRecordsWithSkipped(ctx context.Context, prefix string) ([]Record, []MalformedError, error)
	// MembersWithSkipped is SkipReporter.MembersWithSkipped.
	MembersWithSkipped(ctx context.Context, group string) ([]Member, []MalformedError, error)
	// HeldLeases is LeaseLister.HeldLeases.
	HeldLeases(ctx context.Context, prefix string) ([]string, error)
	// WatchRecords is Records.WatchRecords: a channel of coalesced hints
	// that records under prefix may have changed, closed as the View's
	// documentation says.
	WatchRecords(ctx context.Context, prefix string) (<-chan struct{}, error)
	// WatchMembers is Session.WatchMembers, closed as the View's
	// documentation says.
	WatchMembers(ctx context.Context, group string) (<-chan struct{}, error)
	// Close releases what the View holds (a connection of its own, on
	// ZooKeeper) within a bounded time, and closes its watches. Close is
	// idempotent.
	Close() error
}

// Record is one record of a Records store.
type Record struct {
	Key   string // the record's key
	Value []byte // the record's value
	// Version changes with every write of the key; 0 means no record. It
	// is opaque: compare it for equality only.
	Version uint64
	// Token is the fencing token of the write that stored the record (0
	// for an unfenced write).
	Token uint64
}

// Condition guards a write to a record. The zero Condition always holds.
type Condition struct {
	// Lease and Token, when Token is not zero, fence the write: it holds
	// only while this session holds Lease with that token (its candidacy
	// with that token still exists: once a candidacy holds the lease, no
	// older one can appear, so it holds the lease until it is gone), and never
	// replaces a record written with a higher token, so a deposed holder
	// can never overwrite what a newer one wrote. The memory and etcd
	// backends check the lease atomically with the write; ZooKeeper checks
	// it just before (its multi-operations cannot compare a znode's
	// creation), and the token order atomically.
	Lease string
	Token uint64 // the holding's token; 0: no fence
	// IfVersion requires the record's current Version to equal Version
	// (0: no record may exist): a compare-and-set.
	IfVersion bool
	Version   uint64 // the version required, with IfVersion
}

// MaxRecordValue is the largest record value a backend must accept.
const MaxRecordValue = 64 << 10

// Member is one session's record in a group.
type Member struct {
	// ID is the member's identity chosen by the caller (by default the
	// session ID). Several sessions may use the same ID.
	ID string
	// Session is the ID of the session that holds the membership, set by the
	// backend.
	Session string
	// Data is opaque to the backend, at most 1 KiB.
	Data []byte
}

// MaxMemberData is the largest Member.Data a backend must accept.
const MaxMemberData = 1024
