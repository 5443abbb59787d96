package admin

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/records"
)

// openView opens an admin on the fixture's backend itself, which has a
// View (the fixture's planted wrapper has none).
func (f *fixture) openView(opts ...Option) *Admin {
	f.t.Helper()
	a, err := Open(f.t.Context(), f.b.Node("admin"), opts...)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { a.Close() })
	return a
}

// state is what the memory backend stores: a change means a write.
func (f *fixture) state() string {
	return fmt.Sprintf("sessions %v, grants %v, records %v", f.b.Sessions(), f.b.History(), f.b.Records())
}

// TestReadsOpenNoSession: on a backend with a View, Open and every read
// open no session and change nothing; the first operation opens one.
func TestReadsOpenNoSession(t *testing.T) {
	f := newFixture(t)
	before, opened := f.state(), f.b.Stats().Open
	a := f.openView()
	ctx := t.Context()
	snap, err := a.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantHealthy(t, snap)
	if _, err := a.Status(ctx, "report"); err != nil {
		t.Errorf("Status: %v", err)
	}
	if _, _, err := a.HistoryWithProblems(ctx, "report"); err != nil {
		t.Errorf("HistoryWithProblems: %v", err)
	}
	if _, err := a.Group(ctx, "billing"); err != nil {
		t.Errorf("Group: %v", err)
	}
	if _, _, err := a.Audit(ctx, AuditFilter{}); err != nil {
		t.Errorf("Audit: %v", err)
	}
	if got := f.b.Stats().Open; got != opened {
		t.Errorf("reads opened %d sessions, want none", got-opened)
	}
	if after := f.state(); after != before {
		t.Errorf("reads changed the backend:\nbefore %s\nafter  %s", before, after)
	}
	if err := a.Disable(ctx, "report", "maintenance"); err != nil {
		t.Fatal(err)
	}
	if got := f.b.Stats().Open; got != opened+1 {
		t.Errorf("after one operation, %d sessions opened, want 1", got-opened)
	}
	if err := a.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := a.Snapshot(ctx); err == nil {
		t.Error("Snapshot after Close: no error")
	}
	if err := a.Disable(ctx, "report", "again"); err == nil {
		t.Error("Disable after Close: no error")
	}
}

