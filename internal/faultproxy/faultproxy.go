// Package faultproxy is the TCP proxy for tests that injects the network
// faults a lease library must survive:
//
//   - a link that goes silent both ways, a partition, with TCP holding the
//     bytes until it heals ([Proxy.Blackhole], [Proxy.Heal]);
//   - a server that gets requests but whose replies are held, a pause
//     ([Proxy.StallReplies], [Proxy.Resume]);
//   - a slow link: replies, or requests, that arrive late but arrive, each
//     chunk of bytes a fixed time after the proxy read it
//     ([Proxy.DelayReplies], [Proxy.DelayRequests]);
//   - a server that refuses connections, down or restarting ([Proxy.Refuse],
//     [Proxy.Accept]);
//   - connections that are reset ([Proxy.Reset]);
//   - a name that moves to another server, as a virtual IP or a DNS name
//     does in a fail-over ([Proxy.Retarget]).
//
// A [Proxy] listens on 127.0.0.1 on a port of its own choosing and forwards
// every accepted connection to its target:
//
//	p, err := faultproxy.New("127.0.0.1:2379")
//	...
//	defer p.Close()
//	cli, _ := clientv3.New(clientv3.Config{Endpoints: []string{p.Addr()}})
//	p.Blackhole() // nothing gets through, either way, until Heal
//	p.Heal()
//	p.DelayReplies(time.Second) // every reply a second late, none lost
//	p.DelayReplies(0)
//
// # What the faults keep of TCP
//
// Each direction of a connection is a line: the proxy reads what one side
// sends, as it comes, and delivers it to the other side in the order read,
// each chunk once it is due (the direction's delay after it was read) and
// once the link lets it through (not blackholed; for replies, not stalled).
// Bytes are never lost, reordered or duplicated while the connection
// lives. Reading does not wait for delivery, so a delay is latency, not a
// narrower pipe: chunks read a millisecond apart are delivered a
// millisecond apart, however long the delay (up to [MaxHeld] bytes held
// per direction and connection; past that the proxy stops reading and
// TCP's own buffers hold the rest). A close (or a read error) goes down the
// line as the last chunk: the other side is closed once every byte read
// before it is delivered, and the delay after it was seen, but a close is
// not itself held by a blackhole or a stall, so a server that stops is
// seen to go even through a blackhole. [Proxy.Reset], [Proxy.Refuse] and
// [Proxy.Close] drop connections at once, with whatever they hold, as a
// reset does.
//
// Every method is safe for concurrent use. Close stops every goroutine of the
// proxy before it returns.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// MaxHeld is how many bytes a direction of a connection holds, read and not
// yet delivered, before the proxy stops reading from that side until some
// are delivered.
const MaxHeld = 1 << 20

// Proxy forwards TCP connections to a target address, with faults.
type Proxy struct {
	ln net.Listener
	wg sync.WaitGroup

	mu       sync.Mutex
	target   string
	healed   chan struct{} // non-nil while blackholed; closed by Heal
	resumed  chan struct{} // non-nil while replies stall; closed by Resume
	refusing bool
	closed   bool
	// delay is how long each chunk read waits before delivery, by
	// direction: requests (to the target), replies (from it).
	delay [2]time.Duration
	conns map[*link]struct{}

	accepted atomic.Int64
}

// link is one proxied connection: the client's side and the target's side.
type link struct {
	client  net.Conn
	server  net.Conn // set once dialled; guarded by Proxy.mu
	dropped chan struct{}
	once    sync.Once
}

// close closes both sides of l (server may be nil while dialling), once.
func (l *link) close(server net.Conn) {
	l.once.Do(func() {
		close(l.dropped)
		l.client.Close()
		if server != nil {
			server.Close()
		}
	})
}

// New starts a proxy to target ("host:port") listening on 127.0.0.1 on a
// free port.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's address, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted returns the number of connections accepted so far.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Blackhole silences the link in both directions: connections stay open, but
// bytes read from either side are held, not delivered, until [Proxy.Heal],
// those read before it and not yet delivered (delayed) included. This is
// what a partition looks like to TCP: the sender's data waits in buffers
// and retransmissions, and nothing arrives. New connections are accepted
// and held in the same way; the target is not dialled for them until Heal,
// so it sees nothing of them, as behind a partition. A close is not held as
// bytes are: when one side closes its connection, the proxy closes the
// other side at once, unless it holds bytes read from the side that closed
// (then after Heal, when it has delivered them). A server that stops is
// thus seen to go even through a blackhole. Blackhole does nothing if the
// link is already blackholed.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.healed == nil {
		p.healed = make(chan struct{})
	}
}

