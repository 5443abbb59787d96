package simba

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
)

// TestCheckMembersDecodesChangedRecords: checkMembers keeps each session's
// decoded record, and decodes it again when the session publishes another
// one (a new view, another partition count); the records of sessions that
// left are dropped.
func TestCheckMembersDecodesChangedRecords(t *testing.T) {
	b := memory.New()
	defer b.Close()
	c, err := New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := &GroupTask{c: c, name: "billing", partitions: 4, own: memberRecord{Partitions: 4, Assignment: AssignRendezvous.String()}, reported: map[string]bool{}}
	member := func(id, session string, partitions int, view string) backend.Member {
		r := memberRecord{Partitions: partitions, Assignment: AssignRendezvous.String(), View: view}
		data, _ := json.Marshal(r) // as GroupTask.record: a memberRecord always encodes
		return backend.Member{ID: id, Session: session, Data: data}
	}
	self := member("a", "s1", 4, "v1")
	steps := []struct {
		peer         backend.Member
		wantView     []string
		wantDisagree bool
	}{
		{member("b", "s2", 4, "v1"), []string{"v1"}, false},
		{member("b", "s2", 4, "v1"), []string{"v1"}, false}, // kept
		{member("b", "s2", 4, "v2"), []string{"v2"}, false}, // a new view
		{member("b", "s2", 8, "v2"), nil, true},             // another count
		{backend.Member{ID: "b", Session: "s2", Data: []byte("{")}, nil, true},
		{member("b", "s2", 4, "v3"), []string{"v3"}, false},
	}
	for i, s := range steps {
		ids, peers, disagree := g.checkMembers("a", []backend.Member{self, s.peer})
		if !slices.Equal(ids, []string{"a", "b"}) || !slices.Equal(peers["b"], s.wantView) || disagree != s.wantDisagree {
			t.Errorf("step %d: ids %v, b's views %v, disagree %v; want [a b], %v, %v", i, ids, peers["b"], disagree, s.wantView, s.wantDisagree)
		}
	}
	g.checkMembers("a", []backend.Member{self})
	if _, ok := g.records["s2"]; ok || len(g.records) != 1 {
		t.Errorf("after b left, records are kept for %d sessions (s2 among them: %v), want only s1's", len(g.records), ok)
	}
}

// TestDrainSeenByTheGroupFirst: when the group's loop sees a drain of its
// member before the terms' own checks of the operations do (they race:
// the loop wakes on the view's change, the checks are its subscribers),
// the partitions it stops still end as drained, not as moved.
func TestDrainSeenByTheGroupFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		var mu sync.Mutex
		var revoked []Revoked
		c, err := New(b, WithTTL(3*time.Second), WithMemberID("x"), WithLogger(slog.New(slog.DiscardHandler)), WithEventHandler(func(e Event) {
			if r, ok := e.(Revoked); ok {
				mu.Lock()
				revoked = append(revoked, r)
				mu.Unlock()
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		task, err := c.Group("billing", 4).RunWhileLeader(func(ctx context.Context, term *Term, p int) error {
			<-ctx.Done()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if n := len(task.Partitions()); n != 4 {
			t.Fatalf("x runs %d partitions, want 4", n)
		}
		// The view changes without its subscribers being called: only the
		// group's loop, waiting on the change, sees the drain.
		o := c.ops
		o.mu.Lock()
		o.drained["x"] = true
		close(o.changed)
		o.changed = make(chan struct{})
		o.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(revoked) != 4 {
			t.Fatalf("%d terms revoked, want the 4 partitions': %v", len(revoked), revoked)
		}
		for _, r := range revoked {
			if r.Reason != RevokeDrained {
				t.Errorf("term %d of %s revoked as %q, want %q", r.Token, r.Election, r.Reason, RevokeDrained)
			}
		}
	})
}