// TestOperationAfterSessionEnded: an admin whose session expired (an
// outage longer than its TTL) opens another at its next operation.
func TestOperationAfterSessionEnded(t *testing.T) {
	for _, kind := range []string{"view", "session only"} {
		t.Run(kind, func(t *testing.T) {
			f := newFixture(t)
			var a *Admin
			if kind == "view" {
				a = f.openView()
			} else {
				a = f.open()
			}
			ctx := t.Context()
			if err := a.Trigger(ctx, "report", "first"); err != nil {
				t.Fatal(err)
			}
			for _, id := range f.b.Sessions() {
				if strings.HasPrefix(id, "admin-") {
					f.b.ExpireSession(id)
				}
			}
			if err := a.Disable(ctx, "report", "after the expiry"); err != nil {
				t.Fatalf("Disable after the admin's session expired: %v", err)
			}
			if _, err := a.Snapshot(ctx); err != nil {
				t.Fatalf("Snapshot after the admin's session expired: %v", err)
			}
			ops, err := a.Ops(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if op := ops.Disables["report"]; op.Reason != "after the expiry" {
				t.Errorf("Disables[report] = %+v", op)
			}
		})
	}
}

// TestAuditTrail: each operation appends who, why, when and what it
// changed; Audit lists them newest first, by name; Ops says who disabled
// or drained what, since when and why.
func TestAuditTrail(t *testing.T) {
	f := newFixture(t)
	a := f.openView(WithOperator("alice@h1"))
	bob := a.As("bob@h2")
	ctx := t.Context()
	start := time.Now()
	f.put("status/report", `{"lease":"report","partition":-1,"holder":{"member":"m1","token":7}}`)
	steps := []struct {
		do      func() error
		op      string
		target  string
		by      string
		changed bool
		change  string // a part of it
	}{
		{func() error { return a.Disable(ctx, "report", "maintenance") }, "disable", "report", "alice@h1", true, "disabled; was enabled"},
		{func() error { return bob.Disable(ctx, "report", "still") }, "disable", "report", "bob@h2", false, "was disabled by alice@h1 since "},
		{func() error { return a.Enable(ctx, "report", "done") }, "enable", "report", "alice@h1", true, "enabled; was disabled by bob@h2 since "},
		{func() error { return a.Enable(ctx, "report", "twice") }, "enable", "report", "alice@h1", false, "nothing changed"},
		{func() error { return a.Trigger(ctx, "report", "now") }, "trigger", "report", "alice@h1", true, "trigger requested"},
		{func() error { return a.Resign(ctx, "report", 7, "move it") }, "resign", "report", "alice@h1", true, "resign of token 7 held by m1"},
		{func() error { return a.Drain(ctx, "m1", "reboot") }, "drain", "m1", "alice@h1", true, "drain of m1, who held 1 lease"},
		{func() error { return a.Undrain(ctx, "m1", "back") }, "undrain", "m1", "alice@h1", true, "undrained; was drained by alice@h1 since "},
		{func() error { return a.Undrain(ctx, "m1", "again") }, "undrain", "m1", "alice@h1", false, "nothing changed"},
	}
	for i, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("step %d (%s %s): %v", i, s.op, s.target, err)
		}
	}
	entries, problems, err := a.Audit(ctx, AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 0 {
		t.Errorf("problems: %v", problems)
	}
	if len(entries) != len(steps) {
		t.Fatalf("%d entries, want %d: %+v", len(entries), len(steps), entries)
	}
	for i, e := range entries {
		s := steps[len(steps)-1-i] // newest first
		if e.Op != s.op || e.Target != s.target || e.By != s.by || e.Changed != s.changed || !strings.Contains(e.Change, s.change) || e.At.Before(start) || e.V != records.AuditVersion {
			t.Errorf("entry %d = %+v, want %s of %s by %s, changed %v, change with %q", i, e, s.op, s.target, s.by, s.changed, s.change)
		}
	}
	if entries[0].Reason != "again" || entries[len(entries)-1].Reason != "maintenance" {
		t.Errorf("reasons: newest %q, oldest %q", entries[0].Reason, entries[len(entries)-1].Reason)
	}
	byName, _, err := a.Audit(ctx, AuditFilter{Name: "m1", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(byName) != 2 || byName[0].Reason != "again" || byName[1].Reason != "back" {
		t.Errorf("Audit(m1, limit 2) = %+v, want the two undrains, newest first", byName)
	}

	if err := a.Disable(ctx, "billing", "migration"); err != nil {
		t.Fatal(err)
	}
	if err := bob.Drain(ctx, "a", "kernel update"); err != nil {
		t.Fatal(err)
	}
	snap, err := a.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if op := snap.Ops.Disables["billing"]; op.By != "alice@h1" || op.Reason != "migration" || op.At.Before(start) {
		t.Errorf("Ops.Disables[billing] = %+v", op)
	}
	if op := snap.Ops.Drains["a"]; op.By != "bob@h2" || op.Reason != "kernel update" {
		t.Errorf("Ops.Drains[a] = %+v", op)
	}
	for _, e := range snap.Elections {
		if strings.HasPrefix(e.Name, "billing.") && (e.Disable == nil || e.Disable.Reason != "migration") {
			t.Errorf("election %s: Disable = %+v, want its group's", e.Name, e.Disable)
		}
	}
	for _, g := range snap.Groups {
		if g.Name != "billing" {
			continue
		}
		if g.Disable == nil || !strings.HasPrefix(DescribeOp(*g.Disable), "by alice@h1 since ") || !strings.HasSuffix(DescribeOp(*g.Disable), " UTC: migration") {
			t.Errorf("group billing: Disable %+v, described %q", g.Disable, DescribeOp(*g.Disable))
		}
		for _, m := range g.Members {
			if m.ID == "a" && (m.Drain == nil || m.Drain.By != "bob@h2") {
				t.Errorf("member a: Drain = %+v", m.Drain)
			}
		}
	}
}

// TestAuditProblems: entries that cannot be used are reported, not
// listed.
func TestAuditProblems(t *testing.T) {
	f := newFixture(t)
	a := f.openView()
	ctx := t.Context()
	if err := a.Trigger(ctx, "report", "fine"); err != nil {
		t.Fatal(err)
	}
	good := records.AuditKey(time.Now(), "0a")
	f.put("audit/garbage", `{"v":1}`)
	f.put(records.AuditKey(time.Now(), "0b"), `not json`)
	f.put(records.AuditKey(time.Now(), "0c"), `{"v":2,"op":"disable","at":"2025-01-01T00:00:00Z"}`)
	f.put(records.AuditKey(time.Now(), "0d"), `{"v":1,"op":"explode","at":"2025-01-01T00:00:00Z"}`)
	f.put(good, `{"v":1,"op":"enable","target":"x","at":"2025-01-01T00:00:00Z","by":"carol"}`)
	entries, problems, err := a.Audit(ctx, AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[0].Op != "trigger" || entries[1].By != "carol" {
		t.Errorf("entries %+v, want the trigger, then carol's enable (older)", entries)
	}
	wantReasons := []string{"not that of an audit entry", "not an audit entry (JSON)", "version 2, not 1", "unknown operation"}
	if len(problems) != len(wantReasons) {
		t.Fatalf("problems %v, want %d", problems, len(wantReasons))
	}
	for _, want := range wantReasons {
		found := false
		for _, p := range problems {
			found = found || strings.Contains(p.Reason, want)
		}
		if !found {
			t.Errorf("no problem says %q: %v", want, problems)
		}
	}
}

// TestAuditRetention: the writer of an entry prunes the entries beyond
// the newest records.AuditKeep and those older than records.AuditMaxAge,
// and leaves entries it cannot date alone.
func TestAuditRetention(t *testing.T) {
	f := newFixture(t)
	a := f.openView()
	ctx := t.Context()
	now := time.Now()
	old := records.AuditKey(now.Add(-records.AuditMaxAge-time.Hour), "01")
	f.put(old, `{"v":1,"op":"enable","target":"x","at":"2020-01-01T00:00:00Z"}`)
	f.put("audit/undated", `{"v":1}`)
	for i := range records.AuditKeep + 3 {
		f.put(records.AuditKey(now.Add(-time.Duration(records.AuditKeep+3-i)*time.Second), fmt.Sprintf("%04d", i)), `{"v":1,"op":"enable","target":"x","at":"2025-01-01T00:00:00Z"}`)
	}
	if err := a.Trigger(ctx, "report", "one more"); err != nil {
		t.Fatal(err)
	}
	list, err := f.rec.ListRecords(ctx, records.AuditPrefix)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, r := range list {
		keys[r.Key] = true
	}
	if len(list) != records.AuditKeep+1 || keys[old] || !keys["audit/undated"] {
		t.Errorf("%d entries left (old one kept: %v, undated kept: %v), want %d dated and the undated one", len(list), keys[old], keys["audit/undated"], records.AuditKeep)
	}
	for i := range 4 { // the oldest four of the 1003: beyond the newest 1000 with the new one
		if k := records.AuditKey(now.Add(-time.Duration(records.AuditKeep+3-i)*time.Second), fmt.Sprintf("%04d", i)); keys[k] != (i >= 4) {
			t.Errorf("entry %s kept: %v", k, keys[k])
		}
	}
}

// TestOperationWithoutSession: an operation whose session cannot
// be opened fails, writes nothing, and says why.
func TestOperationWithoutSession(t *testing.T) {
	f := newFixture(t)
	a := f.openView()
	f.b.Node("admin").Crash()
	before := f.state()
	err := a.Disable(t.Context(), "report", "x")
	if err == nil || !strings.Contains(err.Error(), `simba/admin: disable "report": opening a session: `) {
		t.Errorf("Disable through a crashed node: error %v, want one saying the session could not be opened", err)
	}
	if errors.Is(err, ErrAuditNotWritten) {
		t.Errorf("error %v says the operation took effect", err)
	}
	if after := f.state(); after != before {
		t.Errorf("a failed operation changed the backend:\nbefore %s\nafter  %s", before, after)
	}
}
