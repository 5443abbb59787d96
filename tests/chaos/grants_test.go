package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/simba-go/simba/internal/check"
)

// The grants of a run's leases, as a watcher of the test process's own sees
// them on the servers: the ground truth, kept outside the library and its
// clients, that check.Observed and check.HandOffOrder compare the tasks'
// observations and exits with.
//
// A watcher sees a change after it happened, never before: a grant's End
// is the instant the watcher learned of the deletion of the lease key or
// znode, at or after the true end. Its Start must be no later than the
// first instant a task could know of the grant (see each backend's
// watcher for how that is ensured). Expired is false for etcd, ZooKeeper
// and Kubernetes: their watchers cannot tell a session's expiry from its
// holder's release or close, and the checkers' rule for a grant that ended
// otherwise than by expiry is the weaker one, sound for both (they may miss
// a violation by the watcher's lag, never report a false one).
// PostgreSQL's watcher reads the server's expiry of each session, and marks
// a holding it saw expire Expired, with its End that expiry.

// grantWatch is a running watcher of a run's grants.
type grantWatch struct {
	log  *grantLog
	stop func() // stops the watcher and waits for its goroutines
}

// grantLog records the grants a watcher sees. Safe for concurrent use.
type grantLog struct {
	mu     sync.Mutex
	grants []*check.Grant
	byKey  map[grantKey]*check.Grant
	// blind are the ranges of tokens in which the watcher may have missed
	// a grant entirely (ZooKeeper: a znode created and deleted between two
	// looks); an observation of a token without a grant in such a range
	// cannot be checked.
	blind []tokenRange
	err   error // why the watch stopped short, if it did

	// note, when set, logs what the watcher sees (the run's timeline).
	note func(format string, args ...any)
}

type grantKey struct {
	name  string
	token uint64
}

// tokenRange is the tokens t with After < t ≤ UpTo, and why the watcher
// may have missed a grant there.
type tokenRange struct {
	After, UpTo uint64
	Why         string
}

func (t tokenRange) String() string {
	return fmt.Sprintf("tokens (%d, %d]: %s", t.After, t.UpTo, t.Why)
}

func (t tokenRange) holds(token uint64) bool { return t.After < token && token <= t.UpTo }

func newGrantLog() *grantLog { return &grantLog{byKey: map[grantKey]*check.Grant{}} }

// setNote sets the log of what the watcher sees.
func (l *grantLog) setNote(note func(format string, args ...any)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.note = note
}

// notef writes a line of what the watcher sees, if anyone reads them.
func (l *grantLog) notef(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.note != nil {
		l.note(format, args...)
	}
}

// begin records that the grant of name with token has begun, no later
// than start, and was seen begun at seen (no earlier than it began).
func (l *grantLog) begin(name string, token uint64, start, seen time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := grantKey{name, token}
	if _, ok := l.byKey[k]; ok {
		return
	}
	g := &check.Grant{Name: name, Token: token, Start: start.Round(0), Seen: seen.Round(0)}
	l.byKey[k] = g
	l.grants = append(l.grants, g)
	if l.note != nil {
		l.note("server: grant %d of %s began by %s", token, name, stamp(start))
	}
}

// end records that the grant of name with token was over at the instant
// at (when the watcher learned of it). A grant whose beginning was not
// seen begins at the zero time, no later than anything, and was seen begun
// by its end.
func (l *grantLog) end(name string, token uint64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := grantKey{name, token}
	g, ok := l.byKey[k]
	if !ok {
		g = &check.Grant{Name: name, Token: token, Seen: at.Round(0)}
		l.byKey[k] = g
		l.grants = append(l.grants, g)
	}
	if !g.Ended {
		g.End, g.Ended = at.Round(0), true
		if l.note != nil {
			l.note("server: grant %d of %s over by %s", token, name, stamp(at))
		}
	}
}

