#!/bin/sh
# child.sh LOG [MODE [ARG]]: the command that simba run runs in the
# end-to-end tests (cmd/simba/run_e2e_test.go). It appends lines of
# key=value fields to LOG, one write each (O_APPEND), and never reads
# anything but LOG and /proc.
#
#   start lease= token= pid= member= at= group= partition= param= source= attempt= args=
#       at its start (at: nanoseconds since the epoch, `date +%s%N`;
#       source and attempt: SIMBA_RUN_SOURCE and SIMBA_ATTEMPT; args: the
#       SIMBA_ARG_<KEY>=VALUE variables, sorted, each ended by a comma)
#   OVERLAP lease= pid= alive= state= at=
#       when an earlier child of the same lease is still alive at its start
#       (a zombie or a missing /proc entry counts as gone)
#   grandchild pid= child= at=
#       a background `sleep 1000` it started (modes hold and ignore-term)
#
# Modes:
#   hold          start a background grandchild and wait for it (the default)
#   ignore-term   the same, with SIGTERM ignored (inherited by the grandchild)
#   exit N        exit with status N at once
#   overrun-once  sleep 1s in the first run of the lease, exit 0 at once after
#   hold-once N   hold in the first run of the lease, exit N at once after
#   fail-once N   exit N in the first run of the lease, 0 in the later ones
#   tick N        write a line to standard output every 200ms, N times, then
#                 exit 0 (hold writes nothing)
log=$1
mode=${2:-hold}
arg=${3:-0}
now() { date +%s%N; }
[ "$mode" = ignore-term ] && trap '' TERM
echo "start lease=$SIMBA_ELECTION token=$SIMBA_TOKEN pid=$$ member=$SIMBA_MEMBER at=$(now) group=${SIMBA_GROUP-} partition=${SIMBA_PARTITION-} param=${SIMBA_PARTITION_PARAM-} source=${SIMBA_RUN_SOURCE-} attempt=${SIMBA_ATTEMPT-} args=$(env | grep '^SIMBA_ARG_' | sort | tr '\n' ,)" >>"$log"

# The OVERLAP probe, after this child's own start line: of two children
# that start at once, the later to write its line sees the other's.
for pid in $(grep -F "start lease=$SIMBA_ELECTION " "$log" | sed 's/.* pid=\([0-9]*\) .*/\1/'); do
	[ "$pid" = "$$" ] && continue
	state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1)
	case $state in
	'' | Z | X) ;;
	*)
		# A reused pid is some other program: only a child.sh counts.
		if grep -aq child.sh "/proc/$pid/cmdline" 2>/dev/null; then
			echo "OVERLAP lease=$SIMBA_ELECTION pid=$$ alive=$pid state=$state at=$(now)" >>"$log"
		fi
		;;
	esac
done

hold() {
	sleep 1000 &
	echo "grandchild pid=$! child=$$ at=$(now)" >>"$log"
	wait
}

# first is true in the first run of the lease (a marker file beside LOG).
first() {
	marker="$log.$SIMBA_ELECTION.ran"
	[ -e "$marker" ] && return 1
	: >"$marker"
}

case $mode in
hold | ignore-term) hold ;;
exit) exit "$arg" ;;
overrun-once) first && sleep 1 ;;
hold-once) first && hold ;;
fail-once) first && exit "$arg"; exit 0 ;;
tick)
	i=0
	while [ "$i" -lt "$arg" ]; do
		echo "tick $i"
		sleep 0.2
		i=$((i + 1))
	done
	exit 0
	;;
*)
	echo "child.sh: unknown mode $mode" >&2
	exit 64
	;;
esac
exit "$arg"
