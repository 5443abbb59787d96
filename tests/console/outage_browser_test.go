package console_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/console"
	"github.com/simba-go/simba/internal/consoletest"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/internal/zktest"
)

// outage is a backend server that a test can stop and start: a process of
// its own.
type outage struct {
	name          string
	pause, resume func() // SIGSTOP and SIGCONT
	kill, restart func() // SIGKILL, and start it again on the same address and data
	open          func(id string) backend.Backend
	longestTTL    time.Duration // of every session on it: the nodes' and the admin's, as granted
	recoverWithin time.Duration // bounds the wait for the truth once it answers again
}

// liveState is what the page's live indicator shows.
type liveState struct {
	State string `json:"state"`
	Text  string `json:"text"`
	Title string `json:"title"` // the backend's error, when unreachable
}

// outageTimeout is the console's timeout (console.WithTimeout) in the
// outage tests.
const outageTimeout = 2 * time.Second

// healthReply is the JSON body of the console's /healthz, as its
// documentation gives it.
type healthReply struct {
	Status  string    `json:"status"` // "ok" or "unreachable"
	Backend string    `json:"backend"`
	Checked time.Time `json:"checked"`
	Since   time.Time `json:"unreachable_since"` // for "unreachable"
	Error   string    `json:"error"`             // for "unreachable"
}

func (e *e2e) live() liveState {
	return eval[liveState](e, `({state: document.getElementById('live').dataset.state, text: document.getElementById('live').textContent, title: document.getElementById('live').title})`)
}

// shows reports what the page shows now: the error banner or the grid.
func (e *e2e) showsError() bool {
	return eval[bool](e, `!!document.querySelector('[data-backend-error]')`)
}

// healthz asks the console's /healthz, bounded.
func healthz(t *testing.T, url string) (int, healthReply) {
	t.Helper()
	cl := http.Client{Timeout: 30 * time.Second}
	resp, err := cl.Get(url + "/healthz")
	require.NoError(t, err)
	defer resp.Body.Close()
	var r healthReply
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
	return resp.StatusCode, r
}

// outageScenario runs the nodes and a console on the server of o, in the
// browser, and stops the server longer than every TTL, then resumes it;
// then kills it and starts it again. Each time the page must say the
// backend is unreachable (never "live"), a page loaded meanwhile must be
// the error page within the timeout, /healthz must say 503; and within
// o.recoverWithin of the server answering again the page must show the
// truth again, live, by itself.
func outageScenario(t *testing.T, browserPath string, o outage) {
	f := consoletest.NewFleet(t)
	for _, id := range []string{"a", "b", "c"} {
		f.Start(o.open(id), id, e2eTTL)
	}
	defer f.StopAll()
	a, err := admin.Open(t.Context(), o.open("console"))
	require.NoError(t, err)
	defer a.Close()
	s, err := console.New(a, console.WithToken(testToken), console.WithTimeout(outageTimeout), console.WithBackendName(o.name))
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	defer srv.Close()
	defer s.Close()
	e := &e2e{t: t, f: f, url: srv.URL, ctx: newBrowser(t, browserPath), shotDir: screenshots}

	truth := func() error {
		if st := e.live(); st.State != "live" {
			return fmt.Errorf("the indicator shows %q (%s: %s)", st.State, st.Text, st.Title)
		}
		if e.showsError() {
			return fmt.Errorf("the page shows the error")
		}
		return f.GridMatches(e.grid())
	}
	e.do(10*time.Second, chromedp.Navigate(e.url+"/groups"), chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)))
	e.eventually(30*time.Second, "the grid shows every partition with its true owner", truth)
	code, _ := healthz(t, e.url)
	require.Equal(t, http.StatusOK, code, "/healthz before the outage")

	down := func(what string) {
		t.Helper()
		e.eventually(outageTimeout+10*time.Second, what+": the indicator says the backend is unreachable", func() error {
			st := e.live()
			if st.State != "unreachable" || !strings.HasPrefix(st.Text, "backend unreachable since ") {
				return fmt.Errorf("the indicator shows %q (%s)", st.State, st.Text)
			}
			if !e.showsError() {
				return fmt.Errorf("the page does not show the error")
			}
			if cells := e.grid(); len(cells) > 0 {
				return fmt.Errorf("the page still shows a grid of %d partitions", len(cells))
			}
			return nil
		})
		start := time.Now()
		code, r := healthz(t, e.url)
		require.Equal(t, http.StatusServiceUnavailable, code, "%s: /healthz", what)
		require.Equal(t, "unreachable", r.Status, "%s: /healthz", what)
		require.LessOrEqual(t, time.Since(start), outageTimeout+2*time.Second, "%s: /healthz within the timeout", what)

		// A page loaded now is the error page, within the timeout.
		start = time.Now()
		e.do(outageTimeout+10*time.Second, chromedp.Navigate(e.url+"/elections"), chromedp.WaitVisible(chromedp.CSS(`[data-backend-error]`)))
		took := time.Since(start)
		require.LessOrEqual(t, took, outageTimeout+5*time.Second, "%s: the error page within the timeout", what)
		text := eval[string](e, `document.querySelector('[data-backend-error]').textContent`)
		require.Contains(t, text, "The backend ("+o.name+") could not be read", what)
		require.Contains(t, text, "keeps trying", what)
		require.NotEqual(t, "live", e.live().State, "%s: not live", what)
		e.screenshot("outage-" + strings.ReplaceAll(what, " ", "-"))
		t.Logf("%s: the error page in %v", what, took.Round(time.Millisecond))
		e.do(outageTimeout+10*time.Second, chromedp.Navigate(e.url+"/groups"), chromedp.WaitVisible(chromedp.CSS(`[data-backend-error]`)))
	}
	up := func(what string, answering time.Time) {
		t.Helper()
		// This needs an admin whose reads work again once the backend
		// answers, whatever became of its session meanwhile.
		e.eventually(o.recoverWithin, what+": the page shows the truth again, live", truth)
		t.Logf("%s: the truth again %v after the server answered", what, time.Since(answering).Round(time.Millisecond))
		code, r := healthz(t, e.url)
		require.Equal(t, http.StatusOK, code, "%s: /healthz: %+v", what, r)
	}

	// Stopped longer than every TTL, then resumed.
	stopped := time.Now()
	o.pause()
	down("stopped")
	time.Sleep(time.Until(stopped.Add(o.longestTTL + 3*time.Second)))
	o.resume()
	up("resumed", time.Now())

	// Ended, then started again.
	o.kill()
	down("killed")
	o.restart()
	up("restarted", time.Now())
}

