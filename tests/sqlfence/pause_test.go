package sqlfence_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/internal/fencetest"
)

// Environment of the helper process.
const (
	helperEnv          = "SIMBA_FENCE_HELPER"
	helperEndpointsEnv = "SIMBA_FENCE_ENDPOINTS"
	helperPrefixEnv    = "SIMBA_FENCE_PREFIX"
	helperDBEnv        = "SIMBA_FENCE_DB"
	helperTableEnv     = "SIMBA_FENCE_TABLE"
)

// pauseTTL is the session TTL of both leaders.
const pauseTTL = time.Second

// pauseElection is the election both leaders contend for, and the fenced
// resource.
const pauseElection = "ledger"

// leaderWrite writes value to row id of table in one transaction, fenced
// with token when fenced, and returns "accepted", "stale highest=<token>"
// or "error <error>".
func leaderWrite(ctx context.Context, d *sqlDB, table string, id int, value string, token uint64, fenced bool) string {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return "error " + err.Error()
	}
	defer tx.Rollback()
	if fenced {
		var se *fence.StaleError
		if err := d.fence.Check(ctx, tx, pauseElection, token); errors.As(err, &se) {
			return fmt.Sprintf("stale highest=%d", se.Highest)
		} else if err != nil {
			return "error " + err.Error()
		}
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+table+" SET value = ?1 WHERE id = ?2", value, id); err != nil {
		return "error " + err.Error()
	}
	if err := tx.Commit(); err != nil {
		return "error " + err.Error()
	}
	return "accepted"
}

// TestHelperProcess is a simba leader in a process of its own, started by
// TestPausedLeader. In its first term it writes row 1 of the SQLite
// database through the fence, prints "elected <token>", "write <token>
// <result>" and "waiting", and waits for a line on stdin: the moment a
// write of its had passed its checks and was about to go out. Then it
// makes that write, with its term's token, to row 1 through the fence and
// to row 2 without it, and prints "late-write <token> <result> valid=<is its
// term still valid>" and "late-unfenced <token> <result>".
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("run by TestPausedLeader")
	}
	say := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	fail := func(err error) {
		say("error %v", err)
		os.Exit(2)
	}
	d := sqliteAt(t, os.Getenv(helperDBEnv), "immediate")
	table := os.Getenv(helperTableEnv)
	b, err := etcd.New(strings.Split(os.Getenv(helperEndpointsEnv), ","), etcd.WithPrefix(os.Getenv(helperPrefixEnv)))
	if err != nil {
		fail(err)
	}
	c, err := simba.New(b, simba.WithTTL(pauseTTL))
	if err != nil {
		fail(err)
	}
	resume := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		close(resume)
	}()
	_, err = c.Election(pauseElection).RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		tok := term.Token()
		say("elected %d", tok)
		say("write %d %s", tok, leaderWrite(ctx, d, table, 1, fmt.Sprintf("child-%d", tok), tok, true))
		say("waiting")
		<-resume
		// The write was under way before the pause: it does not look at
		// the term again, nor at ctx.
		late := leaderWrite(context.Background(), d, table, 1, fmt.Sprintf("child-late-%d", tok), tok, true)
		say("late-write %d %s valid=%v", tok, late, term.Valid())
		say("late-unfenced %d %s", tok, leaderWrite(context.Background(), d, table, 2, fmt.Sprintf("child-late-%d", tok), tok, false))
		<-ctx.Done()
		return nil
	})
	if err != nil {
		fail(err)
	}
	time.Sleep(time.Hour) // until killed
}