// expire records that the grant of name with token ended by the expiry
// of its session at the instant at, by the server's clock (see
// pgGrantWatch).
func (l *grantLog) expire(name string, token uint64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g, ok := l.byKey[grantKey{name, token}]
	if !ok || g.Ended {
		return
	}
	g.End, g.Ended, g.Expired = at.Round(0), true, true
	if l.note != nil {
		l.note("server: grant %d of %s expired at %s", token, name, stamp(at))
	}
}

// missed records that grants with tokens in (after, upTo] may have gone
// unseen, and returns the range's index, for bound.
func (l *grantLog) missed(after, upTo uint64, why string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.blind = append(l.blind, tokenRange{after, upTo, why})
	if l.note != nil {
		l.note("server: the grant watch may have missed grants: %v", l.blind[len(l.blind)-1])
	}
	return len(l.blind) - 1
}

// bound lowers the upper end of blind range i, once known.
func (l *grantLog) bound(i int, upTo uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.blind[i].UpTo = upTo
}

// failed records that the watch stopped short.
func (l *grantLog) failed(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
	}
}

// snapshot returns the grants so far (sorted by lease and token), the
// blind ranges, and why the watch stopped short, if it did.
func (l *grantLog) snapshot() ([]check.Grant, []tokenRange, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]check.Grant, 0, len(l.grants))
	for _, g := range l.grants {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b check.Grant) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Token, b.Token))
	})
	return out, append([]tokenRange(nil), l.blind...), l.err
}

// open returns how many grants have not been seen to end.
func (l *grantLog) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, g := range l.grants {
		if !g.Ended {
			n++
		}
	}
	return n
}

// checkable returns the observations that can be checked against grants:
// all but those of a token without a grant that lies in a blind range of
// the watch, which it returns apart.
func checkable(obs []check.Observation, grants []check.Grant, blind []tokenRange) (ok, unknown []check.Observation) {
	if len(blind) == 0 {
		return obs, nil
	}
	have := map[grantKey]bool{}
	for _, g := range grants {
		have[grantKey{g.Name, g.Token}] = true
	}
	for _, o := range obs {
		if !have[grantKey{o.Name, o.Token}] && slices.ContainsFunc(blind, func(r tokenRange) bool { return r.holds(o.Token) }) {
			unknown = append(unknown, o)
			continue
		}
		ok = append(ok, o)
	}
	return ok, unknown
}

// observedChecks runs check.Observed (I4) and check.HandOffOrder (I7) over
// what the tasks saw and when their runs exited, against the grants the
// watch saw, and returns their violations, with figures for the summary.
func observedChecks(obs []check.Observation, exits []check.Exit, gw *grantWatch) (observedFigures, []error) {
	grants, blind, err := gw.log.snapshot()
	var errs []error
	if err != nil {
		errs = append(errs, fmt.Errorf("the watch of the grants on the servers stopped short, so I4 and I7 cannot be checked in full: %w", err))
	}
	ok, unknown := checkable(obs, grants, blind)
	errs = append(errs, check.Observed(ok, grants)...)
	errs = append(errs, check.HandOffOrder(exits, grants)...)
	f := observedFigures{observations: len(ok), unknown: len(unknown), exits: len(exits), grants: len(grants), blind: len(blind)}
	for _, g := range grants {
		if !g.Ended {
			f.open++
		}
	}
	return f, errs
}

// observedFigures are the figures of the checks against the grants.
type observedFigures struct {
	observations int // checked by Observed
	unknown      int // of a token the watch may have missed the grant of
	exits        int // checked by HandOffOrder
	grants       int // seen by the watch
	open         int // of which not seen to end
	blind        int // ranges of tokens the watch may have missed grants in
	liveCtx      int // runs' ctx found live: not checked
}

func (f observedFigures) String() string {
	s := fmt.Sprintf("%d observations (and %d of a live ctx, unchecked) and %d run exits checked against %d grants seen on the servers",
		f.observations, f.liveCtx, f.exits, f.grants)
	if f.open > 0 {
		s += fmt.Sprintf(" (%d not seen to end)", f.open)
	}
	if f.blind > 0 || f.unknown > 0 {
		s += fmt.Sprintf(", %d observations unchecked (%d blind spots of the watch)", f.unknown, f.blind)
	}
	return s
}
