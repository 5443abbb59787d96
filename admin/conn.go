package admin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/simba-go/simba/backend"
)

// conn is what the Admins that As returns share with the one Open
// returned: the backend, the view the reads go through (when the backend
// has one), and the session the operations write with, opened on first
// use and again after it ended.
type conn struct {
	b    backend.Backend
	ttl  time.Duration
	view backend.View // nil: the backend has none; reads use the session

	lock chan struct{} // held while a session is being opened

	mu     sync.Mutex
	closed bool
	cur    *session // nil until the first operation, or after it ended
}

// session is one backend session of the admin's, renewed in the
// background until it ends or the admin is closed.
type session struct {
	sess     backend.Session
	rec      backend.Records
	lister   backend.LeaseLister  // nil if unsupported
	reporter backend.SkipReporter // nil if unsupported

	cancel  context.CancelFunc
	renewed chan struct{} // closed when the renewal loop has returned
	lost    chan struct{} // closed when a renewal said the session is over
}

// errClosed is the error of a call after Close.
var errClosed = errors.New("simba/admin: closed")

// errNoRecords is the error of a session that keeps no records (is no
// backend.Records), returned by Open or the first operation.
var errNoRecords = fmt.Errorf("simba/admin: opening a session: %w", backend.ErrRecordsUnsupported)

// closeTimeout bounds the wait of Close for the backend to end the admin's
// session (and the view's connection): past it, the session expires by
// itself on the server within its TTL.
const closeTimeout = 5 * time.Second

// over reports whether s has ended: the backend said so, or a renewal did.
func (s *session) over() bool {
	select {
	case <-s.sess.Done():
		return true
	case <-s.lost:
		return true
	default:
		return false
	}
}

// session returns the admin's live session, opening one when there is
// none or the last one has ended.
func (c *conn) session(ctx context.Context) (*session, error) {
	if s, err := c.current(); s != nil || err != nil {
		return s, err
	}
	select {
	case c.lock <- struct{}{}:
		defer func() { <-c.lock }()
	case <-ctx.Done():
		return nil, fmt.Errorf("opening a session: %w", ctx.Err())
	}
	if s, err := c.current(); s != nil || err != nil {
		return s, err
	}
	s, err := openSession(ctx, c.b, c.ttl)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	closed, old := c.closed, c.cur
	if !closed {
		c.cur = s
	}
	c.mu.Unlock()
	if old != nil {
		old.close() // ended already: this only stops its renewal
	}
	if closed {
		s.close()
		return nil, errClosed
	}
	return s, nil
}

// current returns the live session, if any, or the error of a closed
// admin.
func (c *conn) current() (*session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	if c.cur != nil && !c.cur.over() {
		return c.cur, nil
	}
	return nil, nil
}

// openSession opens a session on b with records, and starts its renewal.
func openSession(ctx context.Context, b backend.Backend, ttl time.Duration) (*session, error) {
	sess, err := b.Open(ctx, backend.SessionOptions{TTL: ttl})
	if err != nil {
		return nil, fmt.Errorf("opening a session: %w", err)
	}
	rec, ok := sess.(backend.Records)
	if !ok {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(sess.TTL(), closeTimeout))
		defer cancel()
		_ = sess.Close(cctx) // it expires by itself otherwise
		return nil, errNoRecords
	}
	kctx, cancel := context.WithCancel(context.Background())
	s := &session{sess: sess, rec: rec, cancel: cancel, renewed: make(chan struct{}), lost: make(chan struct{})}
	s.lister, _ = sess.(backend.LeaseLister)
	s.reporter, _ = sess.(backend.SkipReporter)
	go func() {
		defer close(s.renewed)
		s.keepAlive(kctx)
	}()
	return s, nil
}

// keepAlive renews the session every third of its TTL until ctx ends or
// the session is over.
func (s *session) keepAlive(ctx context.Context) {
	ttl := s.sess.TTL()
	for {
		t := time.NewTimer(ttl / 3)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.sess.Done():
			t.Stop()
			return
		case <-t.C:
		}
		got, err := s.sess.KeepAlive(ctx)
		switch {
		case err == nil:
			ttl = got
		case errors.Is(err, backend.ErrSessionDone):
			close(s.lost)
			return
		}
	}
}

