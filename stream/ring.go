package stream

import "time"

// entryState is where a dispatched message stands.
type entryState uint8

const (
	running   entryState = iota // its Process call runs
	done                        // processed
	failed                      // its call failed or was cancelled
	abandoned                   // its call ran past its timeout or the hand-off's bound
)

// entry is one dispatched message.
type entry struct {
	offset   int64
	deadline time.Time // zero without a call timeout
	state    entryState
}

// ring holds the dispatched messages in dispatch (offset) order, from the
// first one not yet processed: the checkpoint can move past a message only
// once it and every message before it are done. It grows when a slow call
// holds its head while later calls complete. Messages are numbered by
// dispatch: seq.
type ring struct {
	buf     []entry // len is a power of two
	head    int     // index of the oldest entry
	n       int     // entries held
	headSeq uint64  // seq of the oldest entry
}

func (r *ring) init(capacity int) {
	size := 1
	for size < capacity {
		size *= 2
	}
	r.buf = make([]entry, size)
}

// push appends a running entry and returns its seq.
func (r *ring) push(offset int64, deadline time.Time) uint64 {
	if r.n == len(r.buf) {
		buf := make([]entry, 2*len(r.buf))
		for i := range r.n {
			buf[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
		}
		r.buf, r.head = buf, 0
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = entry{offset: offset, deadline: deadline}
	r.n++
	return r.headSeq + uint64(r.n-1)
}

// at returns the entry numbered seq, or nil if it is no longer held.
func (r *ring) at(seq uint64) *entry {
	if seq < r.headSeq || seq-r.headSeq >= uint64(r.n) {
		return nil
	}
	return &r.buf[(r.head+int(seq-r.headSeq))&(len(r.buf)-1)]
}

// popDone removes the oldest entry if it is done and returns its offset.
func (r *ring) popDone() (int64, bool) {
	if r.n == 0 || r.buf[r.head].state != done {
		return 0, false
	}
	off := r.buf[r.head].offset
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	r.headSeq++
	return off, true
}

// each calls f on every entry, oldest first.
func (r *ring) each(f func(*entry)) {
	for i := range r.n {
		f(&r.buf[(r.head+i)&(len(r.buf)-1)])
	}
}
