package admin

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// planted is a backend whose sessions show, besides what the memory
// backend keeps, records and lease names that the memory backend would
// refuse to store (keys with spaces, say), as a foreign writer could leave
// them in etcd.
type planted struct {
	backend.Backend
	records []backend.Record
	leases  []string
}

func (p *planted) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	s, err := p.Backend.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	return &plantedSession{Session: s, Records: s.(backend.Records), lister: s.(backend.LeaseLister), p: p}, nil
}

type plantedSession struct {
	backend.Session
	backend.Records
	lister backend.LeaseLister
	p      *planted
}

func (s *plantedSession) ListRecords(ctx context.Context, prefix string) ([]backend.Record, error) {
	out, err := s.Records.ListRecords(ctx, prefix)
	if err != nil {
		return nil, err
	}
	for _, r := range s.p.records {
		if strings.HasPrefix(r.Key, prefix) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(x, y backend.Record) int { return strings.Compare(x.Key, y.Key) })
	return out, nil
}

func (s *plantedSession) GetRecord(ctx context.Context, key string) (backend.Record, error) {
	for _, r := range s.p.records {
		if r.Key == key {
			return r, nil
		}
	}
	return s.Records.GetRecord(ctx, key)
}

func (s *plantedSession) HeldLeases(ctx context.Context, prefix string) ([]string, error) {
	out, err := s.lister.HeldLeases(ctx, prefix)
	if err != nil {
		return nil, err
	}
	for _, n := range s.p.leases {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// fixture is a backend with what healthy nodes leave: the status and
// history of a scheduled election "report", the statuses of group
// "billing" (2 partitions) and its member "a", a disable of "ingest" and a
// drain of "z".
type fixture struct {
	t    *testing.T
	b    *memory.Backend
	p    *planted
	rec  backend.Records // a session of its own, to write records
	sess backend.Session
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	s, err := b.Node("writer").Open(t.Context(), backend.SessionOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	f := &fixture{t: t, b: b, p: &planted{Backend: b.Node("admin")}, rec: s.(backend.Records), sess: s}
	f.put("status/report", `{"lease":"report","partition":-1,"schedule":"fixed rate 1s","historySeq":2,"succeeded":2}`)
	f.put("history/report/01", `{"seq":1,"result":"succeeded","source":"normal"}`)
	f.put("history/report/02", `{"seq":2,"result":"succeeded","source":"normal"}`)
	f.put("status/billing.0", `{"lease":"billing.0","group":"billing","partition":0}`)
	f.put("status/billing.1", `{"lease":"billing.1","group":"billing","partition":1}`)
	f.put("ops/disabled/ingest", `{"by":"alice","reason":"maintenance"}`)
	f.put("ops/drain/z", `{"by":"alice"}`)
	f.join("billing", "a", `{"p":2,"a":"rendezvous"}`)
	return f
}

// put writes a record through the memory backend.
func (f *fixture) put(key, value string) {
	f.t.Helper()
	if _, err := f.rec.PutRecord(f.t.Context(), key, []byte(value), backend.Condition{}); err != nil {
		f.t.Fatalf("put %s: %v", key, err)
	}
}

// plant shows a record that the memory backend would not store.
func (f *fixture) plant(key, value string) {
	f.p.records = append(f.p.records, backend.Record{Key: key, Value: []byte(value), Version: 1})
}

// join makes a session of its own join group as member id with data.
func (f *fixture) join(group, id, data string) {
	f.t.Helper()
	s, err := f.b.Node("member-"+id).Open(f.t.Context(), backend.SessionOptions{TTL: time.Minute})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { s.Close(context.Background()) })
	if err := s.Join(f.t.Context(), group, backend.Member{ID: id, Data: []byte(data)}); err != nil {
		f.t.Fatalf("join: %v", err)
	}
}

// open opens an admin on the fixture's backend.
func (f *fixture) open() *Admin {
	f.t.Helper()
	a, err := Open(f.t.Context(), f.p)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { a.Close() })
	return a
}

// wantHealthy checks that a snapshot still shows the fixture's healthy
// records.
func wantHealthy(t *testing.T, s Snapshot) {
	t.Helper()
	var names []string
	for _, e := range s.Elections {
		names = append(names, e.Name)
	}
	for _, want := range []string{"billing.0", "billing.1", "report"} {
		if !slices.Contains(names, want) {
			t.Errorf("elections %v lack %s", names, want)
		}
	}
	i := slices.IndexFunc(s.Groups, func(g Group) bool { return g.Name == "billing" })
	if i < 0 || len(s.Groups[i].Partitions) != 2 || len(s.Groups[i].Members) == 0 {
		t.Errorf("groups %+v, want billing with 2 partitions and its members", s.Groups)
	}
	if !s.Ops.Disabled["ingest"] || !s.Ops.Drained["z"] {
		t.Errorf("ops %+v, want ingest disabled and z drained", s.Ops)
	}
}

// TestSnapshotSkipsWhatItCannotUse plants one bad record of each kind, in
// turn, next to healthy ones: the snapshot shows the healthy ones, and
// reports the bad one by its key, with why.
func TestSnapshotSkipsWhatItCannotUse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		plant  func(f *fixture)
		key    string
		reason string
	}{
		{"status not JSON", func(f *fixture) { f.put("status/nightly", "garbage") }, "status/nightly", "the value is not a status record (JSON)"},
		{"status empty", func(f *fixture) { f.put("status/nightly", "") }, "status/nightly", "the value is empty"},
		{"status of a wrong type", func(f *fixture) { f.put("status/nightly", `{"lease":"nightly","succeeded":-1}`) }, "status/nightly", "Status.succeeded of type uint64"},
		{"status of another lease", func(f *fixture) { f.put("status/nightly", `{"lease":"report"}`) }, "status/nightly", `the status is of lease "report"`},
		{"status naming no lease", func(f *fixture) { f.put("status/nightly", `{}`) }, "status/nightly", "the status names no lease"},
		{"status key naming no lease", func(f *fixture) { f.put("status/a/b", `{"lease":"a/b"}`) }, "status/a/b", "the key does not name a lease"},
		{"status key with a space", func(f *fixture) { f.plant("status/bad key", `{"lease":"bad key"}`) }, "status/bad key", "the key does not name a lease"},
		// Groups used to fail on it: the group name went to Members.
		{"status naming a bad group", func(f *fixture) {
			f.put("status/x.0", `{"lease":"x.0","group":"bad group","partition":0}`)
		}, "status/x.0", "which is not a group name"},
		// Groups would have listed a billion partitions.
		{"status of a huge partition", func(f *fixture) {
			f.put("status/billing.999999999", `{"lease":"billing.999999999","group":"billing","partition":999999999}`)
		}, "status/billing.999999999", "out of range"},
		{"status of a partition of another lease", func(f *fixture) {
			f.put("status/billing.5", `{"lease":"billing.5","group":"billing","partition":0}`)
		}, "status/billing.5", "whose lease is not"},
		{"term log not JSON", func(f *fixture) { f.put("terms/report", "garbage") }, "terms/report", "the value is not a term log record (JSON)"},
		{"term log of another lease", func(f *fixture) { f.put("terms/report", `{"lease":"nightly","terms":[]}`) }, "terms/report", `the term log is of lease "nightly"`},
		{"term log key naming no lease", func(f *fixture) { f.put("terms/a/b", `{"lease":"a/b"}`) }, "terms/a/b", "the key does not name a lease"},
		{"disable not JSON", func(f *fixture) { f.put("ops/disabled/nightly", "maintenance") }, "ops/disabled/nightly", "not an operation record (JSON)"},
		{"trigger not JSON", func(f *fixture) { f.put("ops/trigger/report", "now") }, "ops/trigger/report", "not an operation record (JSON)"},
		{"resign with a bad token", func(f *fixture) { f.put("ops/resign/report", `{"token":"7"}`) }, "ops/resign/report", "Op.token of type uint64"},
		{"drain not JSON", func(f *fixture) { f.put("ops/drain/y", "y") }, "ops/drain/y", "not an operation record (JSON)"},
		{"unknown operation", func(f *fixture) { f.put("ops/pause/report", `{}`) }, "ops/pause/report", "not an operation simba knows"},
		{"operation on a path", func(f *fixture) { f.put("ops/disabled/a/b", `{}`) }, "ops/disabled/a/b", "does not name an election"},
		{"operation with a space", func(f *fixture) { f.plant("ops/drain/a b", `{}`) }, "ops/drain/a b", "does not name a member"},
		{"member not JSON", func(f *fixture) { f.join("billing", "b", "garbage") }, "group/billing/", "not a member record (JSON)"},
		{"member without partitions", func(f *fixture) { f.join("billing", "b", `{"a":"rendezvous"}`) }, "group/billing/", "uses 0 partitions, out of range"},
		{"member with a huge count", func(f *fixture) { f.join("billing", "b", `{"p":1000000000}`) }, "group/billing/", "uses 1000000000 partitions"},
		{"lease key naming no lease", func(f *fixture) { f.p.leases = append(f.p.leases, "bad lease") }, "lease/bad lease", "does not name a lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.plant(f)
			a := f.open()
			s, err := a.Snapshot(t.Context())
			if err != nil {
				t.Fatalf("Snapshot: %v", err)
			}
			wantHealthy(t, s)
			if len(s.Problems) != 1 || !strings.HasPrefix(s.Problems[0].Key, tc.key) || !strings.Contains(s.Problems[0].Reason, tc.reason) {
				t.Fatalf("problems %v, want one of %q saying %q", s.Problems, tc.key, tc.reason)
			}
			// The reads that report no problems skip the record all the same.
			if _, err := a.Elections(t.Context()); err != nil {
				t.Errorf("Elections: %v", err)
			}
			if _, err := a.Groups(t.Context()); err != nil {
				t.Errorf("Groups: %v", err)
			}
			g, err := a.Group(t.Context(), "billing")
			if err != nil {
				t.Errorf("Group: %v", err)
			}
			ops, err := a.Ops(t.Context())
			if err != nil {
				t.Errorf("Ops: %v", err)
			}
			switch {
			case strings.HasPrefix(tc.key, "ops/"):
				if !slices.Equal(ops.Problems, s.Problems) {
					t.Errorf("Ops problems %v, want %v", ops.Problems, s.Problems)
				}
			case strings.HasPrefix(tc.key, "group/billing/"), strings.HasPrefix(tc.key, "status/billing."):
				if !slices.Equal(g.Problems, s.Problems) {
					t.Errorf("Group problems %v, want %v", g.Problems, s.Problems)
				}
			default:
				if len(ops.Problems)+len(g.Problems) > 0 {
					t.Errorf("Ops problems %v, Group problems %v: want none", ops.Problems, g.Problems)
				}
			}
		})
	}
}

