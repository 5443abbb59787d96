package simtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/fence"
)

// ErrCrashed is returned by a resource operation of a node whose process
// has crashed, or that simtest killed because its client would not close:
// a dead process reaches nothing.
var ErrCrashed = errors.New("simtest: the node's process has crashed")

// Op is one operation on a resource, as the resource applied it.
type Op struct {
	Resource string    // the resource's name
	Node     string    // the process that sent it
	Kind     string    // "read", "write", "claim" or "append"
	Key      string    // the key (KV), "" for the others
	Value    string    // what was written, or what the read returned
	Token    uint64    // the writer's token; 0 for reads and unfenced writes
	Issued   time.Time // when the node called it
	At       time.Time // when the resource applied it
	Accepted bool      // false: the fence refused it
}

// String describes the operation as the timeline prints it.
func (o Op) String() string {
	what := o.Kind
	if o.Key != "" {
		what += " " + strconv.Quote(o.Key)
	}
	if o.Value != "" {
		what += " " + o.Value
	}
	tok := "no token"
	if o.Token > 0 {
		tok = fmt.Sprintf("token %d", o.Token)
	}
	verdict := "ok"
	if !o.Accepted {
		verdict = "REFUSED (stale token)"
	}
	if o.Kind == "read" {
		return fmt.Sprintf("%s %s: %s", o.Resource, what, verdict)
	}
	return fmt.Sprintf("%s %s (%s): %s", o.Resource, what, tok, verdict)
}

// cell is one versioned value of a resource.
type cell struct {
	value   string
	version uint64 // 0: never written
	token   uint64 // the token of the write that made this version
	node    string
}

// store is the shared state of one named resource: the cells, the highest
// token recorded (by a write or a claim), and every operation.
type store struct {
	c      *Cluster
	name   string
	kind   string
	mu     sync.Mutex
	high   uint64 // highest token recorded
	owner  string // the node whose write or claim recorded high
	cells  map[string]*cell
	seen   map[string]uint64 // node+"\x00"+key: the last version that node read or wrote
	late   map[uint64]bool   // tokens already reported as sent late
	log    []string          // a Log's entries
	ops    []Op
	broken []violation
}

// store returns the resource of kind named name: resources of different
// kinds are apart even under one name.
func (c *Cluster) store(name, kind string) *store {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := kind + "\x00" + name
	if s, ok := c.stores[key]; ok {
		return s
	}
	s := &store{c: c, name: name, kind: kind, cells: map[string]*cell{}, seen: map[string]uint64{}, late: map[uint64]bool{}}
	c.stores[key] = s
	c.storeOrder = append(c.storeOrder, s)
	return s
}

// handle is one node's connection to a store: its operations wait while the
// node is paused, cross the cluster's latency, and fail once it crashed.
type handle struct {
	s *store
	n *Node // nil: the test itself, which is never paused
}

