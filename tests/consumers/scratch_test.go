package consumers

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
)

// The environment of the checks.
const (
	// envConsumers set to 1 runs the checks.
	envConsumers = "SIMBA_CONSUMERS"
	// envRequire set to 1 (CI sets it) runs them too.
	envRequire = "SIMBA_REQUIRE_SERVERS"
	// envTable set to 1 runs TestConsumersTable.
	envTable = "SIMBA_CONSUMERS_TABLE"
	// envRoot names the checkout to check; by default the one the tests
	// are in.
	envRoot = "SIMBA_CONSUMERS_ROOT"
)

// cmdTimeout bounds each go command on a warm module cache; freshTimeout
// bounds a go mod tidy into an empty module cache (tens of MB from the
// proxy).
const (
	cmdTimeout   = 5 * time.Minute
	freshTimeout = 20 * time.Minute
)

// enabled skips t unless SIMBA_CONSUMERS=1 or SIMBA_REQUIRE_SERVERS=1.
func enabled(t *testing.T) {
	t.Helper()
	if os.Getenv(envConsumers) != "1" && os.Getenv(envRequire) != "1" {
		t.Skipf("the consumer checks need the Go module proxy and take a minute on a warm module cache: "+
			"run them with %s=1 go test -count=1 -v ./consumers (in tests/; CI's %s=1 runs them too)",
			envConsumers, envRequire)
	}
}

// goBin returns the go command, failing t without one.
func goBin(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH: %v", err)
	}
	return p
}

// checkoutRoot returns the checkout to check: SIMBA_CONSUMERS_ROOT, or the
// repository these tests are in (two directories up).
func checkoutRoot(t testing.TB) string {
	t.Helper()
	root := os.Getenv(envRoot)
	if root == "" {
		root = filepath.Join("..", "..")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatalf("checkout %s: %v", root, err)
	}
	if _, err := os.Stat(filepath.Join(abs, "go.mod")); err != nil {
		t.Fatalf("checkout %s has no go.mod at its root (%s names another checkout): %v", abs, envRoot, err)
	}
	return abs
}

// localModule is a module of the checkout: its module path and directory.
type localModule struct {
	Path, Dir string
}

// checkoutModules returns every module of the checkout at root: each go.mod
// below it except under tools/ and build/ (the build-only modules and build
// outputs), .git, testdata and directories whose names begin with . or _
// (which the go command ignores). Before the split this is the root module
// alone.
func checkoutModules(t testing.TB, root string) []localModule {
	t.Helper()
	var mods []localModule
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			name := d.Name()
			if rel != "." && (rel == "tools" || rel == "build" || name == "testdata" || name == "vendor" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		mp := modfile.ModulePath(data)
		if mp == "" {
			return fmt.Errorf("%s has no module line", p)
		}
		mods = append(mods, localModule{Path: mp, Dir: filepath.Dir(p)})
		return nil
	})
	if err != nil {
		t.Fatalf("finding the modules of %s: %v", root, err)
	}
	if len(mods) == 0 {
		t.Fatalf("no go.mod under %s", root)
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Path < mods[j].Path })
	return mods
}

// rootGoVersion returns the go directive of the checkout's root go.mod, for
// the scratch modules' own.
func rootGoVersion(t testing.TB, root string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.ParseLax("go.mod", data, nil)
	if err != nil {
		t.Fatalf("parsing %s/go.mod: %v", root, err)
	}
	if f.Go == nil {
		t.Fatalf("%s/go.mod has no go directive", root)
	}
	return f.Go.Version
}

// pkgUse is a package a consumer imports and a declaration that uses it:
// Use is a format with one %s, the name the package is imported as.
type pkgUse struct {
	Path, Use string
}

// The packages the consumers import.
var (
	pkgSimba      = pkgUse{"github.com/simba-go/simba", "var _ = %s.New"}
	pkgMemory     = pkgUse{"github.com/simba-go/simba/backend/memory", "var _ = %s.New"}
	pkgEtcd       = pkgUse{"github.com/simba-go/simba/backend/etcd", "var _ = %s.New"}
	pkgPostgres   = pkgUse{"github.com/simba-go/simba/backend/postgres", "var _ = %s.New"}
	pkgMySQL      = pkgUse{"github.com/simba-go/simba/backend/mysql", "var _ = %s.New"}
	pkgKubernetes = pkgUse{"github.com/simba-go/simba/backend/kubernetes", "var _ = %s.New"}
	pkgSQLFence   = pkgUse{"github.com/simba-go/simba/fence/sqlfence", "var _ %s.Fence"}
	pkgClientGo   = pkgUse{"k8s.io/client-go/kubernetes", "var _ = %s.NewForConfig"}
	pkgGRPC       = pkgUse{"google.golang.org/grpc", "var _ = %s.Dial"}
	pkgEtcdClient = pkgUse{"go.etcd.io/etcd/client/v3", "var _ = %s.New"}
	coreMemory    = []pkgUse{pkgSimba, pkgMemory}
)

// consumer is a scratch module: the packages its main.go imports and the
// requirements its go.mod has before go mod tidy (module@version).
type consumer struct {
	Name     string
	Imports  []pkgUse
	Requires []string
}

// scratch is a consumer module written to a directory, and how to run the
// go command in it.
type scratch struct {
	Dir string
	Env []string // the go command's environment
	Go  string   // the go command
}

