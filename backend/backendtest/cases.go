package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/simba-go/simba/backend"
)

// cases is the suite, in order.
var cases = []struct {
	name string
	run  func(*harness)
}{
	{"OpenIDTTL", testOpen},
	{"TokensIncrease", testTokens},
	{"OneHolder", testOneHolder},
	{"ReleaseNeverFreesNewer", testStaleRelease},
	{"CloseEndsSession", testClose},
	{"ExpiryEndsSession", testExpiry},
	{"KeepAliveRenews", testKeepAlive},
	{"AcquireHonoursContext", testAcquireContext},
	{"Membership", testMembership},
	{"InvalidInputs", testInvalid},
	{"LostOnExpiry", testLostOnExpiry},
	{"HeldLeases", testHeldLeases},
	{"QueueFIFO", testQueueFIFO},
	{"QueueLeaveOnContext", testQueueLeaveOnContext},
	{"QueueLeaveOnClose", testQueueLeaveOnClose},
	{"QueueReacquire", testQueueReacquire},
	{"QueueFencing", testQueueFencing},
	{"QueueHeldLeases", testQueueHeldLeases},
	{"Candidates", testCandidates},
	{"RecordsBasics", testRecordsBasics},
	{"RecordsFenced", testRecordsFenced},
	{"ReleaseWithRecords", testReleaseWithRecords},
	{"RecordsWatch", testRecordsWatch},
	{"RecordsInvalid", testRecordsInvalid},
	{"MalformedSkipped", testMalformedSkipped},
	{"ViewReads", testViewReads},
	{"ViewWatch", testViewWatch},
	{"ViewMalformed", testViewMalformed},
	{"ViewWritesNothing", testViewWritesNothing},
}

// grace is the time allowed, beyond the TTL, for a backend to notice an
// expiry and say so.
const grace = time.Second

func testOpen(h *harness) {
	a, b := h.open(), h.open()
	if a.ID() == "" || b.ID() == "" {
		h.Errorf("empty session ID: %q, %q", a.ID(), b.ID())
	}
	if a.ID() == b.ID() {
		h.Errorf("two sessions with the same ID %q", a.ID())
	}
	for _, s := range []backend.Session{a, b} {
		if s.TTL() <= 0 {
			h.Errorf("session %s: TTL() = %v, want > 0", s.ID(), s.TTL())
		}
		ttl, err := s.KeepAlive(h.op())
		if h.wantNoErr("KeepAlive of session "+s.ID(), err) && ttl <= 0 {
			h.Errorf("session %s: KeepAlive returned TTL %v, want > 0", s.ID(), ttl)
		}
		h.wantOpen(s.Done(), "Done of live session "+s.ID())
	}
}

func testTokens(h *harness) {
	ss := []backend.Session{h.open(), h.open(), h.open()}
	var last uint64
	check := func(s backend.Session, l backend.Lease, what string) {
		h.Helper()
		if l.Token() <= last {
			h.Errorf("%s by session %s: token %d, want > %d (the previous holding's)", what, s.ID(), l.Token(), last)
		}
		last = l.Token()
	}
	for round := range 4 {
		for _, s := range ss {
			l := h.acquire(s, "tokens")
			check(s, l, "Acquire")
			other := h.acquire(s, "tokens-other") // another name does not disturb
			if round%2 == 1 {
				l = h.acquire(s, "tokens")
				check(s, l, "re-Acquire")
			}
			h.wantNoErr("Release", l.Release(h.op()))
			h.wantNoErr("Release", other.Release(h.op()))
		}
	}
}

