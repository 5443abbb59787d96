package stream_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/internal/streamtest"
	"github.com/simba-go/simba/stream"
)

// TestEtcdCrashFailOver is stream's TestCrashFailOver on a real etcd, in
// real time: three nodes, each with its own etcd client, run a stream of 8
// partitions; one node's process dies (its etcd connection closes, its
// session is abandoned and expires by its TTL); the others take its
// partitions over from their last checkpoints.
func TestEtcdCrashFailOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd server and runs for seconds of real time")
	}
	srv := etcdtest.Start(t)
	prefix := "/" + strings.ReplaceAll(t.Name(), "/", ".") + "/"
	newBackend := func() *etcd.Backend {
		b, err := etcd.New(srv.Endpoints(), etcd.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if missing := recordsMissing(t, newBackend()); missing != "" {
		t.Skipf("the etcd backend lacks the fenced-record capability %s: stream's default checkpoint store "+
			"(RecordStore, through simba.Term.PutRecord) cannot run on it yet", missing)
	}

	rec := &streamtest.Recorder{}
	const P, M = 8, 400
	src := streamtest.NewNumbered(M, 10)
	type etcdNode struct {
		name    string
		backend *etcd.Backend
		client  *simba.Client
		task    *stream.Task
	}
	var nodes []*etcdNode
	for _, name := range []string{"a", "c", "d"} {
		n := &etcdNode{name: name, backend: newBackend()}
		c, err := simba.New(n.backend, simba.WithTTL(time.Second), simba.WithMemberID(name), simba.WithLogger(streamtest.Logger(t, name)))
		if err != nil {
			t.Fatal(err)
		}
		n.client = c
		n.task, err = stream.Start(c.Group(streamtest.Group, P), src, streamtest.Handlers(rec, name, streamtest.Work(10*time.Millisecond)),
			stream.WithCheckpointStore(&streamtest.Store{Inner: stream.RecordStore{}, Rec: rec, Node: name}),
			stream.WithMaxConcurrency(2), stream.WithCommitInterval(200*time.Millisecond), stream.WithLogger(streamtest.Logger(t, name)))
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	defer func() {
		for _, n := range nodes {
			// Bounded: a client whose session never ends is left to goleak.
			stop := func() { n.task.Close(); n.client.Close() }
			if _, err := await.Within(await.Done(stop), time.Minute, "%s did not close", n.name); err != nil {
				t.Error(err)
			}
			n.backend.Close()
		}
	}()

	streamtest.WaitFor(t, 30*time.Second, "processing under way", func() bool {
		return rec.Count(func(e streamtest.Event) bool { return e.Kind == streamtest.ProcessEnd && e.Err == nil }) > P*M/4
	})
	victim := nodes[0]
	for _, n := range nodes {
		if len(n.task.Partitions()) > len(victim.task.Partitions()) {
			victim = n
		}
	}
	held := victim.task.Partitions()
	victim.backend.Close() // the process dies: no release, no goodbye
	gone := await.Done(func() { victim.task.Close(); victim.client.Close() })
	streamtest.WaitFor(t, time.Minute, "every message processed", func() bool { return rec.Processed(P, M) })
	await.For(t, gone, 10*time.Second, "%s, whose process died, did not stop, 10s after every message was processed", victim.name)
	for _, n := range nodes {
		n.task.Close()
		n.client.Close()
	}

	evs := rec.Events()
	seen, errs := streamtest.CheckCalls(evs, 2)
	errs = append(errs, streamtest.CheckCheckpoints(evs, nil)...)
	errs = append(errs, streamtest.CheckAtLeastOnce(evs, P, M)...)
	errs = append(errs, streamtest.CheckResume(evs)...)
	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		streamtest.Dump(t, evs)
	}
	t.Logf("%s crashed holding %v; %d messages processed again; concurrency %d", victim.name, held, streamtest.Duplicates(evs), seen)
}

// recordsMissing returns the name of the capability a backend's sessions
// lack for the default checkpoint store, or "".
func recordsMissing(t *testing.T, b backend.Backend) string {
	t.Helper()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.Open(ctx, backend.SessionOptions{TTL: time.Second})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close(ctx)
	if _, ok := s.(backend.Records); !ok {
		return fmt.Sprintf("backend.Records (%T has no PutRecord)", s)
	}
	return ""
}
