package console

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// pingEvery is how often an idle event stream sends a comment, so that
// proxies and the browser see it alive.
const pingEvery = 15 * time.Second

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

	mu    sync.Mutex
	feeds map[string]*feed // by view path, while watched
	wake  chan struct{}    // buffer of one: poll now

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
	return &hub{s: s, feeds: map[string]*feed{}, wake: make(chan struct{}, 1)}
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
// ctx ends.
func (h *hub) run(ctx context.Context) {
	interval := h.s.opts.interval
	var lastErr string // logged once until it changes
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
		lastErr = h.poll(ctx, feeds, lastErr)
		t := time.NewTimer(interval)
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

// poll renders feeds from one read of the backend, bounded by five poll
// intervals. It logs a failure unless it is the same as lastErr, and
// returns the failure ("" for none).
func (h *hub) poll(ctx context.Context, feeds []*feed, lastErr string) string {
	s := h.s
	pctx, cancel := context.WithTimeout(ctx, 5*s.opts.interval)
	defer cancel()
	l := &loader{ctx: pctx, a: s.admin}
	failed := ""
	var skipped []string
	for _, f := range feeds {
		p := s.newPage(f.view)
		if err := p.build(l); err != nil {
			if ctx.Err() != nil {
				return lastErr // closing
			}
			p.Err = describe(err)
			if failed == "" {
				failed = redact(err.Error())
			}
		}
		for _, q := range p.Problems {
			skipped = append(skipped, q.Key)
		}
		html, err := render("main", p)
		if err != nil {
			s.opts.log.Error("rendering a view failed", "view", f.view.Path(), "err", err)
			continue
		}
		h.publish(f, html)
	}
	h.logSkipped(skipped)
	switch {
	case failed != "" && failed != lastErr:
		s.opts.log.Warn("reading the backend failed; retrying every poll interval", "err", failed)
	case failed == "" && lastErr != "":
		s.opts.log.Info("reading the backend works again")
	}
	return failed
}

// serveEvents serves the event stream of the view named by the query
// parameter "view" (a page path): an event "view" with the page's main
// part whenever it changes, the first at once.
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
	for {
		html, changed := s.hub.latest(f)
		if html != nil && !bytes.Equal(html, last) {
			if write(rc, w, event("view", html)) != nil {
				return
			}
			last = html
		}
		select {
		case <-changed:
		case <-ping.C:
			if write(rc, w, []byte(": ping\n\n")) != nil {
				return
			}
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		}
	}
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
