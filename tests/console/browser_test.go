package console_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/console"
	"github.com/simba-go/simba/internal/consoletest"
	"github.com/simba-go/simba/internal/etcdtest"
)

// The end-to-end tests drive the console in headless Chromium, while simba
// nodes run in this process on a backend. They need a browser: run them
// under scripts/with-chromium.sh, which installs Debian's chromium package
// when missing and sets SIMBA_CHROMIUM. Without one they skip, unless
// SIMBA_REQUIRE_SERVERS=1.
//
// They save screenshots of each page under build/console-screenshots/ at the
// root of the repository. With SIMBA_CONSOLE_DOCS=1 they also write the one
// the README shows, docs/console.png.

// screenshots is where the screenshots go, relative to this package.
const screenshots = "../../build/console-screenshots"

// e2eTTL is the session TTL of the nodes in the end-to-end tests.
const e2eTTL = 3 * time.Second

// chromium returns the path of the browser, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	path := os.Getenv("SIMBA_CHROMIUM")
	if path == "" {
		if os.Getenv("SIMBA_REQUIRE_SERVERS") == "1" {
			t.Fatal("SIMBA_REQUIRE_SERVERS=1 but SIMBA_CHROMIUM is not set: run under scripts/with-chromium.sh")
		}
		t.Skip("no browser: set SIMBA_CHROMIUM, or run under scripts/with-chromium.sh, which installs Chromium and sets it")
	}
	return path
}

// newBrowser starts headless Chromium with a fresh profile and returns a
// context of one of its tabs. The browser stops when the test ends.
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	require.NoError(t, chromedp.Do(ctx), "starting %s", path) // no timeout here: it would stop the browser
	return ctx
}

// serveConsole serves a console, operated with testToken, on an admin of
// b until the test ends, and returns the admin and the console's address.
func serveConsole(t *testing.T, b backend.Backend) (*admin.Admin, string) {
	t.Helper()
	a, err := admin.Open(t.Context(), b)
	require.NoError(t, err)
	s, err := console.New(a, console.WithToken(testToken))
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close() // before srv.Close, which waits for the event streams
		srv.Close()
		a.Close()
	})
	return a, srv.URL
}

// e2e is one end-to-end run: the nodes, the console and the browser.
type e2e struct {
	t       *testing.T
	f       *consoletest.Fleet
	url     string // the console
	roURL   string // a read-only console on the same backend
	ctx     context.Context
	shotDir string
}

// minStepsTime is the least time do gives its steps: they only wait for
// the page to show something, so a longer bound costs time only when
// they fail, and a loaded CI machine (a real Chromium beside the race
// detector's tests) took more than 10 s for a page to load and go live.
const minStepsTime = 30 * time.Second

// do runs browser actions, within d (at least minStepsTime). A failure
// says which step failed, and what the page was then.
func (e *e2e) do(d time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	e.t.Helper()
	d = max(d, minStepsTime)
	ctx, cancel := context.WithTimeout(e.ctx, d)
	defer cancel()
	for i, step := range steps {
		if _, err := chromedp.Run(ctx, step); err != nil {
			e.t.Fatalf("browser step %d of %d: %v, within %v; the page then: %s", i+1, len(steps), err, d, e.pageState())
		}
	}
}

