package zookeeper

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"
)

// ZooKeeper wire protocol values the wire looks at.
const (
	xidPing       = -2
	opCreate      = 1
	opPing        = 11
	opClose       = -11
	opSetWatches  = 101
	connectReqLen = 4 + 4 + 8 + 4 + 8 // length, protocol version, last zxid, timeout, session ID
)

// wire is one TCP connection of a session, between go-zookeeper and the
// server. It reads the packets on their way:
//
//   - Connect request (the first write): the session ID go-zookeeper asks
//     to resume must be the session's own (see link.checkConnect), and the
//     timeout asked for is set back to the one the caller requested.
//   - Connect response (the first read): the session ID and the negotiated
//     timeout go to the link, which is how the backend learns the timeout
//     go-zookeeper v1.0.4 keeps private. The timeout field go-zookeeper then
//     reads is set to the largest value, so that it neither pings (a session
//     must live by KeepAlive alone, or it would never expire while its
//     process lives) nor times reads out; pings are dropped as well.
//   - Requests and replies are counted. While a request waits for its reply
//     and nothing arrives for two thirds of the timeout (go-zookeeper's own
//     read timeout), the wire closes the connection, so that go-zookeeper
//     reconnects, to another server of an ensemble; this replaces
//     go-zookeeper's read timeout, which would fire on an idle connection
//     too. (A shorter one would save more sessions on a dead server, at the
//     cost of needless reconnections to a slow one.)
//   - The reply to the close request tells Session.Close that the server
//     has ended the session.
//   - Each create request is reported to the link once written (see
//     link.awaitCreateSent), so that Acquire can send its read of the lease
//     znode right behind the create, in the same round trip.
//   - The zxid in each reply header is kept by the link and set to 0 on its
//     way to go-zookeeper, which puts the link's back into the requests
//     that carry it (the connect request's last zxid seen, the setWatches
//     request's relative zxid). go-zookeeper v1.0.4 would keep it itself,
//     but it writes it on its receive goroutine while another goroutine
//     reads it to build the setWatches request after each connection: a
//     data race that the race detector reports.
type wire struct {
	net.Conn // the raw connection
	l        *link
	addr     string
	connect  time.Duration // bounds the wait for the connect response

	wmu         sync.Mutex // go-zookeeper writes from one goroutine at a time
	sentConnect bool

	// Reader side: go-zookeeper reads from one goroutine at a time.
	handshaken bool
	buf        []byte // connect response not yet read by go-zookeeper
	hdr        [4]byte
	hdrN       int
	left       int      // bytes of the current packet still to come
	off        int      // bytes of the current packet seen
	head       [12]byte // the current reply's xid and zxid

	mu        sync.Mutex
	pending   int           // requests sent and not answered
	watchdog  time.Duration // two thirds of the granted timeout
	closeXid  int32
	closeSent bool
}

func newWire(c net.Conn, l *link, addr string, connect time.Duration) *wire {
	return &wire{Conn: c, l: l, addr: addr, connect: connect}
}

