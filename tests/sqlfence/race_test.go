package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/fence/sqlfence"
	"github.com/simba-go/simba/internal/fencetest"
)

// sqlRegister is one row of a data table, fenced as resource.
type sqlRegister struct {
	d        *sqlDB
	resource string
	id       int
}

// ph returns the n-th placeholder of the dialect.
func ph(d *sqlDB, n int) string {
	if d.fence.Dialect == sqlfence.SQLite {
		return fmt.Sprintf("?%d", n)
	}
	return fmt.Sprintf("$%d", n)
}

// sqlRegisters makes the data table and returns a constructor of
// registers, one row each.
func sqlRegisters(t *testing.T, d *sqlDB) fencetest.NewRegister {
	ctx := fencetest.Ctx(t)
	if _, err := d.db.ExecContext(ctx, "CREATE TABLE "+d.table+" (id INTEGER PRIMARY KEY, value TEXT NOT NULL, version BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	n := 0
	return func(t *testing.T) fencetest.Register {
		n++
		if _, err := d.db.ExecContext(fencetest.Ctx(t), "INSERT INTO "+d.table+" (id, value, version) VALUES ("+ph(d, 1)+", '', 0)", n); err != nil {
			t.Fatal(err)
		}
		return &sqlRegister{d: d, resource: fmt.Sprintf("race-%d", n), id: n}
	}
}

// sqlTxn is one transaction of a write, run step by step: begin, write (the
// fence check, when guarded, and the update), end (commit, or roll back
// after an error).
type sqlTxn struct {
	r       *sqlRegister
	token   uint64
	value   string
	guarded bool

	tx    *sql.Tx
	order int64
	err   error
}

func (x *sqlTxn) begin(ctx context.Context) {
	x.tx, x.err = x.r.d.db.BeginTx(ctx, nil)
}

func (x *sqlTxn) write(ctx context.Context) {
	if x.err != nil {
		return
	}
	if x.guarded {
		if x.err = x.r.d.fence.Check(ctx, x.tx, x.r.resource, x.token); x.err != nil {
			return
		}
	}
	d := x.r.d
	x.err = x.tx.QueryRowContext(ctx, "UPDATE "+d.table+" SET value = "+ph(d, 1)+", version = version + 1 WHERE id = "+ph(d, 2)+" RETURNING version",
		x.value, x.r.id).Scan(&x.order)
}

func (x *sqlTxn) end() {
	if x.tx == nil {
		return
	}
	if x.err != nil {
		if err := x.tx.Rollback(); err != nil && !errors.Is(x.err, fence.ErrStale) {
			x.err = fmt.Errorf("%w (rollback: %v)", x.err, err)
		}
		return
	}
	x.err = x.tx.Commit()
}

func (r *sqlRegister) Write(ctx context.Context, token uint64, value string, guarded bool) (int64, error) {
	x := &sqlTxn{r: r, token: token, value: value, guarded: guarded}
	x.begin(ctx)
	x.write(ctx)
	x.end()
	return x.order, x.err
}

func (r *sqlRegister) Read(ctx context.Context) (string, error) {
	var v string
	err := r.d.db.QueryRowContext(ctx, "SELECT value FROM "+r.d.table+" WHERE id = "+ph(r.d, 1), r.id).Scan(&v)
	return v, err
}

// TestSQLRace is fencetest.Race on SQLite (BEGIN IMMEDIATE and
// BEGIN DEFERRED) and PostgreSQL, plus the overlapping transactions of
// sqlOverlaps.
func TestSQLRace(t *testing.T) {
	for _, c := range []struct {
		name   string
		open   func(t *testing.T) *sqlDB
		rounds int
	}{
		// SQLite is slow under the race detector (it is C translated to
		// Go): fewer rounds.
		{"sqlite-immediate", func(t *testing.T) *sqlDB { return sqliteDB(t, "immediate") }, 12},
		{"sqlite-deferred", func(t *testing.T) *sqlDB { return sqliteDB(t, "deferred") }, 6},
		{"postgres", func(t *testing.T) *sqlDB { return postgresDB(t) }, 30},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := c.open(t)
			regs := sqlRegisters(t, d)
			fencetest.Race(t, regs, c.rounds)
			sqlOverlaps(t, regs)
		})
	}
}

// txStep is one step of one of two transactions: writer 0 is old, 1 new.
type txStep struct {
	writer int
	kind   string // "begin", "write" or "end"
}

