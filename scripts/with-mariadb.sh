#!/usr/bin/env bash
# Runs the command given (e.g. `make vet unit`) with a MariaDB server for
# the tests, and exports its DSN, in go-sql-driver/mysql's format, as
# SIMBA_MYSQL_DSN=simba:simba@tcp(127.0.0.1:<port>)/simba?parseTime=true.
#
# - If SIMBA_MYSQL_DSN is already set, the command runs against that server.
# - Otherwise Debian's mariadb-server and mariadb-client packages are
#   installed when missing (as root, with apt-get; the service is kept from
#   starting during the install with a temporary /usr/sbin/policy-rc.d when
#   there is none), and a throwaway server is started with its data in a
#   temporary directory: a datadir made by mariadb-install-db (no test
#   database, root without a password), run by mariadbd as the mysql user
#   when root (mariadbd refuses to run as root), listening on 127.0.0.1
#   only, on a free port, with --skip-name-resolve, its socket inside the
#   directory, a 32M buffer pool, 16M of redo log, no performance_schema,
#   up to 2000 connections (the packages' tests run at once, each backend
#   with a pool of up to 32), and no fsync at commit (innodb_flush_log_at_trx_commit=2: a commit
#   survives a crash of the server, not of the machine; the tests that
#   crash a server start one of their own, internal/mytest.StartServer).
#   The script waits until `mariadb-admin ping` answers, creates the user
#   simba (password simba, ALL PRIVILEGES on *.* WITH GRANT OPTION) and the
#   database simba, runs the command, then stops the server and removes
#   the directory, also on failure or interrupt.
# - Debian's faketime package (libfaketime) is installed when missing, for
#   the tests that step a server's clock (internal/mytest.WithFakeClock).
# - When no server can be had, it says why; with SIMBA_REQUIRE_SERVERS=1 it
#   fails, otherwise it runs the command without one (the tests that need
#   MariaDB skip).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
with_init mariadb "$@"

if [[ -n "${SIMBA_MYSQL_DSN:-}" ]]; then
	log "using the MariaDB server at $SIMBA_MYSQL_DSN"
	exec "$@"
fi

# no_server explains why there is no server, then fails or runs without.
no_server() { run_without "$1" "a MariaDB server: the tests that need one skip"; }

# mariadbd_bin prints the path of mariadbd: Debian puts it in /usr/sbin,
# which is not on every PATH.
mariadbd_bin() {
	if command -v mariadbd >/dev/null; then
		command -v mariadbd
	elif [[ -x /usr/sbin/mariadbd ]]; then
		echo /usr/sbin/mariadbd
	fi
}

installed() {
	[[ -n "$(mariadbd_bin)" ]] && command -v mariadb-install-db >/dev/null &&
		command -v mariadb-admin >/dev/null && command -v mariadb >/dev/null
}

if ! installed; then
	if [[ $(id -u) -ne 0 ]]; then
		no_server "MariaDB is not installed and this is not root: install Debian's packages (apt-get install mariadb-server mariadb-client) or set SIMBA_MYSQL_DSN to a server"
	fi
	if ! command -v apt-get >/dev/null; then
		no_server "MariaDB is not installed and apt-get is missing: install MariaDB or set SIMBA_MYSQL_DSN"
	fi
	log "installing Debian's mariadb-server and mariadb-client packages"
	policy=""
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		# The package would start its system-wide service: keep it from
		# it, as Docker images do.
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		policy=1
	fi
	status=0
	apt_install mariadb-server mariadb-client || status=1
	if [[ -n "$policy" ]]; then
		rm -f /usr/sbin/policy-rc.d
	fi
	[[ $status -eq 0 ]] || no_server "apt-get install mariadb-server mariadb-client failed"
	installed || no_server "the mariadb-server package is installed but mariadbd, mariadb-install-db, mariadb-admin or mariadb is missing"
