package console

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/consoletest"
)

// outageTimeout is the console's timeout in the outage tests.
const outageTimeout = 2 * time.Second

// backendState decodes a "backend" event.
func backendState(t *testing.T, ev sse) backendEvent {
	t.Helper()
	var b backendEvent
	require.NoError(t, json.Unmarshal([]byte(ev.data), &b), ev.data)
	return b
}

// healthOf asks /healthz and decodes the answer.
func healthOf(t *testing.T, s *Server) (int, healthReply) {
	t.Helper()
	w := get(s, "/healthz")
	var r healthReply
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r), w.Body.String())
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	return w.Code, r
}

// TestStreamRecoversAfterAnOutage cuts the console off the backend (its
// requests hang, as with a stopped server) for longer than the nodes' TTL,
// while a node stops: the stream says the backend is unreachable and shows
// the error, not the old page; once the link is back it shows the truth
// by itself. The admin's session outlives the outage here (its TTL is a
// minute): reopening an ended one is the admin's part, tested with a real
// server in the browser tests.
func TestStreamRecoversAfterAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		f := startFleet(t, b)
		defer f.StopAll()
		var logs bytes.Buffer
		a, err := admin.Open(t.Context(), b.Node("console"), admin.WithTTL(time.Minute))
		require.NoError(t, err)
		defer a.Close()
		s, err := New(a, WithReadOnly(true), WithTimeout(outageTimeout), WithBackendName("memory, test"),
			WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		require.NoError(t, err)
		defer s.Close()

		w, stop := openStream(t, s, "/groups")
		defer stop()
		assert.True(t, backendState(t, w.nextOf(t, "backend", 5*time.Second)).OK, "reachable at first")
		require.NoError(t, f.GridMatches(consoletest.ParseGrid(w.next(t, 5*time.Second).data)))

		cut := time.Now()
		b.Node("console").Partition()
		st := backendState(t, w.nextOf(t, "backend", 2*outageTimeout))
		assert.False(t, st.OK, "the stream says the backend is unreachable")
		assert.Equal(t, "memory, test", st.Backend)
		assert.Contains(t, st.Error, "no answer within 2s")
		assert.False(t, st.Since.Before(cut), "unreachable since the cut, or later")
		ev := w.next(t, time.Second)
		assert.Contains(t, ev.data, "The backend (memory, test) could not be read, since")
		assert.Contains(t, ev.data, "no answer within 2s")
		assert.Empty(t, consoletest.ParseGrid(ev.data), "the old grid is not shown as if it were current")

		f.Stop("c")
		time.Sleep(3 * nodeTTL)
		b.Node("console").Heal()
		healed := time.Now()
		st = backendState(t, w.nextOf(t, "backend", 2*retryLimit*time.Second+outageTimeout))
		assert.True(t, st.OK, "reachable again")
		assert.Less(t, time.Since(healed), outageTimeout+retryLimit*time.Second, "within a timeout and the longest retry wait")
		deadline := time.Now().Add(10 * time.Second)
		for {
			cells := consoletest.ParseGrid(w.next(t, time.Until(deadline)).data)
			if len(cells) > 0 && f.GridMatches(cells) == nil {
				break
			}
		}
		assert.Equal(t, 1, strings.Count(logs.String(), "reading the backend failed; retrying"), "logged once:\n%s", logs.String())
		assert.Equal(t, 1, strings.Count(logs.String(), "reading the backend works again"), "logged once:\n%s", logs.String())
	})
}

// TestPageDuringAnOutage loads a page while the backend does not answer:
// a whole page saying what failed, within the timeout.
func TestPageDuringAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		s, _, done := openConsole(t, b, WithToken(testToken), WithTimeout(outageTimeout), WithBackendName("etcd, prefix /simba/"))
		defer done()
		b.Node("console").Partition()
		defer b.Node("console").Heal()
		for _, path := range []string{"/elections", "/groups", "/jobs", "/members", "/jobs/digest"} {
			start := time.Now()
			w := get(s, path)
			assert.Equal(t, outageTimeout, time.Since(start), "%s: answered at the timeout", path)
			assert.Equal(t, http.StatusServiceUnavailable, w.Code, path)
			page := w.Body.String()
			assert.Contains(t, page, "<html", "%s: a whole page", path)
			assert.Contains(t, page, `data-backend-error`, path)
			assert.Contains(t, page, "The backend (etcd, prefix /simba/) could not be read", path)
			assert.Contains(t, page, "no answer within 2s", path)
			assert.Contains(t, page, "keeps trying", path)
		}
	})
}

func TestHealthz(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		s, _, done := openConsole(t, b, WithToken(testToken), WithTimeout(outageTimeout), WithBackendName("memory"))
		defer done()

		code, r := healthOf(t, s)
		assert.Equal(t, http.StatusOK, code, "no token needed")
		assert.Equal(t, healthReply{Status: "ok", Backend: "memory", Checked: time.Now().UTC()}, r)

		before := b.Stats().Records
		for range 10 {
			code, _ = healthOf(t, s)
			assert.Equal(t, http.StatusOK, code)
		}
		assert.Equal(t, before, b.Stats().Records, "asked again within a poll interval: no read")

		b.Node("console").Partition()
		time.Sleep(2 * time.Second)
		start := time.Now()
		code, r = healthOf(t, s)
		assert.Equal(t, outageTimeout, time.Since(start), "answered at the timeout")
		assert.Equal(t, http.StatusServiceUnavailable, code)
		assert.Equal(t, "unreachable", r.Status)
		assert.Equal(t, "no answer within 2s", r.Error)
		assert.Equal(t, time.Now().UTC(), r.Since)

		b.Node("console").Heal()
		time.Sleep(2 * time.Second)
		code, r = healthOf(t, s)
		assert.Equal(t, http.StatusOK, code, "reachable again")
		assert.Equal(t, "ok", r.Status)

		s.Close()
		assert.Equal(t, http.StatusServiceUnavailable, get(s, "/healthz").Code, "closed")
	})
}

// TestHealthzProbesTogether has several supervisors ask at once while the
// backend hangs: one read between them, each answered within the timeout.
func TestHealthzProbesTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		s, _, done := openConsole(t, b, WithReadOnly(true), WithTimeout(outageTimeout))
		defer done()
		b.Node("console").Partition()
		defer b.Node("console").Heal()
		start := time.Now()
		codes := make(chan int, 5)
		for range 5 {
			go func() { codes <- get(s, "/healthz").Code }()
		}
		for range 5 {
			assert.Equal(t, http.StatusServiceUnavailable, <-codes)
		}
		assert.LessOrEqual(t, time.Since(start), outageTimeout)
	})
}

func TestRetryWaitsGrowJittered(t *testing.T) {
	const interval = time.Second
	for n := 1; n <= 20; n++ {
		step := min(interval<<(n-1), retryLimit*interval)
		seen := map[time.Duration]bool{}
		for range 100 {
			d := retryWait(n, interval)
			require.GreaterOrEqual(t, d, step/2, "retry %d", n)
			require.LessOrEqual(t, d, step, "retry %d", n)
			seen[d] = true
		}
		assert.Greater(t, len(seen), 10, "retry %d: the waits are jittered", n)
	}
}
