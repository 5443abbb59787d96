package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
)

// Two nodes contend for one lease. The holder crashes without releasing it;
// the other node takes over once the crashed node's session has expired on
// the server, with a larger token.
func Example() {
	srv := memory.New()
	defer srv.Close()
	ctx := context.Background()

	opened := time.Now()
	a, _ := srv.Node("a").Open(ctx, backend.SessionOptions{TTL: 50 * time.Millisecond})
	b, _ := srv.Node("b").Open(ctx, backend.SessionOptions{TTL: time.Minute})

	la, _ := a.Acquire(ctx, "ingest")
	fmt.Println(a.ID(), "holds", la.Name(), "with token", la.Token())

	srv.Node("a").Crash()
	_, err := a.KeepAlive(ctx)
	fmt.Println("a after the crash:", err)

	lb, _ := b.Acquire(ctx, "ingest") // waits for a's session to expire
	fmt.Println(b.ID(), "holds", lb.Name(), "with token", lb.Token())
	fmt.Println("a's TTL had passed:", time.Since(opened) >= 50*time.Millisecond)

	for _, g := range srv.History() {
		fmt.Printf("%s token %d: %s on node %s, ended: %v %s\n", g.Name, g.Token, g.Session, g.Node, g.Ended, g.Reason)
	}
	// Output:
	// a-1 holds ingest with token 1
	// a after the crash: simba/memory: keep-alive through node "a": simba/memory: node crashed
	// b-1 holds ingest with token 2
	// a's TTL had passed: true
	// ingest token 1: a-1 on node a, ended: true expired
	// ingest token 2: b-1 on node b, ended: false
}

// A partitioned node does not hear that its session expired until the
// partition heals.
func ExampleNode_Partition() {
	srv := memory.New()
	defer srv.Close()
	ctx := context.Background()

	na := srv.Node("a")
	a, _ := na.Open(ctx, backend.SessionOptions{TTL: 50 * time.Millisecond})
	b, _ := srv.Node("b").Open(ctx, backend.SessionOptions{TTL: time.Minute})
	la, _ := a.Acquire(ctx, "report")

	na.Partition()
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	_, err := a.KeepAlive(short)
	cancel()
	fmt.Println("renewal while partitioned:", err)

	lb, _ := b.Acquire(ctx, "report") // a's session expires on the server
	fmt.Println("b holds the lease with token", lb.Token())
	select {
	case <-la.Lost():
		fmt.Println("a knows it lost the lease")
	default:
		fmt.Println("a has not heard yet")
	}

	na.Heal()
	<-la.Lost()
	<-a.Done()
	fmt.Println("after Heal, a knows it lost the lease and its session")
	// Output:
	// renewal while partitioned: simba/memory: keep-alive: context deadline exceeded
	// b holds the lease with token 2
	// a has not heard yet
	// after Heal, a knows it lost the lease and its session
}

// The server may grant another TTL than the one requested.
func ExampleWithTTLBounds() {
	srv, err := memory.NewWithOptions(memory.WithTTLBounds(time.Second, time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	s, _ := srv.Open(context.Background(), backend.SessionOptions{TTL: 100 * time.Millisecond})
	fmt.Println("granted:", s.TTL())
	// Output:
	// granted: 1s
}

// Link delays: the request reaches the server late, and a caller that gives
// up while the reply is on its way is told Acquire failed; the grant is then
// undone.
func ExampleNode_SetDelay() {
	srv := memory.New()
	defer srv.Close()
	ctx := context.Background()
	n := srv.Node("slow")
	s, _ := n.Open(ctx, backend.SessionOptions{TTL: time.Minute})

	n.SetDelay(0, time.Hour)
	giveUp, cancel := context.WithCancel(ctx)
	go func() { // the caller gives up once the server has granted the lease
		for {
			if _, _, held := srv.Holder("x"); held {
				cancel()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	_, err := s.Acquire(giveUp, "x")
	fmt.Println(err)
	_, _, held := srv.Holder("x")
	fmt.Println("held:", held)
	g := srv.History()[0]
	fmt.Println("grant", g.Token, g.Reason)
	// Output:
	// simba/memory: acquire: context canceled
	// held: false
	// grant 1 cancelled
}
