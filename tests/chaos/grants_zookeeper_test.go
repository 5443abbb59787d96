package chaos

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZooKeeper lays a lease out as a queue of candidacies: ephemeral
// sequential znodes <root>/lease/<name>/<session>-<nonce>-<seq> under the
// container <root>/lease/<name>, created by Acquire when it starts waiting
// and deleted by its Release, by its withdrawal, or by the server when the
// session ends; the oldest candidacy (lowest sequence number) holds the
// lease, and the token is the znode's czxid (backend/zookeeper's package
// documentation). The containers, and <root>/lease, are deleted by the
// server once empty (every second on the test servers), and created again
// by a later Acquire.
//
// The watcher of the test process has a session of its own on the server,
// not through any client's proxy, and sets a child watch on <root>/lease
// and on each container; each time one fires it lists the container again,
// and reads the czxid and ctime of each candidacy it has not seen (exists,
// no watch). A grant of candidacy Z begins when every older candidacy of
// its name is deleted, and ends when Z is deleted:
//
//   - a grant's Start is the later of Z's ctime (the server's wall clock
//     when it prepared the create, cut to the millisecond: earlier still)
//     and the instant the watcher sent the last listing that still showed
//     a candidacy older than Z (the older one's delete was applied after
//     that listing was served, so after it was sent); both are at or
//     before the grant's true start. Seen is when the watcher received the
//     listing in which Z is the oldest: at or after it;
//   - it ends when the watcher receives a listing without Z: at or after
//     the delete.
//
// ZooKeeper's watches fire once, and a listing shows the children as they
// are when it is served: a candidacy created and deleted between two
// listings is never seen. A container's stat tells how many creates it
// has seen in its life, (cversion + children)/2, since cversion counts the
// creates and deletes of its children; when the watcher has seen fewer
// candidacies than that, the tokens between its last listing and this one
// (pzxid, the zxid of the last change of children) are a blind range: an
// observation of a token without a grant there cannot be checked. A
// candidacy seen waiting and gone by the next listing, whose older ones
// are gone too, may have held in between: its token is a blind range of
// one. The same holds for the end of a container's life (deleted, created
// again), and for a session of the watcher's own that expired (its
// watches are lost; it looks again).
//
// The events of a session come in order with its replies: an event that
// happened before a reply was sent is delivered first, so once a listing
// returns, the events of the changes it shows are in their channels.

// zkRelistEvery is how long the watcher waits for a watch to fire before
// it lists everything again anyway: a watch lost for a reason not
// accounted for here then blinds it for this interval at most, and more
// listings only tighten a grant's bounds. (Two chaos runs saw no grant at
// all after a ZooKeeper restart, seeds 649093549 and 655052589; the cause
// was the new connection's, see dialZKOnce, not a lost watch.)
const zkRelistEvery = time.Second

// neverFires stands for a watch that could not be set.
var neverFires = make(chan zk.Event)

func (z *zooKeeper) watchGrants(root string) (*grantWatch, error) {
	return watchZKGrants(root, []string{z.addr}, false)
}

// watchZKGrants starts the grant watch of root on a connection to one of
// addrs (servers of one ZooKeeper). With sync, each listing of a lease is
// preceded by a sync: the server of an ensemble the watch is connected to
// then has every change the leader committed before the sync reached it,
// so that a listing sent at an instant shows nothing older than the
// leader's state at that instant, as the bounds above need.
func watchZKGrants(root string, addrs []string, sync bool) (*grantWatch, error) {
	conn, closeConn, err := dialZKOnce(addrs...)
	if err != nil {
		return nil, fmt.Errorf("the grant watch: %w", err)
	}
	w := &zkGrantWatch{addrs: addrs, sync: sync, conn: conn, closeConn: closeConn, dir: root + "/lease", log: newGrantLog(), quit: make(chan struct{}), done: make(chan struct{}),
		leases: map[string]*zkLease{}}
	go w.loop()
	return &grantWatch{log: w.log, stop: func() {
		close(w.quit)
		w.mu.Lock()
		w.closed = true
		w.closeConn() // ends a request the loop waits for
		w.mu.Unlock()
		<-w.done
	}}, nil
}

