package kubernetes

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kit/candidacy"
	"github.com/simba-go/simba/backend/kit/view"
	"github.com/simba-go/simba/backend/kit/wake"
)

var _ backend.Session = (*session)(nil)

// session is one session object. Its client renews it (KeepAlive: one
// compare-and-swap Update) and ends it at its deadline; a monitor goroutine
// does that, and re-reads the queues of the names it holds when the watch
// says they changed (to close Lost).
type session struct {
	*candidacy.Session // Done, Acquire and the held leases; queue in lease.go
	*view.Reader       // the reads of backend.Records and of groups; source in records.go

	b   *Backend
	id  string
	obj string // the object's name

	ctx   context.Context // ends when the session is over (End) or the backend closed
	ttl   time.Duration
	check chan struct{} // wakes the monitor: re-read the held queues
	renew chan struct{} // wakes the monitor: the deadline moved

	wmu sync.Mutex     // serialises writes of the session object
	cur *coordv1.Lease // the object as last written or read, under wmu

	mu       sync.Mutex
	deadline time.Time           // start of the last successful renewal (or Open) + ttl
	cands    map[string]struct{} // names this session registered for
	// checkFails counts the failed reads of checkHeld since the last
	// good one; checkRetry: a retry of it is pending.
	checkFails int
	checkRetry bool
	// dirty: the held names whose objects changed since checkHeld last
	// read them (a held lease's check reads its own name only, so that
	// N status writes cost N reads, not N × the leases held).
	dirty map[string]struct{}
}

func newSession(b *Backend, id string, ttl time.Duration, start time.Time, obj *coordv1.Lease) *session {
	s := &session{
		b: b, id: id, obj: obj.Name, ttl: ttl,
		check: make(chan struct{}, 1), renew: make(chan struct{}, 1),
		cur: obj, deadline: start.Add(ttl), cands: map[string]struct{}{},
	}
	s.Session = candidacy.New(b.ctx, candidacy.Config{
		Prefix: "simba/kubernetes", ID: id, Logger: b.log, WaitGroup: &b.wg, TTL: s.TTL,
		Queue: queue{s},
	})
	s.ctx = s.Context()
	s.Reader = view.NewReader("simba/kubernetes", s.ctx, s.overErr, source{b})
	b.obs.observe(obj.Name, obj.ResourceVersion)
	b.wg.Go(s.monitor)
	return s
}

// ID is the session's id: 32 hex digits, its object's name less "simba-s-".
func (s *session) ID() string { return s.id }

// TTL is the granted TTL: the one requested, rounded to milliseconds.
func (s *session) TTL() time.Duration { return s.ttl }

// live reports whether the session may still write: not over, and its
// deadline not passed.
func (s *session) live() bool {
	if s.Over() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Now().Before(s.deadline)
}

func (s *session) overErr(op string) error {
	if !s.live() {
		return fmt.Errorf("simba/kubernetes: %s: session %s: %w", op, s.id, backend.ErrSessionDone)
	}
	return nil
}

// doneErr ends the session locally (Done and every held lease's Lost
// close) and returns the error of op on a session that is over.
func (s *session) doneErr(op string) error {
	if s.End() {
		s.b.log.Debug("simba/kubernetes: the session is over", "session", s.id, "op", op)
	}
	return fmt.Errorf("simba/kubernetes: %s: session %s is over on the server: %w", op, s.id, backend.ErrSessionDone)
}

// fail wraps an error of the API for op, ctx being the caller's.
func (s *session) fail(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("simba/kubernetes: %s: %w", op, context.Cause(ctx))
	}
	return s.b.apiErr(op, err)
}

// write changes the session object by compare-and-swap on its
// resourceVersion. A conflict (someone else edited it) reads it afresh and
// tries again; NotFound means the session is over (a contender ended it).
func (s *session) write(ctx context.Context, op string, mutate func(*coordv1.Lease)) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for attempt := 1; ; attempt++ {
		if err := s.overErr(op); err != nil {
			return err
		}
		obj := s.cur.DeepCopy()
		mutate(obj)
		got, err := s.b.leases.Update(ctx, obj, metav1.UpdateOptions{})
		if err == nil {
			s.cur = got
			return nil
		}
		if apierrors.IsNotFound(err) {
			return s.doneErr(op)
		}
		if !apierrors.IsConflict(err) || attempt >= 5 {
			return s.fail(ctx, op, err)
		}
		fresh, err := s.b.leases.Get(ctx, s.obj, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return s.doneErr(op)
		}
		if err != nil {
			return s.fail(ctx, op, err)
		}
		s.cur = fresh
	}
}

// KeepAlive renews the session: one Update of its object carrying the
// resourceVersion last written. Its TTL counts from the call's start.
func (s *session) KeepAlive(ctx context.Context) (time.Duration, error) {
	const op = "keep-alive"
	start := time.Now()
	err := s.write(ctx, op, func(l *coordv1.Lease) {
		now := metav1.NewMicroTime(start)
		l.Spec.RenewTime = &now
		// The TTL as Open wrote it, in case an edit spoilt it: a contender
		// reading a spoilt TTL waits the longest (see sessionTTL).
		setTTL(l, s.ttl)
	})
	if err != nil {
		return 0, err
	}
	if err := s.OverErr(op); err != nil {
		return 0, err
	}
	s.mu.Lock()
	if d := start.Add(s.ttl); d.After(s.deadline) {
		s.deadline = d
	}
	s.mu.Unlock()
	wake.Poke(s.renew)
	return s.ttl, nil
}

// cleanupTimeout bounds the clean-up of a session that ends (its object
// and candidacies deleted); past it contenders take over as from a crash.
const cleanupTimeout = 5 * time.Second

