package simba_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
)

// FuzzElectionName: any name is either started or refused with
// ErrInvalidName, never a panic; the rules are those of the docs.
func FuzzElectionName(f *testing.F) {
	for _, s := range []string{"", "a", "ingest", "billing.15", ".x", "a b", "ä", strings.Repeat("x", 128), strings.Repeat("x", 129), "a\x00b", "A_b-c.9"} {
		f.Add(s)
	}
	b := memory.New()
	defer b.Close()
	c, err := simba.New(b, simba.WithTTL(time.Minute))
	if err != nil {
		f.Fatal(err)
	}
	defer c.Close()
	noop := func(context.Context, *simba.Term) error { return nil }
	f.Fuzz(func(t *testing.T, name string) {
		task, err := c.Election(name).RunWhileLeader(noop)
		want := validName(name)
		switch {
		case err == nil && want:
			task.Close()
		case errors.Is(err, backend.ErrInvalidName) && !want:
		default:
			t.Fatalf("name %q: valid by the rules %v, got error %v", name, want, err)
		}
	})
}

// validName restates the naming rule independently of the library.
func validName(s string) bool {
	if len(s) < 1 || len(s) > 128 {
		return false
	}
	for i, r := range []byte(s) {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || !strings.ContainsRune("._-", rune(r))) {
			return false
		}
	}
	return true
}

// FuzzCron: any expression is either a valid schedule or refused with
// ErrInvalidSchedule, never a panic; a valid one always has a next start.
func FuzzCron(f *testing.F) {
	for _, s := range []string{"", "* * * * *", "*/10 * * * * *", "0 3 * * *", "CRON_TZ=Asia/Shanghai 30 8 * * *",
		"TZ=UTC @hourly", "@every 5m", "@every 0s", "@every 1.5s", "61 * * * *", "0 0 31 2 *", "CRON_TZ=", "TZ=x", "@", "1-0 * * * *", "*/0 * * * *"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		s := simba.Cron(expr)
		if err := s.Err(); err != nil {
			if !errors.Is(err, simba.ErrInvalidSchedule) {
				t.Fatalf("%q: error %v does not match ErrInvalidSchedule", expr, err)
			}
			return
		}
		_ = s.String()
	})
}

// FuzzDurations: schedules from any durations are valid exactly when the
// rules say so.
func FuzzDurations(f *testing.F) {
	f.Add(int64(time.Second), int64(0))
	f.Add(int64(0), int64(-1))
	f.Add(int64(-1), int64(time.Hour))
	f.Fuzz(func(t *testing.T, period, initial int64) {
		for _, s := range []simba.Schedule{simba.FixedDelay(time.Duration(period)), simba.FixedRate(time.Duration(period))} {
			s = s.WithInitialDelay(time.Duration(initial))
			want := period > 0 && initial >= 0
			if got := s.Err() == nil; got != want {
				t.Fatalf("period %d initial %d: valid %v, want %v (%v)", period, initial, got, want, s.Err())
			}
		}
	})
}
