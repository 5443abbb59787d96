package storylog

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestLinesOfTheStory(t *testing.T) {
	var lines []string
	say := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	log := New(say, slog.LevelWarn)
	log.Info("not shown")
	log.With("session", "first-1").Warn("session lost", "err", errors.New("lease expired"), "reason", "deadline")
	log.Error("run failed", "election", "report")
	want := "warning: session lost: lease expired (session=first-1 reason=deadline)\nerror: run failed (election=report)"
	if got := strings.Join(lines, "\n"); got != want {
		t.Errorf("lines:\n%s\nwant:\n%s", got, want)
	}
}
