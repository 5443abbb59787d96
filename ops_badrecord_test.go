package simba_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
)

// TestBadRecordOpsAreNotInForceAtATermsStart: an operation record that
// cannot be decoded is not in force, neither for the operations watch nor
// for the read a node makes when it has just won a lease. A garbage
// ops/disabled/report (or ops/drain/a) left by a foreign writer used to
// disable report on the node that had just won it, from its key alone,
// until the next change of the operations; the watch, which decodes every
// record, had skipped it, and admin shows it as a problem, not in force.
func TestBadRecordOpsAreNotInForceAtATermsStart(t *testing.T) {
	for _, key := range []string{"ops/disabled/report", "ops/drain/a"} {
		t.Run(key, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				plantOp(t, b, key, "garbage")

				var mu sync.Mutex
				var revoked []simba.Revoked
				var terms int
				c, err := simba.New(b.Node("a"), simba.WithTTL(3*time.Second), simba.WithMemberID("a"),
					simba.WithEventHandler(func(e simba.Event) {
						if r, ok := e.(simba.Revoked); ok {
							mu.Lock()
							revoked = append(revoked, r)
							mu.Unlock()
						}
					}))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				_, err = c.Election("report").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
					mu.Lock()
					terms++
					mu.Unlock()
					<-ctx.Done()
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				// Less than the operations watch's safety-net re-read (five
				// TTLs), which would have undone the wrong disable.
				time.Sleep(10 * time.Second)
				synctest.Wait()

				mu.Lock()
				defer mu.Unlock()
				if len(revoked) != 0 || terms != 1 {
					t.Errorf("with %s = garbage: %d terms, revoked %+v; want one term, never revoked", key, terms, revoked)
				}
				if holder, _, ok := b.Holder("report"); !ok || holder == "" {
					t.Errorf("report is not held")
				}
			})
		})
	}
}

// TestBadRecordOpBesideAGoodOne: a garbage operation record does not hide a
// good one beside it: a disable that decodes still stops the election (a
// term won before the node has read the operations ends at once, and none
// follows).
func TestBadRecordOpBesideAGoodOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		plantOp(t, b, "ops/disabled/other", "garbage")
		plantOp(t, b, "ops/disabled/report", `{"by":"alice"}`)
		c, err := simba.New(b.Node("a"), simba.WithTTL(3*time.Second), simba.WithMemberID("a"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var mu sync.Mutex
		var terms int
		_, err = c.Election("report").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			mu.Lock()
			terms++
			mu.Unlock()
			<-ctx.Done()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if _, _, ok := b.Holder("report"); ok || terms > 1 {
			t.Errorf("report disabled: held %v after %d terms; want not held, at most one term", ok, terms)
		}
	})
}

// plantOp writes value at key through a session of its own, as a foreign
// writer could.
func plantOp(t *testing.T, b *memory.Backend, key, value string) {
	t.Helper()
	s, err := b.Node("writer").Open(t.Context(), backend.SessionOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.(backend.Records).PutRecord(t.Context(), key, []byte(value), backend.Condition{}); err != nil {
		t.Fatalf("planting %s: %v", key, err)
	}
}

// malformedSession is a session whose status records read back as
// malformed, as a foreign writer's garbage does on etcd.
type malformedSession struct {
	backend.Session
	backend.Records
	reads *atomic.Int32
}

func (s malformedSession) GetRecord(ctx context.Context, key string) (backend.Record, error) {
	if strings.HasPrefix(key, "status/") {
		s.reads.Add(1)
		return backend.Record{}, fmt.Errorf("get record %q: %w", key, &backend.MalformedError{Key: key, Reason: "garbage"})
	}
	return s.Records.GetRecord(ctx, key)
}

// TestMalformedStatusIsNotReadAgain: a status record that cannot be read
// as one is read once, not retried for three renewal periods while the
// schedule's first run waits; the term starts afresh.
func TestMalformedStatusIsNotReadAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		var reads atomic.Int32
		c, err := simba.New(wrapSessions{b.Node("a"), func(s backend.Session) backend.Session {
			return malformedSession{Session: s, Records: s.(backend.Records), reads: &reads}
		}}, simba.WithTTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ran := make(chan time.Time, 1)
		_, err = c.Election("report").Schedule(simba.FixedRate(time.Hour), func(ctx context.Context, term *simba.Term) error {
			select {
			case ran <- time.Now():
			default:
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-ran:
			if d := at.Sub(start); d > time.Second {
				t.Errorf("the first run waited %v for the status read", d)
			}
		case <-time.After(time.Minute):
			t.Fatal("the schedule never ran within a minute")
		}
		if n := reads.Load(); n != 1 {
			t.Errorf("the malformed status record was read %d times, want 1", n)
		}
		c.Close()
	})
}
