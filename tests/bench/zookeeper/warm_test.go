package zookeeperbench_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/simba-go/simba/internal/zktest"
)

// warmServer has the server at addr run, under root, n rounds of the
// requests the hand-offs send, from four connections at once, so that
// its JVM has compiled their code as a server that has run for a while
// has: a long-running server runs each kind thousands of times a minute,
// and its JVM compiles the code of a kind fully only after thousands of
// runs, which the benchmark's hand-offs alone, a few hundred, do not give
// the multi-operations of simba's records and release. A round: an
// ephemeral sequential znode created, its directory listed, two records
// read, and one multi-operation shaped as simba's release with two
// records (for each: its directory's and marker's versions checked, the
// record and its top directory set) that deletes the znode. It returns
// how long the rounds took.
func warmServer(t *testing.T, addr, root string, n int) time.Duration {
	t.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for w := range errs {
		c := zktest.Connect(t, addr)
		base := fmt.Sprintf("%s/warm-%d", root, w)
		wg.Go(func() { errs[w] = warmRounds(c, base, n/len(errs)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("warming the server up: %v", err)
	}
	return time.Since(start)
}

func warmRounds(c *zk.Conn, base string, n int) error {
	acl := zk.WorldACL(zk.PermAll)
	for i := 1; i < len(base); i++ { // base's parents, as containers
		if base[i] == '/' {
			if _, err := c.CreateContainer(base[:i], nil, zk.FlagContainer, acl); err != nil && err != zk.ErrNodeExists {
				return fmt.Errorf("create %s: %w", base[:i], err)
			}
		}
	}
	for _, p := range []string{"", "/e", "/t1", "/t1/d", "/t1/d/=", "/t1/d/=m", "/t2", "/t2/d", "/t2/d/=", "/t2/d/=m"} {
		if _, err := c.Create(base+p, nil, 0, acl); err != nil && err != zk.ErrNodeExists {
			return fmt.Errorf("create %s: %w", base+p, err)
		}
	}
	values := [][]byte{make([]byte, 600), make([]byte, 400)}
	for range n {
		eph, err := c.Create(base+"/e/n-", nil, zk.FlagEphemeral|zk.FlagSequence, acl)
		if err != nil {
			return err
		}
		if _, _, err := c.Children(base + "/e"); err != nil {
			return err
		}
		var ops []any
		for i, v := range values {
			top := fmt.Sprintf("%s/t%d", base, i+1)
			_, leaf, err := c.Get(top + "/d/=")
			if err != nil {
				return err
			}
			_, dir, err := c.Exists(top + "/d")
			if err != nil {
				return err
			}
			ops = append(ops,
				&zk.CheckVersionRequest{Path: top + "/d", Version: dir.Version},
				&zk.CheckVersionRequest{Path: top + "/d/=m", Version: 0},
				&zk.SetDataRequest{Path: top + "/d/=", Data: v, Version: leaf.Version},
				&zk.SetDataRequest{Path: top, Version: -1})
		}
		if _, err := c.Multi(append(ops, &zk.DeleteRequest{Path: eph, Version: 0})...); err != nil {
			return fmt.Errorf("multi: %w", err)
		}
	}
	for _, p := range []string{"/t2/d/=m", "/t2/d/=", "/t2/d", "/t2", "/t1/d/=m", "/t1/d/=", "/t1/d", "/t1", "/e", ""} {
		if err := c.Delete(base+p, -1); err != nil {
			return fmt.Errorf("delete %s: %w", base+p, err)
		}
	}
	return nil
}