// pageState describes the page for a failure: its address and its live
// indicator, without failing the test itself.
func (e *e2e) pageState() string {
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	url, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	live, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { const l = document.getElementById('live'); return l ? l.dataset.state + ' "' + l.textContent.trim() + '"' : 'no live indicator' })()`))
	if err != nil {
		return fmt.Sprintf("%s (live indicator unreadable: %v)", url, err)
	}
	return fmt.Sprintf("%s, live indicator %s", url, live)
}

// click clicks the node sel selects, again when a live update replaced the
// node between the query and the click (the browser then answers "Could
// not find node with given id").
func click(sel string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		var err error
		for range 5 {
			_, err = chromedp.Click(chromedp.CSS(sel))(ctx, t)
			if err == nil || !strings.Contains(err.Error(), "Could not find node") {
				return chromedp.Void{}, err
			}
		}
		return chromedp.Void{}, err
	}
}

// eval evaluates a script in the page, awaiting a promise it returns.
func eval[T any](e *e2e, script string) T {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](script, chromedp.EvalAwaitPromise))
	require.NoError(e.t, err, script)
	return v
}

// eventually calls check until it returns nil, or fails the test after d.
func (e *e2e) eventually(d time.Duration, what string, check func() error) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// screenshot saves a screenshot of the whole page as name.png.
func (e *e2e) screenshot(name string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(e.t, err)
	require.NoError(e.t, os.MkdirAll(e.shotDir, 0o755))
	require.NoError(e.t, os.WriteFile(filepath.Join(e.shotDir, name+".png"), png, 0o644))
}

// viewport saves a screenshot of what the window shows as name.png: for
// a dialog, whose backdrop covers the window only.
func (e *e2e) viewport(name string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(e.t, err)
	require.NoError(e.t, os.MkdirAll(e.shotDir, 0o755))
	require.NoError(e.t, os.WriteFile(filepath.Join(e.shotDir, name+".png"), png, 0o644))
}

// jsCell is a partition of the grid, read from the page.
type jsCell struct {
	P      int    `json:"p"`
	Owner  string `json:"owner"`
	Holder string `json:"holder"`
	Token  uint64 `json:"token"`
	State  string `json:"state"`
}

const readGrid = `[...document.querySelectorAll('section[data-group="billing"] li.cell')].map(c => ({
	p: Number(c.dataset.partition), owner: c.dataset.owner, holder: c.dataset.holder,
	token: Number(c.dataset.token || 0), state: c.dataset.state}))`

// grid reads the billing grid shown in the page.
func (e *e2e) grid() []consoletest.GridCell {
	var out []consoletest.GridCell
	for _, c := range eval[[]jsCell](e, readGrid) {
		out = append(out, consoletest.GridCell{Partition: c.P, Owner: c.Owner, Holder: c.Holder, Token: c.Token, State: c.State})
	}
	return out
}

// post sends an operation from the page's script, with the token given
// ("" for none), and returns the status of the answer.
func (e *e2e) post(token string) int {
	e.t.Helper()
	headers := `{'Content-Type': 'application/json'}`
	if token != "" {
		headers = fmt.Sprintf(`{'Content-Type': 'application/json', %q: %q}`, console.TokenHeader, token)
	}
	return eval[int](e, `fetch('/api/ops/trigger', {method: 'POST', headers: `+headers+`,
		body: JSON.stringify({target: 'report'})}).then(r => r.status)`)
}

// auditReason is the reason given with the trigger from the page: markup,
// which the audit page must show as text.
const auditReason = `<b>month end</b> <script>window.simbaInjected = 1</script>`

// auditShows checks that the audit page shows the trigger of report that
// carol did from the page with reason, and that its filter works.
func (e *e2e) auditShows(reason string) {
	t := e.t
	t.Helper()
	row := `table.audit tr[data-audit-op="trigger"][data-target="report"][data-by="carol"]`
	e.do(10*time.Second,
		chromedp.Navigate(e.url+"/audit"),
		chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)),
		chromedp.WaitVisible(chromedp.CSS(row)),
	)
	type shown struct {
		Who, Reason, Rel, When string
		Markup                 int
		Injected               bool
	}
	got := eval[shown](e, `(() => {
		const r = document.querySelector('`+row+`');
		return {who: r.querySelector('.who').textContent, reason: r.querySelector('td.reason').textContent,
			rel: r.querySelector('time[data-rel]').textContent, when: r.querySelector('td.when time').textContent,
			markup: r.querySelectorAll('td.reason *').length, injected: !!window.simbaInjected};
	})()`)
	assert.Equal(t, "carol", got.Who)
	assert.Equal(t, reason, got.Reason, "the reason, as text")
	assert.Zero(t, got.Markup, "no element from the reason")
	assert.False(t, got.Injected, "no script from the reason ran")
	assert.Regexp(t, `^(now|[0-9]+[smhd] ago)$`, got.Rel, "when, relative to now")
	assert.Regexp(t, `^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} UTC$`, got.When, "when, with its zone")
	e.screenshot("audit")

	e.do(10*time.Second,
		chromedp.SendKeys(chromedp.CSS(`#audit-name`), "report\r"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-view="/audit?name=report"] #live[data-state="live"]`)),
		chromedp.WaitVisible(chromedp.CSS(row)),
	)
	assert.Zero(t, eval[int](e, `document.querySelectorAll('table.audit tr[data-target]:not([data-target="report"])').length`), "only report's")
}

