package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/candidacy"
)

// queue is the session's side of Acquire and Release (see
// candidacy.Queue): a candidacy is an entry of the queue in the name's
// object, appended with the next token of its counter in one
// compare-and-swap, and its Acquire waits until it is first (see the
// package documentation for how a dead holder is removed).
type queue struct{ *session }

var _ candidacy.Queue = queue{}

// Watch calls f on the watch's events of name's object.
func (s queue) Watch(name string, f func()) (cancel func()) {
	return s.b.hub.subscribe("o:"+nameObject(name), f)
}

// Changed makes the monitor read name's queue again.
func (s queue) Changed(name string) { s.recheck(name) }

// Register appends the candidacy and returns its token; this session's
// older candidacies for name go (a re-Acquire frees the old holding and
// queues at the back).
func (s queue) Register(ctx context.Context, name string) (uint64, error) {
	op := fmt.Sprintf("acquire %q", name)
	s.mu.Lock()
	s.cands[name] = struct{}{}
	s.mu.Unlock()
	var token uint64
	_, err := s.b.updateName(ctx, name, func(st *nameState) (bool, error) {
		if !s.live() {
			return false, s.doneErr(op)
		}
		if st.last >= maxToken {
			return false, fmt.Errorf("simba/kubernetes: %s: the name's tokens are exhausted (%d)", op, st.last)
		}
		q := st.queue[:0:0]
		for _, e := range st.queue {
			if e.S != s.id {
				q = append(q, e)
			}
		}
		st.last++
		token = st.last
		st.queue = append(q, entry{T: token, S: s.id})
		return true, nil
	})
	if err != nil {
		if errors.Is(err, backend.ErrSessionDone) || errors.As(err, new(*CorruptObjectError)) {
			return 0, err
		}
		// The outcome is unknown: a candidacy may exist.
		s.Withdraw(name, 0)
		if ctx.Err() != nil {
			return 0, fmt.Errorf("simba/kubernetes: %s: %w", op, context.Cause(ctx))
		}
		return 0, err
	}
	return token, nil
}

// Ahead reads the queue once and acts on its first candidacy (see step).
// A queue that does not decode ends the wait, its candidacy withdrawn.
func (s queue) Ahead(ctx context.Context, w *candidacy.Waiter) (time.Duration, error) {
	wait, err := s.step(ctx, w)
	if ctx.Err() == nil && errors.As(err, new(*CorruptObjectError)) {
		s.Withdraw(w.Name, w.Token)
		return 0, candidacy.Final(err)
	}
	return wait, err
}

// step reads the queue once and acts on its first candidacy: it returns a
// negative wait when w's candidacy is first, zero to read again at once,
// or how long to sleep before reading again (unless woken: w follows the
// deletion of the object of the session it waits for). When the first is
// another session's, it observes that session's object and ends it once
// it has stayed unchanged for its TTL plus margin.
func (s queue) step(ctx context.Context, w *candidacy.Waiter) (time.Duration, error) {
	name, token := w.Name, w.Token
	st, err := s.b.readName(ctx, name)
	if err != nil {
		return 0, err
	}
	if !st.has(s.id, token) {
		return 0, candidacy.ErrGone
	}
	head := st.queue[0]
	if head.S == s.id && head.T == token {
		if p := st.yieldsTo(s.id); p != "" {
			return 0, s.standAside(ctx, w, p)
		}
		return -1, nil
	}
	obj := sessionObject(head.S)
	w.Follow(obj, func(f func()) func() { return s.b.hub.subscribe("d:"+obj, f) })
	l, err := s.b.leases.Get(ctx, obj, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Dead: sessions are never re-created.
		s.b.obs.forget(obj)
		_, err := s.b.removeEntries(ctx, name, head.S, 0)
		return 0, err
	}
	if err != nil {
		return 0, s.b.apiErr("reading session "+head.S, err)
	}
	ttl, problem := sessionTTL(l)
	if problem != "" {
		s.b.log.Warn("simba/kubernetes: a session object is not as this backend writes it (edited by hand?): waiting for the longest TTL a session may have before taking over from it; delete it if its client is gone", "object", obj, "namespace", s.b.ns, "lease", name, "problem", problem, "wait", takeoverAfter(ttl))
	}
	since := s.b.obs.observe(obj, l.ResourceVersion)
	left := time.Until(since.Add(takeoverAfter(ttl)))
	if left > 0 {
		// The watch moves the sighting on with every renewal; without it,
		// the next get does (later: safe, only slower).
		return left + time.Millisecond, nil
	}
	// Unchanged for TTL + margin on this clock: end it, unless it renews
	// meanwhile (the precondition fails).
	rv := l.ResourceVersion
	err = s.b.leases.Delete(ctx, obj, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		s.b.log.Info("simba/kubernetes: ended a session that stopped renewing", "session", head.S, "lease", name, "unchanged", takeoverAfter(ttl))
		s.b.obs.forget(obj)
		_, err := s.b.removeEntries(ctx, name, head.S, 0)
		return 0, err
	case apierrors.IsConflict(err):
		return 0, nil // renewed: observe afresh
	}
	return 0, s.b.apiErr("ending session "+head.S, err)
}

