package consumers

import (
	"fmt"
	"strings"
	"testing"
)

// heavy are the modules a consumer of the core must not have in its build
// list (issue 38): each module path equal to a prefix or below it.
var heavy = []struct{ Prefix, What string }{
	{"k8s.io/client-go", "the Kubernetes client"},
	{"k8s.io/klog", "the Kubernetes logger"},
	{"google.golang.org/grpc", "gRPC"},
	{"go.etcd.io/etcd", "etcd (client, API or server)"},
	{"go.etcd.io/bbolt", "etcd server's storage"},
	{"go.etcd.io/raft", "etcd server's consensus"},
	{"go.uber.org/zap", "etcd's logger"},
	{"github.com/jackc/pgx", "the PostgreSQL driver"},
	{"github.com/go-sql-driver/mysql", "the MySQL driver"},
	{"github.com/chromedp", "the console's browser tests"},
	{"modernc.org/sqlite", "SQLite (sqlfence's tests)"},
	{"github.com/go-zookeeper/zk", "the ZooKeeper client"},
	{"github.com/redis/go-redis", "the Redis client"},
	{"github.com/prometheus/client_golang", "the Prometheus exporter"},
}

// heavyKind returns what module path is when it is a heavy one, "" if not.
func heavyKind(path string) string {
	for _, h := range heavy {
		if path == h.Prefix || strings.HasPrefix(path, h.Prefix+"/") {
			return h.What
		}
	}
	return ""
}

// TestCoreConsumerBuildList builds a consumer of the core and the memory
// backend against the checkout and fails when its build list (go list -m
// all) holds a heavy module, naming each with the chain of requirements
// that brings it and what go mod why -m says; and when a package of a heavy
// module would be compiled.
func TestCoreConsumerBuildList(t *testing.T) {
	enabled(t)
	t.Parallel()
	root := checkoutRoot(t)
	mods := checkoutModules(t, root)
	s := writeScratch(t, root, mods, consumer{Name: "core+memory", Imports: coreMemory}, goEnv(""))
	s.must(t, "mod", "tidy")

	list := s.buildList(t)
	all, nonStd := s.deps(t)
	t.Logf("checkout %s (%d modules); consumer of %s, %s: %d modules in the build list, %d packages compiled (%d outside the standard library)",
		root, len(mods), pkgSimba.Path, pkgMemory.Path, len(list), len(all), len(nonStd))

	var bad []string
	var edges [][2]string
	for _, m := range list[1:] {
		what := heavyKind(m.Path)
		if what == "" {
			continue
		}
		if edges == nil {
			edges = s.graph(t)
		}
		why := s.must(t, "mod", "why", "-m", m.Path)
		bad = append(bad, fmt.Sprintf("%s (%s)\n    required by: %s\n    go mod why -m: %s",
			m, what, chain(edges, list[0].Path, m.Path), strings.Join(lines(why), " | ")))
	}
	if len(bad) > 0 {
		t.Errorf("a consumer importing only %s and %s has %d heavy modules in its build list (go list -m all, %d modules); a user would download them and be version-forced by them:\n  %s",
			pkgSimba.Path, pkgMemory.Path, len(bad), len(list), strings.Join(bad, "\n  "))
	}

	var compiled []string
	for _, p := range nonStd {
		for _, h := range heavy {
			if p == h.Prefix || strings.HasPrefix(p, h.Prefix+"/") {
				compiled = append(compiled, p)
				break
			}
		}
	}
	if len(compiled) > 0 {
		t.Errorf("a consumer importing only %s and %s compiles %d packages of heavy modules: %s",
			pkgSimba.Path, pkgMemory.Path, len(compiled), strings.Join(compiled, ", "))
	}
}

// pinnedCases are the consumers of the core and the memory backend pinned
// to older versions of heavy clients, and the package of each they use (so
// that the requirement is real and go mod tidy keeps it).
var pinnedCases = []struct {
	Name   string
	Pins   []string // module@version, required before go mod tidy
	Import pkgUse
}{
	{"client-go", []string{"k8s.io/client-go@v0.31.14", "k8s.io/api@v0.31.14", "k8s.io/apimachinery@v0.31.14"}, pkgClientGo},
	{"grpc", []string{"google.golang.org/grpc@v1.60.1"}, pkgGRPC},
	{"etcd-client", []string{"go.etcd.io/etcd/client/v3@v3.5.36"}, pkgEtcdClient},
}

// pinnedResult is a pinned module and the version go mod tidy left it at,
// with who requires that version when it moved.
type pinnedResult struct {
	Module, Pinned, After string
	MovedBy               []string
}

// tidyPinned builds the consumer of the core and the memory backend with
// the pins of case i, tidies it and returns where each pinned module ended.
func tidyPinned(t testing.TB, root string, mods []localModule, i int) []pinnedResult {
	t.Helper()
	pc := pinnedCases[i]
	c := consumer{Name: "core+memory pinned " + pc.Name, Imports: append(append([]pkgUse{}, coreMemory...), pc.Import), Requires: pc.Pins}
	s := writeScratch(t, root, mods, c, goEnv(""))
	s.must(t, "mod", "tidy")
	mainPath := strings.TrimSpace(s.must(t, "list", "-m"))
	var res []pinnedResult
	var edges [][2]string
	for _, pin := range pc.Pins {
		path, want, _ := strings.Cut(pin, "@")
		r := pinnedResult{Module: path, Pinned: want, After: s.version(t, path)}
		if r.After != want {
			if edges == nil {
				edges = s.graph(t)
			}
			for _, e := range edges {
				// The consumer itself requires it too: go mod tidy
				// rewrote its require line.
				if e[1] == path+"@"+r.After && e[0] != mainPath {
					r.MovedBy = append(r.MovedBy, e[0])
				}
			}
		}
		res = append(res, r)
	}
	return res
}

// TestPinnedVersionsStay builds consumers of the core and the memory
// backend whose go.mod first pins an older client-go (with its api and
// apimachinery), grpc or etcd client, and fails when go mod tidy moves a
// pin: minimal version selection would then force the upgrade on every
// user pinned there, whether they use the heavy backends or not.
func TestPinnedVersionsStay(t *testing.T) {
	enabled(t)
	t.Parallel()
	root := checkoutRoot(t)
	mods := checkoutModules(t, root)
	for i, pc := range pinnedCases {
		t.Run(pc.Name, func(t *testing.T) {
			t.Parallel()
			for _, r := range tidyPinned(t, root, mods, i) {
				if r.After != r.Pinned {
					t.Errorf("a consumer of %s and %s pinned to %s@%s is moved to %s by go mod tidy (which rewrites the consumer's own require line); %s@%s is required by: %s",
						pkgSimba.Path, pkgMemory.Path, r.Module, r.Pinned, r.After, r.Module, r.After, strings.Join(r.MovedBy, ", "))
				} else {
					t.Logf("%s stays at %s", r.Module, r.After)
				}
			}
		})
	}
}
