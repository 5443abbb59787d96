// Package chaos holds the real-server fault run of simba (see
// docs/RELIABILITY.md): client processes, each a simba client with an
// election and a partition group, reach a 3-member etcd cluster, a
// ZooKeeper server or three-server ensemble, a PostgreSQL server, a
// MariaDB server (backend/mysql) or a kube-apiserver through
// fault-injecting proxies of their own and write
// with their terms' tokens to a fenced register, while a schedule drawn
// from a seed kills them (SIGKILL), pauses them (SIGSTOP/SIGCONT), cuts
// their links and restarts servers (PostgreSQL: pauses it with SIGSTOP,
// restarts it, and ends clients' connections with pg_terminate_backend;
// MariaDB: pauses it with SIGSTOP, stops it or crashes it and starts it
// again, and ends clients' connections with KILL CONNECTION; Kubernetes: pauses the apiserver with SIGSTOP, restarts it, crashes it
// with SIGKILL, and pauses the etcd under it). The invariant checkers of
// internal/check then run over what the clients and the register recorded.
//
// TestEtcdFailover plays etcd's own failovers at the moments they hurt:
// rounds that hand the election off while the raft leadership moves
// (MoveLeader), while the leader crashes or a follower stops, that move the
// leadership three times while the holder renews, or that lose the quorum
// for 1–2×TTL; the same checkers run over it, and a planted bug (the TTL
// overstated, the holder cut off while the leader moves) must be caught.
//
// Everything is in the package's tests:
//
//	go test -race -v ./internal/chaos/                            # 20s schedule per backend
//	go test -race -v ./internal/chaos/ -chaos.duration=5m         # the long run (make chaos)
//	go test -race -v ./internal/chaos/ -chaos.seed=SEED -run Etcd # replay a schedule
//	./scripts/with-postgres-redis.sh go test -race -v -run TestPostgres ./internal/chaos/
//	./scripts/with-mariadb.sh go test -race -v -run TestMySQL ./internal/chaos/
//	./scripts/with-kube-apiserver.sh go test -race -v -run TestKubernetes ./internal/chaos/
//
// The ZooKeeper run starts a server of its own when ZooKeeper is installed
// (so that it can restart it), or else uses the one named by SIMBA_ZK_ADDR
// without server restarts; without either it skips (fails under
// SIMBA_REQUIRE_SERVERS=1). The ZooKeeper ensemble run
// (TestZooKeeperEnsemble) starts a three-server ensemble of its own
// (zktest.StartEnsemble; it skips without an installed ZooKeeper), each
// client reaching every server through a proxy of its own: its restarts
// kill (SIGKILL) the leader or a follower, one server at a time, and start
// it again, while the clients' sessions move to the other servers; its
// grant watch syncs before each listing, since a follower may lag behind
// the leader. It plays a 15 s schedule and one control (overstated-ttl)
// only, to keep its cost small. The PostgreSQL run likewise starts a
// server of its own when PostgreSQL is installed (pgtest.StartServer), so
// that it can pause and restart it, or else uses the one named by SIMBA_PG_DSN
// (scripts/with-postgres-redis.sh sets it) with pg_terminate_backend as its
// only server fault; without either it skips (fails under
// SIMBA_REQUIRE_SERVERS=1). Each run has a schema of its own. The
// PostgreSQL failover run (TestPostgresFailover) starts a primary, a
// streaming standby (asynchronous in one subtest, synchronous in the
// other) and the VIP the clients and the grant watch reach the primary
// through (pgtest.StartPair; it skips without an installed PostgreSQL):
// its server faults are failovers, two in a 20 s schedule (an election
// handed off, in the asynchronous mode after the standby's replication was
// cut, then the primary crashed, every other time with the new holder's
// link, the standby promoted and the VIP moved to it, and a standby of the
// new primary made for the next one); with the asynchronous standby, the
// planted bugs keep-chain-on-failover and untimed-tokens must show as
// overlapping terms (I1) and tokens handed out twice (I2). The MariaDB run
// (TestMySQL) likewise starts a server of its own when MariaDB is
// installed (mytest.StartServer), which its server faults pause (SIGSTOP),
// stop (a clean shutdown and a crash, SIGKILL, in turn) and start again,
// or else uses the one named by SIMBA_MYSQL_DSN
// (scripts/with-mariadb.sh sets it), in a database of its own, with KILL
// CONNECTION as its only server fault; without either it skips (fails
// under SIMBA_REQUIRE_SERVERS=1). Each client connects as a MySQL user of
// its own (SELECT, INSERT, UPDATE and DELETE on the database), by which
// KILL CONNECTION finds one client's connections; each run has a table
// prefix of its own. Its grant watch reads the same queue of candidacies
// as PostgreSQL's, by polling alone (MySQL has no notifications). The
// Kubernetes run starts a kube-apiserver of its own (internal/kubetest, the
// binary named by SIMBA_KUBE_APISERVER, which
// scripts/with-kube-apiserver.sh sets), and skips without one (fails under
// SIMBA_REQUIRE_SERVERS=1); each run has a namespace of its own, in which
// the clients' user is bound to kubernetes.Role and nothing else.
package chaos