// ErrYielded is wrapped by the error of an Acquire whose candidacy came
// first in its queue while the name's object had a spec.preferredHolder
// naming another session with a candidacy: the candidacy was withdrawn,
// not granted (see the package documentation, "Preferred holder"). An
// Acquire again queues behind the preferred session; simba's client does
// that itself.
var ErrYielded = errors.New("simba/kubernetes: the lease object's spec.preferredHolder names another waiting session")

// standAside withdraws w's candidacy, first in its queue, for the session p
// that the object's spec.preferredHolder names, in one compare-and-swap
// that requires it still first and p still preferred and waiting. It
// returns the Final error that ends w's Acquire, or nil to read again
// (the queue changed), or a transient error.
func (s queue) standAside(ctx context.Context, w *candidacy.Waiter, p string) error {
	name, token := w.Name, w.Token
	done := false
	_, err := s.b.updateName(ctx, name, func(st *nameState) (bool, error) {
		done = len(st.queue) > 0 && st.queue[0] == (entry{T: token, S: s.id}) && st.yieldsTo(s.id) == p
		if done {
			st.queue = st.queue[1:]
		}
		return done, nil
	})
	if err != nil || !done {
		return err
	}
	s.b.log.Debug("simba/kubernetes: a candidacy stood aside for the preferred holder", "lease", name, "token", token, "session", s.id, "preferredHolder", p)
	return candidacy.Final(fmt.Errorf("simba/kubernetes: %s: candidacy %d withdrawn for session %s, which object %s/%s prefers: %w", w.Op, token, p, s.b.ns, nameObject(name), ErrYielded))
}

// withdrawTimeout bounds the withdrawal an Acquire makes before it
// returns; past it, the withdrawal goes on in the background.
const withdrawTimeout = 2 * time.Second

// Withdraw removes the candidacy (name, token) (all of this session's for
// name when token is 0), now or, when the server cannot be reached, in the
// background until it can or the session is over.
func (s queue) Withdraw(name string, token uint64) {
	err := s.Retry(withdrawTimeout, lookTimeout, func(ctx context.Context) error {
		_, err := s.b.removeEntries(ctx, name, s.id, token)
		return err
	})
	if err != nil {
		s.b.log.Warn("simba/kubernetes: withdrawing a candidacy failed; retrying in the background", "session", s.id, "lease", name, "err", err)
	}
}

// liveSessions lists the ids of the session objects that exist.
func (b *Backend) liveSessions(ctx context.Context) (map[string]bool, error) {
	list, err := b.leases.List(ctx, metav1.ListOptions{LabelSelector: selector(kindSession)})
	if err != nil {
		return nil, err
	}
	ids := make(map[string]bool, len(list.Items))
	for _, l := range list.Items {
		if id, ok := strings.CutPrefix(l.Name, "simba-s-"); ok {
			ids[id] = true
		}
	}
	return ids, nil
}

var _ backend.CandidateLister = (*session)(nil)

