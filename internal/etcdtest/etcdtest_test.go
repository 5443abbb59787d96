package etcdtest_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartStopRestart(t *testing.T) {
	t0 := time.Now()
	srv := etcdtest.Start(t)
	t.Logf("started in %v", time.Since(t0))
	cli := srv.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	put, err := cli.Put(ctx, "/k", "v")
	if err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	for range 20 {
		if _, err := cli.Put(ctx, "/k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("put: %v", time.Since(t0)/20)
	g, err := cli.Grant(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("minimum TTL granted: %ds", g.TTL)
	w := cli.Watch(ctx, "/k", clientv3.WithRev(put.Header.Revision))
	_ = w

	t0 = time.Now()
	srv.Stop()
	t.Logf("stopped in %v", time.Since(t0))
	t0 = time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted in %v", time.Since(t0))
	t0 = time.Now()
	resp, err := cli.Get(ctx, "/k")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("client back after %v", time.Since(t0))
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" || resp.Header.Revision < put.Header.Revision {
		t.Fatalf("after restart: %v", resp)
	}
}

// TestPauseResume: while paused, a request through the endpoints gets no
// answer (it waits for its deadline); a request sent during the pause is
// answered once the server resumes.
func TestPauseResume(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := cli.Get(short, "/k")
	cancelShort()
	if err == nil {
		t.Fatal("Get answered while the server was paused")
	}
	answered := make(chan error, 1)
	go func() { _, err := cli.Put(ctx, "/k", "w"); answered <- err }()
	select {
	case err := <-answered:
		srv.Resume()
		t.Fatalf("Put answered while the server was paused: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	srv.Resume()
	if err := <-answered; err != nil {
		t.Fatalf("Put sent during the pause, after Resume: %v", err)
	}
	resp, err := cli.Get(ctx, "/k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "w" {
		t.Fatalf("after Resume: %v, %v", resp, err)
	}
}
