package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/jobs"
)

// The webhook notifier against a real local HTTP server, called directly
// as simba calls a failure handler (once per failed run: that guarantee
// is package simba's). These tests run in real time, with short timeouts
// and backoffs: an HTTP server's connections are not durably blocking, so
// testing/synctest cannot drive them.

// hookRequest is one request the test server received.
type hookRequest struct {
	method string
	header http.Header
	body   []byte
}

// hookServer is a webhook endpoint that answers with answer(n) to its
// request n (from 1), and records every request.
type hookServer struct {
	*httptest.Server
	got chan hookRequest
}

func newHookServer(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request)) *hookServer {
	t.Helper()
	h := &hookServer{got: make(chan hookRequest, 100)}
	var mu sync.Mutex
	n := 0
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		n++
		i := n
		mu.Unlock()
		h.got <- hookRequest{r.Method, r.Header.Clone(), body}
		answer(i, w, r)
	}))
	t.Cleanup(h.Close)
	return h
}

// next returns the next request, or fails the test after 10s.
func (h *hookServer) next(t *testing.T) hookRequest {
	t.Helper()
	select {
	case r := <-h.got:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no request within 10s")
		return hookRequest{}
	}
}

// none fails the test if a request came.
func (h *hookServer) none(t *testing.T) {
	t.Helper()
	select {
	case r := <-h.got:
		t.Errorf("an unexpected request: %s %s", r.method, r.body)
	default:
	}
}

// failure is a failed run of partition 1 of the group billing.
var failure = simba.RunFailure{
	TermRef:  simba.TermRef{Election: "billing.1", Group: "billing", Partition: 1, Token: 7},
	Member:   "node-a",
	Source:   simba.SourceTrigger,
	Args:     map[string]string{"region": "eu"},
	Start:    time.Date(2026, 12, 6, 10, 0, 0, 500, time.UTC),
	Duration: 1500 * time.Millisecond,
	Attempts: 3,
	Err:      errors.New("boom"),
	Failures: 2,
}

func TestWebhookPostsTheFailure(t *testing.T) {
	srv := newHookServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	var log logBuffer
	handle, stop := jobs.NewNotifier("billing", jobs.Webhook{URL: srv.URL + "/hook", Headers: map[string]string{"Authorization": "Bearer t0k"}}, log.logger())
	handle(t.Context(), failure)
	scheduled := failure
	scheduled.TermRef = simba.TermRef{Election: "report", Partition: -1, Token: 9}
	scheduled.Source, scheduled.Args, scheduled.Attempts, scheduled.Failures = simba.SourceNormal, nil, 1, 1
	r1 := srv.next(t)
	handle(t.Context(), scheduled)
	r2 := srv.next(t)
	stop()

	if r1.method != http.MethodPost || r1.header.Get("Content-Type") != "application/json" || r1.header.Get("Authorization") != "Bearer t0k" {
		t.Errorf("request %s, Content-Type %q, Authorization %q; want POST, application/json, the header given",
			r1.method, r1.header.Get("Content-Type"), r1.header.Get("Authorization"))
	}
	for _, tc := range []struct {
		got  []byte
		want string
	}{
		{r1.body, `{"job": "billing", "lease": "billing.1", "group": "billing", "partition": 1, "token": 7, "member": "node-a",
			"source": "trigger", "args": {"region": "eu"}, "attempts": 3, "start": "2026-12-06T10:00:00.0000005Z",
			"duration": "1.5s", "durationMs": 1500, "error": "boom", "failures": 2}`},
		{r2.body, `{"job": "billing", "lease": "report", "token": 9, "member": "node-a", "source": "normal", "attempts": 1,
			"start": "2026-12-06T10:00:00.0000005Z", "duration": "1.5s", "durationMs": 1500, "error": "boom", "failures": 1}`},
	} {
		var got, want map[string]any
		if err := json.Unmarshal(tc.got, &got); err != nil {
			t.Fatalf("body %s: %v", tc.got, err)
		}
		if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("body %s\nwant %s", tc.got, tc.want)
		}
	}
	if strings.Contains(log.String(), "level=WARN") {
		t.Errorf("warnings for delivered notifications:\n%s", log.String())
	}
}