// dialZK opens a go-zookeeper connection to addr (to one of the servers
// given) and waits for its session; closeConn closes it and waits for its
// goroutines.
func dialZK(addr ...string) (conn *zk.Conn, closeConn func(), err error) {
	return dialZKWith(addr, false)
}

// dialZKOnce is dialZK for a connection that never connects again once it
// has had a session: go-zookeeper, connecting again with watches set,
// re-sends them while its receiving goroutine already runs, and the two
// race on its last zxid (conn.go, sendSetWatches and recvLoop: a data race
// that -race reported in a CI run, after a server restart). The grant
// watch dials anew instead (zkGrantWatch.redial).
//
// Until the first session it connects again as often as it needs: a
// server that is starting accepts a connection and closes it before it
// serves, and a connection that gave up there stayed without a session
// until dialZKWith's 10s were over, its grant watch blind meanwhile (seed
// 655052589: no grant seen after a restart, four false I4 reports). No
// watch is set before the first session, so nothing races then.
func dialZKOnce(addr ...string) (conn *zk.Conn, closeConn func(), err error) {
	return dialZKWith(addr, true)
}

// dialZKWith is dialZK, or dialZKOnce if once.
func dialZKWith(addr []string, once bool) (conn *zk.Conn, closeConn func(), err error) {
	var hadSession atomic.Bool
	dialer := func(network, address string, timeout time.Duration) (net.Conn, error) {
		if once && hadSession.Load() {
			return nil, errors.New("chaos: this connection does not connect again (see dialZKOnce)")
		}
		c, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return handshakeConn{c, &hadSession}, nil
	}
	// The callback runs on go-zookeeper's connecting goroutine, the one
	// that calls the dialer, before it could dial again.
	onEvent := func(e zk.Event) {
		if e.Type == zk.EventSession && e.State == zk.StateHasSession {
			hadSession.Store(true)
		}
	}
	var events <-chan zk.Event
	conn, events, err = zk.Connect(addr, 4*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)), zk.WithLogInfo(false),
		zk.WithDialer(dialer), zk.WithEventCallback(onEvent))
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

// zkHandshakeMax bounds the wait for a server's answer to a connection's
// handshake, before the first session: go-zookeeper's own bound is ten
// times two thirds of the session timeout (27s here), and a server that is
// starting may take the connection and never answer (seed 758305232: the
// grant watch blind for 28s after a restart, ten false I4 reports). The
// dial is then tried again, as backend/zookeeper's connect timeout does.
const zkHandshakeMax = 2 * time.Second

// handshakeConn is a connection of dialZKWith: until session is set, a
// read deadline go-zookeeper sets (before every read) is cut to
// zkHandshakeMax from now.
type handshakeConn struct {
	net.Conn
	session *atomic.Bool
}

func (c handshakeConn) SetReadDeadline(t time.Time) error {
	if !c.session.Load() {
		if limit := time.Now().Add(zkHandshakeMax); !t.IsZero() && t.After(limit) {
			t = limit
		}
	}
	return c.Conn.SetReadDeadline(t)
}

// redial replaces a connection that has lost its session with a new one,
// and has everything listed again: the old one's watches are gone with
// it. It reports whether the watch has a connection with a session.
func (w *zkGrantWatch) redial() bool {
	if w.conn.State() == zk.StateHasSession {
		return true
	}
	began := time.Now()
	w.log.notef("server: the grant watch lost its ZooKeeper session (state %v): connecting again", w.conn.State())
	conn, closeConn, err := dialZKOnce(w.addrs...)
	if err != nil {
		w.log.notef("server: the grant watch, connecting again since %s: %v", stamp(began), err)
		w.pause()
		return false
	}
	w.log.notef("server: the grant watch has a ZooKeeper session again (connecting since %s): listing everything", stamp(began))
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		closeConn()
		return false
	}
	old := w.closeConn
	w.conn, w.closeConn = conn, closeConn
	w.mu.Unlock()
	old()
	w.dirCh = nil
	for _, l := range w.leases {
		l.ch = nil
	}
	return true
}

