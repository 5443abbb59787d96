package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// health is what the console knows of the backend: whether its last read
// worked, and since when that is so.
type health struct {
	Known   bool      // a read has ended
	OK      bool      // the last read worked
	Since   time.Time // when the backend last became reachable, or unreachable
	Checked time.Time // when the last read ended
	Err     string    // why the last read failed, for a page and the log
}

// backendEvent is the data of the event stream's "backend" event, which
// tells the page's live indicator whether the backend can be read.
type backendEvent struct {
	OK      bool      `json:"ok"`
	Since   time.Time `json:"since"` // reachable, or unreachable, since
	Backend string    `json:"backend"`
	Error   string    `json:"error,omitempty"`
}

// state returns what the console knows of the backend, and a channel
// closed when that changes (reachable or not, or why not).
func (h *hub) state() (health, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.health, h.healthChanged
}

// observe records the outcome of a read of the backend: a page load, a
// poll, a /healthz check, the check of an operation's target. The first
// failure after a success, and the first success after failures, are
// logged, and wake the event streams; a success after failures also makes
// the poller read now, so that pages showing the failure show the truth
// at once. It returns the state.
func (h *hub) observe(err error) health {
	now := time.Now()
	ok := err == nil
	msg := ""
	if !ok {
		msg = h.s.describe(err)
	}
	h.mu.Lock()
	was := h.health
	h.health.Checked = now
	if !was.Known || was.OK != ok {
		h.health.Since = now
	}
	h.health.Known, h.health.OK, h.health.Err = true, ok, msg
	changed := !was.Known || was.OK != ok || was.Err != msg
	if changed {
		close(h.healthChanged)
		h.healthChanged = make(chan struct{})
	}
	now2 := h.health
	h.mu.Unlock()

	log := h.s.opts.log
	switch {
	case !ok && (!was.Known || was.OK):
		log.Warn("reading the backend failed; retrying", "backend", h.s.opts.backend, "err", redact(err.Error()))
	case ok && was.Known && !was.OK:
		log.Info("reading the backend works again", "backend", h.s.opts.backend, "unreachable_for", now.Sub(was.Since).Round(time.Millisecond).String())
		h.poke()
	}
	return now2
}

// counts reports whether the outcome err of a read made under parent (and
// a timeout of its own) says something of the backend: not when parent
// ended first, as when a page was closed or the console is closing.
func counts(parent context.Context, err error) bool {
	return err == nil || parent.Err() == nil
}

// probe reads the backend now, bounded by the timeout, unless a read ended
// less than a poll interval ago; it returns the state. Probes wait for
// each other rather than read at once, so a supervisor asking often costs
// one read per interval at most.
func (h *hub) probe(parent context.Context) health {
	fresh := func() (health, bool) {
		st, _ := h.state()
		return st, st.Known && time.Since(st.Checked) < h.s.opts.interval
	}
	if st, ok := fresh(); ok {
		return st
	}
	ctx, cancel := context.WithTimeout(parent, h.s.opts.timeout)
	defer cancel()
	select {
	case h.probing <- struct{}{}:
		defer func() { <-h.probing }()
	case <-ctx.Done(): // the probe before this one had no answer in time either
		if parent.Err() != nil {
			st, _ := h.state()
			return st
		}
		return h.observe(ctx.Err())
	}
	if st, ok := fresh(); ok {
		return st
	}
	_, err := h.s.admin.Ops(ctx)
	if !counts(parent, err) {
		st, _ := h.state()
		return st
	}
	return h.observe(err)
}

// healthReply is the JSON body of /healthz.
type healthReply struct {
	Status  string    `json:"status"` // "ok" or "unreachable"
	Backend string    `json:"backend"`
	Checked time.Time `json:"checked,omitzero"`           // when the read it reports on ended
	Since   time.Time `json:"unreachable_since,omitzero"` // for "unreachable"
	Error   string    `json:"error,omitempty"`            // for "unreachable"
}

// serveHealth answers GET /healthz for a supervisor: 200 when the last read
// of the backend, made less than a poll interval ago or now, worked; 503
// with the reason otherwise. It needs no token and is bounded by the
// timeout.
func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	st := s.hub.probe(r.Context())
	rep := healthReply{Status: "ok", Backend: s.opts.backend, Checked: st.Checked.UTC()}
	status := http.StatusOK
	switch {
	case !st.Known:
		status, rep.Status, rep.Error = http.StatusServiceUnavailable, "unknown", "not read yet"
	case !st.OK:
		status, rep.Status, rep.Since, rep.Error = http.StatusServiceUnavailable, "unreachable", st.Since.UTC(), st.Err
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(rep)
}

// describe says what went wrong reading the backend, for a page, the log
// and /healthz.
func (s *Server) describe(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("no answer within %v", s.opts.timeout)
	}
	return redact(err.Error())
}
