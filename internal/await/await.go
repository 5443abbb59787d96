// Package await bounds the waits of tests: a wait that times out fails
// saying what it waited for, instead of hanging until go test's timeout.
// Inside a testing/synctest bubble the bounds are virtual time, so they
// cost nothing when the wait succeeds and fail fast when it does not. Only
// tests import this package.
package await

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// Within waits at most d for ch to deliver a value or be closed, and
// returns what it delivered. Past d it returns an error: the message given
// (a format and its arguments, saying what did not happen) and how long it
// waited.
func Within[T any](ch <-chan T, d time.Duration, format string, args ...any) (T, error) {
	select {
	case v := <-ch: // already there: no timer to race with
		return v, nil
	default:
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v, nil
	case <-timer.C:
		var zero T
		return zero, fmt.Errorf("%s (waited %v)", fmt.Sprintf(format, args...), d)
	}
}

// For is Within that fails the test, and remembers the failure for
// [Cleanup].
func For[T any](t testing.TB, ch <-chan T, d time.Duration, format string, args ...any) T {
	t.Helper()
	v, err := Within(ch, d, format, args...)
	if err != nil {
		failed.Store(t.Name(), err)
		t.Fatal(err)
	}
	return v
}

// Until polls cond every 10ms (virtual time in a synctest bubble) until it
// holds, and fails the test after d, saying what it waited for and, from
// seen, what it saw then; the failure is remembered for [Cleanup] as For's.
func Until(t testing.TB, d time.Duration, what string, cond func() bool, seen func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if !time.Now().Before(deadline) {
			err := fmt.Errorf("%s: not within %v; saw %s", what, d, seen())
			failed.Store(t.Name(), err)
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failed holds, by test name, the last wait of For that failed: a test
// whose clean-up has to end the test binary (see Cleanup) can no longer
// print its failures, so the panic carries that one.
var failed sync.Map

// Returned runs f on a goroutine of its own and returns a channel that
// delivers its result: a blocking call made into something For can bound.
func Returned(f func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return done
}

// Done runs f on a goroutine of its own and returns a channel closed when
// it returns.
func Done(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	return done
}

// Cleanup waits at most d for ch in a test's clean-up, where what gives up
// can no longer end the test: goroutines that never end keep a synctest
// bubble, and so the test binary, alive for ever. So past d it ends the
// binary with a panic that says what did not happen (what, a format and
// its arguments) and, when a wait of For failed first in t, that one.
func Cleanup[T any](t testing.TB, ch <-chan T, d time.Duration, what string, args ...any) {
	if _, err := Within(ch, d, what, args...); err != nil {
		msg := fmt.Sprintf("%s: %v: its goroutines can never end, and the test's synctest bubble with them", t.Name(), err)
		if first, ok := failed.Load(t.Name()); ok {
			msg += fmt.Sprintf("; the test failed first: %v", first)
		}
		panic(msg)
	}
}

// Buffer is a strings.Builder safe for a writer and a reader on other
// goroutines: a test that bounds a run reads what the run has written so
// far when it did not finish.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
