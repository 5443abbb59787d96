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
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
with_init zookeeper "$@"

if [[ -n "${SIMBA_ZK_ADDR:-}" ]]; then
	log "using the ZooKeeper server at $SIMBA_ZK_ADDR"
	exec "$@"
fi

# no_server explains why there is no server, then fails or runs without.
no_server() { run_without "$1" "a ZooKeeper server: the tests that need one skip"; }

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
	apt_install zookeeper || no_server "apt-get install zookeeper failed"
	if [[ -z "$(classpath)" ]] || ! command -v java >/dev/null; then
		no_server "the zookeeper package is installed but /usr/share/java/zookeeper.jar or java is missing"
	fi
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/simba-zk.XXXXXX")
pid=""
cleanup() {
	stop_pid "$pid"
	rm -rf "$dir"
}
on_exit cleanup

# srvr sends the four-letter command srvr to 127.0.0.1:$1.
srvr() {
	timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/'"$1"' && printf srvr >&3 && cat <&3' 2>/dev/null || true
}

# serving reports whether the server on 127.0.0.1:$1 serves: srvr reports
# its mode.
serving() { srvr "$1" | grep -q '^Mode:'; }

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
	if wait_ready "$pid" 300 serving "$port"; then # 30s
		started=1
		break
	fi
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
run_command
