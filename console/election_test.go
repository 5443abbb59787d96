package console

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/internal/records"
)

func TestElectionPage(t *testing.T) {
	sc := troubled(t)
	ctx := sc.ctx
	require.NoError(t, sc.a.As("carol").Disable(ctx, "ingest", "a look at its terms"))
	require.NoError(t, sc.a.As("carol").Enable(ctx, "ingest", ""))
	st, err := sc.a.Status(ctx, "ingest")
	require.NoError(t, err)
	st.Terms = []admin.Term{
		{Token: 1, Member: "b", Start: drawnAt.Add(-2 * time.Hour), End: drawnAt.Add(-90 * time.Minute), Ended: "resigned"},
		{Token: st.Holder.Token, Member: "a", Start: drawnAt.Add(-time.Hour)},
	}
	sc.put(records.StatusKey(st.Lease), st)

	p, html := sc.draw("/elections/ingest", drawnAt)
	require.NotNil(t, p.Election)
	assert.Contains(t, html, `<section class="election" data-election="ingest" data-holder="a"`)
	assert.Equal(t, 2, strings.Count(html, `<tr data-token=`), "a row per term")
	assert.Contains(t, html, `<a href="/timeline">on the timeline</a>`)
	assert.Equal(t, 2, strings.Count(html, `data-audit-op=`), "the operations on it")
	assert.Contains(t, html, `data-op="resign" data-target="ingest"`)

	// A partition's page names its group; a job's links to its job page.
	_, part := sc.draw("/elections/billing.0", drawnAt)
	assert.Contains(t, part, `partition 0 of <a href="/groups">group billing</a>`)
	assert.Contains(t, part, `href="/timeline?group=billing&amp;p=0`)
	_, job := sc.draw("/elections/digest", drawnAt)
	assert.Contains(t, job, `<a href="/jobs/digest">its job page</a>`)

	// Served, and linked from the elections page and the overview.
	w := get(sc.s, "/elections/ingest")
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Contains(t, w.Body.String(), `<a href="/elections" aria-current="page">Elections</a>`)
	assert.Contains(t, get(sc.s, "/elections").Body.String(), `<a href="/elections/ingest">ingest</a>`)
	assert.Contains(t, get(sc.s, "/").Body.String(), `<a href="/elections/report">election report</a>`)
	w = get(sc.s, "/elections/no-such-election")
	assert.Equal(t, http.StatusNotFound, w.Code)
	assert.Contains(t, w.Body.String(), "data-not-found")
	assert.Equal(t, http.StatusNotFound, get(sc.s, "/elections/bad%20name").Code)
}
