package console_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/consoletest"
	"github.com/simba-go/simba/internal/records"
)

// rebalanceWindow is how close in time the moves of one rebalance are, as
// the console's documentation gives it: within 5s of each other.
const rebalanceWindow = 5 * time.Second

// jsBar is a term's bar on the timeline, read from the page.
type jsBar struct {
	Lease  string `json:"lease"`
	Token  uint64 `json:"token"`
	Member string `json:"member"`
	Ended  string `json:"ended"`
	Start  int64  `json:"start"`
	End    int64  `json:"end"`
}

const readBars = `[...document.querySelectorAll('[data-lane] [data-member][data-token]')].map(b => ({
	lease: b.closest('[data-lane]').dataset.lane, token: Number(b.dataset.token), member: b.dataset.member,
	ended: b.dataset.ended || '', start: Number(b.dataset.start), end: Number(b.dataset.end)}))`

// jsRebalance is one rebalance of the list, read from the page.
type jsRebalance struct {
	Kind  string   `json:"kind"`
	Moves []jsMove `json:"moves"`
}

// jsMove is one partition's move in a rebalance.
type jsMove struct {
	P    int    `json:"p"`
	From string `json:"from"`
	To   string `json:"to"`
	Ms   int64  `json:"ms"`
}

const readRebalances = `[...document.querySelectorAll('[data-rebalance]')].map(r => ({kind: r.dataset.kind,
	moves: [...r.querySelectorAll('[data-partition]')].map(m => ({p: Number(m.dataset.partition),
		from: m.dataset.from, to: m.dataset.to, ms: Number(m.dataset.ms)}))}))`

// moves returns the partitions whose holder differs from before to after,
// as "p:from>to".
func moves(before, after []consoletest.Holding) []string {
	var out []string
	for p := range before {
		if before[p].Member != after[p].Member {
			out = append(out, fmt.Sprintf("%d:%s>%s", p, before[p].Member, after[p].Member))
		}
	}
	return out
}