// goEnv returns the environment of go commands in scratch modules: the
// machine's, with GOWORK=off (the checkout's go.work must not apply),
// GOFLAGS=-mod=mod plus extra flags, GOTOOLCHAIN=local, and the given
// overrides (KEY=VALUE).
func goEnv(extraFlags string, overrides ...string) []string {
	drop := map[string]bool{"GOWORK": true, "GOFLAGS": true, "GOTOOLCHAIN": true}
	for _, o := range overrides {
		k, _, _ := strings.Cut(o, "=")
		drop[k] = true
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			env = append(env, kv)
		}
	}
	flags := strings.TrimSpace("-mod=mod " + extraFlags)
	env = append(env, "GOWORK=off", "GOFLAGS="+flags, "GOTOOLCHAIN=local")
	return append(env, overrides...)
}

// writeScratch writes c's main.go and go.mod into a new directory under
// t.TempDir(): the go.mod has c's requirements and a replace directive for
// every module of the checkout.
func writeScratch(t testing.TB, root string, mods []localModule, c consumer, env []string) *scratch {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "consumer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var gomod strings.Builder
	fmt.Fprintf(&gomod, "module example.com/consumer\n\ngo %s\n", rootGoVersion(t, root))
	if len(c.Requires) > 0 {
		gomod.WriteString("\nrequire (\n")
		for _, r := range c.Requires {
			p, v, ok := strings.Cut(r, "@")
			if !ok {
				t.Fatalf("requirement %q is not module@version", r)
			}
			fmt.Fprintf(&gomod, "\t%s %s\n", p, v)
		}
		gomod.WriteString(")\n")
	}
	gomod.WriteString("\nreplace (\n")
	for _, m := range mods {
		fmt.Fprintf(&gomod, "\t%s => %s\n", m.Path, m.Dir)
	}
	gomod.WriteString(")\n")

	var main strings.Builder
	main.WriteString("// Command consumer imports simba's packages as a user would.\npackage main\n\nimport (\n")
	for i, p := range c.Imports {
		fmt.Fprintf(&main, "\tp%d %q\n", i, p.Path)
	}
	main.WriteString(")\n\n")
	for i, p := range c.Imports {
		fmt.Fprintf(&main, p.Use+"\n", fmt.Sprintf("p%d", i))
	}
	main.WriteString("\nfunc main() {}\n")

	for name, text := range map[string]string{"go.mod": gomod.String(), "main.go": main.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &scratch{Dir: dir, Env: env, Go: goBin(t)}
}

// run runs the go command with args in the scratch module, bounded by
// timeout, and returns its standard output; on failure the error holds
// the command, its standard error and its output.
func (s *scratch) run(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Go, args...)
	cmd.Dir = s.Dir
	cmd.Env = s.Env
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (timed out after %v)", err, timeout)
		}
		return stdout.String(), fmt.Errorf("go %s in %s failed after %v: %w\nstderr:\n%s\nstdout:\n%s",
			strings.Join(args, " "), s.Dir, time.Since(start).Round(time.Millisecond), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// must runs the go command as run does and fails t on error.
func (s *scratch) must(t testing.TB, args ...string) string {
	t.Helper()
	out, err := s.run(t.Context(), cmdTimeout, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// modVersion is a module of a build list.
type modVersion struct {
	Path, Version string
}

func (m modVersion) String() string {
	if m.Version == "" {
		return m.Path
	}
	return m.Path + "@" + m.Version
}

// buildList returns go list -m all: the main module first, then every
// module of the build list.
func (s *scratch) buildList(t testing.TB) []modVersion {
	t.Helper()
	var list []modVersion
	for _, line := range lines(s.must(t, "list", "-m", "-f", "{{.Path}} {{.Version}}", "all")) {
		p, v, _ := strings.Cut(line, " ")
		list = append(list, modVersion{Path: p, Version: strings.TrimSpace(v)})
	}
	return list
}

// deps returns the import paths of go list -deps ./... and which of them
// are outside the standard library.
func (s *scratch) deps(t testing.TB) (all, nonStd []string) {
	t.Helper()
	for _, line := range lines(s.must(t, "list", "-deps", "-f", "{{.Standard}} {{.ImportPath}}", "./...")) {
		std, p, _ := strings.Cut(line, " ")
		all = append(all, p)
		if std != "true" {
			nonStd = append(nonStd, p)
		}
	}
	return all, nonStd
}

// version returns the version of module path the build list selects, ""
// when it has none.
func (s *scratch) version(t testing.TB, path string) string {
	t.Helper()
	return strings.TrimSpace(s.must(t, "list", "-m", "-f", "{{.Version}}", path))
}

// graph returns go mod graph as edges: each requirer and the module@version
// it requires.
func (s *scratch) graph(t testing.TB) [][2]string {
	t.Helper()
	var edges [][2]string
	for _, line := range lines(s.must(t, "mod", "graph")) {
		f := strings.Fields(line)
		if len(f) == 2 {
			edges = append(edges, [2]string{f[0], f[1]})
		}
	}
	return edges
}

// chain returns the shortest chain of requirements in edges from the main
// module to any version of module path: "main → a@v → path@v".
func chain(edges [][2]string, mainPath, path string) string {
	next := map[string][]string{}
	for _, e := range edges {
		next[e[0]] = append(next[e[0]], e[1])
	}
	prev := map[string]string{mainPath: ""}
	queue := []string{mainPath}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if p, _, _ := strings.Cut(n, "@"); p == path {
			var c []string
			for ; n != ""; n = prev[n] {
				c = append([]string{n}, c...)
			}
			return strings.Join(c, " → ")
		}
		for _, m := range next[n] {
			if _, seen := prev[m]; !seen {
				prev[m] = n
				queue = append(queue, m)
			}
		}
	}
	return "(no chain of requirements from " + mainPath + ")"
}

// lines returns the non-empty lines of s.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
