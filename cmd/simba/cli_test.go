package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
)

// invocations numbers the nodes of the harnesses' invocations.
var invocations atomic.Int64

// harness runs the command in-process against a memory backend: every
// invocation opens a node of its own, as a separate process would.
type harness struct {
	t   testing.TB
	b   *memory.Backend
	env map[string]string
	// prepare, if set, is applied to each invocation's node before use
	// (to partition it, say).
	prepare func(*memory.Node)
	// wrap, if set, wraps each invocation's backend.
	wrap func(backend.Backend) backend.Backend
	// terminal, if set, makes standard output a terminal.
	terminal bool
	// opened records the targets opened, under mu: invocations may run
	// at once (a simba run and a simba history beside it).
	mu     sync.Mutex
	opened []target
}

func newHarness(t testing.TB, b *memory.Backend) *harness {
	return &harness{t: t, b: b, env: map[string]string{envEtcd: "memory:2379"}}
}

// result is what an invocation printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// run runs simba with args.
func (h *harness) run(args ...string) result {
	h.t.Helper()
	return h.runContext(context.Background(), args...)
}

// runContext runs simba with args until ctx ends: ctx is what SIGINT
// ends.
func (h *harness) runContext(ctx context.Context, args ...string) result {
	var out, errb bytes.Buffer
	c := &cli{
		stdout: &out, stderr: &errb,
		getenv:   func(k string) string { return h.env[k] },
		terminal: func(io.Writer) bool { return h.terminal },
		open: func(t target) (backend.Backend, error) {
			h.mu.Lock()
			h.opened = append(h.opened, t)
			h.mu.Unlock()
			node := h.b.Node(fmt.Sprintf("simba-%d", invocations.Add(1)))
			if h.prepare != nil {
				h.prepare(node)
			}
			if h.wrap != nil {
				return h.wrap(node), nil
			}
			return node, nil
		},
	}
	code := c.run(ctx, args)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// ok runs simba with args and fails the test unless it exits 0.
func (h *harness) ok(args ...string) string {
	h.t.Helper()
	r := h.run(args...)
	if r.code != 0 {
		h.t.Fatalf("simba %s: %v", strings.Join(args, " "), r)
	}
	return r.stdout
}

func TestUsageErrors(t *testing.T) {
	b := memory.New()
	defer b.Close()
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no command", nil, nil, "usage: simba"},
		{"unknown command", nil, []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"unknown flag", nil, []string{"status", "--frob"}, "flag provided but not defined: -frob"},
		{"unknown global flag", nil, []string{"--frob", "status"}, "flag provided but not defined: -frob"},
		{"missing argument", nil, []string{"history"}, "history: missing JOB"},
		{"too many arguments", nil, []string{"history", "a", "b"}, "too many arguments: a b"},
		{"bad timeout", nil, []string{"status", "--timeout", "0s"}, "--timeout must be positive"},
		{"bad token", nil, []string{"resign", "x", "--token", "-1"}, "invalid value"},
		{"negative limit", nil, []string{"history", "x", "--limit", "-1"}, "--limit must not be negative"},
		{"no backend", map[string]string{}, []string{"status"}, "no backend: pass --etcd ENDPOINTS, --zk SERVERS, --postgres DSN, --mysql DSN or --kubernetes"},
		{"two backends in the environment", map[string]string{envEtcd: "a:1", envZK: "b:2"}, []string{"status"}, "both $SIMBA_ETCD and $SIMBA_ZK are set"},
		{"two backend flags", map[string]string{}, []string{"status", "--etcd", "a:1", "--zk", "b:2"}, "--etcd and --zk both given"},
		{"bad name", nil, []string{"disable", "no/slash"}, "invalid"},
		{"bad member", nil, []string{"drain", "a b"}, `invalid member id "a b"`},
		{"bad port", nil, []string{"dev", "--port", "70000"}, "--port must be 0–65535"},
		{"help of an unknown command", nil, []string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{"unknown output format", nil, []string{"status", "-o", "xml"}, "-o xml: unknown output format (use table, wide, json, yaml)"},
		{"--json and -o disagree", nil, []string{"status", "--json", "-o", "yaml"}, "--json and -o yaml disagree"},
		{"--interval without --watch", nil, []string{"status", "--interval", "1s"}, "--interval applies to --watch only"},
		{"bad interval", nil, []string{"jobs", "--watch", "--interval", "0s"}, "--interval must be positive"},
		{"--watch on an operation", nil, []string{"disable", "x", "--watch"}, "flag provided but not defined: -watch"},
		{"--watch before an operation", nil, []string{"--watch", "disable", "x"}, "--watch applies to status, elections, groups, jobs, history, audit only"},
		{"completion of an unknown shell", nil, []string{"completion", "fish"}, `completion: unknown shell "fish" (bash or zsh)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, b)
			if tc.env != nil {
				h.env = tc.env
			}
			r := h.run(tc.args...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d\n%v", r.code, exitUsage, r)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr lacks %q\n%v", tc.want, r)
			}
			if r.stdout != "" {
				t.Errorf("stdout not empty\n%v", r)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	h := newHarness(t, nil)
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		out := h.ok(args...)
		for _, c := range commands {
			if !strings.Contains(out, "\n  "+c.name+" ") {
				t.Errorf("simba %s does not list %s:\n%s", args[0], c.name, out)
			}
		}
		for _, want := range []string{"-etcd endpoints", "-zk servers", "-prefix", "-json", "-o format", "-utc", "-timeout", "exit status: 0 done"} {
			if !strings.Contains(out, want) {
				t.Errorf("simba %s lacks %q", args[0], want)
			}
		}
	}
	for _, args := range [][]string{{"help", "resign"}, {"resign", "-h"}} {
		out := h.ok(args...)
		for _, want := range []string{"usage: simba resign [flags] NAME", "-token token", "-wait", "-reason", "sits out"} {
			if !strings.Contains(out, want) {
				t.Errorf("simba %s lacks %q:\n%s", strings.Join(args, " "), want, out)
			}
		}
	}
	out := h.ok("help", "trigger")
	for _, want := range []string{"usage: simba trigger [flags] JOB", "-arg key=value", "(repeatable)", "simba.RunInfo", "every partition of a group gets the same", "32 arguments, a value at most 1024 bytes, 8192 bytes of keys and values\nin all."} {
		if !strings.Contains(out, want) {
			t.Errorf("simba help trigger lacks %q:\n%s", want, out)
		}
	}
	for _, name := range []string{"status", "elections", "groups", "jobs", "history"} {
		out := h.ok("help", name)
		if !strings.Contains(out, "-watch") || !strings.Contains(out, "-interval duration") {
			t.Errorf("simba help %s lacks --watch and --interval:\n%s", name, out)
		}
	}
	for _, name := range []string{"disable", "enable", "trigger", "resign", "drain", "undrain"} {
		if out := h.ok("help", name); !strings.Contains(out, "-reason") {
			t.Errorf("simba help %s lacks --reason:\n%s", name, out)
		}
	}
	if len(h.opened) > 0 {
		t.Errorf("help opened a backend: %v", h.opened)
	}
}

func TestTargetFromFlagsAndEnvironment(t *testing.T) {
	b := memory.New()
	defer b.Close()
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"etcd from the environment", map[string]string{envEtcd: "h1:2379, h2:2379"}, nil, "etcd at h1:2379,h2:2379"},
		{"zk from the environment", map[string]string{envZK: "z:2181", envPrefix: "/app"}, nil, "zookeeper at z:2181 (prefix /app)"},
		{"a flag beats the environment", map[string]string{envEtcd: "e:2379"}, []string{"--zk", "z:2181"}, "zookeeper at z:2181"},
		{"a flag chooses between both", map[string]string{envEtcd: "e:2379", envZK: "z:2181"}, []string{"--etcd", "x:1"}, "etcd at x:1"},
		{"flags after the command", map[string]string{}, []string{"--prefix", "/p/", "--etcd", "x:1"}, "etcd at x:1 (prefix /p/)"},
		{"postgres from the environment", map[string]string{envPostgres: "postgres://simba:pw-not-shown@db:5433/app", envPrefix: "/simba/"}, nil, "postgres at simba@db:5433/app (schema simba)"},
		{"--postgres beats the environment", map[string]string{envEtcd: "e:2379", envZK: "z:2181"}, []string{"--postgres", "host=db user=simba dbname=app password=pw-not-shown"}, "postgres at simba@db:5432/app"},
		{"mysql from the environment", map[string]string{envMySQL: "simba:pw-not-shown@tcp(db:3307)/app", envPrefix: "/simba/"}, nil, "mysql at simba@db:3307/app (tables simba_*)"},
		{"--mysql beats the environment", map[string]string{envEtcd: "e:2379", envPostgres: "postgres://db/app"}, []string{"--mysql", "simba:pw-not-shown@tcp(db)/app"}, "mysql at simba@db:3306/app"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, b)
			h.env = tc.env
			args := append([]string{"elections"}, tc.args...)
			h.ok(args...)
			if got := h.opened[0].String(); got != tc.want {
				t.Errorf("opened %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantPos []string
		json    bool
	}{
		{[]string{"report", "--json"}, []string{"report"}, true},
		{[]string{"--json", "report"}, []string{"report"}, true},
		{[]string{"report"}, []string{"report"}, false},
		{[]string{"--", "--json"}, []string{"--json"}, false},
		{[]string{"a", "--", "b", "--json"}, []string{"a", "b", "--json"}, false},
	} {
		var g globals
		fs := newFlagSetForTest(&g)
		pos, err := parseInterspersed(fs, tc.args)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if strings.Join(pos, " ") != strings.Join(tc.wantPos, " ") || g.json != tc.json {
			t.Errorf("%q: positional %q json %v, want %q %v", tc.args, pos, g.json, tc.wantPos, tc.json)
		}
	}
}

func newFlagSetForTest(g *globals) *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	g.register(fs)
	return fs
}
