package simba_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
)

func TestHealthAndReadyHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		n := b.Node("a")
		n.Partition()
		c, err := simba.New(n, simba.WithTTL(testTTL))
		require.NoError(t, err)
		ready := c.ReadyHandler()
		var raw map[string]any // the last body, as JSON
		get := func() (int, simba.Health) {
			rec := httptest.NewRecorder()
			ready.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ready", nil))
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			body := rec.Body.Bytes()
			raw = nil
			require.NoError(t, json.Unmarshal(body, &raw), "body %s", body)
			var h simba.Health
			require.NoError(t, json.Unmarshal(body, &h), "body %s", body)
			return rec.Code, h
		}
		code, h := get()
		assert.Equal(t, http.StatusServiceUnavailable, code)
		assert.Equal(t, simba.SessionConnecting, h.State)

		n.Heal()
		require.NoError(t, c.Ready(t.Context()))
		time.Sleep(500 * time.Millisecond)
		code, h = get()
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, simba.SessionLive, h.State)
		assert.Equal(t, c.SessionID(), h.Session)
		assert.Equal(t, 2200*time.Millisecond, h.Headroom)
		assert.Equal(t, testTTL, h.TTL)
		assert.WithinDuration(t, time.Now().Add(h.Headroom), h.Deadline, 0)
		// Durations in seconds, the deadline with its zone.
		assert.Equal(t, 2.2, raw["headroom_seconds"])
		assert.Equal(t, 3.0, raw["ttl_seconds"])
		deadline, err := time.Parse(time.RFC3339Nano, raw["deadline"].(string))
		require.NoError(t, err, "deadline %v is not RFC 3339 with a zone", raw["deadline"])
		assert.True(t, deadline.Equal(h.Deadline), "deadline %v, want %v", deadline, h.Deadline)

		require.NoError(t, c.Close())
		code, h = get()
		assert.Equal(t, http.StatusServiceUnavailable, code)
		assert.Equal(t, simba.SessionClosed, h.State)
		assert.Equal(t, map[string]any{"state": "closed", "headroom_seconds": 0.0, "ttl_seconds": 0.0}, raw,
			"no session and no deadline unless live")
	})
}

// Health's JSON round-trips, and refuses what no duration can hold.
func TestHealthJSON(t *testing.T) {
	at := time.Date(2026, 5, 4, 10, 0, 2, 700_000_000, time.FixedZone("CEST", 2*3600))
	h := simba.Health{State: simba.SessionLive, Session: "s1", Deadline: at, Headroom: 2200 * time.Millisecond, TTL: 3 * time.Second}
	data, err := json.Marshal(h)
	require.NoError(t, err)
	assert.JSONEq(t, `{"state":"live","session":"s1","deadline":"2026-05-04T10:00:02.7+02:00",
		"headroom_seconds":2.2,"ttl_seconds":3}`, string(data))
	var back simba.Health
	require.NoError(t, json.Unmarshal(data, &back))
	assert.True(t, back.Deadline.Equal(at))
	back.Deadline = at
	assert.Equal(t, h, back)

	var bad simba.Health
	assert.Error(t, json.Unmarshal([]byte(`{"state":"live","ttl_seconds":"three"}`), &bad), "a malformed duration is an error")
	assert.EqualError(t, json.Unmarshal([]byte(`{"state":"live","ttl_seconds":1e300}`), &bad), "simba: health JSON: ttl_seconds 1e+300 is out of a duration's range")
}
