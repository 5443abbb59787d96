package memory

import (
	"maps"
	"slices"
	"time"

	"github.com/simba-go/simba/backend"
)

// Grant is one holding of a lease, as the server recorded it.
type Grant struct {
	// Name is the lease name.
	Name string
	// Token is the fencing token of the holding.
	Token uint64
	// Session is the ID of the holding session.
	Session string
	// Node is the name of the node the session was opened through.
	Node string
	// Start is when the server granted the holding: when its candidacy
	// became the oldest of the name's queue (at its Acquire's registration
	// if the queue was empty, else when the holding before it ended), not
	// when it registered.
	Start time.Time
	// End is when the holding ended, if Ended.
	End time.Time
	// Ended reports whether the holding has ended.
	Ended bool
	// Reason says why the holding ended: "released" (Lease.Release),
	// "expired" (its session's TTL ran out), "evicted" (its session was
	// expired early by [Node.Expire] or [Backend.ExpireSession]), "closed"
	// (its session was closed),
	// "reacquired" (its session acquired the name again) or "cancelled"
	// (Acquire's ctx ended before the reply or the notification of its
	// turn reached the caller, so the candidacy was withdrawn). It is empty
	// while the holding lasts. A candidacy withdrawn, or ended with its
	// session, while it waited never held: it has no Grant.
	Reason string
}

// Stats counts the requests the server received, by kind. A request that
// never reached the server (its ctx ended on the way, or its node was
// partitioned or crashed) is not counted. Acquire counts one request per
// call: the registration of its candidacy. A waiting Acquire is served by
// a notification, so a hand-off costs one request, the holder's Release
// (or the end of its session); a waiting Acquire whose ctx ends costs a
// Withdraw as well, when it reaches the server.
type Stats struct {
	Open         uint64 // Backend.Open
	KeepAlive    uint64 // Session.KeepAlive
	Acquire      uint64 // Session.Acquire: registrations of a candidacy
	Release      uint64 // Lease.Release
	Join         uint64 // Session.Join
	Leave        uint64 // Session.Leave
	Members      uint64 // Session.Members
	WatchMembers uint64 // Session.WatchMembers
	Close        uint64 // Session.Close
	HeldLeases   uint64 // Session.HeldLeases
	Records      uint64 // GetRecord, ListRecords, PutRecord, DeleteRecord
	WatchRecords uint64 // Session.WatchRecords
	Withdraw     uint64 // withdrawals of a candidacy whose Acquire's ctx ended while it waited
	Candidates   uint64 // Session.Candidates
}

// count adds one request of kind k.
func (st *Stats) count(k op) {
	switch k {
	case opOpen:
		st.Open++
	case opKeepAlive:
		st.KeepAlive++
	case opAcquire:
		st.Acquire++
	case opRelease:
		st.Release++
	case opJoin:
		st.Join++
	case opLeave:
		st.Leave++
	case opMembers:
		st.Members++
	case opWatchMembers:
		st.WatchMembers++
	case opClose:
		st.Close++
	case opHeldLeases:
		st.HeldLeases++
	case opRecords:
		st.Records++
	case opWatchRecords:
		st.WatchRecords++
	case opWithdraw:
		st.Withdraw++
	case opCandidates:
		st.Candidates++
	}
}

// Holder reports the session currently holding the lease called name (the
// oldest candidacy of its queue, whether or not its node has been told),
// and the token of its holding; ok is false if the lease is free.
func (b *Backend) Holder(name string) (session string, token uint64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, ok := b.leases[name]
	if !ok {
		return "", 0, false
	}
	return l.s.id, l.token, true
}

// History returns every holding ever granted, of every lease name, in grant
// order, which is token order for each name (tokens are given at
// registration, so holdings of different names may interleave).
func (b *Backend) History() []Grant {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.history)
}

// Sessions returns the IDs of the live sessions on the server, sorted.
func (b *Backend) Sessions() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Sorted(maps.Keys(b.sessions))
}

// Members returns the members of group as the server sees them, ordered by
// Session. The result is a copy.
func (b *Backend) Members(group string) []backend.Member {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.members(group)
}

// Stats returns the number of requests the server has received, by kind.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// Records returns every record stored on the server, sorted by key, with
// its version and token: what a test compares to show that something
// wrote nothing.
func (b *Backend) Records() []backend.Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.listRecords("")
}
