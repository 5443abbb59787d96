package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/etcdtest"
)

// The tests of the CLI's conventions that need a real server: the
// default-prefix hint (the memory backend has no prefixes), --watch
// through an etcd outage, the completion scripts in real shells, and the
// error messages of a real backend.

// realCLI runs the command in-process against real backends, with env as
// its environment.
func realCLI(env map[string]string) *harnessReal { return &harnessReal{env: env} }

type harnessReal struct{ env map[string]string }

func (h *harnessReal) runContext(ctx context.Context, stdout, stderr *await.Buffer, args ...string) int {
	c := &cli{stdout: stdout, stderr: stderr, getenv: func(k string) string { return h.env[k] }, open: openBackend, probe: probe}
	return c.run(ctx, args)
}

func (h *harnessReal) run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out, errb await.Buffer
	code := h.runContext(ctx, &out, &errb, args...)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// startEtcdNode starts a node on srv under prefix ("" for the default)
// running a job "report", and waits until the backend shows it.
func startEtcdNode(t *testing.T, srv *etcdtest.Server, prefix string) {
	t.Helper()
	var opts []etcd.Option
	if prefix != "" {
		opts = append(opts, etcd.WithPrefix(prefix))
	}
	b, err := etcd.New(srv.Endpoints(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() }) // after the node
	startNode(t, b, "a", e2eTTL, &recorder{}).schedule(t, "report", simba.FixedRate(time.Hour))
	h := realCLI(map[string]string{envEtcd: strings.Join(srv.Endpoints(), ","), envPrefix: prefix})
	eventually(t, 10*time.Second, "the backend shows report under "+prefix, func() bool {
		return h.run(t, "status", "report").code == 0
	})
}

func TestDefaultPrefixHint(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real etcd")
	}
	srv := etcdtest.Start(t)
	endpoints := strings.Join(srv.Endpoints(), ",")
	startEtcdNode(t, srv, "")
	startEtcdNode(t, srv, "/busy/")
	h := realCLI(map[string]string{envEtcd: endpoints})
	hint := "simba: hint: nothing under /other/; the default prefix /simba/ holds 1 election: drop --prefix?\n"

	r := h.run(t, "elections", "--prefix", "/other/")
	if r.code != exitOK || r.stderr != hint || !strings.Contains(r.stdout, "(no elections)") {
		t.Errorf("elections under an empty prefix: %v", r)
	}
	r = h.run(t, "history", "report", "--prefix", "/other/")
	requireCode(t, r, exitFailed, hint+`simba: no such job "report" (the backend shows none`)
	r = h.run(t, "status", "-o", "json", "--prefix", "/other/")
	if r.code != exitOK || r.stderr != hint || decode[overview](t, r.stdout).Elections.Total != 0 {
		t.Errorf("status -o json under an empty prefix: %v", r)
	}

	h.env[envPrefix] = "/other/"
	r = h.run(t, "jobs")
	if want := strings.Replace(hint, "drop --prefix?", "drop $SIMBA_PREFIX?", 1); r.code != exitOK || r.stderr != want {
		t.Errorf("jobs under an empty $SIMBA_PREFIX: %v", r)
	}
	delete(h.env, envPrefix)

	// No hint where the prefix holds something, or is the default.
	for _, prefix := range []string{"/busy/", "/simba/", "/simba"} {
		r = h.run(t, "status", "report", "--prefix", prefix)
		if prefix == "/simba" {
			requireCode(t, r, exitUsage, `simba: etcd at `+endpoints+` (prefix /simba): key prefix "/simba" must end with "/"`)
			if strings.Contains(r.stderr, "simba/etcd") || strings.Contains(r.stderr, "hint") {
				t.Errorf("status --prefix /simba: %v", r)
			}
			continue
		}
		if r.code != exitOK || r.stderr != "" {
			t.Errorf("status report --prefix %s: %v", prefix, r)
		}
	}
}

func TestWatchThroughAnEtcdOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real etcd")
	}
	srv := etcdtest.Start(t)
	startEtcdNode(t, srv, "/watched/")
	h := realCLI(map[string]string{envEtcd: strings.Join(srv.Endpoints(), ","), envPrefix: "/watched/"})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errb await.Buffer
	code := make(chan int, 1)
	go func() {
		code <- h.runContext(ctx, &out, &errb, "jobs", "--watch", "--interval", "200ms", "--timeout", "1s", "-o", "json")
	}()
	docs := func() int { return len(jsonDocuments(t, out.String())) }
	eventually(t, 10*time.Second, "two rounds shown", func() bool { return docs() >= 2 })

	srv.Stop()
	eventually(t, 20*time.Second, "a failed round reported", func() bool { return strings.Contains(errb.String(), "(again in ") })
	shown := docs()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "rounds shown again after the restart", func() bool { return docs() >= shown+2 })
	cancel()
	if c := await.For(t, code, 10*time.Second, "the watch did not end when interrupted"); c != exitOK {
		t.Errorf("exit %d from an interrupted watch\nstderr:\n%s", c, errb.String())
	}
	t.Logf("the watch's standard error:\n%s", errb.String())
	for _, line := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
		if !strings.HasPrefix(line, "simba: etcd at ") || !strings.HasSuffix(line, ")") || strings.Contains(line, "simba/") {
			t.Errorf("a failed round reported as %q", line)
		}
	}
	var last []jobView
	if err := decodeInto(string(jsonDocuments(t, out.String())[docs()-1]), &last); err != nil || len(last) != 1 || last[0].Name != "report" {
		t.Errorf("the last round shows %+v (%v), want the job report", last, err)
	}
}

// buildSimba builds the command into dir and returns its path.
func TestCompletionScriptsInRealShells(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command and runs a real etcd")
	}
	dir := filepath.Dir(build(t).simba) // simba is on the shells' PATH
	srv := etcdtest.Start(t)
	startEtcdNode(t, srv, "/completed/")
	env := append(cleanEnv(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"),
		envEtcd+"="+strings.Join(srv.Endpoints(), ","), envPrefix+"=/completed/")
	shell := func(name, script string) []string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, "-c", script)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}

	bash := func(line string) string {
		return fmt.Sprintf(`source <(simba completion bash)
COMP_LINE=%q; COMP_POINT=${#COMP_LINE}; _simba; printf '%%s,' "${COMPREPLY[@]}"; echo`, line)
	}
	for line, want := range map[string]string{
		"simba sta":                        "status,",
		"simba --timeout 2s hi":            "history,",
		"simba history ":                   "report,",
		"simba status -o ":                 "table,wide,json,yaml,",
		"simba jobs --wat":                 "--watch,",
		"simba status report ":             ",",
		"simba completion ":                "bash,zsh,",
		"simba --prefix /nowhere/ status ": ",",
	} {
		if got := shell("bash", bash(line)); len(got) != 1 || got[0] != want {
			t.Errorf("bash completes %q as %q, want %q", line, got, want)
		}
	}

	if _, err := exec.LookPath("zsh"); err != nil {
		t.Skip("no zsh to try the zsh script in (the bash script was tried)")
	}
	// compadd and compdef are the completion system's; stand-ins print what
	// the script hands them.
	zsh := func(words ...string) string {
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = fmt.Sprintf("%q", w)
		}
		return fmt.Sprintf(`compadd() { [[ $1 == -- ]] && shift; print -rl -- "$@" }
_files() { print -r -- FILES }
compdef() { print -r -- "compdef $*" }
source <(simba completion zsh)
words=(simba %s); CURRENT=${#words}; _simba`, strings.Join(quoted, " "))
	}
	for _, tc := range []struct {
		words []string
		want  []string
	}{
		{[]string{"sta"}, []string{"compdef _simba simba", "status"}},
		{[]string{"trigger", ""}, []string{"compdef _simba simba", "report"}},
		{[]string{"status", "--output", "w"}, []string{"compdef _simba simba", "wide"}},
		{[]string{"status", "report", ""}, []string{"compdef _simba simba", "FILES"}},
	} {
		if got := shell("zsh", zsh(tc.words...)); !slices.Equal(got, tc.want) {
			t.Errorf("zsh completes %q as %q, want %q", tc.words, got, tc.want)
		}
	}
}