// TestSkippedOperationsAreNotInForce checks that an operation record that
// cannot be used is not shown as in force.
func TestSkippedOperationsAreNotInForce(t *testing.T) {
	f := newFixture(t)
	f.put("ops/disabled/report", "not json")
	f.put("ops/trigger/report", "[]")
	ops, err := f.open().Ops(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if ops.Disabled["report"] || len(ops.Triggers) != 0 || !ops.Disabled["ingest"] {
		t.Errorf("ops %+v, want only ingest disabled", ops)
	}
	if len(ops.Problems) != 2 || ops.Problems[0].Key != "ops/disabled/report" || ops.Problems[1].Key != "ops/trigger/report" {
		t.Errorf("problems %v", ops.Problems)
	}
}

// TestMemberWithABadRecordIsListed checks that a live member whose record
// cannot be used is listed, but neither sets the partition count nor makes
// a mismatch.
func TestMemberWithABadRecordIsListed(t *testing.T) {
	f := newFixture(t)
	f.join("billing", "b", `{"p":-5}`)
	g, err := f.open().Group(t.Context(), "billing")
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, m := range g.Members {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"a", "b"}) || len(g.Partitions) != 2 || len(g.Mismatches) != 0 {
		t.Errorf("group %+v, want members a and b, 2 partitions, no mismatch", g)
	}
	if len(g.Problems) != 1 || !strings.Contains(g.Problems[0].Reason, `member "b" uses -5 partitions`) {
		t.Errorf("problems %v", g.Problems)
	}
}

