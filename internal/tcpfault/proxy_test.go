package tcpfault_test

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/tcpfault"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo starts a line echo server; it stops when the test ends.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	conns := make(chan net.Conn, 16)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
			go io.Copy(c, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// roundTrip sends a line on c and reads it back within d.
func roundTrip(c net.Conn, d time.Duration) error {
	c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err := bufio.NewReader(c).ReadString('\n')
	return err
}

func TestBlackhole(t *testing.T) {
	p, err := tcpfault.Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, time.Second); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}

	p.Blackhole()
	if err := roundTrip(c, 100*time.Millisecond); err == nil {
		t.Fatal("a reply came through the blackhole")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := roundTrip(c2, 100*time.Millisecond); err == nil {
		t.Fatal("a new connection got through the blackhole")
	}

	p.Unblackhole()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection that dropped bytes was not closed")
	}
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := roundTrip(c3, time.Second); err != nil {
		t.Fatalf("after Unblackhole: %v", err)
	}

	p.Sever()
	c3.SetDeadline(time.Now().Add(time.Second))
	if _, err := c3.Read(make([]byte, 1)); err == nil {
		t.Fatal("Sever left a connection open")
	}
}

func TestStallReplies(t *testing.T) {
	p, err := tcpfault.Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.StallReplies()
	if err := roundTrip(c, 100*time.Millisecond); err == nil {
		t.Fatal("a reply came through while stalled")
	}
	p.Resume()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatalf("the held reply was not delivered: %v", err)
	}
}
