package backendtest

import (
	"errors"
	"slices"
	"testing"

	"github.com/simba-go/simba/backend"
)

// WithFingerprint gives the case ViewWritesNothing a description of
// everything the backend's server stores under the backend's keys that a
// write would change (for etcd the revisions of the keys under the prefix,
// for ZooKeeper the tree under the root with each znode's zxids, for the
// memory backend its sessions, grants and records). The case compares it
// before and after a view's reads, watches and close; without it the case
// is skipped. f must not be nil.
func WithFingerprint(f func(t *testing.T, b backend.Backend) string) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("simba/backendtest: WithFingerprint: nil function")
		}
		c.fingerprint = f
		return nil
	}
}

// view returns a view of the case's backend, closed at the end of the
// test, or skips the case when the backend is no backend.Viewer.
func (h *harness) view() backend.View {
	h.Helper()
	vr, ok := h.b.(backend.Viewer)
	if !ok {
		h.Skip("the backend does not implement backend.Viewer")
	}
	v, err := vr.View(h.op())
	if err != nil {
		h.Fatalf("View: %v", err)
	}
	if v == nil {
		h.Fatalf("View returned a nil view and no error")
	}
	h.Cleanup(func() {
		if err := v.Close(); err != nil {
			h.Logf("clean-up: View.Close: %v", err)
		}
	})
	return v
}

// viewScene is what sessions wrote for the view cases to read: records
// under "vw/", a member of group "vw" and a lease "vw.0".
type viewScene struct {
	s     backend.Session
	rec   backend.Records
	lease backend.Lease
}

// viewScene writes the scene with a session kept alive until the end.
func (h *harness) viewScene() viewScene {
	h.Helper()
	s := h.open()
	r := h.records(s)
	for _, k := range []string{"vw/a", "vw/b"} {
		_, err := r.PutRecord(h.op(), k, []byte("value of "+k), backend.Condition{})
		h.wantNoErr("PutRecord "+k, err)
	}
	_, err := r.PutRecord(h.op(), "other/x", []byte("x"), backend.Condition{})
	h.wantNoErr("PutRecord other/x", err)
	h.wantNoErr("Join", s.Join(h.op(), "vw", backend.Member{ID: "m1", Data: []byte("d1")}))
	return viewScene{s: s, rec: r, lease: h.acquire(s, "vw.0")}
}

// testViewReads: a view reads what sessions wrote, as the sessions' own
// reads do: records, a missing record, members, leases held.
func testViewReads(h *harness) {
	v := h.view()
	sc := h.viewScene()
	got, err := v.GetRecord(h.op(), "vw/a")
	if h.wantNoErr("View.GetRecord(vw/a)", err) && (string(got.Value) != "value of vw/a" || got.Version == 0) {
		h.Errorf("View.GetRecord(vw/a) = %+v", got)
	}
	want, err := sc.rec.GetRecord(h.op(), "vw/a")
	if h.wantNoErr("GetRecord(vw/a)", err) && want.Version != got.Version {
		h.Errorf("View.GetRecord(vw/a): version %d, the session reads %d", got.Version, want.Version)
	}
	_, err = v.GetRecord(h.op(), "vw/none")
	h.wantErr("View.GetRecord of a missing key", err, backend.ErrNoRecord)

	list, skipped, err := v.ListRecordsWithSkipped(h.op(), "vw/")
	if h.wantNoErr("View.ListRecordsWithSkipped(vw/)", err) {
		if keysOf(list) != "vw/a,vw/b" || len(skipped) != 0 {
			h.Errorf("View.ListRecordsWithSkipped(vw/) = %s, skipped %v; want vw/a,vw/b and nothing skipped", keysOf(list), skipped)
		}
	}
	members, skipped, err := v.MembersWithSkipped(h.op(), "vw")
	if h.wantNoErr("View.MembersWithSkipped(vw)", err) {
		if len(members) != 1 || members[0].ID != "m1" || members[0].Session != sc.s.ID() || string(members[0].Data) != "d1" || len(skipped) != 0 {
			h.Errorf("View.MembersWithSkipped(vw) = %+v, skipped %v; want member m1 of session %s alone", members, skipped, sc.s.ID())
		}
	}
	held, err := v.HeldLeases(h.op(), "vw.")
	if h.wantNoErr("View.HeldLeases(vw.)", err) && !slices.Equal(held, []string{"vw.0"}) {
		h.Errorf("View.HeldLeases(vw.) = %q, want [vw.0]", held)
	}
	h.wantNoErr("Release", sc.lease.Release(h.op()))
	held, err = v.HeldLeases(h.op(), "vw.")
	if h.wantNoErr("View.HeldLeases(vw.) after Release", err) && len(held) != 0 {
		h.Errorf("View.HeldLeases(vw.) after Release = %q, want none", held)
	}
	h.wantNoErr("Leave", sc.s.Leave(h.op(), "vw"))
	members, _, err = v.MembersWithSkipped(h.op(), "vw")
	if h.wantNoErr("View.MembersWithSkipped(vw) after Leave", err) && len(members) != 0 {
		h.Errorf("View.MembersWithSkipped(vw) after Leave = %+v, want none", members)
	}
}

