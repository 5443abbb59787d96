package console_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/consoletest"
	"github.com/simba-go/simba/internal/etcdtest"
)

// Environment of the member process.
const (
	memberProcessEnv    = "SIMBA_CONSOLE_MEMBER_PROCESS" // "ENDPOINT PREFIX ID"
	memberProcessMarker = "member-process: "
)

// TestMemberProcess is a simba node (a fleet's: see fleet) in a process of
// its own, on etcd, so that a test can kill it with SIGKILL: nothing of it
// closes, its session expires and its health record stays. It says
// "ready" once started, and closes when its stdin closes.
func TestMemberProcess(t *testing.T) {
	cfg := os.Getenv(memberProcessEnv)
	if cfg == "" {
		t.Skip("run by TestBrowserRoughEdges")
	}
	args := strings.Fields(cfg)
	require.Len(t, args, 3, "%s=%q", memberProcessEnv, cfg)
	b, err := etcd.New([]string{args[0]}, etcd.WithPrefix(args[1]))
	require.NoError(t, err)
	defer b.Close()
	f := consoletest.NewFleet(t)
	f.Start(b, args[2], e2eTTL)
	defer f.StopAll()
	fmt.Printf("%sready\n", memberProcessMarker)
	io.Copy(io.Discard, os.Stdin)
}

// roughEdgesPrefix is where TestBrowserRoughEdges keeps its nodes' keys.
const roughEdgesPrefix = "/console-rough-edges/"

// The export job's runs: each takes exportRun, but for the third, which
// takes exportLongRun; its node stops after exportRuns of them.
const (
	exportRun     = 20 * time.Millisecond
	exportLongRun = 6 * time.Second
	exportRuns    = 10
)

