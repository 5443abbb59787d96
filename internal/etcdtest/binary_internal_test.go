package etcdtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRequiredVersion(t *testing.T) {
	for _, c := range []struct{ gomod, want string }{
		{"module m\n\nrequire go.etcd.io/etcd/server/v3 v3.7.3\n", "v3.7.3"},
		{"module m\n\nrequire (\n\tgo.etcd.io/etcd/server/v3 v3.7.4 // indirect\n)\n", "v3.7.4"},
		{"module m\n\nrequire (\n\tgo.etcd.io/etcd/server/v3/x v1.0.0\n)\n", ""},
		{"module m\n", ""},
	} {
		if got := requiredVersion([]byte(c.gomod), toolsModule); got != c.want {
			t.Errorf("requiredVersion(%q) = %q, want %q", c.gomod, got, c.want)
		}
	}
}

func TestFindRoot(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "a", "b")
	for _, d := range []string{deep, filepath.Join(root, toolsDir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := findRoot(deep); ok {
		t.Error("found a root without go.work")
	}
	for _, f := range []string{"go.work", toolsDir + "/go.mod"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, ok := findRoot(deep); !ok || got != root {
		t.Errorf("findRoot(%s) = %q, %v; want %s", deep, got, ok, root)
	}
	wd, _ := os.Getwd()
	if _, ok := findRoot(wd); !ok {
		t.Errorf("no checkout's root above the package's directory %s", wd)
	}
}

// TestBuildBinary builds the binary as a test run without SIMBA_ETCD_BIN does,
// from two goroutines at once, into a cache of its own: each gets the same
// binary, named as scripts/with-etcd.sh names it, and it runs.
func TestBuildBinary(t *testing.T) {
	wd, _ := os.Getwd()
	root, ok := findRoot(wd)
	if !ok {
		t.Fatalf("no checkout's root above %s", wd)
	}
	if _, err := exec.LookPath("go"); err != nil {
		Unavailable(t, "no go command to build etcd with: %v", err)
	}
	dir := filepath.Join(root, toolsDir)
	name, err := binaryName(dir, toolsModule, "etcd")
	if err != nil {
		t.Fatal(err)
	}
	// The script's name for it, when the tests run through the script.
	if p := os.Getenv(EnvBinary); strings.HasPrefix(filepath.Base(p), "etcd-") && filepath.Base(p) != name {
		t.Errorf("%s=%s, but etcdtest names the binary of %s %s", EnvBinary, p, dir, name)
	}
	cache := t.TempDir()
	var wg sync.WaitGroup
	bins := make([]string, 2)
	errs := make([]error, 2)
	for i := range bins {
		wg.Go(func() { bins[i], errs[i] = buildBinary(dir, cache, toolsModule, "etcd") })
	}
	wg.Wait()
	for i := range bins {
		if errs[i] != nil {
			t.Fatalf("build %d: %v", i, errs[i])
		}
		if want := filepath.Join(cache, name); bins[i] != want {
			t.Errorf("build %d: %s, want %s", i, bins[i], want)
		}
	}
	out, err := exec.Command(bins[0], "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "etcd Version") {
		t.Errorf("%s --version: %v: %s", bins[0], err, out)
	}
	left, _ := filepath.Glob(filepath.Join(cache, "*.tmp.*"))
	if len(left) > 0 {
		t.Errorf("temporary files left in the cache: %q", left)
	}
}

// TestUnexpectedExitIsReported: a server whose process dies while nobody
// stopped it says so, with the end of its log; Restart starts it again.
func TestUnexpectedExitIsReported(t *testing.T) {
	if _, err := binary(); err != nil {
		Unavailable(t, "%v", err)
	}
	reports := make(chan string, 1)
	s, err := newServer(t.TempDir(), func(msg string) { reports <- msg })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.mu.Lock()
	s.proc.cmd.Process.Kill()
	s.mu.Unlock()
	select {
	case msg := <-reports:
		t.Logf("reported: %s", msg)
		for _, want := range []string{"exited while nobody stopped it", "signal: killed", LogName + " ends:"} {
			if !strings.Contains(msg, want) {
				t.Errorf("the report does not say %q", want)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no report 10s after the server was killed")
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart after the process died: %v", err)
	}
	if err := s.health(); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-reports:
		t.Errorf("Close reported: %s", msg)
	default:
	}
}
