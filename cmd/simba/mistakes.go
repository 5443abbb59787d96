package main

import (
	"errors"
	"flag"
	"strconv"
	"strings"
	"time"
)

// What the command says about the mistakes people make on a command line:
// a duration without its unit, a command name mistyped.

// durationVar defines a duration flag whose bad values are explained: the
// flag package's own says only "parse error". Its usage must name its
// placeholder in back quotes (`duration`), which the flag package cannot
// find from the type of a flag.Value.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationFlag)(p), name, usage)
}

// durationFlag is a time.Duration as a flag.Value.
type durationFlag time.Duration

func (d *durationFlag) String() string { return time.Duration(*d).String() }

func (d *durationFlag) Set(s string) error {
	v, err := parseFlagDuration(s)
	if err != nil {
		return err
	}
	*d = durationFlag(v)
	return nil
}

// parseFlagDuration parses a duration as Go writes it ("5s", "1m30s",
// "250ms"), and says what is wrong with one it cannot read: a number
// without a unit most often.
func parseFlagDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
		return 0, errors.New("missing unit: write " + s + "s for seconds (units: ns, us, ms, s, m, h)")
	}
	return 0, errors.New(strings.TrimPrefix(err.Error(), "time: ") + ": want a duration such as 5s, 1m30s or 250ms (units: ns, us, ms, s, m, h)")
}

// nearest returns the candidate closest to name when it is a likely
// mistyping of it (at most a third of its letters differ, or name is its
// start), or "".
func nearest(name string, candidates []string) string {
	best, bestDist := "", len(name)/3+1
	for _, c := range candidates {
		if len(name) >= 2 && strings.HasPrefix(c, name) {
			return c
		}
		if d := editDistance(name, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, counting an
// exchange of two neighbouring letters as one edit (Damerau).
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// unknownCommand is the usage error of a command name that is none,
// with the one it may stand for.
func unknownCommand(name string) error {
	names := []string{"help"}
	for _, c := range commands {
		names = append(names, c.name)
	}
	if n := nearest(name, names); n != "" {
		return usagef(nil, "unknown command %q: did you mean %s?", name, n)
	}
	return usagef(nil, "unknown command %q", name)
}
