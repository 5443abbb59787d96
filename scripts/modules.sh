#!/usr/bin/env bash
# modules.sh: the Go modules of this repository (docs/ARCHITECTURE.md,
# "Modules") and what is done to all of them.
#
#   scripts/modules.sh list        the module directories, the root first
#   scripts/modules.sh paths       their module paths, in the same order
#   scripts/modules.sh tidy [DIR...]  go mod tidy in every module (or those)
#   scripts/modules.sh check       fails, saying which and why, when a module
#                                  is not tidy, when the go directives of
#                                  the modules and go.work differ, when the
#                                  modules require simba's modules at
#                                  different versions, when go.work does not
#                                  list exactly the modules, or when a go.mod
#                                  has a replace directive
#   scripts/modules.sh vet         go vet in every module (with and without -tags simba_plant),
#                                  all packages in one go vet
#   scripts/modules.sh work        writes go.work: every module, and a
#                                  replace of each at the version the
#                                  modules require by its own directory
#
# The modules require one another at one version and have no replace
# directives: a user's `go get` and `go install ...@version` read these
# go.mod files as they are. Development goes through the committed go.work,
# which puts every module's own directory in place of the version required.
# (go.work also replaces each module at that version by its directory:
# without it, commands that load the whole module graph, such as
# go list -m all, would try to download the unreleased version.)
# go mod tidy ignores go.work, so tidy and check run it on a copy of each
# go.mod (-modfile) to which a replace directive per module of the
# repository has been added, and copy the result back without them. (Those
# replaces make tidy drop the go.sum lines of simba's own modules; the lines
# at the versions required, which a release adds, are kept.)
#
# The tool modules under tools/ (the kube-apiserver and etcd the tests run)
# are not in go.work and are not checked here: each is built by its
# scripts/with-*.sh with GOWORK=off.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
mkdir -p build
GO=${GO:-go}

modules() {
	echo .
	find . -name go.mod -not -path './tools/*' -not -path './build/*' -not -path './.git/*' -not -path ./go.mod -printf '%h\n' | sed 's|^\./||' | sort
}

modpath() { awk '$1 == "module" { print $2; exit }' "$1/go.mod"; }

# with_replaces DIR TMP writes to TMP/go.mod a copy of DIR's go.mod with a
# replace directive for every other module of the repository, and DIR's
# go.sum to TMP/go.sum.
with_replaces() {
	local dir=$1 tmp=$2 m
	cp "$dir/go.mod" "$tmp/go.mod"
	if [[ -f "$dir/go.sum" ]]; then cp "$dir/go.sum" "$tmp/go.sum"; else : >"$tmp/go.sum"; fi
	local args=()
	for m in $(modules); do
		[[ "$m" == "$dir" ]] && continue
		args+=("-replace=$(modpath "$m")=$root/$m")
	done
	(cd "$dir" && GOWORK=off "$GO" mod edit -modfile="$tmp/go.mod" "${args[@]}")
}

