package kubernetes_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/kubetest"
)

// This file tests the Lease fields of coordinated leader election
// (spec.strategy, spec.preferredHolder) on the backend's objects: kept by
// every write of the backend's, and spec.preferredHolder honoured as the
// end of the holder's term (see the package documentation, "Preferred
// holder").

// coordinated starts a kube-apiserver with coordinated leader election on:
// a beta feature, off by default, without which the server drops
// spec.strategy and spec.preferredHolder from every write.
func coordinated(t *testing.T) *kubetest.Server {
	t.Helper()
	return kubetest.Start(t, kubetest.WithCoordinatedLeaderElection())
}

// What another writer (the control plane, an operator's kubectl) sets on
// the backend's objects besides the coordinated fields.
const (
	foreignLabel = "example.com/owner"
	foreignAnn   = "example.com/note"
)

// setForeign sets spec.strategy, spec.preferredHolder (preferred), a label
// and an annotation of another writer's on the object obj, by a merge patch
// of the administrator's (no resourceVersion: as kubectl patch does), and
// checks that the server kept them.
func setForeign(t *testing.T, leases coordclient.LeaseInterface, obj, preferred string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"control-plane"},"annotations":{%q:"kept"}},"spec":{"strategy":%q,"preferredHolder":%q}}`,
		foreignLabel, foreignAnn, coordv1.OldestEmulationVersion, preferred)
	if _, err := leases.Patch(t.Context(), obj, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching %s: %v", obj, err)
	}
	checkForeign(t, leases, obj, preferred, "the patch")
}

// checkForeign checks that the object obj still has what setForeign set,
// after what happened.
func checkForeign(t *testing.T, leases coordclient.LeaseInterface, obj, preferred, after string) {
	t.Helper()
	l, err := leases.Get(t.Context(), obj, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("after %s: reading %s: %v", after, obj, err)
	}
	if s := l.Spec.Strategy; s == nil || *s != coordv1.OldestEmulationVersion {
		t.Errorf("after %s: %s has spec.strategy %s, want %s", after, obj, deref(s), coordv1.OldestEmulationVersion)
	}
	if p := l.Spec.PreferredHolder; p == nil || *p != preferred {
		t.Errorf("after %s: %s has spec.preferredHolder %s, want %q", after, obj, deref(p), preferred)
	}
	if v, ok := l.Labels[foreignLabel]; !ok || v != "control-plane" {
		t.Errorf("after %s: %s has label %s=%q (present %v), want control-plane", after, obj, foreignLabel, v, ok)
	}
	if v, ok := l.Annotations[foreignAnn]; !ok || v != "kept" {
		t.Errorf("after %s: %s has annotation %s=%q (present %v), want kept", after, obj, foreignAnn, v, ok)
	}
}

func deref[T ~string](p *T) string {
	if p == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%q", string(*p))
}

// queueOf returns the sessions of the queue of name, oldest first.
func queueOf(t *testing.T, b *kubernetes.Backend, name string) []string {
	t.Helper()
	_, q, _, err := kubetest.Queue(nameObjectOf(t, b, name))
	if err != nil {
		t.Fatal(err)
	}
	var ss []string
	for _, e := range q {
		ss = append(ss, e.S)
	}
	return ss
}

// TestCoordinatedFieldsKept: spec.strategy, spec.preferredHolder and the
// labels and annotations of another writer's, set on a session object, a
// lease name object and a record object, survive every kind of write the
// backend makes of them: a renewal, a join, fenced and unfenced record
// writes, a fenced delete, a release and a registration.
func TestCoordinatedFieldsKept(t *testing.T) {
	srv := coordinated(t)
	b := newBackend(t, srv)
	leases := b.Client().CoordinationV1().Leases(b.Namespace())
	ctx := t.Context()
	s := open(t, b, 30*time.Second)
	rec := s.(backend.Records)
	l, err := s.Acquire(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	fenced := backend.Condition{Lease: "n", Token: l.Token()}
	if _, err := rec.PutRecord(ctx, "k1", []byte("v1"), fenced); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.PutRecord(ctx, "k2", []byte("v2"), backend.Condition{}); err != nil {
		t.Fatal(err)
	}
	list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: "simba.io/kind=record"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("the record object: %d objects, %v", len(list.Items), err)
	}
	// Named as holders: the session itself (not another waiting session,
	// which would end the term: see TestPreferredHolderEndsTerm).
	objs := []string{"simba-s-" + s.ID(), nameObjectOf(t, b, "n").Name, list.Items[0].Name}
	for _, o := range objs {
		setForeign(t, leases, o, s.ID())
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"a renewal", func() error { _, err := s.KeepAlive(ctx); return err }},
		{"a join", func() error { return s.Join(ctx, "g", backend.Member{ID: "m", Data: []byte("d")}) }},
		{"a fenced write", func() error { _, err := rec.PutRecord(ctx, "k1", []byte("v1'"), fenced); return err }},
		{"an unfenced write", func() error { _, err := rec.PutRecord(ctx, "k2", []byte("v2'"), backend.Condition{}); return err }},
		{"a fenced delete", func() error { return rec.DeleteRecord(ctx, "k1", fenced) }},
		{"a leave", func() error { return s.Leave(ctx, "g") }},
		{"a release", func() error { return l.Release(ctx) }},
		{"a registration", func() error { l, err = s.Acquire(ctx, "n"); return err }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
		for _, o := range objs {
			checkForeign(t, leases, o, s.ID(), st.what)
		}
	}
}

// TestPreferredHolderEndsTerm: the lease name object of a name held by s1,
// with s2 then s3 waiting, is given spec.preferredHolder naming s3. The
// term of s1 ends (Lost closes) before anyone else is granted the name;
// s2, first in the queue then, stands aside (its Acquire fails with
// ErrYielded) rather than be granted; s3 is granted with a larger token;
// s1's fenced writes with its token are refused from then on. s1's next
// Acquire queues behind s3 rather than contend: it is granted only once
// s3 releases. The fields stay through it all.
func TestPreferredHolderEndsTerm(t *testing.T) {
	srv := coordinated(t)
	b := newBackend(t, srv)
	leases := b.Client().CoordinationV1().Leases(b.Namespace())
	ctx := t.Context()
	s1, s2, s3 := open(t, b, 30*time.Second), open(t, b, 30*time.Second), open(t, b, 30*time.Second)
	h1, err := s1.Acquire(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	lost1 := make(chan time.Time, 1)
	go func() { <-h1.Lost(); lost1 <- time.Now() }()
	granted1 := time.Now()

	type result struct {
		l   backend.Lease
		err error
		at  time.Time
	}
	acquire := func(s backend.Session) <-chan result {
		ch := make(chan result, 1)
		go func() {
			l, err := s.Acquire(ctx, "n")
			ch <- result{l, err, time.Now()}
		}()
		return ch
	}
	queued := func(n int) {
		t.Helper()
		if !eventually(opTimeout, func() bool { return len(queueOf(t, b, "n")) == n }) {
			t.Fatalf("the queue of n is %v, want %d candidacies", queueOf(t, b, "n"), n)
		}
	}
	r2 := acquire(s2)
	queued(2)
	r3 := acquire(s3)
	queued(3)
	obj := nameObjectOf(t, b, "n").Name
	setForeign(t, leases, obj, s3.ID())

	at1 := await.For(t, lost1, opTimeout, "the term of s1 did not end within %v of spec.preferredHolder naming s3", opTimeout)
	got2 := await.For(t, r2, opTimeout, "the Acquire of s2 did not return")
	if !errors.Is(got2.err, kubernetes.ErrYielded) {
		t.Errorf("the Acquire of s2, first after s1 while s3 is preferred: got %v, want an error wrapping ErrYielded", got2.err)
	}
	got3 := await.For(t, r3, opTimeout, "s3 was not granted the name within %v", opTimeout)
	if got3.err != nil {
		t.Fatalf("the Acquire of s3: %v", got3.err)
	}
	terms := []check.Term{
		{Name: "n", Token: h1.Token(), Start: granted1, End: at1},
		{Name: "n", Token: got3.l.Token(), Start: got3.at, End: time.Now()},
	}
	for _, err := range check.Terms(terms) {
		t.Error(err)
	}
	t.Logf("s1 (token %d) lost the name %v before s3 (token %d) was granted it", h1.Token(), got3.at.Sub(at1), got3.l.Token())
	_, err = s1.(backend.Records).PutRecord(ctx, "k", []byte("stale"), backend.Condition{Lease: "n", Token: h1.Token()})
	if !errors.Is(err, backend.ErrConflict) {
		t.Errorf("a fenced write of s1 with its ended token %d: got %v, want ErrConflict", h1.Token(), err)
	}

	// s1 again: it queues behind s3, and is granted once s3 releases (s3,
	// still preferred, has no candidacy then).
	r1 := acquire(s1)
	if !eventually(opTimeout, func() bool {
		q := queueOf(t, b, "n")
		return len(q) == 2 && q[0] == s3.ID() && q[1] == s1.ID()
	}) {
		t.Fatalf("the queue of n is %v, want [s3 %s, s1 %s]", queueOf(t, b, "n"), s3.ID(), s1.ID())
	}
	select {
	case r := <-r1:
		t.Fatalf("s1 was answered (%v, %v) while s3 holds the name", r.l, r.err)
	default:
	}
	released := time.Now()
	if err := got3.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again := await.For(t, r1, opTimeout, "s1 was not granted the name after s3 released it")
	if again.err != nil {
		t.Fatalf("the Acquire of s1 after s3's release: %v", again.err)
	}
	terms[1].End = released
	terms = append(terms, check.Term{Name: "n", Token: again.l.Token(), Start: again.at, End: time.Now()})
	for _, err := range check.Terms(terms) {
		t.Error(err)
	}
	checkForeign(t, leases, obj, s3.ID(), "the hand-offs")
}

// TestPreferredHolderHandOff: three simba clients contend for "x"; once
// the holder holds and the other two wait, the lease name object is given
// spec.preferredHolder naming the session of the last to queue. Its client
// holds next, after the holder's term ended (I1, I2, and I4: the term
// revoked no later than the server saw its candidacy leave the head of
// the queue); the client queued between them does not hold in between;
// the holder's client queues again behind the preferred one; no stale
// fenced write is accepted; and the fields stay.
func TestPreferredHolderHandOff(t *testing.T) {
	p := startClients(t, coordinated(t), []string{"a", "b", "c"}, nil)
	holder, next := p.preferElsewhere(t)
	if next.Term.Token() <= holder.Term.Token() {
		t.Errorf("token %d after %d", next.Term.Token(), holder.Term.Token())
	}
	p.checkAll(t)
}

// TestPreferredHolderCatchesBlindHolder plants a bug: the clients' leases
// hide their Lost (as [overstating] with no extra TTL does), so the
// holder's client does not see the hand-off end its term. The checkers of
// TestPreferredHolderHandOff must then find two valid terms at once.
func TestPreferredHolderCatchesBlindHolder(t *testing.T) {
	blind := func(b *kubernetes.Backend) backend.Backend { return &overstating{Backend: b} }
	p := startClients(t, coordinated(t), []string{"a", "b"}, blind)
	p.preferElsewhere(t)
	p.checkAll(t)
	if len(p.errs) == 0 {
		t.Fatal("the checkers found no violation with the holder blind to the hand-off")
	}
	for _, err := range p.errs {
		t.Logf("caught: %v", err)
	}
}

// preferElsewhere waits for the first term of p's clients and for every
// client to queue for "x", names the session of the last to queue in the
// lease name object's spec.preferredHolder, and waits for the next term,
// which must be that client's. It checks the two terms as expiredTerm
// does, but for a holding that its holder ended: the term revoked no later
// than the server freed it. Unless p collects violations (a planted bug:
// the holder does not see its term end), it also checks that the holder's
// term was revoked, and that its client queues again behind the preferred
// one. It returns the two terms.
func (p *pair) preferElsewhere(t *testing.T) (holder, next *seenTerm) {
	t.Helper()
	b := backendIn(t, p.srv, p.ns, nil)
	leases := b.Client().CoordinationV1().Leases(p.ns)
	holder = p.first(t)
	node := map[string]string{}
	var q []string
	if !eventually(opTimeout, func() bool {
		for n, c := range p.c {
			node[c.SessionID()] = n
		}
		q = queueOf(t, b, "x")
		return len(q) == len(p.c) && node[q[0]] == holder.Node && node[q[len(q)-1]] != ""
	}) {
		t.Fatalf("the queue of x is %v, want the sessions of all %d clients, the holder %s first", q, len(p.c), holder.Node)
	}
	preferred := q[len(q)-1]
	obj := nameObjectOf(t, b, "x").Name
	since := time.Now()
	setForeign(t, leases, obj, preferred)
	next = p.log.Next("", opTimeout)
	if next == nil {
		t.Fatalf("no term within %v of spec.preferredHolder naming client %s", opTimeout, node[preferred])
	}
	if next.Node != node[preferred] {
		t.Fatalf("client %s held after the hand-off (token %d), want %s (preferred)", next.Node, next.Term.Token(), node[preferred])
	}
	if !p.keep {
		p.revoked(t, holder, since, "hand-off")
	}
	if gap := next.Term.Start().Sub(holder.Term.Deadline()); gap <= 0 {
		p.failf("term %d of %s began %v before term %d of %s ended", next.Term.Token(), next.Node, -gap, holder.Term.Token(), holder.Node)
	}
	var endedAt time.Time
	if !eventually(opTimeout, func() bool { var ok bool; endedAt, ok = p.grant.ended(holder.Term.Token(), holder.Session); return ok }) {
		t.Fatalf("the holding of token %d not seen ended on the server", holder.Term.Token())
	}
	_, errs := check.AgainstGrants(
		[]check.Term{{Name: "x", Token: holder.Term.Token(), Start: holder.Term.Start(), End: holder.Term.Deadline()}},
		[]check.Grant{{Name: "x", Token: holder.Term.Token(), Start: holder.Term.Start(), End: endedAt, Ended: true}})
	for _, err := range errs {
		p.failf("%v", err)
	}
	if !p.keep && !eventually(opTimeout, func() bool {
		q = queueOf(t, b, "x")
		return len(q) == len(p.c) && q[0] == preferred
	}) {
		t.Errorf("the queue of x is %v, want the sessions of all %d clients, %s (preferred) first", q, len(p.c), preferred)
	}
	checkForeign(t, leases, obj, preferred, "the hand-off")
	t.Logf("term %d of %s ended %v after spec.preferredHolder was set; term %d of %s began %v after that",
		holder.Term.Token(), holder.Node, holder.Term.Deadline().Sub(since), next.Term.Token(), next.Node, next.Term.Start().Sub(holder.Term.Deadline()))
	return holder, next
}
