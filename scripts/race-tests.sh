#!/usr/bin/env bash
# race-tests.sh: go test -race ./... (extra arguments are passed on), with one
# exception to "a failure fails the run": a package whose only failure is the
# runtime crashing under the race detector ("ThreadSanitizer: CHECK failed",
# or a bare fatal "SIGSEGV: segmentation violation" with its PC outside Go
# code, which is how a fault in the race runtime shows; a nil dereference
# in Go code is a "panic: runtime error" instead), an open Go bug with
# testing/synctest (golang/go#78156), is run once more, and the run says
# so. Any other failure, or the same crash twice, fails the run.
set -uo pipefail
GO=${GO:-go}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# Three packages at a time on 2 cores: most tests wait on real time (TTLs,
# servers), and two at a time (go test's default here) kept the machine
# about half busy (11m40s); four (8m36s–9m34s) loaded it enough to weaken
# the Kubernetes chaos controls.
"$GO" test -race -p 3 "$@" ./... 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] && exit 0

# go test prints each package's output as one block ending with its
# "ok", "FAIL" or "?" line: sort the failed packages by what their block
# holds.
retry=() other=()
while IFS=$'\t' read -r pkg kind; do
	case $kind in
	tsan) retry+=("$pkg") ;;
	*) other+=("$pkg") ;;
	esac
done < <(awk '
	/^(ok|FAIL|\?)[ \t]+[^ \t]+([ \t]|$)/ {
		if ($1 == "FAIL") print $2 "\t" ((tsan && !failed) ? "tsan" : "test")
		tsan = 0; failed = 0; next
	}
	/ThreadSanitizer: CHECK failed/ || /^SIGSEGV: segmentation violation$/ { tsan = 1 }
	/^(--- FAIL|panic:|FAIL$)/ && !/ThreadSanitizer/ { if ($0 != "FAIL") failed = 1 }
' "$log")

if [ ${#other[@]} -gt 0 ] || [ ${#retry[@]} -eq 0 ]; then
	echo "race-tests: failed: ${other[*]:-see above (go test exited $status)}" >&2
	exit "$status"
fi
echo "race-tests: the race detector's runtime crashed in ${retry[*]} (ThreadSanitizer CHECK failed or SIGSEGV outside Go code, golang/go#78156, not a failure of a test): running it once more" >&2
exec "$GO" test -race -count=1 "$@" "${retry[@]}"
