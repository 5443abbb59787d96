package chaos

import (
	"errors"
	"fmt"
	"io"
	"log"
	"reflect"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZooKeeper lays a lease out as the ephemeral znode <root>/lease/<name>,
// created by the Acquire that takes it and deleted by its Release or by
// the server when the holder's session ends; the token is the znode's
// czxid (backend/zookeeper's package documentation). <root>/lease is a
// container znode, which the server deletes once it is empty (every
// second on the test servers), and a later Acquire creates again.
//
// The watcher of the test process has a session of its own on the server,
// not through any client's proxy, and watches the lease directory's
// children and each lease znode (an exists watch, which fires on its
// delete):
//
//   - a grant starts at the znode's ctime, the server's wall clock when it
//     prepared the create, before the create was applied and answered
//     (cut to the millisecond: earlier still);
//   - it ends when the watcher receives the delete event of its znode (or
//     finds it gone): at or after the delete.
//
// ZooKeeper's watches fire once: a znode created and deleted between the
// watcher's looks is never seen. The directory's stat tells how many
// creates it has seen, (cversion + children)/2, since cversion counts
// creates and deletes of children; when the watcher has seen fewer znodes
// than that, the tokens between its last look and this one (pzxid, the
// zxid of the last change of children) are a blind range: an observation
// of a token without a grant there cannot be checked. The same holds for
// the end of a directory's life (deleted, created again), and for a
// session of the watcher's own that expired (its watches are lost; it
// looks again).
//
// The events of a session come in order with its replies: an event that
// happened before a reply was sent is delivered first (go-zookeeper hands
// it to the watch's channel before it hands over the reply), so once a
// listing returns, the delete events of the znodes it no longer lists are
// in their channels.

// neverFires stands for a watch that could not be set.
var neverFires = make(chan zk.Event)

func (z *zooKeeper) watchGrants(root string) (*grantWatch, error) {
	conn, closeConn, err := dialZK(z.addr)
	if err != nil {
		return nil, fmt.Errorf("the grant watch: %w", err)
	}
	w := &zkGrantWatch{conn: conn, dir: root + "/lease", log: newGrantLog(), quit: make(chan struct{}), done: make(chan struct{}),
		held: map[string]*zkHolding{}, seen: map[int64]bool{}}
	go w.loop()
	return &grantWatch{log: w.log, stop: func() {
		close(w.quit)
		closeConn() // ends a request the loop waits for
		<-w.done
	}}, nil
}

// dialZK opens a go-zookeeper connection to addr and waits for its
// session; closeConn closes it and waits for its goroutines.
func dialZK(addr string) (conn *zk.Conn, closeConn func(), err error) {
	conn, events, err := zk.Connect([]string{addr}, 4*time.Second,
		zk.WithLogger(log.New(io.Discard, "", 0)), zk.WithLogInfo(false))
	if err != nil {
		return nil, nil, err
	}
	closeConn = func() {
		conn.Close()
		for range events {
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for conn.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			closeConn()
			return nil, nil, errors.New("no ZooKeeper session after 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return conn, closeConn, nil
}

type zkGrantWatch struct {
	conn *zk.Conn
	dir  string
	log  *grantLog
	quit chan struct{}
	done chan struct{}

	// Owned by loop.
	held map[string]*zkHolding // by lease name: the znode watched
	seen map[int64]bool        // the czxids of every znode seen
	inc  *zkDir                // the lease directory as last listed
}

// zkHolding is a lease znode being watched.
type zkHolding struct {
	name  string
	czxid int64
	ch    <-chan zk.Event // its exists watch
	// stale: the watch could not be set again (the session failed); the
	// next listing looks at the znode again.
	stale bool
}

// zkDir is one life of the lease directory, as listed last.
type zkDir struct {
	czxid  int64 // its create zxid: every child's czxid is larger
	pzxid  int64 // at the last listing: creates up to it are accounted for
	missed int64 // creates up to pzxid never seen
	// gone is the blind range left open when the directory was found
	// gone (its end bounded by the next life's czxid), or -1.
	gone int
	// deleted: the watch of the last listing fired for the directory's
	// delete, so no child changed since that listing.
	deleted bool
}

func (w *zkGrantWatch) stopped() bool {
	select {
	case <-w.quit:
		return true
	default:
		return false
	}
}

// pause waits a little before trying a failed request again.
func (w *zkGrantWatch) pause() {
	select {
	case <-w.quit:
	case <-time.After(50 * time.Millisecond):
	}
}

func (w *zkGrantWatch) loop() {
	defer close(w.done)
	for !w.stopped() {
		children, st, dirCh, err := w.conn.ChildrenW(w.dir)
		w.drain()
		if errors.Is(err, zk.ErrNoNode) {
			w.dirGone()
			ok, _, ch, err := w.conn.ExistsW(w.dir)
			switch {
			case err != nil:
				w.pause()
			case !ok:
				w.wait(ch)
			}
			continue
		}
		if err != nil {
			w.pause()
			continue
		}
		w.list(children, st)
		if ev, ok := w.wait(dirCh); ok && ev.Type == zk.EventNodeDeleted {
			w.inc.deleted = true
		}
	}
}

// list takes in a listing of the lease directory: it watches the znodes
// not watched yet, and accounts for the creates it may have missed.
func (w *zkGrantWatch) list(children []string, st *zk.Stat) {
	if w.inc == nil || w.inc.czxid != st.Czxid {
		// What the previous life created since its last listing is
		// unknown: the creates before this life began.
		switch {
		case w.inc == nil, w.inc.deleted:
		case w.inc.gone >= 0:
			w.log.bound(w.inc.gone, uint64(st.Czxid))
		default:
			w.log.missed(uint64(w.inc.pzxid), uint64(st.Czxid), "the lease directory was deleted and created again")
		}
		w.inc = &zkDir{czxid: st.Czxid, pzxid: st.Czxid, gone: -1}
	}
	listed := map[string]bool{}
	for _, name := range children {
		listed[name] = true
		switch h := w.held[name]; {
		case h == nil:
			w.watchZnode(name)
		case h.stale:
			w.recheck(h)
		}
	}
	for name, h := range w.held {
		if !listed[name] {
			// Gone before the listing, its delete event lost (the
			// watcher's session ended): it ended by now.
			w.log.end(name, uint64(h.czxid), time.Now())
			delete(w.held, name)
		}
	}
	creates := (int64(st.Cversion) + int64(len(children))) / 2
	var seen int64
	for z := range w.seen {
		if z > w.inc.czxid && z <= st.Pzxid {
			seen++
		}
	}
	if missed := creates - seen; missed > w.inc.missed {
		w.log.missed(uint64(w.inc.pzxid), uint64(st.Pzxid), fmt.Sprintf("%d lease znodes created and deleted between two listings", missed-w.inc.missed))
		w.inc.missed = missed
	}
	w.inc.pzxid = max(w.inc.pzxid, st.Pzxid)
}

// dirGone takes in that the lease directory is not there: what its last
// life created after its last listing is unknown, until the next life's
// first listing bounds it.
func (w *zkGrantWatch) dirGone() {
	for name, h := range w.held { // a directory is deleted empty only
		w.log.end(name, uint64(h.czxid), time.Now())
		delete(w.held, name)
	}
	if w.inc != nil && w.inc.gone < 0 && !w.inc.deleted {
		w.inc.gone = w.log.missed(uint64(w.inc.pzxid), 1<<64-1, "the lease directory was deleted")
	}
}

// watchZnode looks at the lease znode called name and watches it.
func (w *zkGrantWatch) watchZnode(name string) {
	ok, st, ch, err := w.conn.ExistsW(w.dir + "/" + name)
	if err != nil || !ok {
		// Gone already (the accounting of the next listing sees it), or
		// the session failed (the next listing looks again).
		return
	}
	w.seen[st.Czxid] = true
	w.log.begin(name, uint64(st.Czxid), time.UnixMilli(st.Ctime), time.Now())
	w.held[name] = &zkHolding{name: name, czxid: st.Czxid, ch: ch}
}

// event takes in an event of the watch of h, received at the instant at.
func (w *zkGrantWatch) event(h *zkHolding, ev zk.Event, at time.Time) {
	if ev.Type == zk.EventNodeDeleted {
		delete(w.held, h.name)
		w.log.end(h.name, uint64(h.czxid), at)
		return
	}
	w.recheck(h) // its data changed, or the watch was lost: look again
}

// recheck looks at h's znode again and watches it, or whatever holding
// has replaced it.
func (w *zkGrantWatch) recheck(h *zkHolding) {
	delete(w.held, h.name)
	ok, st, ch, err := w.conn.ExistsW(w.dir + "/" + h.name)
	switch {
	case err != nil:
		// The session failed: the next listing looks again, and ends
		// the grant then if the znode is gone.
		w.held[h.name] = &zkHolding{name: h.name, czxid: h.czxid, ch: neverFires, stale: true}
	case ok && st.Czxid == h.czxid:
		w.held[h.name] = &zkHolding{name: h.name, czxid: h.czxid, ch: ch}
	default:
		w.log.end(h.name, uint64(h.czxid), time.Now())
		if ok {
			w.seen[st.Czxid] = true
			w.log.begin(h.name, uint64(st.Czxid), time.UnixMilli(st.Ctime), time.Now())
			w.held[h.name] = &zkHolding{name: h.name, czxid: st.Czxid, ch: ch}
		}
	}
}

// drain takes in the events already delivered to the znodes' watches.
func (w *zkGrantWatch) drain() {
	for {
		h, ev, ok := w.next(nil, false)
		if !ok {
			return
		}
		w.event(h, ev, time.Now())
	}
}

// wait takes in the znodes' events until ch (the directory's watch)
// fires, and returns its event, or until the watcher stops (false).
func (w *zkGrantWatch) wait(ch <-chan zk.Event) (zk.Event, bool) {
	for !w.stopped() {
		h, ev, ok := w.next(ch, true)
		if !ok {
			return ev, !w.stopped() // ch fired, or stop
		}
		w.event(h, ev, time.Now())
	}
	return zk.Event{}, false
}

// next returns the next event of a znode's watch; with block it waits for
// one, for ch, or for the stop, and reports false for the last two (with
// ch's event); without, it reports false when none is ready.
func (w *zkGrantWatch) next(ch <-chan zk.Event, block bool) (*zkHolding, zk.Event, bool) {
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.quit)}}
	if ch != nil {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	first := len(cases)
	var hs []*zkHolding
	for _, h := range w.held {
		hs = append(hs, h)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(h.ch)})
	}
	if !block {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectDefault})
	}
	i, v, recvOK := reflect.Select(cases)
	if i < first || i >= first+len(hs) {
		var ev zk.Event
		if i == 1 && ch != nil && recvOK {
			ev = v.Interface().(zk.Event)
		}
		return nil, ev, false
	}
	var ev zk.Event
	if recvOK {
		ev = v.Interface().(zk.Event)
	} else {
		ev = zk.Event{Type: zk.EventNotWatching} // closed after its event: taken in already
	}
	return hs[i-first], ev, true
}