// TestGroupIgnoresOtherGroupsUnderItsPrefix checks that the statuses of
// group "billing.eu" are not taken for partitions of "billing".
func TestGroupIgnoresOtherGroupsUnderItsPrefix(t *testing.T) {
	f := newFixture(t)
	f.put("status/billing.eu.0", `{"lease":"billing.eu.0","group":"billing.eu","partition":0}`)
	f.put("status/billing.eu.7", `{"lease":"billing.eu.7","group":"billing.eu","partition":7}`)
	g, err := f.open().Group(t.Context(), "billing")
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Partitions) != 2 {
		t.Errorf("billing has %d partitions, want 2", len(g.Partitions))
	}
}

func TestStatusOfABadRecord(t *testing.T) {
	f := newFixture(t)
	f.put("status/nightly", `{"lease":`)
	a := f.open()
	_, err := a.Status(t.Context(), "nightly")
	var re *RecordError
	if !errors.As(err, &re) || re.Problem.Key != "status/nightly" || errors.Is(err, ErrNotFound) {
		t.Fatalf("Status: %v, want a *RecordError of status/nightly", err)
	}
	if want := `simba/admin: record "status/nightly": the value is not a status record (JSON): unexpected end of JSON input`; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q, want it to start with %q", err, want)
	}
	if _, err := a.Status(t.Context(), "bad name"); err == nil || errors.As(err, &re) {
		t.Errorf("Status of an invalid name: %v", err)
	}
}

