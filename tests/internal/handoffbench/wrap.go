package handoffbench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/simba-go/simba/backend"
)

// Probe holds the times of the calls of one wrapped backend's sessions
// (see [Wrap]): when the last Acquire returned a lease, and when the first
// release call since [Probe.Reset] started and the last one returned. It is
// safe for concurrent use.
type Probe struct {
	mu           sync.Mutex
	acquired     time.Time
	name         string
	token        uint64
	releaseStart time.Time
	releaseEnd   time.Time
}

// Reset forgets the release calls seen so far (not the last Acquire).
func (p *Probe) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseStart, p.releaseEnd = time.Time{}, time.Time{}
}

// Acquired returns when the last successful Acquire returned, and its
// lease's name and token; the zero time if none did.
func (p *Probe) Acquired() (at time.Time, name string, token uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acquired, p.name, p.token
}

// Released returns when the first release call (Release or
// ReleaseWithRecords) since Reset started and when the last one returned;
// zero times if there was none.
func (p *Probe) Released() (start, end time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.releaseStart, p.releaseEnd
}

func (p *Probe) acquire(at time.Time, l backend.Lease) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.acquired, p.name, p.token = at, l.Name(), l.Token()
}

func (p *Probe) releasing() {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.releaseStart.IsZero() {
		p.releaseStart = now
	}
}

func (p *Probe) released() {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseEnd = now
}

// Wrap returns b with its sessions' Acquire and their leases' release
// calls timed in p. Its sessions and leases forward every optional
// capability that the core (and package admin) find by type assertion:
// backend.Records, SkipReporter, LeaseLister and CandidateLister on the
// session, LostNotifier and RecordReleaser on the lease, so that the core
// takes the same paths as on b. Open fails, saying which, when a session or
// a lease of b lacks one of them: a wrapper that hid it would measure
// another path. RecordPrefetcher is forwarded when the session has it, and
// does nothing when it has not (what the core's call of it then costs is
// nothing); GrantSnapshot likewise on the lease (without it, the lease
// lists nothing at its grant, and the core reads, as on b). backend.Viewer on the Backend is not forwarded: the core does
// not use it.
func Wrap(b backend.Backend, p *Probe) backend.Backend { return &wrapped{Backend: b, p: p} }

type wrapped struct {
	backend.Backend
	p *Probe
}

func (w *wrapped) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	s, err := w.Backend.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	rec, ok1 := s.(backend.Records)
	skip, ok2 := s.(backend.SkipReporter)
	list, ok3 := s.(backend.LeaseLister)
	cand, ok4 := s.(backend.CandidateLister)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		_ = s.Close(ctx)
		return nil, fmt.Errorf("simba/handoffbench: session %T lacks a capability (Records %v, SkipReporter %v, LeaseLister %v, CandidateLister %v): the wrapper would hide the core's path", s, ok1, ok2, ok3, ok4)
	}
	pf, _ := s.(backend.RecordPrefetcher)
	return &session{Session: s, rec: rec, skip: skip, list: list, cand: cand, pf: pf, p: w.p}, nil
}

type session struct {
	backend.Session
	rec  backend.Records
	skip backend.SkipReporter
	list backend.LeaseLister
	cand backend.CandidateLister
	pf   backend.RecordPrefetcher // nil: PrefetchRecords does nothing
	p    *Probe
}

var (
	_ backend.Records          = (*session)(nil)
	_ backend.SkipReporter     = (*session)(nil)
	_ backend.LeaseLister      = (*session)(nil)
	_ backend.CandidateLister  = (*session)(nil)
	_ backend.RecordPrefetcher = (*session)(nil)
	_ backend.LostNotifier     = (*lease)(nil)
	_ backend.RecordReleaser   = (*lease)(nil)
	_ backend.GrantSnapshot    = (*lease)(nil)
)

func (s *session) Acquire(ctx context.Context, name string) (backend.Lease, error) {
	l, err := s.Session.Acquire(ctx, name)
	if err != nil {
		return l, err
	}
	at := time.Now()
	n, ok1 := l.(backend.LostNotifier)
	rr, ok2 := l.(backend.RecordReleaser)
	if !ok1 || !ok2 {
		_ = l.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("simba/handoffbench: lease %T lacks a capability (LostNotifier %v, RecordReleaser %v): the wrapper would hide the core's path", l, ok1, ok2)
	}
	s.p.acquire(at, l)
	gs, _ := l.(backend.GrantSnapshot)
	return &lease{Lease: l, n: n, rr: rr, gs: gs, p: s.p}, nil
}

func (s *session) GetRecord(ctx context.Context, key string) (backend.Record, error) {
	return s.rec.GetRecord(ctx, key)
}

func (s *session) ListRecords(ctx context.Context, prefix string) ([]backend.Record, error) {
	return s.rec.ListRecords(ctx, prefix)
}

func (s *session) PutRecord(ctx context.Context, key string, value []byte, cond backend.Condition) (backend.Record, error) {
	return s.rec.PutRecord(ctx, key, value, cond)
}

func (s *session) DeleteRecord(ctx context.Context, key string, cond backend.Condition) error {
	return s.rec.DeleteRecord(ctx, key, cond)
}

func (s *session) WatchRecords(ctx context.Context, prefix string) (<-chan struct{}, error) {
	return s.rec.WatchRecords(ctx, prefix)
}

func (s *session) ListRecordsWithSkipped(ctx context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	return s.skip.ListRecordsWithSkipped(ctx, prefix)
}

func (s *session) MembersWithSkipped(ctx context.Context, group string) ([]backend.Member, []backend.MalformedError, error) {
	return s.skip.MembersWithSkipped(ctx, group)
}

func (s *session) HeldLeases(ctx context.Context, prefix string) ([]string, error) {
	return s.list.HeldLeases(ctx, prefix)
}

func (s *session) Candidates(ctx context.Context, name string) ([]string, error) {
	return s.cand.Candidates(ctx, name)
}

func (s *session) PrefetchRecords(ctx context.Context, keys ...string) error {
	if s.pf == nil {
		return nil
	}
	return s.pf.PrefetchRecords(ctx, keys...)
}

type lease struct {
	backend.Lease
	n  backend.LostNotifier
	rr backend.RecordReleaser
	gs backend.GrantSnapshot // nil: RecordsAtGrant lists nothing
	p  *Probe
}

func (l *lease) OnLost(f func()) (stop func() bool) { return l.n.OnLost(f) }

func (l *lease) RecordsAtGrant(prefix string) ([]backend.Record, bool) {
	if l.gs == nil {
		return nil, false
	}
	return l.gs.RecordsAtGrant(prefix)
}

func (l *lease) Release(ctx context.Context) error {
	l.p.releasing()
	defer l.p.released()
	return l.Lease.Release(ctx)
}

func (l *lease) ReleaseWithRecords(ctx context.Context, records []backend.Record) error {
	l.p.releasing()
	defer l.p.released()
	return l.rr.ReleaseWithRecords(ctx, records)
}
