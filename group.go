package simba

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/simba-go/simba/internal/assign"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
)

// Group is a partition group on a client: partitions elections, named
// "{group}.{p}" for p in [0, partitions), spread over the group's live
// members. It is a lightweight value: start it with [Group.RunWhileLeader] or
// [Group.Schedule].
type Group struct {
	c          *Client
	name       string
	partitions int
	opts       []GroupOption
}

// GroupOption configures a partition group.
type GroupOption func(*groupOptions) error

type groupOptions struct {
	variant AssignmentVariant
	grace   time.Duration // 0: twice the granted TTL
	limit   *tokenBucket  // nil: no limit on hand-offs; made anew for each GroupTask
	initial time.Duration // WithInitialRebalanceDelay
}

// WithInitialRebalanceDelay makes a member that joins a group in which no
// partition is held (a group starting cold) wait d before it contends for
// partitions (default 0: at once). Members started together then see each
// other first, and each partition is taken once, by its owner, instead of
// by the first members to join and then handed on as the others join: at
// 10,000 partitions over 10 members, about 18,000 terms and their status
// writes become 10,000. Joining a group that runs (some partition held) is
// not delayed. Like Kafka's group.initial.rebalance.delay.ms, it costs a
// group started alone d; keep d well under the vacancy grace.
func WithInitialRebalanceDelay(d time.Duration) GroupOption {
	return func(o *groupOptions) error {
		if d < 0 {
			return fmt.Errorf("%w: initial rebalance delay must not be negative, got %v", ErrInvalidArgument, d)
		}
		o.initial = d
		return nil
	}
}

// minHandOffRate is the slowest hand-off limit [WithHandOffLimit] accepts:
// one partition change an hour. A slower limit would leave a rebalance of a
// few partitions undone for days, and its token interval would overflow the
// time arithmetic of the group.
const minHandOffRate = 1.0 / 3600

// WithHandOffLimit limits how fast this member starts and stops contending
// for partitions when its view changes: at most rate partition changes per
// second, in bursts of up to burst (default: no limit). Each GroupTask
// started with the option has a limit of its own. A rebalance of
// thousands of partitions then spreads its backend traffic over time
// instead of stampeding the backend; partitions not yet moved stay with
// their current holders (or vacant) a little longer.
//
// The rate must be a finite number of at least 1/3600 (one change an
// hour), and burst at least 1; anything else (NaN, infinities, zero,
// negative or smaller rates) is refused with an error matching
// [ErrInvalidArgument] when the group is started.
func WithHandOffLimit(rate float64, burst int) GroupOption {
	return func(o *groupOptions) error {
		if math.IsNaN(rate) || math.IsInf(rate, 0) || rate < minHandOffRate || burst <= 0 {
			return fmt.Errorf("%w: hand-off limit needs a finite rate of at least one change an hour (%.3g a second) and a positive burst, got rate %v and burst %d", ErrInvalidArgument, minHandOffRate, rate, burst)
		}
		o.limit = newTokenBucket(rate, burst)
		return nil
	}
}

// WithAssignment sets the assignment variant (default [AssignRendezvous]). Every
// member of a group must use the same one; a member that sees another
// reports a [GroupMismatch].
func WithAssignment(v AssignmentVariant) GroupOption {
	return func(o *groupOptions) error {
		if v != AssignRendezvous && v != AssignBalanced {
			return fmt.Errorf("%w: unknown assignment variant %d", ErrInvalidArgument, int(v))
		}
		o.variant = v
		return nil
	}
}

// WithVacancyGrace sets how long a partition may stay unheld before members
// that are not its owner contend for it (default: twice the granted TTL). The
// next member in the partition's rendezvous order contends after one grace
// period, the one after it after two, and so on, so that no partition stays
// unowned while members disagree about the view (a different partition count,
// say). Each member publishes, in its member record, the view it acts on: a
// partition whose owner publishes the same view (and the same count and
// assignment) is never stood in for, however long the owner takes to start
// it, and a stand-in hands a partition back as soon as its owner publishes
// the same view; otherwise it keeps it until its view of the members
// changes. The safety net needs a backend that can list held leases
// ([backend.LeaseLister]); all of simba's do.
func WithVacancyGrace(d time.Duration) GroupOption {
	return func(o *groupOptions) error {
		if d <= 0 {
			return fmt.Errorf("%w: vacancy grace must be positive, got %v", ErrInvalidArgument, d)
		}
		o.grace = d
		return nil
	}
}