func TestHistoryWithProblems(t *testing.T) {
	t.Run("bad runs", func(t *testing.T) {
		f := newFixture(t)
		f.put("history/report/03", "garbage")
		f.put("history/report/04", `{}`)
		f.put("history/report/x9", `{"seq":9}`)
		runs, problems, err := f.open().HistoryWithProblems(t.Context(), "report")
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 2 || runs[0].Seq != 1 || runs[1].Seq != 2 {
			t.Errorf("runs %+v, want 1 and 2", runs)
		}
		var keys []string
		for _, p := range problems {
			keys = append(keys, p.Key)
		}
		if !slices.Equal(keys, []string{"history/report/03", "history/report/04", "history/report/x9"}) {
			t.Errorf("problems %v", problems)
		}
	})
	t.Run("bad status", func(t *testing.T) {
		f := newFixture(t)
		f.put("status/report", "{")
		f.put("history/report/03", `{"seq":3}`) // newer than the status knew of: kept, as it is not known
		a := f.open()
		runs, problems, err := a.HistoryWithProblems(t.Context(), "report")
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 3 || len(problems) != 1 || problems[0].Key != "status/report" {
			t.Errorf("runs %+v, problems %v: want 3 runs and the status's problem", runs, problems)
		}
		if runs, err := a.History(t.Context(), "report"); err != nil || len(runs) != 3 {
			t.Errorf("History: %v, %v", runs, err)
		}
	})
	t.Run("nothing", func(t *testing.T) {
		f := newFixture(t)
		if _, _, err := f.open().HistoryWithProblems(t.Context(), "nosuch"); !errors.Is(err, ErrNotFound) {
			t.Errorf("err %v, want ErrNotFound", err)
		}
	})
}