// close stops the renewal and ends the session, waiting at most
// closeTimeout.
func (s *session) close() error {
	s.cancel()
	<-s.renewed
	ctx, cancel := context.WithTimeout(context.Background(), min(s.sess.TTL(), closeTimeout))
	defer cancel()
	return s.sess.Close(ctx)
}

// close closes the session and the view, each waiting at most
// closeTimeout. Close is idempotent.
func (c *conn) close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	s := c.cur
	c.cur = nil
	c.mu.Unlock()
	var errs []error
	if s != nil {
		if err := s.close(); err != nil {
			errs = append(errs, fmt.Errorf("simba/admin: closing the session: %w", err))
		}
	}
	if c.view != nil {
		if err := c.view.Close(); err != nil {
			errs = append(errs, fmt.Errorf("simba/admin: closing the view: %w", err))
		}
	}
	return errors.Join(errs...)
}

// reader is what the reads use: the backend's View, or a session's reads.
type reader interface {
	GetRecord(ctx context.Context, key string) (backend.Record, error)
	ListRecordsWithSkipped(ctx context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error)
	MembersWithSkipped(ctx context.Context, group string) ([]backend.Member, []backend.MalformedError, error)
	// HeldLeases returns errNoLister when the backend cannot list leases.
	HeldLeases(ctx context.Context, prefix string) ([]string, error)
}

// errNoLister is the error of sessionReader.HeldLeases for a session
// without backend.LeaseLister.
var errNoLister = errors.New("simba/admin: the backend cannot list leases")

// sessionReader reads through a session, for a backend without a View.
type sessionReader struct{ s *session }

func (r sessionReader) GetRecord(ctx context.Context, key string) (backend.Record, error) {
	return r.s.rec.GetRecord(ctx, key)
}

func (r sessionReader) ListRecordsWithSkipped(ctx context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	if r.s.reporter == nil {
		list, err := r.s.rec.ListRecords(ctx, prefix)
		return list, nil, err
	}
	return r.s.reporter.ListRecordsWithSkipped(ctx, prefix)
}

func (r sessionReader) MembersWithSkipped(ctx context.Context, group string) ([]backend.Member, []backend.MalformedError, error) {
	if r.s.reporter == nil {
		members, err := r.s.sess.Members(ctx, group)
		return members, nil, err
	}
	return r.s.reporter.MembersWithSkipped(ctx, group)
}

func (r sessionReader) HeldLeases(ctx context.Context, prefix string) ([]string, error) {
	if r.s.lister == nil {
		return nil, errNoLister
	}
	return r.s.lister.HeldLeases(ctx, prefix)
}

// read runs f with the reader: the view, or else the session (opened
// again, and f run once more, when it turns out to have ended).
func (c *conn) read(ctx context.Context, f func(reader) error) error {
	if c.view != nil {
		if _, err := c.current(); err != nil {
			return err
		}
		return f(c.view)
	}
	err := c.withSession(ctx, func(s *session) error { return f(sessionReader{s}) })
	if oe := (*errOpen)(nil); errors.As(err, &oe) {
		return fmt.Errorf("simba/admin: %w", oe.err)
	}
	return err
}

// withSession runs f with the live session, and once more with a new one
// when f finds the session over. An error opening the session is returned
// as errOpen.
func (c *conn) withSession(ctx context.Context, f func(*session) error) error {
	for attempt := 0; ; attempt++ {
		s, err := c.session(ctx)
		if err != nil {
			if errors.Is(err, errClosed) || errors.Is(err, errNoRecords) {
				return err
			}
			return &errOpen{err}
		}
		err = f(s)
		if attempt == 0 && errors.Is(err, backend.ErrSessionDone) && ctx.Err() == nil {
			continue
		}
		return err
	}
}

// errOpen is the error of a session that could not be opened.
type errOpen struct{ err error }

func (e *errOpen) Error() string { return e.err.Error() }
func (e *errOpen) Unwrap() error { return e.err }