// cleanup deletes the session object and removes its candidacies, once
// the session is over. It runs within cleanupTimeout of ctx's values.
func (s *session) cleanup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	s.wmu.Lock()
	rv := s.cur.ResourceVersion
	s.wmu.Unlock()
	var err error
	for range 3 {
		err = s.b.leases.Delete(ctx, s.obj, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		if err == nil || apierrors.IsNotFound(err) {
			err = nil
			break
		}
		if !apierrors.IsConflict(err) {
			break
		}
		// Written meanwhile (a renewal in flight, an edit): the session is
		// over for its client all the same.
		fresh, gerr := s.b.leases.Get(ctx, s.obj, metav1.GetOptions{})
		if apierrors.IsNotFound(gerr) {
			err = nil
			break
		}
		if gerr != nil {
			err = gerr
			break
		}
		rv = fresh.ResourceVersion
	}
	s.b.obs.forget(s.obj)
	s.mu.Lock()
	names := make([]string, 0, len(s.cands))
	for n := range s.cands {
		names = append(names, n)
	}
	s.mu.Unlock()
	for _, n := range names {
		if _, rerr := s.b.removeEntries(ctx, n, s.id, 0); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// Close ends the session: its object is deleted and its candidacies
// removed.
func (s *session) Close(ctx context.Context) error {
	if !s.End() {
		return nil
	}
	if err := s.cleanup(ctx); err != nil {
		return s.fail(ctx, "close", err)
	}
	return nil
}

// monitor ends the session at its deadline, and checks the held leases
// when their queues change.
func (s *session) monitor() {
	for {
		s.mu.Lock()
		wait := time.Until(s.deadline)
		s.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-s.renew:
			t.Stop()
		case <-s.check:
			t.Stop()
			s.checkHeld()
		case <-t.C:
			if s.live() {
				continue // renewed meanwhile
			}
			if s.End() {
				s.b.log.Debug("simba/kubernetes: the session's deadline passed", "session", s.id)
				if err := s.cleanup(context.Background()); err != nil {
					s.b.log.Warn("simba/kubernetes: cleaning up an expired session; contenders will take over after its TTL", "session", s.id, "err", err)
				}
			}
			return
		}
	}
}

// recheck marks name's object changed and wakes the monitor, which reads
// it again (checkHeld).
func (s *session) recheck(name string) {
	s.mu.Lock()
	if s.dirty == nil {
		s.dirty = map[string]struct{}{}
	}
	s.dirty[name] = struct{}{}
	s.mu.Unlock()
	wake.Poke(s.check)
}

// checkHeld reads the queues of the held leases whose objects changed
// (recheck) and closes Lost of those whose candidacy is gone.
func (s *session) checkHeld() {
	s.mu.Lock()
	dirty := s.dirty
	s.dirty = nil
	s.mu.Unlock()
	byName := map[string][]*candidacy.Holding{}
	for _, h := range s.Holdings() {
		if _, ok := dirty[h.Name()]; ok {
			byName[h.Name()] = append(byName[h.Name()], h)
		}
	}
	for name, hs := range byName {
		ctx, cancel := context.WithTimeout(s.ctx, lookTimeout)
		st, err := s.b.readName(ctx, name)
		cancel()
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			s.b.log.Debug("simba/kubernetes: reading a held queue", "lease", name, "err", err)
			s.mu.Lock()
			if s.dirty == nil {
				s.dirty = map[string]struct{}{}
			}
			s.dirty[name] = struct{}{} // read it again at the retry
			s.mu.Unlock()
			s.retryCheck()
			continue
		}
		s.mu.Lock()
		s.checkFails = 0
		s.mu.Unlock()
		var gone, yield []*candidacy.Holding
		p := st.yieldsTo(s.id)
		for _, h := range hs {
			switch {
			case !st.has(s.id, h.Token()):
				gone = append(gone, h)
			case p != "":
				yield = append(yield, h)
			}
		}
		s.Lose(gone...)
		s.handOff(name, p, yield)
	}
}

// handOff ends the holdings hs of name, whose object's spec.preferredHolder
// names p, another session with a candidacy: each term ends here first
// (Lost closes), then on the server (its candidacy is withdrawn, and the
// next one is first). The session does not renew the holding meanwhile:
// its fenced writes are refused from the moment the object names p (see
// holds).
func (s *session) handOff(name, p string, hs []*candidacy.Holding) {
	for _, h := range hs {
		s.b.log.Info("simba/kubernetes: handing the lease to the session that spec.preferredHolder names", "lease", name, "token", h.Token(), "session", s.id, "preferredHolder", p)
		s.Lose(h)
		queue{s}.Withdraw(name, h.Token())
	}
}

// retryCheck pokes the monitor to check the held leases again after a
// read failed: one retry at a time, backing off (to TTL/3) while reads
// keep failing (the server down, a queue edited into garbage).
func (s *session) retryCheck() {
	s.mu.Lock()
	s.checkFails++
	n, pending := s.checkFails, s.checkRetry
	s.checkRetry = true
	s.mu.Unlock()
	if pending {
		return
	}
	s.b.wg.Add(1)
	go func() {
		defer s.b.wg.Done()
		ok := backoff.Sleep(s.ctx, backoff.Wait(n, s.ttl/3))
		s.mu.Lock()
		s.checkRetry = false
		s.mu.Unlock()
		if ok {
			wake.Poke(s.check)
		}
	}()
}

func (st *nameState) has(sid string, token uint64) bool {
	for _, e := range st.queue {
		if e.S == sid && e.T == token {
			return true
		}
	}
	return false
}

// lookTimeout bounds a read of the monitor's.
const lookTimeout = 10 * time.Second
