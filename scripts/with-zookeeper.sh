#!/usr/bin/env bash
# Runs the command given (e.g. `make vet unit`) with a ZooKeeper server for
# the tests, and exports its address as SIMBA_ZK_ADDR=127.0.0.1:<port>.
#
# - If SIMBA_ZK_ADDR is already set, the command runs against that server.
# - Otherwise Debian's zookeeper package is installed when missing (as root,
#   with apt-get), and a standalone server is started on 127.0.0.1 on a free
#   port, with a temporary data directory and the configuration of
#   internal/zktest (tickTime=200, minSessionTimeout=400, no limit on
#   connections from one address, no admin server, empty containers deleted
#   every second).
#   The script waits until the four-letter command `srvr` reports `Mode:`
#   (`ruok` answers before the server serves), runs the command, then stops
#   the server and removes the directory, also on failure or interrupt.
# - When no server can be had, it says why; with SIMBA_REQUIRE_SERVERS=1 it
#   fails, otherwise it runs the command without one (tests needing
#   ZooKeeper skip).
set -euo pipefail

if [[ $# -eq 0 ]]; then
	echo "usage: $0 command [args...]" >&2
	exit 2
fi

cmd=("$@")
log() { echo "with-zookeeper: $*" >&2; }

if [[ -n "${SIMBA_ZK_ADDR:-}" ]]; then
	log "using the ZooKeeper server at $SIMBA_ZK_ADDR"
	exec "$@"
fi

# no_server explains why there is no server, then fails or runs without.
no_server() {
	log "$1"
	if [[ "${SIMBA_REQUIRE_SERVERS:-}" == "1" ]]; then
		log "SIMBA_REQUIRE_SERVERS=1: failing"
		exit 1
	fi
	log "running without a ZooKeeper server: the tests that need one skip"
	exec "${cmd[@]}"
}

classpath() {
	if [[ -n "${SIMBA_ZK_CLASSPATH:-}" ]]; then
		echo "$SIMBA_ZK_CLASSPATH"
	elif [[ -f /usr/share/java/zookeeper.jar ]]; then
		echo /usr/share/java/zookeeper.jar # its manifest names its dependencies
	fi
}

if [[ -z "$(classpath)" ]] || ! command -v java >/dev/null; then
	if [[ $(id -u) -ne 0 ]]; then
		no_server "ZooKeeper is not installed and this is not root: install Debian's package (apt-get install zookeeper) or set SIMBA_ZK_ADDR to a server"
	fi
	if ! command -v apt-get >/dev/null; then
		no_server "ZooKeeper is not installed and apt-get is missing: install ZooKeeper (and set SIMBA_ZK_CLASSPATH) or set SIMBA_ZK_ADDR"
	fi
	log "installing Debian's zookeeper package"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q --no-install-recommends zookeeper >&2; then
		log "apt-get install failed; updating the package lists and trying again"
		apt-get update -q >&2 || true
		apt-get install -y -q --no-install-recommends zookeeper >&2 ||
			no_server "apt-get install zookeeper failed"
	fi
	if [[ -z "$(classpath)" ]] || ! command -v java >/dev/null; then
		no_server "the zookeeper package is installed but /usr/share/java/zookeeper.jar or java is missing"
	fi
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/simba-zk.XXXXXX")
pid=""
cleanup() {
	if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# srvr sends the four-letter command srvr to 127.0.0.1:$1.
srvr() {
	timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/'"$1"' && printf srvr >&3 && cat <&3' 2>/dev/null || true
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

started=""
for attempt in 1 2 3; do
	port=$(free_port)
	cat >"$dir/zoo.cfg" <<CFG
tickTime=200
minSessionTimeout=400
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
CFG
	java -Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
		-Dzookeeper.admin.enableServer=false -Dznode.container.checkIntervalMs=1000 \
		-cp "$(classpath)" org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg" \
		>"$dir/server.log" 2>&1 &
	pid=$!
	for _ in $(seq 300); do # 30s
		if ! kill -0 "$pid" 2>/dev/null; then
			break
		fi
		if srvr "$port" | grep -q '^Mode:'; then
			started=1
			break
		fi
		sleep 0.1
	done
	[[ -n "$started" ]] && break
	log "the server did not start on port $port (attempt $attempt):"
	tail -n 20 "$dir/server.log" >&2 || true
	kill -9 "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=""
done
if [[ -z "$started" ]]; then
	no_server "could not start a ZooKeeper server"
fi

export SIMBA_ZK_ADDR="127.0.0.1:$port"
export SIMBA_ZK_CONTAINER_CHECK_MS=1000
log "ZooKeeper serving at $SIMBA_ZK_ADDR (pid $pid)"
status=0
"${cmd[@]}" || status=$?
exit "$status"
