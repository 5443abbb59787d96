// Package kubernetesbench holds, in its tests, the measurements of simba on
// the Kubernetes API (docs/bench-kubernetes.md): TestBenchmarkReport, simba
// side by side with client-go's leaderelection on a LeaseLock
// (tests/internal/kubepeers), on one kube-apiserver: the graceful
// hand-off, the fail-over and overlap when the holder crashes and when its
// link is cut, and the API requests per second at rest. It uses the
// backend's exported API only, and runs when asked to, from the tests
// module's directory:
//
//	cd tests && ../scripts/with-kube-apiserver.sh env SIMBA_KUBE_BENCH=1 \
//		go test -run '^TestBenchmarkReport$' -v -count=1 -timeout 60m ./bench/kubernetes/
//
// Without $SIMBA_KUBE_BENCH every test skips.
package kubernetesbench