func testOneHolder(h *harness) {
	a, b := h.open(), h.open()
	ttl := maxTTL(a, b)
	la := h.acquire(a, "x")
	h.wantBlocked(b, "x", ttl/4, "another session holds it")

	// A waiting Acquire gets the lease when it is released.
	res := AcquireAsync(h.op(), b, "x")
	time.Sleep(ttl / 4)
	select {
	case r := <-res:
		h.Errorf("session %s: Acquire returned (%v, %v) while another session holds the lease", b.ID(), r.Lease, r.Err)
		return
	default:
	}
	h.wantNoErr("Release", la.Release(h.op()))
	r := <-res
	if !h.wantNoErr("waiting Acquire after Release", r.Err) {
		return
	}
	if r.Lease.Token() <= la.Token() {
		h.Errorf("token %d after hand-off, want > %d", r.Lease.Token(), la.Token())
	}
	h.wantNoErr("Release", r.Lease.Release(h.op()))
}

func testStaleRelease(h *harness) {
	a, b := h.open(), h.open()
	ttl := maxTTL(a, b)
	l1 := h.acquire(a, "x")
	l2 := h.acquire(a, "x") // the same session again: a new holding
	if l2.Token() <= l1.Token() {
		h.Errorf("re-Acquire: token %d, want > %d", l2.Token(), l1.Token())
	}
	h.waitClosed(l1.Lost(), 2*ttl+grace, "Lost of a holding replaced by re-Acquire")
	h.wantOpen(l2.Lost(), "Lost of the current holding")
	h.wantErr("Release of the replaced holding", l1.Release(h.op()), backend.ErrNotHeld)
	h.wantBlocked(b, "x", ttl/4, "the stale Release must not have freed the newer holding")

	h.wantNoErr("Release of the current holding", l2.Release(h.op()))
	h.wantErr("second Release", l2.Release(h.op()), backend.ErrNotHeld)
	lb := h.acquire(b, "x")
	if lb.Token() <= l2.Token() {
		h.Errorf("token %d after release, want > %d", lb.Token(), l2.Token())
	}
	h.wantErr("Release after another session acquired", l2.Release(h.op()), backend.ErrNotHeld)
	h.wantBlocked(a, "x", ttl/4, "a stale Release must not free another session's holding")
}

func testClose(h *harness) {
	a, b := h.open(), h.open()
	ttl := maxTTL(a, b)
	la := h.acquire(a, "x")
	h.wantNoErr("Join", a.Join(h.op(), "g", backend.Member{ID: "a"}))
	watch, err := a.WatchMembers(h.op(), "g")
	h.wantNoErr("WatchMembers", err)
	h.wantNoErr("Close", a.Close(h.op()))

	if lb, err := b.Acquire(h.timeout(ttl/2), "x"); h.wantNoErr("Acquire of a lease freed by Close, within TTL/2", err) {
		if lb.Token() <= la.Token() {
			h.Errorf("token %d after Close, want > %d", lb.Token(), la.Token())
		}
	}
	ms, err := b.Members(h.op(), "g")
	if h.wantNoErr("Members", err) {
		for _, m := range ms {
			if m.Session == a.ID() {
				h.Errorf("Members after Close still lists closed session %s: %+v", a.ID(), m)
			}
		}
	}
	h.waitClosed(la.Lost(), 2*ttl, "Lost of a lease of a closed session")
	h.waitClosed(a.Done(), 2*ttl, "Done of a closed session")
	if watch != nil {
		h.waitClosed(watch, 2*ttl, "member watch of a closed session")
	}
	wantSessionDone(h, a, "after Close")
	h.wantErr("Release after Close", la.Release(h.op()), backend.ErrNotHeld)
	h.wantNoErr("second Close", a.Close(h.op()))
}

// wantSessionDone checks that every call on s returns ErrSessionDone.
func wantSessionDone(h *harness, s backend.Session, when string) {
	h.Helper()
	_, err := s.KeepAlive(h.op())
	h.wantErr("KeepAlive "+when, err, backend.ErrSessionDone)
	l, err := s.Acquire(h.op(), "done")
	h.wantErr("Acquire "+when, err, backend.ErrSessionDone)
	if l != nil {
		h.Errorf("Acquire %s returned a lease", when)
	}
	h.wantErr("Join "+when, s.Join(h.op(), "g", backend.Member{ID: "x"}), backend.ErrSessionDone)
	h.wantErr("Leave "+when, s.Leave(h.op(), "g"), backend.ErrSessionDone)
	_, err = s.Members(h.op(), "g")
	h.wantErr("Members "+when, err, backend.ErrSessionDone)
	_, err = s.WatchMembers(h.op(), "g")
	h.wantErr("WatchMembers "+when, err, backend.ErrSessionDone)
}

