package backendtest

import (
	"bytes"
	"errors"
	"slices"
	"strings"

	"github.com/simba-go/simba/backend"
)

// records returns s as a backend.Records, or skips the case.
func (h *harness) records(s backend.Session) backend.Records {
	r, ok := s.(backend.Records)
	if !ok {
		h.Skip("the session does not implement backend.Records")
	}
	return r
}

// testRecordsBasics: put, get, list, versions, compare-and-set, delete; a
// failed condition changes nothing; records outlive their session.
func testRecordsBasics(h *harness) {
	a := h.open()
	ra := h.records(a)
	_, err := ra.GetRecord(h.op(), "st/x")
	h.wantErr("GetRecord of a missing key", err, backend.ErrNoRecord)

	r1, err := ra.PutRecord(h.op(), "st/x", []byte("one"), backend.Condition{})
	h.wantNoErr("PutRecord", err)
	if r1.Key != "st/x" || string(r1.Value) != "one" || r1.Version == 0 || r1.Token != 0 {
		h.Errorf("PutRecord returned %+v", r1)
	}
	_, err = ra.PutRecord(h.op(), "st/x", []byte("lost"), backend.Condition{IfVersion: true, Version: 0})
	h.wantErr("PutRecord requiring no record", err, backend.ErrConflict)
	_, err = ra.PutRecord(h.op(), "st/x", []byte("lost"), backend.Condition{IfVersion: true, Version: r1.Version + 1000})
	h.wantErr("PutRecord with a wrong version", err, backend.ErrConflict)
	r2, err := ra.PutRecord(h.op(), "st/x", []byte("two"), backend.Condition{IfVersion: true, Version: r1.Version})
	h.wantNoErr("PutRecord with the right version", err)
	if r2.Version == r1.Version {
		h.Errorf("version did not change on a write: %d", r2.Version)
	}
	got, err := ra.GetRecord(h.op(), "st/x")
	h.wantNoErr("GetRecord", err)
	if string(got.Value) != "two" || got.Version != r2.Version {
		h.Errorf("GetRecord = %+v, want value two, version %d", got, r2.Version)
	}
	_, err = ra.PutRecord(h.op(), "st/y", []byte("y"), backend.Condition{IfVersion: true})
	h.wantNoErr("PutRecord requiring no record, of a new key", err)
	_, err = ra.PutRecord(h.op(), "other/z", []byte("z"), backend.Condition{})
	h.wantNoErr("PutRecord", err)

	// Records outlive the session that wrote them.
	h.wantNoErr("Close", a.Close(h.op()))
	rb := h.records(h.open())
	list, err := rb.ListRecords(h.op(), "st/")
	h.wantNoErr("ListRecords", err)
	var keys []string
	for _, r := range list {
		keys = append(keys, r.Key)
	}
	if strings.Join(keys, ",") != "st/x,st/y" {
		h.Errorf("ListRecords(st/) = %q, want st/x, st/y", keys)
	}
	if len(list) == 2 && !bytes.Equal(list[0].Value, []byte("two")) {
		h.Errorf("ListRecords: st/x = %q", list[0].Value)
	}
	h.wantErr("DeleteRecord with a wrong version", rb.DeleteRecord(h.op(), "st/x", backend.Condition{IfVersion: true, Version: r1.Version}), backend.ErrConflict)
	h.wantNoErr("DeleteRecord", rb.DeleteRecord(h.op(), "st/x", backend.Condition{IfVersion: true, Version: r2.Version}))
	h.wantNoErr("DeleteRecord of a missing key", rb.DeleteRecord(h.op(), "st/x", backend.Condition{}))
	_, err = rb.GetRecord(h.op(), "st/x")
	h.wantErr("GetRecord after DeleteRecord", err, backend.ErrNoRecord)
}

