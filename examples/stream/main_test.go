package main

import (
	"strings"
	"testing"
	"testing/synctest"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStreamRunsAndTellsTheStory runs the example in a bubble: virtual
// time, so it takes well under a second.
func TestStreamRunsAndTellsTheStory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out strings.Builder
		if err := run(&out); err != nil {
			t.Log("\n" + out.String())
			t.Fatal(err)
		}
		t.Log("\n" + out.String())
		for _, want := range []string{
			"crashes holding partitions",
			"over at checkpoint",
			"every message of every partition has been processed",
			"every message processed at least once: true",
			"in order per partition, within every one of",
			"checkpoints never moved backwards: true",
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q", want)
			}
		}
	})
}
