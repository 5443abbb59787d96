package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestQuickstartRunsAndTellsTheStory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds of real time")
	}
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	for _, want := range []string{
		`alpha won the election "ingest"`,
		"alpha stops its task",
		"took over",
		"crashes",
		"one leader at a time",
		"all nodes closed",
		"rejected 0 stale ones",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
