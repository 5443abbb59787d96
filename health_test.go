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
		get := func() (int, simba.Health) {
			rec := httptest.NewRecorder()
			ready.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ready", nil))
			var h simba.Health
			require.NoError(t, json.NewDecoder(rec.Body).Decode(&h))
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

		require.NoError(t, c.Close())
		code, h = get()
		assert.Equal(t, http.StatusServiceUnavailable, code)
		assert.Equal(t, simba.SessionClosed, h.State)
	})
}
