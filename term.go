package simba

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba/internal/plant"
)

// Term is one continuous holding of an election's lease by this client's
// session. A task gets its Term and only that: it never reads "the current
// leader", so a run started in one term can never see a later term's token.
//
// A Term is valid while this process knows, from its own monotonic clock,
// that no other session can hold the lease: until the send time of the last
// renewal the backend confirmed, plus the granted TTL, minus the drift margin.
// When that deadline passes without a confirmed renewal, the term ends
// without waiting for any network answer.
//
// All methods are safe for concurrent use.
type Term struct {
	ref   TermRef
	gen   *generation
	start time.Time

	// end is the offset from gen.base at which the term stopped being valid;
	// math.MaxInt64 while it is not revoked.
	end     atomic.Int64
	revoked chan struct{}
	// lost is set when the lease was lost, by endNow, before revoke runs.
	lost atomic.Bool

	mu  sync.Mutex
	err *TermError

	// status keeps the term's status records; set before the work starts.
	status *statusWriter
	// ready is closed once the term's start is checked against the
	// operations in the backend (a disable its watch has not delivered
	// yet), or the term has ended; the term's work waits for it.
	ready chan struct{}

	// handOffUntil is the offset from gen.base until which a term this
	// client revoked itself may still write its records (a final
	// checkpoint): it still holds the lease until its hand-off releases it,
	// and at most until the deadline the term had when it was revoked. 0
	// when none.
	handOffUntil atomic.Int64

	// dog is the progress watchdog of the task's function; nil without
	// one. Set before the work starts.
	dog *watchdog
}

// handOffComing reports whether the client ended the term itself and its
// hand-off (holding.handOff) has not yet released the lease: the status
// writer leaves its last changes to it.
func (t *Term) handOffComing() bool {
	select {
	case <-t.revoked:
		return t.handOffUntil.Load() != 0
	default:
		return false
	}
}

func newTerm(ref TermRef, g *generation) *Term {
	t := &Term{ref: ref, gen: g, start: time.Now(), revoked: make(chan struct{}), ready: make(chan struct{})}
	t.end.Store(math.MaxInt64)
	return t
}

// Token is the fencing token: strictly greater than the token of every
// earlier term of the same lease name, on every backend and across client
// restarts. Pass it with every write to a shared resource, and have the
// resource reject tokens lower than the highest it has seen.
func (t *Term) Token() uint64 { return t.ref.Token }

// Name is the lease name: the election's name, or "{group}.{partition}".
func (t *Term) Name() string { return t.ref.Election }

// Start is when the term began on this client.
func (t *Term) Start() time.Time { return t.start }

// Valid reports whether the term is still valid now.
func (t *Term) Valid() bool {
	if plant.Is(plant.ValidLate) {
		return t.leftNow() > -plant.ValidLateBy // to the task only
	}
	return t.valid()
}

// valid is Valid for the library's own use.
func (t *Term) valid() bool { return t.leftNow() > 0 }

// leftNow is the time the term is guaranteed for from now (≤ 0 once over).
func (t *Term) leftNow() time.Duration {
	end := min(t.end.Load(), t.gen.deadline.Load())
	return time.Duration(end) - t.gen.now()
}

// Deadline is the current guaranteed horizon: the term is valid until then
// unless revoked earlier. It moves later with every confirmed renewal while
// the term lasts. After the term has ended it is the instant it stopped
// being valid; [Term.HandOffDeadline] then says how long the lease still
// stays this term's.
func (t *Term) Deadline() time.Time {
	end := min(t.end.Load(), t.gen.deadline.Load())
	return t.gen.base.Add(time.Duration(end))
}

// HandOffDeadline is the instant until which the lease stays this term's,
// for a clean-up that runs after the cancellation (a final checkpoint with
// [Term.PutRecord], a last fenced write) to bound itself by:
//
//	ctx, cancel := context.WithDeadline(context.Background(), term.HandOffDeadline())
//
// While the term is valid it is [Term.Deadline]. After the client ended the
// term itself ([LeaderTask.Stop], [Client.Close] or [Client.Shutdown], a
// yield, its progress watchdog, or an operator's disable, drain or
// resign), the lease is handed on only once the function has returned, and
// at the latest at the deadline the term had when it was ended, even if
// the function ignores the cancellation (a Shutdown whose ctx ends first
// does not release it earlier): HandOffDeadline is that deadline, fixed at the stop, until the
// hand-off releases the lease. Once the lease is released, and when the
// term ended by losing it (its deadline passed without a renewal, or the
// session ended), it is Deadline again: an instant that has passed, after
// which nothing is fenced by this term any more.
func (t *Term) HandOffDeadline() time.Time {
	if t.valid() {
		return t.Deadline()
	}
	// Set by the revocation before the term stopped being valid, and
	// cleared when the lease is released: the same test as PutRecord's.
	if until := time.Duration(t.handOffUntil.Load()); until > t.gen.now() && !t.gen.ended.Load() {
		return t.gen.base.Add(until)
	}
	return t.Deadline()
}

