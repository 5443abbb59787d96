// Package zookeeper is a [backend.Backend] on Apache ZooKeeper (3.5 or
// later), built on github.com/go-zookeeper/zk.
//
//	b, err := zookeeper.New([]string{"zk1:2181", "zk2:2181", "zk3:2181"},
//		zookeeper.WithRoot("/myapp/simba"))
//	if err != nil {
//		return err
//	}
//	defer b.Close()
//	client, err := simba.New(b, simba.WithTTL(10*time.Second))
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
// requires. (Against an ensemble, see [WithLeaderLag].) In place of
// go-zookeeper's read timeout, which would fire on a quiet connection, the
// wrapper closes a connection when a request has had no answer for two
// thirds of the timeout, so that go-zookeeper reconnects, to another server
// of an ensemble.
//
// Events come through go-zookeeper's event callback, never through its
// event channel, which holds 6 events and drops the rest.
//
// # Znodes
//
// Under the root (default [DefaultRoot], "/simba"):
//
//	<root>/lease/<name>                  ephemeral: the holding of lease <name>
//	<root>/group/<group>/<session ID>    ephemeral: a member of <group>;
//	                                     data: the member ID and data
//
// The directories are container znodes, which the server deletes once they
// are empty (every minute by default, see znode.container.checkIntervalMs),
// so a closed client leaves nothing under the root for long.
//
// # Leases and tokens
//
// Acquire creates the lease's ephemeral znode; the fencing token is the
// znode's czxid, the zxid of the transaction that created it, which is
// larger than every earlier zxid on the server, so than the token of every
// earlier holding (the sequence suffix of a sequential znode is an int32
// per parent that overflows; it is never used). While another session's
// znode is there, Acquire waits on an exists watch and tries again when it
// fires. A znode of its own session that is not a current holding, left by
// a create whose reply was lost (a reconnection) or by an Acquire that gave
// up, is recognised by its owner (the znode's ephemeralOwner is the session
// ID) and deleted: it never blocks the lease. The exists watch set on the
// znode once created closes Lost when the znode is deleted. Release deletes
// it with the version seen then. Sessions implement [backend.LeaseLister]:
// the lease znodes are the leases held.
//
// # Membership
//
// Join creates the member's ephemeral znode (joining again replaces it in
// one multi-operation, so that watches fire); Members reads the children;
// WatchMembers turns child watches into hints.
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
// pings keep a session alive whether or not the client renews. [WithDialer]
// and [WithAuth] cover what such a connection would be made for: TLS,
// proxies, credentials.
//
// # Goroutines
//
// Each open session runs go-zookeeper's connection goroutines (three while
// connected) and one per member watch. Session.Close (within its ctx) and
// [Backend.Close] wait until all of them have exited; Backend.Close
// abandons the sessions still open, which then expire on the server.
package zookeeper