// testRecordsFenced: a fenced write holds only for the lease's current
// holding, so a deposed holder can never overwrite what a newer one wrote.
func testRecordsFenced(h *harness) {
	a, b := h.open(), h.open()
	ra, rb := h.records(a), h.records(b)
	la := h.acquire(a, "fenced")
	fa := backend.Condition{Lease: "fenced", Token: la.Token()}
	r, err := ra.PutRecord(h.op(), "status/fenced", []byte("a"), fa)
	h.wantNoErr("fenced PutRecord by the holder", err)
	if r.Token != la.Token() {
		h.Errorf("record token %d, want %d", r.Token, la.Token())
	}
	_, err = rb.PutRecord(h.op(), "status/fenced", []byte("b"), fa)
	h.wantErr("fenced PutRecord by another session with the holder's token", err, backend.ErrConflict)

	h.wantNoErr("Release", la.Release(h.op()))
	lb := h.acquire(b, "fenced")
	fb := backend.Condition{Lease: "fenced", Token: lb.Token()}
	_, err = rb.PutRecord(h.op(), "status/fenced", []byte("b"), fb)
	h.wantNoErr("fenced PutRecord by the new holder", err)
	_, err = ra.PutRecord(h.op(), "status/fenced", []byte("stale"), fa)
	h.wantErr("fenced PutRecord by the deposed holder", err, backend.ErrConflict)
	h.wantErr("fenced DeleteRecord by the deposed holder", ra.DeleteRecord(h.op(), "status/fenced", fa), backend.ErrConflict)
	got, err := rb.GetRecord(h.op(), "status/fenced")
	h.wantNoErr("GetRecord", err)
	if string(got.Value) != "b" || got.Token != lb.Token() {
		h.Errorf("after the deposed holder's writes: %+v, want b with token %d", got, lb.Token())
	}
	h.wantNoErr("Release", lb.Release(h.op()))
}

// testReleaseWithRecords (when leases implement backend.RecordReleaser):
// the records are written with the holding's token and the lease is free
// at once; a holding that has ended writes nothing and reports ErrNotHeld;
// a record written with a newer token is left as it is.
func testReleaseWithRecords(h *harness) {
	a, b := h.open(), h.open()
	ra, rb := h.records(a), h.records(b)
	la := h.acquire(a, "rwr")
	rel, ok := la.(backend.RecordReleaser)
	if !ok {
		h.Skip("the lease does not implement backend.RecordReleaser")
	}
	_, err := ra.PutRecord(h.op(), "status/rwr", []byte("running"), backend.Condition{Lease: "rwr", Token: la.Token()})
	h.wantNoErr("fenced PutRecord", err)
	h.wantNoErr("ReleaseWithRecords", rel.ReleaseWithRecords(h.op(), []backend.Record{
		{Key: "status/rwr", Value: []byte("handed off")},
		{Key: "history/rwr/01", Value: []byte("run 1")},
	}))
	for key, want := range map[string]string{"status/rwr": "handed off", "history/rwr/01": "run 1"} {
		got, err := rb.GetRecord(h.op(), key)
		h.wantNoErr("GetRecord "+key, err)
		if string(got.Value) != want || got.Token != la.Token() {
			h.Errorf("%s = %q with token %d, want %q with token %d", key, got.Value, got.Token, want, la.Token())
		}
	}
	select {
	case <-la.Lost():
		h.Errorf("Lost closed by the holding's own ReleaseWithRecords")
	default:
	}
	lb := h.acquire(b, "rwr") // free at once: no wait for a TTL

	// The ended holding writes nothing.
	err = rel.ReleaseWithRecords(h.op(), []backend.Record{{Key: "status/rwr", Value: []byte("stale")}})
	h.wantErr("ReleaseWithRecords of an ended holding", err, backend.ErrNotHeld)
	_, err = rb.PutRecord(h.op(), "status/rwr", []byte("b"), backend.Condition{Lease: "rwr", Token: lb.Token()})
	h.wantNoErr("fenced PutRecord by the new holder", err)
	if got, err := rb.GetRecord(h.op(), "status/rwr"); err != nil || string(got.Value) != "b" {
		h.Errorf("status/rwr = %q, %v after a stale ReleaseWithRecords; want b", got.Value, err)
	}

	h.wantNoErr("Release", lb.Release(h.op()))

	// A record written with a newer token (fenced by another lease, where
	// tokens are comparable across names) is kept; the rest is written and
	// the lease released.
	lx := h.acquire(a, "rwr")
	ly := h.acquire(b, "rwr-other")
	if ly.Token() > lx.Token() {
		_, err = rb.PutRecord(h.op(), "shared/rwr", []byte("newer"), backend.Condition{Lease: "rwr-other", Token: ly.Token()})
		h.wantNoErr("fenced PutRecord", err)
		h.wantNoErr("ReleaseWithRecords", lx.(backend.RecordReleaser).ReleaseWithRecords(h.op(), []backend.Record{
			{Key: "shared/rwr", Value: []byte("older")},
			{Key: "status/rwr", Value: []byte("x")},
		}))
		if got, err := ra.GetRecord(h.op(), "shared/rwr"); err != nil || string(got.Value) != "newer" {
			h.Errorf("shared/rwr = %q, %v; want the newer write kept", got.Value, err)
		}
		if got, err := ra.GetRecord(h.op(), "status/rwr"); err != nil || string(got.Value) != "x" {
			h.Errorf("status/rwr = %q, %v; want x", got.Value, err)
		}
		h.acquire(b, "rwr") // released
	} else {
		h.wantNoErr("Release", lx.Release(h.op()))
	}
	h.wantNoErr("Release", ly.Release(h.op()))
}