// MaxPartitions is the largest partition count of a group. Every view
// change computes an assignment of all the partitions and looks at each, and
// every partition may be an election with its lease, term and status
// records, so a count is a promise of work on every member and on the
// backend. 65,536 is six times the largest group the scale runs exercise
// (10,000 partitions), and keeps a mistyped count (1<<40, a config file's
// extra digits) from running the process out of memory.
const MaxPartitions = 1 << 16

// Group returns the partition group called name with the given number of
// partitions. Every member must use the same count, from 1 to
// [MaxPartitions]. Group names follow the lease-name rules, and
// "{name}.{partitions-1}" must be at most 128 characters; bad names and
// counts are reported when the group is started, with errors matching
// [backend.ErrInvalidName] and [ErrInvalidArgument].
func (c *Client) Group(name string, partitions int, opts ...GroupOption) *Group {
	return &Group{c: c, name: name, partitions: partitions, opts: opts}
}

// Name returns the group's name.
func (g *Group) Name() string { return g.name }

// RunWhileLeader joins the group and, for every partition assigned to this
// client, runs fn once per term won, as [Election.RunWhileLeader] does for an
// election. The partition's lease is "{group}.{p}".
func (g *Group) RunWhileLeader(fn func(ctx context.Context, term *Term, partition int) error, opts ...TaskOption) (*GroupTask, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: nil task function for group %q", ErrInvalidArgument, g.name)
	}
	return g.start("", func(p int) func(context.Context, *Term) error {
		run := func(ctx context.Context, t *Term) error { return fn(ctx, t, p) }
		return func(ctx context.Context, t *Term) error { return g.c.leaderRun(ctx, t, run) }
	}, opts)
}

// Schedule joins the group and, for every partition assigned to this
// client, runs fn on schedule s in every term won, as [Election.Schedule]
// does for an election.
func (g *Group) Schedule(s Schedule, fn func(ctx context.Context, term *Term, partition int) error, opts ...TaskOption) (*GroupTask, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, fmt.Errorf("%w: nil task function for group %q", ErrInvalidArgument, g.name)
	}
	return g.start(s.String(), func(p int) func(context.Context, *Term) error {
		run := func(ctx context.Context, t *Term) error { return fn(ctx, t, p) }
		return func(ctx context.Context, t *Term) error { return s.run(ctx, t, g.c, run) }
	}, opts)
}

func (g *Group) start(schedule string, body func(p int) func(context.Context, *Term) error, topts []TaskOption) (*GroupTask, error) {
	if err := checkName("group", g.name); err != nil {
		return nil, err
	}
	if g.partitions <= 0 || g.partitions > MaxPartitions {
		return nil, fmt.Errorf("%w: group %q: partitions must be from 1 to %d, got %d", ErrInvalidArgument, g.name, MaxPartitions, g.partitions)
	}
	if err := backend.CheckName(partitionName(g.name, g.partitions-1)); err != nil {
		return nil, fmt.Errorf("simba: group %q with %d partitions: its last partition's lease: %w", g.name, g.partitions, err)
	}
	var o groupOptions
	for _, opt := range g.opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil group option", ErrInvalidArgument)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	var probe taskOptions
	for _, opt := range topts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil task option", ErrInvalidArgument)
		}
		if err := opt(&probe); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	t := &GroupTask{
		c: g.c, name: g.name, partitions: g.partitions, opts: o,
		schedule: schedule, body: body, topts: topts,
		own: memberRecord{Partitions: g.partitions, Assignment: o.variant.String()},
		ctx: ctx, cancel: cancel, done: make(chan struct{}), kick: make(chan struct{}, 1),
		active:   make(map[int]*LeaderTask),
		handing:  make(map[*LeaderTask]int),
		standIns: make(map[int]bool),
		vacant:   make(map[int]time.Time),
		reported: make(map[string]bool),
		runs:     newRuns(),
	}
	if err := g.c.registerGroup(t); err != nil {
		cancel(nil)
		return nil, err
	}
	go t.loop()
	return t, nil
}

func partitionName(group string, p int) string { return group + "." + strconv.Itoa(p) }

