package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/backend/mysql"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/plant"
)

// The environment of a client process: the harness re-executes the test
// binary with these set, and TestMain runs childMain instead of the tests.
const (
	envRole      = "SIMBA_CHAOS_ROLE"      // roleChild
	envRun       = "SIMBA_CHAOS_RUN"       // the run's ID, to find leftover processes
	envBackend   = "SIMBA_CHAOS_BACKEND"   // backendEtcd, backendZooKeeper, backendPostgres, backendMySQL or backendKubernetes
	envEndpoints = "SIMBA_CHAOS_ENDPOINTS" // comma-separated: the child's own proxies (PostgreSQL, MySQL: a DSN through its proxy)
	envSpace     = "SIMBA_CHAOS_SPACE"     // etcd key prefix, ZooKeeper root, PostgreSQL schema, MySQL table prefix or Kubernetes namespace
	envKube      = "SIMBA_CHAOS_KUBE"      // Kubernetes: the client's credentials and trust (kubeCreds, JSON)
	envRegister  = "SIMBA_CHAOS_REGISTER"  // URL of the fenced register
	envNode      = "SIMBA_CHAOS_NODE"      // the child's name and member ID
	envTTL       = "SIMBA_CHAOS_TTL"       // the TTL the client requests
	envChildSeed = "SIMBA_CHAOS_CHILD_SEED"
	envPlant     = "SIMBA_CHAOS_PLANT" // plantOverstatedTTL, a bug of internal/plant, or empty
	// envZKLag is, for a ZooKeeper ensemble, the backend's leader lag
	// (zookeeper.WithLeaderLag); the client asks for its TTL plus the lag,
	// so that its terms last the TTL.
	envZKLag = "SIMBA_CHAOS_ZK_LAG"

	roleChild         = "child"
	backendEtcd       = "etcd"
	backendZooKeeper  = "zookeeper"
	backendPostgres   = "postgres"
	backendMySQL      = "mysql"
	backendKubernetes = "kubernetes"

	// plantOverstatedTTL plants a safety bug in the client: its backend
	// reports every granted TTL one TTL longer than granted, so that its
	// terms outlive its leases on the server. Any other name is one of
	// internal/plant's bugs, planted with plant.Set.
	plantOverstatedTTL = "overstated-ttl"

	// The commands a client reads on its stdin, one a line; the end of its
	// stdin tells it to close.
	cmdStop = "stop " // + election or group: Stop it, then start it again once Done
)

// The workload of every client process: one election and one partition
// group, each term writing its token to the register.
const (
	election   = "e0"
	group      = "g"
	partitions = 3
	// Each write reports on 20–50ms of work that does not watch the term,
	// so a write may be sent after its term ended: the write already on its
	// way that a fenced resource exists to refuse.
	minWork, maxWork = 20 * time.Millisecond, 50 * time.Millisecond
	// cleanup is the work a run does once told to stop (its ctx
	// cancelled), before it returns, without watching the term: what a
	// task that flushes on cancellation does. It is what makes a lease
	// released before the run exits (the release-before-exit control)
	// show in every stop, rather than only when the stop fell early in a
	// step: another member takes the lease within it.
	cleanup = 150 * time.Millisecond
)

// leases returns the lease names of the workload.
func leases() []string {
	out := []string{election}
	for p := range partitions {
		out = append(out, fmt.Sprintf("%s.%d", group, p))
	}
	return out
}

// report is one line a client process prints on stdout, as JSON. Times
// are wall-clock times: processes share no monotonic clock, but on one
// machine they share the wall clock.
type report struct {
	// Ev is what happened: "session" (a session started: Session, TTL),
	// "lost" (it ended: Session, Msg), "start" (a term began: Lease,
	// Token, Start), "end" (it ended: also End, its Deadline after
	// revocation, and Msg, why), "obs" (a task was told its term is
	// valid: Lease, Token, What it asked, At, Until), "exit" (a term's
	// run returned: Lease, Token, At, Until the latest instant it was
	// promised), "restarted" (after a stop command: Lease, the election
	// or group, stopped at Start, started again at End), "closed"
	// (Client.Close returned), "late-event" (an event delivered after
	// Close), "leak" (goroutines left after Close), "error".
	Ev      string        `json:"ev"`
	Lease   string        `json:"lease,omitempty"`
	Token   uint64        `json:"token,omitempty"`
	Start   time.Time     `json:"start,omitzero"`
	End     time.Time     `json:"end,omitzero"`
	What    string        `json:"what,omitempty"`
	At      time.Time     `json:"at,omitzero"`
	Until   time.Time     `json:"until,omitzero"`
	Session string        `json:"session,omitempty"`
	TTL     time.Duration `json:"ttl,omitempty"`
	Msg     string        `json:"msg,omitempty"`
}

