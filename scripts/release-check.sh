#!/usr/bin/env bash
# release-check.sh: checks that the modules of this repository can be
# released together at VERSION (RELEASING.md), and prints their tags in the
# order they are to be pushed.
#
#   scripts/release-check.sh VERSION        check, change nothing
#   scripts/release-check.sh --set VERSION  first require every simba module
#                                           at VERSION in every go.mod (go mod
#                                           edit -require) and rewrite go.work
#                                           (scripts/modules.sh work), then check
#
# It fails, saying which and why, when a go.mod requires one of simba's
# modules at a version other than VERSION (or requires a simba module path
# that is not a module here), when the go directives differ, when a go.mod
# has a replace directive, when go.work replaces at another version, when
# the modules require one another in a cycle (no order to tag them in), or
# when a tag already made disagrees: its go.mod requires another version,
# or it was made before the tag of a module it requires (or without it).
#
# The order: a module is tagged after every simba module it requires (so
# that `go mod tidy` can fetch the versions it names), by levels of the
# require graph; within a level, in the order of scripts/modules.sh list.
# The root module's tag is VERSION, a nested module's is DIR/VERSION (Go's
# rule for a module in a subdirectory).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO=${GO:-go}
export GOWORK=off

usage() {
	echo "usage: $0 [--set] VERSION   (VERSION as v1.2.3, v0.4.0-rc.1, ...)" >&2
	exit 2
}
set=""
if [[ "${1:-}" == --set ]]; then
	set=1
	shift