// TestPausedLeader is the end-to-end test: a leader, a process of its own on
// the embedded etcd, is paused with SIGSTOP while about to write, for longer
// than its term; a new leader is elected and writes through the fence;
// when the old one resumes, its write reaches the database and the fence
// rejects it. The same write without the fence (row 2) overwrites the new
// leader's: the negative control.
func TestPausedLeader(t *testing.T) {
	srv := etcdtest.Start(t)
	path := filepath.Join(t.TempDir(), "ledger.db")
	d := sqliteAt(t, path, "immediate")
	ctx := fencetest.Ctx(t)
	table := d.table
	if _, err := d.db.ExecContext(ctx, "CREATE TABLE "+table+" (id INTEGER PRIMARY KEY, value TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.db.ExecContext(ctx, "INSERT INTO "+table+" (id, value) VALUES (1, ''), (2, '')"); err != nil {
		t.Fatal(err)
	}
	prefix := "/pause/"

	child := startLeaderProcess(t, srv.Endpoints(), prefix, path, table)
	childToken := lineToken(t, child.await(t, "elected"))
	if line := child.await(t, "write"); line != fmt.Sprintf("write %d accepted", childToken) {
		t.Fatalf("the first leader's write: %q", line)
	}
	child.await(t, "waiting")

	b, err := etcd.New(srv.Endpoints(), etcd.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c, err := simba.New(b, simba.WithTTL(pauseTTL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	wrote := make(chan uint64, 1)
	_, err = c.Election(pauseElection).RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		tok := term.Token()
		for id := 1; id <= 2; id++ {
			if r := leaderWrite(ctx, d, table, id, fmt.Sprintf("parent-%d", tok), tok, id == 1); r != "accepted" {
				t.Errorf("the new leader's write of row %d with token %d: %s", id, tok, r)
			}
		}
		wrote <- tok
		<-ctx.Done()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if err := child.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	var parentToken uint64
	select {
	case parentToken = <-wrote:
	case <-time.After(fencetest.OpTimeout):
		t.Fatal("no new leader while the first one was paused")
	}
	t.Logf("the new leader wrote with token %d, %v after SIGSTOP of the leader with token %d",
		parentToken, time.Since(stopped).Round(time.Millisecond), childToken)
	if parentToken <= childToken {
		t.Fatalf("the new leader's token %d is not above the paused leader's %d", parentToken, childToken)
	}

	if err := child.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(child.stdin, "write\n"); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("late-write %d stale highest=%d valid=false", childToken, parentToken)
	if line := child.await(t, "late-write"); line != want {
		t.Errorf("the resumed leader's fenced write: %q, want %q", line, want)
	}
	if line := child.await(t, "late-unfenced"); line != fmt.Sprintf("late-unfenced %d accepted", childToken) {
		t.Errorf("the resumed leader's unfenced write: %q, want it accepted", line)
	}

	values := map[int]string{}
	rows, err := d.db.QueryContext(ctx, "SELECT id, value FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int
		var v string
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		values[id] = v
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("parent-%d", parentToken); values[1] != want {
		t.Errorf("fenced row: %q, want the new leader's %q", values[1], want)
	}
	if want := fmt.Sprintf("child-late-%d", childToken); values[2] != want {
		t.Errorf("unfenced row (negative control): %q, want the paused leader's late %q", values[2], want)
	}
	if tok, _, err := d.fence.Highest(ctx, d.db, pauseElection); err != nil || tok != parentToken {
		t.Errorf("the recorded token: %d (%v), want %d", tok, err, parentToken)
	}
	t.Logf("after SIGCONT: the fence rejected the paused leader's write (token %d < %d); without the fence it overwrote the new leader's row",
		childToken, parentToken)
}

// leaderProcess is a running TestHelperProcess.
type leaderProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
}

// startLeaderProcess starts TestHelperProcess in a process of its own; it
// is killed when the test ends.
func startLeaderProcess(t *testing.T, endpoints []string, prefix, db, table string) *leaderProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		helperEnv+"=1",
		helperEndpointsEnv+"="+strings.Join(endpoints, ","),
		helperPrefixEnv+"="+prefix,
		helperDBEnv+"="+db,
		helperTableEnv+"="+table,
	)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &leaderProcess{cmd: cmd, stdin: stdin, lines: make(chan string, 64), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-p.done
		_ = cmd.Wait()
	})
	return p
}

// await returns the next line starting with prefix, skipping others.
func (p *leaderProcess) await(t *testing.T, prefix string) string {
	t.Helper()
	timer := time.NewTimer(fencetest.OpTimeout)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("the leader process exited before printing %q", prefix)
			}
			if strings.HasPrefix(line, "error") {
				t.Fatalf("the leader process: %s", line)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timer.C:
			t.Fatalf("the leader process did not print %q within %v", prefix, fencetest.OpTimeout)
		}
	}
}

// lineToken parses the token of a line "<word> <token> ...".
func lineToken(t *testing.T, line string) uint64 {
	t.Helper()
	f := strings.Fields(line)
	if len(f) < 2 {
		t.Fatalf("malformed line %q", line)
	}
	tok, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatalf("malformed line %q: %v", line, err)
	}
	return tok
}