// TestBrowserOutageZooKeeper runs the outage scenario on a ZooKeeper server
// of the test's own.
func TestBrowserOutageZooKeeper(t *testing.T) {
	path := chromium(t)
	srv := zktest.StartServer(t)
	var backends []*zookeeper.Backend
	defer func() {
		for _, b := range backends {
			b.Close()
		}
	}()
	outageScenario(t, path, outage{
		name:   "ZooKeeper " + srv.Addr,
		pause:  srv.Pause,
		resume: srv.Resume,
		kill:   srv.Kill,
		restart: func() {
			srv.Start()
		},
		open: func(id string) backend.Backend {
			b, err := zookeeper.New([]string{srv.Addr}, zookeeper.WithRoot("/console-outage"))
			require.NoError(t, err, id)
			backends = append(backends, b)
			return b
		},
		longestTTL:    10 * time.Second, // the admin's; the server grants at most 4s (zktest.Config)
		recoverWithin: 30 * time.Second,
	})
}

// Environment of the etcd server process.
const (
	etcdProcessEnv    = "SIMBA_CONSOLE_ETCD_PROCESS" // its data directory
	etcdProcessMarker = "etcd-process: "
)

// TestEtcdServerProcess is an embedded etcd server (internal/etcdtest) in a
// process of its own, started by etcdProcess, so that a test can stop it
// with SIGSTOP. It prints its endpoint, then obeys lines on stdin: "stop"
// (the server stops, its connections reset, as at an exit) and "restart"
// (the same addresses and data), answering "stopped" and "restarted". It
// ends when stdin closes.
func TestEtcdServerProcess(t *testing.T) {
	dir := os.Getenv(etcdProcessEnv)
	if dir == "" {
		t.Skip("run by the etcd outage test")
	}
	srv, err := etcdtest.New(dir)
	if err != nil {
		fmt.Printf("%serror %s\n", etcdProcessMarker, oneLine(err))
		t.Fatal(err)
	}
	defer srv.Close()
	fmt.Printf("%sendpoint %s\n", etcdProcessMarker, srv.Endpoints()[0])
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "stop":
			srv.Stop()
			fmt.Printf("%sstopped\n", etcdProcessMarker)
		case "restart":
			if err := srv.Restart(); err != nil {
				fmt.Printf("%serror %s\n", etcdProcessMarker, oneLine(err))
				continue
			}
			fmt.Printf("%srestarted\n", etcdProcessMarker)
		}
	}
}

// oneLine is err's message on one line (the parent reads one line per
// answer), its line breaks as " | ", so that an error that ends with the
// server's log says it all.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " | ") }

// etcdProcess is a running TestEtcdServerProcess.
type etcdProcess struct {
	*testProcess
	endpoint string
}

// startEtcdProcess starts an etcd server process, ended when the test ends.
func startEtcdProcess(t *testing.T) *etcdProcess {
	t.Helper()
	p := &etcdProcess{testProcess: startTestProcess(t, "TestEtcdServerProcess", etcdProcessEnv+"="+t.TempDir(), etcdProcessMarker)}
	line := p.reply("the endpoint")
	endpoint, ok := strings.CutPrefix(line, "endpoint ")
	require.True(t, ok, "the etcd process said %q, not its endpoint", line)
	p.endpoint = endpoint
	return p
}

// TestBrowserOutageEtcd runs the outage scenario on an etcd server in a
// process of its own.
func TestBrowserOutageEtcd(t *testing.T) {
	path := chromium(t)
	p := startEtcdProcess(t)
	var backends []*etcd.Backend
	defer func() {
		for _, b := range backends {
			b.Close()
		}
	}()
	outageScenario(t, path, outage{
		name:    "etcd " + p.endpoint,
		pause:   func() { p.signal(syscall.SIGSTOP) },
		resume:  func() { p.signal(syscall.SIGCONT) },
		kill:    func() { p.command("stop", "stopped") },
		restart: func() { p.command("restart", "restarted") },
		open: func(id string) backend.Backend {
			b, err := etcd.New([]string{p.endpoint}, etcd.WithPrefix("/console-outage/"))
			require.NoError(t, err, id)
			backends = append(backends, b)
			return b
		},
		longestTTL:    10 * time.Second, // the admin's
		recoverWithin: 30 * time.Second,
	})
}
