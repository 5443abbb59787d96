package console

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/consoletest"
	"github.com/simba-go/simba/internal/records"
)

// scriptReason is a reason an operator typed that a page must show as
// text, never run.
const scriptReason = `<script>alert("x")</script> month end`

// auditRowPattern matches the rows of the audit tables, capturing op,
// target and who.
var auditRowPattern = regexp.MustCompile(`<tr data-audit-op="([^"]*)" data-target="([^"]*)" data-by="([^"]*)" data-changed="(true|false)">`)

// auditRow is a row of an audit table, read from a page.
type auditRow struct{ op, target, by, changed string }

// auditRows returns the rows of the audit tables in html, in order.
func auditRows(html string) []auditRow {
	var out []auditRow
	for _, m := range auditRowPattern.FindAllStringSubmatch(html, -1) {
		out = append(out, auditRow{m[1], m[2], m[3], m[4]})
	}
	return out
}

// opNoteOf returns the "who, since when, why" note of the element whose
// opening tag holds marker in html: the first opnote after it.
func opNoteOf(t *testing.T, html, marker string) string {
	t.Helper()
	_, rest, ok := strings.Cut(html, marker)
	require.True(t, ok, "no %s in the page", marker)
	_, note, ok := strings.Cut(rest, `<span class="opnote"`)
	require.True(t, ok, "no note of who did it after %s", marker)
	note, _, _ = strings.Cut(note, "</span>\n")
	return note
}

// rowOf returns the table row of html that starts with marker, or "".
func rowOf(html, marker string) string {
	_, row, ok := strings.Cut(html, marker)
	if !ok {
		return ""
	}
	row, _, _ = strings.Cut(row, "</tr>")
	return row
}

// stampOf is how the pages show t: its instant in the datetime attribute,
// and its date and time of day in UTC.
func stampOf(t time.Time) []string {
	u := t.UTC()
	return []string{`datetime="` + u.Format(time.RFC3339Nano) + `"`, u.Format("2006-01-02 15:04:05 UTC")}
}