// GroupTask is a started partition group: it keeps this client a member of
// the group, contends for the partitions assigned to it, and hands off those
// it loses.
type GroupTask struct {
	c          *Client
	name       string
	partitions int
	opts       groupOptions
	schedule   string
	own        memberRecord // this member's record in the group, View aside
	body       func(p int) func(context.Context, *Term) error
	topts      []TaskOption

	ctx    context.Context // cancelled by Stop or the client's closing
	cancel context.CancelCauseFunc
	done   chan struct{}
	kick   chan struct{} // a hand-off ended: look at the view again

	mu       sync.Mutex
	view     []string // member ids of the latest view
	assigned []int    // partitions contended for in the latest view
	active   map[int]*LeaderTask
	handing  map[*LeaderTask]int // stopped, hand-off not done
	standIns map[int]bool        // partitions taken over from an absent owner
	retry    *time.Timer         // pokes the group when the hand-off limit allows more
	lastHeld time.Time           // when held leases were last listed
	vacant   map[int]time.Time   // partitions seen unheld, since when
	reported map[string]bool     // mismatches already reported

	runs runs // the partitions' functions not returned yet; guarded by c.mu

	// records are the member records as last decoded, by session; owned
	// by loop (checkMembers). Every membership change brings every
	// member's record, and decoding them all each time was the largest
	// cost of a group with many members.
	records map[string]decodedRecord
}

// decodedRecord is a member record and the data it was decoded from.
type decodedRecord struct {
	data string
	rec  memberRecord
	err  error
}

// Name returns the group's name.
func (t *GroupTask) Name() string { return t.name }

// Partitions returns the partitions this client contends for in its latest
// view of the group, sorted.
func (t *GroupTask) Partitions() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.assigned)
}

func (t *GroupTask) stop(reason RevokeReason) {
	if reason == RevokeClosed {
		t.cancel(errClientClosing)
	} else {
		t.cancel(nil)
	}
}

// memberRecord is what a member publishes in the group: enough for the
// others to see that it splits the work the same way, and which view of the
// members it last acted on.
type memberRecord struct {
	Partitions int    `json:"p"`
	Assignment string `json:"a"`
	View       string `json:"v,omitempty"` // viewHash of the member ids; empty before the first view
}

// viewHash names a view (sorted member ids) in a member record.
func viewHash(ids []string) string {
	h := fnv.New64a()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	return strconv.FormatUint(h.Sum64(), 36)
}

// loop serves the group on each session until stopped, then leaves it and
// hands every partition off.
func (t *GroupTask) loop() {
	defer t.c.wg.Done()
	defer func() {
		close(t.done)
		t.c.mu.Lock()
		t.runs.finish()
		t.c.mu.Unlock()
	}()
	defer t.c.unregisterGroup(t)
	for {
		g, err := t.c.awaitGeneration(t.ctx)
		if err != nil {
			break
		}
		t.serve(g)
		if t.ctx.Err() != nil {
			break
		}
	}
	t.shutdown()
}

