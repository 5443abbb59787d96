package etcdtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/servers"
)

// EnvBinary names the variable holding the path of the etcd binary
// (scripts/with-etcd.sh sets it).
const EnvBinary = "SIMBA_ETCD_BIN"

// The build of the binary when SIMBA_ETCD_BIN is not set, as scripts/with-etcd.sh
// does it (lib.sh's tool_binary): the same module, package and cache path.
const (
	toolsDir    = "tools/etcd"
	toolsModule = "go.etcd.io/etcd/server/v3"
	// utilModule is etcdutl's, built the same way, from the same module,
	// for [Server.RestoreSnapshot].
	utilModule = "go.etcd.io/etcd/etcdutl/v3"
	// buildTimeout bounds the build (some 40s on 2 cores with Go's build
	// cache cold and the modules downloaded).
	buildTimeout = 10 * time.Minute
	// lockTimeout bounds the wait for another test process's build.
	lockTimeout = buildTimeout + time.Minute
)

// ErrNoBinary is the error, wrapped, of [New] when there is no etcd binary
// to run: SIMBA_ETCD_BIN is not set and the binary could not be built. [Start]
// skips the test then (fails it under SIMBA_REQUIRE_SERVERS=1).
var ErrNoBinary = errors.New("etcdtest: no etcd binary")

// Unavailable skips t with the reason, or fails it under
// SIMBA_REQUIRE_SERVERS=1, for want of an etcd server.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if servers.Required() {
		t.Fatalf("%s (%s=1: a missing etcd server is a failure)", msg, servers.EnvRequire)
	}
	t.Skipf("%s; run the tests through scripts/with-etcd.sh (make test does) or set %s", msg, EnvBinary)
}

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// binary returns the path of the etcd binary, or an error wrapping
// [ErrNoBinary] that says why there is none. The answer is worked out once
// per process.
func binary() (string, error) {
	binaryOnce.Do(func() {
		binaryPath, binaryErr = findBinary()
		if binaryErr != nil {
			binaryErr = fmt.Errorf("%w: %v", ErrNoBinary, binaryErr)
		}
	})
	return binaryPath, binaryErr
}

var (
	utilOnce sync.Once
	utilPath string
	utilErr  error
)

// utilBinary returns the path of the etcdutl binary of the checkout's
// tools/etcd, built into the cache if missing, or why there is none.
func utilBinary() (string, error) {
	utilOnce.Do(func() { utilPath, utilErr = toolBinary(utilModule, "etcdutl") })
	return utilPath, utilErr
}

// findBinary returns SIMBA_ETCD_BIN if set, or else the binary of the
// checkout's tools/etcd in the cache, built if missing.
func findBinary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("%s=%s: %v (it names the etcd binary of the tests)", EnvBinary, p, err)
		}
		return p, nil
	}
	p, err := toolBinary(toolsModule, "etcd")
	if err != nil {
		return "", fmt.Errorf("%s is not set, and %v", EnvBinary, err)
	}
	return p, nil
}

// toolBinary returns the binary of module (package main at its root) of
// the checkout's tools/etcd in the cache, named after name, built if
// missing.
func toolBinary(module, name string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("the working directory is unknown, to build %s in: %v", name, err)
	}
	root, ok := findRoot(wd)
	if !ok {
		return "", fmt.Errorf("no checkout of simba (a directory holding go.work and %s) holds %s to build %s in", toolsDir, wd, name)
	}
	cache, err := cacheDir()
	if err != nil {
		return "", fmt.Errorf("there is no cache directory to build %s in: %v", name, err)
	}
	return buildBinary(filepath.Join(root, toolsDir), cache, module, name)
}

// executable reports why the file at p cannot be run, or nil.
func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

