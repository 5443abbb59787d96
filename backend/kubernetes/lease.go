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
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kit/lost"
)

var (
	_ backend.Lease          = (*lease)(nil)
	_ backend.LostNotifier   = (*lease)(nil)
	_ backend.RecordReleaser = (*lease)(nil)
)

// Acquire appends this session's candidacy to the queue of name, with the
// next token of its counter, in one compare-and-swap, and waits until it is
// first (see the package documentation for how a dead holder is removed).
func (s *session) Acquire(ctx context.Context, name string) (backend.Lease, error) {
	op := fmt.Sprintf("acquire %q", name)
	if err := checkName("lease", name); err != nil {
		return nil, err
	}
	if err := s.overErr(op); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("simba/kubernetes: %s: %w", op, context.Cause(ctx))
	}
	wake := make(chan struct{}, 1)
	unsub := s.b.hub.subscribe("o:"+nameObject(name), func() { poke(wake) })
	defer unsub()
	token, err := s.register(ctx, op, name)
	if err != nil {
		return nil, err
	}
	s.replaced(name, token)
	if err := s.waitFirst(ctx, op, name, token, wake); err != nil {
		return nil, err
	}
	l := &lease{s: s, name: name, token: token, sig: lost.New()}
	l.unsub = s.b.hub.subscribe("o:"+nameObject(name), func() { s.recheck(name) })
	s.mu.Lock()
	if s.over {
		s.mu.Unlock()
		l.unsub()
		return nil, fmt.Errorf("simba/kubernetes: %s: session %s: %w", op, s.id, backend.ErrSessionDone)
	}
	s.held[l] = struct{}{}
	s.mu.Unlock()
	select {
	case <-wake: // a change since the last read: the monitor reads again
		s.recheck(name)
	default:
	}
	return l, nil
}

// register appends the candidacy and returns its token; this session's
// older candidacies for name go (a re-Acquire frees the old holding and
// queues at the back).
func (s *session) register(ctx context.Context, op, name string) (uint64, error) {
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
		s.withdraw(name, 0)
		if ctx.Err() != nil {
			return 0, fmt.Errorf("simba/kubernetes: %s: %w", op, context.Cause(ctx))
		}
		return 0, err
	}
	return token, nil
}