// Candidates lists the sessions of the candidacies of name whose session
// objects exist, oldest first.
func (s *session) Candidates(ctx context.Context, name string) ([]string, error) {
	if err := s.CheckName("candidates", name); err != nil {
		return nil, err
	}
	st, err := s.b.readName(ctx, name)
	if err != nil {
		return nil, err
	}
	live, err := s.b.liveSessions(ctx)
	if err != nil {
		return nil, s.fail(ctx, "candidates", err)
	}
	out := []string{}
	for _, e := range st.queue {
		if live[e.S] {
			out = append(out, e.S)
		}
	}
	return out, nil
}

// HeldLeases lists the names under prefix with a candidacy whose session
// object exists.
func (src source) HeldLeases(ctx, _ context.Context, prefix string) ([]string, error) {
	b := src.b
	list, err := b.leases.List(ctx, metav1.ListOptions{LabelSelector: selector(kindLease)})
	if err != nil {
		return nil, b.apiErr("held leases", err)
	}
	live, err := b.liveSessions(ctx)
	if err != nil {
		return nil, b.apiErr("held leases", err)
	}
	var names []string
	for i := range list.Items {
		l := &list.Items[i]
		name := l.Annotations[annName]
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		st, err := decodeName(name, l)
		if err != nil {
			b.log.Debug("simba/kubernetes: held leases: skipping a malformed lease object", "err", err)
			continue
		}
		for _, e := range st.queue {
			if live[e.S] {
				names = append(names, name)
				break
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// Release removes the candidacy (name, token) of this session from the
// queue in one compare-and-swap of the name's object, if it is still
// there, and writes records fenced by the holding in the same
// compare-and-swap: they go into that object (see the package
// documentation).
func (s queue) Release(ctx context.Context, h *candidacy.Holding, op string, records []backend.Record) (bool, error) {
	if !s.live() {
		return false, nil
	}
	name, token := h.Name(), h.Token()
	// Copies elsewhere (the record objects, other leases' objects) are read
	// first; one with a larger token is kept. Read before the swap, not
	// with it: a copy with a larger token written meanwhile wins over ours
	// on every read (see stored.wins), so the order holds all the same.
	located := make([][]stored, len(records))
	for i, r := range records {
		cs, err := s.b.locate(ctx, r.Key)
		if err != nil {
			return false, s.fail(ctx, op, err)
		}
		located[i] = cs
	}
	var written []int
	for attempt := 1; ; attempt++ {
		st, err := s.b.readName(ctx, name)
		if err != nil {
			return false, s.fail(ctx, op, err)
		}
		if !st.has(s.id, token) || st.obj == nil || !s.live() {
			return false, nil // Lost, or the session's end, follows
		}
		if len(records) > 0 && st.yieldsTo(s.id) != "" {
			// The term ended when spec.preferredHolder named another
			// waiting session: no record is written under it (the hand-off,
			// checkHeld, follows).
			return false, nil
		}
		obj := st.obj.DeepCopy()
		written = written[:0]
		for i, r := range records {
			newer := false
			for j := range located[i] {
				if c := &located[i][j]; c.lease != name && c.rec.Token > token {
					newer = true
				}
			}
			if _, ok := obj.Annotations[fencedAnn(r.Key)]; ok {
				if _, cur, me := decodeFenced(obj, fencedAnn(r.Key)); me == nil && cur.Token > token {
					newer = true
				}
			}
			if newer {
				continue // a newer record is kept
			}
			rec := backend.Record{Key: r.Key, Value: append([]byte{}, r.Value...), Version: rand.Uint64N(1<<63-1) + 1, Token: token}
			setFenced(obj, r.Key, &rec)
			written = append(written, i)
		}
		q := st.queue[:0:0]
		for _, e := range st.queue {
			if e != (entry{T: token, S: s.id}) {
				q = append(q, e)
			}
		}
		st.queue = q
		encodeName(obj, name, st)
		if err := checkLeaseSize(op, name, obj); err != nil {
			return false, err
		}
		_, err = s.b.leases.Update(ctx, obj, metav1.UpdateOptions{})
		if err == nil {
			break
		}
		if apierrors.IsConflict(err) {
			if err := retry(ctx, op, attempt); err != nil {
				return false, err
			}
			continue
		}
		return false, s.fail(ctx, op, err)
	}
	for _, i := range written {
		s.b.dropCopies(ctx, records[i].Key, located[i], name)
	}
	return true, nil
}
