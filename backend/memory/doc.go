// Package memory is a complete in-memory implementation of [backend.Backend]:
// many sessions in one process, acting as many nodes of a cluster, with the
// faults of a real network built in.
//
// A [Backend] is the server: it keeps the sessions, the leases and their
// fencing tokens, and the group memberships. It also implements
// [backend.Backend] itself, for a single implicit node named "default". A
// [Node], obtained with [Backend.Node], is one process's connection to the
// same server and implements [backend.Backend] too; give every simulated
// process its own Node:
//
//	srv := memory.New()
//	defer srv.Close()
//	a, _ := simba.New(srv.Node("a"))
//	b, _ := simba.New(srv.Node("b"))
//
// The backend keeps the storage rules of package backend exactly:
//
//   - session IDs are "<node>-<n>", unique and never reused;
//   - a session expires when its granted TTL has passed since the server
//     applied its last KeepAlive (or its Open): its leases end, its
//     memberships go, and waiting calls wake;
//   - Acquire is queued candidacy (see backend.Session.Acquire): it
//     registers a candidacy at the back of the name's queue on the
//     server, with the next value of one counter per Backend (starting at
//     1) as its token, and the oldest candidacy holds. A holding starts
//     only once every older candidacy is gone, and every later candidacy
//     has a larger counter value, so tokens strictly increase for every
//     lease name;
//   - a Release, a re-Acquire or the end of a session serves the next
//     candidacy in the same server step, and the waiter's Acquire returns
//     on the notification, with no request of its own: a hand-off costs
//     one request, the holder's. A waiting candidacy costs the server a
//     queue entry and nothing else, however many there are;
//   - a waiting Acquire whose ctx ends withdraws its candidacy with one
//     request; while the link is cut the request waits for [Node.Heal],
//     and if the node crashes it is never sent: until then the candidacy
//     keeps its place, and may hold the lease unused (until Heal, or the
//     end of its session);
//   - Release compares tokens and never frees a newer holder;
//   - every call that may block honours its ctx and leaves nothing behind.
//
// It uses only the time package's clock, timers and channels, and starts no
// goroutine of its own that outlives a call (expiry runs on [time.AfterFunc]
// timers, which [Backend.Close] stops), so it runs unchanged inside a
// [testing/synctest] bubble with virtual time. Results never depend on map
// order or chance: inspection results are sorted and sessions end their
// leases and memberships in name order.
//
// # Fault injection
//
// Faults are set per [Node] and affect every session opened through it,
// present and future:
//
//   - [Node.Partition] cuts the link: calls block until their ctx ends or
//     [Node.Heal], and notifications (Session.Done, Lease.Lost, member-watch
//     hints) are withheld until Heal. The server goes on expiring sessions by
//     their TTL, so a partition longer than the TTL loses the node's
//     leases to others.
//   - [Node.Heal] restores the link: withheld notifications are delivered in
//     order and blocked calls proceed.
//   - [Node.Crash] ends the process for good: the server stops hearing from
//     it (its sessions expire by TTL; nothing is released), and every later
//     call through the node fails at once with an error wrapping
//     [ErrCrashed]. A restarted process is a new Node with another name.
//   - [Node.SetDelay] delays requests on their way to the server and replies
//     on their way back. A call whose ctx ends during the request delay never
//     reaches the server; one whose ctx ends during the reply delay has taken
//     effect, except Acquire, whose candidacy is withdrawn.
//   - [Node.Expire] and [Backend.ExpireSession] make the server expire
//     sessions at once, as if their TTL had run out.
//
// Requests cross the link one way and replies the other; notifications are
// not delayed by SetDelay.
//
// # Views
//
// [Backend.View] and [Node.View] (backend.Viewer) read the server's records,
// members and leases without a session: they change nothing on the server
// and open no session ([Stats] counts their requests under their kinds; Open
// does not move). The node's faults apply to them as to its sessions.
//
// # Inspection
//
// [Backend.Holder], [Backend.History], [Backend.Sessions], [Backend.Members]
// and [Backend.Stats] show the server's view, for tests and examples:
// who holds what, every holding ever granted and how it ended, and how many
// requests of each kind the server received. Sessions implement
// backend.CandidateLister: Candidates lists a lease's queue.
//
// [WithTTLBounds] makes the granted TTL differ from the requested one, as
// etcd (which raises small TTLs) and ZooKeeper (which negotiates) do.
package memory