// waitFirst waits until the candidacy (name, token) is first in the queue.
// When the first is another session's, it observes that session's object
// and ends it once it has stayed unchanged for its TTL plus margin.
func (s *session) waitFirst(ctx context.Context, op, name string, token uint64, wake chan struct{}) error {
	gaveUp := func() error {
		s.withdraw(name, token)
		return fmt.Errorf("simba/kubernetes: %s: %w", op, context.Cause(ctx))
	}
	var headObj string
	unsubHead := func() {}
	defer func() { unsubHead() }()
	for attempt := 0; ; {
		if ctx.Err() != nil {
			return gaveUp()
		}
		if s.ctx.Err() != nil {
			return fmt.Errorf("simba/kubernetes: %s: session %s: %w", op, s.id, backend.ErrSessionDone)
		}
		wait, head, err := s.step(ctx, name, token)
		switch {
		case err == nil && wait < 0:
			return nil
		case err != nil && ctx.Err() != nil:
			return gaveUp()
		case errors.Is(err, errCandidacyGone):
			return fmt.Errorf("simba/kubernetes: %s: the candidacy with token %d was deleted while it waited", op, token)
		case errors.As(err, new(*CorruptObjectError)):
			s.withdraw(name, token)
			return err
		case err != nil:
			attempt++
			s.b.log.Debug("simba/kubernetes: reading the queue", "lease", name, "err", err)
			if !backoff.Sleep(ctx, backoff.Wait(attempt, time.Second)) {
				return gaveUp()
			}
			continue
		case wait == 0:
			continue
		}
		attempt = 0
		if head != headObj {
			unsubHead()
			headObj = head
			unsubHead = s.b.hub.subscribe("d:"+head, func() { poke(wake) })
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return gaveUp()
		case <-s.ctx.Done():
			t.Stop()
			return fmt.Errorf("simba/kubernetes: %s: session %s: %w", op, s.id, backend.ErrSessionDone)
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

var errCandidacyGone = errors.New("candidacy gone")

// step reads the queue once and acts on its first candidacy: it returns a
// negative wait when token is first, zero to read again at once, or how
// long to sleep before reading again (unless woken), and the object of the
// session it waits for.
func (s *session) step(ctx context.Context, name string, token uint64) (time.Duration, string, error) {
	st, err := s.b.readName(ctx, name)
	if err != nil {
		return 0, "", err
	}
	if !st.has(s.id, token) {
		return 0, "", errCandidacyGone
	}
	head := st.queue[0]
	if head.S == s.id && head.T == token {
		return -1, "", nil
	}
	obj := sessionObject(head.S)
	l, err := s.b.leases.Get(ctx, obj, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Dead: sessions are never re-created.
		s.b.obs.forget(obj)
		_, err := s.b.removeEntries(ctx, name, head.S, 0)
		return 0, obj, err
	}
	if err != nil {
		return 0, obj, s.b.apiErr("reading session "+head.S, err)
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
		return left + time.Millisecond, obj, nil
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
		return 0, obj, err
	case apierrors.IsConflict(err):
		return 0, obj, nil // renewed: observe afresh
	}
	return 0, obj, s.b.apiErr("ending session "+head.S, err)
}

// replaced closes Lost of this session's earlier holdings of name, which
// the Acquire that registered token removed.
func (s *session) replaced(name string, token uint64) {
	var old []*lease
	s.mu.Lock()
	for l := range s.held {
		if l.name == name && l.token < token {
			old = append(old, l)
			delete(s.held, l)
		}
	}
	s.mu.Unlock()
	for _, l := range old {
		l.lose()
	}
}

// withdrawTimeout bounds the withdrawal an Acquire makes before it
// returns; past it, the withdrawal goes on in the background.
const withdrawTimeout = 2 * time.Second

// withdraw removes the candidacy (name, token) (all of this session's for
// name when token is 0), now or, when the server cannot be reached, in the
// background until it can or the session is over.
func (s *session) withdraw(name string, token uint64) {
	f := func(ctx context.Context) error {
		_, err := s.b.removeEntries(ctx, name, s.id, token)
		return err
	}
	ctx, cancel := context.WithTimeout(s.ctx, withdrawTimeout)
	err := f(ctx)
	cancel()
	if err == nil || s.ctx.Err() != nil {
		return
	}
	s.b.log.Warn("simba/kubernetes: withdrawing a candidacy failed; retrying in the background", "session", s.id, "lease", name, "err", err)
	s.b.wg.Add(1)
	go func() {
		defer s.b.wg.Done()
		for attempt := 1; ; attempt++ {
			if !backoff.Sleep(s.ctx, backoff.Wait(attempt, s.ttl/3)) {
				return
			}
			ctx, cancel := context.WithTimeout(s.ctx, lookTimeout)
			err := f(ctx)
			cancel()
			if err == nil {
				return
			}
		}
	}()
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

// Candidates lists the sessions of the candidacies of name whose session
// objects exist, oldest first.
func (s *session) Candidates(ctx context.Context, name string) ([]string, error) {
	if err := checkName("lease", name); err != nil {
		return nil, err
	}
	if err := s.overErr("candidates"); err != nil {
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
func (s *session) HeldLeases(ctx context.Context, prefix string) ([]string, error) {
	if err := s.overErr("held leases"); err != nil {
		return nil, err
	}
	return s.b.heldLeases(ctx, prefix)
}

func (b *Backend) heldLeases(ctx context.Context, prefix string) ([]string, error) {
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

// lease is one holding: the candidacy (name, token) of its session.
type lease struct {
	s     *session
	name  string
	token uint64
	unsub func()
	// sig is Lost. A loss seen while the owner's release is in flight
	// (maybe the release's own write) waits for its outcome.
	sig *lost.Signal
}

func (l *lease) Name() string          { return l.name }
func (l *lease) Token() uint64         { return l.token }
func (l *lease) Lost() <-chan struct{} { return l.sig.C() }

// lose closes Lost and runs the OnLost functions, unless released.
func (l *lease) lose() {
	if l.sig.Lose() {
		l.unsub()
	}
}

// OnLost runs f once when Lost closes.
func (l *lease) OnLost(f func()) (stop func() bool) { return l.sig.OnLost(f) }

// forget marks the holding released by its owner: Lost stays open.
func (l *lease) forget() {
	l.sig.Released()
	l.unsub()
	l.s.mu.Lock()
	delete(l.s.held, l)
	l.s.mu.Unlock()
}

// Release removes the candidacy (name, token) of this session if it is
// still in the queue: one compare-and-swap.
func (l *lease) Release(ctx context.Context) error {
	return l.ReleaseWithRecords(ctx, nil)
}

// ReleaseWithRecords writes records fenced by this holding and releases it
// in one compare-and-swap of the name's object: the records go into that
// object (see the package documentation), the candidacy leaves its queue.
func (l *lease) ReleaseWithRecords(ctx context.Context, records []backend.Record) error {
	s := l.s
	op := fmt.Sprintf("release %q (token %d)", l.name, l.token)
	for _, r := range records {
		if err := backend.CheckRecord(r.Key, r.Value); err != nil {
			return fmt.Errorf("simba/kubernetes: %s: %w", op, err)
		}
	}
	if !s.live() {
		return fmt.Errorf("simba/kubernetes: %s: the session is over: %w", op, backend.ErrNotHeld)
	}
	// Copies elsewhere (the record objects, other leases' objects) are read
	// first; one with a larger token is kept. Read before the swap, not
	// with it: a copy with a larger token written meanwhile wins over ours
	// on every read (see stored.wins), so the order holds all the same.
	located := make([][]stored, len(records))
	for i, r := range records {
		cs, err := s.b.locate(ctx, r.Key)
		if err != nil {
			return s.fail(ctx, op, err)
		}
		located[i] = cs
	}
	var written []int
	for attempt := 1; ; attempt++ {
		st, err := s.b.readName(ctx, l.name)
		if err != nil {
			return s.fail(ctx, op, err)
		}
		if !st.has(s.id, l.token) || st.obj == nil {
			l.s.mu.Lock()
			_, mine := l.s.held[l]
			l.s.mu.Unlock()
			if mine {
				s.recheck(l.name) // Lost follows
			}
			return fmt.Errorf("simba/kubernetes: %s: %w", op, backend.ErrNotHeld)
		}
		if !s.live() {
			return fmt.Errorf("simba/kubernetes: %s: the session is over: %w", op, backend.ErrNotHeld)
		}
		obj := st.obj.DeepCopy()
		written = written[:0]
		for i, r := range records {
			newer := false
			for j := range located[i] {
				if c := &located[i][j]; c.lease != l.name && c.rec.Token > l.token {
					newer = true
				}
			}
			if _, ok := obj.Annotations[fencedAnn(r.Key)]; ok {
				if _, cur, me := decodeFenced(obj, fencedAnn(r.Key)); me == nil && cur.Token > l.token {
					newer = true
				}
			}
			if newer {
				continue // a newer record is kept
			}
			rec := backend.Record{Key: r.Key, Value: append([]byte{}, r.Value...), Version: rand.Uint64N(1<<63-1) + 1, Token: l.token}
			setFenced(obj, r.Key, &rec)
			written = append(written, i)
		}
		q := st.queue[:0:0]
		for _, e := range st.queue {
			if e != (entry{T: l.token, S: s.id}) {
				q = append(q, e)
			}
		}
		st.queue = q
		encodeName(obj, l.name, st)
		if err := checkLeaseSize(op, l.name, obj); err != nil {
			return err
		}
		l.sig.BeginRelease()
		_, err = s.b.leases.Update(ctx, obj, metav1.UpdateOptions{})
		if err == nil {
			l.sig.EndRelease(true)
			break
		}
		if l.sig.EndRelease(false) {
			l.unsub() // seen gone, and not by this release
		}
		if apierrors.IsConflict(err) {
			if err := retry(ctx, op, attempt); err != nil {
				return err
			}
			continue
		}
		return s.fail(ctx, op, err)
	}
	l.forget()
	for _, i := range written {
		s.b.dropCopies(ctx, records[i].Key, located[i], l.name)
	}
	return nil
}