// testRecordsWatch: a watch hints writes and deletes under its prefix, and
// the records a ReleaseWithRecords writes there.
func testRecordsWatch(h *harness) {
	a, b := h.open(), h.open()
	ra, rb := h.records(a), h.records(b)
	hints, err := ra.WatchRecords(h.op(), "ops/")
	h.wantNoErr("WatchRecords", err)
	drain(hints)
	_, err = rb.PutRecord(h.op(), "ops/disable/x", []byte("1"), backend.Condition{})
	h.wantNoErr("PutRecord", err)
	h.wantHint(hints, opTimeout, "after a put under the prefix")
	h.wantNoErr("DeleteRecord", rb.DeleteRecord(h.op(), "ops/disable/x", backend.Condition{}))
	h.wantHint(hints, opTimeout, "after a delete under the prefix")

	// A ReleaseWithRecords that writes under the prefix is a change too.
	// Kills the mutant backend/memory/lease.go:70:4:call
	// (b.recordChanged(r.Key) removed from ReleaseWithRecords): fails with
	// "no member-watch hint within 10s after a ReleaseWithRecords writing
	// under the prefix".
	l := h.acquire(b, "watched")
	rel, ok := l.(backend.RecordReleaser)
	if !ok {
		h.wantNoErr("Release", l.Release(h.op()))
		return
	}
	drain(hints)
	h.wantNoErr("ReleaseWithRecords", rel.ReleaseWithRecords(h.op(), []backend.Record{{Key: "ops/disable/y", Value: []byte("1")}}))
	h.wantHint(hints, opTimeout, "a ReleaseWithRecords writing under the prefix")
}

// testRecordsInvalid: bad keys and values are refused, never a panic.
func testRecordsInvalid(h *harness) {
	r := h.records(h.open())
	for _, key := range []string{"", "/a", "a/", "a//b", "a b", "ä", strings.Repeat("k", 513)} {
		_, err := r.PutRecord(h.op(), key, nil, backend.Condition{})
		if err == nil {
			h.Errorf("PutRecord(%q): no error", key)
		}
		if _, err := r.GetRecord(h.op(), key); err == nil || errors.Is(err, backend.ErrNoRecord) {
			h.Errorf("GetRecord(%q): error %v, want an invalid-key error", key, err)
		}
	}
	_, err := r.PutRecord(h.op(), "big", make([]byte, backend.MaxRecordValue+1), backend.Condition{})
	if err == nil {
		h.Errorf("PutRecord of %d bytes: no error", backend.MaxRecordValue+1)
	}
	_, err = r.PutRecord(h.op(), "max", make([]byte, backend.MaxRecordValue), backend.Condition{})
	h.wantNoErr("PutRecord of MaxRecordValue bytes", err)
}

