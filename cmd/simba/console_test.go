package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestConsoleCommandServesAndStops(t *testing.T) {
	b := memory.New()
	defer b.Close()
	var out, errb lockedBuffer
	c := &cli{
		stdout: &out, stderr: &errb,
		getenv: func(k string) string {
			if k == envEtcd {
				return "memory:2379"
			}
			return ""
		},
		open: func(target) (backend.Backend, error) { return b.Node("console"), nil },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- c.run(ctx, []string{"console", "--listen", "127.0.0.1:0"}) }()

	var url, token string
	addr := regexp.MustCompile(`http://(\S+)/`)
	tok := regexp.MustCompile(`this token .*: (\S+)`)
	for deadline := time.Now().Add(10 * time.Second); url == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := addr.FindStringSubmatch(out.String()); m != nil {
			url = "http://" + m[1]
		}
		if m := tok.FindStringSubmatch(out.String()); m != nil {
			token = m[1]
		}
	}
	if url == "" || token == "" {
		cancel()
		t.Fatalf("no address or token printed:\n%s\n%s", out.String(), errb.String())
	}
	resp, err := http.Get(url + "/elections")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "<html") {
		t.Errorf("GET /elections: %d\n%s", resp.StatusCode, body)
	}
	// An operation without the token is refused.
	req, _ := http.NewRequest(http.MethodPost, url+"/api/ops/disable", strings.NewReader(`{"target":"x"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("operation without the token: %d, want 401", resp.StatusCode)
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("exit %d after Ctrl-C, want %d (stopped cleanly)\n%s", code, exitOK, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the console did not stop")
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestConsoleCommandRefusesAWeakToken(t *testing.T) {
	b := memory.New()
	defer b.Close()
	h := newHarness(t, b)
	r := h.run("console", "--listen", "127.0.0.1:0", "--token", "short")
	requireCode(t, r, exitUsage, fmt.Sprintf("at least %d characters", 16))
}
