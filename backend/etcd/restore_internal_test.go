package etcd

import (
	"errors"
	"log/slog"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestObserve checks the history's rules on headers, without a server:
// an ordered revision is never below the highest seen when its request was
// sent (but may be below one seen since: a read and a write in flight
// together), the cluster ID never changes, an unordered revision below
// the floor is only reported behind, and a refusal is for good. (TestRestoreWithoutBumpRefused shows the rule on a
// real restore.)
func TestObserve(t *testing.T) {
	cfg, err := configure([]Option{WithLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	hdr := func(cluster uint64, rev int64) *pb.ResponseHeader {
		return &pb.ResponseHeader{ClusterId: cluster, MemberId: 9, Revision: rev}
	}
	// A step observes header h, ordered or not, of a request sent when the
	// highest revision seen was the floor: b.floor() now, unless sent is
	// given (a request sent earlier).
	type step struct {
		h       *pb.ResponseHeader
		ordered bool
		sent    int64 // the floor when the request was sent; 0: now
	}
	for _, tc := range []struct {
		name    string
		steps   []step
		refused bool // by the last step
		behind  bool // the last step
	}{
		{"increasing", []step{{hdr(1, 5), true, 0}, {hdr(1, 5), true, 0}, {hdr(1, 8), true, 0}}, false, false},
		{"ordered back", []step{{hdr(1, 8), true, 0}, {hdr(1, 7), true, 0}}, true, false},
		{"read sent before a write returned", []step{{hdr(1, 5), true, 0}, {hdr(1, 8), true, 0}, {hdr(1, 6), true, 5}}, false, false},
		{"below the floor at sending", []step{{hdr(1, 5), true, 0}, {hdr(1, 8), true, 0}, {hdr(1, 4), true, 5}}, true, false},
		{"unordered back", []step{{hdr(1, 8), true, 0}, {hdr(1, 7), false, 0}}, false, true},
		{"other cluster", []step{{hdr(1, 8), true, 0}, {hdr(2, 9), true, 0}}, true, false},
		{"other cluster unordered", []step{{hdr(1, 8), true, 0}, {hdr(2, 9), false, 0}}, true, false},
		{"made-up header", []step{{hdr(1, 8), true, 0}, {hdr(0, 0), true, 0}, {nil, true, 0}}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(&clientv3.Client{}, false, cfg)
			defer b.cancel()
			var behind bool
			var err error
			for _, st := range tc.steps {
				floor := st.sent
				if floor == 0 {
					floor = b.floor()
				}
				behind, err = b.observe(st.h, floor, st.ordered)
			}
			if got := errors.Is(err, ErrRestored); got != tc.refused {
				t.Fatalf("refused %v (%v), want %v", got, err, tc.refused)
			}
			if behind != tc.behind {
				t.Errorf("behind %v, want %v", behind, tc.behind)
			}
			if !tc.refused {
				return
			}
			if _, err := b.observe(hdr(1, 100), b.floor(), true); !errors.Is(err, ErrRestored) {
				t.Errorf("after a refusal, a later header is accepted: %v", err)
			}
			if err := b.refusal(); !errors.Is(err, ErrRestored) {
				t.Errorf("refusal() = %v after a refusal", err)
			}
		})
	}
}
