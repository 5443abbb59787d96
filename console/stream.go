package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/simba-go/simba/backend/kit/backoff"
)

// pingEvery is how often an idle event stream sends a "ping" event, so
// that proxies see it alive and the page's script can tell a stream that
// went silent (a console stopped, a connection cut without a word) from
// an idle one: it reconnects after three pings' worth of silence.
const pingEvery = 10 * time.Second

// retryLimit is how many poll intervals the poller waits at most between
// reads that fail.
const retryLimit = 4

// writeTimeout bounds each write to an event stream: a client that stops
// reading is dropped rather than holding the stream (and Close) up.
const writeTimeout = 10 * time.Second

// hub reads the backend for the views that open pages watch, one read
// per poll interval shared by all of them, and tells their event streams
// when a view's rendering changes. It reads nothing while no page is open.
//
// admin offers no watch of the records, so the hub polls; see the package
// documentation.
type hub struct {
	s *Server

	mu            sync.Mutex
	feeds         map[string]*feed // by view path, while watched
	wake          chan struct{}    // buffer of one: poll now
	health        health           // what the last read of the backend showed
	healthChanged chan struct{}    // closed and replaced when health changes
	probing       chan struct{}    // buffer of one: held by the /healthz read under way

	// skipped names the records the last poll skipped, logged when it
	// changes; only the poller uses it.
	skipped string
}

// feed is the rendering of one view, shared by the streams that show it.
type feed struct {
	view    view
	subs    int
	html    []byte        // the last rendering of "main"; nil before the first
	changed chan struct{} // closed and replaced when html changes
}

func newHub(s *Server) *hub {
	return &hub{s: s, feeds: map[string]*feed{}, wake: make(chan struct{}, 1),
		healthChanged: make(chan struct{}), probing: make(chan struct{}, 1)}
}

// poke makes the poller read the backend now rather than at its next
// tick: for a new stream, or after an operation.
func (h *hub) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// subscribe adds a stream to the feed of v; the returned function takes it
// out again.
func (h *hub) subscribe(v view) (*feed, func()) {
	h.mu.Lock()
	f := h.feeds[v.Path()]
	if f == nil {
		f = &feed{view: v, changed: make(chan struct{})}
		h.feeds[v.Path()] = f
	}
	f.subs++
	h.mu.Unlock()
	h.poke()
	return f, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if f.subs--; f.subs == 0 {
			delete(h.feeds, v.Path())
		}
	}
}

// latest returns the feed's rendering and a channel closed when it
// changes.
func (h *hub) latest(f *feed) ([]byte, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return f.html, f.changed
}

// publish stores a rendering of f and wakes its streams if it changed.
func (h *hub) publish(f *feed, html []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f.html != nil && bytes.Equal(f.html, html) {
		return
	}
	f.html = html
	close(f.changed)
	f.changed = make(chan struct{})
}

// active returns the feeds being watched.
func (h *hub) active() []*feed {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*feed, 0, len(h.feeds))
	for _, f := range h.feeds {
		out = append(out, f)
	}
	return out
}

