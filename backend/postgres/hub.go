package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kit/wake"
)

// hub is the backend's one LISTEN connection and the subscribers it
// wakes. A NOTIFY payload is "c <lease name>" (a candidacy inserted or
// deleted), "m <group>" (a member) or "r <record key>". A subscriber's
// function runs on the hub's goroutine and must not block. While the
// listening connection is down (or with WithoutListen), every subscriber
// is woken every poll interval, and all of them once when it is back.
type hub struct {
	b *Backend

	subs wake.Registry // topics: the payloads; prefixes: of record keys

	once      sync.Once // start
	mu        sync.Mutex
	listening bool
}

func newHub(b *Backend) *hub { return &hub{b: b} }

// subscribe calls f on each notification of topic until cancel.
func (h *hub) subscribe(topic string, f func()) (cancel func()) { return h.subs.Subscribe(topic, f) }

// subscribeRecords calls f on each notification of a record under prefix.
func (h *hub) subscribeRecords(prefix string, f func()) (cancel func()) {
	return h.subs.SubscribePrefix(prefix, f)
}

// isListening reports whether notifications arrive now.
func (h *hub) isListening() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.listening
}

func (h *hub) dispatch(payload string) {
	var keys []string
	if key, ok := strings.CutPrefix(payload, "r "); ok {
		keys = []string{key}
	}
	wake.Call(h.subs.Collect([]string{payload}, keys))
}

func (h *hub) wakeAll() { wake.Call(h.subs.All()) }

// start starts the listener (unless WithoutListen) and the fallback
// ticker, once.
func (h *hub) start() {
	h.once.Do(func() {
		h.b.wg.Go(h.tick)
		if !h.b.noListen {
			h.b.wg.Go(h.listen)
		}
	})
}

// tick wakes every subscriber every poll interval while not listening.
func (h *hub) tick() {
	t := time.NewTicker(h.b.poll)
	defer t.Stop()
	for {
		select {
		case <-h.b.ctx.Done():
			return
		case <-t.C:
			if !h.isListening() {
				h.wakeAll()
			}
		}
	}
}

// listen keeps a connection of its own LISTENing on the schema's channel,
// reconnecting with jittered backoff.
func (h *hub) listen() {
	ctx := h.b.ctx
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := h.listenOnce(ctx)
		if pe := (*poolerError)(nil); errors.As(err, &pe) {
			h.b.log.Warn("simba/postgres: a connection pooler stands between this backend and PostgreSQL; not LISTENing through it: waiters and watches read at expiry times and every poll interval (as with WithoutListen)",
				"schema", h.b.schema, "poll", h.b.poll, "announced_pid", pe.announced, "server_pid", pe.server)
			return
		}
		h.mu.Lock()
		was := h.listening
		h.listening = false
		h.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if was {
			attempt = 0
			h.b.log.Warn("simba/postgres: the listening connection was lost; reading at expiry times and every poll interval until it is back", "schema", h.b.schema, "err", err)
		}
		backoff.Sleep(ctx, backoff.Wait(attempt+1, 5*time.Second))
	}
}

func (h *hub) listenOnce(ctx context.Context) error {
	pc, err := h.b.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack() // ours alone: never back in the pool in LISTEN state
	defer conn.Close(context.Background())
	if !skipPoolerCheck.Load() {
		// Through a pooler in transaction mode, a LISTEN stays on whichever
		// server connection ran it, which then receives notifications
		// while the pooler has lent it to no client: PgBouncer logs "got
		// packet 'A' from server when not linked", and 1.18 to 1.20 can
		// exit on it. Poolers announce a process ID of their own (the key
		// of their cancel requests), never the server's: a mismatch is a
		// pooler, and this backend then never LISTENs through it.
		var pid uint32
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
			return err
		}
		if announced := conn.PgConn().PID(); pid != announced {
			return &poolerError{announced: announced, server: pid}
		}
	}
	channel := channelName(h.b.schema)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	// A LISTEN through a pooler in transaction mode succeeds and hears
	// nothing: the backend counts as listening only once a probe, sent on
	// another connection of the pool, comes back.
	probe := fmt.Sprintf("p %d", rand.Uint64())
	if _, err := h.b.pool.Exec(ctx, "SELECT pg_notify($1, $2)", channel, probe); err != nil {
		return err
	}
	warn := time.AfterFunc(probeWait, func() {
		h.b.log.Warn("simba/postgres: notifications do not arrive on the listening connection (a pooler in transaction mode? see WithoutListen); reading at expiry times and every poll interval", "schema", h.b.schema, "poll", h.b.poll)
	})
	defer warn.Stop()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Payload == probe {
			warn.Stop()
			h.mu.Lock()
			h.listening = true
			h.mu.Unlock()
			h.wakeAll() // what changed while nobody listened
			continue
		}
		h.dispatch(n.Payload)
	}
}

// skipPoolerCheck makes the listener LISTEN without checking for a pooler
// first: a test sets it to reach the probe's fallback through one.
var skipPoolerCheck atomic.Bool

// poolerError says that a connection pooler stands between the backend and
// the server: the process ID the connection announced is not the server
// process's.
type poolerError struct{ announced, server uint32 }

func (e *poolerError) Error() string {
	return fmt.Sprintf("simba/postgres: a connection pooler answers for the server (announced process %d, server process %d)", e.announced, e.server)
}

// probeWait is how long the listener waits for its probe before it warns
// that notifications do not arrive.
const probeWait = 5 * time.Second
