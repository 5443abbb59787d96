package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/simba-go/simba/backend"
)

// Exit statuses.
const (
	exitOK          = 0
	exitFailed      = 1   // the command failed: not found, refused, not done in time
	exitUsage       = 2   // bad flags or arguments
	exitUnreachable = 3   // the backend did not answer within --timeout
	exitProblems    = 4   // shown, but records that could not be used were skipped
	exitRefused     = 5   // the backend refused the TLS handshake, the credentials or a permission
	exitInterrupted = 130 // SIGINT or SIGTERM
)

// Environment variables that give the global flags their defaults.
const (
	envEtcd   = "SIMBA_ETCD"
	envZK     = "SIMBA_ZK"
	envPrefix = "SIMBA_PREFIX"
)

// defaultTimeout bounds a command that does not say otherwise.
const defaultTimeout = 5 * time.Second

// run is the simba command: it parses args, runs the command they name, and
// returns the exit status. ctx ends on SIGINT or SIGTERM.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr, getenv: os.Getenv, open: openBackend}
	return c.run(ctx, args)
}

// cli is one invocation of the command, with what it depends on made
// replaceable for tests.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// open opens the backend the global flags name.
	open func(target) (backend.Backend, error)
}

// globals are the flags every command accepts, before or after its name.
type globals struct {
	etcd, zk, prefix string
	json             bool
	timeout          time.Duration
	conn             connFlags // TLS, credentials, the config file (config.go)
}

// register adds the global flags to fs, with their current values as
// defaults, so that registering them on a second flag set keeps what the
// first one parsed.
func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.etcd, "etcd", g.etcd, "etcd `endpoints`, comma-separated (default $"+envEtcd+")")
	fs.StringVar(&g.zk, "zk", g.zk, "ZooKeeper `servers`, comma-separated (default $"+envZK+")")
	fs.StringVar(&g.prefix, "prefix", g.prefix, "etcd key `prefix` or ZooKeeper root the nodes use (default $"+envPrefix+", else the backend's default)")
	fs.BoolVar(&g.json, "json", g.json, "print JSON for scripts instead of tables")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "give up on the backend after this `long`; the whole command finishes within it")
	g.conn.register(fs)
}

// command is one entry of the dispatch table.
type command struct {
	name    string
	args    string // the positional arguments, for the usage line
	summary string // one line, for the list of commands
	doc     string // more, for simba help COMMAND
	// minArgs and maxArgs bound the number of positional arguments.
	minArgs, maxArgs int
	// serves marks a command that runs until interrupted (dev, a console):
	// --timeout bounds only its backend calls, not the command.
	serves bool
	// shows marks a command that shows what it reads (status, elections,
	// …): it exits with exitProblems when it skipped records.
	shows bool
	// setup registers the command's own flags on fs and returns its action,
	// which runs once they are parsed.
	setup func(fs *flag.FlagSet) action
}

// action runs a command with its positional arguments.
type action func(ctx context.Context, inv *invocation, args []string) error

// commands is the dispatch table, in the order help lists them.
var commands []*command

func init() {
	commands = []*command{
		statusCommand, electionsCommand, groupsCommand, jobsCommand, historyCommand,
		disableCommand, enableCommand, triggerCommand, resignCommand, drainCommand, undrainCommand,
		devCommand, consoleCommand,
	}
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// usageError is a mistake in the command line: exit status 2.
type usageError struct {
	msg string
	cmd *command // the command whose usage applies, or nil
}

func (e *usageError) Error() string { return e.msg }

func usagef(cmd *command, format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...), cmd: cmd}
}

// failf returns a failure of the command: exit status 1.
func failf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func (c *cli) run(ctx context.Context, args []string) int {
	p, code, done := c.parse(args)
	if done {
		return code
	}
	return c.execute(ctx, p)
}

// parsed is a command line, parsed.
type parsed struct {
	cmd      *command
	act      action
	pos      []string // positional arguments
	g        globals
	explicit map[string]bool // global flags given on the command line
}

// parse parses args. When done, the command line is handled (help printed,
// or a usage error reported) and code is the exit status.
func (c *cli) parse(args []string) (p parsed, code int, done bool) {
	p.g = globals{
		etcd:    c.getenv(envEtcd),
		zk:      c.getenv(envZK),
		prefix:  c.getenv(envPrefix),
		timeout: defaultTimeout,
	}
	top := flag.NewFlagSet("simba", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	p.g.register(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.usage(c.stdout)
			return p, exitOK, true
		}
		return p, c.fail(usagef(nil, "%v", err)), true
	}
	rest := top.Args()
	if len(rest) == 0 {
		c.usage(c.stderr)
		return p, exitUsage, true
	}
	name, rest := rest[0], rest[1:]
	if name == "help" {
		return p, c.help(rest), true
	}
	if p.cmd = lookup(name); p.cmd == nil {
		return p, c.fail(usagef(nil, "unknown command %q", name)), true
	}
	fs := flag.NewFlagSet("simba "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	p.act = p.cmd.setup(fs)
	p.g.register(fs)
	var err error
	p.pos, err = parseInterspersed(fs, rest)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.commandUsage(c.stdout, p.cmd)
		return p, exitOK, true
	case err != nil:
		return p, c.fail(usagef(p.cmd, "%v", err)), true
	case len(p.pos) < p.cmd.minArgs:
		return p, c.fail(usagef(p.cmd, "%s: missing %s", name, p.cmd.args)), true
	case p.cmd.maxArgs >= 0 && len(p.pos) > p.cmd.maxArgs:
		return p, c.fail(usagef(p.cmd, "%s: too many arguments: %s", name, strings.Join(p.pos, " "))), true
	case p.g.timeout <= 0:
		return p, c.fail(usagef(p.cmd, "--timeout must be positive, got %v", p.g.timeout)), true
	}
	p.explicit = map[string]bool{}
	mark := func(f *flag.Flag) { p.explicit[f.Name] = true }
	top.Visit(mark)
	fs.Visit(mark)
	if err := c.settle(&p); err != nil {
		return p, c.fail(err), true
	}
	return p, 0, false
}

