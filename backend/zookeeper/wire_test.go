package zookeeper

import (
	"context"
	"encoding/binary"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/backend"
)

// pipeLink returns a link whose dials make in-memory connections; the
// server ends arrive on the returned channel.
func pipeLink(t *testing.T) (*link, <-chan net.Conn, *[]error) {
	servers := make(chan net.Conn, 4)
	var mu sync.Mutex
	var gone []error
	l := newLink(func(ctx context.Context, network, address string) (net.Conn, error) {
		c, s := net.Pipe()
		servers <- s
		return c, nil
	}, DefaultConnectTimeout, 1000, 1, func(err error) {
		mu.Lock()
		gone = append(gone, err)
		mu.Unlock()
	})
	require.NoError(t, l.hosts.Init([]string{"zk:2181"}))
	t.Cleanup(func() {
		l.stop()
		close(servers)
		for s := range servers {
			s.Close()
		}
	})
	return l, servers, &gone
}

func connectRequest(session int64, timeoutMs int32) []byte {
	p := make([]byte, 4+connectReqLen-4+4+16)
	binary.BigEndian.PutUint32(p[0:4], uint32(len(p)-4))
	binary.BigEndian.PutUint32(p[16:20], uint32(timeoutMs))
	binary.BigEndian.PutUint64(p[20:28], uint64(session))
	binary.BigEndian.PutUint32(p[28:32], 16)
	return p
}

func connectResponse(session int64, timeoutMs int32) []byte {
	p := make([]byte, 4+4+4+8+4+16)
	binary.BigEndian.PutUint32(p[0:4], uint32(len(p)-4))
	binary.BigEndian.PutUint32(p[8:12], uint32(timeoutMs))
	binary.BigEndian.PutUint64(p[12:20], uint64(session))
	binary.BigEndian.PutUint32(p[20:24], 16)
	return p
}

func packet(xid, op int32) []byte {
	p := make([]byte, 12)
	binary.BigEndian.PutUint32(p[0:4], 8)
	binary.BigEndian.PutUint32(p[4:8], uint32(xid))
	binary.BigEndian.PutUint32(p[8:12], uint32(op))
	return p
}

// readPacket reads one length-prefixed packet from c.
func readPacket(t *testing.T, c net.Conn) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	var hdr [4]byte
	_, err := io.ReadFull(c, hdr[:])
	require.NoError(t, err)
	body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	_, err = io.ReadFull(c, body)
	require.NoError(t, err)
	return append(hdr[:], body...)
}