func testExpiry(h *harness) {
	a, b, c := h.openIdle(), h.open(), h.open()
	la := h.acquire(a, "x")
	h.wantNoErr("Join", a.Join(h.op(), "g", backend.Member{ID: "a"}))
	start := time.Now()
	ttl, err := a.KeepAlive(h.op())
	if !h.wantNoErr("KeepAlive", err) {
		return
	}
	// A stops renewing. The server may not free x before start+ttl, and must
	// free it soon after.
	lb, err := b.Acquire(h.deadline(start.Add(2*ttl+grace)), "x")
	got := time.Now()
	if !h.wantNoErr(fmt.Sprintf("Acquire of a lease whose session stopped renewing, within 2×TTL+%v", grace), err) {
		return
	}
	if since, least := got.Sub(start), time.Duration(float64(ttl)*(1-h.clockRate)); since < least {
		if h.clockRate == 0 {
			h.Errorf("lease freed %v after the start of the last KeepAlive, before the granted TTL %v", since, ttl)
		} else {
			h.Errorf("lease freed %v after the start of the last KeepAlive, before the granted TTL %v less the %.1f%% the server's clock may run fast (%v)", since, ttl, 100*h.clockRate, least)
		}
	}
	if lb.Token() <= la.Token() {
		h.Errorf("token %d after expiry, want > %d", lb.Token(), la.Token())
	}
	h.eventually(2*ttl, "Members after expiry", func() error {
		ms, err := b.Members(h.op(), "g")
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.Session == a.ID() {
				return fmt.Errorf("still lists expired session %s", a.ID())
			}
		}
		return nil
	})
	h.waitClosed(a.Done(), 2*ttl+grace, "Done of an expired session")
	h.waitClosed(la.Lost(), 2*ttl+grace, "Lost of a lease of an expired session")
	h.eventually(2*ttl+grace, "KeepAlive of an expired session", func() error {
		if _, err := a.KeepAlive(h.op()); !errors.Is(err, backend.ErrSessionDone) {
			return fmt.Errorf("error %v, want one wrapping ErrSessionDone", err)
		}
		return nil
	})
	wantSessionDone(h, a, "after expiry")
	h.wantErr("Release of a lease of an expired session", la.Release(h.op()), backend.ErrNotHeld)
	h.wantBlocked(c, "x", ttl/4, "the expired session's Release must not free the new holder")
}

func testKeepAlive(h *harness) {
	a, b := h.openIdle(), h.open()
	ttl := maxTTL(a, b)
	la := h.acquire(a, "x")

	// B waits 3×TTL while A renews every TTL/3: B must not get the lease.
	res := AcquireAsync(h.timeout(3*ttl), b, "x")
	var r Acquired
renew:
	for {
		got, err := a.KeepAlive(h.op())
		if !h.wantNoErr("KeepAlive", err) {
			r = <-res
			break
		}
		ttl = got
		t := time.NewTimer(ttl / 3)
		select {
		case r = <-res:
			t.Stop()
			break renew
		case <-t.C:
		}
	}
	if r.Lease != nil {
		h.Errorf("session %s acquired x (token %d) while its holder renewed every TTL/3", b.ID(), r.Lease.Token())
		return
	}
	h.wantErr("Acquire while the holder renews", r.Err, context.DeadlineExceeded)
	h.wantOpen(a.Done(), "Done of a renewed session")
	h.wantOpen(la.Lost(), "Lost of a renewed session's lease")

	// A stops renewing: B gets the lease.
	if lb, err := b.Acquire(h.timeout(2*ttl+grace), "x"); h.wantNoErr("Acquire after the holder stopped renewing", err) {
		if lb.Token() <= la.Token() {
			h.Errorf("token %d, want > %d", lb.Token(), la.Token())
		}
	}
}

