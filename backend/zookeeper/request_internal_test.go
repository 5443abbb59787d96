package zookeeper

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// TestRequestNotSentIsKnown: a request that ends while it waits for one of
// the session's slots never runs, and says so (an Acquire then has nothing
// to sweep); one that gets a slot runs and says so.
func TestRequestNotSentIsKnown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &session{ctx: ctx, slots: make(chan struct{}, 1)}
	defer s.calls.Wait()
	ran := false
	f := func(*zk.Conn) (string, error) { ran = true; return "", nil }

	s.slots <- struct{}{} // the only slot is taken
	short, stop := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer stop()
	r := start(s, short, f)
	<-r.done
	if r.sent || ran || r.err == nil {
		t.Errorf("request without a slot: sent %v, ran %v, err %v", r.sent, ran, r.err)
	}

	<-s.slots
	r = start(s, context.Background(), f)
	<-r.done
	if !r.sent || !ran || r.err != nil {
		t.Errorf("request with a slot: sent %v, ran %v, err %v", r.sent, ran, r.err)
	}
}