# tidied DIR TMP writes to TMP/go.mod and TMP/go.sum what go mod tidy makes
# of DIR's go.mod and go.sum with the other modules replaced by their
# directories, without those replace directives, and with DIR's go.sum lines
# for simba's modules at the version it requires them at kept (those of the
# modules it requires and of the modules they require): tidy drops them, as
# a module replaced by a directory needs no checksum, but a release adds
# them (RELEASING.md) so that each tagged module builds on its own
# (GOWORK=off).
tidied() {
	local dir=$1 tmp=$2 m drop=()
	with_replaces "$dir" "$tmp"
	if ! (cd "$dir" && GOWORK=off "$GO" mod tidy -modfile="$tmp/go.mod") >"$tmp/log" 2>&1; then
		echo "modules: go mod tidy failed in $dir:" >&2
		sed 's/^/    /' "$tmp/log" >&2
		return 1
	fi
	for m in $(modules); do
		[[ "$m" == "$dir" ]] || drop+=("-dropreplace=$(modpath "$m")")
	done
	(cd "$dir" && GOWORK=off "$GO" mod edit -modfile="$tmp/go.mod" "${drop[@]}")
	[[ -f "$dir/go.sum" ]] || return 0
	# The lines to keep, then the merge: both files are in go's order
	# (by module path), so each kept line goes in before the first tidied
	# line of a greater path.
	GOWORK=off "$GO" mod edit -json "$tmp/go.mod" | awk -F'"' '
		$2 == "Path" { p = $4 }
		$2 == "Version" && p ~ /^github\.com\/simba-go\/simba(\/|$)/ { print p, $4 }' >"$tmp/required"
	awk 'NR == FNR { want[$2] = 1; next }
		$1 ~ /^github\.com\/simba-go\/simba(\/|$)/ { v = $2; sub(/\/go\.mod$/, "", v); if (v in want) print }' \
		"$tmp/required" "$dir/go.sum" >"$tmp/keep"
	[[ -s "$tmp/keep" ]] || return 0
	LC_ALL=C awk 'NR == FNR { keep[++n] = $0; path[n] = $1; next }
		{ while (i < n && path[i + 1] < $1) print keep[++i]; print }
		END { while (i < n) print keep[++i] }' "$tmp/keep" "$tmp/go.sum" >"$tmp/go.sum.merged"
	mv "$tmp/go.sum.merged" "$tmp/go.sum"
}

tidy() {
	local dir tmp dirs=("$@")
	[[ ${#dirs[@]} -gt 0 ]] || dirs=($(modules))
	for dir in "${dirs[@]}"; do
		dir=${dir%/}
		tmp=$(mktemp -d)
		if ! tidied "$dir" "$tmp"; then
			rm -rf "$tmp"
			return 1
		fi
		cp "$tmp/go.mod" "$dir/go.mod"
		if [[ -s "$tmp/go.sum" ]]; then cp "$tmp/go.sum" "$dir/go.sum"; else rm -f "$dir/go.sum"; fi
		rm -rf "$tmp"
	done
}

# version prints the one version at which the modules require simba's
# modules (the first found; check fails when they differ).
version() {
	local dir
	for dir in $(modules); do
		GOWORK=off "$GO" mod edit -json "$dir/go.mod" | awk -F'"' '
			$2 == "Path" { p = $4 }
			$2 == "Version" && p ~ /^github\.com\/simba-go\/simba(\/|$)/ { print $4 }'
	done | awk 'NR == 1'
}

# workfile prints the go.work the modules make.
workfile() {
	local v m d
	v=$(version)
	printf 'go %s\n\nuse (\n' "$(awk '$1 == "go" { print $2; exit }' go.mod)"
	for m in $(modules); do
		if [[ "$m" == . ]]; then d=.; else d=./$m; fi
		printf '\t%s\n' "$d"
	done
	printf ')\n\nreplace (\n'
	for m in $(modules); do
		if [[ "$m" == . ]]; then d=./; else d=./$m; fi
		printf '\t%s %s => %s\n' "$(modpath "$m")" "$v" "$d"
	done
	printf ')\n'
}

check() {
	local failed=0 dir tmp want got versions m
	want=$(awk '$1 == "go" { print $2; exit }' go.mod)
	for dir in $(modules); do
		got=$(awk '$1 == "go" { print $2; exit }' "$dir/go.mod")
		if [[ "$got" != "$want" ]]; then
			echo "modules: $dir/go.mod says go $got, the root's go.mod go $want: make them one" >&2
			failed=1
		fi
		if grep -qE '^[[:space:]]*replace([[:space:]]|\()' "$dir/go.mod"; then
			echo "modules: $dir/go.mod has a replace directive: a user's go get and go install would not see it; use go.work" >&2
			failed=1
		fi
		tmp=$(mktemp -d)
		mkdir "$tmp/tidy"
		if ! tidied "$dir" "$tmp/tidy"; then
			echo "modules: cannot tell whether $dir is tidy: go mod tidy failed there (above)" >&2
			failed=1
		else
			[[ -f "$tmp/tidy/go.sum" ]] || : >"$tmp/tidy/go.sum"
			local sum=/dev/null
			[[ ! -f "$dir/go.sum" ]] || sum=$dir/go.sum
			if ! { diff -u --label "$dir/go.mod" --label "tidy/go.mod" "$dir/go.mod" "$tmp/tidy/go.mod" &&
				diff -u --label "$dir/go.sum" --label "tidy/go.sum" "$sum" "$tmp/tidy/go.sum"; } >"$tmp/diff" 2>&1; then
				echo "modules: $dir is not tidy (scripts/modules.sh tidy $dir fixes it); tidy would change:" >&2
				sed 's/^/    /' "$tmp/diff" >&2
				failed=1
			fi
		fi
		rm -rf "$tmp"
	done
	got=$(awk '$1 == "go" { print $2; exit }' go.work)
	if [[ "$got" != "$want" ]]; then
		echo "modules: go.work says go $got, go.mod go $want: make them one" >&2
		failed=1
	fi
	if ! diff -u go.work <(workfile) >"$root/build/go.work.diff" 2>&1; then
		echo "modules: go.work is not what the modules make (scripts/modules.sh work writes it):" >&2
		sed 's/^/    /' "$root/build/go.work.diff" >&2
		failed=1
	fi
	rm -f "$root/build/go.work.diff"
	# One version of simba's modules, required by all.
	versions=$(for dir in $(modules); do
		GOWORK=off "$GO" mod edit -json "$dir/go.mod" | awk -F'"' -v d="$dir" '
			$2 == "Path" { p = $4 }
			$2 == "Version" && p ~ /^github\.com\/simba-go\/simba(\/|$)/ { print d ": " p " " $4 }'
	done)
	if [[ $(echo "$versions" | awk 'NF { print $3 }' | sort -u | wc -l) -gt 1 ]]; then
		echo "modules: the modules require simba's modules at different versions (scripts/release-check.sh --set VERSION sets one):" >&2
		echo "$versions" | sed 's/^/    /' >&2
		failed=1
	fi
	for m in $(modules); do
		(cd "$m" && "$GO" list -m >/dev/null) || { echo "modules: $m is not a module of the workspace" >&2; failed=1; }
	done
	return $failed
}

case ${1:-} in
list) modules ;;
paths) for m in $(modules); do modpath "$m"; done ;;
tidy) shift; tidy "$@" ;;
work)
	workfile >build/go.work.new
	mv build/go.work.new go.work
	;;