type zkGrantWatch struct {
	addrs []string
	sync  bool // sync before each listing of a lease (see watchZKGrants)
	dir   string
	log   *grantLog
	quit  chan struct{}
	done  chan struct{}

	// mu guards conn and closeConn, which the loop replaces (redial) and
	// stop closes; closed: stop has closed it, for good.
	mu        sync.Mutex
	conn      *zk.Conn
	closeConn func()
	closed    bool

	// Owned by loop.
	leases map[string]*zkLease // by lease name: its container as last listed
	dirCh  <-chan zk.Event     // the watch on <root>/lease; nil: list it
	// failing: the last request failed (noted); a success clears it.
	failing bool
}

// zkLease is one life of a lease's container, as listed last.
type zkLease struct {
	name  string
	ch    <-chan zk.Event // its child watch; nil: list it
	czxid int64           // the container's: every child's czxid is larger
	pzxid int64           // at the last listing: creates up to it are accounted for
	// missed: creates up to pzxid never seen.
	missed int64
	count  int64                   // candidacies seen in this life
	seen   map[string]*zkCandidacy // those listed last, and the holding, by name
	head   *zkCandidacy            // the holding, as last listed
	// gone is the blind range left open when the container was found
	// gone (its end bounded by the next life's czxid), or -1.
	gone int
	// deleted: the watch of the last listing fired for the container's
	// delete, so no child changed since that listing.
	deleted bool
}

// zkCandidacy is a candidacy seen.
type zkCandidacy struct {
	name         string
	seq          int64
	czxid        int64
	ctime        time.Time
	olderAliveAt time.Time // the send time of the last listing with an older candidacy
	listed       bool      // in the last listing
	held         bool      // taken as the holding
}

func (w *zkGrantWatch) stopped() bool {
	select {
	case <-w.quit:
		return true
	default:
		return false
	}
}

// failed notes the first of a run of failed requests (what), and pauses.
func (w *zkGrantWatch) failed(what string, err error) {
	if !w.failing {
		w.failing = true
		w.log.notef("server: the grant watch: %s: %v (trying again)", what, err)
	}
	w.pause()
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
		if !w.redial() {
			continue
		}
		if w.dirCh == nil {
			w.listDir()
		}
		for _, l := range w.leases {
			if l.ch == nil {
				w.listLease(l)
			}
		}
		if w.stopped() {
			return
		}
		w.wait()
	}
}

// listDir lists <root>/lease and watches it; a name not known yet is
// listed next.
func (w *zkGrantWatch) listDir() {
	names, _, ch, err := w.conn.ChildrenW(w.dir)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		ok, _, ech, err := w.conn.ExistsW(w.dir)
		switch {
		case err != nil:
			w.pause()
		case ok:
			// Created meanwhile: list again.
		default:
			w.dirCh = ech
		}
		return
	case err != nil:
		w.failed("listing "+w.dir, err)
		return
	}
	w.failing = false
	w.dirCh = ch
	for _, n := range names {
		if w.leases[n] == nil {
			w.leases[n] = &zkLease{name: n, gone: -1}
		}
	}
}

// parseSeq returns the sequence number of a candidacy's name
// (<16 hex>-<16 hex>-<seq>).
func parseSeq(name string) (int64, bool) {
	if len(name) < 35 || name[16] != '-' || name[33] != '-' {
		return 0, false
	}
	seq, err := strconv.ParseInt(name[34:], 10, 64)
	return seq, err == nil
}

