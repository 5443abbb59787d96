package faultproxy_test

import (
	"bufio"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/faultproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A wait for something that must happen is bounded by long; a check that
// something does not get through waits short (it cannot fail spuriously on
// a slow machine, only miss a fault that lets bytes through late).
const (
	long  = 5 * time.Second
	short = 100 * time.Millisecond
)

// target is a line echo server that tells the test what reaches it.
type target struct {
	addr     string
	accepted atomic.Int64  // connections accepted
	lines    chan string   // every line received, before it is echoed
	conns    chan net.Conn // every connection, closed by the clean-up
}

// startTarget starts a target; it stops when the test ends.
func startTarget(t *testing.T) *target {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{addr: ln.Addr().String(), lines: make(chan string, 64), conns: make(chan net.Conn, 64)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tg.accepted.Add(1)
			tg.conns <- c
			go tg.echo(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(tg.conns)
		for c := range tg.conns {
			c.Close()
		}
	})
	return tg
}

func (tg *target) echo(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		select {
		case tg.lines <- strings.TrimSuffix(line, "\n"):
		default:
		}
		if _, err := c.Write([]byte(line)); err != nil {
			return
		}
	}
}

// newProxy starts a proxy to tg; it closes when the test ends.
func newProxy(t *testing.T, tg *target) *faultproxy.Proxy {
	p, err := faultproxy.New(tg.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// conn is a client connection through a proxy.
type conn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *faultproxy.Proxy) *conn {
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &conn{c, bufio.NewReader(c)}
}

// send writes msg as a line.
func (c *conn) send(t *testing.T, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
}

// read reads a line within d.
func (c *conn) read(d time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	line, err := c.r.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

// roundTrip sends msg and wants it echoed within long.
func (c *conn) roundTrip(t *testing.T, msg, when string) {
	t.Helper()
	c.send(t, msg)
	if got, err := c.read(long); err != nil || got != msg {
		t.Fatalf("%s: echo of %q: %q, %v", when, msg, got, err)
	}
}

// silent wants nothing to arrive on c within short.
func (c *conn) silent(t *testing.T, when string) {
	t.Helper()
	if got, err := c.read(short); err == nil {
		t.Fatalf("%s: %q came through", when, got)
	}
}

// closed wants c closed by the proxy within long.
func (c *conn) closed(t *testing.T, when string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(long))
	if _, err := c.r.ReadByte(); err == nil || isTimeout(err) {
		t.Fatalf("%s: the connection is still open (read: %v)", when, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// notReceived wants no line to reach the target within short.
func (tg *target) notReceived(t *testing.T, when string) {
	t.Helper()
	if got, err := await.Within(tg.lines, short, ""); err == nil {
		t.Fatalf("%s: %q reached the target", when, got)
	}
}

func TestForwardBlackholeHeal(t *testing.T) {
	tg := startTarget(t)
	p := newProxy(t, tg)
	c := dial(t, p)
	c.roundTrip(t, "one", "through the open link")
	if got := await.For(t, tg.lines, long, "the target did not get the line"); got != "one" {
		t.Fatalf("the target got %q, want one", got)
	}

	p.Blackhole()
	p.Blackhole() // no effect
	c.send(t, "two")
	c.silent(t, "through the blackholed link")
	tg.notReceived(t, "through the blackholed link")
	// A new connection is held too, and the target is not dialled for it.
	c2 := dial(t, p)
	c2.send(t, "three")
	c2.silent(t, "a new connection through the blackholed link")
	tg.notReceived(t, "a new connection through the blackholed link")
	if n := tg.accepted.Load(); n != 1 {
		t.Fatalf("the target accepted %d connections while blackholed, want the 1 from before", n)
	}

	p.Heal()
	p.Heal() // no effect
	// The held lines arrive after Heal, on both connections.
	if got, err := c.read(long); err != nil || got != "two" {
		t.Fatalf("held line after Heal: %q, %v", got, err)
	}
	if got, err := c2.read(long); err != nil || got != "three" {
		t.Fatalf("held line of the new connection after Heal: %q, %v", got, err)
	}
	c.roundTrip(t, "four", "after Heal")
	c2.roundTrip(t, "five", "after Heal, on the new connection")
	if p.Accepted() != 2 {
		t.Errorf("Accepted() = %d, want 2", p.Accepted())
	}
}

func TestStallRepliesResume(t *testing.T) {
	tg := startTarget(t)
	p := newProxy(t, tg)
	c := dial(t, p)
	c.roundTrip(t, "one", "through the open link")
	<-tg.lines

	p.StallReplies()
	p.StallReplies() // no effect
	c.send(t, "two")
	// The request reaches the target; its reply is held.
	if got := await.For(t, tg.lines, long, "the request sent while replies stall did not reach the target"); got != "two" {
		t.Fatalf("the target got %q, want two", got)
	}
	c.silent(t, "a reply while replies stall")

	p.Resume()
	p.Resume() // no effect
	if got, err := c.read(long); err != nil || got != "two" {
		t.Fatalf("held reply after Resume: %q, %v", got, err)
	}
	c.roundTrip(t, "three", "after Resume")
}

// Blackhole and StallReplies hold replies independently: replies flow only
// when neither holds them.
func TestStallRepliesAndBlackhole(t *testing.T) {
	tg := startTarget(t)
	p := newProxy(t, tg)
	c := dial(t, p)
	c.roundTrip(t, "one", "through the open link")
	<-tg.lines

	p.StallReplies()
	c.send(t, "two")
	await.For(t, tg.lines, long, "the request sent while replies stall did not reach the target")
	p.Blackhole()
	p.Resume()
	c.silent(t, "a reply after Resume while blackholed")
	p.Heal()
	if got, err := c.read(long); err != nil || got != "two" {
		t.Fatalf("held reply after Heal: %q, %v", got, err)
	}
}

func TestRefuseAccept(t *testing.T) {
	tg := startTarget(t)
	p := newProxy(t, tg)
	c := dial(t, p)
	c.roundTrip(t, "one", "through the open link")
	p.Refuse()
	c.closed(t, "an open connection after Refuse")
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		_ = c2.SetReadDeadline(time.Now().Add(long))
		if _, err := c2.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("a new connection was not closed while refusing (read: %v)", err)
		}
		c2.Close()
	}
	p.Accept()
	c3 := dial(t, p)
	c3.roundTrip(t, "three", "after Accept")
	if p.Accepted() != 3 {
		t.Errorf("Accepted() = %d, want 3", p.Accepted())
	}
}

func TestReset(t *testing.T) {
	tg := startTarget(t)
	p := newProxy(t, tg)
	c := dial(t, p)
	c.roundTrip(t, "one", "through the open link")
	p.Reset()
	c.closed(t, "an open connection after Reset")
	c2 := dial(t, p)
	c2.roundTrip(t, "two", "a new connection after Reset")
}

// A target that closes a connection closes the client's too, even through
// a blackhole: a server that stops is seen to go.
func TestTargetCloseThroughBlackhole(t *testing.T) {
	tg := startTarget(t)
	p := newProxy(t, tg)
	c := dial(t, p)
	c.roundTrip(t, "one", "through the open link")
	p.Blackhole()
	(<-tg.conns).Close()
	c.closed(t, "the target closed the connection")
	p.Heal()
}

// Close ends every connection, held ones included, and stops every
// goroutine (goleak checks after the tests).
func TestCloseWhileHeld(t *testing.T) {
	tg := startTarget(t)
	p, err := faultproxy.New(tg.addr)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	c.roundTrip(t, "one", "through the open link")
	p.StallReplies()
	c.send(t, "two")
	p.Blackhole()
	c.send(t, "three")
	c2 := dial(t, p)
	c2.send(t, "four")
	await.For(t, await.Returned(p.Close), long, "Close did not return")
	c.closed(t, "after Close")
	c2.closed(t, "a held new connection after Close")
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
