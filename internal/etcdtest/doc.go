// Package etcdtest runs a real etcd server, as a process of its own, for the
// tests of backend/etcd and of anything built on it. It imports no etcd
// package (nor grpc, nor zap), so that the root module, which holds it,
// requires none: a test that needs a client makes one with the client its
// own module requires, from [Server.Endpoints], [Server.ClientTLS] and
// [Server.Root] (tests/internal/etcdclient does, for the tests module).
//
// # The binary
//
// The etcd binary is the one SIMBA_ETCD_BIN names; scripts/with-etcd.sh (which
// make test runs the tests through) builds it from the build-only module
// tools/etcd into ${XDG_CACHE_HOME:-$HOME/.cache}/simba and sets it. When
// SIMBA_ETCD_BIN is not set, as under a bare go test, etcdtest builds the same
// binary at the same path itself, once for every test package of a run (a
// lock file in the cache), from the checkout found above the working
// directory (the directory holding go.work and tools/etcd). When it cannot,
// the test is skipped, or failed under SIMBA_REQUIRE_SERVERS=1, saying why
// ([Unavailable]). [Server.RestoreSnapshot] runs etcdutl, which etcdtest
// builds the same way from tools/etcd (a few seconds once etcd's packages
// are in Go's build cache).
//
// # The server
//
// The server is a single member with the fast timings of etcd's own
// integration tests (--heartbeat-interval 10, --election-timeout 100, so it
// grants leases of at least one second), listening on free ports of
// 127.0.0.1, with its data and its log (etcd.log: what the process writes,
// its warnings and errors) in a directory of the caller's. When it fails to
// start, or exits while nobody stopped it, the error says so with the end
// of its log. It does not fsync unless [WithFsync] is given
// (--unsafe-no-fsync): on a shared test machine a stalled fsync holds up
// raft, and with it every lease renewal, for longer than a one-second TTL.
// Its data survive [Server.Stop] and [Server.Restart] either way, as Stop
// ends the process with SIGTERM, which etcd handles by shutting down
// cleanly. On Linux the process is killed if the test process dies without
// stopping it (a parent-death signal), so that it never outlives the test.
//
// Clients reach it through a small TCP proxy in front of it
// ([Server.Endpoints]), which keeps its address across [Server.Stop] and
// [Server.Restart] and resets client connections when the server stops, as
// a real server's exit would. Without that, etcd's shutdown waits up to five
// seconds for open watch streams to end. The proxy also stands in for a
// paused server ([Server.Pause], [Server.Resume]).
//
// [WithTLS] makes it serve its clients with TLS (the proxy passes TLS
// through), and [Server.EnableAuth] turns on etcd's authentication with a
// root user and users of the test's, each with a role on a key prefix,
// through etcd's JSON gateway (the /v3/auth/... endpoints).
package etcdtest