// exchange runs apply at the store as one operation of h's node. A call
// whose ctx has ended sends nothing. Otherwise the request waits out a
// pause of the node (a frozen process notices no ctx), crosses the link
// (on the wire, it arrives whatever becomes of the ctx), and is applied;
// its reply crosses back, to a process that may since have been paused.
// issued is when the node called.
func (h handle) exchange(ctx context.Context, apply func(issued time.Time) error) error {
	issued := time.Now()
	if h.n == nil {
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		return apply(issued)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := h.n.frozen(); err != nil {
		return err
	}
	lat := h.s.c.cfg.ResourceLatency / 2
	time.Sleep(lat)
	h.s.mu.Lock()
	err := apply(issued)
	h.s.mu.Unlock()
	// The operation has taken effect; its reply may be late.
	if !backoff.Sleep(ctx, lat) && err == nil {
		err = ctx.Err()
	}
	if ferr := h.n.frozen(); ferr != nil && err == nil {
		err = ferr
	}
	return err
}

func (h handle) nodeName() string {
	if h.n == nil {
		return "test"
	}
	return h.n.name
}

// read returns the cell of key, records the read and what the node has
// seen. With s.mu held.
func (h handle) read(issued time.Time, key string) *cell {
	s := h.s
	cl := s.cells[key]
	if cl == nil {
		cl = &cell{}
		s.cells[key] = cl
	}
	if h.n != nil {
		s.seen[h.n.name+"\x00"+key] = cl.version
	}
	s.ops = append(s.ops, Op{Resource: s.name, Node: h.nodeName(), Kind: "read", Key: key, Value: cl.value, Issued: issued, At: time.Now(), Accepted: true})
	return cl
}

// fenceCheck applies the fence to token, records the operation, and
// returns a *fence.StaleError when the fence refuses it. With s.mu held.
func (h handle) fenceCheck(issued time.Time, kind, key, value string, token uint64) error {
	s := h.s
	op := Op{Resource: s.name, Node: h.nodeName(), Kind: kind, Key: key, Value: value, Token: token, Issued: issued, At: time.Now(), Accepted: true}
	fenced := token > 0 && !s.c.cfg.Unfenced
	if fenced && token < s.high {
		op.Accepted = false
		s.ops = append(s.ops, op)
		return &fence.StaleError{Resource: s.name, Token: token, Highest: s.high}
	}
	// What the resource accepted: the checks of the package.
	switch {
	case token == 0 && s.high > 0 && s.owner != op.Node:
		s.broke(op.At, "I3", "%s: %s wrote without a token, after %s recorded token %d: a write a fence would have refused", s.name, op.Node, s.owner, s.high)
	case token == 0 && h.n != nil && !s.c.holdsTerm(op.Node, op.At):
		s.broke(op.At, "I3", "%s: %s wrote without a token while it held no term: nothing refused the write of a deposed leader", s.name, op.Node)
	case token > 0 && token < s.high:
		s.broke(op.At, "I3", "%s: %s's write with token %d accepted after token %d was recorded by %s: a stale write", s.name, op.Node, token, s.high, s.owner)
	}
	if late := s.c.lateOp(op); late != "" && !s.late[token] {
		s.late[token] = true // once per term: the rest say the same
		s.broke(op.At, "late", "%s: %s", s.name, late)
	}
	if token >= s.high && token > 0 {
		s.high, s.owner = token, op.Node
	}
	s.ops = append(s.ops, op)
	return nil
}

// write sets key to value after a fence check, and reports an update lost
// when the key holds a version written by another term that the writer
// has not read. A KV's Put of the value the key already holds loses
// nothing (a message processed twice writes it again). With s.mu held.
func (h handle) write(issued time.Time, key, value string, token uint64) error {
	s := h.s
	if err := h.fenceCheck(issued, "write", key, value, token); err != nil {
		return err
	}
	cl := s.cells[key]
	if cl == nil {
		cl = &cell{}
		s.cells[key] = cl
	}
	node := h.nodeName()
	seenKey := node + "\x00" + key
	seen, read := s.seen[seenKey]
	rewrite := s.kind == "kv" && cl.value == value // a redelivered message's write, say
	lossy := s.kind != "register"                  // a register's writes are blind: they lose nothing
	if lossy && read && !rewrite && cl.version > seen && (cl.token != token || cl.node != node) {
		s.broke(time.Now(), "lost-update", "%s: %s (token %d) overwrote %s%s, written by %s (token %d), which it had not read: that update is lost",
			s.name, node, token, keyName(key), cl.value, cl.node, cl.token)
	}
	cl.value, cl.version, cl.token, cl.node = value, cl.version+1, token, node
	s.seen[seenKey] = cl.version
	return nil
}

func keyName(key string) string {
	if key == "" {
		return ""
	}
	return strconv.Quote(key) + "="
}

// broke records a violation found at the resource. With s.mu held.
func (s *store) broke(at time.Time, inv, format string, args ...any) {
	s.broken = append(s.broken, violation{inv: inv, at: at, err: fmt.Errorf("%s: "+format, append([]any{inv}, args...)...)})
}

func (s *store) snapshot() ([]Op, []violation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ops), slices.Clone(s.broken)
}

// claim records token, as a fenced write of nothing would. With s.mu held.
func (h handle) claim(issued time.Time, token uint64) error {
	return h.fenceCheck(issued, "claim", "", "", token)
}

// Register is a fenced last-writer-wins value, such as a row a leader
// overwrites. A write carries its term's token; the register refuses a
// token lower than the highest it has recorded, with a
// [*fence.StaleError]. Token 0 writes without fencing, as a write that
// bypasses the fence would, and is checked instead: accepted once another
// node has recorded a token, it is a violation. Writes are blind: the
// register finds stale writes, not lost updates (see [Counter] and [KV]).
type Register struct{ h handle }

// Register returns node n's handle on the register name, created empty on
// first use; every node's handle of one name reaches the same register.
func (n *Node) Register(name string) *Register {
	return &Register{handle{n.c.store(name, "register"), n}}
}

// Register returns the test's own handle on the register name, for
// invariants: it is never paused and takes no time.
func (c *Cluster) Register(name string) *Register {
	return &Register{handle{c.store(name, "register"), nil}}
}

// Read returns the register's value ("" before any write).
func (r *Register) Read(ctx context.Context) (string, error) {
	var v string
	err := r.h.exchange(ctx, func(at time.Time) error { v = r.h.read(at, "").value; return nil })
	return v, err
}

// Write sets the register to value, fenced by token.
func (r *Register) Write(ctx context.Context, token uint64, value string) error {
	return r.h.exchange(ctx, func(at time.Time) error { return r.h.write(at, "", value, token) })
}

// Claim records token without writing: from then on every lower token is
// refused. Run it at the start of a term, before reading (simba.WithClaim).
func (r *Register) Claim(ctx context.Context, token uint64) error {
	return r.h.exchange(ctx, func(at time.Time) error { return r.h.claim(at, token) })
}

// Counter is a fenced integer that leaders read and write back, the shape
// of every read-modify-write. Besides the fence, it finds lost updates: a
// write over a value written by another term that the writer has not read
// (a new leader that read before a deposed leader's write landed, and then
// wrote over it). Add is the atomic increment, which loses nothing.
type Counter struct{ h handle }

