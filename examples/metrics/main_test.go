package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/plant"
)

// TestMain plants the bug named by $SIMBA_PLANT (see internal/plant) for the
// whole run, if any, and checks for leaked goroutines after the tests.
func TestMain(m *testing.M) {
	plant.ForRun()
	goleak.VerifyTestMain(m)
}

func TestMetricsEndpointAfterAHandOff(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for a second of real time")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	handedOff := make(chan struct{})
	done := make(chan error, 1)
	var out strings.Builder
	go func() { done <- serve(ctx, &out, ln, handedOff) }()
	<-handedOff

	base := "http://" + ln.Addr().String()
	ready := get(t, base+"/ready")
	if !strings.Contains(ready, `"state":"live"`) {
		t.Errorf("/ready: %s", ready)
	}
	text := get(t, base+"/metrics")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())

	for _, c := range []struct {
		metric string
		check  func(float64) bool
		want   string
	}{
		{`simba_election_leader{.*simba_election="report".*}`, func(v float64) bool { return v == 0 }, "0 after the hand-off"},
		{`simba_term_started_total{.*simba_election="report".*}`, func(v float64) bool { return v == 1 }, "1"},
		{`simba_term_revoked_total{.*simba_election="report".*simba_reason="stopped".*}`, func(v float64) bool { return v == 1 }, "1"},
		{`simba_run_completed_total{.*simba_election="report".*simba_result="succeeded".*}`, func(v float64) bool { return v >= 3 }, "≥ 3 runs in a second at 200ms"},
		{`simba_run_duration_seconds_count{.*simba_election="report".*}`, func(v float64) bool { return v >= 3 }, "≥ 3"},
		{`simba_handoff_duration_seconds_count{.*simba_election="report".*}`, func(v float64) bool { return v == 1 }, "1"},
		{`simba_session_renewal_duration_seconds_count{.*}`, func(v float64) bool { return v >= 1 }, "≥ 1 renewal"},
		{`simba_session_deadline_headroom_seconds{.*}`, func(v float64) bool { return v > 5.0/3 && v <= 4.5 }, "between TTL/3 and TTL − margin (TTL 5s)"},
	} {
		v, ok := sample(text, c.metric)
		if !ok {
			t.Errorf("no sample %s in:\n%s", c.metric, grep(text, "simba_"))
			continue
		}
		if !c.check(v) {
			t.Errorf("%s = %v, want %s", c.metric, v, c.want)
		}
	}
	for _, forbidden := range []string{"session=", "token=", "member=", "partition="} {
		if strings.Contains(text, forbidden) {
			t.Errorf("high-cardinality attribute %q in the metrics", forbidden)
		}
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sample returns the value of the first line matching the metric pattern.
func sample(text, pattern string) (float64, bool) {
	re := regexp.MustCompile(`(?m)^` + pattern + ` (\S+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

func grep(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