// testMalformedSkipped: a stored entry that is not a record (or not a
// member) of the backend does not fail a listing: ListRecords and Members
// skip it and list the rest, GetRecord returns a *backend.MalformedError
// naming its key, SkipReporter (if implemented) names what was skipped,
// and the entry can still be deleted or overwritten. Planting needs the
// backend's own hooks (WithMalformed); without them only SkipReporter's
// agreement with the plain listings is checked.
func testMalformedSkipped(h *harness) {
	a := h.open()
	ra := h.records(a)
	for _, k := range []string{"mal/a", "mal/b", "mal/c"} {
		_, err := ra.PutRecord(h.op(), k, []byte("value of "+k), backend.Condition{})
		h.wantNoErr("PutRecord "+k, err)
	}
	h.wantNoErr("Join", a.Join(h.op(), "mal", backend.Member{ID: "a", Data: []byte("d")}))
	sr, reports := a.(backend.SkipReporter)
	checkListing := func(wantKeys string, wantSkipped []string) {
		h.Helper()
		list, err := ra.ListRecords(h.op(), "mal/")
		if h.wantNoErr("ListRecords(mal/)", err) && keysOf(list) != wantKeys {
			h.Errorf("ListRecords(mal/) = %s, want %s", keysOf(list), wantKeys)
		}
		if !reports {
			return
		}
		list, skipped, err := sr.ListRecordsWithSkipped(h.op(), "mal/")
		if !h.wantNoErr("ListRecordsWithSkipped(mal/)", err) {
			return
		}
		if keysOf(list) != wantKeys {
			h.Errorf("ListRecordsWithSkipped(mal/) = %s, want %s", keysOf(list), wantKeys)
		}
		checkSkipped(h, "ListRecordsWithSkipped(mal/)", skipped, wantSkipped)
	}
	checkMembers := func(wantSkipped []string) {
		h.Helper()
		ms, err := a.Members(h.op(), "mal")
		if h.wantNoErr("Members(mal)", err) && (len(ms) != 1 || ms[0].ID != "a" || ms[0].Session != a.ID()) {
			h.Errorf("Members(mal) = %+v, want member a of session %s alone", ms, a.ID())
		}
		if !reports {
			return
		}
		ms, skipped, err := sr.MembersWithSkipped(h.op(), "mal")
		if !h.wantNoErr("MembersWithSkipped(mal)", err) {
			return
		}
		if len(ms) != 1 || ms[0].ID != "a" || string(ms[0].Data) != "d" {
			h.Errorf("MembersWithSkipped(mal) = %+v, want member a alone", ms)
		}
		checkSkipped(h, "MembersWithSkipped(mal)", skipped, wantSkipped)
	}
	checkListing("mal/a,mal/b,mal/c", nil)
	checkMembers(nil)

	m := h.malformed
	if m.SpoilRecord == nil {
		h.Skip("no way to plant malformed entries (backendtest.WithMalformed)")
	}
	m.SpoilRecord(h.T, h.b, "mal/b")
	checkListing("mal/a,mal/c", []string{"mal/b"})
	_, err := ra.GetRecord(h.op(), "mal/b")
	var me *backend.MalformedError
	switch {
	case !errors.As(err, &me):
		h.Errorf("GetRecord of a malformed record: error %v, want a *backend.MalformedError", err)
	case me.Key != "mal/b" || me.Reason == "":
		h.Errorf("GetRecord of a malformed record: %+v, want key mal/b and a reason", me)
	case errors.Is(err, backend.ErrNoRecord):
		h.Errorf("GetRecord of a malformed record: error %v wraps ErrNoRecord, but something is stored there", err)
	}
	if got, err := ra.GetRecord(h.op(), "mal/a"); h.wantNoErr("GetRecord beside a malformed record", err) && string(got.Value) != "value of mal/a" {
		h.Errorf("GetRecord(mal/a) = %q", got.Value)
	}
	// Whoever finds it can remove it, or write a record over it.
	h.wantNoErr("DeleteRecord of a malformed record", ra.DeleteRecord(h.op(), "mal/b", backend.Condition{}))
	checkListing("mal/a,mal/c", nil)
	m.SpoilRecord(h.T, h.b, "mal/c")
	_, err = ra.PutRecord(h.op(), "mal/c", []byte("again"), backend.Condition{})
	h.wantNoErr("unfenced PutRecord over a malformed record", err)
	checkListing("mal/a,mal/c", nil)

	if m.PlantMember == nil {
		return
	}
	session := m.PlantMember(h.T, h.b, "mal")
	checkMembers([]string{session})
}

// keysOf joins the keys of list with commas.
func keysOf(list []backend.Record) string {
	keys := make([]string, len(list))
	for i, r := range list {
		keys[i] = r.Key
	}
	return strings.Join(keys, ",")
}

// checkSkipped checks that skipped names exactly keys, in order, each with
// a reason.
func checkSkipped(h *harness, what string, skipped []backend.MalformedError, keys []string) {
	h.Helper()
	got := make([]string, len(skipped))
	for i, m := range skipped {
		got[i] = m.Key
		if m.Reason == "" {
			h.Errorf("%s: skipped %q without a reason", what, m.Key)
		}
	}
	if !slices.Equal(got, keys) {
		h.Errorf("%s: skipped %q, want %q", what, got, keys)
	}
}