// startExport runs the job export on b: every 300ms, its third run far
// longer than the others, as one slow run among quick ones in
// production. It returns a channel closed once exportRuns have started,
// and the client, closed when the test ends.
func startExport(t *testing.T, b backend.Backend) (<-chan struct{}, *simba.Client) {
	t.Helper()
	c, err := simba.New(b, simba.WithMemberID("x"), simba.WithTTL(e2eTTL))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	var n atomic.Int32
	enough := make(chan struct{})
	var once sync.Once
	_, err = c.Election("export").Schedule(simba.FixedRate(300*time.Millisecond), func(ctx context.Context, _ *simba.Term) error {
		i := n.Add(1)
		d := exportRun
		if i == 3 {
			d = exportLongRun
		}
		if i >= exportRuns {
			once.Do(func() { close(enough) })
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		return nil
	})
	require.NoError(t, err)
	return enough, c
}

// TestBrowserRoughEdges checks the console's rough edges of issue 37
// (item 6), in the browser, on etcd with the nodes of a fleet, one of
// them in a process of its own: the overview counts jobs as simba status
// does; a count of 0 vacant is not drawn as an alarm; every election has
// a page; one long run does not flatten a job's chart; the chart's labels
// do not overlap; the audit page keeps its table in its card at 1400 px
// and its filter under its title, with its placeholder whole; the members
// page shows a SIGKILLed member as gone, and only so. Each step is a
// subtest of its own, so that one failing does not hide the others.
func TestBrowserRoughEdges(t *testing.T) {
	path := chromium(t)
	srv := etcdtest.Start(t)
	var mu sync.Mutex
	var backends []*etcd.Backend
	open := func(id string) backend.Backend {
		b, err := etcd.New(srv.Endpoints(), etcd.WithPrefix(roughEdgesPrefix))
		require.NoError(t, err, id)
		mu.Lock()
		backends = append(backends, b)
		mu.Unlock()
		return b
	}
	defer func() {
		for _, b := range backends {
			b.Close()
		}
	}()
	f := consoletest.NewFleet(t)
	for _, id := range []string{"a", "b"} {
		f.Start(open(id), id, e2eTTL)
	}
	defer f.StopAll()
	k := startTestProcess(t, "TestMemberProcess", memberProcessEnv+"="+srv.Endpoints()[0]+" "+roughEdgesPrefix+" k", memberProcessMarker)
	require.Equal(t, "ready", k.reply("that it is ready"))
	exported, x := startExport(t, open("x"))

	a, url := serveConsole(t, open("console"))
	e := &e2e{t: t, f: f, url: url, ctx: newBrowser(t, path), shotDir: screenshots}
	step := func(name string, check func(e *e2e)) {
		t.Run(name, func(t *testing.T) {
			se := *e
			se.t = t
			check(&se)
		})
	}

	step("jobs counted as simba status counts them", func(e *e2e) {
		// simba status (cmd/simba: snapshot.jobs) counts a scheduled
		// plain election as a job, and a group whose partitions are
		// scheduled as one: report, digest, export, and billing.
		e.open("/")
		e.eventually(60*time.Second, "the overview counts 4 jobs: report, digest, export and the group billing", func() error {
			got := eval[string](e, `(document.querySelector('[data-summary="jobs"] .tile-big') || {textContent: 'no jobs tile'}).textContent`)
			if got != "4 scheduled" {
				return fmt.Errorf("the jobs tile says %q", got)
			}
			return nil
		})
		assert.Equal(t, "3 elections, 1 group (8 partitions)", eval[string](e, `document.querySelectorAll('[data-summary="jobs"] .tile-small')[0].textContent`))
		e.screenshot("rough-overview")
	})

	step("0 vacant is not drawn as an alarm", func(e *e2e) {
		e.open("/groups")
		const pill = `[...document.querySelectorAll('section[data-group="billing"] p.counts span')].find(s => s.textContent.trim() === %q)`
		e.eventually(60*time.Second, "the billing group shows 0 vacant", func() error {
			if !eval[bool](e, fmt.Sprintf(`!!`+pill, "0 vacant")) {
				return fmt.Errorf("its counts: %q", eval[string](e, `(document.querySelector('section[data-group="billing"] p.counts') || {textContent: 'none'}).textContent`))
			}
			return nil
		})
		type look struct{ Bg, Color, Neutral, NeutralColor, Bad string }
		got := eval[look](e, fmt.Sprintf(`(() => {
			const zero = `+pill+`, neutral = document.querySelector('section[data-group="billing"] p.counts span');
			const probe = document.createElement('span');
			probe.style.color = 'var(--bad)';
			document.body.append(probe);
			const bad = getComputedStyle(probe).color;
			probe.remove();
			return {bg: getComputedStyle(zero).backgroundColor, color: getComputedStyle(zero).color,
				neutral: getComputedStyle(neutral).backgroundColor, neutralColor: getComputedStyle(neutral).color, bad};
		})()`, "0 vacant"))
		assert.Equal(t, got.Neutral, got.Bg, "the 0 vacant pill's background is that of a plain count, not the alarm's")
		assert.NotEqual(t, got.Bad, got.Color, "the 0 vacant pill's text is not in the alarm's colour")
		e.screenshot("rough-groups")
	})

	step("an election has a page of its own", func(e *e2e) {
		e.open("/elections")
		e.do(10*time.Second,
			chromedp.WaitVisible(chromedp.CSS(`tr[data-election="ingest"] a[href="/elections/ingest"]`)),
			click(`tr[data-election="ingest"] a[href="/elections/ingest"]`),
			chromedp.WaitVisible(chromedp.CSS(`body[data-view="/elections/ingest"] #live[data-state="live"]`)),
		)
		assert.Equal(t, 200, eval[int](e, `fetch('/elections/ingest').then(r => r.status)`), "GET /elections/ingest")
		assert.Equal(t, "ingest", eval[string](e, `document.querySelector('main h1').textContent`))
		assert.Equal(t, "Elections", eval[string](e, `document.querySelector('nav a[aria-current="page"]').textContent`))
		e.eventually(30*time.Second, "the page shows ingest's holder, with its token, and its terms", func() error {
			st, err := a.Status(t.Context(), "ingest")
			if err != nil {
				return err
			}
			if st.Holder == nil {
				return errors.New("ingest's status names no holder")
			}
			type shown struct {
				Holder, Token string
				Terms         int
			}
			got := eval[shown](e, `(() => { const s = document.querySelector('section.election[data-election="ingest"]');
				return s ? {holder: s.dataset.holder, token: s.dataset.token, terms: s.querySelectorAll('table.terms tr[data-token]').length} : {}; })()`)
			if got.Holder != st.Holder.Member || got.Token != fmt.Sprint(st.Holder.Token) || got.Terms == 0 {
				return fmt.Errorf("the page shows holder %q token %q and %d terms; the status says %s token %d", got.Holder, got.Token, got.Terms, st.Holder.Member, st.Holder.Token)
			}
			return nil
		})
		e.screenshot("rough-election")
		assert.Equal(t, 200, eval[int](e, `fetch('/elections/billing.3').then(r => r.status)`), "a partition's page")
		assert.Equal(t, 404, eval[int](e, `fetch('/elections/no-such-election').then(r => r.status)`), "no page of what is not there")
	})

	step("one long run does not flatten a job's chart", func(e *e2e) {
		_, err := await.Within(exported, 2*time.Minute, "export did not start %d runs", exportRuns)
		require.NoError(t, err)
		require.NoError(t, x.Close()) // its history stays as it is
		e.open("/jobs/export")
		type bar struct {
			Seq    int     `json:"seq"`
			Ms     int64   `json:"ms"`
			Height float64 `json:"height"`
		}
		var bars []bar
		e.eventually(30*time.Second, "the chart shows the long run and the quick ones", func() error {
			bars = eval[[]bar](e, `[...document.querySelectorAll('.runs-chart g[data-run]')].map(g => ({seq: Number(g.dataset.run),
				ms: Number(g.dataset.ms), height: g.querySelector('rect.bar').getBoundingClientRect().height}))`)
			long := 0
			for _, b := range bars {
				if b.Ms >= exportLongRun.Milliseconds() {
					long++
				}
			}
			if long != 1 || len(bars) < exportRuns-1 {
				return fmt.Errorf("%d runs drawn, %d of them long: %v", len(bars), long, bars)
			}
			return nil
		})
		var tallest bar
		for _, b := range bars {
			if b.Height > tallest.Height {
				tallest = b
			}
		}
		assert.GreaterOrEqual(t, tallest.Ms, exportLongRun.Milliseconds(), "the long run is the tallest: %v", bars)
		var flat []bar
		for _, b := range bars {
			typical := b.Ms >= exportRun.Milliseconds() && b.Ms < exportLongRun.Milliseconds()/10 // not one cut short
			if typical && b.Height < tallest.Height*0.15 {
				flat = append(flat, b)
			}
		}
		assert.Empty(t, flat, "typical runs drawn flat, under 15%% of the height of the long one (%d ms, %.1f px); all runs: %v", tallest.Ms, tallest.Height, bars)
		e.screenshot("rough-job-chart")
	})

	step("the chart's labels do not overlap", func(e *e2e) {
		e.open("/jobs/export")
		e.do(10*time.Second, chromedp.WaitVisible(chromedp.CSS(`.runs-chart g[data-run]`)))
		e.noOverlap(`.runs-chart text`, "the chart's labels")
		e.do(5*time.Second, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
		defer e.do(5*time.Second, chromedp.EmulateViewport(1280, 900))
		e.noOverlap(`.runs-chart text`, "the chart's labels on a phone")
	})

	step("the audit page keeps its table in its card and its filter under its title", func(e *e2e) {
		ctx := t.Context()
		op := a.As("alice@ops-bastion-01.eu-west-1.example.com")
		const name = "nightly-ledger-reconciliation-eu-west-1"
		const why = "quarter-end freeze requested by finance; see change request CHG-2026-000123 for the approval chain"
		require.NoError(t, op.Disable(ctx, name, why))
		require.NoError(t, op.Disable(ctx, name, why+", extended by a week"))
		require.NoError(t, op.Enable(ctx, name, "freeze over"))
		require.NoError(t, op.Drain(ctx, "retired-worker-7.eu-west-1.example.com", why))
		require.NoError(t, op.Undrain(ctx, "retired-worker-7.eu-west-1.example.com", "never mind"))
		require.NoError(t, op.Trigger(ctx, "report", why))
		e.do(5*time.Second, chromedp.EmulateViewport(1400, 900))
		defer e.do(5*time.Second, chromedp.EmulateViewport(1280, 900))
		e.open("/audit")
		e.eventually(30*time.Second, "the audit page lists the operations", func() error {
			if n := eval[int](e, `document.querySelectorAll('table.audit tr[data-audit-op]').length`); n < 6 {
				return fmt.Errorf("%d rows", n)
			}
			return nil
		})
		type layout struct {
			CardRight, TableRight, ChangeRight, ScrollW, ClientW float64
			TitleBottom, FilterTop                               float64
			InputW, PlaceholderW                                 float64
		}
		got := eval[layout](e, `(() => {
			const card = document.querySelector('table.audit').closest('.table-wrap');
			const changes = [...document.querySelectorAll('table.audit td.change, table.audit th:last-child')];
			const input = document.getElementById('audit-name'), cs = getComputedStyle(input);
			const ctx = document.createElement('canvas').getContext('2d');
			ctx.font = cs.font;
			return {cardRight: card.getBoundingClientRect().right, tableRight: document.querySelector('table.audit').getBoundingClientRect().right,
				changeRight: Math.max(...changes.map(c => c.getBoundingClientRect().right)),
				scrollW: card.scrollWidth, clientW: card.clientWidth,
				titleBottom: document.querySelector('h1').getBoundingClientRect().bottom,
				filterTop: document.getElementById('audit-filter').getBoundingClientRect().top,
				inputW: input.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight),
				placeholderW: ctx.measureText(input.placeholder).width};
		})()`)
		assert.LessOrEqual(t, got.ScrollW, got.ClientW+1, "the audit table fits its card at 1400 px, with nothing to scroll: %+v", got)
		assert.LessOrEqual(t, got.ChangeRight, got.CardRight+0.5, "the What it did column ends within the card: %+v", got)
		assert.GreaterOrEqual(t, got.FilterTop, got.TitleBottom, "the filter is under the title: %+v", got)
		assert.GreaterOrEqual(t, got.InputW, got.PlaceholderW, "the filter's placeholder is whole: %+v", got)
		e.screenshot("rough-audit")
	})

	step("a SIGKILLed member is gone, not active", func(e *e2e) {
		e.open("/members")
		const state = `(document.querySelector('tr[data-member="k"] > td:nth-of-type(1)') || {textContent: 'no row of k'}).textContent.trim().replace(/\s+/g, ' ')`
		e.eventually(60*time.Second, "k is active, with its renewals", func() error {
			got := eval[string](e, state)
			if got != "active" || !eval[bool](e, `!!document.querySelector('tr[data-member="k"] [data-headroom="k"][data-level="ok"]')`) {
				return fmt.Errorf("k's state: %q", got)
			}
			return nil
		})
		k.signal(syscall.SIGKILL)
		// Its session expires within its TTL; its health record, which
		// nobody deletes, is stale 3 publications and a TTL after its last
		// write.
		e.eventually(2*time.Minute, "k, killed, is shown gone, and not active", func() error {
			got := eval[string](e, state)
			if !strings.HasPrefix(got, "gone") || strings.Contains(got, "active") {
				return fmt.Errorf("k's state: %q", got)
			}
			badges := eval[int](e, `document.querySelectorAll('tr[data-member="k"] > td:nth-of-type(1) .badge').length`)
			if badges != 1 {
				return fmt.Errorf("k's state %q has %d badges", got, badges)
			}
			return nil
		})
		e.screenshot("rough-members")
	})
}

// open navigates to the console's page at path and waits for it to be
// live.
func (e *e2e) open(path string) {
	e.t.Helper()
	e.do(10*time.Second, chromedp.Navigate(e.url+path), chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)))
}

// noOverlap checks that no two of the elements sel selects overlap on the
// page, by their bounding boxes, and says which did.
func (e *e2e) noOverlap(sel, what string) {
	e.t.Helper()
	overlaps := eval[[]string](e, `(() => {
		const els = [...document.querySelectorAll(`+"`"+sel+"`"+`)].filter(el => el.getBoundingClientRect().width > 0);
		const out = [];
		for (let i = 0; i < els.length; i++) for (let j = i + 1; j < els.length; j++) {
			const a = els[i].getBoundingClientRect(), b = els[j].getBoundingClientRect();
			if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) {
				const box = r => '[' + [r.left, r.top, r.right, r.bottom].map(Math.round).join(' ') + ']';
				out.push(JSON.stringify(els[i].textContent) + box(a) + ' and ' + JSON.stringify(els[j].textContent) + box(b));
			}
		}
		return out;
	})()`)
	assert.Empty(e.t, overlaps, "%s overlap", what)
}