// Heal ends a [Proxy.Blackhole]: held bytes are delivered, in order, and the
// link forwards again. It does nothing if the link is not blackholed.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.healed != nil {
		close(p.healed)
		p.healed = nil
	}
}

// StallReplies holds the bytes the target sends back, until [Proxy.Resume]:
// requests still reach the target, and its replies wait in the proxy, as
// they would behind a server or a network that paused. It does nothing if
// replies are stalled already. It and [Proxy.Blackhole] are independent:
// bytes flow from the target only when neither holds them.
func (p *Proxy) StallReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resumed == nil {
		p.resumed = make(chan struct{})
	}
}

// Resume ends a [Proxy.StallReplies]: held replies are delivered, in order.
// It does nothing if replies are not stalled.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resumed != nil {
		close(p.resumed)
		p.resumed = nil
	}
}

// DelayReplies delays every chunk of bytes the target sends back: each is
// delivered d after the proxy read it, in order, and the proxy goes on
// reading meanwhile (see "What the faults keep of TCP"). The requests are
// not delayed: the target acts on them at once, and the client learns of
// it d later, as behind a slow return path or a server slow to answer
// after it acted. d <= 0 ends the delay: chunks read from then on are due
// at once, after those still held, which keep their times. A chunk held by
// a delay is also held by [Proxy.Blackhole] and [Proxy.StallReplies] when
// it falls due while they hold the link.
func (p *Proxy) DelayReplies(d time.Duration) { p.setDelay(true, d) }

// DelayRequests delays every chunk of bytes the clients send to the target,
// as [Proxy.DelayReplies] does replies: the target gets each request d
// after the proxy read it. Connections themselves are dialled at once.
func (p *Proxy) DelayRequests(d time.Duration) { p.setDelay(false, d) }

func (p *Proxy) setDelay(replies bool, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay[index(replies)] = max(d, 0)
}

func index(replies bool) int {
	if replies {
		return 1
	}
	return 0
}

// Retarget makes the proxy forward to target ("host:port") from now on,
// as a virtual IP or a DNS name moved to another server: each connection
// dialled after it goes to target, those held by a [Proxy.Blackhole] and
// not yet dialled included. Open connections stay with the old target;
// [Proxy.Reset] ends them, as a moved virtual IP does (the new server
// knows nothing of them).
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// Refuse resets every open connection and, until [Proxy.Accept], closes each
// new connection at once: the target looks down.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	p.refusing = true
	p.mu.Unlock()
	p.Reset()
}

// Accept ends a [Proxy.Refuse]: new connections are forwarded again.
func (p *Proxy) Accept() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = false
}

// Reset closes every open connection; new ones are forwarded as usual.
func (p *Proxy) Reset() {
	p.mu.Lock()
	conns := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		conns = append(conns, l)
	}
	p.mu.Unlock()
	for _, l := range conns {
		p.drop(l)
	}
}

// Close stops the proxy: it closes the listener and every connection, and
// waits for its goroutines to exit. Close is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	first := !p.closed
	p.closed = true
	p.mu.Unlock()
	var err error
	if first {
		err = p.ln.Close()
		p.Reset()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.accepted.Add(1)
		p.mu.Lock()
		if p.closed || p.refusing {
			p.mu.Unlock()
			c.Close()
			continue
		}
		l := &link{client: c, dropped: make(chan struct{})}
		p.conns[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

// serve dials the target for l (the one of the moment: see Retarget),
// once the link is not blackholed, and pumps bytes both ways until either
// side closes or the proxy drops the link.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	if !p.waitOpen(l, false) { // dropped while held
		return
	}
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	s, err := net.Dial("tcp", target)
	if err != nil {
		p.drop(l)
		return
	}
	p.mu.Lock()
	_, kept := p.conns[l]
	if kept {
		l.server = s
	}
	p.mu.Unlock()
	if !kept { // dropped while dialling
		s.Close()
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.pump(l, s, l.client, false)
	}()
	p.pump(l, l.client, s, true)
}