// stepOrders returns every interleaving of the steps begin, write, end of
// two transactions.
func stepOrders() [][]txStep {
	var out [][]txStep
	for _, o := range fencetest.Interleavings(3, 3) {
		var steps []txStep
		next := [2]int{}
		for _, w := range o {
			i := 0
			if w == "new" {
				i = 1
			}
			steps = append(steps, txStep{i, []string{"begin", "write", "end"}[next[i]]})
			next[i]++
		}
		out = append(out, steps)
	}
	return out
}

// blockedAfter is how long a step may take before the scheduler takes it
// for blocked (on a lock the other transaction holds) and goes on with the
// other transaction.
const blockedAfter = 20 * time.Millisecond

// sqlOverlaps runs two transactions, old's and new's, step by step in every
// interleaving of their steps, with the fence and without. A step that
// blocks on the other transaction's locks is left waiting and the schedule
// goes on with the other transaction, so the order played may differ from
// the order planned; the checks hold for whatever order was played. Each
// write's start is the start of its write step, so an old write whose step
// began after new committed must be rejected.
func sqlOverlaps(t *testing.T, regs fencetest.NewRegister) {
	orders := stepOrders()
	blocked := 0
	for _, guarded := range []bool{true, false} {
		caught := 0
		for _, order := range orders {
			reg := regs(t).(*sqlRegister)
			rs, b := playSteps(t, reg, order, guarded)
			blocked += b
			fencetest.Failures(t, rs[:])
			final, err := reg.Read(fencetest.Ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			v := fencetest.Violations(rs[:], final)
			if len(v) > 0 {
				caught++
				if guarded {
					t.Errorf("steps %v: %s; writes %v", order, strings.Join(v, "; "), rs)
				}
			}
		}
		if !guarded {
			if caught == 0 {
				t.Error("negative control: without the fence no stale write won in any step order")
			}
			t.Logf("overlapping transactions: %d step orders with the fence and without; without it stale writes won in %d; steps found blocked: %d",
				len(orders), caught, blocked)
		}
	}
}

// playSteps plays order on two transactions and returns their results and
// the number of steps that blocked.
func playSteps(t *testing.T, reg *sqlRegister, order []txStep, guarded bool) ([2]fencetest.Result, int) {
	t.Helper()
	ctx := fencetest.Ctx(t)
	type runner struct {
		x       *sqlTxn
		steps   chan string
		done    chan struct{}
		pending bool
		res     fencetest.Result
	}
	var rn [2]*runner
	for i, w := range []string{"old", "new"} {
		r := &runner{
			x:     &sqlTxn{r: reg, token: fencetest.TokenOf(w), value: w, guarded: guarded},
			steps: make(chan string),
			done:  make(chan struct{}, 1),
			res:   fencetest.Result{Writer: w, Value: w},
		}
		rn[i] = r
		go func() {
			for kind := range r.steps {
				switch kind {
				case "begin":
					r.x.begin(ctx)
				case "write":
					r.res.Start = time.Now()
					r.x.write(ctx)
				case "end":
					r.x.end()
					r.res.End = time.Now()
				}
				r.done <- struct{}{}
			}
		}()
	}
	blocked := 0
	// wait waits for a pending step of r.
	wait := func(r *runner, d time.Duration) bool {
		select {
		case <-r.done:
			r.pending = false
			return true
		case <-time.After(d):
			return false
		}
	}
	queue := append([]txStep(nil), order...)
	for len(queue) > 0 {
		i := 0
		for i < len(queue) && rn[queue[i].writer].pending {
			i++
		}
		if i == len(queue) {
			// Both wait, one for the other's step to end: wait for either.
			select {
			case <-rn[0].done:
				rn[0].pending = false
			case <-rn[1].done:
				rn[1].pending = false
			case <-time.After(fencetest.OpTimeout):
				t.Fatalf("steps %v: both transactions blocked for %v", order, fencetest.OpTimeout)
			}
			continue
		}
		s := queue[i]
		queue = append(queue[:i], queue[i+1:]...)
		r := rn[s.writer]
		r.steps <- s.kind
		r.pending = true
		if !wait(r, blockedAfter) {
			blocked++
		}
	}
	var rs [2]fencetest.Result
	for i, r := range rn {
		if r.pending && !wait(r, fencetest.OpTimeout) {
			t.Fatalf("steps %v: a step did not end within %v", order, fencetest.OpTimeout)
		}
		close(r.steps)
		r.res.Order = r.x.order
		switch {
		case r.x.err == nil:
			r.res.Accepted = true
		case !errors.Is(r.x.err, fence.ErrStale):
			r.res.Err = r.x.err
		}
		rs[i] = r.res
	}
	return rs, blocked
}
