package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kit/frame"
	"github.com/simba-go/simba/backend/kit/wake"
)

// Records (see the package documentation, # Records).
//
// The record at key is the persistent znode <root>/rec/<key>/= : its
// directory <root>/rec/<key> and the directories above it are container
// znodes, which the server deletes once empty, and "=" holds the record.
// Keeping the record in a leaf of its own lets "a" and "a/b" both be
// records: a znode that is a record cannot be a container (the server
// would delete it, record and all, once its last child is gone), and a
// directory that is not a container would stay forever. A key segment
// "." or ".." (which ZooKeeper refuses as a znode name) is stored as
// "%2E" or "%2E%2E".
//
// The leaf's data is the record's stored form (see backend/kit/frame): the
// token of the write that stored it, 8 bytes big-endian (0 for an unfenced
// write), followed by the value. A record's
// Version is the leaf's mzxid, the zxid of the transaction that last wrote
// it: it changes with every write and is never reused, even by a record
// deleted and created again, unlike the znode's data version, which starts
// again at 0.
//
// Two directory versions serve the writes:
//   - The data version of the key's directory goes up with every delete of
//     the record, and every update or delete checks it: with the leaf's own
//     data version, which a delete and a create set back to 0, it proves
//     that the record was neither changed nor deleted and created again
//     since it was read.
//   - The data version of the directory of the key's first segment (for
//     "ops/disable/x", <root>/rec/ops) goes up with every write: a watch on
//     that one znode sees every change under it (see WatchRecords).
//
// The directory's versions start again when the server deletes it (a
// container, once the record is deleted) and a later write creates it
// again; so does the new leaf's. The marker <dir>/=<czxid in base 36>, an
// empty persistent znode, tells two lives of a directory apart: every put
// checks that the marker of the czxid it read exists (or creates it, with
// the record or for a record written before markers), and a delete deletes
// the markers it read, so that the directory can go. A put that read one
// life and writes into the next fails the check; a delete fails to delete
// the old life's marker.
//
// The directories keep no data: only their versions change.

var _ backend.SkipReporter = (*session)(nil)

// encodeRecord returns the data of a record's leaf written with token (see
// backend/kit/frame).
func encodeRecord(token uint64, value []byte) []byte { return frame.Encode(token, value) }

// decodeRecord returns the record at key from its leaf's data and stat, or
// a *backend.MalformedError when the data is too short to hold the token:
// data that this backend did not write.
func decodeRecord(key string, data []byte, st *zk.Stat) (backend.Record, *backend.MalformedError) {
	r, bad := frame.Decode(key, data)
	if bad == nil {
		r.Version = uint64(st.Mzxid)
	}
	return r, bad
}

// GetRecord returns the record at key, or an error wrapping
// [backend.ErrNoRecord]: one read. It implements [backend.Records], as the
// other record methods do.
func (s *session) GetRecord(ctx context.Context, key string) (backend.Record, error) {
	if err := checkKey(key); err != nil {
		return backend.Record{}, err
	}
	return call(s, ctx, fmt.Sprintf("get record %q", key), func(c *zk.Conn) (backend.Record, error) {
		// The directory is read too, in the same round trip, for the
		// record cache (see ReleaseWithRecords).
		var r recordRead
		var err error
		if derr := together(2, func(i int) error {
			if i == 0 {
				r.data, r.st, err = c.Get(s.p.record(key))
				r.present = err == nil
				return nil
			}
			var err error
			r.dirOK, r.dir, r.marks, err = readDir(c, s.p.recordDir(key))
			return err
		}); derr != nil {
			return backend.Record{}, derr
		} else if err == nil || errors.Is(err, zk.ErrNoNode) {
			s.noteRead(s.p.record(key), r)
		}
		data, st := r.data, r.st
		if errors.Is(err, zk.ErrNoNode) {
			return backend.Record{}, backend.ErrNoRecord
		}
		if err != nil {
			return backend.Record{}, err
		}
		rec, bad := decodeRecord(key, data, st)
		if bad != nil {
			return backend.Record{}, bad
		}
		return rec, nil
	})
}