// chunk is what one read of a side gave: bytes, or the side's end.
type chunk struct {
	b   []byte
	due time.Time // read + the direction's delay
	end bool      // the side closed (or failed): drop the link
}

// line is one direction of a link: the chunks read from a side and not
// yet delivered to the other, oldest first.
type line struct {
	mu     sync.Mutex
	chunks []chunk
	held   int           // bytes in chunks
	more   chan struct{} // a chunk was added (buffer of 1)
	room   chan struct{} // a chunk was taken out (buffer of 1)
}

// pump copies from src to dst, for replies (from the target) or requests:
// a reader appends each chunk read to a line, due the direction's delay
// later; pump delivers them in order, each once due and once the link
// lets it through (waitOpen). The end of src is the line's last chunk:
// delivered, it drops the link. pump returns once the reader has.
func (p *Proxy) pump(l *link, dst io.Writer, src io.Reader, replies bool) {
	ln := &line{more: make(chan struct{}, 1), room: make(chan struct{}, 1)}
	read := make(chan struct{})
	go func() { // owned by pump, which waits for it
		defer close(read)
		p.read(l, ln, src, replies)
	}()
	defer func() {
		p.drop(l) // the reader returns once src is closed
		<-read
	}()
	for {
		c, ok := ln.first(l)
		if !ok {
			return
		}
		if !sleepUntil(l, c.due) {
			return
		}
		if c.end {
			return
		}
		if !p.waitOpen(l, replies) {
			return
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
		ln.pop()
	}
}

// read appends what src gives to ln until src ends or l is dropped.
func (p *Proxy) read(l *link, ln *line, src io.Reader, replies bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !ln.push(l, chunk{b: append([]byte(nil), buf[:n]...), due: p.due(replies)}) {
				return
			}
		}
		if err != nil {
			ln.push(l, chunk{end: true, due: p.due(replies)})
			return
		}
	}
}

// due is when a chunk of the direction read now is due.
func (p *Proxy) due(replies bool) time.Time {
	p.mu.Lock()
	d := p.delay[index(replies)]
	p.mu.Unlock()
	return time.Now().Add(d)
}

// push appends c, waiting while the line holds MaxHeld bytes or more; it
// reports false if l was dropped meanwhile.
func (ln *line) push(l *link, c chunk) bool {
	for {
		ln.mu.Lock()
		if c.end || ln.held < MaxHeld {
			ln.chunks = append(ln.chunks, c)
			ln.held += len(c.b)
			ln.mu.Unlock()
			poke(ln.more)
			return true
		}
		ln.mu.Unlock()
		select {
		case <-ln.room:
		case <-l.dropped:
			return false
		}
	}
}

// first waits for the oldest chunk; it reports false if l was dropped.
func (ln *line) first(l *link) (chunk, bool) {
	for {
		ln.mu.Lock()
		if len(ln.chunks) > 0 {
			c := ln.chunks[0]
			ln.mu.Unlock()
			return c, true
		}
		ln.mu.Unlock()
		select {
		case <-ln.more:
		case <-l.dropped:
			return chunk{}, false
		}
	}
}

// pop takes out the oldest chunk, delivered.
func (ln *line) pop() {
	ln.mu.Lock()
	ln.held -= len(ln.chunks[0].b)
	ln.chunks[0] = chunk{}
	ln.chunks = ln.chunks[1:]
	ln.mu.Unlock()
	poke(ln.room)
}

// poke wakes the waiter on ch, if any, without blocking.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sleepUntil waits until t; it reports false if l was dropped meanwhile.
func sleepUntil(l *link, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		select {
		case <-l.dropped:
			return false
		default:
			return true
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-l.dropped:
		return false
	}
}

// waitOpen blocks while the link is blackholed and, for replies, while
// they stall; it reports false if l was dropped meanwhile.
func (p *Proxy) waitOpen(l *link, replies bool) bool {
	for {
		p.mu.Lock()
		held := p.healed
		if held == nil && replies {
			held = p.resumed
		}
		p.mu.Unlock()
		if held == nil {
			select {
			case <-l.dropped:
				return false
			default:
				return true
			}
		}
		select {
		case <-held:
		case <-l.dropped:
			return false
		}
	}
}

// drop closes l and forgets it.
func (p *Proxy) drop(l *link) {
	p.mu.Lock()
	delete(p.conns, l)
	s := l.server
	p.mu.Unlock()
	l.close(s)
}