// Revoked is closed when the term ends.
func (t *Term) Revoked() <-chan struct{} { return t.revoked }

// endErr returns nil while the term is valid, and afterwards an error that
// matches ErrTermExpired (a *TermError once the client has revoked it).
func (t *Term) endErr() error {
	t.mu.Lock()
	err := t.err
	t.mu.Unlock()
	if err != nil {
		return err
	}
	if !t.valid() {
		reason, cause := RevokeDeadline, error(nil)
		switch {
		case t.gen.ended.Load():
			reason, cause = t.gen.why()
		case t.lost.Load():
			reason = RevokeLeaseLost
		}
		return &TermError{Name: t.ref.Election, Token: t.ref.Token, Reason: reason, Cause: cause}
	}
	return nil
}

// EnsureValid returns nil if the term is valid now and will stay valid for
// the expected step duration (the sum of the steps given; none means zero),
// and otherwise an error matching [ErrTermExpired]: once the term has
// ended, a [*TermError] that says why (EnsureValid() is then the term's
// counterpart of ctx.Err()). Call it before a long
// step so that the step is not begun when it would outlive the term:
//
//	if err := term.EnsureValid(30 * time.Second); err != nil {
//		return err // not enough time left to export safely
//	}
//
// A negative step is refused with an error matching [ErrInvalidArgument].
// A sum too large for a [time.Duration] counts as the largest one: no term
// lasts that long.
func (t *Term) EnsureValid(step ...time.Duration) error {
	var need time.Duration
	for _, s := range step {
		if s < 0 {
			return fmt.Errorf("%w: negative step duration %v", ErrInvalidArgument, s)
		}
		if s > math.MaxInt64-need {
			need = math.MaxInt64 // saturated: the sum would overflow
		} else {
			need += s
		}
	}
	if err := t.endErr(); err != nil {
		return err
	}
	if left := t.leftNow(); left <= need {
		if left <= 0 {
			return t.endErr()
		}
		return errStepTooLong(t.ref.Election, t.ref.Token, left, need)
	}
	return nil
}

// String describes the term for logs.
func (t *Term) String() string {
	return fmt.Sprintf("term %d of %q", t.ref.Token, t.ref.Election)
}

// endNow ends the term's validity at once, the lease being lost, without
// blocking: a backend's OnLost callback calls it, before revoke runs on a
// goroutine of its own, so that the term is over before the backend goes
// on (hands the lease to another session, say).
func (t *Term) endNow() {
	t.lost.Store(true)
	t.lowerEnd(int64(t.gen.now()))
}

// lowerEnd moves the end of the term's validity to v, if that is earlier.
func (t *Term) lowerEnd(v int64) {
	for {
		e := t.end.Load()
		if e <= v || t.end.CompareAndSwap(e, v) {
			return
		}
	}
}

// revoke ends the term: it is not valid from now on, Err reports why, and
// Revoked is closed. Only the first call has an effect.
func (t *Term) revoke(reason RevokeReason, cause error) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return false
	}
	t.lowerEnd(min(int64(t.gen.now()), t.gen.deadline.Load()))
	t.err = &TermError{Name: t.ref.Election, Token: t.ref.Token, Reason: reason, Cause: cause}
	close(t.revoked)
	return true
}

// Progress tells the progress watchdog of the task ([WithProgressWatchdog])
// that the work is moving: the watchdog's limit counts again from now. It
// costs a read of the monotonic clock and an atomic store (no lock, no
// allocation, no timer), and does nothing without a watchdog. With runs that overlap, the progress of any of them counts
// for the term.
func (t *Term) Progress() {
	if t.dog != nil {
		t.dog.progress()
	}
}

// watchdogOn arms the progress watchdog, if any, as a run starts.
func (t *Term) watchdogOn() {
	if t.dog != nil {
		t.dog.arm()
	}
}

// watchdogOff disarms the progress watchdog, if any, as a run returns.
func (t *Term) watchdogOff() {
	if t.dog != nil {
		t.dog.disarm()
	}
}