// reporter prints reports, one line each, whole.
type reporter struct {
	mu sync.Mutex
	w  io.Writer
}

func (r *reporter) say(rep report) {
	b, err := json.Marshal(rep)
	if err != nil {
		b, _ = json.Marshal(report{Ev: "error", Msg: err.Error()})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.w.Write(append(b, '\n'))
}

// childMain is a client process: a simba client on the backend named by
// the environment, through the endpoints given (the harness's proxies),
// running the workload and the commands read on its stdin until it
// closes; then it closes the client and checks that nothing of it is left
// running.
//
// Every exit but the normal one (0, after "closed") says why, on stdout as
// an "error" report and on stderr, which the harness shows with any
// unexpected exit: status 2 for an error of the harness's own making (a bad
// environment, a client that cannot start), the Go runtime's 2 for a panic,
// with its trace on stderr.
func childMain() int {
	baseline := goleak.IgnoreCurrent()
	out := &reporter{w: os.Stdout}
	node := os.Getenv(envNode)
	fail := func(err error) int {
		out.say(report{Ev: "error", Msg: err.Error()})
		fmt.Fprintf(os.Stderr, "chaos client %s: exit status 2: %v\n", node, err)
		return 2
	}
	ttl, err := time.ParseDuration(os.Getenv(envTTL))
	if err != nil {
		return fail(fmt.Errorf("%s: %w", envTTL, err))
	}
	seed, err := strconv.ParseUint(os.Getenv(envChildSeed), 10, 64)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", envChildSeed, err))
	}
	var lag time.Duration
	if v := os.Getenv(envZKLag); v != "" {
		if lag, err = time.ParseDuration(v); err != nil {
			return fail(fmt.Errorf("%s: %w", envZKLag, err))
		}
	}
	b, err := openBackend(lag)
	if err != nil {
		return fail(err)
	}
	var cb backend.Backend = b
	switch bug := os.Getenv(envPlant); bug {
	case "":
	case plantOverstatedTTL:
		cb = overstated{b, ttl + lag}
	default:
		if _, err := plant.Set(bug); err != nil {
			return fail(fmt.Errorf("%s: %w", envPlant, err))
		}
	}
	var closed atomic.Bool
	c, err := simba.New(cb, simba.WithTTL(ttl+lag), simba.WithMemberID(node), simba.WithEventHandler(func(e simba.Event) {
		if closed.Load() {
			out.say(report{Ev: "late-event", Msg: fmt.Sprintf("%T %+v", e, e)})
			return
		}
		switch e := e.(type) {
		case simba.SessionStarted:
			out.say(report{Ev: "session", Session: e.Session, TTL: e.TTL, Start: e.At})
		case simba.SessionLost:
			out.say(report{Ev: "lost", Session: e.Session, Msg: fmt.Sprintf("%v: %v", e.Reason, e.Err), End: e.At})
		}
	}))
	if err != nil {
		return fail(err)
	}
	w := newWriter(os.Getenv(envRegister), node, seed, out)
	startElection := func() (func() <-chan struct{}, error) {
		t, err := c.Election(election).RunWhileLeader(w.run)
		if err != nil {
			return nil, err
		}
		return func() <-chan struct{} { t.Stop(); return t.Done() }, nil
	}
	startGroup := func() (func() <-chan struct{}, error) {
		t, err := c.Group(group, partitions).RunWhileLeader(func(ctx context.Context, term *simba.Term, _ int) error {
			return w.run(ctx, term)
		})
		if err != nil {
			return nil, err
		}
		return func() <-chan struct{} { t.Stop(); return t.Done() }, nil
	}
	tasks := map[string]*task{election: {start: startElection}, group: {start: startGroup}}
	for _, name := range []string{election, group} {
		if err := tasks[name].restart(); err != nil {
			return fail(err)
		}
	}
	// The commands, until the harness closes stdin (or dies).
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		name, ok := strings.CutPrefix(lines.Text(), cmdStop)
		t := tasks[name]
		if !ok || t == nil {
			return fail(fmt.Errorf("unknown command %q", lines.Text()))
		}
		// As the simulator does: Stop in the middle of a term, and start
		// again once the hand-off is complete.
		stopped := time.Now()
		<-t.stop()
		done := time.Now()
		if err := t.restart(); err != nil {
			return fail(fmt.Errorf("starting %s again after its Stop: %w", name, err))
		}
		out.say(report{Ev: "restarted", Lease: name, Start: stopped, End: done})
	}
	if err := lines.Err(); err != nil {
		return fail(fmt.Errorf("reading commands: %w", err))
	}
	if err := c.Close(); err != nil {
		out.say(report{Ev: "error", Msg: "close: " + err.Error()})
	}
	closed.Store(true)
	if err := b.Close(); err != nil {
		out.say(report{Ev: "error", Msg: "backend close: " + err.Error()})
	}
	w.close()
	out.say(report{Ev: "closed"})
	if err := goleak.Find(baseline); err != nil {
		out.say(report{Ev: "leak", Msg: err.Error()})
	}
	return 0
}

