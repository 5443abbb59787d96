package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// eachFlag calls f with every flag of every command's help, the global
// flags first.
func eachFlag(f func(where string, fl *flag.Flag)) {
	g := globals{timeout: defaultTimeout}
	fs := flag.NewFlagSet("simba", flag.ContinueOnError)
	g.register(fs)
	fs.VisitAll(func(fl *flag.Flag) { f("global", fl) })
	for _, cmd := range commands {
		fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
		cmd.setup(fs)
		if cmd.shows {
			w := watchFlags{interval: defaultInterval}
			w.register(fs)
		}
		fs.VisitAll(func(fl *flag.Flag) { f("simba "+cmd.name, fl) })
	}
}

// TestFlagPlaceholdersAreNouns: help shows what a flag takes ("-timeout
// duration"), never a word of its sentence ("-timeout long"), nor the
// flag package's "value" for a flag.Value it cannot name; every duration
// flag is a durationVar, whose mistakes are explained.
func TestFlagPlaceholdersAreNouns(t *testing.T) {
	n := 0
	eachFlag(func(where string, fl *flag.Flag) {
		n++
		placeholder, _ := flag.UnquoteUsage(fl)
		if _, ok := fl.Value.(*durationFlag); ok && placeholder != "duration" {
			t.Errorf("%s -%s %s: a duration flag's placeholder is `duration`", where, fl.Name, placeholder)
		}
		if strings.HasSuffix(fmt.Sprintf("%T", fl.Value), "flag.durationValue") {
			t.Errorf("%s -%s is a flag.Duration, which says only \"parse error\" for 5: define it with durationVar", where, fl.Name)
		}
		switch placeholder {
		case "long", "value", "time", "period":
			t.Errorf("%s: help shows -%s %s: back-quote the noun of what it takes in its usage", where, fl.Name, placeholder)
		}
	})
	if n < 40 {
		t.Fatalf("only %d flags seen: the walk misses commands", n)
	}
}

// TestMistakesAreExplained: a duration without its unit names the unit
// missing, and a mistyped command is given the one it may stand for.
func TestMistakesAreExplained(t *testing.T) {
	b := newHarness(t, nil)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--timeout", "5"}, `invalid value "5" for flag -timeout: missing unit: write 5s for seconds`},
		{[]string{"--timeout", "1.5", "status"}, `invalid value "1.5" for flag -timeout: missing unit: write 1.5s for seconds`},
		{[]string{"status", "--timeout", "5 s"}, `invalid value "5 s" for flag -timeout: unknown unit " s" in duration "5 s": want a duration such as 5s`},
		{[]string{"status", "--watch", "--interval", "fast"}, `invalid value "fast" for flag -interval: invalid duration "fast": want a duration such as 5s`},
		{[]string{"run", "--election", "x", "--every", "10", "--", "true"}, `invalid value "10" for flag -every: missing unit: write 10s for seconds`},
		{[]string{"stauts"}, `unknown command "stauts": did you mean status?`},
		{[]string{"elektions"}, `unknown command "elektions": did you mean elections?`},
		{[]string{"dissable", "x"}, `unknown command "dissable": did you mean disable?`},
		{[]string{"hist"}, `unknown command "hist": did you mean history?`},
		{[]string{"help", "consol"}, `unknown command "consol": did you mean console?`},
		{[]string{"halp"}, `unknown command "halp": did you mean help?`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := b.run(tc.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, "simba: "+tc.want) {
				t.Errorf("want exit %d and %q\n%v", exitUsage, tc.want, r)
			}
		})
	}
	for _, name := range []string{"frobnicate", "x", "statuses-of-all"} {
		r := b.run(name)
		if !strings.Contains(r.stderr, fmt.Sprintf("simba: unknown command %q\n", name)) {
			t.Errorf("simba %s: want no suggestion for a name like none\n%v", name, r)
		}
	}
}

func TestDurationFlagReadsWhatGoWrites(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, 1500 * time.Millisecond, 90 * time.Minute, 26 * time.Hour} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var got time.Duration
		durationVar(fs, &got, "d", time.Second, "a `duration`")
		if err := fs.Parse([]string{"-d", d.String()}); err != nil || got != d {
			t.Errorf("-d %s: got %v, %v", d, got, err)
		}
	}
}
