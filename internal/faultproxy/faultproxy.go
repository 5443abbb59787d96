// Package faultproxy is the TCP proxy for tests that injects the network
// faults a lease library must survive:
//
//   - a link that goes silent both ways, a partition, with TCP holding the
//     bytes until it heals ([Proxy.Blackhole], [Proxy.Heal]);
//   - a server that gets requests but whose replies are held, a pause
//     ([Proxy.StallReplies], [Proxy.Resume]);
//   - a server that refuses connections, down or restarting ([Proxy.Refuse],
//     [Proxy.Accept]);
//   - connections that are reset ([Proxy.Reset]).
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
)

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
	conns    map[*link]struct{}

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
// bytes read from either side are held, not delivered, until [Proxy.Heal].
// This is what a partition looks like to TCP: the sender's data waits in
// buffers and retransmissions, and nothing arrives. New connections are
// accepted and held in the same way; the target is not dialled for them
// until Heal, so it sees nothing of them, as behind a partition. A close is
// not held as bytes are: when one side closes its connection, the proxy
// closes the other side at once, unless it holds bytes read from the side
// that closed (then after Heal, when it has delivered them). A server that
// stops is thus seen to go even through a blackhole. Blackhole does nothing
// if the link is already blackholed.
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
		target := p.target
		l := &link{client: c, dropped: make(chan struct{})}
		p.conns[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l, target)
	}
}

// serve dials the target for l, once the link is not blackholed, and pumps
// bytes both ways until either side closes or the proxy drops the link.
func (p *Proxy) serve(l *link, target string) {
	defer p.wg.Done()
	if !p.waitOpen(l, false) { // dropped while held
		return
	}
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

// pump copies from src to dst, holding the bytes while the link is
// blackholed and, for replies (from the target), while they stall. It drops
// the link when either side fails.
func (p *Proxy) pump(l *link, dst io.Writer, src io.Reader, replies bool) {
	defer p.drop(l)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitOpen(l, replies) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
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
