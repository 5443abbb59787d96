package console

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/consoletest"
)

// testToken is the operations token of the tests.
const testToken = "test-token-0123456789abcdef"

// origin is where the tests reach the console.
const origin = "http://127.0.0.1:8642"

// nodeTTL is the session TTL of the fleet's nodes in the unit tests.
const nodeTTL = 3 * time.Second

// openConsole opens an admin on its own node of b and a console on it.
// The caller closes both with the returned function.
func openConsole(t *testing.T, b *memory.Backend, opts ...Option) (*Server, *admin.Admin, func()) {
	t.Helper()
	a, err := admin.Open(t.Context(), b.Node("console"))
	require.NoError(t, err)
	s, err := New(a, opts...)
	require.NoError(t, err)
	return s, a, func() {
		s.Close()
		require.NoError(t, a.Close())
	}
}

// startFleet starts nodes a, b and c on b and lets them settle.
func startFleet(t *testing.T, b *memory.Backend) *consoletest.Fleet {
	t.Helper()
	f := consoletest.NewFleet(t)
	for _, id := range []string{"a", "b", "c"} {
		f.Start(b.Node(id), id, nodeTTL)
	}
	time.Sleep(20 * time.Second)
	return f
}

// get serves a GET of path.
func get(h http.Handler, path string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, origin+path, nil))
	return w
}

// opCall is an operation request as a test sends it.
type opCall struct {
	method  string // default POST
	op      string
	body    string
	headers map[string]string // added to, or with "" removing, the defaults
}