// TestSnapshotOfHealthyRecords checks that a snapshot agrees with the
// separate reads, and reports nothing.
func TestSnapshotOfHealthyRecords(t *testing.T) {
	f := newFixture(t)
	a := f.open()
	s, err := a.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	wantHealthy(t, s)
	if len(s.Problems) != 0 {
		t.Errorf("problems %v", s.Problems)
	}
	es, err := a.Elections(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	gs, err := a.Groups(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != len(s.Elections) || len(gs) != len(s.Groups) {
		t.Errorf("Elections %d, Groups %d; snapshot %d, %d", len(es), len(gs), len(s.Elections), len(s.Groups))
	}
	for i := range es {
		if es[i].Name != s.Elections[i].Name || es[i].Held != s.Elections[i].Held || es[i].Disabled != s.Elections[i].Disabled {
			t.Errorf("election %d: %+v, snapshot %+v", i, es[i], s.Elections[i])
		}
	}
}

// TestHistoryExitCodes checks that the exit status of a run survives the
// reads, 0 included, and that the runs written before the field existed
// read without one.
func TestHistoryExitCodes(t *testing.T) {
	f := newFixture(t)
	f.put("history/report/03", `{"seq":3,"result":"failed","error":"exit status 3","source":"normal","exitCode":3}`)
	f.put("history/report/04", `{"seq":4,"result":"succeeded","source":"normal","exitCode":0}`)
	f.put("status/report", `{"lease":"report","partition":-1,"historySeq":4,"succeeded":3,"failed":1,"lastRun":{"seq":4,"result":"succeeded","source":"normal","exitCode":0}}`)
	a := f.open()
	runs, err := a.History(t.Context(), "report")
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 4 {
		t.Fatalf("runs %+v, want 4", runs)
	}
	for i, want := range []int{-1, -1, 3, 0} { // -1: none recorded
		switch got := runs[i].ExitCode; {
		case want < 0 && got != nil:
			t.Errorf("run %d: exit code %d, want none (an old record)", runs[i].Seq, *got)
		case want >= 0 && got == nil:
			t.Errorf("run %d: no exit code, want %d", runs[i].Seq, want)
		case want >= 0 && *got != want:
			t.Errorf("run %d: exit code %d, want %d", runs[i].Seq, *got, want)
		}
	}
	st, err := a.Status(t.Context(), "report")
	if err != nil {
		t.Fatal(err)
	}
	if st.LastRun == nil || st.LastRun.ExitCode == nil || *st.LastRun.ExitCode != 0 {
		t.Errorf("status's last run %+v: want exit code 0", st.LastRun)
	}
}

// TestTermsFromTheLogAndTheStatus: a lease's terms are its term log's and
// its status's, merged (the status's end of a term the log has open), in
// Status and in the listings alike.
func TestTermsFromTheLogAndTheStatus(t *testing.T) {
	f := newFixture(t)
	f.put("status/report", `{"lease":"report","partition":-1,"terms":[{"token":3,"member":"a","ended":"stopped"}]}`)
	f.put("terms/report", `{"lease":"report","terms":[{"token":1,"member":"b","ended":"stopped"},{"token":2,"member":"b","ended":"fail-over"},{"token":3,"member":"a"}]}`)
	a := f.open()
	want := []Term{{Token: 1, Member: "b", Ended: "stopped"}, {Token: 2, Member: "b", Ended: "fail-over"}, {Token: 3, Member: "a", Ended: "stopped"}}
	st, err := a.Status(t.Context(), "report")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Terms, want) {
		t.Errorf("Status: terms %+v, want %+v", st.Terms, want)
	}
	es, err := a.Elections(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(es, func(e Election) bool { return e.Name == "report" })
	if i < 0 || !slices.Equal(es[i].Status.Terms, want) {
		t.Errorf("Elections: %+v, want report's terms %+v", es, want)
	}
}
