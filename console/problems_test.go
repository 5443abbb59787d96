package console

import (
	"bytes"
	"context"
	"html"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/etcdtest"
)

// plantRecords writes records as a foreign writer could leave them, through a
// session of its own on b.
func plantRecords(t *testing.T, b backend.Backend, kv ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.Open(ctx, backend.SessionOptions{TTL: 10 * time.Second})
	require.NoError(t, err)
	defer s.Close(ctx)
	for i := 0; i+1 < len(kv); i += 2 {
		_, err := s.(backend.Records).PutRecord(ctx, kv[i], []byte(kv[i+1]), backend.Condition{})
		require.NoError(t, err, kv[i])
	}
}

// garbage is one bad record of each kind, beside the fleet's: a status
// that is not JSON (of a lease of its own, and of digest), a status naming
// an invalid group (that used to make the pages answer 503), a run that is
// not JSON, operations that are not JSON or name nothing, and a huge
// key and value.
var garbage = []string{
	"status/nightly", "garbage",
	"status/x.0", `{"lease":"x.0","group":"bad group","partition":0}`,
	"history/digest/77", "{",
	"ops/disabled/report", "please",
	"ops/bogus/report", "{}",
	"status/" + strings.Repeat("k", 400), "{}",
	"status/huge", strings.Repeat("<v>", 20_000),
}

// garbageKeys are the keys the pages list (the run's on the jobs pages
// only), as the problems name them.
var garbageKeys = []string{"ops/bogus/report", "ops/disabled/report", "status/huge", "status/" + strings.Repeat("k", 150) + "…", "status/nightly", "status/x.0"}

// requireNotice checks that a page answered 200 and lists the keys in its
// notice of skipped records, with each key and reason cut short.
func requireNotice(t *testing.T, path string, w *httptest.ResponseRecorder, keys []string) {
	t.Helper()
	require.Equal(t, http.StatusOK, w.Code, "%s: %s", path, w.Body.String())
	body := w.Body.String()
	assert.NotContains(t, body, "The backend could not be read", path)
	assert.Contains(t, body, `<div class="warning problems" role="status"`, path)
	for _, key := range keys {
		assert.Contains(t, body, `<li data-problem="`+html.EscapeString(key)+`"><code>`, "%s lists %s", path, key)
	}
	assert.NotContains(t, body, strings.Repeat("k", 200), "%s: a huge key shown whole", path)
	assert.NotContains(t, body, strings.Repeat("&lt;v&gt;", 100), "%s: a huge value shown whole", path)
}

func TestPagesListSkippedRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		f := startFleet(t, b)
		defer f.stopAll()
		plantRecords(t, b.Node("writer"), garbage...)
		var logs bytes.Buffer
		s, _, done := openConsole(t, b, WithToken(testToken), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		defer done()

		for _, path := range []string{"/elections", "/groups", "/jobs", "/members", "/jobs/digest", "/jobs/billing.3"} {
			keys := garbageKeys
			if path == "/jobs" || path == "/jobs/digest" {
				keys = append([]string{"history/digest/77"}, keys...)
			}
			w := get(s, path)
			requireNotice(t, path, w, keys)
			assert.Contains(t, w.Body.String(), `data-problems="`+strconv.Itoa(len(keys))+`"`, path)
		}
		// What the records that can be used show is all there.
		elections := get(s, "/elections").Body.String()
		assert.Len(t, electionRows(elections), 3, "ingest, report and digest")
		require.NoError(t, f.gridMatches(parseGrid(get(s, "/groups").Body.String())), "the grid shows the true holders")
		assert.NotContains(t, elections, `<span class="badge disabled">`, "the bad disable is not in force")

		// A job whose status record is bad is shown without it.
		w := get(s, "/jobs/nightly")
		requireNotice(t, "/jobs/nightly", w, []string{"status/nightly"})
		assert.Contains(t, w.Body.String(), `data-job="nightly"`)

		// The event stream sends the notice too, and the log says it once.
		sw, stop := openStream(t, s, "/elections")
		ev := sw.next(t, 5*time.Second)
		stop()
		assert.Contains(t, ev.data, `data-problem="status/nightly"`)
		synctest.Wait() // the poll that sent it has logged
		assert.Equal(t, 1, strings.Count(logs.String(), "records that could not be used are skipped"), logs.String())
	})
}

// TestPagesListAtMostSomeSkippedRecords checks that a great many bad
// records make a bounded notice.
func TestPagesListAtMostSomeSkippedRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		var kv []string
		for i := range 50 {
			kv = append(kv, "status/bad-"+strconv.Itoa(100+i), "x")
		}
		plantRecords(t, b.Node("writer"), kv...)
		s, _, done := openConsole(t, b, WithReadOnly(true))
		defer done()
		w := get(s, "/elections")
		require.Equal(t, http.StatusOK, w.Code)
		body := w.Body.String()
		assert.Contains(t, body, "<strong>50 records in the backend could not be used and were skipped.</strong>")
		assert.Equal(t, maxShownProblems, strings.Count(body, "<li data-problem="))
		assert.Contains(t, body, "<p>and 30 more.</p>")
	})
}

// TestPagesListSkippedRecordsOnEtcd plants bad records in a real etcd,
// beside those of a node on it, some of them past the backend's checks.
func TestPagesListSkippedRecordsOnEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	const prefix = "/console-problems/"
	var backends []*etcd.Backend
	open := func() *etcd.Backend {
		b, err := etcd.New(srv.Endpoints(), etcd.WithPrefix(prefix))
		require.NoError(t, err)
		backends = append(backends, b)
		return b
	}
	defer func() {
		for _, b := range backends {
			b.Close()
		}
	}()
	f := newFleet(t)
	f.start(open(), "a", e2eTTL)
	defer f.stopAll()
	require.Eventually(t, func() bool {
		_, ok := f.holder("digest")
		return ok && len(f.runsOf("digest")) > 0
	}, 20*time.Second, 50*time.Millisecond, "a holds digest and ran it")

	plantRecords(t, open(), garbage...)
	cli := srv.Client(t)
	for _, kv := range [][2]string{
		{"rec/status/bad key", "\x00\x00\x00\x00\x00\x00\x00\x00{}"},
		{"rec/status/raw", "not valid json at all"}, // 8 bytes of token, then not JSON
	} {
		_, err := cli.Put(t.Context(), prefix+kv[0], kv[1])
		require.NoError(t, err)
	}
	keys := append([]string{"status/bad key"}, garbageKeys...)
	keys = append(keys, "status/raw")

	a, err := admin.Open(t.Context(), open())
	require.NoError(t, err)
	defer a.Close()
	s, err := New(a, WithReadOnly(true))
	require.NoError(t, err)
	defer s.Close()
	for _, path := range []string{"/elections", "/groups", "/jobs", "/members", "/jobs/digest"} {
		want := keys
		if path == "/jobs" || path == "/jobs/digest" {
			want = append([]string{"history/digest/77"}, keys...)
		}
		requireNotice(t, path, get(s, path), want)
	}
	assert.Contains(t, electionRows(get(s, "/elections").Body.String()), "digest")
}