check) check ;;
vet)
	# One go vet over every module's packages (in the workspace, as
	# race-tests.sh lists them), twice: the packages load once, where a go
	# vet per module took 48 s against 6. Only when it fails, go vet runs
	# per module, to name the modules that fail.
	pkgs=()
	for m in $(modules); do
		list=$(cd "$m" && "$GO" list -e ./...) || {
			echo "modules: go list -e ./... failed in module $m ($(modpath "$m")): see above" >&2
			exit 1
		}
		pkgs+=($list)
	done
	if "$GO" vet "${pkgs[@]}" && "$GO" vet -tags simba_plant "${pkgs[@]}"; then
		exit 0
	fi
	echo "modules: go vet failed (see above); go vet per module, to name them:" >&2
	failed=()
	for m in $(modules); do
		# Both builds: the default one users get, and the tests' one with
		# the planted-bug switch (internal/plant, -tags simba_plant).
		(cd "$m" && "$GO" vet ./... && "$GO" vet -tags simba_plant ./...) || {
			echo "modules: go vet ./... (with and without -tags simba_plant) failed in module $m ($(modpath "$m")): see above" >&2
			failed+=("$m")
		}
	done
	if [[ ${#failed[@]} -gt 0 ]]; then
		echo "modules: go vet failed in: ${failed[*]}" >&2
		exit 1
	fi
	;;
*)
	echo "usage: $0 list|paths|tidy|check|vet|work" >&2
	exit 2
	;;
esac
