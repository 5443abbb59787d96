package consoletest

import (
	"context"
	"html"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/backend"
)

// PlantRecords writes records, key then value, as a foreign writer could
// leave them, through a session of its own on b.
func PlantRecords(t *testing.T, b backend.Backend, kv ...string) {
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

// Garbage is one bad record of each kind, key then value, to plant beside
// a fleet's: a status that is not JSON (of a lease of its own, and of
// digest), a status naming an invalid group (that used to make the pages
// answer 503), a run that is not JSON, operations that are not JSON or
// name nothing, and a huge key and value.
var Garbage = []string{
	"status/nightly", "garbage",
	"status/x.0", `{"lease":"x.0","group":"bad group","partition":0}`,
	"history/digest/77", "{",
	"ops/disabled/report", "please",
	"ops/bogus/report", "{}",
	"status/" + strings.Repeat("k", 400), "{}",
	"status/huge", strings.Repeat("<v>", 20_000),
}

// GarbageKeys are the keys of Garbage the pages list (the run's,
// history/digest/77, on the jobs pages only), as their notices name them.
var GarbageKeys = []string{"ops/bogus/report", "ops/disabled/report", "status/huge", "status/" + strings.Repeat("k", 150) + "…", "status/nightly", "status/x.0"}

// RequireNotice checks that the page at path answered 200 and lists the
// keys in its notice of skipped records, with each key and reason cut
// short.
func RequireNotice(t *testing.T, path string, w *httptest.ResponseRecorder, keys []string) {
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