// listLease lists a lease's container and watches it, and takes in what
// changed since the last listing: the grants that ended and began.
func (w *zkGrantWatch) listLease(l *zkLease) {
	path := w.dir + "/" + l.name
	sent := time.Now()
	if w.sync {
		if _, err := w.conn.Sync(path); err != nil && !errors.Is(err, zk.ErrNoNode) {
			w.failed("syncing "+path, err)
			return
		}
	}
	children, st, ch, err := w.conn.ChildrenW(path)
	got := time.Now()
	if errors.Is(err, zk.ErrNoNode) {
		w.leaseGone(l, got)
		delete(w.leases, l.name) // listed again once <root>/lease shows it
		return
	}
	if err != nil {
		w.failed("listing "+path, err)
		return
	}
	w.failing = false
	l.ch = ch
	if l.seen == nil || l.czxid != st.Czxid {
		// A new life: what the previous one created after its last
		// listing is unknown, until this life's czxid bounds it.
		if l.seen != nil {
			w.leaseGone(l, got)
		}
		gone := l.gone
		*l = zkLease{name: l.name, ch: ch, czxid: st.Czxid, pzxid: st.Czxid, seen: map[string]*zkCandidacy{}, gone: -1}
		if gone >= 0 {
			w.log.bound(gone, uint64(st.Czxid))
		}
	}
	l.deleted = false
	for _, c := range l.seen {
		c.listed = false
	}
	for _, n := range children {
		c := l.seen[n]
		if c == nil {
			seq, ok := parseSeq(n)
			if !ok {
				continue
			}
			ok, cst, err := w.conn.Exists(path + "/" + n)
			if err != nil || !ok {
				continue // gone already (the accounting sees it), or the session failed
			}
			c = &zkCandidacy{name: n, seq: seq, czxid: cst.Czxid, ctime: time.UnixMilli(cst.Ctime)}
			l.seen[n] = c
			l.count++
		}
		c.listed = true
	}
	var queue []*zkCandidacy
	for _, c := range l.seen {
		if c.listed {
			queue = append(queue, c)
		}
	}
	slices.SortFunc(queue, func(a, b *zkCandidacy) int { return cmp.Compare(a.seq, b.seq) })
	for _, c := range l.seen {
		switch {
		case c.listed:
		case c.held:
			w.log.end(l.name, uint64(c.czxid), got)
			c.held = false
			l.head = nil
		case len(queue) == 0 || c.seq < queue[0].seq:
			// Gone unseen as the holding, and so are its older ones: it
			// may have held in between.
			w.log.missed(uint64(c.czxid)-1, uint64(c.czxid), "a candidacy seen waiting was gone by the next listing, with the ones before it")
		}
	}
	for n, c := range l.seen {
		if !c.listed {
			delete(l.seen, n)
		}
	}
	if len(queue) > 0 {
		h := queue[0]
		if !h.held {
			h.held = true
			l.head = h
			start := h.ctime
			if h.olderAliveAt.After(start) {
				start = h.olderAliveAt
			}
			w.log.begin(l.name, uint64(h.czxid), start, got)
		}
		for _, c := range queue[1:] {
			c.olderAliveAt = sent
		}
	}
	creates := (int64(st.Cversion) + int64(len(children))) / 2
	if missed := creates - l.count; missed > l.missed {
		w.log.missed(uint64(l.pzxid), uint64(st.Pzxid), fmt.Sprintf("%d candidacies of %s created and deleted between two listings", missed-l.missed, l.name))
		l.missed = missed
	}
	l.pzxid = max(l.pzxid, st.Pzxid)
}

// leaseGone takes in that a life of a lease's container is over: its
// holding ended, and what it created after its last listing is unknown,
// until the next life's first listing bounds it.
func (w *zkGrantWatch) leaseGone(l *zkLease, at time.Time) {
	if l.head != nil { // a container is deleted empty only
		w.log.end(l.name, uint64(l.head.czxid), at)
		l.head.held = false
		l.head = nil
	}
	if l.seen != nil && l.gone < 0 && !l.deleted {
		l.gone = w.log.missed(uint64(l.pzxid), 1<<64-1, fmt.Sprintf("the container of %s was deleted", l.name))
	}
}

// wait waits for a watch to fire, or the stop, and marks what is to be
// listed again.
func (w *zkGrantWatch) wait() {
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.quit)}}
	dir := w.dirCh
	if dir == nil {
		dir = neverFires
	}
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(dir)})
	var ls []*zkLease
	for _, l := range w.leases {
		ch := l.ch
		if ch == nil {
			ch = neverFires
		}
		ls = append(ls, l)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	relist := time.NewTimer(zkRelistEvery)
	defer relist.Stop()
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(relist.C)})
	i, v, ok := reflect.Select(cases)
	switch {
	case i == 0:
	case i == len(cases)-1:
		// No watch fired for a while: list everything again, in case a
		// watch was lost.
		w.dirCh = nil
		for _, l := range w.leases {
			l.ch = nil
		}
	case i == 1:
		w.dirCh = nil
	default:
		l := ls[i-2]
		l.ch = nil
		if ok && v.Interface().(zk.Event).Type == zk.EventNodeDeleted {
			l.deleted = true
		}
	}
}