func testAcquireContext(h *harness) {
	a, b, c := h.open(), h.open(), h.open()
	ttl := maxTTL(a, b, c)
	la := h.acquire(a, "x")

	ctx, cancel := context.WithCancel(h.Context())
	res := AcquireAsync(ctx, b, "x")
	time.Sleep(ttl / 10)
	cancel()
	t := time.NewTimer(ttl / 2)
	var r Acquired
	select {
	case r = <-res:
		t.Stop()
	case <-t.C:
		h.Errorf("Acquire did not return within TTL/2 (%v) of its ctx being cancelled", ttl/2)
		r = <-res
	}
	if r.Lease != nil {
		h.Errorf("Acquire with a cancelled ctx returned a lease (token %d)", r.Lease.Token())
	}
	h.wantErr("Acquire with a cancelled ctx", r.Err, context.Canceled)

	// B left nothing behind: once A releases, C gets the lease at once.
	h.wantNoErr("Release", la.Release(h.op()))
	if lc, err := c.Acquire(h.timeout(ttl/2), "x"); h.wantNoErr("Acquire after a cancelled waiter", err) {
		h.wantNoErr("Release", lc.Release(h.op()))
	}

	// An Acquire whose ctx has already ended holds nothing, free lease or not.
	done, cancelDone := context.WithCancel(h.Context())
	cancelDone()
	for _, name := range []string{"y", "x"} {
		l, err := b.Acquire(done, name)
		if l != nil {
			h.Errorf("Acquire(%q) with a cancelled ctx returned a lease (token %d)", name, l.Token())
		}
		h.wantErr(fmt.Sprintf("Acquire(%q) with a cancelled ctx", name), err, context.Canceled)
		if lc, err := c.Acquire(h.timeout(ttl/2), name); h.wantNoErr(fmt.Sprintf("Acquire(%q) after an Acquire with a cancelled ctx", name), err) {
			h.wantNoErr("Release", lc.Release(h.op()))
		}
	}
}

func testMembership(h *harness) {
	a, b, c, d := h.open(), h.open(), h.open(), h.open()
	ttl := maxTTL(a, b, c, d)
	hintWait := 2*ttl + grace

	data := []byte("hello")
	h.wantNoErr("Join", a.Join(h.op(), "g", backend.Member{ID: "node-a", Session: "bogus", Data: data}))
	data[0] = 'X' // the backend keeps its own copy

	wctx, wcancel := context.WithCancel(h.Context())
	watch, err := b.WatchMembers(wctx, "g")
	if !h.wantNoErr("WatchMembers", err) {
		wcancel()
		return
	}
	want := map[string]backend.Member{a.ID(): {ID: "node-a", Session: a.ID(), Data: []byte("hello")}}
	h.wantMembers(b, "g", want, "after Join")

	big := bytes.Repeat([]byte{0xA5}, backend.MaxMemberData)
	step := func(what string, change func() error, update func()) {
		h.Helper()
		drain(watch)
		if !h.wantNoErr(what, change()) {
			return
		}
		update()
		h.wantHint(watch, hintWait, what)
		h.wantMembers(b, "g", want, "after "+what)
	}
	step("Join of another session", func() error {
		return c.Join(h.op(), "g", backend.Member{ID: "node-c", Data: big})
	}, func() { want[c.ID()] = backend.Member{ID: "node-c", Session: c.ID(), Data: big} })
	step("Join again with new data", func() error {
		return c.Join(h.op(), "g", backend.Member{ID: "node-c", Data: []byte("v2")})
	}, func() { want[c.ID()] = backend.Member{ID: "node-c", Session: c.ID(), Data: []byte("v2")} })
	step("Leave", func() error { return c.Leave(h.op(), "g") }, func() { delete(want, c.ID()) })
	step("Join of a fourth session", func() error {
		return d.Join(h.op(), "g", backend.Member{ID: "node-a"}) // IDs may repeat
	}, func() { want[d.ID()] = backend.Member{ID: "node-a", Session: d.ID()} })
	step("Close of a member's session", func() error { return d.Close(h.op()) }, func() { delete(want, d.ID()) })

	h.wantNoErr("Leave of a group never joined", a.Leave(h.op(), "other"))
	h.wantNoErr("Leave of a group already left", c.Leave(h.op(), "g"))
	if ms, err := b.Members(h.op(), "empty"); h.wantNoErr("Members of an empty group", err) && len(ms) != 0 {
		h.Errorf("Members of an empty group: %+v", ms)
	}

	wcancel()
	h.waitClosed(watch, hintWait, "member watch after its ctx was cancelled")
}

