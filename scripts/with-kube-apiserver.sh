#!/usr/bin/env bash
# Runs the command given (e.g. `make vet unit`) with a kube-apiserver binary
# for the tests of the Kubernetes backend, and exports its path as
# SIMBA_KUBE_APISERVER. It starts no server: each test starts its own
# (internal/kubetest), on an etcd of its own (internal/etcdtest).
#
# - If SIMBA_KUBE_APISERVER is already set, the command runs with that binary.
# - Otherwise the binary is built from the tools module tools/kube (a Go
#   module of its own that requires k8s.io/kubernetes, so that simba's module
#   does not) with `go build k8s.io/kubernetes/cmd/kube-apiserver`, and kept
#   outside the checkout, in ${XDG_CACHE_HOME:-$HOME/.cache}/simba/ (or
#   $SIMBA_KUBE_CACHE), under a name holding the Kubernetes version and a
#   hash of tools/kube/go.mod and go.sum: a change of either builds a new
#   one, and a cached one is used as it is. The first build takes about 10 to
#   15 minutes on 2 cores (and downloads the modules); later ones reuse Go's
#   build cache. Concurrent runs wait for one another's build (flock). The
#   build and its cache are lib.sh's tool_binary, shared with with-etcd.sh.
# - When the binary cannot be had (no go, the build fails), it says why;
#   with SIMBA_REQUIRE_SERVERS=1 it fails, otherwise it runs the command
#   without it (the tests that need a kube-apiserver skip).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
with_init kube-apiserver "$@"

if [[ -n "${SIMBA_KUBE_APISERVER:-}" ]]; then
	log "using the kube-apiserver at $SIMBA_KUBE_APISERVER"
	exec "$@"
fi

# no_binary explains why there is no binary, then fails or runs without.
no_binary() { run_without "$1" "a kube-apiserver: the tests that need one skip"; }

tools=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tools/kube" && pwd)
version=$(tool_version "$tools" k8s.io/kubernetes)
if [[ -z "$version" ]]; then
	no_binary "cannot build kube-apiserver: $tools/go.mod requires no k8s.io/kubernetes"
fi
# -X gives the binary its version (/version reports it, and the apiserver's
# compatibility version follows it), as Kubernetes' own build does.
major=${version#v}
minor=${major#*.}
minor=${minor%%.*}
major=${major%%.*}
ldflags="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor"
tool_binary kube-apiserver "$tools" k8s.io/kubernetes/cmd/kube-apiserver "$version" \
	"${SIMBA_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/simba}" \
	"the first build takes about 10 to 15 minutes on 2 cores; later ones reuse Go's build cache" \
	-ldflags "$ldflags" || no_binary "$tool_why"

export SIMBA_KUBE_APISERVER="$tool_bin"
log "kube-apiserver $version at $SIMBA_KUBE_APISERVER"
exec "${cmd[@]}"
