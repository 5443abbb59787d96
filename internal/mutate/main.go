// Command mutate is the project's mutation tester: it plants small,
// plausible bugs (mutants) in the safety-critical code, one at a time, and
// runs the tests that guard that code against each. A mutant the tests
// catch is killed; one that passes every test survived, and is either a
// missing test or equivalent to the original (no test could tell them
// apart). docs/RELIABILITY.md keeps the score and the survivors.
//
// It needs nothing but the go command: each mutant is a copy of one file
// with one change, given to `go test -overlay`, so the checkout is never
// modified and mutants of different files can be tested at once.
//
// Usage, from the repository's root, with the test servers' addresses in the
// environment (scripts/with-*.sh, as `make mutate` does):
//
//	go run ./internal/mutate [flags] [target ...]
//
// The targets (all when none is named) are listed by -list. Flags:
//
//	-list          list the targets and their mutants' counts, test nothing
//	-sample N      test N mutants per target, drawn by -seed (0: all)
//	-seed S        the draw's seed (default 1)
//	-only FILE     test only the mutants listed in FILE (lines as printed
//	               in the report's first column, e.g. session.go:231:14:<)
//	-j N           mutants tested at once (default 1)
//	-out FILE      write the report (markdown) to FILE as well as stdout
//
// The mutations are those a careless change makes: a comparison's boundary
// (< and <=, > and >=), a condition's sense (== and !=), the other boolean
// operator (&& and ||), a dropped negation (!x to x), the other arithmetic
// operator (+ and -, * and /), and a call statement removed. A mutant that
// does not compile is not counted.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// A target is a set of files and the tests that guard them.
type target struct {
	name    string
	dir     string   // the package's directory, from the repository's root
	files   []string // the files mutated, in dir
	tests   []string // more directories whose tests run against the mutants (tests moved to the tests module)
	run     string   // the tests' -run pattern ("" runs all)
	timeout time.Duration
}

// targets are the safety-critical packages of issue 44: the root's term and
// session code, every backend's session and lease code, the fences, the
// stream loop, internal/proc.
var targets = []target{
	{name: "root", dir: ".", files: []string{"session.go", "term.go", "holding.go", "renewals.go"}, tests: []string{"tests/core"}, timeout: 6 * time.Minute},
	{name: "memory", dir: "backend/memory", files: []string{"session.go", "lease.go"}, timeout: 3 * time.Minute},
	{name: "etcd", dir: "backend/etcd", files: []string{"session.go", "lease.go"}, timeout: 5 * time.Minute},
	{name: "zookeeper", dir: "backend/zookeeper", files: []string{"session.go", "lease.go"}, timeout: 5 * time.Minute},
	{name: "postgres", dir: "backend/postgres", files: []string{"session.go", "lease.go", "clock.go"}, timeout: 6 * time.Minute},
	{name: "dbclock", dir: "backend/kit/dbclock", files: []string{"dbclock.go"}, tests: []string{"backend/postgres"}, run: "Clock|Step|Failover|Takeover|Straddl", timeout: 6 * time.Minute},
	{name: "kubernetes", dir: "backend/kubernetes", files: []string{"session.go", "lease.go"}, timeout: 6 * time.Minute},
	{name: "sqlfence", dir: "fence/sqlfence", files: []string{"fence.go"}, tests: []string{"tests/sqlfence"}, timeout: 3 * time.Minute},
	{name: "pglease", dir: "backend/postgres/pglease", files: []string{"fence.go"}, timeout: 3 * time.Minute},
	{name: "etcdfence", dir: "fence/etcdfence", files: []string{"fence.go"}, timeout: 2 * time.Minute},
	{name: "redisfence", dir: "fence/redisfence", files: []string{"fence.go"}, timeout: 2 * time.Minute},
	{name: "stream", dir: "stream", files: []string{"loop.go", "checkpoint.go", "task.go"}, tests: []string{"tests/stream"}, timeout: 3 * time.Minute},
	{name: "proc", dir: "internal/proc", files: []string{"proc.go", "shim_linux.go", "start_linux.go"}, timeout: 3 * time.Minute},
}

// A mutant is one change to one file.
type mutant struct {
	t        *target
	file     string // path from the repository's root
	line     int
	col      int
	off, end int    // the bytes replaced
	from, to string // what they were and become
	op       string // the mutation's kind
}

// id names m in reports and in -only files.
func (m mutant) id() string {
	return fmt.Sprintf("%s:%d:%d:%s", m.file, m.line, m.col, m.op)
}

// result is a tested mutant's fate.
type result struct {
	m      mutant
	status string // killed, survived, timeout, unviable
	took   time.Duration
	why    string // the first failing test, or the build error
}