fi
# libfaketime (Debian's faketime package) lets the clock-step tests step a
# server's clock (mytest.WithFakeClock); without it they fail under
# SIMBA_REQUIRE_SERVERS=1, saying so.
if [[ ! -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 && $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
	log "installing Debian's faketime package (libfaketime, for the clock-step tests)"
	apt_install faketime || log "apt-get install faketime failed: the clock-step tests will say so"
fi
if [[ $(id -u) -eq 0 ]] && ! id mysql >/dev/null 2>&1; then
	no_server "there is no mysql user to run MariaDB as (mariadbd refuses root)"
fi

# The server's own user: mysql when root, else oneself.
user_args=()
if [[ $(id -u) -eq 0 ]]; then
	user_args=(--user=mysql)
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/simba-mariadb.XXXXXX")
chmod 755 "$dir" # the mysql user reaches its data directory through it
mkdir "$dir/data" "$dir/run"
if [[ $(id -u) -eq 0 ]]; then
	chown mysql: "$dir/data" "$dir/run"
fi
sock="$dir/run/mariadbd.sock"
pid=""
cleanup() {
	if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
		# No clean shutdown needed: the data is thrown away.
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
on_exit cleanup

# no_server_here is no_server once the directory exists: it stops the
# server, if any, and runs the command without it, not in place of the
# script, so that the clean-up removes the directory.
no_server_here() {
	missing "$1"
	cleanup
	log "running without a MariaDB server: the tests that need one skip"
	run_command
}

# The settings of both the bootstrap and the server: small, fast, no fsync
# at commit.
settings=(--innodb-buffer-pool-size=32M --innodb-log-file-size=16M
	--innodb-flush-log-at-trx-commit=2 --skip-name-resolve)

if ! mariadb-install-db --no-defaults "${user_args[@]}" --datadir="$dir/data" \
	--skip-test-db --auth-root-authentication-method=normal "${settings[@]}" \
	>"$dir/install.log" 2>&1; then
	log "mariadb-install-db failed:"
	tail -n 20 "$dir/install.log" >&2 || true
	no_server_here "could not make a MariaDB datadir"
fi

# admin runs mariadb-admin as root on the server's socket.
admin() { mariadb-admin --no-defaults --socket="$sock" -u root --connect-timeout=2 "$@"; }

# pings reports whether the server answers on 127.0.0.1:$1 (mariadb-admin
# ping succeeds when a server answers, even one refusing the login).
pings() { mariadb-admin --no-defaults -h 127.0.0.1 -P "$1" -u root --connect-timeout=2 ping >/dev/null 2>&1; }

started=""
for attempt in 1 2 3; do
	port=$(free_port)
	"$(mariadbd_bin)" --no-defaults "${user_args[@]}" --datadir="$dir/data" \
		--port="$port" --bind-address=127.0.0.1 --socket="$sock" \
		--pid-file="$dir/run/mariadbd.pid" --performance-schema=OFF \
		--max-connections=2000 "${settings[@]}" >>"$dir/server.log" 2>&1 &
	pid=$!
	if wait_ready "$pid" 300 pings "$port"; then # 30s
		started=1
		break
	fi
	log "MariaDB did not start on port $port (attempt $attempt):"
	tail -n 20 "$dir/server.log" >&2 || true
	kill -9 "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=""
done
[[ -n "$started" ]] || no_server_here "could not start a MariaDB server"

if ! mariadb --no-defaults --socket="$sock" -u root -e "
	CREATE USER 'simba'@'%' IDENTIFIED BY 'simba';
	GRANT ALL PRIVILEGES ON *.* TO 'simba'@'%' WITH GRANT OPTION;
	CREATE DATABASE simba;" >&2; then
	no_server_here "could not create the user and the database simba"
fi

export SIMBA_MYSQL_DSN="simba:simba@tcp(127.0.0.1:$port)/simba?parseTime=true"
log "MariaDB $(admin version 2>/dev/null | awk '/^Server version/ { print $3; exit }') serving at 127.0.0.1:$port (pid $pid, $SIMBA_MYSQL_DSN)"
run_command
