package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/simba-go/simba/backend/kit/backoff"
)

// --watch shows a command's output again and again until interrupted, as
// watch(1) would run the command, but over one connection to the backend:
// each round reads the backend once, bounded by --timeout, and is drawn
// whole once read. A round that fails shows its error on standard error
// and the watch goes on, the next round after a jittered wait that grows
// with the failures in a row (internal/backoff) up to maxRetryWait; after
// a backend failure the next round connects afresh. Tables clear the
// screen before each round when standard output is a terminal, and are
// separated by their heading line otherwise; -o json prints one JSON
// document per round, -o yaml one YAML document ("---" first). Interrupted
// (SIGINT, SIGTERM), a watch exits with status 0; a usage error ends it at
// once.

// defaultInterval is the time between two rounds of --watch.
const defaultInterval = 2 * time.Second

// maxRetryWait bounds the wait after failed rounds (unless --interval is
// longer).
const maxRetryWait = 15 * time.Second

// clearScreen moves the cursor home and clears a terminal (ANSI).
const clearScreen = "\x1b[H\x1b[2J"

// watchFlags are the flags of the commands that show.
type watchFlags struct {
	watch    bool
	interval time.Duration
}

func (w *watchFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&w.watch, "watch", w.watch, "show it again every --interval until interrupted (each round within --timeout)")
	durationVar(fs, &w.interval, "interval", w.interval, "the `duration` between two rounds of --watch")
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// watch runs a command that shows in rounds until ctx ends, and returns
// the exit status.
func (c *cli) watch(ctx context.Context, p parsed) int {
	table := p.g.output == outTable || p.g.output == outWide
	redraw := table && c.terminal != nil && c.terminal(c.stdout)
	line := strings.TrimSpace("simba " + p.cmd.name + " " + strings.Join(p.pos, " "))
	// kept is the last round's invocation while its connection is kept
	// for the next round.
	var kept *invocation
	defer func() {
		if kept != nil {
			kept.close(context.Background())
		}
	}()
	failures := 0
	for {
		var out bytes.Buffer
		rc := *c
		rc.stdout = &out
		inv := &invocation{cli: &rc, g: p.g, cmd: p.cmd, explicit: p.explicit}
		if kept != nil {
			inv.t, inv.b, inv.adm = kept.t, kept.b, kept.adm
		}
		rctx, cancel := context.WithTimeout(ctx, p.g.timeout)
		err := p.act(rctx, inv, p.pos)
		cancel()
		var be *backendError
		if inv.adm == nil || errors.As(err, &be) { // connect afresh next round
			inv.close(context.Background())
			kept = nil
		} else {
			kept = inv
		}
		if ctx.Err() != nil {
			return exitOK
		}
		var ue *usageError
		if errors.As(err, &ue) {
			if ue.cmd == nil {
				ue.cmd = p.cmd
			}
			return c.fail(err)
		}
		now := time.Now()
		if table {
			if redraw {
				io.WriteString(c.stdout, clearScreen)
			}
			fmt.Fprintf(c.stdout, "every %v: %s  (%s)\n\n", p.w.interval, line, inv.printer().stamp(now))
		} else if p.g.output == outYAML && err == nil {
			io.WriteString(c.stdout, "---\n")
		}
		c.stdout.Write(out.Bytes())
		if table && !redraw {
			fmt.Fprintln(c.stdout)
		}
		inv.warnProblems(c.stderr)
		wait := p.w.interval
		if err != nil {
			failures++
			wait = backoff.Jitter(backoff.Step(failures, p.w.interval, max(p.w.interval, maxRetryWait)))
			fmt.Fprintf(c.stderr, "simba: %s (again in %s)\n", message(err.Error()), dur(wait))
		} else {
			failures = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return exitOK
		case <-t.C:
		}
	}
}
