package simba_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
)

// commandErr runs a shell script and returns what os/exec says of its end.
func commandErr(t *testing.T, script string) error {
	t.Helper()
	err := exec.Command("sh", "-c", script).Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "sh -c %q did not end with a non-zero status", script)
	return err
}

func TestRunHistoryRecordsExitCodes(t *testing.T) {
	exit3 := commandErr(t, "exit 3")
	signalled := commandErr(t, "kill -TERM $$")
	require.Equal(t, -1, signalled.(*exec.ExitError).ExitCode(), "a signal ended sh")
	three := 3
	zero := 0
	seven := 7
	for _, tc := range []struct {
		name   string
		ret    error
		result string
		exit   *int
		errMsg string
	}{
		{"exec exit 3", exit3, "failed", &three, "exit status 3"},
		{"wrapped exec exit 3", fmt.Errorf("report: %w", exit3), "failed", &three, "report: exit status 3"},
		{"joined exec exit 3", errors.Join(errors.New("upload failed"), exit3), "failed", &three, "upload failed\nexit status 3"},
		{"killed by a signal", signalled, "failed", nil, "signal: terminated"},
		{"plain error", errors.New("no"), "failed", nil, "no"},
		{"nil", nil, "succeeded", nil, ""},
		// Any error with a method ExitCode() int counts, exitStatus (of
		// example_test.go) as well as os/exec's: a code of 0 is a success,
		// wrapped or not.
		{"exit code 0", exitStatus(0), "succeeded", &zero, ""},
		{"wrapped exit code 0", fmt.Errorf("upload: %w", exitStatus(0)), "succeeded", &zero, ""},
		{"exit code 7", exitStatus(7), "failed", &seven, "exit status 7"},
		// Joined with a failure, a code of 0 is not a success, and not
		// recorded.
		{"joined exit code 0", errors.Join(errors.New("upload failed"), exitStatus(0)), "failed", nil, "upload failed\nexit status 0"},
		{"exit code -1", exitStatus(-1), "failed", nil, "exit status -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				h := newHistory()
				c, _ := node(t, b, "a", h, simba.WithMemberID("a"))
				_, err := c.Election("report").Schedule(simba.FixedRate(time.Minute), func(ctx context.Context, term *simba.Term) error {
					return tc.ret
				})
				require.NoError(t, err)
				time.Sleep(time.Second) // one run, at once
				synctest.Wait()
				a := openAdmin(t, b)
				runs, err := a.History(t.Context(), "report")
				require.NoError(t, err)
				require.Len(t, runs, 1, "one run in the first second of a schedule of one a minute")
				run := runs[0]
				assert.Equal(t, tc.result, run.Result)
				assert.Equal(t, tc.errMsg, run.Error)
				if tc.exit == nil {
					assert.Nil(t, run.ExitCode, "no exit status recorded")
				} else if assert.NotNil(t, run.ExitCode, "the exit status recorded") {
					assert.Equal(t, *tc.exit, *run.ExitCode)
				}
				st, err := a.Status(t.Context(), "report")
				require.NoError(t, err)
				require.NotNil(t, st.LastRun)
				assert.Equal(t, run, *st.LastRun, "the status's last run is the history's")
				if tc.result == "succeeded" {
					assert.Equal(t, uint64(1), st.Succeeded)
				} else {
					assert.Equal(t, uint64(1), st.Failed)
				}
				var done []simba.WorkCompleted
				for _, e := range h.Events() {
					if w, ok := e.(simba.WorkCompleted); ok {
						done = append(done, w)
					}
				}
				require.Len(t, done, 1)
				if tc.result == "succeeded" {
					assert.Equal(t, simba.ResultSucceeded, done[0].Result)
					assert.NoError(t, done[0].Err, "exit code 0 is published as a nil error")
				} else {
					assert.Equal(t, simba.ResultFailed, done[0].Result)
					assert.Equal(t, tc.ret, done[0].Err)
				}
				closeAll(t, c)
			})
		})
	}
}

// A command that ends with a status after its term ended is cancelled, as
// any error then is, with its exit status recorded.
func TestRunHistoryExitCodeOfACancelledRun(t *testing.T) {
	exit3 := commandErr(t, "exit 3")
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h, simba.WithMemberID("a"))
		task, err := c.Election("ingest").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			<-ctx.Done()
			return exit3
		})
		require.NoError(t, err)
		synctest.Wait()
		task.Stop()
		await.For(t, task.Done(), testTTL, "the task's Stop did not complete within the TTL")
		a := openAdmin(t, b)
		runs, err := a.History(t.Context(), "ingest")
		require.NoError(t, err)
		require.Len(t, runs, 1)
		assert.Equal(t, "cancelled", runs[0].Result)
		require.NotNil(t, runs[0].ExitCode)
		assert.Equal(t, 3, *runs[0].ExitCode)
		closeAll(t, c)
	})
}

// A run that ignores the cancellation until the hand-off at the term's
// deadline is recorded as interrupted by the hand-off: the next holder
// sees no fail-over, and the run can record nothing later.
func TestRunHandedOffAtTheDeadlineIsRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h, simba.WithMemberID("a"))
		z, _ := node(t, b, "z", h, simba.WithMemberID("z"))
		task, err := c.Election("ingest").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			time.Sleep(time.Minute) // ignores ctx
			return nil
		})
		require.NoError(t, err)
		synctest.Wait()
		_, err = z.Election("ingest").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			<-ctx.Done()
			return nil
		})
		require.NoError(t, err)
		task.Stop()
		await.For(t, h.HandedOff(h.Terms()[0]), testTTL, "the task's Stop did not hand off within the TTL")
		synctest.Wait()
		a := openAdmin(t, b)
		runs, err := a.History(t.Context(), "ingest")
		require.NoError(t, err)
		require.NotEmpty(t, runs, "the run handed off at the deadline is not in the history")
		assert.Equal(t, "interrupted", runs[0].Result)
		assert.Equal(t, "a", runs[0].Member)
		assert.Contains(t, runs[0].Error, "handed off at the term's deadline while it ran")
		closeAll(t, c, z)
	})
}