// testViewWatch: a view's watches hint after sessions' writes and joins,
// and Close closes them and makes every later call fail with ErrClosed.
func testViewWatch(h *harness) {
	v := h.view()
	s := h.open()
	r := h.records(s)
	recs, err := v.WatchRecords(h.op(), "vw/")
	if !h.wantNoErr("View.WatchRecords(vw/)", err) {
		return
	}
	mems, err := v.WatchMembers(h.op(), "vw")
	if !h.wantNoErr("View.WatchMembers(vw)", err) {
		return
	}
	_, err = r.PutRecord(h.op(), "vw/a", []byte("a"), backend.Condition{})
	h.wantNoErr("PutRecord vw/a", err)
	h.wantHint(recs, opTimeout, "a session's PutRecord, on a view's record watch")
	h.wantNoErr("Join", s.Join(h.op(), "vw", backend.Member{ID: "m1"}))
	h.wantHint(mems, opTimeout, "a session's Join, on a view's member watch")
	drain(recs)
	h.wantNoErr("DeleteRecord vw/a", r.DeleteRecord(h.op(), "vw/a", backend.Condition{}))
	h.wantHint(recs, opTimeout, "a session's DeleteRecord, on a view's record watch")

	h.wantNoErr("View.Close", v.Close())
	h.waitClosed(recs, opTimeout, "a view's record watch after View.Close")
	h.waitClosed(mems, opTimeout, "a view's member watch after View.Close")
	_, err = v.GetRecord(h.op(), "vw/a")
	h.wantErr("View.GetRecord after Close", err, backend.ErrClosed)
	_, _, err = v.ListRecordsWithSkipped(h.op(), "vw/")
	h.wantErr("View.ListRecordsWithSkipped after Close", err, backend.ErrClosed)
	_, err = v.HeldLeases(h.op(), "")
	h.wantErr("View.HeldLeases after Close", err, backend.ErrClosed)
	if _, err := v.WatchRecords(h.op(), "vw/"); !errors.Is(err, backend.ErrClosed) {
		h.Errorf("View.WatchRecords after Close: error %v, want one wrapping ErrClosed", err)
	}
	h.wantNoErr("second View.Close", v.Close())
}

// testViewMalformed: a view skips and names what the sessions' listings
// skip (planted with WithMalformed).
func testViewMalformed(h *harness) {
	m := h.malformed
	if m.SpoilRecord == nil {
		h.Skip("no way to plant malformed entries (backendtest.WithMalformed)")
	}
	v := h.view()
	sc := h.viewScene()
	m.SpoilRecord(h.T, h.b, "vw/b")
	list, skipped, err := v.ListRecordsWithSkipped(h.op(), "vw/")
	if h.wantNoErr("View.ListRecordsWithSkipped(vw/)", err) {
		if keysOf(list) != "vw/a" {
			h.Errorf("View.ListRecordsWithSkipped(vw/) = %s, want vw/a", keysOf(list))
		}
		checkSkipped(h, "View.ListRecordsWithSkipped(vw/)", skipped, []string{"vw/b"})
	}
	_, err = v.GetRecord(h.op(), "vw/b")
	var me *backend.MalformedError
	if !errors.As(err, &me) || me.Key != "vw/b" {
		h.Errorf("View.GetRecord of a malformed record: error %v, want a *backend.MalformedError of key vw/b", err)
	}
	if m.PlantMember == nil {
		return
	}
	session := m.PlantMember(h.T, h.b, "vw")
	members, skipped, err := v.MembersWithSkipped(h.op(), "vw")
	if h.wantNoErr("View.MembersWithSkipped(vw)", err) {
		if len(members) != 1 || members[0].Session != sc.s.ID() {
			h.Errorf("View.MembersWithSkipped(vw) = %+v, want the member of session %s alone", members, sc.s.ID())
		}
		checkSkipped(h, "View.MembersWithSkipped(vw)", skipped, []string{session})
	}
}

// testViewWritesNothing: opening a view, reading everything through it,
// watching and closing it change nothing the server stores (see
// WithFingerprint).
func testViewWritesNothing(h *harness) {
	if _, ok := h.b.(backend.Viewer); !ok {
		h.Skip("the backend does not implement backend.Viewer")
	}
	fp := h.fingerprint
	if fp == nil {
		h.Skip("no fingerprint of the server's state (backendtest.WithFingerprint)")
	}
	h.viewScene()
	before := fp(h.T, h.b)
	v := h.view()
	_, err := v.GetRecord(h.op(), "vw/a")
	h.wantNoErr("View.GetRecord", err)
	_, err = v.GetRecord(h.op(), "vw/none")
	h.wantErr("View.GetRecord of a missing key", err, backend.ErrNoRecord)
	for _, prefix := range []string{"", "vw/", "none/"} {
		_, _, err = v.ListRecordsWithSkipped(h.op(), prefix)
		h.wantNoErr("View.ListRecordsWithSkipped("+prefix+")", err)
	}
	for _, g := range []string{"vw", "none"} {
		_, _, err = v.MembersWithSkipped(h.op(), g)
		h.wantNoErr("View.MembersWithSkipped("+g+")", err)
	}
	_, err = v.HeldLeases(h.op(), "")
	h.wantNoErr("View.HeldLeases", err)
	_, err = v.WatchRecords(h.op(), "")
	h.wantNoErr("View.WatchRecords", err)
	_, err = v.WatchMembers(h.op(), "none")
	h.wantNoErr("View.WatchMembers of a group never joined", err)
	h.wantNoErr("View.Close", v.Close())
	if after := fp(h.T, h.b); after != before {
		h.Errorf("a view's reads, watches and close changed what the server stores:\nbefore: %s\nafter:  %s", before, after)
	}
}