// call serves an operation request: by default what the page sends,
// same-origin, with the token.
func call(h http.Handler, c opCall) *httptest.ResponseRecorder {
	method := c.method
	if method == "" {
		method = http.MethodPost
	}
	req := httptest.NewRequest(method, origin+"/api/ops/"+c.op, strings.NewReader(c.body))
	hdr := map[string]string{
		"Content-Type":   "application/json",
		TokenHeader:      testToken,
		"Origin":         origin,
		"Sec-Fetch-Site": "same-origin",
	}
	for k, v := range c.headers {
		hdr[k] = v
	}
	for k, v := range hdr {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestNewRefusesBadOptions(t *testing.T) {
	b := memory.New()
	defer b.Close()
	a, err := admin.Open(t.Context(), b.Node("console"))
	require.NoError(t, err)
	defer a.Close()
	for _, tc := range []struct {
		name string
		opts []Option
		want error
	}{
		{"no token", nil, ErrNoToken},
		{"short token", []Option{WithToken("short")}, ErrWeakToken},
		{"token with a space", []Option{WithToken("0123456789 abcdef")}, ErrWeakToken},
		{"token not ASCII", []Option{WithToken("0123456789abcdefé")}, ErrWeakToken},
		{"poll too often", []Option{WithToken(testToken), WithPollInterval(time.Millisecond)}, ErrInvalidOption},
		{"nil logger", []Option{WithToken(testToken), WithLogger(nil)}, ErrInvalidOption},
		{"host with a port", []Option{WithToken(testToken), WithAllowedHosts("ops.example:80")}, ErrInvalidOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(a, tc.opts...)
			assert.ErrorIs(t, err, tc.want)
			assert.Nil(t, s)
		})
	}
	_, err = New(nil, WithReadOnly(true))
	assert.ErrorIs(t, err, ErrInvalidOption)
	for _, opts := range [][]Option{{WithReadOnly(true)}, {WithToken(NewToken())}} {
		s, err := New(a, opts...)
		require.NoError(t, err)
		s.Close()
	}
}

func TestPagesShowWhatTheNodesHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		f := startFleet(t, b)
		defer f.StopAll()
		s, _, done := openConsole(t, b, WithToken(testToken))
		defer done()

		w := get(s, "/")
		assert.Equal(t, http.StatusOK, w.Code, "the overview is the landing page")

		pages := map[string]string{}
		for _, path := range []string{"/elections", "/groups", "/jobs", "/members", "/jobs/digest", "/jobs/billing.3"} {
			w := get(s, path)
			require.Equal(t, http.StatusOK, w.Code, path)
			assert.Equal(t, contentSecurityPolicy, w.Header().Get("Content-Security-Policy"), path)
			assert.Equal(t, "nosniff", w.Header().Get("X-Content-Type-Options"), path)
			assert.Equal(t, "text/html; charset=utf-8", w.Header().Get("Content-Type"), path)
			body := w.Body.String()
			assert.NotContains(t, body, testToken, "%s shows the token", path)
			assert.NotContains(t, body, "<script>", "%s has inline script", path)
			assert.NotContains(t, body, "style=", "%s has inline style", path)
			pages[path] = body
		}

		require.NoError(t, f.GridMatches(consoletest.ParseGrid(pages["/groups"])), "the grid shows the true holders")
		holders := map[string]bool{}
		for _, h := range f.PartitionHolders() {
			holders[h.Member] = true
		}
		assert.Len(t, holders, 3, "every node holds partitions")

		rows := consoletest.ElectionRows(pages["/elections"])
		assert.Len(t, rows, 3, "ingest, report and digest; partitions are on the groups page")
		for _, name := range []string{"ingest", "report", "digest"} {
			h, ok := f.Holder(name)
			require.True(t, ok, name)
			assert.Equal(t, h, rows[name], name)
		}

		jobs := pages["/jobs"]
		assert.Contains(t, jobs, `data-job="digest" data-holder="`)
		assert.Contains(t, jobs, `data-job="report" data-holder="`)
		assert.Contains(t, jobs, `data-source="normal" data-result="succeeded"`, "digest's runs")
		assert.Equal(t, 8, strings.Count(jobs, `<tr data-job="billing.`), "the billing partitions")
		assert.Contains(t, jobs, "fixed rate 2s")

		for _, id := range []string{"a", "b", "c"} {
			assert.Contains(t, pages["/members"], `<tr data-member="`+id+`" data-drained="false" data-state="active">`)
		}
		digest := pages["/jobs/digest"]
		assert.GreaterOrEqual(t, strings.Count(digest, "<tr data-seq="), 5, "digest's history")
		assert.Contains(t, pages["/jobs/billing.3"], `data-job="billing.3"`)

		assert.Equal(t, http.StatusNotFound, get(s, "/jobs/nothing").Code)
		assert.Equal(t, http.StatusNotFound, get(s, "/nothing").Code)
		assert.Equal(t, http.StatusMethodNotAllowed, call(s, opCall{op: "x", method: http.MethodDelete}).Code)
	})
}

func TestReadOnlyPagesOfferNoOperations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		f := startFleet(t, b)
		defer f.StopAll()
		s, _, done := openConsole(t, b, WithReadOnly(true))
		defer done()
		for _, path := range []string{"/elections", "/groups", "/jobs", "/members", "/jobs/digest"} {
			body := get(s, path).Body.String()
			assert.NotContains(t, body, "data-op=", path)
			assert.NotContains(t, body, `<dialog`, path)
			assert.Contains(t, body, "read-only", path)
		}
	})
}

func TestStaticAssets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		s, _, done := openConsole(t, b, WithReadOnly(true))
		defer done()
		for path, ctype := range map[string]string{
			"/static/console.js":  "text/javascript; charset=utf-8",
			"/static/console.css": "text/css; charset=utf-8",
			"/static/icon.svg":    "image/svg+xml",
		} {
			w := get(s, path)
			assert.Equal(t, http.StatusOK, w.Code, path)
			assert.Equal(t, ctype, w.Header().Get("Content-Type"), path)
			assert.Equal(t, contentSecurityPolicy, w.Header().Get("Content-Security-Policy"), path)
			body := strings.ReplaceAll(w.Body.String(), `xmlns="http://www.w3.org/2000/svg"`, "")
			assert.NotContains(t, body, "http://", path, "nothing fetched from elsewhere")
			assert.NotContains(t, body, "https://", path, "nothing fetched from elsewhere")
		}
		assert.Equal(t, http.StatusNotFound, get(s, "/static/").Code, "no listing")
		assert.Equal(t, http.StatusNotFound, get(s, "/static/nothing.js").Code)
		w := get(s, "/elections")
		assert.Equal(t, http.StatusOK, w.Code, "an empty backend")
		assert.Contains(t, w.Body.String(), "No elections yet.")
	})
}

func TestHostsOtherThanTheConsolesAreRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		s, _, done := openConsole(t, b, WithReadOnly(true), WithAllowedHosts("ops.example"))
		defer done()
		for host, want := range map[string]int{
			"127.0.0.1:8642":        http.StatusOK,
			"[::1]:8642":            http.StatusOK,
			"localhost:8642":        http.StatusOK,
			"LOCALHOST":             http.StatusOK,
			"10.1.2.3":              http.StatusOK,
			"ops.example:8642":      http.StatusOK,
			"attacker.example:8642": http.StatusForbidden,
			"127.0.0.1.nip.example": http.StatusForbidden,
			"":                      http.StatusForbidden,
		} {
			req := httptest.NewRequest(http.MethodGet, origin+"/elections", nil)
			req.Host = host
			w := httptest.NewRecorder()
			s.ServeHTTP(w, req)
			assert.Equal(t, want, w.Code, "host %q", host)
			assert.NotEmpty(t, w.Header().Get("Content-Security-Policy"))
		}
	})
}

// streamWriter is a ResponseWriter for an event stream read by a test
// while the handler writes it.
type streamWriter struct {
	header http.Header
	mu     sync.Mutex
	buf    bytes.Buffer
	code   int
	events chan sse // complete events
}

// sse is one server-sent event.
type sse struct{ name, data string }

func newStreamWriter() *streamWriter {
	return &streamWriter{header: http.Header{}, events: make(chan sse, 1000)}
}

func (w *streamWriter) Header() http.Header { return w.header }

func (w *streamWriter) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.code = code
}

func (w *streamWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.buf.Write(p)
	for {
		raw, rest, ok := bytes.Cut(w.buf.Bytes(), []byte("\n\n"))
		if !ok {
			return len(p), nil
		}
		var ev sse
		var data []string
		for line := range strings.SplitSeq(string(raw), "\n") {
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = append(data, strings.TrimPrefix(line, "data: "))
			}
		}
		ev.data = strings.Join(data, "\n")
		if ev.name != "" {
			w.events <- ev
		}
		w.buf = *bytes.NewBuffer(append([]byte{}, rest...))
	}
}

func (w *streamWriter) Flush() {}

// openStream serves the event stream of view until the returned function
// is called, which waits for the handler to return.
func openStream(t *testing.T, h http.Handler, view string) (*streamWriter, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, origin+"/events?view="+view, nil)
	w := newStreamWriter()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(w, req)
	}()
	return w, func() {
		cancel()
		<-done
	}
}

// next returns the next "view" event, or fails the test after d.
func (w *streamWriter) next(t *testing.T, d time.Duration) sse {
	t.Helper()
	return w.nextOf(t, "view", d)
}

// nextOf returns the next event called name, skipping others, or fails the
// test after d.
func (w *streamWriter) nextOf(t *testing.T, name string, d time.Duration) sse {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case ev := <-w.events:
			if ev.name == name {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %q event within %v", name, d)
			return sse{}
		}
	}
}

func TestEventStreamSendsChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		f := startFleet(t, b)
		defer f.StopAll()
		s, _, done := openConsole(t, b, WithReadOnly(true))
		defer done()

		w, stop := openStream(t, s, "/groups")
		defer stop()
		ev := w.next(t, 2*time.Second)
		assert.Equal(t, "view", ev.name)
		assert.Equal(t, "text/event-stream", w.header.Get("Content-Type"))
		require.NoError(t, f.GridMatches(consoletest.ParseGrid(ev.data)))
		assert.NotContains(t, ev.data, "<html", "only the page's main part")
		held := func(cells []consoletest.GridCell, member string) int {
			n := 0
			for _, c := range cells {
				if c.Holder == member {
					n++
				}
			}
			return n
		}
		require.Positive(t, held(consoletest.ParseGrid(ev.data), "c"))

		f.Stop("c")
		deadline := time.Now().Add(30 * time.Second)
		for {
			ev = w.next(t, time.Until(deadline))
			cells := consoletest.ParseGrid(ev.data)
			if held(cells, "c") == 0 && f.GridMatches(cells) == nil {
				break
			}
		}
		assert.NotContains(t, ev.data, `data-member="c"`, "c left the group")

		// Nothing changes: nothing is sent.
		select {
		case ev := <-w.events:
			if ev.name == "view" && f.GridMatches(consoletest.ParseGrid(ev.data)) != nil {
				t.Errorf("an event with a wrong grid")
			}
		case <-time.After(5 * time.Second):
		}
	})
}

func TestEventStreamsOfOtherViews(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		f := startFleet(t, b)
		defer f.StopAll()
		s, _, done := openConsole(t, b, WithToken(testToken))
		defer done()
		for _, view := range []string{"/elections", "/jobs", "/members", "/jobs/digest"} {
			w, stop := openStream(t, s, view)
			ev := w.next(t, 2*time.Second)
			stop()
			assert.Equal(t, "view", ev.name, view)
			assert.Contains(t, ev.data, "digest", view)
			assert.Contains(t, ev.data, `data-op="`, view)
		}
		for _, view := range []string{"", "/nothing", "/jobs/no%20such"} {
			w := get(s, "/events?view="+view)
			assert.Equal(t, http.StatusBadRequest, w.Code, view)
		}
	})
}

func TestBackendIsReadWhilePagesAreOpenOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		f := startFleet(t, b)
		s, _, done := openConsole(t, b, WithReadOnly(true))
		defer done()
		f.StopAll()
		time.Sleep(time.Second)
		before := b.Stats().Records
		time.Sleep(10 * time.Second)
		assert.Equal(t, before, b.Stats().Records, "no page open: no reads")

		_, stop := openStream(t, s, "/groups")
		time.Sleep(5 * time.Second)
		assert.Greater(t, b.Stats().Records, before+4, "a page open: a read a second")
		stop()
		time.Sleep(2 * time.Second)
		before = b.Stats().Records
		time.Sleep(10 * time.Second)
		assert.Equal(t, before, b.Stats().Records, "the page closed: no reads")
	})
}

func TestCloseEndsStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		s, a, _ := openConsole(t, b, WithReadOnly(true))
		defer a.Close()
		w, stop := openStream(t, s, "/groups")
		w.next(t, 2*time.Second)
		s.Close() // returns once the stream has ended
		stop()
		s.Close()
		assert.Equal(t, http.StatusServiceUnavailable, get(s, "/groups").Code)
	})
}

func TestBackendFailureIsShown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		var logs bytes.Buffer
		s, a, _ := openConsole(t, b, WithReadOnly(true), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		defer a.Close() // fails: its node crashed
		defer s.Close()
		w, stop := openStream(t, s, "/groups")
		defer stop()
		w.next(t, 2*time.Second)
		b.Node("console").Crash()
		ev := w.next(t, 10*time.Second)
		assert.Contains(t, ev.data, "The backend could not be read")
		assert.Equal(t, http.StatusServiceUnavailable, get(s, "/groups").Code)
		assert.Equal(t, 1, strings.Count(logs.String(), "reading the backend failed; retrying"), "logged once:\n%s", logs.String())
	})
}

func TestRedact(t *testing.T) {
	assert.Equal(t, `dial "http://…@10.0.0.1:2379": refused`, redact(`dial "http://root:secret@10.0.0.1:2379": refused`))
	assert.Equal(t, "no credentials here", redact("no credentials here"))
}