// wantMembers checks, allowing time for the view to settle, that s sees
// exactly want (by session ID) in group, ordered by Session, and that the
// result is the caller's copy.
func (h *harness) wantMembers(s backend.Session, group string, want map[string]backend.Member, when string) {
	h.Helper()
	var wantList []backend.Member
	for _, id := range slices.Sorted(maps.Keys(want)) {
		wantList = append(wantList, want[id])
	}
	h.eventually(2*maxTTL(s)+grace, "Members "+when, func() error {
		ms, err := s.Members(h.op(), group)
		if err != nil {
			return err
		}
		if !equalMembers(ms, wantList) {
			return fmt.Errorf("got %s, want %s", formatMembers(ms), formatMembers(wantList))
		}
		for i := range ms { // scribble on the result: the next read must not see it
			for j := range ms[i].Data {
				ms[i].Data[j] ^= 0xFF
			}
		}
		again, err := s.Members(h.op(), group)
		if err == nil && !equalMembers(again, wantList) {
			return fmt.Errorf("changing the Data returned by Members changed the group: got %s", formatMembers(again))
		}
		return nil
	})
}

func equalMembers(a, b []backend.Member) bool {
	return slices.EqualFunc(a, b, func(x, y backend.Member) bool {
		return x.ID == y.ID && x.Session == y.Session && bytes.Equal(x.Data, y.Data)
	})
}

func formatMembers(ms []backend.Member) string {
	var sb strings.Builder
	sb.WriteString("[")
	for i, m := range ms {
		if i > 0 {
			sb.WriteString(" ")
		}
		data := string(m.Data)
		if len(data) > 16 {
			data = fmt.Sprintf("%.16s…(%d bytes)", data, len(m.Data))
		}
		fmt.Fprintf(&sb, "{%s %s %q}", m.ID, m.Session, data)
	}
	sb.WriteString("]")
	return sb.String()
}

// badNames are names that every backend must reject.
var badNames = []string{
	"", strings.Repeat("a", 129), ".x", "-x", "_x", "a/b", "/a", "a b", " a", "a\n", "a\x00", "é", "a:b", "a*",
}

// goodNames are edge cases that every backend must accept.
var goodNames = []string{"a", "0", "Z9", "a.b_c-D", "g.15", strings.Repeat("z", 128)}