func TestWebhookRetriesFailedAttempts(t *testing.T) {
	defer jobs.SetNotifyBackoff(10*time.Millisecond, 20*time.Millisecond)()
	srv := newHookServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n < 3 {
			http.Error(w, "try later", http.StatusInternalServerError)
		}
	})
	var log logBuffer
	handle, stop := jobs.NewNotifier("billing", jobs.Webhook{URL: srv.URL}, log.logger()) // 3 attempts by default
	handle(t.Context(), failure)
	first := srv.next(t)
	for range 2 {
		if r := srv.next(t); string(r.body) != string(first.body) {
			t.Errorf("a retry sent %s, the first attempt %s", r.body, first.body)
		}
	}
	stop()
	srv.none(t)
	if got := log.String(); strings.Contains(got, "level=WARN") || !strings.Contains(got, `msg="failure notification delivered" job=billing`) || !strings.Contains(got, "attempt=3") {
		t.Errorf("want the delivery at the third attempt logged, and no warning:\n%s", got)
	}
}

func TestWebhookGivesUpAndLogs(t *testing.T) {
	defer jobs.SetNotifyBackoff(10*time.Millisecond, 20*time.Millisecond)()
	srv := newHookServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "nope", http.StatusInternalServerError)
	})
	var log logBuffer
	handle, stop := jobs.NewNotifier("billing", jobs.Webhook{URL: srv.URL + "/hook?key=secret", Attempts: 2}, log.logger())
	handle(t.Context(), failure)
	srv.next(t)
	srv.next(t)
	stop() // the notification ended by itself: its attempts are spent
	srv.none(t)
	got := log.String()
	want := `level=WARN msg="failure notification not delivered" job=billing webhook=` + srv.URL + `/hook attempts=2 why="attempts spent" err="simba/jobs: notification to ` + srv.URL + `/hook: answered 500 Internal Server Error: \"nope\""`
	if !strings.Contains(got, want) {
		t.Errorf("log lacks\n%s\n%s", want, got)
	}
	if strings.Contains(got, "secret") {
		t.Errorf("the log shows the URL's query:\n%s", got)
	}
}

// An attempt ends at its timeout; at the end of the jobs, the notifier
// waits for the attempt under way, at most its timeout, and retries no
// more.
func TestWebhookTimeoutAndStop(t *testing.T) {
	defer jobs.SetNotifyBackoff(time.Hour, time.Hour)()
	release := make(chan struct{})
	srv := newHookServer(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	var log logBuffer
	const timeout = 200 * time.Millisecond
	handle, stop := jobs.NewNotifier("report", jobs.Webhook{URL: srv.URL, Timeout: timeout}, log.logger())
	handle(t.Context(), failure)
	srv.next(t)
	start := time.Now()
	stop()
	took := time.Since(start)
	if took > timeout+2*time.Second {
		t.Errorf("stop waited %v for an attempt of timeout %v", took, timeout)
	}
	srv.none(t)
	got := log.String()
	for _, want := range []string{
		`level=WARN msg="failure notification not delivered" job=report`,
		`attempts=1 why="the jobs stopped"`,
		"no answer within 200ms",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %q:\n%s", want, got)
		}
	}
}

// At most MaxInFlight notifications of a job are in flight: the next are
// dropped with a log, and so are those after the end.
func TestWebhookBoundsNotificationsInFlight(t *testing.T) {
	release := make(chan struct{})
	srv := newHookServer(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	var log logBuffer
	handle, stop := jobs.NewNotifier("report", jobs.Webhook{URL: srv.URL, Attempts: 1}, log.logger())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for range jobs.MaxInFlight + 2 {
		handle(ctx, failure)
	}
	for range jobs.MaxInFlight {
		srv.next(t)
	}
	if n := strings.Count(log.String(), `msg="failure notification dropped: too many in flight" job=report`); n != 2 {
		t.Errorf("%d notifications dropped, want 2:\n%s", n, log.String())
	}
	close(release)
	stop()
	srv.none(t)
	handle(ctx, failure)
	if !strings.Contains(log.String(), `msg="failure notification dropped: the jobs have stopped" job=report`) {
		t.Errorf("a failure after the end was not dropped with a log:\n%s", log.String())
	}
	srv.none(t)
}
