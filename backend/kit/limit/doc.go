// Package limit bounds the requests a backend has in flight: a request
// takes a slot before it is sent, waiting for one within its caller's
// context, and frees it once answered. A request that ended while it
// waited was never sent, so it cannot have taken effect: its error wraps
// [ErrNotSent] (and the context's error), and the caller has nothing to
// undo.
//
// Why a bound: a client that starts ten thousand elections at once puts
// tens of thousands of requests in front of its own keep-alive, which the
// server (or the client's connection pool) answers in order; the session's
// deadline passes before the keep-alive is answered, every term ends, and
// the loop starts again. With a bound, the backlog a keep-alive finds in
// front of it is the bound, not the burst. Requests whose number does not
// grow with the leases held (keep-alives, group membership, the list of
// held leases) go around it.
//
// The etcd and ZooKeeper backends bound their requests with it.
//
// It is part of simba's kit for backend authors (backend/kit/...): code the
// backends share, importable by a backend of another module or of another
// repository. It follows the module's compatibility promise like the rest
// of its API.
package limit
