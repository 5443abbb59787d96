// Package etcd implements [backend.Backend] on etcd v3, with
// go.etcd.io/etcd/client/v3: simba's sessions, named leases with fencing
// tokens, and group membership, stored under one key prefix.
//
//	b, err := etcd.New([]string{"etcd-1:2379", "etcd-2:2379"})
//	...
//	client, err := simba.New(b)
//	...
//	defer b.Close() // after client.Close
//
// [New] creates and owns a client, with TLS ([WithTLS]) and a user and
// password ([WithAuth]) when asked, and the reconnection settings described
// there; [NewFromClient] uses a client the caller configured (interceptors,
// a token, anything else) and leaves it open on [Backend.Close].
//
// # Secured clusters
//
//	tlsCfg := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}}
//	b, err := etcd.New(endpoints, etcd.WithTLS(tlsCfg), etcd.WithAuth("billing", password))
//
// The user's role needs read and write permission on the keys under the
// prefix (etcdctl role grant-permission billing-role --prefix=true
// readwrite /simba/): sessions write their keys there. Granting a lease
// needs no permission. With WithAuth the client authenticates on its first
// request, not in New, and again on each gRPC stream it opens (a watch, a
// keep-alive: a session opens one per renewal), as etcd's client does with
// a user and password, each costing the server a password check (bcrypt);
// a client certificate whose common name is the user (etcd's
// --client-cert-auth, WithTLS without WithAuth) costs none. A wrong
// password is the error of the first call (etcd's "authentication failed"),
// a missing permission that of the first write ("permission denied"). A TLS
// handshake that fails (a server certificate the client does not trust, a
// client certificate the server refuses) leaves the client unconnected:
// calls wait for their ctx, and Open's error says that the client is not
// connected.
//
// # Key layout
//
// Under the prefix (default "/simba/", see [WithPrefix]):
//
//	key                                 value
//	<prefix>session/<session ID>        the session's epoch: "0", then "1", …
//	<prefix>lease/<name>/<session ID>   a candidacy for the lease: the session ID
//	<prefix>group/<group>/<session ID>  the member in JSON: {"id":"…","data":"<base64>"}
//	<prefix>rec/<key>                   a record: its token (8 bytes, big-endian), then its value
//
// Every key but the records is bound to the etcd lease of the session that
// wrote it, so etcd deletes it when the session ends, by revocation
// ([backend.Session] Close) or expiry. Records outlive their sessions. The
// session ID is the etcd lease ID in 16 hexadecimal digits, so member keys
// sort by session ID. Lease and group names cannot contain "/". (Before
// queued candidacy a lease was the one key <prefix>lease/<name>: clients of
// the two layouts do not see each other's holdings, so every client of a
// prefix must run the same layout; stop the old ones before starting the
// new.)
//
// A value under rec/ shorter than the 8 bytes of a token, or a member key
// whose value is not that JSON with an id, is not something this backend
// wrote (another program put it there, e.g. etcdctl put): it is no record
// and no member. ListRecords and Members skip it (and log it) rather than
// fail, GetRecord returns a [*backend.MalformedError] for it, and the
// session's [backend.SkipReporter] methods list what was skipped.
//
// # Sessions and deadlines
//
// A session is one etcd lease. Open grants it with the requested TTL rounded
// up to whole seconds (never down); etcd raises TTLs below its minimum,
// 1.5 election timeouts rounded up to a second, and Session.TTL reports the
// TTL granted. KeepAlive renews it with one keep-alive request
// (KeepAliveOnce), not with the client's background keep-alive stream, and
// returns the TTL of etcd's answer. etcd counts that TTL from the instant the
// leader receives the request, which is after the call began, so the TTL
// holds from the call's start: simba's deadline, the send time of the last
// confirmed renewal plus the TTL minus its drift margin, ends before etcd can
// expire the lease. etcd's own client counts from the reply instead.
//
// etcd's leader checks for expired leases every 500ms, so a lease is revoked
// up to half a second after its TTL ran out, and a crashed holder's leases
// pass to another session within about TTL + 0.5s of its last renewal. When
// a leader is elected or the server restarts, etcd extends every lease by an
// election timeout: later expiry, never earlier.
//
// Open also writes the session key and watches it: Done is closed when etcd
// deletes it, so a session learns of its expiry without renewing, and when a
// keep-alive finds the lease gone, on Close, on [Backend.Close], or when the
// client is closed.
//
// # Leases and tokens
//
// A lease is a queue of candidacies. Acquire registers the session's
// candidacy, the key <prefix>lease/<name>/<session ID> bound to the
// session's etcd lease, and the oldest candidacy of a name, the lowest
// create revision under <prefix>lease/<name>/, holds the lease. The token
// is the candidacy's create revision. Tokens strictly increase: a
// candidacy holds only once every candidacy created before it is gone, and
// every candidacy created after a holding began has a larger create
// revision (etcd's revisions only grow, across leaders and restarts, but
// not across a restore from a backup: see below), so the holdings' tokens
// grow in the order the holdings begin. Release
// deletes the candidacy key by a transaction conditional on its create
// revision, so it never frees a newer candidacy, and returns
// [backend.ErrNotHeld] when the compare fails. If the session has a
// candidacy for the name already (it holds the lease, a Release failed, a
// reply was lost), Acquire deletes it, conditionally on its create
// revision, so that the holding's Lost closes, and queues again at the
// back: etcd refuses a put and a delete of one key in one transaction, so
// this takes two.
//
// Acquire's transaction creates the key only if it does not exist,
// compares the session's epoch (below), and reads, in the same revision,
// the keys under <prefix>lease/<name>/ (keys only): those with a lower
// create revision are the older candidacies. With none, Acquire returns
// at once: a free lease costs one transaction. Otherwise it waits until
// the session's watch of the lease keys (below) has delivered the delete
// of each of them, and returns then: no read and no write of its own. A
// graceful hand-off therefore costs the holder's one transaction (its
// Release, with its last records if it has any) and one watch event.
//
// When Acquire's ctx ends while it waits, it withdraws its candidacy
// before it returns, with a delete conditional on the create revision,
// within a second, if a request slot is free (see [WithMaxRequests]); if
// not, or if that delete fails, a goroutine of the session deletes it
// (the undo below, which batches the withdrawals of many Acquires that end
// together: a group whose view moved its partitions away), or it goes with
// the session. Until then the candidacy keeps its place and may hold the
// lease, unused: it delays the candidacies behind it, and never lets two
// hold. simba cancels Acquire's ctx when a task stops, yields, is disabled
// or drained, or a group's view moves the partition away, so each of
// those leaves the queue this way. If someone else deletes a waiting
// candidacy (an operator with etcdctl), its Acquire queues again; of
// concurrent Acquires of one name on one session, the later one's
// candidacy replaces the earlier one's, whose holding is lost or whose
// wait fails.
//
// A transaction whose caller gives up may still be applied by etcd: the
// request may have been proposed already. Acquire transactions therefore
// also compare the session key's value, the session's epoch; when a caller
// gives up while one is on its way, a goroutine of the session bumps the
// epoch and deletes the candidacy key if it is bound to the session, in
// one transaction, so the interrupted transaction fails if etcd applies it
// later. Acquire leaves nothing behind. The undos queued together go in
// one transaction (up to 100 keys, one bump): every bump makes the
// session's Acquires in flight retry, and a client that stops thousands of
// pending Acquires at once (a group whose view changed) would otherwise
// bump the epoch thousands of times. An Acquire that gave up while it
// waited for a request slot was never sent and needs no undo.
//
// # Waiting and losing
//
// A waiting Acquire opens no watch of its own: a watch that starts at or
// below etcd's current revision is "unsynced", and the server catches it
// up only every 100ms, so a deletion that comes soon after waits for that
// (etcd's concurrency.Election, which watches from the revision it read,
// pays up to 100ms per hand-off; a watch from the revision after the one
// a transaction saw is unsynced too as soon as any other write came in
// between). The session's watch has been running since Open and is in
// sync.
//
// A session watches all the lease keys with one prefix watch, started in
// Open, and hands each event to the session's candidacy of its name, if
// it has one: a waiter counts the deletes of its older candidacies; a
// holding's Lost is closed when its key is deleted, recreated by another
// candidacy or bound to another etcd lease, or when the session is over,
// unless the holding's own Release ended it first. A held or waiting
// lease therefore costs no goroutine and no watch, on the client or on the
// server; the price is that every session receives the events of every
// lease key under the prefix, which, at rest, are none. Acquire registers
// the name before its first transaction, so that an event that comes
// between the transaction and the registration of its outcome is not
// missed; when the watch breaks (a compaction), one read of the lease keys
// stands for the events missed, and each waiter keeps, of its older
// candidacies, those the read shows. The comment of leaseWatch gives the
// whole argument. Leases also implement [backend.LostNotifier] (OnLost),
// and sessions [backend.LeaseLister] (HeldLeases: one range read of the
// lease keys, each name with a candidacy listed once) and
// [backend.CandidateLister] (Candidates: one range read of the name's
// keys, sorted by create revision).
//
// What a waiting candidacy costs: one key (its name, about 60 bytes with
// the default prefix, and its 16-byte value) bound to the session's etcd
// lease; one entry in the session's bookkeeping (the older candidacies'
// keys and create revisions, usually one); and, at every change of the
// name's queue, one event to every session of the prefix. A group of
// 10,000 partitions on n nodes, each node contending for its own
// partitions only, has 10,000 candidacies at rest, as many keys as
// holdings; one election contended by every node has n. In a steady state
// nothing is sent: the waiting costs no requests. Measured (TestScaleWaiting,
// 2 cores, loopback): 10,000 Acquires of one session waiting behind another
// session's 10,000 holdings cost the waiting client 2.5 KiB of heap and one
// goroutine (the caller's) each, the server 0.8 KiB of RSS each, and no
// request while waiting; the revocation of the holder's session handed all
// 10,000 over in 177ms with no request from the waiter.
//
// # Records
//
// Sessions implement [backend.Records], and leases [backend.RecordReleaser]
// (the fenced puts and the delete of the candidacy key in one transaction,
// with no read before it). A record's Version is its key's mod revision. A
// write fenced by a lease is one transaction: it compares the session's
// candidacy key of the lease (create revision equal to the token, bound to
// this session's etcd lease: once a candidacy holds, no older one can
// appear, so its existence is its holding) and, in a nested transaction, writes only if the record is
// absent or was written with a token not above the fence's. etcd cannot
// compare part of a value, but it compares values byte by byte, and a
// stored value that begins with its token in big-endian order is less than
// the 8 bytes of token+1 exactly when its token is at most token. A write
// with IfVersion compares the mod revision (version 0: the create revision
// is 0). Records are not bound to the session's etcd lease.
//
// # Reading without a session
//
// [Backend.View] (backend.Viewer) reads the records, members and lease keys
// with plain range requests, and watches them, on the backend's client: no
// lease is granted and nothing is put, so the store's revision does not
// move and a user whose role may only read the prefix's range can use it.
// Its calls fail while etcd cannot be reached and work again when the
// client has reconnected. A session's Open needs write permission (it puts
// the session key); when that put is refused, Open revokes the lease it was
// granted, so a refused Open leaves nothing behind.
//
// # Groups
//
// Join writes the member key bound to the session's lease, Leave deletes it,
// and Members reads the group in one range request sorted by key. WatchMembers
// returns once etcd has confirmed a prefix watch of the group, so every
// change after it returns is hinted; hints are coalesced on a channel with a
// buffer of one.
//
// # Goroutines and requests
//
// A session runs one goroutine watching its key, one watching the lease
// keys, one undoing interrupted Acquires while there are any, and one per
// member or record watch, each ending with its session; Session.Close and
// [Backend.Close] wait for them. Besides the client's own and those of the
// callers waiting in Acquire, that is all: a held lease costs none. In a steady state a client's only
// requests are its keep-alives, one per renewal whatever the number of
// leases held: the watches cost no requests.
//
// Key-value requests in flight are bounded, per backend ([WithMaxRequests],
// default 64). Ten thousand elections starting at once, unbounded, put ten
// thousand transactions in front of the session's own keep-alive: measured
// on the embedded server, renewals then took 1.4–2s, and etcd refused
// writes with "too many requests" (more than 5,000 proposals waiting to be
// applied); bounded, the same burst saw renewals of milliseconds.
//
// # etcd restored from a backup
//
// A cluster restored from a snapshot without etcdutl's --bump-revision
// goes back in time (etcd#16028): it counts revisions on from the
// snapshot's, so new candidacies get tokens at or below tokens already
// handed out. A fence that saw the higher ones refuses the new holders'
// writes until the revisions pass them; one that did not sees tokens
// repeat.
//
// A Backend remembers the highest revision of its ordered responses
// (writes, lease grants and linearizable reads: it makes no serializable
// read), which come after every response received before them whichever
// member answers, and the cluster ID of its first response. An ordered
// response below that revision, or any response from another cluster ID,
// shows the cluster restored or replaced, and the Backend refuses for
// good: every session ends, so its holdings are lost and simba revokes
// their terms; no lease is granted; the calls of its sessions fail with
// errors wrapping [ErrRestored] and [backend.ErrSessionDone], and Open
// with errors wrapping [ErrRestored], naming the revisions or the cluster
// IDs. Keep-alives and watch events carry the revision of the member that
// answers, which may lag behind the others: their cluster ID is checked,
// and a keep-alive below the highest revision is checked again by an
// ordered read.
//
// What this cannot catch:
//   - A Backend created after the restore (a process started or restarted
//     then) never saw the revisions taken back, and a snapshot is a
//     consistent past state: nothing in it tells. A record the backend
//     kept under the prefix (the highest token granted, say) would be
//     restored with the snapshot, and tell nothing either, so none is kept.
//     Such a Backend is granted tokens that repeat ones already handed out.
//   - A Backend that sends no ordered request and no keep-alive between the
//     restore and the moment the restored cluster's revision passes the
//     highest it saw: a waiting Acquire's watch, which resumes at its next
//     revision, may then take events of the restored cluster for news.
//
// So restore with etcdutl snapshot restore --bump-revision N
// --mark-compacted, N larger than the revisions written since the snapshot
// (etcd's documentation suggests 1,000,000,000), with the same
// --initial-cluster and --initial-cluster-token, so that the cluster ID
// stays; revisions then go on above every token handed out, and the
// watches of running clients break (compacted) and read again. A Backend
// that refused stays refusing: restart its process (a new Backend) once
// the cluster is trusted. TestRestoreWithoutBumpRefused shows the refusal
// on a restore that replaces the server's data directory with a copy taken
// earlier; TestRestoreWithBumpAccepted restores the same copy with etcdutl
// as above, and the Backend goes on, its tokens above every one before.
//
// # Errors
//
// Errors are prefixed "simba/etcd: " and wrap the sentinel errors of package
// backend where its contract says so: [backend.ErrSessionDone] once a session
// is over (etcd's "lease not found" ends it), [backend.ErrNotHeld] from
// Release, [backend.ErrClosed] from Open after [Backend.Close] or once the
// client is closed, [ErrRestored] from every call once the cluster went
// back in time or was replaced (above). When Open's ctx ends while the client is not connected,
// the error says so, with the endpoints and the connection's state. Any other
// error is transient.
//
// # What etcd does that one might not expect
//
//   - Unsynced watches, above: a watch from a past or the current revision can
//     deliver an event up to 100ms late.
//   - Expiry granularity, above: leases are revoked up to 500ms late.
//   - TTLs are whole seconds, with a minimum; Grant raises a small TTL
//     without a word, so the granted TTL is the one to use.
//   - KeepAliveOnce opens a gRPC stream per call and retries an "unavailable"
//     answer at once, in a loop, until its ctx ends.
//   - A write whose caller gave up can still be applied (the epoch, above).
//   - One transaction cannot put and delete the same key.
//   - A keys-only range (etcd 3.7) leaves out the etcd lease a key is bound
//     to, not only its value.
//   - The client's Watch blocks until the server has created the watch, and
//     all watches of a client share one gRPC stream.
//   - clientv3.New does not wait for a connection, and a request made while
//     disconnected waits for one until its ctx ends (WaitForReady): an
//     unreachable cluster shows only as a deadline. gRPC's reconnect back-off
//     grows to two minutes by default; the client [New] creates caps it at 2s.
//   - An embedded server's shutdown waits up to five seconds for open watch
//     streams to end.
package etcd
