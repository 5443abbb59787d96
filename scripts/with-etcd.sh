#!/usr/bin/env bash
# Runs the command given (e.g. `make vet unit`) with an etcd binary for the
# tests, and exports its path as SIMBA_ETCD_BIN. It starts no server: each test
# starts its own, as a process (internal/etcdtest).
#
# - If SIMBA_ETCD_BIN is already set, the command runs with that binary. (The
#   simba command reads its etcd endpoints from $SIMBA_ETCD_BIN: a value that is
#   no executable file is refused, saying so.)
# - Otherwise the binary is built from the tools module tools/etcd (a Go
#   module of its own that requires go.etcd.io/etcd/server/v3, so that no
#   simba module does) with `go build go.etcd.io/etcd/server/v3`, and kept
#   outside the checkout, in ${XDG_CACHE_HOME:-$HOME/.cache}/simba/, under
#   a name holding etcd's version and a hash of tools/etcd/go.mod and
#   go.sum: a change of either builds a new one, and a cached one is used as
#   it is. The first build takes about a minute on 2 cores (and downloads
#   the modules); later ones reuse Go's build cache. Concurrent runs wait
#   for one another's build (flock). internal/etcdtest builds the same
#   binary at the same path when a test runs without SIMBA_ETCD_BIN.
# - When the binary cannot be had (no go, the build fails), it says why;
#   with SIMBA_REQUIRE_SERVERS=1 it fails, otherwise it runs the command
#   without it (the tests then try to build it themselves, and skip if
#   they cannot).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
with_init etcd "$@"

# no_binary explains why there is no binary, then fails or runs without.
no_binary() { run_without "$1" "an etcd binary: the tests that need one build it or skip"; }

if [[ -n "${SIMBA_ETCD_BIN:-}" ]]; then
	if [[ ! -f "$SIMBA_ETCD_BIN" || ! -x "$SIMBA_ETCD_BIN" ]]; then
		no_binary "SIMBA_ETCD_BIN=$SIMBA_ETCD_BIN is not an executable file (it names the etcd binary of the tests)"
	fi
	log "using the etcd at $SIMBA_ETCD_BIN"
	exec "$@"
fi

tools=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tools/etcd" && pwd)
version=$(tool_version "$tools" go.etcd.io/etcd/server/v3)
if [[ -z "$version" ]]; then
	no_binary "cannot build etcd: $tools/go.mod requires no go.etcd.io/etcd/server/v3"
fi
tool_binary etcd "$tools" go.etcd.io/etcd/server/v3 "$version" \
	"${XDG_CACHE_HOME:-$HOME/.cache}/simba" \
	"the first build takes about a minute on 2 cores; later ones reuse Go's build cache" ||
	no_binary "$tool_why"

export SIMBA_ETCD_BIN="$tool_bin"
log "etcd $version at $SIMBA_ETCD_BIN"
exec "${cmd[@]}"
