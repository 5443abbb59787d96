package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/frame"
)

// The record cache: what the session last read or wrote of each record's
// leaf and directory, by leaf path, so that ReleaseWithRecords can build
// its multi-operation without reading first (see lease.recordOps). An
// entry is a true observation that may be stale, never a guess: a stale
// one fails the multi-operation's version checks, which then reads and
// tries again.

// cachedRecord is what the session last saw of a record's znodes.
type cachedRecord struct {
	present bool   // the leaf exists
	leaf    int32  // its data version (present)
	token   uint64 // the token stored in it (present)
	dir     int32  // the directory's data version
	czxid   int64  // the directory's czxid, which names its marker
	marked  bool   // the directory has the marker of its czxid
}

// state is what a put's operations are built on (a delete is never
// built from the cache: it needs every marker).
func (c cachedRecord) state() recordState {
	return recordState{present: c.present, leaf: c.leaf, dir: c.dir, czxid: c.czxid, marked: c.marked}
}

// maxCachedRecords bounds the cache; past it, arbitrary entries go.
const maxCachedRecords = 1 << 16

// cacheRecord records what was seen of the record at leaf.
func (s *session) cacheRecord(leaf string, c cachedRecord) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if s.recCache == nil {
		s.recCache = make(map[string]cachedRecord)
	}
	if _, ok := s.recCache[leaf]; !ok && len(s.recCache) >= maxCachedRecords {
		n := 0
		for k := range s.recCache { // map order: arbitrary entries
			delete(s.recCache, k)
			if n++; n >= maxCachedRecords/8 {
				break
			}
		}
	}
	s.recCache[leaf] = c
}

// forgetRecord drops the entry of the record at leaf.
func (s *session) forgetRecord(leaf string) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	delete(s.recCache, leaf)
}

// cachedRecordAt returns the entry of the record at leaf.
func (s *session) cachedRecordAt(leaf string) (cachedRecord, bool) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	c, ok := s.recCache[leaf]
	return c, ok
}

// noteRead caches what a record write's read saw.
func (s *session) noteRead(leaf string, r recordRead) {
	if !r.dirOK {
		s.forgetRecord(leaf)
		return
	}
	st := r.state()
	c := cachedRecord{present: st.present, leaf: st.leaf, dir: st.dir, czxid: st.czxid, marked: st.marked}
	if r.present {
		c.token = storedToken(r.data)
	}
	s.cacheRecord(leaf, c)
}

// noteMulti caches what a successful multi-operation wrote to record
// znodes: the leaves it set, created or deleted, the directories it
// checked or set, and the markers it checked, created or deleted. A leaf
// whose directory's version or marker the operations do not tell keeps
// what was cached before, or is forgotten.
func (s *session) noteMulti(ops []any, res []zk.MultiResponse) {
	recs := s.p.root + recordDir + "/"
	type seen struct {
		c                     cachedRecord
		leafOK, dirOK, markOK bool
	}
	byLeaf := map[string]*seen{}
	entry := func(leaf string) *seen {
		e := byLeaf[leaf]
		if e == nil {
			e = &seen{}
			if c, ok := s.cachedRecordAt(leaf); ok {
				e.c, e.dirOK, e.markOK = c, true, true
			}
			byLeaf[leaf] = e
		}
		return e
	}
	isLeaf := func(p string) bool { return strings.HasPrefix(p, recs) && strings.HasSuffix(p, "/"+recordLeaf) }
	// mark returns the entry of a marker's record and the czxid its name
	// gives, or nil.
	mark := func(p string) (*seen, int64) {
		i := strings.LastIndexByte(p, '/')
		if !strings.HasPrefix(p, recs) || i < 0 || !isRecordMark(p[i+1:]) {
			return nil, 0
		}
		czxid, err := strconv.ParseInt(p[i+1+len(recordLeaf):], 36, 64)
		if err != nil {
			return nil, 0
		}
		return entry(p[:i] + "/" + recordLeaf), czxid
	}
	for i, op := range ops {
		var st *zk.Stat
		if i < len(res) {
			st = res[i].Stat
		}
		switch op := op.(type) {
		case *zk.SetDataRequest:
			switch {
			case isLeaf(op.Path) && st != nil:
				e := entry(op.Path)
				e.c.present, e.c.leaf, e.leafOK = true, st.Version, true
				e.c.token = storedToken(op.Data)
			case strings.HasPrefix(op.Path, recs) && st != nil:
				e := entry(op.Path + "/" + recordLeaf)
				e.c.dir, e.dirOK = st.Version, true
			}
		case *zk.CreateRequest:
			if e, czxid := mark(op.Path); e != nil {
				e.c.czxid, e.c.marked, e.markOK = czxid, true, true
			} else if isLeaf(op.Path) {
				e := entry(op.Path)
				e.c.present, e.c.leaf, e.leafOK = true, 0, true
				e.c.token = storedToken(op.Data)
			}
		case *zk.DeleteRequest:
			if e, czxid := mark(op.Path); e != nil {
				if czxid == e.c.czxid {
					e.c.marked = false
				}
			} else if isLeaf(op.Path) {
				e := entry(op.Path)
				e.c.present, e.c.leaf, e.c.token, e.leafOK = false, 0, 0, true
			}
		case *zk.CheckVersionRequest:
			if e, czxid := mark(op.Path); e != nil {
				e.c.czxid, e.c.marked, e.markOK = czxid, true, true
			} else if strings.HasPrefix(op.Path, recs) && !isLeaf(op.Path) {
				e := entry(op.Path + "/" + recordLeaf)
				e.c.dir, e.dirOK = op.Version, true
			}
		}
	}
	for leaf, e := range byLeaf {
		switch {
		case e.leafOK && e.dirOK && e.markOK:
			s.cacheRecord(leaf, e.c)
		case e.leafOK:
			s.forgetRecord(leaf)
		}
	}
}

// storedToken is the token in front of a leaf's data, 0 for data too short
// to hold one.
func storedToken(data []byte) uint64 {
	token, _ := frame.Token(data)
	return token
}

// PrefetchRecords reads the records at keys (and their directories) into
// the session's record cache, all at once: the optional
// [backend.RecordPrefetcher] capability. simba calls it for the history
// slot a run will end in, when the run starts, so that the hand-off's
// ReleaseWithRecords needs no request before its multi-operation. A record
// whose directory does not exist yet (a slot's first use) has its
// directory created now, rather than on the hand-off's path: the server
// reaps a container only once it has had a child, so the empty directory
// stays until the record is written.
func (s *session) PrefetchRecords(ctx context.Context, keys ...string) error {
	return together(len(keys), func(i int) error {
		key := keys[i]
		if err := checkKey(key); err != nil {
			return err
		}
		for attempt := 0; ; attempt++ {
			_, err := s.GetRecord(ctx, key)
			if err != nil && !errors.Is(err, backend.ErrNoRecord) {
				return err
			}
			if _, ok := s.cachedRecordAt(s.p.record(key)); ok || attempt == 1 {
				return nil
			}
			if _, err := call(s, ctx, fmt.Sprintf("prefetch record %q", key), func(c *zk.Conn) (struct{}, error) {
				return struct{}{}, s.ensureDir(c, s.p.recordDir(key))
			}); err != nil {
				return err
			}
		}
	})
}