func main() {
	list := flag.Bool("list", false, "list the targets and their mutants, test nothing")
	sample := flag.Int("sample", 0, "mutants tested per target, drawn by -seed (0: all)")
	seed := flag.Uint64("seed", 1, "the draw's seed")
	only := flag.String("only", "", "test only the mutants listed in this file")
	jobs := flag.Int("j", 1, "mutants tested at once")
	out := flag.String("out", "", "also write the report to this file")
	flag.Parse()
	if err := mainErr(*list, *sample, *seed, *only, *jobs, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

func mainErr(list bool, sample int, seed uint64, only string, jobs int, out string, names []string) error {
	chosen, err := choose(names)
	if err != nil {
		return err
	}
	var keep map[string]bool
	if only != "" {
		b, err := os.ReadFile(only)
		if err != nil {
			return err
		}
		keep = ids(string(b))
	}
	var all []mutant
	for _, t := range chosen {
		ms, err := mutants(t)
		if err != nil {
			return err
		}
		if list {
			fmt.Printf("%-11s %4d mutants  %s/{%s}\n", t.name, len(ms), t.dir, strings.Join(t.files, ","))
			continue
		}
		if keep != nil {
			var k []mutant
			for _, m := range ms {
				if keep[m.id()] {
					k = append(k, m)
				}
			}
			ms = k
		} else if sample > 0 && sample < len(ms) {
			r := rand.New(rand.NewPCG(seed, uint64(len(t.name))))
			r.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
			ms = ms[:sample]
			sort.Slice(ms, func(i, j int) bool {
				return ms[i].file < ms[j].file || ms[i].file == ms[j].file && ms[i].off < ms[j].off
			})
		}
		all = append(all, ms...)
	}
	if list {
		return nil
	}
	tmp, err := os.MkdirTemp("", "mutate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, t := range chosen {
		if !has(all, t) {
			continue
		}
		fmt.Fprintf(os.Stderr, "mutate: %s: the unmutated code first\n", t.name)
		if r := test(tmp, t, nil); r.status != "survived" {
			return fmt.Errorf("%s: the tests fail without a mutant (%s): %s", t.name, r.status, r.why)
		}
	}
	results := make([]result, len(all))
	var wg sync.WaitGroup
	next := make(chan int)
	var mu sync.Mutex
	done := 0
	for range max(jobs, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				m := all[i]
				r := test(tmp, m.t, &m)
				results[i] = r
				mu.Lock()
				done++
				fmt.Fprintf(os.Stderr, "mutate: [%d/%d] %-9s %s %q→%q (%s) %s\n", done, len(all), r.status, m.id(), m.from, m.to, r.took.Round(time.Second), r.why)
				mu.Unlock()
			}
		}()
	}
	for i := range all {
		next <- i
	}
	close(next)
	wg.Wait()
	var w io.Writer = os.Stdout
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	report(w, chosen, results, sample, seed)
	return nil
}

// ids returns the mutants named in text: the first word of each line
// (backquotes around it dropped, as in the report's list of survivors).
func ids(text string) map[string]bool {
	keep := map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && f[0] == "-" {
			f = f[1:]
		}
		if len(f) > 0 {
			keep[strings.Trim(f[0], "`")] = true
		}
	}
	return keep
}

func has(ms []mutant, t *target) bool {
	for _, m := range ms {
		if m.t == t {
			return true
		}
	}
	return false
}

func choose(names []string) ([]*target, error) {
	if len(names) == 0 {
		ts := make([]*target, len(targets))
		for i := range targets {
			ts[i] = &targets[i]
		}
		return ts, nil
	}
	var ts []*target
	for _, n := range names {
		found := false
		for i := range targets {
			if targets[i].name == n {
				ts = append(ts, &targets[i])
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("no target %q (see -list)", n)
		}
	}
	return ts, nil
}

// swaps are the operator mutations.
var swaps = map[token.Token][]token.Token{
	token.LSS:  {token.LEQ},
	token.LEQ:  {token.LSS},
	token.GTR:  {token.GEQ},
	token.GEQ:  {token.GTR},
	token.EQL:  {token.NEQ},
	token.NEQ:  {token.EQL},
	token.LAND: {token.LOR},
	token.LOR:  {token.LAND},
	token.ADD:  {token.SUB},
	token.SUB:  {token.ADD},
	token.MUL:  {token.QUO},
	token.QUO:  {token.MUL},
}

// mutants lists every mutant of t's files.
func mutants(t *target) ([]mutant, error) {
	var ms []mutant
	for _, name := range t.files {
		path := filepath.Join(t.dir, name)
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		add := func(pos token.Pos, end int, from, to, op string) {
			p := fset.Position(pos)
			ms = append(ms, mutant{t: t, file: path, line: p.Line, col: p.Column, off: p.Offset, end: end, from: from, to: to, op: op})
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if isConst(n.X) && isConst(n.Y) {
					return true // constant arithmetic: mostly unviable or equivalent
				}
				for _, to := range swaps[n.Op] {
					off := fset.Position(n.OpPos).Offset
					add(n.OpPos, off+len(n.Op.String()), n.Op.String(), to.String(), n.Op.String())
				}
			case *ast.UnaryExpr:
				if n.Op == token.NOT {
					off := fset.Position(n.OpPos).Offset
					add(n.OpPos, off+1, "!", "", "!")
				}
			case *ast.ExprStmt:
				if c, ok := n.X.(*ast.CallExpr); ok && !logging(c) {
					s, e := fset.Position(n.Pos()).Offset, fset.Position(n.End()).Offset
					add(n.Pos(), e, string(src[s:e]), "", "call")
				}
			}
			return true
		})
	}
	return ms, nil
}

