package zookeeper

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/simba-go/simba/backend/kit/limit"
)

// TestRequestNotSentIsKnown: a request that ends while it waits for one of
// the session's slots never runs, and says so (an Acquire then has nothing
// to sweep); one that gets a slot runs and says so.
func TestRequestNotSentIsKnown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lim, err := limit.New(1)
	if err != nil {
		t.Fatal(err)
	}
	s := &session{ctx: ctx, lim: lim}
	defer s.calls.Wait()
	ran := false
	f := func(*zk.Conn) (string, error) { ran = true; return "", nil }

	if !lim.TryTake() { // the only slot
		t.Fatal("no slot free")
	}
	short, stop := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer stop()
	r := start(s, short, f)
	<-r.done
	if r.sent || ran || !errors.Is(r.err, limit.ErrNotSent) || !errors.Is(r.err, context.DeadlineExceeded) {
		t.Errorf("request without a slot: sent %v, ran %v, err %v", r.sent, ran, r.err)
	}

	lim.Free()
	r = start(s, context.Background(), f)
	<-r.done
	if !r.sent || !ran || r.err != nil {
		t.Errorf("request with a slot: sent %v, ran %v, err %v", r.sent, ran, r.err)
	}
}
