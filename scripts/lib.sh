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
