package etcd_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
)

// TestMalformedRecordsAreSkipped: values put under the record keys by
// another program (etcdctl put <prefix>rec/status/x garbage), too short to
// carry the token in front of every record, do not fail a listing: it
// lists the records, and SkipReporter names the others; GetRecord of one
// returns a *backend.MalformedError.
func TestMalformedRecordsAreSkipped(t *testing.T) {
	srv := startServer(t)
	cli := newClient(t, srv)
	prefix := testPrefix(t)
	b := newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix))
	r := records(t, open(t, b, 5*time.Second))
	for _, k := range []string{"status/a", "status/z"} {
		if _, err := r.PutRecord(op(t), k, []byte(`{}`), backend.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range map[string]string{"status/x": "garbage", "status/empty": ""} {
		if _, err := cli.Put(op(t), prefix+"rec/"+k, v); err != nil {
			t.Fatal(err)
		}
	}

	list, err := r.ListRecords(op(t), "status/")
	if err != nil {
		t.Fatalf("ListRecords: %v", err)
	}
	if got := recordKeys(list); got != "status/a,status/z" {
		t.Errorf("ListRecords = %s, want status/a,status/z", got)
	}

	sr, ok := r.(backend.SkipReporter)
	if !ok {
		t.Fatal("the session does not implement backend.SkipReporter")
	}
	list, skipped, err := sr.ListRecordsWithSkipped(op(t), "status/")
	if err != nil {
		t.Fatalf("ListRecordsWithSkipped: %v", err)
	}
	if got := recordKeys(list); got != "status/a,status/z" {
		t.Errorf("ListRecordsWithSkipped = %s, want status/a,status/z", got)
	}
	if len(skipped) != 2 || skipped[0].Key != "status/empty" || skipped[1].Key != "status/x" {
		t.Fatalf("skipped %+v, want status/empty and status/x", skipped)
	}
	if !strings.Contains(skipped[1].Reason, "7 bytes") || !strings.Contains(skipped[1].Reason, `"garbage"`) {
		t.Errorf("reason %q: want the length and the value", skipped[1].Reason)
	}

	_, err = r.GetRecord(op(t), "status/x")
	var me *backend.MalformedError
	if !errors.As(err, &me) || me.Key != "status/x" {
		t.Errorf("GetRecord of a malformed record: error %v, want a *backend.MalformedError of status/x", err)
	}
	if errors.Is(err, backend.ErrNoRecord) {
		t.Errorf("GetRecord of a malformed record: error %v wraps ErrNoRecord: something is stored there", err)
	}
}

// TestMalformedMemberIsSkipped: a member key whose value is not the JSON
// the backend writes (or names no member id) does not fail Members: the group's other members are
// listed, and SkipReporter names the key's session part.
func TestMalformedMemberIsSkipped(t *testing.T) {
	srv := startServer(t)
	cli := newClient(t, srv)
	prefix := testPrefix(t)
	b := newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix))
	s := open(t, b, 5*time.Second)
	if err := s.Join(op(t), "g", backend.Member{ID: "a", Data: []byte("d")}); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"zzzz": "not json", "yyyy": `{"data":"eA=="}`} {
		if _, err := cli.Put(op(t), prefix+"group/g/"+k, v); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := s.Members(op(t), "g")
	if err != nil {
		t.Fatalf("Members: %v", err)
	}
	if len(ms) != 1 || ms[0].ID != "a" || ms[0].Session != s.ID() || string(ms[0].Data) != "d" {
		t.Errorf("Members = %+v, want a of session %s", ms, s.ID())
	}
	ms, skipped, err := s.(backend.SkipReporter).MembersWithSkipped(op(t), "g")
	if err != nil {
		t.Fatalf("MembersWithSkipped: %v", err)
	}
	if len(ms) != 1 || ms[0].ID != "a" {
		t.Errorf("MembersWithSkipped = %+v, want a", ms)
	}
	if len(skipped) != 2 || skipped[0].Key != "yyyy" || !strings.Contains(skipped[0].Reason, "no member id") ||
		skipped[1].Key != "zzzz" || !strings.Contains(skipped[1].Reason, `"not json"`) {
		t.Errorf("skipped %+v, want yyyy (no id) and zzzz, quoting its value", skipped)
	}
}

// recordKeys joins the keys of list with commas.
func recordKeys(list []backend.Record) string {
	keys := make([]string, len(list))
	for i, r := range list {
		keys[i] = r.Key
	}
	return strings.Join(keys, ",")
}
