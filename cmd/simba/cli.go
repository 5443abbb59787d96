package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
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
	envEtcd     = "SIMBA_ETCD"
	envZK       = "SIMBA_ZK"
	envPostgres = "SIMBA_POSTGRES"
	envMySQL    = "SIMBA_MYSQL"
	envPrefix   = "SIMBA_PREFIX"
)

// defaultTimeout bounds a command that does not say otherwise.
const defaultTimeout = 5 * time.Second

// run is the simba command: it parses args, runs the command they name, and
// returns the exit status. ctx ends on SIGINT or SIGTERM.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr, getenv: os.Getenv, open: openBackend, probe: probe, terminal: isTerminal}
	return c.run(ctx, args)
}

// cli is one invocation of the command, with what it depends on made
// replaceable for tests.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// open opens the backend the global flags name.
	open func(target) (backend.Backend, error)
	// probe, if set, connects to the backend's servers before open, to
	// fail at once where its client would wait (secure.go); tests with a
	// fake backend leave it nil.
	probe func(context.Context, target) error
	// terminal reports whether w is a terminal (watch.go); nil: never.
	terminal func(w io.Writer) bool
	// secrets are the passwords the command was given (--password, the
	// DSN's), which fail removes from every message it prints.
	secrets []string
	// hinted records that the default-prefix hint was considered
	// (model.go), so that it costs one read at most.
	hinted bool
	// saDir is where a pod's service account is mounted (kube.go); ""
	// for serviceAccountDir. Tests replace it.
	saDir string
}

// globals are the flags every command accepts, before or after its name.
type globals struct {
	etcd, zk, prefix string
	postgres         string    // a DSN
	mysql            string    // a DSN, go-sql-driver/mysql's (mysql.go)
	pgNoListen       bool      // never LISTEN on PostgreSQL (pg.go)
	kube             kubeFlags // Kubernetes (kube.go)
	// output is the -o format (see outputs); json is --json, its synonym
	// for -o json, and is true after parsing whenever output is "json".
	output  string
	json    bool
	utc     bool
	timeout time.Duration
	conn    connFlags // TLS, credentials, the config file (config.go)
}

// register adds the global flags to fs, with their current values as
// defaults, so that registering them on a second flag set keeps what the
// first one parsed.
func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.etcd, "etcd", g.etcd, "etcd `endpoints`, comma-separated (default $"+envEtcd+")")
	fs.StringVar(&g.zk, "zk", g.zk, "ZooKeeper `servers`, comma-separated (default $"+envZK+")")
	fs.StringVar(&g.postgres, "postgres", g.postgres, "PostgreSQL `DSN`, a URL or key=value string as libpq takes it, with its TLS settings (sslmode, sslrootcert, sslcert, sslkey); never printed with its password (default $"+envPostgres+")")
	fs.StringVar(&g.mysql, "mysql", g.mysql, "MySQL or MariaDB `DSN`, as go-sql-driver/mysql takes it: user@tcp(host:3306)/database, with tls=true for TLS (or --cacert, --cert, --key); never printed with its password (default $"+envMySQL+")")
	fs.BoolVar(&g.pgNoListen, "postgres-no-listen", g.pgNoListen, "never LISTEN on PostgreSQL: read every second instead (the backend already does so through a connection pooler it detects; use this for one it does not)")
	g.kube.register(fs)
	fs.StringVar(&g.prefix, "prefix", g.prefix, "etcd key `prefix`, ZooKeeper root, PostgreSQL schema or MySQL table prefix the nodes use; for PostgreSQL the slashes at its ends are dropped: /simba/ is the schema simba; for MySQL an _ is also added: /simba/ is the tables simba_*; not for Kubernetes, which takes --namespace (default $"+envPrefix+", else the backend's default)")
	fs.StringVar(&g.output, "o", g.output, "output `format`: table, wide (more columns: sessions, full times), json or yaml")
	fs.StringVar(&g.output, "output", g.output, "output `format` (as -o)")
	fs.BoolVar(&g.json, "json", g.json, "print JSON for scripts instead of tables (as -o json)")
	fs.BoolVar(&g.utc, "utc", g.utc, "print times in UTC rather than in the local time zone")
	durationVar(fs, &g.timeout, "timeout", g.timeout, "give up on the backend after this `duration`; the whole command finishes within it (with --watch: each round)")
	g.conn.register(fs)
}

// Output formats.
const (
	outTable = "table"
	outWide  = "wide"
	outJSON  = "json"
	outYAML  = "yaml"
)

// outputs lists the -o formats.
var outputs = []string{outTable, outWide, outJSON, outYAML}

// checkOutput settles -o and --json: --json is -o json, and contradicting
// it is a usage error.
func (g *globals) checkOutput(explicit map[string]bool) error {
	if g.output == "" {
		g.output = outTable
	}
	if !slices.Contains(outputs, g.output) {
		return usagef(nil, "-o %s: unknown output format (use %s)", g.output, strings.Join(outputs, ", "))
	}
	if g.json {
		if (explicit["o"] || explicit["output"]) && g.output != outJSON {
			return usagef(nil, "--json and -o %s disagree: give one", g.output)
		}
		g.output = outJSON
	}
	g.json = g.output == outJSON
	return nil
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
	// …): it exits with exitProblems when it skipped records, and takes
	// --watch (see watch.go).
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
		statusCommand, electionsCommand, groupsCommand, jobsCommand, historyCommand, auditCommand,
		disableCommand, enableCommand, triggerCommand, resignCommand, drainCommand, undrainCommand,
		runCommand, devCommand, consoleCommand, versionCommand, completionCommand,
	}
}