// ListRecords returns the records whose keys start with prefix, sorted by
// key. It walks the directories under the deepest one that prefix names
// in full, one level per round trip (the requests of a level go out
// together), then reads the records together. It is not a snapshot: each
// record is read as it is at some instant during the call. A leaf whose
// data is too short to be a record is skipped, and logged.
func (s *session) ListRecords(ctx context.Context, prefix string) ([]backend.Record, error) {
	out, skipped, err := s.ListRecordsWithSkipped(ctx, prefix)
	for _, bad := range skipped {
		s.b.cfg.logger.Warn("simba/zookeeper: skipping a record znode", "path", s.p.record(bad.Key), "reason", bad.Reason)
	}
	return out, err
}

// ListRecordsWithSkipped is ListRecords, which also returns the leaves it
// skipped; it implements [backend.SkipReporter], with MembersWithSkipped.
//
// While a WatchRecords call of this session watches exactly prefix and its
// watch is set, the listing is answered from the last one read since the
// watch was set, as long as the watch has not fired: no request, and as
// current as a read would be (see recordWatch.listing).
func (s *session) ListRecordsWithSkipped(ctx context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	kept, w, fires := s.watchedListing(prefix)
	if kept != nil {
		return kept.clone()
	}
	l, err := call(s, ctx, fmt.Sprintf("list records %q", prefix), func(c *zk.Conn) (*recordListing, error) {
		s.listReads.Add(1)
		out, skipped, err := s.listRecords(c, prefix)
		return &recordListing{records: out, skipped: skipped}, err
	})
	if err != nil {
		return nil, nil, err
	}
	if w != nil {
		s.keepListing(w, fires, l)
	}
	return l.clone()
}

// recordListing is what ListRecordsWithSkipped read.
type recordListing struct {
	records []backend.Record
	skipped []backend.MalformedError
}

// clone returns the listing's records and skipped leaves, as copies the
// caller may keep and change.
func (l *recordListing) clone() ([]backend.Record, []backend.MalformedError, error) {
	out := slices.Clone(l.records)
	for i := range out {
		out[i].Value = slices.Clone(out[i].Value)
	}
	return out, slices.Clone(l.skipped), nil
}

// watchedListing returns the listing kept by a watch of exactly prefix
// that is set and has not fired since it was read; else, such a watch that
// is set, with its count of events, for keepListing; else nothing.
func (s *session) watchedListing(prefix string) (*recordListing, *recordWatch, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var armed *recordWatch
	for w := range s.recWatches {
		if w.prefix != prefix || !w.single || !w.armed {
			continue
		}
		if w.listing != nil && w.listedAt == w.fires {
			return w.listing, nil, 0
		}
		armed = w
	}
	if armed == nil {
		return nil, nil, 0
	}
	return nil, armed, armed.fires
}

// keepListing keeps l, read with w's watch set at its count of events
// fires, unless the watch has fired since: every change to the records
// under w's prefix made before the read began is in l (the read followed
// the watch's setting on the session), and none was made during or after
// it (it would have fired the watch).
func (s *session) keepListing(w *recordWatch, fires uint64, l *recordListing) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.armed && w.fires == fires {
		w.listing, w.listedAt = l, fires
	}
}

// recordNode is a directory or leaf znode of the records, with its key.
type recordNode struct{ path, key string }

