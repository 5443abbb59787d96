#!/usr/bin/env bash
# Runs the command given (e.g. `make vet unit`) with a kube-apiserver binary
# for the tests of the Kubernetes backend, and exports its path as
# SIMBA_KUBE_APISERVER. It starts no server: each test starts its own
# (internal/kubetest), on an etcd embedded in the test.
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
#   build cache. Concurrent runs wait for one another's build (flock).
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
GO=${GO:-go}
if ! command -v "$GO" >/dev/null; then
	no_binary "cannot build kube-apiserver: no $GO command"
fi
version=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit } $1 == "require" && $2 == "k8s.io/kubernetes" { print $3; exit }' "$tools/go.mod")
if [[ -z "$version" ]]; then
	no_binary "cannot build kube-apiserver: $tools/go.mod requires no k8s.io/kubernetes"
fi
key=$(cat "$tools/go.mod" "$tools/go.sum" | sha256sum | cut -c1-12)
cache=${SIMBA_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/simba}
bin="$cache/kube-apiserver-$version-$key"

# build builds the binary into bin, through a temporary file renamed into
# place, so that a build that fails or is interrupted leaves no binary.
build() {
	local tmp="$bin.tmp.$$" buildlog="$bin.build.log" start=$SECONDS
	# -X gives the binary its version (/version reports it, and the
	# apiserver's compatibility version follows it), as Kubernetes' own
	# build does.
	local major=${version#v} minor
	minor=${major#*.}
	minor=${minor%%.*}
	major=${major%%.*}
	local ldflags="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor"
	log "building kube-apiserver $version from tools/kube into $bin"
	log "(the first build takes about 10 to 15 minutes on 2 cores; later ones reuse Go's build cache; output in $buildlog)"
	if ! (cd "$tools" && "$GO" build -ldflags "$ldflags" -o "$tmp" k8s.io/kubernetes/cmd/kube-apiserver) >"$buildlog" 2>&1; then
		rm -f "$tmp"
		log "go build failed after $((SECONDS - start))s:"
		tail -n 30 "$buildlog" >&2 || true
		return 1
	fi
	if ! "$tmp" --version >>"$buildlog" 2>&1; then
		rm -f "$tmp"
		log "the kube-apiserver built does not run:"
		tail -n 10 "$buildlog" >&2 || true
		return 1
	fi
	mv -f "$tmp" "$bin"
	log "built kube-apiserver $version in $((SECONDS - start))s"
}

if [[ ! -x "$bin" ]]; then
	mkdir -p "$cache" || no_binary "cannot create the cache directory $cache"
	# One build at a time: a second run waits for the first's binary. The
	# lock is released before the command runs, with a binary or without.
	built=""
	why="could not build kube-apiserver $version"
	exec 9>"$cache/kube-apiserver.lock"
	if ! flock -n 9 && ! { log "another run is building kube-apiserver: waiting for it"; flock -w 3600 9; }; then
		why="waited an hour for another run's build of kube-apiserver ($cache/kube-apiserver.lock)"
	elif [[ -x "$bin" ]] || build; then
		built=1
	fi
	exec 9>&-
	[[ -n "$built" ]] || no_binary "$why"
fi

export SIMBA_KUBE_APISERVER="$bin"
log "kube-apiserver $version at $SIMBA_KUBE_APISERVER"
exec "${cmd[@]}"