// dial makes a wire and does the handshake the server answers with
// (session, timeout); it returns the wire, the server's end and the
// handshake's error.
func dial(t *testing.T, l *link, servers <-chan net.Conn, asked int64, session int64, timeoutMs int32) (net.Conn, net.Conn, error) {
	t.Helper()
	w, err := l.dial("tcp", "zk:2181", time.Second)
	require.NoError(t, err)
	srv := <-servers
	go func() {
		buf := make([]byte, 64)
		srv.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := io.ReadAtLeast(srv, buf, connectReqLen)
		if err != nil {
			return
		}
		if got := int32(binary.BigEndian.Uint32(buf[16:20])); got != 1000 {
			t.Errorf("connect request asks for %dms, want the requested 1000ms", got)
		}
		_ = n
		srv.Write(connectResponse(session, timeoutMs))
	}()
	if _, err := w.Write(connectRequest(asked, math.MaxInt32)); err != nil {
		return w, srv, err
	}
	var hdr [4]byte
	if _, err := io.ReadFull(w, hdr[:]); err != nil {
		return w, srv, err
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(w, body); err != nil {
		return w, srv, err
	}
	assert.Equal(t, int32(math.MaxInt32), int32(binary.BigEndian.Uint32(body[4:8])), "go-zookeeper must see the longest timeout")
	assert.Equal(t, session, int64(binary.BigEndian.Uint64(body[8:16])))
	return w, srv, nil
}

func TestWireLearnsTimeoutAndDropsPings(t *testing.T) {
	l, servers, gone := pipeLink(t)
	w, srv, err := dial(t, l, servers, 0, 0x42, 800)
	require.NoError(t, err)
	defer w.Close()
	select {
	case <-l.ready:
	default:
		t.Fatal("session not granted")
	}
	assert.Equal(t, int64(0x42), l.sessionID())
	assert.Equal(t, 800*time.Millisecond, l.granted())

	go func() {
		w.Write(packet(xidPing, opPing))
		w.Write(packet(7, 3))
	}()
	assert.Equal(t, packet(7, 3), readPacket(t, srv), "the ping was forwarded")

	// No reply to request 7: the watchdog closes the connection after two
	// thirds of the timeout.
	start := time.Now()
	_, err = w.Read(make([]byte, 16))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no reply")
	elapsed := time.Since(start)
	assert.Greater(t, elapsed, 450*time.Millisecond)
	assert.Less(t, elapsed, time.Second)
	assert.Empty(t, *gone)
}

func TestWireReplyKeepsWatchdogQuiet(t *testing.T) {
	l, servers, _ := pipeLink(t)
	w, srv, err := dial(t, l, servers, 0, 0x42, 450)
	require.NoError(t, err)
	defer w.Close()
	go w.Write(packet(9, 3))
	readPacket(t, srv)
	reply := make([]byte, 20)
	binary.BigEndian.PutUint32(reply[0:4], 16)
	binary.BigEndian.PutUint32(reply[4:8], 9)
	binary.BigEndian.PutUint64(reply[8:16], 0x1234)
	go func() { // in pieces, as TCP may deliver it
		srv.Write(reply[:6])
		srv.Write(reply[6:])
	}()
	buf := make([]byte, 64)
	n, err := io.ReadAtLeast(w, buf, 20)
	require.NoError(t, err)
	assert.Equal(t, 20, n)
	assert.Equal(t, int32(9), int32(binary.BigEndian.Uint32(buf[4:8])))
	assert.Zero(t, binary.BigEndian.Uint64(buf[8:16]), "go-zookeeper must not see the zxid")
	assert.Equal(t, int64(0x1234), l.zxid(), "the link keeps it")

	// The link's zxid goes into the setWatches request.
	setWatches := make([]byte, 4+4+4+8+12)
	binary.BigEndian.PutUint32(setWatches[0:4], uint32(len(setWatches)-4))
	binary.BigEndian.PutUint32(setWatches[4:8], 10)
	binary.BigEndian.PutUint32(setWatches[8:12], opSetWatches)
	go w.Write(setWatches)
	got := readPacket(t, srv)
	assert.Equal(t, uint64(0x1234), binary.BigEndian.Uint64(got[12:20]))
	go srv.Write(func() []byte { r := append([]byte(nil), reply...); binary.BigEndian.PutUint32(r[4:8], 10); return r }())
	_, err = io.ReadAtLeast(w, buf, 20)
	require.NoError(t, err)
	// Nothing pending: a quiet connection is not closed.
	done := make(chan error, 1)
	go func() { _, err := w.Read(buf); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("idle connection read ended: %v", err)
	case <-time.After(400 * time.Millisecond):
	}
	w.Close()
	<-done
}

func TestWireRefusesAnotherSession(t *testing.T) {
	l, servers, gone := pipeLink(t)
	w, _, err := dial(t, l, servers, 0, 0x42, 800)
	require.NoError(t, err)
	w.Close()

	// go-zookeeper after an expiry asks for a new session (ID 0).
	w2, err := l.dial("tcp", "zk:2181", time.Second)
	require.NoError(t, err)
	<-servers
	_, err = w2.Write(connectRequest(0, 800))
	require.ErrorIs(t, err, backend.ErrSessionDone)
	require.Len(t, *gone, 1)
	assert.ErrorIs(t, (*gone)[0], backend.ErrSessionDone)
}

func TestWireReportsExpiry(t *testing.T) {
	l, servers, gone := pipeLink(t)
	w, _, err := dial(t, l, servers, 0, 0x42, 800)
	require.NoError(t, err)
	w.Close()
	_, _, err = dial(t, l, servers, 0x42, 0, 0) // the server no longer knows the session
	require.ErrorIs(t, err, backend.ErrSessionDone)
	require.Len(t, *gone, 1)
	assert.Contains(t, (*gone)[0].Error(), "expired")

	l.stop()
	_, err = l.dial("tcp", "zk:2181", time.Second)
	assert.ErrorIs(t, err, errLinkStopped)
	_, pause := l.hosts.Next()
	assert.True(t, pause, "go-zookeeper pauses once the session is over")
}

func TestHostsPauseAfterAFullRound(t *testing.T) {
	var stopped atomic.Bool
	h := &hosts{stopped: &stopped}
	require.NoError(t, h.Init([]string{"a:1", "b:1"}))
	var got []string
	var pauses []bool
	for range 5 {
		s, p := h.Next()
		got, pauses = append(got, s), append(pauses, p)
	}
	assert.Equal(t, []string{"a:1", "b:1", "a:1", "b:1", "a:1"}, got)
	assert.Equal(t, []bool{false, false, true, false, true}, pauses)
	h.Connected()
	_, p := h.Next()
	assert.False(t, p, "a dropped connection is retried at once")
}

func TestMemberRecord(t *testing.T) {
	for _, m := range []struct {
		id   string
		data []byte
	}{{"", nil}, {"node-a", []byte("x")}, {strings.Repeat("é", 300), make([]byte, backend.MaxMemberData)}} {
		id, data, err := decodeMember(encodeMember(m.id, m.data))
		require.NoError(t, err)
		assert.Equal(t, m.id, id)
		assert.Equal(t, len(m.data), len(data))
	}
	for _, bad := range [][]byte{nil, {0}, {2, 0}, {1, 5, 'a'}, {1, 0xff}} {
		_, _, err := decodeMember(bad)
		assert.Error(t, err, "%v", bad)
	}
	assert.True(t, isSessionID("0123456789abcdef"))
	assert.False(t, isSessionID("0123456789ABCDEF"))
	assert.False(t, isSessionID("x"))
}
