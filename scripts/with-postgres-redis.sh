#!/usr/bin/env bash
# Runs the command given (e.g. `make vet unit`) with a PostgreSQL server and a
# Redis server for the tests of package fence, and exports their addresses as
# SIMBA_PG_DSN=postgres://postgres@127.0.0.1:<port>/postgres?sslmode=disable
# and SIMBA_REDIS_ADDR=127.0.0.1:<port>.
#
# - A variable that is already set is kept, and that server is not started.
# - Otherwise Debian's postgresql and redis-server packages are installed when
#   missing (as root, with apt-get; services are kept from starting during the
#   install with a temporary /usr/sbin/policy-rc.d when there is none), and
#   throwaway servers are started on 127.0.0.1 on free ports, with their data
#   in one temporary directory:
#   - PostgreSQL: a cluster made by initdb (trust authentication, no fsync),
#     run as the postgres user (the server refuses to run as root), listening
#     on TCP only; the script waits until pg_isready answers.
#   - Redis: no persistence (no RDB snapshots, no AOF); the script waits until
#     it answers PING with PONG.
#   It runs the command, then stops both servers and removes the directory,
#   also on failure or interrupt.
# - With the PostgreSQL server, Debian's pgbouncer package is installed when
#   missing: the tests of a pooler in transaction mode (pgtest.StartPooler)
#   start a PgBouncer of their own in front of the server.
# - When a server cannot be had, it says why; with SIMBA_REQUIRE_SERVERS=1 it
#   fails, otherwise it runs the command without that server (the tests that
#   need it skip).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
with_init postgres-redis "$@"

want_pg=1
want_redis=1
if [[ -n "${SIMBA_PG_DSN:-}" ]]; then
	log "using the PostgreSQL server at $SIMBA_PG_DSN"
	want_pg=""
fi
if [[ -n "${SIMBA_REDIS_ADDR:-}" ]]; then
	log "using the Redis server at $SIMBA_REDIS_ADDR"
	want_redis=""
fi
if [[ -z "$want_pg$want_redis" ]]; then
	exec "$@"
fi