// logging reports whether c logs (a method called Log, Debug, Info, Warn,
// Error or ending in f, such as Printf): removing it changes no behaviour
// a test should guard.
func logging(c *ast.CallExpr) bool {
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	switch n := sel.Sel.Name; n {
	case "Log", "LogAttrs", "Debug", "Info", "Warn", "Error", "Printf", "Logf", "Println":
		return true
	}
	return false
}

func isConst(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.BasicLit:
		return true
	case *ast.ParenExpr:
		return isConst(e.X)
	case *ast.Ident:
		return e.Name == "nil" || e.Name == "true" || e.Name == "false"
	}
	return false
}

// test runs t's tests against m (nil: the unmutated code).
func test(tmp string, t *target, m *mutant) result {
	args := []string{"test", "-count=1", "-failfast"}
	if t.run != "" {
		args = append(args, "-run", t.run)
	}
	var r result
	if m != nil {
		r.m = *m
		src, err := os.ReadFile(m.file)
		if err != nil {
			return result{m: *m, status: "unviable", why: err.Error()}
		}
		mutated := append(append(append([]byte{}, src[:m.off]...), m.to...), src[m.end:]...)
		dir, err := os.MkdirTemp(tmp, "m")
		if err != nil {
			return result{m: *m, status: "unviable", why: err.Error()}
		}
		defer os.RemoveAll(dir)
		abs, _ := filepath.Abs(m.file)
		file := filepath.Join(dir, filepath.Base(m.file))
		overlay := filepath.Join(dir, "overlay.json")
		j, _ := json.Marshal(map[string]map[string]string{"Replace": {abs: file}})
		if err := os.WriteFile(file, mutated, 0o644); err != nil {
			return result{m: *m, status: "unviable", why: err.Error()}
		}
		if err := os.WriteFile(overlay, j, 0o644); err != nil {
			return result{m: *m, status: "unviable", why: err.Error()}
		}
		args = append(args, "-overlay", overlay)
	}
	// In the workspace of go.work, one go test names packages of any of
	// the repository's modules by directory.
	for _, d := range append([]string{t.dir}, t.tests...) {
		args = append(args, "./"+filepath.ToSlash(d)+"/")
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.WaitDelay = 10 * time.Second
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	start := time.Now()
	err := cmd.Run()
	r.took = time.Since(start)
	outText := buf.String()
	switch {
	case err == nil:
		r.status = "survived"
	case ctx.Err() != nil:
		r.status = "timeout"
		r.why = "no verdict within " + t.timeout.String()
	case strings.Contains(outText, "[build failed]") || strings.Contains(outText, "[setup failed]") || strings.Contains(outText, "vet:"):
		r.status = "unviable"
		r.why = firstLine(outText, "")
	default:
		r.status = "killed"
		r.why = firstLine(outText, "--- FAIL")
	}
	return r
}

// firstLine returns the first line of s that begins with prefix (after
// spaces), or with anything when prefix is "", shortened.
func firstLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") && strings.HasPrefix(l, prefix) {
			if len(l) > 120 {
				l = l[:120] + "…"
			}
			return l
		}
	}
	return ""
}

// report writes the scores per target and the survivors.
func report(w io.Writer, ts []*target, rs []result, sample int, seed uint64) {
	fmt.Fprintf(w, "| target | mutants tested | killed | timed out | survived | unviable | score |\n|---|---|---|---|---|---|---|\n")
	for _, t := range ts {
		c := map[string]int{}
		n := 0
		for _, r := range rs {
			if r.m.t == t {
				c[r.status]++
				n++
			}
		}
		if n == 0 {
			continue
		}
		viable := c["killed"] + c["timeout"] + c["survived"]
		score := "—"
		if viable > 0 {
			score = fmt.Sprintf("%.0f%%", 100*float64(c["killed"]+c["timeout"])/float64(viable))
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %s |\n", t.name, n, c["killed"], c["timeout"], c["survived"], c["unviable"], score)
	}
	if sample > 0 {
		fmt.Fprintf(w, "\n(%d mutants drawn per target, seed %d)\n", sample, seed)
	}
	fmt.Fprintf(w, "\nSurvivors:\n\n")
	for _, r := range rs {
		if r.status == "survived" {
			fmt.Fprintf(w, "- `%s` %q → %q\n", r.m.id(), r.m.from, r.m.to)
		}
	}
}