// execute runs a parsed command within --timeout (unless it serves until
// interrupted) and returns its exit status.
func (c *cli) execute(ctx context.Context, p parsed) int {
	inv := &invocation{cli: c, g: p.g, cmd: p.cmd, explicit: p.explicit}
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if !p.cmd.serves {
		cctx, cancel = context.WithTimeout(ctx, p.g.timeout)
	}
	err := p.act(cctx, inv, p.pos)
	inv.close(cctx)
	cancel()
	inv.warnProblems(c.stderr)
	switch {
	case err == nil && p.cmd.shows && len(inv.problems) > 0:
		return exitProblems
	case err == nil:
		return exitOK
	case ctx.Err() != nil:
		fmt.Fprintln(c.stderr, "simba: interrupted")
		return exitInterrupted
	}
	if ue, ok := err.(*usageError); ok && ue.cmd == nil {
		ue.cmd = p.cmd
	}
	return c.fail(err)
}

// parseInterspersed parses fs from args, allowing flags after positional
// arguments (simba history report --json); "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// fail prints err and returns its exit status.
func (c *cli) fail(err error) int {
	var ue *usageError
	var be *backendError
	var se interface{ exitStatus() int }
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(c.stderr, "simba: %s\n", ue.msg)
		if ue.cmd != nil {
			fmt.Fprintf(c.stderr, "usage: %s\n", usageLine(ue.cmd))
			fmt.Fprintf(c.stderr, "run 'simba help %s' for its flags\n", ue.cmd.name)
		} else {
			fmt.Fprintln(c.stderr, "run 'simba help' for the commands")
		}
		return exitUsage
	case errors.As(err, &se): // one line: a config file, TLS or credentials problem
		fmt.Fprintf(c.stderr, "simba: %v\n", err)
		return se.exitStatus()
	case errors.As(err, &be):
		fmt.Fprintf(c.stderr, "simba: %v\n", be)
		return exitUnreachable
	default: // not found, refused, not done in time
		fmt.Fprintf(c.stderr, "simba: %v\n", err)
		return exitFailed
	}
}

func usageLine(cmd *command) string {
	s := "simba " + cmd.name + " [flags]"
	if cmd.args != "" {
		s += " " + cmd.args
	}
	return s
}

func (c *cli) help(args []string) int {
	switch len(args) {
	case 0:
		c.usage(c.stdout)
		return exitOK
	case 1:
		cmd := lookup(args[0])
		if cmd == nil {
			return c.fail(usagef(nil, "unknown command %q", args[0]))
		}
		c.commandUsage(c.stdout, cmd)
		return exitOK
	default:
		return c.fail(usagef(nil, "help takes one command"))
	}
}

// usage prints the overview of the commands.
func (c *cli) usage(w io.Writer) {
	fmt.Fprint(w, `simba shows and operates the elections, partition groups and scheduled jobs
that simba's nodes keep in etcd or ZooKeeper.

usage: simba [global flags] command [flags] [arguments]

commands:
`)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, cmd := range commands {
		fmt.Fprintf(tw, "  %s %s\t%s\n", cmd.name, cmd.args, cmd.summary)
	}
	fmt.Fprintf(tw, "  help [command]\tthis text, or a command's flags\n")
	tw.Flush()
	fmt.Fprintf(w, "\nglobal flags (also accepted after the command):\n")
	g := globals{timeout: defaultTimeout}
	fs := flag.NewFlagSet("simba", flag.ContinueOnError)
	g.register(fs)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprint(w, `
exit status: 0 done; 1 failed (no such job, operation refused, --wait not
satisfied in time); 2 usage error, or a config file or TLS file that cannot
be used; 3 backend unreachable or too slow for --timeout; 4 shown, but
records that could not be used were skipped (warned of on standard error);
5 the backend refused the TLS handshake, the user or password, or a
permission; 130 interrupted.
`)
}

// commandUsage prints one command's usage and flags.
func (c *cli) commandUsage(w io.Writer, cmd *command) {
	fmt.Fprintf(w, "usage: %s\n\n%s.\n", usageLine(cmd), upperFirst(cmd.summary))
	if cmd.doc != "" {
		fmt.Fprintf(w, "\n%s\n", cmd.doc)
	}
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	cmd.setup(fs)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintf(w, "\nflags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	fmt.Fprintf(w, "\nand the global flags (simba help).\n")
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
