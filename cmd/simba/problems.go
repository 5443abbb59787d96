package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/simba-go/simba/admin"
)

// Records the backend keeps that cannot be used (a status that is not
// JSON, a key that names nothing) do not make a command fail: admin skips
// them and reports them as problems. The command shows what it could read,
// warns of each record skipped on standard error, lists them in the
// "problems" field of the JSON objects it prints, and a command that shows
// (status, elections, groups, jobs, history, audit) exits with exitProblems.

// maxWarnings bounds the warnings printed, one line per record skipped.
const maxWarnings = 20

// addProblems adds problems to those of the invocation, once each.
func (inv *invocation) addProblems(problems []admin.Problem) {
	for _, p := range problems {
		if inv.seen == nil {
			inv.seen = map[admin.Problem]bool{}
		}
		if !inv.seen[p] {
			inv.seen[p] = true
			inv.problems = append(inv.problems, p)
		}
	}
}

// problemList returns the invocation's problems sorted by key, never nil:
// the "problems" field of the JSON output.
func (inv *invocation) problemList() []admin.Problem {
	out := slices.Clone(inv.problems)
	slices.SortFunc(out, func(x, y admin.Problem) int {
		if c := strings.Compare(x.Key, y.Key); c != 0 {
			return c
		}
		return strings.Compare(x.Reason, y.Reason)
	})
	if out == nil {
		out = []admin.Problem{}
	}
	return out
}

// warnProblems prints a warning for each record skipped, at most
// maxWarnings of them.
func (inv *invocation) warnProblems(w io.Writer) {
	ps := inv.problemList()
	for i, p := range ps {
		if i == maxWarnings {
			fmt.Fprintf(w, "simba: warning: %d more records skipped ('simba status --json' lists them all)\n", len(ps)-maxWarnings)
			break
		}
		fmt.Fprintf(w, "simba: warning: skipped record %s\n", p)
	}
}

// recordsSkipped describes how many records were skipped, for the
// overview.
func recordsSkipped(n int) string {
	return fmt.Sprintf("%d record%s could not be used and %s skipped (see the warnings on standard error)", n, plural(n), map[bool]string{true: "was", false: "were"}[n == 1])
}