// run polls the backend every interval while any view is watched, until
// ctx ends. After a failed read it waits longer, from one interval up to
// retryLimit intervals, jittered (internal/backoff) so that consoles that
// lost the backend together do not retry in step; it never stops trying.
// A new stream or an operation makes it read at once.
func (h *hub) run(ctx context.Context) {
	interval := h.s.opts.interval
	failures := 0
	for {
		feeds := h.active()
		if len(feeds) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-h.wake:
				continue
			}
		}
		wait := interval
		if h.poll(ctx, feeds) {
			failures = 0
		} else {
			failures++
			wait = retryWait(failures, interval)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-h.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// retryWait is the wait before the next read after the failures-th failed
// read in a row: from one interval, doubling up to retryLimit intervals,
// jittered (equal jitter: each wait is drawn from [d/2, d]).
func retryWait(failures int, interval time.Duration) time.Duration {
	return backoff.Jitter(backoff.Step(failures, interval, retryLimit*interval))
}

// poll renders feeds from one read of the backend, bounded by the
// timeout, and reports whether the read worked. A view that could not be
// read is rendered as an error page: its streams show the failure rather
// than what the backend held before.
func (h *hub) poll(ctx context.Context, feeds []*feed) bool {
	s := h.s
	pctx, cancel := context.WithTimeout(ctx, s.opts.timeout)
	defer cancel()
	l := &loader{ctx: pctx, a: s.admin, now: time.Now()}
	var failed error
	var skipped []string
	pages := make([]*page, len(feeds))
	errs := make([]error, len(feeds))
	for i, f := range feeds {
		p := s.newPage(f.view)
		if err := p.build(l); err != nil {
			if ctx.Err() != nil {
				return true // closing
			}
			errs[i] = err
			if failed == nil {
				failed = err
			}
		}
		for _, q := range p.Problems {
			skipped = append(skipped, q.Key)
		}
		pages[i] = p
	}
	st := h.observe(failed)
	for i, f := range feeds {
		p := pages[i]
		if errs[i] != nil {
			p.failed(errs[i], st)
		}
		html, err := render("main", p)
		if err != nil {
			s.opts.log.Error("rendering a view failed", "view", f.view.Path(), "err", err)
			continue
		}
		h.publish(f, html)
	}
	h.logSkipped(skipped)
	return failed == nil
}

// serveEvents serves the event stream of the view named by the query
// parameter "view" (a page path): an event "view" with the page's main
// part whenever it changes, the first as soon as the backend has been read;
// an event "backend" whenever the backend becomes reachable or
// unreachable (JSON: backendEvent), the first as soon as that is known;
// and an event "ping" every pingEvery.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	v, ok := parseView(r.URL.Query().Get("view"))
	if !ok {
		http.Error(w, "unknown view", http.StatusBadRequest)
		return
	}
	if !s.enterStream() {
		http.Error(w, "the console is closed", http.StatusServiceUnavailable)
		return
	}
	defer s.streams.Done()
	f, leave := s.hub.subscribe(v)
	defer leave()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if write(rc, w, []byte("retry: 2000\n\n")) != nil {
		return
	}
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	var last []byte
	var told health
	for {
		st, healthChanged := s.hub.state()
		if st.Known && (!told.Known || st.OK != told.OK || st.Err != told.Err) {
			if write(rc, w, s.backendEvent(st)) != nil {
				return
			}
			told = st
		}
		html, changed := s.hub.latest(f)
		if html != nil && !bytes.Equal(html, last) {
			if write(rc, w, event("view", html)) != nil {
				return
			}
			last = html
		}
		select {
		case <-changed:
		case <-healthChanged:
		case <-ping.C:
			if write(rc, w, event("ping", []byte(strconv.FormatInt(time.Now().UnixMilli(), 10)))) != nil {
				return
			}
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// backendEvent formats the "backend" event of st.
func (s *Server) backendEvent(st health) []byte {
	data, _ := json.Marshal(backendEvent{OK: st.OK, Since: st.Since.UTC(), Backend: s.opts.backend, Error: st.Err})
	return event("backend", data)
}

// event formats a server-sent event: each line of data in a field.
func event(name string, data []byte) []byte {
	var buf bytes.Buffer
	buf.WriteString("event: " + name + "\n")
	for line := range bytes.Lines(bytes.ReplaceAll(data, []byte("\r"), nil)) {
		buf.WriteString("data: ")
		buf.Write(bytes.TrimSuffix(line, []byte("\n")))
		buf.WriteByte('\n')
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

// write writes b to an event stream and flushes it, within writeTimeout.
func write(rc *http.ResponseController, w http.ResponseWriter, b []byte) error {
	if err := rc.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	return rc.Flush()
}

// logSkipped logs the keys of the records skipped when they change.
func (h *hub) logSkipped(keys []string) {
	slices.Sort(keys)
	keys = slices.Compact(keys)
	joined := strings.Join(keys, "\n")
	if joined == h.skipped {
		return
	}
	h.skipped = joined
	if len(keys) == 0 {
		h.s.opts.log.Info("no records are skipped any more")
		return
	}
	h.s.opts.log.Warn("records that could not be used are skipped; the pages list them", "count", len(keys), "keys", keys[:min(len(keys), maxShownProblems)])
}
