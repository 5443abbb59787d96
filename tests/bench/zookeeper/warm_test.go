package zookeeperbench_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/simba-go/simba/internal/zktest"
	"github.com/simba-go/simba/tests/internal/handoffbench"
)

// warmServer has the server at addr run, under root, n rounds of the
// requests the hand-offs send, from four connections at once, so that
// its JVM has compiled their code as a server that has run for a while
// has: a long-running server runs each kind thousands of times a minute,
// and its JVM compiles the code of a kind fully only after thousands of
// runs, which the benchmark's hand-offs alone, a few hundred, do not give
// the multi-operations of simba's records and release. A round: an
// ephemeral sequential znode created, its directory listed, and a release
// shaped as simba's with two records (see releaseShape.ops). It returns
// how long the rounds took.
func warmServer(t *testing.T, addr, root string, n int) time.Duration {
	t.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for w := range errs {
		c := zktest.Connect(t, addr)
		wg.Go(func() { errs[w] = warmRounds(c, fmt.Sprintf("%s/warm-%d", root, w), n/len(errs)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("warming the server up: %v", err)
	}
	return time.Since(start)
}

func warmRounds(c *zk.Conn, base string, n int) (err error) {
	r, err := newReleaseShape(c, base)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, r.remove()) }()
	for range n {
		eph, err := r.candidacy()
		if err != nil {
			return err
		}
		if _, _, err := c.Children(base + "/e"); err != nil {
			return err
		}
		ops, err := r.ops(eph, 2)
		if err != nil {
			return err
		}
		if _, err := c.Multi(ops...); err != nil {
			return fmt.Errorf("multi: %w", err)
		}
	}
	return nil
}

// releaseShape is a directory base with what simba's release writes:
// records (base/t1 and base/t2 as the top directories of two keys, each
// with its key's directory, marker and record) and a candidacy to delete
// (an ephemeral sequential znode under base/e).
type releaseShape struct {
	c    *zk.Conn
	base string
}

// releaseNodes are the persistent znodes of a releaseShape, under base,
// parents first.
var releaseNodes = []string{"", "/e", "/t1", "/t1/d", "/t1/d/=", "/t1/d/=m", "/t2", "/t2/d", "/t2/d/=", "/t2/d/=m"}

// newReleaseShape creates base's parents (as containers) and its znodes.
func newReleaseShape(c *zk.Conn, base string) (*releaseShape, error) {
	acl := zk.WorldACL(zk.PermAll)
	for i := 1; i < len(base); i++ {
		if base[i] == '/' {
			if _, err := c.CreateContainer(base[:i], nil, zk.FlagContainer, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return nil, fmt.Errorf("create %s: %w", base[:i], err)
			}
		}
	}
	for _, p := range releaseNodes {
		if _, err := c.Create(base+p, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return nil, fmt.Errorf("create %s: %w", base+p, err)
		}
	}
	return &releaseShape{c, base}, nil
}

// candidacy creates a candidacy znode and returns its path.
func (r *releaseShape) candidacy() (string, error) {
	return r.c.Create(r.base+"/e/n-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
}

// ops reads the records' versions and returns the operations of a
// release with records of them (0, 1 or 2), as simba's: for each record,
// its directory's and marker's versions checked, the record (600 and 400
// bytes) and its top directory set; then the candidacy eph deleted.
func (r *releaseShape) ops(eph string, records int) ([]any, error) {
	var ops []any
	for i := range records {
		top := fmt.Sprintf("%s/t%d", r.base, i+1)
		_, leaf, err := r.c.Get(top + "/d/=")
		if err != nil {
			return nil, err
		}
		_, dir, err := r.c.Exists(top + "/d")
		if err != nil {
			return nil, err
		}
		ops = append(ops,
			&zk.CheckVersionRequest{Path: top + "/d", Version: dir.Version},
			&zk.CheckVersionRequest{Path: top + "/d/=m", Version: 0},
			&zk.SetDataRequest{Path: top + "/d/=", Data: make([]byte, 600-200*i), Version: leaf.Version},
			&zk.SetDataRequest{Path: top, Version: -1})
	}
	return append(ops, &zk.DeleteRequest{Path: eph, Version: 0}), nil
}

// remove deletes the shape's znodes.
func (r *releaseShape) remove() error {
	for i := len(releaseNodes) - 1; i >= 0; i-- {
		if err := r.c.Delete(r.base+releaseNodes[i], -1); err != nil {
			return fmt.Errorf("delete %s: %w", r.base+releaseNodes[i], err)
		}
	}
	return nil
}

// benchMulti times, on one connection, the release alone as the server
// applies it: a candidacy's delete, and the multi-operation of the delete
// with one and with two records (see releaseShape.ops), kinds alternating,
// each sent 20 ms after the last request, as a hand-off's release comes
// after a pause.
func benchMulti(t *testing.T, addr, root string, report *strings.Builder) {
	const rounds, warmup = 300, 20
	c := zktest.Connect(t, addr)
	r, err := newReleaseShape(c, root+"/multi")
	if err != nil {
		t.Fatal(err)
	}
	kinds := []string{"delete", "delete and one record (5 operations)", "delete and two records (9 operations)"}
	took := make([][]time.Duration, len(kinds))
	for i := range warmup + rounds {
		for k := range kinds {
			eph, err := r.candidacy()
			if err != nil {
				t.Fatal(err)
			}
			ops, err := r.ops(eph, k)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
			start := time.Now()
			if k == 0 {
				err = c.Delete(eph, 0)
			} else {
				_, err = c.Multi(ops...)
			}
			if err != nil {
				t.Fatalf("%s: %v", kinds[k], err)
			}
			if i >= warmup {
				took[k] = append(took[k], time.Since(start))
			}
		}
	}
	if err := r.remove(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(report, "### The release alone (%d rounds after %d warm-up rounds, kinds alternating, 20 ms apart)\n\n", rounds, warmup)
	fmt.Fprintln(report, "| request | p50 | p90 | p99 | max |\n|---|---:|---:|---:|---:|")
	for k, ds := range took {
		fmt.Fprintf(report, "| %s | %s |\n", kinds[k], handoffbench.Summary(ds))
	}
	fmt.Fprintln(report)
}
