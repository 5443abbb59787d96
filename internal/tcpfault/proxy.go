// Package tcpfault is a TCP proxy for fault tests: it forwards connections
// to one target and can blackhole them, as a network partition would.
package tcpfault

import (
	"io"
	"net"
	"sync"
)

// Proxy forwards every connection it accepts to its target.
//
// While blackholed, it forwards nothing: bytes in both directions are read
// and dropped, and new connections are accepted but never reach the
// target. The peers notice nothing but silence, as behind a partition.
// Unblackhole resumes forwarding for new connections and closes those that
// dropped bytes, whose streams are broken.
//
// A Proxy is safe for concurrent use by multiple goroutines.
type Proxy struct {
	ln     net.Listener
	target string

	mu         sync.Mutex
	cond       *sync.Cond // signalled when stalled or closed changes
	blackholed bool
	stalled    bool
	closed     bool
	pipes      map[*pipe]struct{}
	wg         sync.WaitGroup
}

// pipe is one proxied connection.
type pipe struct {
	client, server net.Conn // server is nil when accepted while blackholed
	dropped        bool     // guarded by Proxy.mu
}

// Start listens on a free port of 127.0.0.1 and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, pipes: make(map[*pipe]struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Blackhole stops forwarding (see Proxy).
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackholed = true
}

// Unblackhole resumes forwarding and closes the connections that dropped
// bytes while blackholed.
func (p *Proxy) Unblackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackholed = false
	for pp := range p.pipes {
		if pp.dropped {
			pp.close()
		}
	}
}

// StallReplies holds the bytes the target sends back: requests still
// reach the target, and the replies wait in the proxy until Resume.
func (p *Proxy) StallReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
}

// Resume delivers the replies held by StallReplies and forwards again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = false
	p.cond.Broadcast()
}

// Sever closes every connection now, as a peer reset would.
func (p *Proxy) Sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pp := range p.pipes {
		pp.close()
	}
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines to exit.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	err := p.ln.Close()
	for pp := range p.pipes {
		pp.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (pp *pipe) close() {
	pp.client.Close()
	if pp.server != nil {
		pp.server.Close()
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve proxies one connection until either side closes it.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	pp := &pipe{client: c}
	p.mu.Lock()
	blackholed, closed := p.blackholed, p.closed
	p.mu.Unlock()
	if !blackholed && !closed {
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			return
		}
		pp.server = s
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pp.close()
		return
	}
	p.pipes[pp] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.pipes, pp)
		p.mu.Unlock()
		pp.close()
	}()
	if pp.server == nil { // accepted while blackholed: drop everything
		p.mu.Lock()
		pp.dropped = true
		p.mu.Unlock()
		io.Copy(io.Discard, c)
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.copy(pp, pp.server, pp.client, false); done <- struct{}{} }()
	go func() { p.copy(pp, pp.client, pp.server, true); done <- struct{}{} }()
	<-done
	pp.close()
	<-done
}

// copy forwards from src to dst, dropping what it reads while blackholed;
// replies (from the target) wait while stalled.
func (p *Proxy) copy(pp *pipe, dst, src net.Conn, replies bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for replies && p.stalled && !p.closed {
				p.cond.Wait()
			}
			drop := p.blackholed
			if drop {
				pp.dropped = true
			}
			p.mu.Unlock()
			if !drop {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}
