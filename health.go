package simba

import (
	"encoding/json"
	"net/http"
	"time"
)

// SessionState is the state of a client's session, as [Client.Health]
// reports it.
type SessionState string

// Session states.
const (
	// SessionConnecting: no live session yet, or the last one ended and the
	// next is being opened. No term of the client is valid.
	SessionConnecting SessionState = "connecting"
	// SessionLive: a session is open and its deadline is ahead.
	SessionLive SessionState = "live"
	// SessionClosed: the client is closing or closed.
	SessionClosed SessionState = "closed"
)

// Health is a snapshot of a client's session.
type Health struct {
	State SessionState `json:"state"` // connecting, live or closed
	// Session is the live session's ID ("" unless live).
	Session string `json:"session,omitempty"`
	// Deadline is the session deadline: terms are valid until then unless
	// renewed (zero unless live).
	Deadline time.Time `json:"deadline,omitzero"`
	// Headroom is the time left before the deadline (0 unless live).
	Headroom time.Duration `json:"headroom"`
	// TTL is the granted session TTL (0 unless live).
	TTL time.Duration `json:"ttl"`
}

// Health reports the client's session state and deadline headroom. A live
// session's headroom normally stays between two thirds of the granted TTL
// and the TTL minus the drift margin; lower values mean renewals are slow or
// failing.
func (c *Client) Health() Health {
	c.mu.Lock()
	closing, g := c.closing, c.gen
	c.mu.Unlock()
	switch {
	case closing:
		return Health{State: SessionClosed}
	case g == nil || !g.valid():
		return Health{State: SessionConnecting}
	}
	left := g.left()
	return Health{
		State:    SessionLive,
		Session:  g.sess.ID(),
		Deadline: time.Now().Add(left),
		Headroom: max(left, 0),
		TTL:      g.ttl,
	}
}

// headroom is the deadline headroom in seconds, for the metric.
func (c *Client) headroom() float64 { return c.Health().Headroom.Seconds() }

// ReadyHandler returns an http.Handler for a readiness endpoint: it answers
// 200 while the client's session is live and 503 otherwise, with the
// [Health] as a JSON body.
func (c *Client) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := c.Health()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if h.State != SessionLive {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(h)
	})
}