// Write forwards one packet from go-zookeeper (it writes each packet with
// one call), looking at it on the way.
func (w *wire) Write(p []byte) (int, error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if !w.sentConnect {
		w.sentConnect = true
		if len(p) < connectReqLen {
			w.Conn.Close()
			return 0, fmt.Errorf("simba/zookeeper: connect request of %d bytes", len(p))
		}
		if err := w.l.checkConnect(int64(binary.BigEndian.Uint64(p[20:28]))); err != nil {
			w.Conn.Close()
			return 0, err
		}
		q := append([]byte(nil), p...)
		binary.BigEndian.PutUint64(q[8:16], uint64(w.l.zxid()))
		binary.BigEndian.PutUint32(q[16:20], uint32(w.l.requested))
		if _, err := w.Conn.Write(q); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if len(p) >= 12 {
		xid := int32(binary.BigEndian.Uint32(p[4:8]))
		op := int32(binary.BigEndian.Uint32(p[8:12]))
		if xid == xidPing && op == opPing {
			return len(p), nil
		}
		w.mu.Lock()
		w.pending++
		if w.pending == 1 {
			w.armLocked()
		}
		if op == opClose {
			w.closeXid, w.closeSent = xid, true
		}
		w.mu.Unlock()
		if op == opCreate {
			defer w.sentCreate(p)
		}
		if op == opSetWatches && len(p) >= 20 {
			q := append([]byte(nil), p...)
			binary.BigEndian.PutUint64(q[12:20], uint64(w.l.zxid()))
			if _, err := w.Conn.Write(q); err != nil {
				return 0, err
			}
			return len(p), nil
		}
	}
	return w.Conn.Write(p)
}

// sentCreate tells the link that the create request p was written (or
// failed to be: the caller then learns of it from go-zookeeper).
func (w *wire) sentCreate(p []byte) {
	if len(p) < 16 {
		return
	}
	n := int(int32(binary.BigEndian.Uint32(p[12:16])))
	if n < 0 || n > len(p)-16 {
		return
	}
	w.l.createSent(p[16 : 16+n])
}

// armLocked (re)starts the watchdog: a reply, or any byte, must arrive
// within w.watchdog.
func (w *wire) armLocked() {
	if w.watchdog > 0 {
		w.Conn.SetReadDeadline(time.Now().Add(w.watchdog))
	}
}

// Read passes the server's packets to go-zookeeper.
func (w *wire) Read(p []byte) (int, error) {
	if !w.handshaken {
		if err := w.handshake(); err != nil {
			return 0, err
		}
	}
	if len(w.buf) > 0 {
		n := copy(p, w.buf)
		w.buf = w.buf[n:]
		return n, nil
	}
	n, err := w.Conn.Read(p)
	if n > 0 {
		w.scan(p[:n])
	}
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() {
		// Only the watchdog sets read deadlines after the handshake.
		w.Close()
		err = fmt.Errorf("simba/zookeeper: no reply from %s within %v: %w", w.addr, w.watchdog, err)
	}
	return n, err
}

// handshake reads the server's connect response and hands its session ID
// and timeout to the link.
func (w *wire) handshake() error {
	w.handshaken = true
	w.Conn.SetReadDeadline(time.Now().Add(max(w.connect, w.l.knownTimeout())))
	var hdr [4]byte
	if _, err := io.ReadFull(w.Conn, hdr[:]); err != nil {
		return w.fail(err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 16 || n > 4096 {
		return w.fail(fmt.Errorf("connect response of %d bytes", n))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(w.Conn, body); err != nil {
		return w.fail(err)
	}
	w.Conn.SetReadDeadline(time.Time{})
	timeout := int32(binary.BigEndian.Uint32(body[4:8]))
	id := int64(binary.BigEndian.Uint64(body[8:16]))
	if err := w.l.accept(id, timeout); err != nil {
		w.Close()
		return err
	}
	binary.BigEndian.PutUint32(body[4:8], math.MaxInt32)
	w.buf = append(hdr[:], body...)
	w.mu.Lock()
	w.watchdog = w.l.granted() * 2 / 3
	w.mu.Unlock()
	return nil
}

// fail records a failed handshake and closes the connection.
func (w *wire) fail(err error) error {
	err = fmt.Errorf("handshake with %s: %w", w.addr, err)
	w.l.attemptFailed(err)
	w.Close()
	return err
}

// scan follows the packet boundaries of the reply stream: replies (xid ≥ 0)
// answer requests; events (xid -1) and ping replies do not. It hands the
// zxid of each reply to the link and sets it to 0 in b (see wire).
func (w *wire) scan(b []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(b) > 0 {
		if w.hdrN < 4 {
			k := copy(w.hdr[w.hdrN:], b)
			w.hdrN += k
			b = b[k:]
			if w.hdrN == 4 {
				w.left = int(binary.BigEndian.Uint32(w.hdr[:]))
				w.off = 0
				if w.left == 0 {
					w.hdrN = 0
				}
			}
			continue
		}
		k := min(len(b), w.left)
		for i := 0; i < k && w.off+i < len(w.head); i++ {
			w.head[w.off+i] = b[i]
			if w.off+i >= 4 { // the zxid
				b[i] = 0
			}
		}
		w.off += k
		w.left -= k
		b = b[k:]
		if w.left == 0 {
			w.hdrN = 0
			if w.off >= len(w.head) {
				w.replyLocked(int32(binary.BigEndian.Uint32(w.head[0:4])), int64(binary.BigEndian.Uint64(w.head[4:12])))
			}
		}
	}
	if w.pending > 0 {
		w.armLocked() // progress: the link is alive
	} else {
		w.Conn.SetReadDeadline(time.Time{})
	}
}

func (w *wire) replyLocked(xid int32, zxid int64) {
	if xid < 0 {
		return
	}
	w.l.sawZxid(zxid)
	if w.pending > 0 {
		w.pending--
	}
	if w.closeSent && xid == w.closeXid {
		w.l.acked()
	}
}

// SetReadDeadline ignores go-zookeeper's read deadlines: the wire's
// watchdog replaces them (see wire).
func (w *wire) SetReadDeadline(time.Time) error { return nil }

// SetDeadline applies only the write deadline (see SetReadDeadline).
func (w *wire) SetDeadline(t time.Time) error { return w.Conn.SetWriteDeadline(t) }

// Close closes the connection.
func (w *wire) Close() error { return w.Conn.Close() }
