package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
)

// exitStatus is a command's exit status as an error, with the method
// ExitCode() int whose code the run history records.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitStatus) ExitCode() int { return int(e) }

// TestRunsShowTheirExitStatus runs a job whose runs end as commands do
// (exit 0, then exit 3 from a real process) and checks that the jobs page
// and the job's page show the exit status of its runs and of its last run.
func TestRunsShowTheirExitStatus(t *testing.T) {
	exit3 := exec.Command("sh", "-c", "exit 3").Run() // before the bubble
	var ee *exec.ExitError
	require.ErrorAs(t, exit3, &ee)
	require.Equal(t, 3, ee.ExitCode())
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		c, err := simba.New(b.Node("a"), simba.WithMemberID("a"), simba.WithTTL(nodeTTL))
		require.NoError(t, err)
		var n atomic.Int32
		_, err = c.Election("build").Schedule(simba.FixedRate(time.Second), func(ctx context.Context, term *simba.Term) error {
			switch n.Add(1) {
			case 1:
				return exitStatus(0)
			case 2:
				return exit3
			case 3:
				return errors.New("no command ran")
			}
			<-ctx.Done() // nothing more to check: hold until closed
			return nil
		})
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()
		time.Sleep(1500 * time.Millisecond) // runs at 0s and 1s; the next at 2s
		s, _, done := openConsole(t, b, WithReadOnly(true))
		defer done()

		lastRun := regexp.MustCompile(`<dt>Last run</dt><dd><span class="result failed">failed</span> <span class="exit">exit 3</span> <span class="source normal">`)
		for _, path := range []string{"/jobs", "/jobs/build"} {
			w := get(s, path)
			require.Equal(t, http.StatusOK, w.Code, path)
			page := w.Body.String()
			assert.Regexp(t, lastRun, page, "%s: the last run's exit status", path)
			assert.Regexp(t, `<tr data-seq="1" data-source="normal" data-result="succeeded"[^>]*>\s*<td class="num">1</td>\s*<td>.*</td>\s*<td>.*</td>\s*<td><span class="result succeeded">succeeded</span> <span class="exit">exit 0</span></td>`,
				page, "%s: run 1, exit 0", path)
			assert.Regexp(t, `<td><span class="result failed">failed</span> <span class="exit">exit 3</span> <span class="run-error">exit status 3</span></td>`,
				page, "%s: run 2, exit 3", path)
		}

		// A run without an exit status shows none.
		time.Sleep(time.Second)
		page := get(s, "/jobs/build").Body.String()
		assert.Regexp(t, `<dt>Last run</dt><dd><span class="result failed">failed</span> <span class="source normal">`, page, "run 3 reported no exit status")
		assert.Regexp(t, `<td><span class="result failed">failed</span> <span class="run-error">no command ran</span></td>`, page)
	})
}