func (s *session) listRecords(c *zk.Conn, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	start := recordNode{s.p.root + recordDir, ""}
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		base := prefix[:i]
		for seg := range strings.SplitSeq(base, "/") {
			if !validSegment(seg) {
				return nil, nil, nil // no key starts with prefix
			}
		}
		start = recordNode{s.p.recordDir(base), base}
	}
	var leaves []recordNode
	for level := []recordNode{start}; len(level) > 0; {
		children := make([][]string, len(level))
		if err := together(len(level), func(i int) error {
			names, _, err := c.Children(level[i].path)
			if errors.Is(err, zk.ErrNoNode) {
				return nil
			}
			children[i] = names
			return err
		}); err != nil {
			return nil, nil, err
		}
		var next []recordNode
		for i, dir := range level {
			for _, name := range children[i] {
				if name == recordLeaf {
					if dir.key != "" && strings.HasPrefix(dir.key, prefix) {
						leaves = append(leaves, recordNode{dir.path + "/" + name, dir.key})
					}
					continue
				}
				seg, ok := decodeSegment(name)
				if !ok {
					continue
				}
				key := seg
				if dir.key != "" {
					key = dir.key + "/" + seg
				}
				if strings.HasPrefix(key, prefix) || strings.HasPrefix(prefix, key+"/") {
					next = append(next, recordNode{dir.path + "/" + name, key})
				}
			}
		}
		level = next
	}
	out := make([]backend.Record, len(leaves))
	bad := make([]backend.MalformedError, len(leaves))
	if err := together(len(leaves), func(i int) error {
		data, st, err := c.Get(leaves[i].path)
		switch {
		case errors.Is(err, zk.ErrNoNode): // deleted meanwhile
		case err != nil:
			return err
		default:
			r, malformed := decodeRecord(leaves[i].key, data, st)
			if malformed != nil {
				bad[i] = *malformed
				return nil
			}
			out[i] = r
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	out = slices.DeleteFunc(out, func(r backend.Record) bool { return r.Key == "" })
	slices.SortFunc(out, func(x, y backend.Record) int { return strings.Compare(x.Key, y.Key) })
	bad = slices.DeleteFunc(bad, func(m backend.MalformedError) bool { return m.Key == "" })
	slices.SortFunc(bad, func(x, y backend.MalformedError) int { return strings.Compare(x.Key, y.Key) })
	if len(bad) == 0 {
		bad = nil
	}
	return out, bad, nil
}

// together runs f(0), …, f(n-1) on goroutines, at most 32 at a time, so
// that their requests go out together, and returns their errors joined.
func together(n int, f func(i int) error) error { return togetherN(n, 32, f) }

// togetherN is together with at most k at a time.
func togetherN(n, k int, f func(i int) error) error {
	if n == 1 {
		return f(0)
	}
	errs := make([]error, n)
	sem := make(chan struct{}, k)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = f(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// PutRecord writes value at key if cond holds, and returns the record as
// written (see the package documentation, # Records, for what is checked
// atomically with the write and what just before it).
func (s *session) PutRecord(ctx context.Context, key string, value []byte, cond backend.Condition) (backend.Record, error) {
	if err := checkRecord(key, value); err != nil {
		return backend.Record{}, err
	}
	w := &recordWrite{s: s, op: fmt.Sprintf("put record %q", key), key: key, put: true, value: value, cond: cond}
	return w.run(ctx)
}

// DeleteRecord removes the record at key if cond holds. Deleting a key
// with no record is not an error, unless cond requires a version other
// than 0 (or a lease not held).
func (s *session) DeleteRecord(ctx context.Context, key string, cond backend.Condition) error {
	if err := checkKey(key); err != nil {
		return err
	}
	w := &recordWrite{s: s, op: fmt.Sprintf("delete record %q", key), key: key, cond: cond}
	_, err := w.run(ctx)
	return err
}

// recordWrite is one PutRecord or DeleteRecord call.
type recordWrite struct {
	s     *session
	op    string
	key   string
	put   bool // put value; else delete
	value []byte
	cond  backend.Condition
	fence string // a fenced write: the path of the session's candidacy that holds cond.Lease
}

// writeResult is the outcome of one try of a record write: the record
// written, or again when the record or its directory changed between the
// read and the write, and the write is to be tried anew.
type writeResult struct {
	rec   backend.Record
	again bool
}

// run tries the write until it is done, refused, or ctx ends. A try is
// repeated only when something changed between its read and its write;
// the condition is then evaluated again on what changed.
func (w *recordWrite) run(ctx context.Context) (backend.Record, error) {
	s := w.s
	if err := s.live(w.op); err != nil {
		return backend.Record{}, err
	}
	if w.cond.Token != 0 {
		l := s.holding(w.cond.Lease, w.cond.Token)
		if l == nil {
			// The holding is not (or no longer) this session's: its
			// candidacy, whose czxid is the token, is gone or was never
			// ours.
			return backend.Record{}, fmt.Errorf("simba/zookeeper: %s: %w", w.op, w.leaseConflict())
		}
		w.fence = l.path
	}
	for attempt := 1; ; attempt++ {
		res, err := call(s, ctx, w.op, func(c *zk.Conn) (writeResult, error) { return w.try(ctx, c) })
		if err != nil || !res.again {
			return res.rec, err
		}
		if attempt > 2 && !s.sleep(ctx, backoff.Wait(attempt-2, s.link.granted()/10)) {
			if err := s.live(w.op); err != nil {
				return backend.Record{}, err
			}
			return backend.Record{}, fmt.Errorf("simba/zookeeper: %s: %w", w.op, ctx.Err())
		}
	}
}

func (w *recordWrite) leaseConflict() error {
	return fmt.Errorf("lease %q is not held with token %d by session %s: %w", w.cond.Lease, w.cond.Token, w.s.sid, backend.ErrConflict)
}

// try reads, checks and writes once: the record, its directory and the
// fence's lease znode are read together, the condition is checked on what
// was read, and one multi-operation writes if nothing read has changed.
func (w *recordWrite) try(ctx context.Context, c *zk.Conn) (writeResult, error) {
	r, err := w.read(c)
	if err != nil {
		return writeResult{}, err
	}
	if done, err := w.check(r); done || err != nil {
		return writeResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return writeResult{}, err // the caller has gone: write nothing
	}
	return w.write(c, r)
}

// recordRead is what a record write read before writing.
type recordRead struct {
	data           []byte
	st, dir, lease *zk.Stat
	present, dirOK bool     // the record, and its directory, exist
	leaseOK        bool     // the fence's lease znode exists
	marks          []string // the markers in the directory, of this life or not
}

// state is what the write's operations are built on.
func (r recordRead) state() recordState {
	st := recordState{present: r.present, marks: r.marks}
	if r.present {
		st.leaf = r.st.Version
	}
	if r.dirOK {
		st.dir, st.czxid = r.dir.Version, r.dir.Czxid
		st.marked = slices.Contains(r.marks, recordMark(r.dir.Czxid))
	}
	return st
}

// readDir reads a record's directory: whether it exists, its stat, and
// the markers among its children (see the Records comment above).
func readDir(c *zk.Conn, dir string) (ok bool, st *zk.Stat, marks []string, err error) {
	names, st, err := c.Children(dir)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return false, nil, nil, nil
	case err != nil:
		return false, nil, nil, err
	}
	for _, n := range names {
		if isRecordMark(n) {
			marks = append(marks, n)
		}
	}
	return true, st, marks, nil
}

// read reads the record, its directory and, for a fenced write, the
// session's candidacy znode that holds the lease, together: one round
// trip.
func (w *recordWrite) read(c *zk.Conn) (recordRead, error) {
	s := w.s
	s.recordReads.Add(1)
	var r recordRead
	n := 2
	if w.cond.Token != 0 {
		n = 3
	}
	err := together(n, func(i int) error {
		var err error
		switch i {
		case 0:
			r.data, r.st, err = c.Get(s.p.record(w.key))
			r.present = err == nil
			if errors.Is(err, zk.ErrNoNode) {
				err = nil
			}
		case 1:
			r.dirOK, r.dir, r.marks, err = readDir(c, s.p.recordDir(w.key))
		case 2:
			r.leaseOK, r.lease, err = c.Exists(w.fence)
		}
		return err
	})
	if err == nil {
		s.noteRead(s.p.record(w.key), r)
	}
	return r, err
}

// check evaluates the condition on what was read. It reports done for a
// delete with nothing to delete, and an error wrapping ErrConflict when
// the condition does not hold.
func (w *recordWrite) check(r recordRead) (done bool, err error) {
	cond := w.cond
	if cond.Token != 0 && (!r.leaseOK || uint64(r.lease.Czxid) != cond.Token || r.lease.EphemeralOwner != w.s.id) {
		return false, w.leaseConflict()
	}
	var cur backend.Record
	if r.present {
		cur, _ = decodeRecord(w.key, r.data, r.st) // unreadable data: token 0
		cur.Version = uint64(r.st.Mzxid)
	}
	if cond.Token != 0 && cur.Token > cond.Token {
		return false, fmt.Errorf("written with token %d, newer than %d: %w", cur.Token, cond.Token, backend.ErrConflict)
	}
	if cond.IfVersion && cur.Version != cond.Version {
		return false, fmt.Errorf("version %d, not %d: %w", cur.Version, cond.Version, backend.ErrConflict)
	}
	return !w.put && !r.present, nil
}

// write writes in one multi-operation, provided that what r read has not
// changed since: the lease znode's version (a fenced write), the record's
// and its directory's versions (a record that was read), or the record's
// absence (a create). It returns again when any of these changed.
func (w *recordWrite) write(c *zk.Conn, r recordRead) (writeResult, error) {
	s, cond := w.s, w.cond
	fenced := cond.Token != 0
	dir := s.p.recordDir(w.key)
	ops, again, err := w.ops(c, r)
	if again || err != nil {
		return writeResult{again: again}, err
	}
	res, err := c.Multi(ops...)
	if err == nil {
		s.noteMulti(ops, res)
		// Every znode a multi-operation writes gets its zxid as mzxid:
		// the last operation's stat carries the leaf's new version.
		written := backend.Record{Key: w.key, Value: slices.Clone(w.value), Version: uint64(res[len(res)-1].Stat.Mzxid), Token: cond.Token}
		return writeResult{rec: written}, nil
	}
	failed := -1
	if len(res) == len(ops) {
		failed = slices.IndexFunc(res, func(r zk.MultiResponse) bool { return r.Error != nil })
	}
	switch {
	case failed < 0:
		return writeResult{}, err // no answer: maybe applied
	case fenced && failed == 0:
		// The lease znode was deleted (or changed) since it was read.
		return writeResult{}, w.leaseConflict()
	case errors.Is(err, zk.ErrNoNode) && w.put && !r.present:
		if err := s.ensureDir(c, dir); err != nil {
			return writeResult{}, err
		}
		return writeResult{again: true}, nil
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNodeExists):
		return writeResult{again: true}, nil // changed since read
	}
	return writeResult{}, err
}

// ops returns the operations of the write, to be sent in one
// multi-operation, provided that what r read has not changed since (see
// write); again when the record has gone with its directory meanwhile,
// or when this write created its new key's directory: it is read then,
// for the czxid that names its marker.
func (w *recordWrite) ops(c *zk.Conn, r recordRead) (ops []any, again bool, err error) {
	s, cond := w.s, w.cond
	switch {
	case r.present && !r.dirOK:
		return nil, true, nil // deleted, and its directory reaped, meanwhile
	case w.put && !r.dirOK:
		if err := s.ensureDir(c, s.p.recordDir(w.key)); err != nil { // a new key
			return nil, false, err
		}
		return nil, true, nil
	}
	if cond.Token != 0 {
		ops = append(ops, &zk.CheckVersionRequest{Path: w.fence, Version: r.lease.Version})
	}
	return append(ops, s.writeOps(w.key, w.put, encodeRecord(cond.Token, w.value), r.state())...), false, nil
}

// recordState is what a write's operations are built on, as read
// (recordRead.state) or cached (cachedRecord.state).
type recordState struct {
	present bool     // the leaf exists
	leaf    int32    // its data version (present)
	dir     int32    // the directory's data version
	czxid   int64    // the directory's czxid, which names its marker
	marked  bool     // the directory has the marker of its czxid
	marks   []string // the markers in the directory, which a delete removes
}

// writeOps returns the operations that put stored at key, or delete it,
// provided that the record and its directory are still as st says; the
// directory exists. Every put checks or creates the marker of the
// directory's life, and a delete removes every marker with the record.
func (s *session) writeOps(key string, put bool, stored []byte, st recordState) []any {
	leaf, dir, top := s.p.record(key), s.p.recordDir(key), s.p.recordTop(key)
	mark := dir + "/" + recordMark(st.czxid)
	var markOp any = &zk.CheckVersionRequest{Path: mark, Version: 0}
	if !st.marked {
		markOp = &zk.CreateRequest{Path: mark, Acl: s.b.cfg.acl}
	}
	var ops []any
	switch {
	case put && st.present:
		ops = append(ops,
			&zk.CheckVersionRequest{Path: dir, Version: st.dir},
			markOp,
			&zk.SetDataRequest{Path: leaf, Data: stored, Version: st.leaf})
	case put:
		ops = append(ops, markOp, &zk.CreateRequest{Path: leaf, Data: stored, Acl: s.b.cfg.acl})
	default:
		ops = append(ops,
			&zk.CheckVersionRequest{Path: dir, Version: st.dir},
			&zk.DeleteRequest{Path: leaf, Version: st.leaf})
		for _, m := range st.marks {
			ops = append(ops, &zk.DeleteRequest{Path: dir + "/" + m, Version: -1})
		}
		ops = append(ops, &zk.SetDataRequest{Path: dir, Version: -1})
	}
	if put || top != dir {
		ops = append(ops, &zk.SetDataRequest{Path: top, Version: -1})
	}
	return ops
}

// WatchRecords returns a channel that receives a hint after records under
// prefix may have changed. Every record write increases the data version
// of the directory of its key's first segment, in the same transaction;
// the watch is one exists watch on that directory when prefix contains a
// "/" (for "ops/", <root>/rec/ops), and otherwise a child watch on
// <root>/rec and an exists watch on each directory whose name starts with
// prefix. The watches are set before WatchRecords returns; after one
// fires, it is set again before the hint is sent, so a caller that reads
// after the hint misses nothing. A write under the same first segment but
// outside prefix also gives a hint. The channel is closed when ctx ends or
// the session is over.
func (s *session) WatchRecords(ctx context.Context, prefix string) (<-chan struct{}, error) {
	op := fmt.Sprintf("watch records %q", prefix)
	w := &recordWatch{
		s:        s,
		prefix:   prefix,
		ch:       make(chan struct{}, 1),
		wake:     make(chan struct{}, 1),
		watching: make(map[string]bool),
		fired:    make(map[string]bool),
	}
	if first, _, ok := strings.Cut(prefix, "/"); !ok {
		w.fired[s.p.root+recordDir] = true // the first segments are not all known
	} else if validSegment(first) {
		w.single = true
		w.fired[s.p.recordTop(first)] = true
	} // else no key starts with prefix: nothing to watch
	s.mu.Lock()
	if s.over {
		s.mu.Unlock()
		return nil, s.live(op)
	}
	if s.recWatches == nil {
		s.recWatches = make(map[*recordWatch]struct{})
	}
	s.recWatches[w] = struct{}{}
	s.mu.Unlock()
	if _, err := call(s, ctx, op, func(c *zk.Conn) (struct{}, error) { return struct{}{}, w.arm(c) }); err != nil {
		w.forget()
		return nil, err
	}
	if !s.goCall(func() { w.run(ctx, op) }) {
		w.forget()
		return nil, s.live(op)
	}
	return w.ch, nil
}

// recordWatch is one WatchRecords call. Its watch events come through the
// session's event callback (see recordEvent), by path.
type recordWatch struct {
	s      *session
	prefix string
	single bool          // prefix names one first segment
	ch     chan struct{} // hints to the caller
	wake   chan struct{} // a watch fired (buffer of one)

	// Guarded by s.mu.
	watching map[string]bool // paths with a watch set that has not fired
	fired    map[string]bool // paths whose watch is to be set (again)

	// The listing kept for ListRecordsWithSkipped (single watches only),
	// guarded by s.mu. armed: the watch of the prefix's directory is set
	// (its request answered) and has not fired since; fires counts its
	// events, reconnections and failed settings; listing was read while
	// armed, at count listedAt. A kept listing is as current as a read
	// sent now: ZooKeeper delivers a session's watch events and responses
	// in the order of its transactions, and go-zookeeper calls the event
	// callback (recordEventLocked) from its receiving loop before it reads
	// the next response or event, so a change made before anything this
	// session has since seen (the event or response that granted a lease,
	// say) has fired the watch by then. Every record write, through this
	// package, changes the directory of its key's first segment.
	armed    bool
	fires    uint64
	listing  *recordListing
	listedAt uint64
}

// disarmLocked notes that w's watch is no longer known to be set: its
// kept listing is no longer current. s.mu is held.
func (w *recordWatch) disarmLocked() {
	w.armed = false
	w.fires++
}

// recordEventLocked passes a watch event on a record directory to the watches
// waiting for it. s.mu is held.
func (s *session) recordEventLocked(path string) {
	for w := range s.recWatches {
		if w.watching[path] {
			delete(w.watching, path)
			w.fired[path] = true
			w.disarmLocked()
			wake.Poke(w.wake)
		}
	}
}

// forget unregisters w from the session.
func (w *recordWatch) forget() {
	w.s.mu.Lock()
	delete(w.s.recWatches, w)
	w.s.mu.Unlock()
}

// run sets the watches again each time one fires, then sends a hint,
// until ctx ends or the session is over; it closes the channel.
func (w *recordWatch) run(ctx context.Context, op string) {
	s := w.s
	defer close(w.ch)
	defer w.forget()
	for {
		select {
		case <-w.wake:
		case <-ctx.Done():
			return
		case <-s.ctx.Done():
			return
		}
		for failures := 1; ; failures++ {
			_, err := call(s, ctx, op, func(c *zk.Conn) (struct{}, error) { return struct{}{}, w.arm(c) })
			if err == nil {
				break
			}
			if !s.sleep(ctx, backoff.Wait(failures, s.link.granted()/3)) {
				return
			}
		}
		wake.Poke(w.ch)
	}
}

// arm sets the watches of the paths that fired (or were never set). A path
// whose watch could not be set stays to be set.
func (w *recordWatch) arm(c *zk.Conn) error {
	s := w.s
	s.mu.Lock()
	todo := make([]string, 0, len(w.fired))
	for p := range w.fired {
		todo = append(todo, p)
	}
	clear(w.fired)
	s.mu.Unlock()
	for i, p := range todo {
		s.mu.Lock()
		done := w.watching[p] // set meanwhile, with the directory listing
		s.mu.Unlock()
		if done {
			continue
		}
		if err := w.set(c, p); err != nil {
			s.mu.Lock()
			for _, q := range todo[i:] {
				if !w.watching[q] {
					w.fired[q] = true
				}
			}
			s.mu.Unlock()
			return err
		}
	}
	return nil
}

// set sets the watch of one path: an exists watch on a first-segment
// directory, or a child watch on <root>/rec (an exists watch while it does
// not exist) and exists watches on the directories found there.
func (w *recordWatch) set(c *zk.Conn, path string) error {
	s := w.s
	s.mu.Lock()
	w.watching[path] = true // before the request: its event may come at once
	s.mu.Unlock()
	unset := func(err error) error {
		s.mu.Lock()
		delete(w.watching, path)
		w.disarmLocked()
		s.mu.Unlock()
		return err
	}
	if w.single || path != s.p.root+recordDir {
		_, _, _, err := c.ExistsW(path)
		if err != nil {
			return unset(err)
		}
		if w.single {
			s.mu.Lock()
			w.armed = w.watching[path] // not fired since it was set
			s.mu.Unlock()
		}
		return nil
	}
	var names []string
	for {
		var err error
		names, _, _, err = c.ChildrenW(path)
		if err == nil {
			break
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return unset(err)
		}
		ok, _, _, err := c.ExistsW(path)
		if err != nil {
			return unset(err)
		}
		if !ok {
			return nil // the exists watch fires when it is created
		}
	}
	for _, name := range names {
		seg, ok := decodeSegment(name)
		if !ok || !strings.HasPrefix(seg, w.prefix) {
			continue
		}
		top := path + "/" + name
		s.mu.Lock()
		watching := w.watching[top]
		s.mu.Unlock()
		if !watching {
			if err := w.set(c, top); err != nil {
				return err
			}
		}
	}
	return nil
}
