package console

import (
	"bytes"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/consoletest"
)

func TestPagesListSkippedRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		f := startFleet(t, b)
		defer f.StopAll()
		consoletest.PlantRecords(t, b.Node("writer"), consoletest.Garbage...)
		var logs bytes.Buffer
		s, _, done := openConsole(t, b, WithToken(testToken), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		defer done()

		for _, path := range []string{"/elections", "/groups", "/jobs", "/members", "/jobs/digest", "/jobs/billing.3"} {
			keys := consoletest.GarbageKeys
			if path == "/jobs" || path == "/jobs/digest" {
				keys = append([]string{"history/digest/77"}, keys...)
			}
			w := get(s, path)
			consoletest.RequireNotice(t, path, w, keys)
			assert.Contains(t, w.Body.String(), `data-problems="`+strconv.Itoa(len(keys))+`"`, path)
		}
		// What the records that can be used show is all there.
		elections := get(s, "/elections").Body.String()
		assert.Len(t, consoletest.ElectionRows(elections), 3, "ingest, report and digest")
		require.NoError(t, f.GridMatches(consoletest.ParseGrid(get(s, "/groups").Body.String())), "the grid shows the true holders")
		assert.NotContains(t, elections, `<span class="badge disabled">`, "the bad disable is not in force")

		// A job whose status record is bad is shown without it.
		w := get(s, "/jobs/nightly")
		consoletest.RequireNotice(t, "/jobs/nightly", w, []string{"status/nightly"})
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
		consoletest.PlantRecords(t, b.Node("writer"), kv...)
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