// task is the election or the group of a client, which a stop command
// stops and starts again.
type task struct {
	start func() (stop func() <-chan struct{}, err error)
	stop  func() <-chan struct{} // of the running task: Stop, which returns Done
}

func (t *task) restart() (err error) {
	t.stop, err = t.start()
	return err
}

// openBackend returns the backend the environment names; lag is the
// leader lag of a ZooKeeper ensemble.
func openBackend(lag time.Duration) (backend.Backend, error) {
	endpoints := strings.Split(os.Getenv(envEndpoints), ",")
	space := os.Getenv(envSpace)
	switch kind := os.Getenv(envBackend); kind {
	case backendEtcd:
		return etcd.New(endpoints, etcd.WithPrefix(space))
	case backendZooKeeper:
		return zookeeper.New(endpoints, zookeeper.WithRoot(space), zookeeper.WithLeaderLag(lag))
	case backendPostgres:
		// The one endpoint is the DSN, through the client's proxy.
		return postgres.New(endpoints[0], postgres.WithSchema(space))
	case backendMySQL:
		// The one endpoint is the DSN, through the client's proxy, as the
		// client's own user.
		return mysql.New(endpoints[0], mysql.WithTablePrefix(space))
	case backendKubernetes:
		// The one endpoint is the client's proxy to the API server.
		cfg, err := kubeConfig(endpoints[0], os.Getenv(envKube))
		if err != nil {
			return nil, err
		}
		return kubernetes.New(cfg, kubernetes.WithNamespace(space))
	default:
		return nil, fmt.Errorf("%s=%q: unknown backend", envBackend, kind)
	}
}

// writer is the task of every term: it writes the term's token to the
// register while the term is valid, then reports how the term ended.
// It asks whether the term is valid through a check.Observer, and reports
// every answer that let it go on, and the instant its run returned: what
// check.Observed and check.HandOffOrder compare with the grants the
// harness sees on the servers.
type writer struct {
	url  string
	node string
	seed uint64
	out  *reporter
	http *http.Client
}

func newWriter(register, node string, seed uint64, out *reporter) *writer {
	return &writer{url: register, node: node, seed: seed, out: out,
		http: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}}
}

// guard is what a run asks before each step of its work.
type guard int

const (
	guardValid  guard = iota // term.Valid(), as the SPEC's example does
	guardEnsure              // term.EnsureValid(step), as schedules do
	guardCtx                 // the run's ctx: not cancelled yet
)