// Counter returns node n's handle on the counter name (0 at first).
func (n *Node) Counter(name string) *Counter {
	return &Counter{handle{n.c.store(name, "counter"), n}}
}

// Counter returns the test's own handle on the counter name, for
// invariants.
func (c *Cluster) Counter(name string) *Counter {
	return &Counter{handle{c.store(name, "counter"), nil}}
}

// Get returns the counter's value.
func (k *Counter) Get(ctx context.Context) (int64, error) {
	var s string
	err := k.h.exchange(ctx, func(at time.Time) error { s = k.h.read(at, "").value; return nil })
	return atoi(s), err
}

// Set writes v, fenced by token.
func (k *Counter) Set(ctx context.Context, token uint64, v int64) error {
	return k.h.exchange(ctx, func(at time.Time) error { return k.h.write(at, "", strconv.FormatInt(v, 10), token) })
}

// Add adds delta in one step at the counter, fenced by token, and returns
// the new value.
func (k *Counter) Add(ctx context.Context, token uint64, delta int64) (int64, error) {
	var v int64
	err := k.h.exchange(ctx, func(at time.Time) error {
		v = atoi(k.h.read(at, "").value) + delta
		return k.h.write(at, "", strconv.FormatInt(v, 10), token)
	})
	return v, err
}

// Claim records token without writing (see [Register.Claim]).
func (k *Counter) Claim(ctx context.Context, token uint64) error {
	return k.h.exchange(ctx, func(at time.Time) error { return k.h.claim(at, token) })
}

func atoi(s string) int64 {
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}

// KV is a fenced key-value map: one fence for all its keys, as with one
// fence table for a whole database. Like [Counter], it finds lost updates
// per key; a key a node has never read or written is written blind, and a
// Put of the value the key already holds rewrites it: neither loses
// anything.
type KV struct{ h handle }

// KV returns node n's handle on the map name (empty at first).
func (n *Node) KV(name string) *KV { return &KV{handle{n.c.store(name, "kv"), n}} }

// KV returns the test's own handle on the map name, for invariants.
func (c *Cluster) KV(name string) *KV { return &KV{handle{c.store(name, "kv"), nil}} }

// Get returns the value of key, and whether it was ever written.
func (m *KV) Get(ctx context.Context, key string) (string, bool, error) {
	var cl cell
	err := m.h.exchange(ctx, func(at time.Time) error { cl = *m.h.read(at, key); return nil })
	return cl.value, cl.version > 0, err
}

// Put sets key to value, fenced by token.
func (m *KV) Put(ctx context.Context, token uint64, key, value string) error {
	return m.h.exchange(ctx, func(at time.Time) error { return m.h.write(at, key, value, token) })
}

// Claim records token without writing (see [Register.Claim]).
func (m *KV) Claim(ctx context.Context, token uint64) error {
	return m.h.exchange(ctx, func(at time.Time) error { return m.h.claim(at, token) })
}

// Log is a fenced, checkpointed log: the output of a consumer, and the
// checkpoint it resumes from. Append adds entries and moves the checkpoint
// in one fenced step, as a transaction that writes a batch's results with
// its offset does; a deposed consumer's late batch is refused once a newer
// term has claimed or appended. The checkpoint is a value like a
// [Counter]'s: a batch appended from a checkpoint its writer did not read
// last is a lost update (a batch processed twice, or one skipped).
type Log struct{ h handle }

// Log returns node n's handle on the log name (empty, checkpoint 0).
func (n *Node) Log(name string) *Log { return &Log{handle{n.c.store(name, "log"), n}} }

// Log returns the test's own handle on the log name, for invariants.
func (c *Cluster) Log(name string) *Log { return &Log{handle{c.store(name, "log"), nil}} }

// Checkpoint returns the log's checkpoint: where the next batch starts.
func (l *Log) Checkpoint(ctx context.Context) (int64, error) {
	var s string
	err := l.h.exchange(ctx, func(at time.Time) error { s = l.h.read(at, "").value; return nil })
	return atoi(s), err
}

// Append adds entries and sets the checkpoint to checkpoint, fenced by
// token, in one step.
func (l *Log) Append(ctx context.Context, token uint64, checkpoint int64, entries ...string) error {
	return l.h.exchange(ctx, func(at time.Time) error {
		if err := l.h.write(at, "", strconv.FormatInt(checkpoint, 10), token); err != nil {
			return err
		}
		l.h.s.log = append(l.h.s.log, entries...)
		return nil
	})
}

// Claim records token without writing (see [Register.Claim]).
func (l *Log) Claim(ctx context.Context, token uint64) error {
	return l.h.exchange(ctx, func(at time.Time) error { return l.h.claim(at, token) })
}

// Entries returns every entry appended, in order.
func (l *Log) Entries(ctx context.Context) ([]string, error) {
	var out []string
	err := l.h.exchange(ctx, func(time.Time) error { out = slices.Clone(l.h.s.log); return nil })
	return out, err
}