// serve keeps the membership and the view on session g until g ends or the
// task stops.
func (t *GroupTask) serve(g *generation) {
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	defer context.AfterFunc(g.ctx, cancel)()

	self := t.c.memberID(g)
	hints, err := g.sess.WatchMembers(ctx, t.name)
	if err != nil && ctx.Err() == nil {
		t.c.log.Warn("watching a group failed; refreshing every renewal period only", "group", t.name, "err", err)
	}
	refresh := time.NewTicker(g.ttl / 3)
	defer refresh.Stop()
	joined := false
	published := "" // the view in this member's record
	for {
		ops := t.c.ops.changes()
		drained := t.c.ops.isDrained(self)
		switch {
		case drained && joined:
			// An operator drained this member: leave, so that the others
			// take its partitions over, and contend for nothing.
			if err := g.sess.Leave(ctx, t.name); err != nil && ctx.Err() == nil {
				t.c.log.Warn("leaving a group failed", "group", t.name, "err", err)
			}
			joined = false
		case !drained && !joined:
			published = "" // a new record: the view comes with the next look
			if !t.join(ctx, g, self) || !t.awaitOthers(ctx, g) {
				return
			}
			joined = true
		}
		if drained {
			t.apply(ctx, g, self, nil, true)
		} else if members, err := g.sess.Members(ctx, t.name); err == nil {
			// Publish the view acted on, so that the others know this
			// member contends for the partitions that view gives it (see
			// takeVacant). A failure is retried at the next look.
			if view := t.apply(ctx, g, self, members, false); view != published {
				err := t.joinOnce(g, self, view)
				if err == nil {
					published = view
				} else if ctx.Err() == nil {
					t.c.log.Warn("publishing the group view failed", "group", t.name, "err", err)
				}
			}
		} else if ctx.Err() == nil {
			t.c.log.Warn("reading group members failed", "group", t.name, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-hints:
			if !ok {
				hints = nil // watch ended: the refresh ticker goes on
			}
			// Debounce: let a burst of changes settle into one view.
			if !backoff.Sleep(ctx, min(g.ttl/50, 20*time.Millisecond)) {
				return
			}
		case <-refresh.C:
		case <-t.kick:
		case <-ops:
		}
	}
}

// join makes this client a member of the group on session g, retrying
// until it succeeds or ctx ends.
func (t *GroupTask) join(ctx context.Context, g *generation, self string) bool {
	for attempt := 1; ; attempt++ {
		err := t.joinOnce(g, self, "")
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		t.c.log.Warn("joining a group failed", "group", t.name, "err", err, "attempt", attempt)
		if !backoff.Sleep(ctx, backoff.Wait(attempt, g.ttl/3)) {
			return false
		}
	}
}

// awaitOthers waits the initial rebalance delay if no partition of the
// group is held (or the backend cannot tell); it reports false if ctx ended
// first.
func (t *GroupTask) awaitOthers(ctx context.Context, g *generation) bool {
	d := t.opts.initial
	if d <= 0 {
		return true
	}
	if lister, ok := g.sess.(backend.LeaseLister); ok {
		held, err := t.listHeld(ctx, lister)
		if len(held) > 0 {
			return true // the group runs
		}
		if err != nil && ctx.Err() == nil {
			t.c.log.Warn("listing held leases failed; waiting the initial rebalance delay", "group", t.name, "err", err)
		}
	}
	return backoff.Sleep(ctx, d)
}

// joinOnce writes this member's record with view. A Stop does not cut it
// short: a Join that returned early could still reach the backend after
// the Leave of the shutdown that follows, and make this client a member
// again for as long as its session lasts; it ends with the session, or
// after a renewal period.
func (t *GroupTask) joinOnce(g *generation, self, view string) error {
	ctx, cancel := context.WithTimeout(g.ctx, g.ttl)
	defer cancel()
	return g.sess.Join(ctx, t.name, backend.Member{ID: self, Data: t.record(view)})
}

// record encodes this member's record with view.
func (t *GroupTask) record(view string) []byte {
	r := t.own
	r.View = view
	data, _ := json.Marshal(r)
	return data
}

// apply computes the view from members and starts and stops partitions to
// match it, and returns the view's hash. A drained member contends for
// nothing.
func (t *GroupTask) apply(ctx context.Context, g *generation, self string, members []backend.Member, drained bool) (view string) {
	var ids, owners []string
	var held map[int]bool
	var peers peerViews
	if !drained {
		var disagree bool
		ids, peers, disagree = t.checkMembers(self, members)
		owners = assign.Owners(t.name, ids, t.partitions, assign.Variant(t.opts.variant))
		held = t.heldPartitions(ctx, g, disagree)
		view = viewHash(ids)
	}

	t.mu.Lock()
	viewChanged := !slices.Equal(ids, t.view)
	if viewChanged {
		clear(t.standIns) // stand-ins last until the view changes
		// and vacancies are timed from it: a partition's owner in the new
		// view has its whole grace period to take it.
		clear(t.vacant)
	}
	t.view = ids
	want := make(map[int]bool)
	for p, o := range owners {
		if o == self {
			want[p] = true
		}
	}
	t.takeVacant(self, view, peers, ids, owners, held, want)
	for p := range t.standIns {
		if peers.shares(owners[p], view) {
			// The owner acts on this view: it contends for p, so hand
			// it back.
			delete(t.standIns, p)
			continue
		}
		want[p] = true
	}
	assigned := slices.Sorted(maps.Keys(want))
	assignedChanged := !slices.Equal(assigned, t.assigned)
	t.assigned = assigned
	var drop, start []int
	for _, p := range slices.Sorted(maps.Keys(t.active)) {
		if !want[p] {
			drop = append(drop, p)
		}
	}
	for _, p := range assigned {
		if _, ok := t.active[p]; !ok && !t.handingOff(p) {
			start = append(start, p)
		}
	}
	// Hand-offs first (they free leases for others), within the limit; the
	// rest waits for the tokens of its next batch (each look at the view
	// reads the group's held leases: once per batch, not once per token).
	if n, all := t.opts.limit.take(len(drop)+len(start)), len(drop)+len(start); n < all {
		drop = drop[:min(len(drop), n)]
		start = start[:min(len(start), n-len(drop))]
		t.retryAfter(t.opts.limit.wait(all - n))
	}
	var stop []*LeaderTask
	for _, p := range drop {
		lt := t.active[p]
		stop = append(stop, lt)
		delete(t.active, p)
		t.handing[lt] = p
	}
	t.mu.Unlock()

	for _, lt := range stop {
		if drained {
			lt.stop(RevokeDrained)
		} else {
			lt.moved.Store(true)
			lt.stop(RevokeStopped)
		}
		lt.whenDone(func() {
			t.mu.Lock()
			delete(t.handing, lt)
			t.mu.Unlock()
			t.poke()
		})
	}
	for _, p := range start {
		lt, err := t.c.start("partition", TermRef{Election: partitionName(t.name, p), Group: t.name, Partition: p}, t, t.schedule, t.body(p), t.topts)
		if err != nil {
			if t.ctx.Err() == nil {
				t.c.log.Error("starting a partition failed", "group", t.name, "partition", p, "err", err)
			}
			continue
		}
		t.mu.Lock()
		t.active[p] = lt
		t.mu.Unlock()
	}
	if viewChanged || assignedChanged {
		t.c.log.Info("group view changed", "group", t.name, "members", len(ids), "partitions", assigned)
		t.c.events.publish(ViewChanged{Group: t.name, Members: ids, Assigned: assigned, At: time.Now()})
	}
	return view
}

// peerViews maps the members that split the work as this one does to the
// views their sessions published.
type peerViews map[string][]string

// shares reports whether member id splits the work as this member does and
// has published view: it then contends for the partitions view gives it.
func (pv peerViews) shares(id, view string) bool {
	return slices.Contains(pv[id], view)
}

// poke makes the group look at its view again soon.
func (t *GroupTask) poke() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// retryAfter pokes the group after d (the hand-off limit's next token).
// t.mu is held.
func (t *GroupTask) retryAfter(d time.Duration) {
	if t.retry == nil {
		t.retry = time.AfterFunc(d, t.poke)
	} else {
		t.retry.Reset(d)
	}
}

// handingOff reports whether partition p is still being handed off. t.mu is
// held.
func (t *GroupTask) handingOff(p int) bool {
	for _, q := range t.handing {
		if q == p {
			return true
		}
	}
	return false
}

// checkMembers returns the sorted member ids of the view and, for each
// member that splits the work as this one does, the views its sessions
// published; it reports members that split the work differently (disagree
// is then true).
func (t *GroupTask) checkMembers(self string, members []backend.Member) (ids []string, peers peerViews, disagree bool) {
	sessions := map[string][]string{}
	peers = make(peerViews, len(members))
	records := make(map[string]decodedRecord, len(members))
	for _, m := range members {
		sessions[m.ID] = append(sessions[m.ID], m.Session)
		d, ok := t.records[m.Session]
		if !ok || d.data != string(m.Data) {
			d = decodedRecord{data: string(m.Data)}
			d.err = json.Unmarshal(m.Data, &d.rec)
		}
		records[m.Session] = d
		rec := d.rec
		detail := ""
		if d.err != nil {
			detail = "unreadable member record"
		} else if rec.Partitions != t.partitions || rec.Assignment != t.own.Assignment {
			detail = fmt.Sprintf("uses %d partitions with %s assignment, this member %d with %s",
				rec.Partitions, rec.Assignment, t.partitions, t.opts.variant)
		} else {
			peers[m.ID] = append(peers[m.ID], rec.View)
			continue // the common case: a member that agrees
		}
		disagree = true
		t.reportMismatch(m.ID, m.Session+": "+detail, detail)
	}
	t.records = records // those of the sessions gone are dropped
	if _, ok := sessions[self]; !ok {
		sessions[self] = nil // our own join may not show yet
	}
	for id, ss := range sessions {
		if len(ss) > 1 {
			slices.Sort(ss)
			t.reportMismatch(id, strings.Join(ss, ","), fmt.Sprintf("member id used by %d live sessions (%s)", len(ss), strings.Join(ss, ", ")))
		}
	}
	return slices.Sorted(maps.Keys(sessions)), peers, disagree
}

// reportMismatch logs and publishes a mismatch once per key.
func (t *GroupTask) reportMismatch(member, key, detail string) {
	t.mu.Lock()
	seen := t.reported[key]
	t.reported[key] = true
	t.mu.Unlock()
	if seen {
		return
	}
	t.c.log.Error("group members disagree", "group", t.name, "member", member, "detail", detail)
	t.c.events.publish(GroupMismatch{Group: t.name, Member: member, Detail: detail, At: time.Now()})
}

// heldPartitions returns the partitions whose leases are held now, or nil if
// the backend cannot tell.
func (t *GroupTask) heldPartitions(ctx context.Context, g *generation, disagree bool) map[int]bool {
	lister, ok := g.sess.(backend.LeaseLister)
	if !ok {
		return nil
	}
	// The list grows with the group: while the members agree, vacancies
	// are brief, and it is read every half grace period only; while they
	// disagree, on every refresh.
	t.mu.Lock()
	due := disagree || time.Since(t.lastHeld) >= t.grace()/2
	if due {
		t.lastHeld = time.Now()
	}
	t.mu.Unlock()
	if !due {
		return nil
	}
	held, err := t.listHeld(ctx, lister)
	if err != nil {
		if ctx.Err() == nil {
			t.c.log.Warn("listing held leases failed", "group", t.name, "err", err)
		}
		return nil
	}
	return held
}

// listHeld returns the group's partitions whose leases are held now.
func (t *GroupTask) listHeld(ctx context.Context, lister backend.LeaseLister) (map[int]bool, error) {
	prefix := t.name + "."
	names, err := lister.HeldLeases(ctx, prefix)
	if err != nil {
		return nil, err
	}
	held := make(map[int]bool, len(names))
	for _, n := range names {
		if p, err := strconv.Atoi(strings.TrimPrefix(n, prefix)); err == nil && p >= 0 && p < t.partitions {
			held[p] = true
		}
	}
	return held, nil
}

// takeVacant adds to standIns the partitions nobody has held for long
// enough that this member's turn to stand in has come: the k-th member after
// the owner in the partition's rendezvous order waits k grace periods. A
// partition whose owner has published the same view (and splits the work
// the same way) is never vacant: its owner contends for it, however long
// its backlog of acquisitions, and a stand-in would only delay it. With a
// hand-off limit, a member waits longer by the time the owner's limit takes
// to start all of the owner's partitions (assuming the owner has the same
// limit). A stand-in keeps a partition until the view changes or its owner
// publishes this view. t.mu is held.
func (t *GroupTask) takeVacant(self, view string, peers peerViews, ids, owners []string, held, want map[int]bool) {
	if held == nil {
		return
	}
	grace := t.grace()
	var backlog map[string]time.Duration
	if l := t.opts.limit; l != nil {
		backlog = make(map[string]time.Duration, len(ids))
		for _, o := range owners {
			backlog[o] += time.Duration(float64(time.Second) / l.rate)
		}
	}
	now := time.Now()
	for p := range t.partitions {
		if held[p] || want[p] || t.active[p] != nil || t.handingOff(p) || peers.shares(owners[p], view) {
			delete(t.vacant, p)
			continue
		}
		since, ok := t.vacant[p]
		if !ok {
			t.vacant[p] = now
			continue
		}
		rank := 0
		for _, m := range assign.Order(t.name, ids, p) {
			if m == owners[p] {
				continue
			}
			rank++
			if m == self {
				break
			}
		}
		if now.Sub(since) >= time.Duration(rank)*grace+backlog[owners[p]] {
			t.c.log.Warn("standing in for a vacant partition", "group", t.name, "partition", p, "owner", owners[p], "vacant_for", now.Sub(since))
			t.standIns[p] = true
			delete(t.vacant, p)
		}
	}
}

// grace is the vacancy grace period.
func (t *GroupTask) grace() time.Duration {
	if t.opts.grace > 0 {
		return t.opts.grace
	}
	return 2 * t.c.grantedTTL()
}

// shutdown leaves the group and hands every partition off, and waits.
func (t *GroupTask) shutdown() {
	var wg sync.WaitGroup
	if g := t.c.liveGeneration(); g != nil {
		wg.Go(func() {
			if err := g.sess.Leave(g.ctx, t.name); err != nil && g.ctx.Err() == nil {
				t.c.log.Warn("leaving a group failed; the membership ends with the session", "group", t.name, "err", err)
			}
		})
	}
	reason := RevokeStopped
	if context.Cause(t.ctx) == errClientClosing {
		reason = RevokeClosed
	}
	t.mu.Lock()
	if t.retry != nil {
		t.retry.Stop()
	}
	for p, lt := range t.active {
		t.handing[lt] = p
	}
	clear(t.active)
	all := slices.Collect(maps.Keys(t.handing))
	t.assigned = nil
	t.mu.Unlock()
	for _, lt := range all {
		lt.stop(reason)
	}
	for _, lt := range all {
		<-lt.done
	}
	wg.Wait()
}