# pg_bindir prints the directory of initdb, pg_ctl and postgres: Debian keeps
# them in /usr/lib/postgresql/<version>/bin, off the PATH.
pg_bindir() {
	local d
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
	if [[ -n "$d" && -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/postgres" ]]; then
		echo "$d"
	elif command -v initdb >/dev/null && command -v pg_ctl >/dev/null && command -v postgres >/dev/null; then
		dirname "$(command -v pg_ctl)"
	fi
}

have_redis() { command -v redis-server >/dev/null; }

# have_pgbouncer reports whether PgBouncer is installed (Debian puts it in
# /usr/sbin, which is not on every PATH).
have_pgbouncer() { command -v pgbouncer >/dev/null || [[ -x /usr/sbin/pgbouncer ]]; }

# install installs the Debian packages named, with one retry after updating
# the package lists, and reports whether it succeeded.
install() {
	if [[ $(id -u) -ne 0 ]]; then
		log "not root: cannot install $*"
		return 1
	fi
	if ! command -v apt-get >/dev/null; then
		log "apt-get is missing: cannot install $*"
		return 1
	fi
	log "installing Debian's $* package(s)"
	local policy="" status=0
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		# The packages would start their system-wide services: keep them
		# from it, as Docker images do.
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		policy=1
	fi
	apt_install "$@" || status=1
	if [[ -n "$policy" ]]; then
		rm -f /usr/sbin/policy-rc.d
	fi
	return "$status"
}

packages=()
if [[ -n "$want_pg" && -z "$(pg_bindir)" ]]; then
	packages+=(postgresql)
fi
if [[ -n "$want_pg" ]] && ! have_pgbouncer; then
	packages+=(pgbouncer)
fi
if [[ -n "$want_redis" ]] && ! have_redis; then
	packages+=(redis-server)
fi
if [[ ${#packages[@]} -gt 0 ]]; then
	install "${packages[@]}" || log "could not install ${packages[*]}"
fi
if [[ -n "$want_pg" && -z "$(pg_bindir)" ]]; then
	missing "PostgreSQL is not installed: install Debian's postgresql package or set SIMBA_PG_DSN"
	want_pg=""
fi
if [[ -n "$want_pg" ]] && ! have_pgbouncer; then
	missing "PgBouncer is not installed: install Debian's pgbouncer package (the tests of a pooler in transaction mode skip without it)"
fi
if [[ -n "$want_redis" ]] && ! have_redis; then
	missing "Redis is not installed: install Debian's redis-server package or set SIMBA_REDIS_ADDR"
	want_redis=""
fi

# as_pg runs a command as the postgres user when root, else as oneself.
as_pg() {
	if [[ $(id -u) -eq 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}
if [[ -n "$want_pg" && $(id -u) -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
	missing "there is no postgres user to run PostgreSQL as (root cannot)"
	want_pg=""
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/simba-pg-redis.XXXXXX")
chmod 755 "$dir" # the postgres user reaches its data directory through it
pgbin=""
pgdata="$dir/pg"
redis_pid=""
cleanup() {
	stop_pid "$redis_pid"
	if [[ -n "$pgbin" && -f "$pgdata/postmaster.pid" ]]; then
		local pid
		pid=$(head -n 1 "$pgdata/postmaster.pid" 2>/dev/null || true)
		as_pg "$pgbin/pg_ctl" stop -D "$pgdata" -m immediate -w -t 10 >/dev/null 2>&1 || true
		if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
			kill -9 "$pid" 2>/dev/null || true
		fi
	fi
	rm -rf "$dir"
}
on_exit cleanup

# start_pg makes a cluster and starts it; it sets pg_port.
start_pg() {
	pgbin=$(pg_bindir)
	mkdir "$pgdata"
	if [[ $(id -u) -eq 0 ]]; then
		chown postgres: "$pgdata"
	fi
	if ! as_pg "$pgbin/initdb" -D "$pgdata" -U postgres -A trust -E UTF8 --locale=C --no-sync \
		>"$dir/initdb.log" 2>&1; then
		log "initdb failed:"
		tail -n 20 "$dir/initdb.log" >&2 || true
		return 1
	fi
	for attempt in 1 2 3; do
		pg_port=$(free_port)
		# -w waits until the server accepts connections (or gives up after
		# -t seconds); the log goes to a file inside the data directory.
		if as_pg "$pgbin/pg_ctl" start -D "$pgdata" -w -t 30 -l "$pgdata/server.log" \
			-o "-c listen_addresses=127.0.0.1 -p $pg_port -c unix_socket_directories='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
			>/dev/null 2>&1; then
			for _ in $(seq 100); do # 10s
				if pg_answers; then
					return 0
				fi
				sleep 0.1
			done
		fi
		log "PostgreSQL did not start on port $pg_port (attempt $attempt):"
		tail -n 20 "$pgdata/server.log" >&2 || true
		as_pg "$pgbin/pg_ctl" stop -D "$pgdata" -m immediate -w -t 10 >/dev/null 2>&1 || true
	done
	return 1
}

# pg_answers reports whether the server on pg_port accepts connections.
pg_answers() {
	if [[ -x "$pgbin/pg_isready" ]]; then
		"$pgbin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -t 2
	else
		(exec 3<>"/dev/tcp/127.0.0.1/$pg_port") 2>/dev/null
	fi
}

# ping sends PING to the Redis server on 127.0.0.1:$1.
ping() {
	timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/'"$1"' && printf "PING\r\n" >&3 && head -c 5 <&3' 2>/dev/null || true
}

# pongs reports whether the Redis server on 127.0.0.1:$1 answers PING.
pongs() { [[ "$(ping "$1")" == "+PONG" ]]; }

# start_redis starts redis-server; it sets redis_port and redis_pid.
start_redis() {
	mkdir "$dir/redis"
	for attempt in 1 2 3; do
		redis_port=$(free_port)
		redis-server --bind 127.0.0.1 --port "$redis_port" --protected-mode no \
			--save '' --appendonly no --dir "$dir/redis" --daemonize no \
			--logfile "$dir/redis/server.log" &
		redis_pid=$!
		if wait_ready "$redis_pid" 100 pongs "$redis_port"; then # 10s
			return 0
		fi
		log "Redis did not start on port $redis_port (attempt $attempt):"
		tail -n 20 "$dir/redis/server.log" >&2 || true
		kill -9 "$redis_pid" 2>/dev/null || true
		wait "$redis_pid" 2>/dev/null || true
		redis_pid=""
	done
	return 1
}

if [[ -n "$want_pg" ]]; then
	if start_pg; then
		export SIMBA_PG_DSN="postgres://postgres@127.0.0.1:$pg_port/postgres?sslmode=disable"
		log "PostgreSQL serving at 127.0.0.1:$pg_port ($SIMBA_PG_DSN)"
	else
		missing "could not start a PostgreSQL server"
	fi
fi
if [[ -n "$want_redis" ]]; then
	if start_redis; then
		export SIMBA_REDIS_ADDR="127.0.0.1:$redis_port"
		log "Redis serving at $SIMBA_REDIS_ADDR (pid $redis_pid)"
	else
		missing "could not start a Redis server"
	fi
fi
without=()
[[ -n "${SIMBA_PG_DSN:-}" ]] || without+=(PostgreSQL)
[[ -n "${SIMBA_REDIS_ADDR:-}" ]] || without+=(Redis)
if [[ ${#without[@]} -gt 0 ]]; then
	log "running without ${without[*]// / or }: the tests that need one skip"
fi
run_command
