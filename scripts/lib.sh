# lib.sh: what the scripts scripts/with-*.sh share, sourced by each of them
# after `set -euo pipefail` (it is not run by itself). Each script runs the
# command given with a server for the tests, and says on standard error
# what it does, each line prefixed with the script's name.

# with_init NAME "$@" starts a with-NAME.sh script: it exits with the usage
# when no command is given, sets cmd to the command, and makes log prefix
# its lines with "with-NAME: ".
with_init() {
	with_name=$1
	shift
	if [[ $# -eq 0 ]]; then
		echo "usage: $0 command [args...]" >&2
		exit 2
	fi
	cmd=("$@")
}

log() { echo "with-$with_name: $*" >&2; }

# missing says why a server cannot be had ($1) and fails under
# SIMBA_REQUIRE_SERVERS=1.
missing() {
	log "$1"
	if [[ "${SIMBA_REQUIRE_SERVERS:-}" == "1" ]]; then
		log "SIMBA_REQUIRE_SERVERS=1: failing"
		exit 1
	fi
}

# run_without says why there is no server ($1) and fails under
# SIMBA_REQUIRE_SERVERS=1; otherwise it says what runs without which ($2)
# and runs the command in place of the script.
run_without() {
	missing "$1"
	log "running without $2"
	exec "${cmd[@]}"
}

# apt_install installs the Debian packages named with apt-get, with one
# retry after updating the package lists, and reports whether it succeeded.
apt_install() {
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q --no-install-recommends "$@" >&2; then
		log "apt-get install failed; updating the package lists and trying again"
		apt-get update -q >&2 || true
		apt-get install -y -q --no-install-recommends "$@" >&2 || return 1
	fi
}

# free_port prints a port on which nothing listens.
free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	return 1
}

# wait_ready PID TENTHS CHECK [ARGS...] waits until CHECK succeeds, trying
# every tenth of a second, at most TENTHS times; it fails when the process
# PID ends first or the tries run out.
wait_ready() {
	local pid=$1 tries=$2
	shift 2
	for _ in $(seq "$tries"); do
		if ! kill -0 "$pid" 2>/dev/null; then
			return 1
		fi
		if "$@"; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# stop_pid stops the process PID, a child of the script, if it runs: it
# asks it to end, waits up to 5s, then kills it.
stop_pid() {
	local pid=$1
	if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
}

# on_exit runs the function named at exit, also on failure or interrupt.
on_exit() {
	trap "$1" EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

# run_command runs the command and exits with its status (not with exec:
# the script's clean-up runs after it).
run_command() {
	local status=0
	"${cmd[@]}" || status=$?
	exit "$status"
}

# tool_version DIR MODULE prints the version of MODULE that the build-only
# tools module in DIR (tools/kube, tools/etcd) requires, or nothing.
tool_version() {
	awk -v m="$2" '$1 == m { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$1/go.mod"
}

# tool_binary NAME DIR PACKAGE VERSION CACHE ABOUT [GO BUILD FLAGS...] has
# the binary NAME, built from PACKAGE of the tools module in DIR (a module
# of its own, not in go.work: built with GOWORK=off), at
# CACHE/NAME-VERSION-HASH, HASH being 12 hex digits of the SHA-256 of DIR's
# go.mod and go.sum, so that a change of either builds a new one and a
# cached one is used as it is. It builds the binary when it is missing,
# through a temporary file renamed into place (a build that fails or is
# interrupted leaves no binary), and checks that `BINARY --version` runs;
# ABOUT says how long a build takes. Concurrent runs wait for one another's
# build (flock on CACHE/NAME.lock, for up to an hour), and the lock is
# released before it returns. It sets tool_bin to the binary's path and
# returns 0, or sets tool_why to the reason there is none and returns 1.
tool_binary() {
	local name=$1 dir=$2 pkg=$3 version=$4 cache=$5 about=$6
	shift 6
	local go=${GO:-go} key
	tool_bin="" tool_why=""
	if ! command -v "$go" >/dev/null; then
		tool_why="cannot build $name: no $go command"
		return 1
	fi
	key=$(cat "$dir/go.mod" "$dir/go.sum" | sha256sum | cut -c1-12)
	local bin="$cache/$name-$version-$key"
	if [[ -x "$bin" ]]; then
		tool_bin=$bin
		return 0
	fi
	if ! mkdir -p "$cache"; then
		tool_why="cannot create the cache directory $cache"
		return 1
	fi
	# One build at a time: a second run waits for the first's binary.
	local status=0
	exec 9>"$cache/$name.lock"
	if ! flock -n 9 && ! { log "another run is building $name: waiting for it"; flock -w 3600 9; }; then
		tool_why="waited an hour for another run's build of $name ($cache/$name.lock)"
		status=1
	elif [[ ! -x "$bin" ]] && ! tool_build "$name" "$dir" "$pkg" "$version" "$bin" "$about" "$@"; then
		tool_why="could not build $name $version"
		status=1
	fi
	exec 9>&-
	[[ $status -eq 0 ]] && tool_bin=$bin
	return $status
}

# tool_build NAME DIR PACKAGE VERSION BIN ABOUT [GO BUILD FLAGS...] builds
# BIN for tool_binary, saying what it does and, on failure, why.
tool_build() {
	local name=$1 dir=$2 pkg=$3 version=$4 bin=$5 about=$6
	shift 6
	local go=${GO:-go} tmp="$bin.tmp.$$" buildlog="$bin.build.log" start=$SECONDS
	log "building $name $version from $dir into $bin"
	log "($about; output in $buildlog)"
	if ! (cd "$dir" && GOWORK=off "$go" build "$@" -o "$tmp" "$pkg") >"$buildlog" 2>&1; then
		rm -f "$tmp"
		log "go build failed after $((SECONDS - start))s:"
		tail -n 30 "$buildlog" >&2 || true
		return 1
	fi
	if ! "$tmp" --version >>"$buildlog" 2>&1; then
		rm -f "$tmp"
		log "the $name built does not run:"
		tail -n 10 "$buildlog" >&2 || true
		return 1
	fi
	mv -f "$tmp" "$bin"
	log "built $name $version in $((SECONDS - start))s"
}