// scenario runs the end-to-end scenario with the nodes on node(id) and the
// console's admin on adm. It returns false, having skipped the test, when
// the backend keeps no records.
func scenario(t *testing.T, browserPath string, node func(id string) backend.Backend, adm backend.Backend, shotDir string) bool {
	f := consoletest.NewFleet(t)
	for _, id := range []string{"a", "b", "c"} {
		f.Start(node(id), id, e2eTTL)
	}
	defer f.StopAll()
	a, err := admin.Open(t.Context(), adm)
	if errors.Is(err, backend.ErrRecordsUnsupported) {
		t.Skip("this backend keeps no records (backend.Records) yet: admin.Open returns backend.ErrRecordsUnsupported; the scenario runs on the memory backend instead")
		return false
	}
	require.NoError(t, err)
	defer a.Close()
	s, err := console.New(a, console.WithToken(testToken))
	require.NoError(t, err)
	ro, err := console.New(a, console.WithReadOnly(true))
	require.NoError(t, err)
	srv, roSrv := httptest.NewServer(s), httptest.NewServer(ro)
	defer srv.Close()
	defer roSrv.Close()
	defer s.Close() // before srv.Close, which waits for the event streams
	defer ro.Close()

	e := &e2e{t: t, f: f, url: srv.URL, roURL: roSrv.URL, ctx: newBrowser(t, browserPath), shotDir: shotDir}

	// The groups page shows every partition with its true owner.
	e.do(10*time.Second, chromedp.Navigate(e.url+"/groups"), chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)))
	e.eventually(30*time.Second, "the grid shows every partition with its true owner", func() error {
		return f.GridMatches(e.grid())
	})
	e.screenshot("groups")
	if os.Getenv("SIMBA_CONSOLE_DOCS") == "1" {
		e.do(5*time.Second, chromedp.EmulateViewport(1280, 760))
		png, err := chromedp.Run(e.ctx, chromedp.CaptureScreenshot())
		require.NoError(t, err)
		require.NoError(t, os.WriteFile("../../docs/console.png", png, 0o644))
		e.do(5*time.Second, chromedp.EmulateViewport(1280, 900))
	}
	e.do(5*time.Second, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	e.screenshot("groups-phone")
	e.do(5*time.Second, chromedp.EmulateViewport(1280, 900))

	// After a node stops, the grid updates by itself.
	eval[int](e, `window.simbaTestMark = 1`)
	updates := eval[string](e, `document.body.dataset.updates || "0"`)
	f.Stop("c")
	e.eventually(30*time.Second, "the grid updates by itself after node c stopped", func() error {
		cells := e.grid()
		for _, c := range cells {
			if c.Holder == "c" || c.Owner == "c" {
				return fmt.Errorf("partition %d still shows c", c.Partition)
			}
		}
		return f.GridMatches(cells)
	})
	assert.Equal(t, 1, eval[int](e, `window.simbaTestMark`), "the page was not reloaded")
	assert.NotEqual(t, updates, eval[string](e, `document.body.dataset.updates || "0"`), "updates arrived by the event stream")
	e.screenshot("groups-after-stop")

	// Trigger from the page causes one run.
	e.do(10*time.Second,
		chromedp.Navigate(e.url+"/jobs"),
		chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)),
		chromedp.WaitVisible(chromedp.CSS(`section[data-job="report"] button[data-op="trigger"]`)),
	)
	require.Empty(t, f.RunsOf("report"), "report's schedule is not due")
	e.do(10*time.Second,
		click(`section[data-job="report"] button[data-op="trigger"]`),
		chromedp.WaitVisible(chromedp.CSS(`#confirm #token`)),
		chromedp.SendKeys(chromedp.CSS(`#confirm #token`), testToken),
		chromedp.SendKeys(chromedp.CSS(`#confirm #operator`), "carol"),
		chromedp.SendKeys(chromedp.CSS(`#confirm #reason`), auditReason),
	)
	e.viewport("confirm")
	e.do(10*time.Second,
		click(`#confirm-ok`),
		chromedp.WaitNotVisible(chromedp.CSS(`#confirm`)),
		chromedp.WaitVisible(chromedp.CSS(`#notice`)),
	)
	assert.Contains(t, eval[string](e, `document.getElementById('notice').textContent`), "triggered report")
	assert.Contains(t, eval[string](e, `document.getElementById('notice').textContent`), "recorded as done by carol", "the name given with the token")
	e.eventually(15*time.Second, "report runs", func() error {
		if n := len(f.RunsOf("report")); n != 1 {
			return fmt.Errorf("%d runs", n)
		}
		return nil
	})
	e.eventually(15*time.Second, "the run shows in the page, with its source", func() error {
		if !eval[bool](e, `!!document.querySelector('section[data-job="report"] tr[data-source="trigger"]')`) {
			return errors.New("no run with source trigger")
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	assert.Len(t, f.RunsOf("report"), 1, "one trigger, one run")
	e.screenshot("jobs")

	// The audit page shows the trigger done from the page: who, why (as
	// text), when; its filter goes to the name's own, which stays live.
	e.auditShows(auditReason)
	e.do(10*time.Second,
		chromedp.Navigate(e.url+"/jobs"),
		chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)),
		chromedp.WaitVisible(chromedp.CSS(`section[data-job="report"] button[data-op="trigger"]`)),
	)

	// A wrong token is refused, and the page asks for the token again.
	eval[int](e, `sessionStorage.setItem('simba-console-token', 'wrong-token-0123456789'), 1`)
	e.do(10*time.Second,
		click(`section[data-job="report"] button[data-op="trigger"]`),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-ok`)),
		click(`#confirm-ok`),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-error`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm #token`)),
	)
	assert.Contains(t, eval[string](e, `document.getElementById('confirm-error').textContent`), "wrong operations token")
	assert.Empty(t, eval[string](e, `sessionStorage.getItem('simba-console-token') || ''`), "the wrong token is forgotten")
	e.do(5*time.Second, click(`#confirm-cancel`), chromedp.WaitNotVisible(chromedp.CSS(`#confirm`)))

	// A request without the token is refused.
	assert.Equal(t, http.StatusUnauthorized, e.post(""))
	assert.Equal(t, http.StatusUnauthorized, e.post("wrong-token-0123456789"))

	// The other pages, for the record.
	for _, p := range []struct{ path, name string }{
		{"/elections", "elections"}, {"/members", "members"}, {"/jobs/digest", "job-history"},
	} {
		e.do(10*time.Second, chromedp.Navigate(e.url+p.path), chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)))
		e.screenshot(p.name)
	}

	// A read-only console shows no operations and refuses them, token or not.
	e.do(10*time.Second, chromedp.Navigate(e.roURL+"/jobs"), chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)))
	assert.Zero(t, eval[int](e, `document.querySelectorAll('button[data-op]').length`))
	assert.Equal(t, "read-only", eval[string](e, `document.querySelector('.badge.readonly').textContent`))
	assert.Equal(t, http.StatusForbidden, e.post(testToken))
	e.screenshot("read-only")

	// Another origin cannot operate, even knowing the token: the browser
	// does not send the header without a preflight the console never
	// approves, and a simple request is refused by the console.
	e.do(10*time.Second, chromedp.Navigate(e.roURL+"/elections"))
	got := eval[string](e, fmt.Sprintf(`(async () => {
		let cors;
		try {
			const r = await fetch(%[1]q + '/api/ops/trigger', {method: 'POST',
				headers: {'Content-Type': 'application/json', %[2]q: %[3]q}, body: '{"target":"report"}'});
			cors = 'status ' + r.status;
		} catch (e) { cors = 'blocked'; }
		await fetch(%[1]q + '/api/ops/trigger', {method: 'POST', mode: 'no-cors',
			headers: {'Content-Type': 'text/plain'}, body: '{"target":"report"}'}).catch(() => {});
		return cors;
	})()`, e.url, console.TokenHeader, testToken))
	assert.Equal(t, "blocked", got)
	time.Sleep(2 * time.Second)
	assert.Len(t, f.RunsOf("report"), 1, "no run from another origin")
	ops, err := a.Ops(t.Context())
	require.NoError(t, err)
	assert.Empty(t, ops.Triggers)
	return true
}

// TestBrowser runs the end-to-end scenario on etcd (embedded) with the
// nodes on backend/etcd; on the memory backend as well with
// SIMBA_CONSOLE_E2E_MEMORY=1, or instead when the etcd backend keeps no
// records.
func TestBrowser(t *testing.T) {
	path := chromium(t)
	etcdRan := false
	t.Run("etcd", func(t *testing.T) {
		srv := etcdtest.Start(t)
		var backends []*etcd.Backend
		open := func(id string) backend.Backend {
			b, err := etcd.New(srv.Endpoints(), etcd.WithPrefix("/console-e2e/"))
			require.NoError(t, err, id)
			backends = append(backends, b)
			return b
		}
		defer func() {
			for _, b := range backends {
				b.Close()
			}
		}()
		etcdRan = scenario(t, path, open, open("console"), screenshots)
	})
	if etcdRan && os.Getenv("SIMBA_CONSOLE_E2E_MEMORY") != "1" {
		return
	}
	t.Run("memory", func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		dir := screenshots
		if etcdRan {
			dir = filepath.Join(screenshots, "memory")
		}
		scenario(t, path, func(id string) backend.Backend { return b.Node(id) }, b.Node("console"), dir)
	})
}
