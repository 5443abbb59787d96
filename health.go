package simba

import (
	"encoding/json"
	"fmt"
	"math"
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
//
// Its JSON form (what [Client.ReadyHandler] serves) gives durations in
// seconds, as numbers with a "_seconds" suffix, and the deadline as an
// RFC 3339 timestamp with its zone (see [Health.MarshalJSON]).
type Health struct {
	State SessionState // connecting, live or closed
	// Session is the live session's ID ("" unless live).
	Session string
	// Deadline is the session deadline: terms are valid until then unless
	// renewed (zero unless live).
	Deadline time.Time
	// Headroom is the time left before the deadline (0 unless live).
	Headroom time.Duration
	// TTL is the granted session TTL (0 unless live).
	TTL time.Duration
}

// healthJSON is the JSON form of Health.
type healthJSON struct {
	State           SessionState `json:"state"`
	Session         string       `json:"session,omitempty"`
	Deadline        *time.Time   `json:"deadline,omitempty"`
	HeadroomSeconds float64      `json:"headroom_seconds"`
	TTLSeconds      float64      `json:"ttl_seconds"`
}

// MarshalJSON encodes h as
//
//	{"state":"live","session":"7587888","deadline":"2026-05-04T10:00:02.7+02:00",
//	 "headroom_seconds":2.2,"ttl_seconds":3}
//
// state is connecting, live or closed; session and deadline are left out
// unless live; deadline is RFC 3339 with fractional seconds and the zone's
// offset; headroom_seconds and ttl_seconds are seconds (0 unless live).
func (h Health) MarshalJSON() ([]byte, error) {
	j := healthJSON{
		State:           h.State,
		Session:         h.Session,
		HeadroomSeconds: h.Headroom.Seconds(),
		TTLSeconds:      h.TTL.Seconds(),
	}
	if !h.Deadline.IsZero() {
		j.Deadline = &h.Deadline
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what [Health.MarshalJSON] encodes.
func (h *Health) UnmarshalJSON(data []byte) error {
	var j healthJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*h = Health{State: j.State, Session: j.Session}
	if j.Deadline != nil {
		h.Deadline = *j.Deadline
	}
	var err error
	if h.Headroom, err = seconds("headroom_seconds", j.HeadroomSeconds); err != nil {
		return err
	}
	if h.TTL, err = seconds("ttl_seconds", j.TTLSeconds); err != nil {
		return err
	}
	return nil
}

// seconds is s seconds as a duration, rounded to the nanosecond. A value
// out of a duration's range is an error naming the field.
func seconds(field string, s float64) (time.Duration, error) {
	d := math.Round(s * float64(time.Second))
	if d >= math.MaxInt64 || d < math.MinInt64 {
		return 0, fmt.Errorf("simba: health JSON: %s %g is out of a duration's range", field, s)
	}
	return time.Duration(d), nil
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
// 200 while the client's session is live and 503 otherwise (connecting, or
// closing and closed), with the [Health] as a JSON body:
//
//	{"state":"live","session":"7587888","deadline":"2026-05-04T10:00:02.7+02:00",
//	 "headroom_seconds":2.2,"ttl_seconds":3}
//
// Durations are in seconds (see [Health.MarshalJSON]). The deadline is RFC 3339 with the zone's offset,
// and present only while live.
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