// findRoot returns the first of dir and its parents that holds go.work and
// tools/etcd/go.mod: the checkout's root.
func findRoot(dir string) (string, bool) {
	for {
		_, errWork := os.Stat(filepath.Join(dir, "go.work"))
		_, errTools := os.Stat(filepath.Join(dir, toolsDir, "go.mod"))
		if errWork == nil && errTools == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// cacheDir returns ${XDG_CACHE_HOME:-$HOME/.cache}/simba, as
// scripts/with-etcd.sh has it.
func cacheDir() (string, error) {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "simba"), nil
	}
	home := os.Getenv("HOME")
	if home == "" {
		return "", errors.New("neither XDG_CACHE_HOME nor HOME is set")
	}
	return filepath.Join(home, ".cache", "simba"), nil
}

// requiredVersion returns the version of module that the go.mod given
// requires, or "".
func requiredVersion(gomod []byte, module string) string {
	for line := range strings.Lines(string(gomod)) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == module:
			return f[1]
		case len(f) >= 3 && f[0] == "require" && f[1] == module:
			return f[2]
		}
	}
	return ""
}

// binaryName returns the name in the cache of the binary of module, called
// name, built in the tools module in dir: name-VERSION-HASH, HASH being 12
// hex digits of the SHA-256 of its go.mod and go.sum (as scripts/lib.sh's
// tool_binary names it).
func binaryName(dir, module, name string) (string, error) {
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", err
	}
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		return "", err
	}
	version := requiredVersion(mod, module)
	if version == "" {
		return "", fmt.Errorf("%s/go.mod requires no %s", dir, module)
	}
	h := sha256.Sum256(append(append([]byte{}, mod...), sum...))
	return name + "-" + version + "-" + hex.EncodeToString(h[:])[:12], nil
}

// buildBinary returns the binary of module, called tool, built in the
// tools module in dir, in cache, building it first if it is not there:
// with GOWORK=off (tools/etcd is no module of go.work), through a
// temporary file renamed into place, one process at a time
// (cache/etcd.lock, the lock scripts/with-etcd.sh takes).
func buildBinary(dir, cache, module, tool string) (string, error) {
	name, err := binaryName(dir, module, tool)
	if err != nil {
		return "", fmt.Errorf("%s cannot be built: %v", tool, err)
	}
	bin := filepath.Join(cache, name)
	if executable(bin) == nil {
		return bin, nil
	}
	fail := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("%s could not be built from %s into %s: %s", tool, dir, bin, fmt.Sprintf(format, args...))
	}
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	goPath, err := exec.LookPath(goCmd)
	if err != nil {
		return fail("no go command: %v", err)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return fail("%v", err)
	}
	unlock, err := lockFile(filepath.Join(cache, "etcd.lock"), lockTimeout)
	if err != nil {
		return fail("%v", err)
	}
	defer unlock()
	if executable(bin) == nil { // built by another process meanwhile
		return bin, nil
	}
	fmt.Fprintf(os.Stderr, "etcdtest: building %s from %s into %s (about a minute; output in %s.build.log)\n", tool, dir, bin, bin)
	start := time.Now()
	tmp := fmt.Sprintf("%s.tmp.%d", bin, os.Getpid())
	defer os.Remove(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, goPath, "build", "-o", tmp, module)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	os.WriteFile(bin+".build.log", out.Bytes(), 0o644)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("not done after %v", buildTimeout)
		}
		return fail("go build: %v:\n%s", err, tail(out.Bytes(), 30))
	}
	version := "--version"
	if tool != "etcd" {
		version = "version" // etcdutl's subcommand
	}
	if v, err := exec.Command(tmp, version).CombinedOutput(); err != nil {
		return fail("the binary built does not run: %v:\n%s", err, tail(v, 10))
	}
	if err := os.Rename(tmp, bin); err != nil {
		return fail("%v", err)
	}
	fmt.Fprintf(os.Stderr, "etcdtest: built %s in %v\n", tool, time.Since(start).Round(time.Second))
	return bin, nil
}

// tail returns the last n lines of b, at most 4 KiB of them.
func tail(b []byte, n int) string {
	b = bytes.TrimRight(b, "\n")
	if len(b) > 4096 {
		b = b[len(b)-4096:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