func TestPagesShowWhoDisabledAndDrainedWhat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		f := startFleet(t, b)
		defer f.StopAll()
		s, a, done := openConsole(t, b, WithToken(testToken), WithOperators(map[string]string{"op-token-bob-0123456789": "bob"}))
		defer done()

		// alice names herself with the shared token; bob's token names him.
		operate := func(op, target, reason string, headers map[string]string) {
			t.Helper()
			w := call(s, opCall{op: op, body: body(target, 0, reason), headers: headers})
			require.Equal(t, http.StatusOK, w.Code, "%s %s: %s", op, target, w.Body)
		}
		alice := map[string]string{OperatorHeader: "alice"}
		bob := map[string]string{TokenHeader: "op-token-bob-0123456789"}
		operate("disable", "digest", scriptReason, alice)
		time.Sleep(time.Second)
		operate("disable", "billing", "migration", bob)
		time.Sleep(time.Second)
		operate("drain", "a", "kernel update", alice)
		time.Sleep(time.Second)
		operate("trigger", "report", "", bob)

		ops, err := a.Ops(t.Context())
		require.NoError(t, err)
		digestAt, billingAt, drainAt := ops.Disables["digest"].At, ops.Disables["billing"].At, ops.Drains["a"].At
		escaped := html.EscapeString(scriptReason)
		checkNote := func(page, note, by string, at time.Time, reason string) {
			t.Helper()
			assert.Contains(t, note, `data-by="`+by+`"`, page)
			assert.Contains(t, note, `<strong class="who">`+by+`</strong>`, page)
			for _, s := range stampOf(at) {
				assert.Contains(t, note, s, "%s: since when, in UTC", page)
			}
			assert.Contains(t, note, `data-rel`, "%s: since when, relative (the script's)", page)
			assert.Contains(t, note, `<q class="reason">`+reason+`</q>`, page)
		}
		pages := map[string]string{}
		for _, path := range []string{"/elections", "/groups", "/jobs", "/members", "/jobs/digest", "/jobs/billing.3", "/audit", "/audit?name=digest"} {
			w := get(s, path)
			require.Equal(t, http.StatusOK, w.Code, path)
			body := w.Body.String()
			assert.NotContains(t, body, "<script>", "%s: a reason in a page runs", path)
			assert.NotContains(t, body, "style=", "%s has inline style", path)
			pages[path] = body
		}

		// The pages: a marker with the detail as its tooltip, and a line
		// saying who, since when and why.
		checkNote("/elections", opNoteOf(t, pages["/elections"], `<tr data-election="digest"`), "alice", digestAt, escaped)
		assert.Contains(t, pages["/elections"], `title="disabled by alice since `+digestAt.UTC().Format("2006-01-02 15:04:05 UTC")+`: `+escaped+`"`, "the marker's tooltip")
		checkNote("/jobs", opNoteOf(t, pages["/jobs"], `<section class="job" data-job="digest"`), "alice", digestAt, escaped)
		checkNote("/jobs", opNoteOf(t, pages["/jobs"], `<section class="job group-jobs" data-group="billing"`), "bob", billingAt, "migration")
		assert.Contains(t, pages["/jobs"], `title="disabled with group billing, by bob since `, "a partition's marker says its group's disable applies")
		checkNote("/groups", opNoteOf(t, pages["/groups"], `<section class="group" data-group="billing"`), "bob", billingAt, "migration")
		assert.NotContains(t, pages["/groups"], `<tr data-member="a">`, "a drained member leaves its groups")
		checkNote("/members", opNoteOf(t, pages["/members"], `<tr data-member="a" data-drained="true" data-state="drained">`), "alice", drainAt, "kernel update")
		checkNote("/jobs/digest", opNoteOf(t, pages["/jobs/digest"], `<section class="job" data-job="digest"`), "alice", digestAt, escaped)
		part := opNoteOf(t, pages["/jobs/billing.3"], `<section class="job" data-job="billing.3"`)
		assert.Contains(t, part, `with group <a href="/audit?name=billing">billing</a>, by <strong class="who">bob</strong>`)
		assert.NotContains(t, rowOf(pages["/members"], `<tr data-member="b"`), `class="opnote"`, "b is not drained")

		// The audit trail, newest first, and a name's own.
		want := []auditRow{
			{"trigger", "report", "bob", "true"},
			{"drain", "a", "alice", "true"},
			{"disable", "billing", "bob", "true"},
			{"disable", "digest", "alice", "true"},
		}
		assert.Equal(t, want, auditRows(pages["/audit"]))
		assert.Equal(t, want[3:], auditRows(pages["/audit?name=digest"]))
		assert.Equal(t, want[3:], auditRows(pages["/jobs/digest"]), "the job's page shows its own operations")
		assert.Empty(t, auditRows(pages["/jobs/billing.3"]), "none on the partition itself")
		assert.Contains(t, pages["/jobs/billing.3"], `<a class="more" href="/audit?name=billing">group billing</a>`)
		entries, _, err := a.Audit(t.Context(), admin.AuditFilter{Name: "digest"})
		require.NoError(t, err)
		require.Len(t, entries, 1)
		for _, path := range []string{"/audit", "/audit?name=digest", "/jobs/digest"} {
			row := rowOf(pages[path], `<tr data-audit-op="disable" data-target="digest"`)
			for _, s := range stampOf(entries[0].At) {
				assert.Contains(t, row, s, "%s: when", path)
			}
			assert.Contains(t, row, `<td class="reason">`+escaped+`</td>`, "%s: the reason, as text", path)
			assert.Contains(t, row, `<td class="change">`+html.EscapeString(entries[0].Change)+`</td>`, "%s: what it did", path)
			assert.Contains(t, row, `<a href="/audit?name=digest"`, "%s: the target's own", path)
		}
		assert.Contains(t, pages["/audit"], `aria-current="page">Audit</a>`, "in the nav")
		assert.Contains(t, pages["/audit?name=digest"], `data-view="/audit?name=digest"`, "the stream is of the filtered view")
		assert.Contains(t, pages["/audit?name=digest"], `<input id="audit-name" name="name" type="search" value="digest"`)

		// A name with no operations, one no operation can have, and one
		// that is no name.
		assert.Contains(t, get(s, "/audit?name=ingest").Body.String(), "No operations recorded on ingest.")
		odd := get(s, "/audit?name="+url.QueryEscape(`<b>x</b>`))
		require.Equal(t, http.StatusOK, odd.Code)
		assert.Contains(t, odd.Body.String(), "No operations recorded on &lt;b&gt;x&lt;/b&gt;.")
		assert.Equal(t, http.StatusNotFound, get(s, "/audit?name=%00").Code)
		assert.Equal(t, http.StatusNotFound, get(s, "/audit?name="+strings.Repeat("x", 200)).Code)

		// Undone, the notes go; the trail keeps what was done, and says an
		// enable of what was not disabled changed nothing.
		operate("enable", "digest", "done", alice)
		time.Sleep(time.Second)
		operate("enable", "digest", "twice", alice)
		row := rowOf(get(s, "/elections").Body.String(), `<tr data-election="digest"`)
		require.NotEmpty(t, row)
		assert.NotContains(t, row, `class="opnote"`)
		rows := auditRows(get(s, "/audit?name=digest").Body.String())
		require.Len(t, rows, 3)
		assert.Equal(t, auditRow{"enable", "digest", "alice", "false"}, rows[0])
		assert.Equal(t, auditRow{"enable", "digest", "alice", "true"}, rows[1])
	})
}

func TestAuditPageIsLiveAndBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		f := startFleet(t, b)
		defer f.StopAll()
		s, _, done := openConsole(t, b, WithToken(testToken))
		defer done()

		w, stop := openStream(t, s, url.QueryEscape("/audit?name=digest"))
		defer stop()
		ev := w.next(t, 5*time.Second)
		assert.Contains(t, ev.data, "No operations recorded on digest.")
		assert.NotContains(t, ev.data, "audit-filter", "the filter is outside the part a stream replaces")

		// An operation from the page shows by itself; one on another name
		// does not.
		require.Equal(t, http.StatusOK, call(s, opCall{op: "disable", body: body("digest", 0, scriptReason),
			headers: map[string]string{OperatorHeader: "alice"}}).Code)
		ev = w.next(t, 5*time.Second)
		assert.Equal(t, []auditRow{{"disable", "digest", "alice", "true"}}, auditRows(ev.data))
		assert.Contains(t, ev.data, html.EscapeString(scriptReason))
		assert.NotContains(t, ev.data, "<script>")
		require.Equal(t, http.StatusOK, call(s, opCall{op: "trigger", body: body("report", 0, "")}).Code)
		select {
		case ev := <-w.events:
			if ev.name == "view" {
				t.Errorf("an operation on report changed the audit page of digest: %s", ev.data)
			}
		case <-time.After(5 * time.Second):
		}

		// The page shows the newest auditShown entries, and says so.
		for i := range auditShown {
			op := "disable"
			if i%2 == 1 {
				op = "enable"
			}
			require.Equal(t, http.StatusOK, call(s, opCall{op: op, body: body("ingest", 0, "")}).Code, "%s %d", op, i)
			time.Sleep(time.Millisecond) // each at its own time: the order is the times'

		}
		page := get(s, "/audit").Body.String()
		rows := auditRows(page)
		require.Len(t, rows, auditShown)
		assert.Equal(t, auditRow{"enable", "ingest", "simba admin", "true"}, rows[0], "the newest first")
		assert.Contains(t, page, "The newest 200 are shown; filter by a name to see older ones.")
		assert.Len(t, auditRows(get(s, "/audit?name=digest").Body.String()), 1)
	})
}

func TestAuditPageListsSkippedEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		s, _, done := openConsole(t, b, WithToken(testToken))
		defer done()
		badValue := records.AuditKey(time.Now(), "0123456789abcdef")
		consoletest.PlantRecords(t, b.Node("foreign"), "audit/not-a-time", "{}", badValue, "not json")
		for _, path := range []string{"/audit", "/audit?name=x"} {
			w := get(s, path)
			consoletest.RequireNotice(t, path, w, []string{"audit/not-a-time", badValue})
			assert.Contains(t, w.Body.String(), "No operations recorded", path)
		}
	})
}

func TestReadOnlyAuditPage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		f := startFleet(t, b)
		defer f.StopAll()
		a, err := admin.Open(t.Context(), b.Node("operator"), admin.WithOperator("dave@h1"))
		require.NoError(t, err)
		defer a.Close()
		require.NoError(t, a.Drain(t.Context(), "b", "disk"))
		s, _, done := openConsole(t, b, WithReadOnly(true))
		defer done()
		for _, path := range []string{"/audit", "/members"} {
			body := get(s, path).Body.String()
			assert.NotContains(t, body, "data-op=", path)
			assert.Contains(t, body, `data-by="dave@h1"`, "%s: an operation from elsewhere (the simba command)", path)
		}
		assert.Equal(t, []auditRow{{"drain", "b", "dave@h1", "true"}}, auditRows(get(s, "/audit").Body.String()))
	})
}
