package stream_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/streamtest"
	"github.com/simba-go/simba/stream"
)

// testTTL is the session TTL of the tests: renewals every second; a crashed
// node's partitions are taken over about 3s after its last renewal.
const testTTL = 3 * time.Second

// The recorder, handlers, source, checkpoint store and checkers of the
// tests are internal/streamtest's, shared with the tests module's etcd
// tests (tests/stream); here by short names.
type (
	ev            = streamtest.Event
	kind          = streamtest.Kind
	recorder      = streamtest.Recorder
	handler       = streamtest.Handler
	windowHandler = streamtest.WindowHandler
	numbered      = streamtest.Numbered
	store         = streamtest.Store
	grant         = streamtest.Grant
	termKey       = streamtest.TermKey
)

const (
	kStart  = streamtest.ProcessStart
	kEnd    = streamtest.ProcessEnd
	kWStart = streamtest.WindowStart
	kWEnd   = streamtest.WindowEnd
	kInit   = streamtest.HandlerInit
	kClose  = streamtest.HandlerClose
	kLoad   = streamtest.CheckpointLoad
	kSave   = streamtest.CheckpointSave
	kSaved  = streamtest.CheckpointSaved

	group = streamtest.Group
)

var (
	waitFor          = streamtest.WaitFor
	testLogger       = streamtest.Logger
	work             = streamtest.Work
	handlers         = streamtest.Handlers
	windowHandlers   = streamtest.WindowHandlers
	newNumbered      = streamtest.NewNumbered
	checkCalls       = streamtest.CheckCalls
	checkCheckpoints = streamtest.CheckCheckpoints
	checkAtLeastOnce = streamtest.CheckAtLeastOnce
	checkResume      = streamtest.CheckResume
	dump             = streamtest.Dump
	duplicates       = streamtest.Duplicates
)

// node is one simulated process running a stream.
type node struct {
	name   string
	conn   *memory.Node
	client *simba.Client
	task   *stream.Task
	store  *store

	mu     sync.Mutex
	events []simba.Event
}

func (n *node) event(e simba.Event) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events = append(n.events, e)
}

// failures returns the partition errors its runs returned.
func (n *node) failures() []*stream.PartitionError {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*stream.PartitionError
	for _, e := range n.events {
		if w, ok := e.(simba.WorkCompleted); ok {
			var pe *stream.PartitionError
			if errors.As(w.Err, &pe) {
				out = append(out, pe)
			}
		}
	}
	return out
}

// startNode starts a client on its own memory node, and a stream on it.
func startNode(t *testing.T, b *memory.Backend, name string, partitions int, src stream.Source, rec *recorder,
	newHandler func(int) stream.Handler, opts ...stream.Option) *node {
	t.Helper()
	n := &node{name: name, conn: b.Node(name)}
	c, err := simba.New(n.conn, simba.WithTTL(testTTL), simba.WithMemberID(name),
		simba.WithEventHandler(n.event), simba.WithLogger(testLogger(t, name)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	n.client = c
	n.store = &store{Inner: stream.RecordStore{}, Rec: rec, Node: name}
	opts = append([]stream.Option{stream.WithCheckpointStore(n.store), stream.WithLogger(testLogger(t, name))}, opts...)
	n.task, err = stream.Start(c.Group(group, partitions), src, newHandler, opts...)
	if err != nil {
		c.Close()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		// When the test failed early: heal the link first. A node whose
		// client cannot close even so (a crashed node whose deadline
		// never passes) keeps its goroutines, and the test's synctest
		// bubble, alive for ever: end the binary with a panic that says
		// so rather than hang.
		n.conn.Heal()
		await.Cleanup(t, await.Done(n.stop), stopBound, "the task and client of %s did not close", name)
	})
	return n
}

// stopBound bounds how long a test's clean-up waits for a node to stop, in
// virtual time.
const stopBound = time.Hour

// stop closes the task, then the client.
func (n *node) stop() {
	n.task.Close()
	n.client.Close()
}

// crash kills the node's process: its backend connection dies at once and
// its goroutines are stopped in the background.
func (n *node) crash() <-chan struct{} {
	n.conn.Crash()
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.client.Close()
		n.task.Close()
	}()
	return done
}