func testInvalid(h *harness) {
	a := h.open()
	for _, name := range badNames {
		var l backend.Lease
		err := catch(func() (err error) { l, err = a.Acquire(h.op(), name); return err })
		switch {
		case l != nil:
			h.Errorf("Acquire(%q) accepted an invalid name (token %d)", name, l.Token())
			_ = l.Release(h.op())
		case err == nil:
			h.Errorf("Acquire(%q) returned neither a lease nor an error", name)
		case errors.Is(err, context.DeadlineExceeded):
			h.Errorf("Acquire(%q) blocked instead of rejecting the name: %v", name, err)
		case strings.HasPrefix(err.Error(), "panic:"):
			h.Errorf("Acquire(%q): %v", name, err)
		}
		groupCalls := map[string]func() error{
			"Join":  func() error { return a.Join(h.op(), name, backend.Member{ID: "a"}) },
			"Leave": func() error { return a.Leave(h.op(), name) },
			"Members": func() error {
				_, err := a.Members(h.op(), name)
				return err
			},
			"WatchMembers": func() error {
				_, err := a.WatchMembers(h.op(), name)
				return err
			},
		}
		for _, call := range slices.Sorted(maps.Keys(groupCalls)) {
			if err := catch(groupCalls[call]); err == nil {
				h.Errorf("%s(%q) accepted an invalid group name", call, name)
			} else if strings.HasPrefix(err.Error(), "panic:") {
				h.Errorf("%s(%q): %v", call, name, err)
			}
		}
	}
	for _, name := range goodNames {
		if l, err := a.Acquire(h.op(), name); h.wantNoErr(fmt.Sprintf("Acquire(%q)", name), err) {
			h.wantNoErr("Release", l.Release(h.op()))
		}
		h.wantNoErr(fmt.Sprintf("Join(%q)", name), a.Join(h.op(), name, backend.Member{ID: "a"}))
		h.wantNoErr(fmt.Sprintf("Leave(%q)", name), a.Leave(h.op(), name))
	}
	tooBig := make([]byte, backend.MaxMemberData+1)
	if err := catch(func() error { return a.Join(h.op(), "g", backend.Member{ID: "a", Data: tooBig}) }); err == nil {
		h.Errorf("Join accepted %d bytes of member data, more than MaxMemberData (%d)", len(tooBig), backend.MaxMemberData)
	} else if strings.HasPrefix(err.Error(), "panic:") {
		h.Errorf("Join with too much data: %v", err)
	}
	h.wantNoErr("Join with MaxMemberData bytes", a.Join(h.op(), "g", backend.Member{ID: "a", Data: tooBig[:backend.MaxMemberData]}))
	_, err := a.KeepAlive(h.op())
	h.wantNoErr("KeepAlive after invalid calls", err)
}

func testLostOnExpiry(h *harness) {
	a, b := h.openIdle(), h.open()
	ttl := maxTTL(a, b)
	lx, ly := h.acquire(a, "x"), h.acquire(a, "y")
	// A never renews: the server expires it within its TTL of Open.
	h.waitClosed(lx.Lost(), 2*ttl+grace, "Lost of a lease of an expired session")
	h.waitClosed(ly.Lost(), 2*ttl+grace, "Lost of a second lease of an expired session")
	h.waitClosed(a.Done(), 2*ttl+grace, "Done of an expired session")
	if lb, err := b.Acquire(h.timeout(2*ttl+grace), "x"); h.wantNoErr("Acquire after the holder expired", err) {
		if lb.Token() <= lx.Token() {
			h.Errorf("token %d, want > %d", lb.Token(), lx.Token())
		}
	}
}

// testHeldLeases checks the optional backend.LeaseLister capability, when the
// session has it: held leases under a prefix are listed, sorted, whoever holds
// them; released ones are not.
func testHeldLeases(h *harness) {
	a, b := h.open(), h.open()
	lister, ok := a.(backend.LeaseLister)
	if !ok {
		h.Skip("the session does not implement backend.LeaseLister")
	}
	la := h.acquire(a, "held.2")
	lb := h.acquire(b, "held.10")
	other := h.acquire(b, "heldx")
	names, err := lister.HeldLeases(h.op(), "held.")
	h.wantNoErr("HeldLeases", err)
	if want := []string{"held.10", "held.2"}; !slices.Equal(names, want) {
		h.Errorf("HeldLeases(%q) = %q, want %q", "held.", names, want)
	}
	h.wantNoErr("Release", lb.Release(h.op()))
	names, err = lister.HeldLeases(h.op(), "held.")
	h.wantNoErr("HeldLeases", err)
	if want := []string{"held.2"}; !slices.Equal(names, want) {
		h.Errorf("after a release, HeldLeases(%q) = %q, want %q", "held.", names, want)
	}
	h.wantNoErr("Release", la.Release(h.op()))
	h.wantNoErr("Release", other.Release(h.op()))
}