func (w *writer) run(ctx context.Context, term *simba.Term) error {
	name, token := term.Name(), term.Token()
	w.out.say(report{Ev: "start", Lease: name, Token: token, Start: term.Start()})
	// The end is reported as soon as the term is revoked, not once the run
	// has noticed: the harness may kill this process just after a pause,
	// and a term whose end was never reported counts as valid until the
	// kill (checkTerms).
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		<-term.Revoked()
		why := "?"
		if err := term.EnsureValid(); err != nil {
			var te *simba.TermError
			if errors.As(err, &te) {
				why = te.Reason.String()
			} else {
				why = err.Error()
			}
		}
		w.out.say(report{Ev: "end", Lease: name, Token: token, Start: term.Start(), End: term.Deadline(), Msg: why})
	}()
	h := fnv.New64a()
	h.Write([]byte(w.node + "/" + name))
	r := rand.New(rand.NewPCG(w.seed^h.Sum64(), token))
	// The election's task loops while term.Valid(); a partition's task
	// guards its steps with one of the three, chosen for the term.
	g := guardValid
	if name != election {
		g = [...]guard{guardValid, guardValid, guardEnsure, guardCtx}[r.IntN(4)]
	}
	// One observer per run: t records the horizon its Deadline promised,
	// and the observer's clock the instant each question was asked.
	t := &tap{Term: term}
	var asked, horizon time.Time
	o := &check.Observer{Now: func() time.Time { asked = time.Now(); return asked }}
	for {
		step := minWork + time.Duration(r.Int64N(int64(maxWork-minWork+1)))
		if !w.ask(ctx, o, t, g, step, &asked, &horizon) {
			break
		}
		time.Sleep(step) // work that does not watch the term
		w.write(name, token)
	}
	if ctx.Err() != nil {
		time.Sleep(cleanup)
	}
	<-ended
	o.Exited(w.node, t) // the run's last act
	for _, e := range o.Exits() {
		// The horizon of the Valid and EnsureValid answers only, not the
		// observer's, which counts a live ctx as a promise (see ask).
		w.out.say(report{Ev: "exit", Lease: name, Token: token, At: e.At, Until: horizon})
	}
	return nil
}

// ask asks the guard through o and reports the answer if it lets the run go
// on, as o recorded it: at the instant asked (the observer's clock), valid
// until the horizon promised (for Valid, the Deadline o samples with it, if
// later than the question). It moves horizon to the latest instant Valid
// or EnsureValid promised.
//
// A live ctx is reported, but is no promise: the library cancels it from
// a timer at the term's end, and a process that resumes after a pause
// (SIGSTOP) past its deadline runs its tasks before that timer's function
// has run; Valid and EnsureValid read the clock and are already false.
func (w *writer) ask(ctx context.Context, o *check.Observer, t *tap, g guard, step time.Duration, asked, horizon *time.Time) bool {
	rep := report{Ev: "obs", Lease: t.Name(), Token: t.Token()}
	switch g {
	case guardValid:
		t.deadline = time.Time{}
		if !o.Valid(w.node, t) {
			return false
		}
		rep.What, rep.At, rep.Until = "Valid", *asked, *asked
		if t.deadline.After(*asked) {
			rep.Until = t.deadline
		}
	case guardEnsure:
		if o.EnsureValid(w.node, t, step) != nil {
			return false
		}
		rep.What, rep.At, rep.Until = fmt.Sprintf("EnsureValid(%v)", step), *asked, asked.Add(step)
	case guardCtx:
		if !o.Live(w.node, t, ctx) {
			return false
		}
		rep.What, rep.At = "ctx", *asked
		w.out.say(rep)
		return true
	}
	if rep.Until.After(*horizon) {
		*horizon = rep.Until
	}
	w.out.say(rep)
	return true
}

// tap is a term as the observer sees it, keeping the last horizon its
// Deadline answered.
type tap struct {
	*simba.Term
	deadline time.Time
}

func (t *tap) Deadline() time.Time {
	t.deadline = t.Term.Deadline()
	return t.deadline
}

// write sends one write to the register; whether it was accepted is the
// register's record, not the writer's concern.
func (w *writer) write(lease string, token uint64) {
	q := url.Values{"lease": {lease}, "token": {strconv.FormatUint(token, 10)}, "node": {w.node}}
	resp, err := w.http.Post(w.url+"?"+q.Encode(), "text/plain", nil)
	if err != nil {
		return // the register is gone (the run ends) or slow: the next write tries again
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

func (w *writer) close() { w.http.CloseIdleConnections() }

// overstated is a backend whose sessions claim a TTL longer than the one
// granted by extra: a planted bug.
type overstated struct {
	backend.Backend
	extra time.Duration
}

func (o overstated) Open(ctx context.Context, opts backend.SessionOptions) (backend.Session, error) {
	s, err := o.Backend.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	return overstatedSession{s, o.extra}, nil
}

type overstatedSession struct {
	backend.Session
	extra time.Duration
}

func (s overstatedSession) TTL() time.Duration { return s.Session.TTL() + s.extra }

func (s overstatedSession) KeepAlive(ctx context.Context) (time.Duration, error) {
	ttl, err := s.Session.KeepAlive(ctx)
	return ttl + s.extra, err
}