// TestBrowserPictures drives a cluster on the memory backend through a
// hand-off, a join, a drain and a crash, and checks the console's
// pictures against what the nodes saw: every term a node won is a bar on
// its lane, with how it ended; each view change is one rebalance, with
// the partitions that moved and from whom to whom; the overview lists the
// drained member; the members page shows each live member's headroom;
// the job page charts the runs of its history. It saves screenshots of
// each page (and, with SIMBA_CONSOLE_DOCS=1, those of the README in
// docs/).
func TestBrowserPictures(t *testing.T) {
	path := chromium(t)
	b := memory.New()
	defer b.Close()
	f := consoletest.NewFleet(t)
	nodes := map[string]*memory.Node{}
	startNode := func(id string) {
		nodes[id] = b.Node(id)
		f.Start(nodes[id], id, e2eTTL)
	}
	startNode("a")
	startNode("b")
	defer f.StopAll()
	a, url := serveConsole(t, b.Node("console"))
	e := &e2e{t: t, f: f, url: url, ctx: newBrowser(t, path), shotDir: screenshots}

	// settled waits until every partition is held, by none of gone, and
	// returns who holds each.
	settled := func(what string, gone ...string) []consoletest.Holding {
		t.Helper()
		var hs []consoletest.Holding
		e.eventually(60*time.Second, what, func() error {
			hs = f.PartitionHolders()
			for p, h := range hs {
				if h.Member == "" || slices.Contains(gone, h.Member) {
					return fmt.Errorf("partition %d held by %q", p, h.Member)
				}
			}
			return nil
		})
		return hs
	}
	// Each step is apart from the next by more than the console groups
	// moves by (rebalanceWindow), so that each is a rebalance of its own.
	apart := func() { time.Sleep(rebalanceWindow + time.Second) }

	initial := settled("a and b hold every partition")
	apart()

	// A hand-off: the holder of ingest resigns.
	ingest, ok := f.Holder("ingest")
	require.True(t, ok, "ingest has a holder")
	require.NoError(t, a.Resign(t.Context(), "ingest", ingest.Token, "the pictures test"))
	e.eventually(30*time.Second, "ingest has a new holder", func() error {
		if h, ok := f.Holder("ingest"); !ok || h.Token == ingest.Token {
			return errors.New("not yet")
		}
		return nil
	})

	// A join: c takes its share.
	startNode("c")
	var joined []consoletest.Holding
	e.eventually(60*time.Second, "c takes its share", func() error {
		joined = settled("every partition is held")
		if n := len(slices.DeleteFunc(slices.Clone(joined), func(h consoletest.Holding) bool { return h.Member != "c" })); n < f.Partitions/3 {
			return fmt.Errorf("c holds %d partitions", n)
		}
		return nil
	})
	apart()
	joined = settled("every partition is held after the join")

	// A drain: a hands everything off.
	require.NoError(t, a.Drain(t.Context(), "a", "the pictures test"))
	drained := settled("a's partitions move to b and c", "a")
	apart()
	drained = settled("every partition is held after the drain", "a")

	// A crash: b stops answering; its sessions expire, c takes over. The
	// group's timeline is open meanwhile: it shows the fail-overs without
	// a reload.
	e.do(10*time.Second, chromedp.Navigate(e.url+"/timeline?group=billing&range=15m"), chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)))
	eval[int](e, `window.simbaTestMark = 1`)
	nodes["b"].Crash()
	crashed := settled("b's partitions fail over to c", "a", "b")
	apart()

	// The group's timeline: a bar per term the nodes won, ending as they
	// saw it end.
	e.eventually(30*time.Second, "the timeline shows every term the nodes won, with its member and how it ended", func() error {
		bars := eval[[]jsBar](e, readBars)
		byTerm := map[string]jsBar{}
		for _, bar := range bars {
			byTerm[bar.Lease+"/"+strconv.FormatUint(bar.Token, 10)] = bar
		}
		for p := range f.Partitions {
			lease := "billing." + strconv.Itoa(p)
			for _, term := range f.TermsOf(lease) {
				bar, ok := byTerm[lease+"/"+strconv.FormatUint(term.Token, 10)]
				switch {
				case !ok:
					return fmt.Errorf("%s: no bar for term %d of %s (bars: %v)", lease, term.Token, term.Member, slices.Collect(maps.Keys(byTerm)))
				case bar.Member != term.Member:
					return fmt.Errorf("%s: the bar of term %d is %s's, the nodes say %s's", lease, term.Token, bar.Member, term.Member)
				case bar.End < bar.Start:
					return fmt.Errorf("%s: the bar of term %d ends before it starts", lease, term.Token)
				case lostTerm(term.Revoked) && bar.Ended != records.EndedFailOver:
					return fmt.Errorf("%s: %s's term %d, revoked by %q, ended %q on the timeline, want %q", lease, term.Member, term.Token, term.Revoked, bar.Ended, records.EndedFailOver)
				case term.Revoked == simba.RevokeStopped.String() && bar.Ended != records.EndedMoved:
					// No task is stopped in the test: the assignment moved it.
					return fmt.Errorf("%s: %s's term %d was moved, and ended %q on the timeline", lease, term.Member, term.Token, bar.Ended)
				case term.Revoked == simba.RevokeDrained.String() && bar.Ended != term.Revoked:
					return fmt.Errorf("%s: a's drained term %d ended %q on the timeline", lease, term.Token, bar.Ended)
				}
			}
		}
		return nil
	})
	require.Equal(t, 1, eval[int](e, `window.simbaTestMark`), "the timeline updated without a reload")
	e.screenshot("timeline-group")

	// The rebalances: the join, the drain and the crash, each with the
	// moves the nodes made, from whom to whom.
	e.eventually(30*time.Second, "the rebalance list shows the join, the drain and the crash with their moves", func() error {
		type shown struct {
			kinds []string
			moves []string
		}
		var got []shown
		for _, r := range eval[[]jsRebalance](e, readRebalances) {
			var ms []string
			for _, m := range r.Moves {
				if m.Ms < 0 {
					return fmt.Errorf("a move of partition %d took %d ms", m.P, m.Ms)
				}
				ms = append(ms, fmt.Sprintf("%d:%s>%s", m.P, m.From, m.To))
			}
			slices.Sort(ms)
			got = append(got, shown{strings.Fields(r.Kind), ms})
		}
		for _, want := range []struct {
			kind          string
			before, after []consoletest.Holding
		}{{"view-change", initial, joined}, {"drain", joined, drained}, {"crash", drained, crashed}} {
			w := moves(want.before, want.after)
			slices.Sort(w)
			if !slices.ContainsFunc(got, func(r shown) bool { return slices.Contains(r.kinds, want.kind) && slices.Equal(r.moves, w) }) {
				return fmt.Errorf("no rebalance of kind %s with the moves the nodes made, %v; the list shows %v", want.kind, w, got)
			}
		}
		return nil
	})

	if os.Getenv("SIMBA_CONSOLE_DOCS") == "1" {
		// The whole run, for the README: it lasts about a minute.
		e.do(10*time.Second, chromedp.Navigate(e.url+"/timeline?group=billing&range=all"), chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)))
		docsShot(e, "console-timeline")
	}

	// One partition, zoomed.
	e.do(10*time.Second, chromedp.Navigate(e.url+"/timeline?group=billing&p=0&range=15m"), chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)))
	require.Equal(t, len(f.TermsOf("billing.0")), eval[int](e, `document.querySelectorAll('[data-lane] [data-member][data-token]').length`), "the zoomed lane has a bar per term of partition 0")
	e.screenshot("timeline-partition")

	// The elections' timeline: ingest's hand-off.
	e.do(10*time.Second, chromedp.Navigate(e.url+"/timeline?range=15m"), chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)))
	e.eventually(30*time.Second, "ingest's lane shows the resigned term", func() error {
		for _, bar := range eval[[]jsBar](e, readBars) {
			if bar.Lease == "ingest" && bar.Token == ingest.Token {
				if bar.Ended != simba.RevokeResigned.String() {
					return fmt.Errorf("ingest's term %d ended %q", ingest.Token, bar.Ended)
				}
				return nil
			}
		}
		return fmt.Errorf("no bar for ingest's term %d", ingest.Token)
	})
	e.screenshot("timeline-elections")

	// The overview lists the drained member.
	e.do(10*time.Second, chromedp.Navigate(e.url+"/"), chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)))
	e.eventually(30*time.Second, "the overview lists a as drained", func() error {
		if !eval[bool](e, `!!document.querySelector('[data-attention="drained"][data-target="a"]')`) {
			return errors.New("no drained item for a")
		}
		return nil
	})
	e.screenshot("overview")
	docsShot(e, "console-overview")

	// The members page shows c's headroom, from its health record.
	e.do(10*time.Second, chromedp.Navigate(e.url+"/members"), chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)))
	e.eventually(30*time.Second, "c's headroom shows", func() error {
		level := eval[string](e, `(document.querySelector('[data-headroom="c"]') || {dataset: {}}).dataset.level || ''`)
		if level != "ok" {
			return fmt.Errorf("c's headroom level %q", level)
		}
		return nil
	})
	e.screenshot("members-headroom")
	docsShot(e, "console-members")

	// The job page charts the runs of its history.
	e.do(10*time.Second, chromedp.Navigate(e.url+"/jobs/digest"), chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)))
	// Rows of skipped starts (data-skipped: a loaded machine's loop
	// woke late) are no runs: the chart counts them below it instead.
	e.eventually(30*time.Second, "the chart has a mark per run of the history table", func() error {
		marks, rows := eval[int](e, `document.querySelectorAll('[data-run]').length`), eval[int](e, `document.querySelectorAll('tr[data-seq]:not([data-skipped])').length`)
		if marks == 0 || marks != rows {
			return fmt.Errorf("%d marks for %d runs", marks, rows)
		}
		return nil
	})
	e.screenshot("job-chart")
	docsShot(e, "console-job")
}

// lostTerm reports whether a term revoked for reason ended without a
// hand-off: its holder lost its session or lease.
func lostTerm(reason string) bool {
	switch reason {
	case simba.RevokeDeadline.String(), simba.RevokeSessionLost.String(), simba.RevokeLeaseLost.String():
		return true
	}
	return false
}

// docsShot saves what the window shows as docs/name.png, with
// SIMBA_CONSOLE_DOCS=1: the README's pictures come from a real run.
func docsShot(e *e2e, name string) {
	e.t.Helper()
	if os.Getenv("SIMBA_CONSOLE_DOCS") != "1" {
		return
	}
	e.do(5*time.Second, chromedp.EmulateViewport(1280, 760))
	png, err := chromedp.Run(e.ctx, chromedp.CaptureScreenshot())
	require.NoError(e.t, err)
	require.NoError(e.t, os.WriteFile("../../docs/"+name+".png", png, 0o644))
	e.do(5*time.Second, chromedp.EmulateViewport(1280, 900))
}
