package fence_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports checks that each fence package compiles only the client of
// its own kind of resource: fencing SQL writes must not compile gRPC, the
// etcd client or go-redis. It runs `go list -deps` on the packages (their
// own imports, not their tests').
func TestImports(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the packages' imports: %v", err)
	}
	const (
		grpc  = "google.golang.org/grpc"
		redis = "github.com/redis/go-redis"
		etcd  = "go.etcd.io/etcd"
		pgx   = "github.com/jackc/pgx" // sqlfence serves SQLite too; pglease is for PostgreSQL's backend
	)
	for _, c := range []struct {
		pkg       string
		forbidden []string
	}{
		{"github.com/simba-go/simba/fence", []string{grpc, redis, etcd, "database/sql"}},
		{"github.com/simba-go/simba/fence/sqlfence", []string{grpc, redis, etcd, pgx}},
		{"github.com/simba-go/simba/backend/postgres/pglease", []string{grpc, redis, etcd}},
		{"github.com/simba-go/simba/fence/redisfence", []string{grpc, etcd, "database/sql"}},
		{"github.com/simba-go/simba/fence/etcdfence", []string{redis, "database/sql"}},
	} {
		t.Run(c.pkg[strings.LastIndex(c.pkg, "/")+1:], func(t *testing.T) {
			out, err := exec.Command(goTool, "list", "-deps", c.pkg).Output()
			if err != nil {
				var stderr []byte
				if ee, ok := err.(*exec.ExitError); ok {
					stderr = ee.Stderr
				}
				t.Fatalf("go list -deps %s: %v\n%s", c.pkg, err, stderr)
			}
			deps := strings.Fields(string(out))
			if len(deps) == 0 {
				t.Fatalf("go list -deps %s listed nothing", c.pkg)
			}
			for _, f := range c.forbidden {
				var hits []string
				for _, d := range deps {
					if d == f || strings.HasPrefix(d, f+"/") {
						hits = append(hits, d)
					}
				}
				if len(hits) > 0 {
					t.Errorf("%s compiles %s: %d of its packages, among them %s", c.pkg, f, len(hits), hits[0])
				}
			}
			t.Logf("%s: %d packages", c.pkg, len(deps))
		})
	}
}
