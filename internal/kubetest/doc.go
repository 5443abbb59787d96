// Package kubetest runs a real kube-apiserver for the tests of the
// Kubernetes backend, on an etcd server of its own, a process started by
// internal/etcdtest (which needs an etcd binary: SIMBA_ETCD, see
// scripts/with-etcd.sh). Only tests import it, and it imports no etcd
// package.
//
// The binary is the one named by SIMBA_KUBE_APISERVER ([EnvBinary]), which
// scripts/with-kube-apiserver.sh builds from the tools module tools/kube and
// caches (make test runs the tests through it). Without it [Start] skips the
// test, and fails it under SIMBA_REQUIRE_SERVERS=1 (as .ci/run sets).
//
// Each [Start] starts a server of the test's own: there is no server shared
// between tests, so a test may stop, restart and pause its server
// ([Server.Stop], [Server.Crash], [Server.Start], [Server.Pause],
// [Server.Resume]) without disturbing another, and [Server.Namespace] gives
// a test's parts namespaces of their own on it. A start takes a few seconds (3 to 6 s on a
// loaded 2-core machine) until /readyz answers, which waits for the
// apiserver's post-start hooks, such as the bootstrap of the RBAC roles.
//
// The server listens on 127.0.0.1 only, on a free port that it keeps across
// Stop and Start, and runs with
//
//   - --authorization-mode=Node,RBAC: a user may do only what a
//     RoleBinding or ClusterRoleBinding grants it, as on a production
//     cluster;
//   - a self-signed serving certificate that it generates in its --cert-dir
//     on the first start and keeps for the later ones: the configurations
//     of [Server.Admin] and [Server.User] trust it (there is no insecure
//     mode);
//   - --token-auth-file holding one token, the administrator's, in group
//     system:masters, which RBAC does not restrict ([Server.Admin]);
//   - --client-ca-file naming a certificate authority of the test's own,
//     which issues a client certificate to each user of [Server.User]
//     (its common name is the user's name, and it has no group). The
//     apiserver reads its token file once, when it starts, so a token added
//     later would count only after a restart, and tokens written before the
//     start would fix the users' names in advance; a certificate can be
//     issued for any name at any time, and authenticates its user at once;
//   - a service-account key pair of its own (--service-account-key-file,
//     --service-account-signing-key-file, --service-account-issuer), which
//     the apiserver requires;
//   - --endpoint-reconciler-type=none and a --service-cluster-ip-range,
//     with no controller manager, scheduler or kubelet: the API objects
//     are stored and served, and nothing acts on them. In particular a
//     deleted namespace stays Terminating (the namespace controller is
//     not there to empty it).
//
// [WithCoordinatedLeaderElection] adds the CoordinatedLeaderElection
// feature gate and the API it needs, for the tests of the Lease fields
// spec.strategy and spec.preferredHolder, which the server drops without
// it.
//
// [Server.StartPeer] starts a second kube-apiserver on the same etcd, with
// the same certificates and credentials, and [StartFront] puts one address
// in front of several, as a load balancer with health checks does: it
// moves to the next ready server when its target's /readyz fails (for the
// failover tests of two apiservers, one killed).
//
// [WatchLeases] follows the simba Lease objects of a namespace (a list, then
// a watch, listing again after a failure), and [Queue] and [SessionID] read
// them as backend/kubernetes writes them: what the fault tests and the chaos
// run use to see, from the server's side, when each holding began and
// ended.
//
// Its log is in a file in the test's temporary directory; the end of it is
// printed when the server fails to start and when the test fails.
package kubetest