// showingCommands lists the commands that show what they read: those that
// take --watch.
func showingCommands() []string {
	var out []string
	for _, c := range commands {
		if c.shows {
			out = append(out, c.name)
		}
	}
	return out
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
	if len(args) > 0 && args[0] == completeCommand {
		return c.complete(ctx, args[1:])
	}
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
	w        watchFlags      // for a command that shows
	explicit map[string]bool // global flags given on the command line
}

// parse parses args. When done, the command line is handled (help printed,
// or a usage error reported) and code is the exit status.
func (c *cli) parse(args []string) (p parsed, code int, done bool) {
	p.g = globals{
		etcd:     c.getenv(envEtcd),
		zk:       c.getenv(envZK),
		postgres: c.getenv(envPostgres),
		mysql:    c.getenv(envMySQL),
		kube:     kubeFromEnv(c.getenv, c.saDir),
		prefix:   c.getenv(envPrefix),
		output:   outTable,
		timeout:  defaultTimeout,
	}
	p.w = watchFlags{interval: defaultInterval}
	top := flag.NewFlagSet("simba", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	p.g.register(top)
	p.w.register(top) // simba --watch status, as simba status --watch
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
		return p, c.fail(unknownCommand(name)), true
	}
	fs := flag.NewFlagSet("simba "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	p.act = p.cmd.setup(fs)
	if p.cmd.shows {
		p.w.register(fs)
	}
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
	case p.w.interval <= 0:
		return p, c.fail(usagef(p.cmd, "--interval must be positive, got %v", p.w.interval)), true
	}
	p.explicit = map[string]bool{}
	mark := func(f *flag.Flag) { p.explicit[f.Name] = true }
	top.Visit(mark)
	fs.Visit(mark)
	if err := p.g.checkOutput(p.explicit); err != nil {
		return p, c.fail(err), true
	}
	switch {
	case p.w.watch && !p.cmd.shows:
		return p, c.fail(usagef(p.cmd, "--watch applies to %s only", strings.Join(showingCommands(), ", "))), true
	case p.explicit["interval"] && !p.w.watch:
		return p, c.fail(usagef(p.cmd, "--interval applies to --watch only")), true
	}
	if err := c.settle(&p); err != nil {
		return p, c.fail(err), true
	}
	return p, 0, false
}

// execute runs a parsed command within --timeout (unless it serves until
// interrupted) and returns its exit status.
func (c *cli) execute(ctx context.Context, p parsed) int {
	if p.w.watch {
		return c.watch(ctx, p)
	}
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

// fail prints err, without the passwords of c.secrets, and returns its
// exit status.
func (c *cli) fail(err error) int {
	stderr := c.stderr
	c.stderr = &redactingWriter{w: stderr, secrets: c.secrets}
	defer func() { c.stderr = stderr }()
	var ue *usageError
	var be *backendError
	var se interface{ exitStatus() int }
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(c.stderr, "simba: %s\n", message(ue.msg))
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
		fmt.Fprintf(c.stderr, "simba: %s\n", message(be.Error()))
		return exitUnreachable
	default: // not found, refused, not done in time
		fmt.Fprintf(c.stderr, "simba: %s\n", message(err.Error()))
		return exitFailed
	}
}

// pkgPrefix matches the package prefix of an error message of the module
// ("simba: ", "simba/admin: ", "simba/etcd: ") at the start of a message
// or of a wrapped cause.
var pkgPrefix = regexp.MustCompile(`(^|: )simba(/[a-z]+)*: `)

// message returns an error message for the command's own "simba: "
// prefix: without the package prefixes of the causes it wraps, which name
// the module's packages rather than say anything to an operator (no
// "simba: simba/admin: simba/etcd: ..."), and without a step of the chain
// that the one before it has said already ("... while opening a session:
// opening a session: ..."). The last step, the root cause, is kept.
func message(s string) string {
	for {
		t := pkgPrefix.ReplaceAllString(s, "$1")
		if t == s {
			break
		}
		s = t
	}
	parts := strings.Split(s, ": ")
	out := parts[:0]
	for i, p := range parts {
		if i > 0 && i < len(parts)-1 && len(p) >= minRepeat && strings.Contains(out[len(out)-1], p) {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ": ")
}

// minRepeat is the shortest step that message drops as said already: a
// phrase, not a word that might only be part of one.
const minRepeat = 8

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
			return c.fail(unknownCommand(args[0]))
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
that simba's nodes keep in etcd, ZooKeeper, PostgreSQL, MySQL or Kubernetes.

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
output: -o table (the default) or -o wide for people, with every time
with its time zone (local, or UTC with --utc); -o json or -o yaml for
scripts, with stable field names, times in RFC 3339 with their offset and
durations in seconds (fields ending in "Seconds"). status, elections,
groups, jobs, history and audit take --watch: shown again every
--interval until interrupted.

exit status: 0 done (or a --watch interrupted); 1 failed (no such job,
operation refused, --wait not satisfied in time); 2 usage error, or a
config file or TLS file that cannot be used; 3 backend unreachable or too
slow for --timeout; 4 shown, but records that could not be used were
skipped (warned of on standard error); 5 the backend refused the TLS
handshake, the user or password, or a permission; 130 interrupted.
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
	if cmd.shows {
		w := watchFlags{interval: defaultInterval}
		w.register(fs)
	}
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