fi
[[ $# -eq 1 ]] || usage
version=$1
if ! [[ "$version" =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$ ]]; then
	echo "release-check: $version is not a semantic version vMAJOR.MINOR.PATCH[-PRERELEASE]" >&2
	usage
fi
if ((BASH_REMATCH[1] >= 2)); then
	echo "release-check: $version: a major version of 2 or more needs a /v${BASH_REMATCH[1]} suffix in every module path (and its imports) first" >&2
	exit 1
fi

mapfile -t dirs < <(./scripts/modules.sh list)
declare -A dir_of path_of
for d in "${dirs[@]}"; do
	p=$(awk '$1 == "module" { print $2; exit }' "$d/go.mod")
	path_of[$d]=$p
	dir_of[$p]=$d
done

# requires FILE prints "PATH VERSION" for each simba module FILE requires.
requires() {
	"$GO" mod edit -json "$1" | awk -F'"' '
		/^\t"Require": \[/ { in_req = 1; next }
		in_req && /^\t\]/ { in_req = 0 }
		in_req && $2 == "Path" { p = $4 }
		in_req && $2 == "Version" && p ~ /^github\.com\/simba-go\/simba(\/|$)/ { print p, $4 }'
}

# tagname DIR prints the tag of the module in DIR at $version.
tagname() { if [[ "$1" == . ]]; then echo "$version"; else echo "$1/$version"; fi; }

if [[ -n "$set" ]]; then
	for d in "${dirs[@]}"; do
		args=()
		while read -r p v; do
			args+=("-require=$p@$version")
		done < <(requires "$d/go.mod")
		if [[ ${#args[@]} -gt 0 ]] && ! (cd "$d" && "$GO" mod edit "${args[@]}"); then
			echo "release-check: go mod edit -require failed in $d" >&2
			exit 1
		fi
	done
	if ! ./scripts/modules.sh work; then
		echo "release-check: scripts/modules.sh work failed: go.work not rewritten" >&2
		exit 1
	fi
	echo "release-check: every go.mod now requires simba's modules at $version, and go.work replaces them at it" >&2
fi

failed=0
fail() {
	echo "release-check: $*" >&2
	failed=1
}

# The go.mod files: versions, go directives, replace directives.
declare -A deps
want_go=$(awk '$1 == "go" { print $2; exit }' go.mod)
for d in "${dirs[@]}"; do
	deps[$d]=""
	while read -r p v; do
		if [[ -z "${dir_of[$p]:-}" ]]; then
			fail "$d/go.mod requires $p, which is not a module of this repository (scripts/modules.sh list)"
			continue
		fi
		[[ "$v" == "$version" ]] || fail "$d/go.mod requires $p at $v, not $version (--set $version sets it)"
		deps[$d]+=" ${dir_of[$p]}"
	done < <(requires "$d/go.mod")
	got=$(awk '$1 == "go" { print $2; exit }' "$d/go.mod")
	[[ "$got" == "$want_go" ]] || fail "$d/go.mod says go $got, the root's go.mod go $want_go"
	if grep -qE '^[[:space:]]*replace([[:space:]]|\()' "$d/go.mod"; then
		fail "$d/go.mod has a replace directive: a user's go get and go install ...@$version would not see it (go.work is for development)"
	fi
done
while read -r p v; do
	[[ "$v" == "$version" ]] || fail "go.work replaces $p at $v, not $version (scripts/modules.sh work rewrites it)"
done < <(awk '$1 ~ /^github\.com\/simba-go\/simba(\/|$)/ && $3 == "=>" { print $1, $2 }' go.work)

# The order: levels of the require graph.
order=()
declare -A placed level
left=("${dirs[@]}")
lvl=0
while [[ ${#left[@]} -gt 0 ]]; do
	now=() rest=()
	for d in "${left[@]}"; do
		ready=1
		for r in ${deps[$d]}; do
			[[ -n "${placed[$r]:-}" ]] || ready=""
		done
		if [[ -n "$ready" ]]; then now+=("$d"); else rest+=("$d"); fi
	done
	if [[ ${#now[@]} -eq 0 ]]; then
		# Every module left requires another one left: follow the
		# first such requirement from the first until a module repeats.
		path=("${rest[0]}") d=${rest[0]}
		declare -A seen=([$d]=1)
		while :; do
			for r in ${deps[$d]}; do [[ -n "${placed[$r]:-}" ]] || break; done
			path+=("$r")
			[[ -z "${seen[$r]:-}" ]] || break
			seen[$r]=1
			d=$r
		done
		cycle=$(printf '%s\n' "${path[@]}" | awk -v r="$r" '$0 == r { on = 1 } on { printf "%s%s", sep, $0; sep = " -> " }')
		fail "the modules require one another in a cycle, $cycle: there is no order to tag them in (a library module must not require the tests or a module requiring it)"
		fail "left without a place in the order: ${rest[*]}"
		break
	fi
	for d in "${now[@]}"; do
		placed[$d]=1
		level[$d]=$lvl
		order+=("$d")
	done
	left=("${rest[@]}")
	lvl=$((lvl + 1))
done

# The tags, in order: made already (and agreeing) or to make.
echo "tags for $version, in the order to push them (level: a module's requirements are all at lower levels):"
if [[ "$version" == v0.0.0-00010101000000-000000000000 ]]; then
	echo "(this is the development version the modules require between releases: it is never tagged)"
fi
declare -A tagged
i=0
for d in "${order[@]}"; do
	i=$((i + 1))
	tag=$(tagname "$d")
	commit=$(git rev-parse -q --verify "refs/tags/$tag^{commit}" 2>/dev/null) || commit=""
	if [[ -z "$commit" ]]; then
		state="to create"
	else
		tagged[$d]=$commit
		state="exists at ${commit:0:12}"
		tmp=$(mktemp -d)
		if ! git show "$tag:$d/go.mod" >"$tmp/go.mod" 2>/dev/null; then
			fail "tag $tag has no $d/go.mod: it is not a tag of module ${path_of[$d]}"
		else
			while read -r p v; do
				[[ "$v" == "$version" ]] || fail "tag $tag: its $d/go.mod requires $p at $v, not $version"
			done < <(requires "$tmp/go.mod")
		fi
		rm -rf "$tmp"
		for r in ${deps[$d]}; do
			rt=$(tagname "$r")
			rc=$(git rev-parse -q --verify "refs/tags/$rt^{commit}" 2>/dev/null) || rc=""
			if [[ -z "$rc" ]]; then
				fail "tag $tag exists but $rt, of the module $r it requires, does not: tagged out of order"
			elif ! git merge-base --is-ancestor "$rc" "$commit"; then
				fail "tag $tag (${commit:0:12}) is not at or after $rt (${rc:0:12}), of the module $r it requires: tagged out of order"
			fi
		done
	fi
	printf '%3d. level %d  %-50s %s\n' "$i" "${level[$d]}" "$tag" "$state"
done

if [[ $failed -ne 0 ]]; then
	echo "release-check: $version: not ready (see above)" >&2
	exit 1
fi
echo "release-check: $version: every go.mod requires simba's modules at it, one go directive ($want_go), no replace directive, an order to tag in"
