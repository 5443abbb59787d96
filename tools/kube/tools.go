//go:build tools

// Package tools pins the kube-apiserver that the tests of the Kubernetes
// backend run against (internal/kubetest). It is a module of its own so that
// the simba module does not depend on Kubernetes: only
// scripts/with-kube-apiserver.sh builds it, with
//
//	go build -o BINARY k8s.io/kubernetes/cmd/kube-apiserver
//
// run in this directory. k8s.io/kubernetes is not meant to be required as a
// module: its go.mod maps each of its staging modules (k8s.io/api,
// k8s.io/apimachinery, ...) to a directory of its repository
// (`=> ./staging/src/k8s.io/...`), and requires them at v0.0.0. The replace
// directives of go.mod map each of those to the module of the same name at
// the matching version, v0.37.2 for Kubernetes v1.37.2; to move to another
// release, change both versions and rebuild the list from that release's
// go.mod.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
