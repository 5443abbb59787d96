package admin

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/simba-go/simba/backend"
)

// The tests below check each kind of record the admin parses, one case per
// kind of malformed value or key.

// wantProblem checks that p is a problem of key whose reason contains
// reason, or that p is nil when reason is "".
func wantProblem(t *testing.T, p *Problem, key, reason string) {
	t.Helper()
	switch {
	case reason == "" && p != nil:
		t.Errorf("problem %v, want none", p)
	case reason == "":
	case p == nil:
		t.Errorf("no problem, want one of %q saying %q", key, reason)
	case p.Key != key || !strings.Contains(p.Reason, reason):
		t.Errorf("problem %v, want one of %q saying %q", p, key, reason)
	}
}

func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		name, key, value string
		reason           string // "" for a record that can be used
	}{
		{"election", "status/report", `{"lease":"report","partition":-1,"schedule":"fixed rate 1s"}`, ""},
		{"partition", "status/billing.3", `{"lease":"billing.3","group":"billing","partition":3}`, ""},
		{"unknown fields", "status/report", `{"lease":"report","later":{"x":1}}`, ""},
		{"not JSON", "status/report", `garbage`, `the value is not a status record (JSON): invalid character 'g' looking for beginning of value (value "garbage")`},
		{"empty", "status/report", ``, "the value is empty, not a status record"},
		{"cut short", "status/report", `{"lease":"rep`, "not a status record (JSON): unexpected end of JSON input"},
		{"trailing garbage", "status/report", `{"lease":"report"}}`, "invalid character '}' after top-level value"},
		{"an array", "status/report", `[1,2]`, "cannot unmarshal array"},
		{"a string", "status/report", `"report"`, "cannot unmarshal string"},
		{"a wrong field type", "status/report", `{"lease":5}`, "cannot unmarshal number into Go struct field Status.lease of type string"},
		{"a wrong nested type", "status/report", `{"lease":"report","holder":{"token":"x"}}`, "holder.token of type uint64"},
		{"a bad time", "status/report", `{"lease":"report","updated":"yesterday"}`, "not a status record (JSON)"},
		{"null", "status/report", `null`, "the status names no lease"},
		{"no lease", "status/report", `{"partition":-1}`, "the status names no lease"},
		{"another lease", "status/report", `{"lease":"ingest"}`, `the status is of lease "ingest", not of the lease its key names`},
		{"key names no lease", "status/a/b", `{"lease":"a/b"}`, "the key does not name a lease"},
		{"key with a space", "status/bad key", `{"lease":"bad key"}`, "the key does not name a lease"},
		{"key with nothing after the prefix", "status/", `{"lease":""}`, "the key does not name a lease"},
		{"bad group name", "status/x.0", `{"lease":"x.0","group":"bad group","partition":0}`, `names group "bad group", which is not a group name`},
		{"negative partition", "status/g.-1", `{"lease":"g.-1","group":"g","partition":-1}`, "partition -1 of group \"g\", out of range"},
		{"huge partition", "status/g.999999999", `{"lease":"g.999999999","group":"g","partition":999999999}`, "partition 999999999 of group \"g\", out of range"},
		{"partition of another lease", "status/g.1", `{"lease":"g.1","group":"g","partition":2}`, `names partition 2 of group "g", whose lease is not "g.1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, p := parseStatus(backend.Record{Key: tc.key, Value: []byte(tc.value)})
			wantProblem(t, p, tc.key, tc.reason)
			if tc.reason == "" && st.Lease != strings.TrimPrefix(tc.key, "status/") {
				t.Errorf("status %+v", st)
			}
		})
	}
}

func TestParseRun(t *testing.T) {
	for _, tc := range []struct {
		name, key, value string
		reason           string
	}{
		{"run", "history/report/07", `{"seq":7,"result":"succeeded","source":"normal"}`, ""},
		{"not JSON", "history/report/07", `{seq:7}`, "the value is not a run record (JSON): invalid character 's'"},
		{"empty", "history/report/07", ``, "the value is empty, not a run record"},
		{"a wrong field type", "history/report/07", `{"seq":"7"}`, "Run.seq of type uint64"},
		{"a bad time", "history/report/07", `{"seq":7,"start":12}`, "not a run record (JSON)"},
		{"no sequence number", "history/report/07", `{}`, "the run has no sequence number"},
		{"null", "history/report/07", `null`, "the run has no sequence number"},
		{"slot not a number", "history/report/xx", `{"seq":7}`, "the key is not a slot of the history of report"},
		{"slot too long", "history/report/123456", `{"seq":7}`, "the key is not a slot of the history of report"},
		{"nested key", "history/report/07/1", `{"seq":7}`, "the key is not a slot of the history of report"},
		{"no slot", "history/report/", `{"seq":7}`, "the key is not a slot of the history of report"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, p := parseRun(backend.Record{Key: tc.key, Value: []byte(tc.value)}, "report")
			wantProblem(t, p, tc.key, tc.reason)
			if tc.reason == "" && run.Seq != 7 {
				t.Errorf("run %+v", run)
			}
		})
	}
}

func TestParseOp(t *testing.T) {
	for _, tc := range []struct {
		name, key, value string
		reason           string
		prefix, target   string // for a record that can be used
	}{
		{"disable", "ops/disabled/report", `{"by":"alice","at":"2026-01-02T03:04:05Z","reason":"maintenance"}`, "", "ops/disabled/", "report"},
		{"trigger", "ops/trigger/billing.3", `{"at":"2026-01-02T03:04:05Z"}`, "", "ops/trigger/", "billing.3"},
		{"resign", "ops/resign/ingest", `{"token":42}`, "", "ops/resign/", "ingest"},
		{"drain", "ops/drain/node-1", `{}`, "", "ops/drain/", "node-1"},
		{"disable not JSON", "ops/disabled/report", `maintenance`, "the value is not an operation record (JSON)", "", ""},
		{"disable empty", "ops/disabled/report", ``, "the value is empty, not an operation record", "", ""},
		{"trigger an array", "ops/trigger/report", `[]`, "cannot unmarshal array", "", ""},
		{"resign a bad token", "ops/resign/ingest", `{"token":"42"}`, "Op.token of type uint64", "", ""},
		{"resign a negative token", "ops/resign/ingest", `{"token":-1}`, "Op.token of type uint64", "", ""},
		{"drain a bad time", "ops/drain/node-1", `{"at":"now"}`, "not an operation record (JSON)", "", ""},
		{"unknown operation", "ops/bogus/report", `{}`, "not an operation simba knows", "", ""},
		{"operation without a name", "ops/disabled", `{}`, "not an operation simba knows", "", ""},
		{"disable a path", "ops/disabled/a/b", `{}`, "the key does not name an election, job, group or lease", "", ""},
		{"trigger a bad name", "ops/trigger/-x", `{}`, "the key does not name an election, job, group or lease", "", ""},
		{"resign a long name", "ops/resign/" + strings.Repeat("n", 129), `{}`, "the key does not name an election, job, group or lease", "", ""},
		{"drain a path", "ops/drain/a/b", `{}`, "the key does not name a member", "", ""},
		{"drain a long id", "ops/drain/" + strings.Repeat("m", 129), `{}`, "the key does not name a member", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix, target, _, p := parseOp(backend.Record{Key: tc.key, Value: []byte(tc.value)})
			wantProblem(t, p, clip(tc.key, maxProblemKey), tc.reason)
			if tc.reason == "" && (prefix != tc.prefix || target != tc.target) {
				t.Errorf("parsed %q %q, want %q %q", prefix, target, tc.prefix, tc.target)
			}
		})
	}
}

func TestParseMember(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		reason     string
	}{
		{"member", `{"p":8,"a":"rendezvous","v":"1f2e"}`, ""},
		{"not JSON", `p=8`, "the value is not a member record (JSON)"},
		{"empty", ``, "the value is empty, not a member record"},
		{"a wrong field type", `{"p":"8","a":"rendezvous"}`, "memberData.p of type int"},
		{"a fraction", `{"p":1.5}`, "cannot unmarshal number 1.5"},
		{"no partitions", `{}`, `member "m" uses 0 partitions, out of range`},
		{"null", `null`, `member "m" uses 0 partitions, out of range`},
		{"negative partitions", `{"p":-3,"a":"balanced"}`, "uses -3 partitions, out of range"},
		{"too many partitions", `{"p":2000000000}`, "uses 2000000000 partitions, out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, p := parseMember("billing", backend.Member{ID: "m", Session: "s1", Data: []byte(tc.data)})
			wantProblem(t, p, "group/billing/s1", tc.reason)
			if tc.reason == "" && (d.P != 8 || d.A != "rendezvous") {
				t.Errorf("member data %+v", d)
			}
		})
	}
}

// TestProblemsAreBounded checks that a huge key or value is not repeated
// whole, and that what is repeated is valid UTF-8.
func TestProblemsAreBounded(t *testing.T) {
	hugeKey := "status/" + strings.Repeat("k", 10_000)
	hugeValue := []byte("\xff" + strings.Repeat("v", 100_000))
	for _, tc := range []struct {
		name string
		p    *Problem
	}{
		{"huge key", func() *Problem { _, p := parseStatus(backend.Record{Key: hugeKey, Value: []byte("{}")}); return p }()},
		{"huge value", func() *Problem {
			_, p := parseStatus(backend.Record{Key: "status/report", Value: hugeValue})
			return p
		}()},
		{"huge lease in the value", func() *Problem {
			_, p := parseStatus(backend.Record{Key: "status/report", Value: []byte(`{"lease":"` + strings.Repeat("l", 50_000) + `"}`)})
			return p
		}()},
		{"huge operation key", func() *Problem {
			_, _, _, p := parseOp(backend.Record{Key: "ops/" + strings.Repeat("é", 5_000), Value: hugeValue})
			return p
		}()},
		{"huge member data", func() *Problem {
			_, p := parseMember("g", backend.Member{ID: strings.Repeat("i", 5_000), Session: "s", Data: []byte(`{"p":-1}`)})
			return p
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.p == nil {
				t.Fatal("no problem")
			}
			if len(tc.p.Key) > maxProblemKey || len(tc.p.Reason) > maxProblemReason {
				t.Errorf("problem of %d+%d bytes, want at most %d+%d: %v", len(tc.p.Key), len(tc.p.Reason), maxProblemKey, maxProblemReason, tc.p)
			}
			if !utf8.ValidString(tc.p.Key) || !utf8.ValidString(tc.p.Reason) {
				t.Errorf("problem not valid UTF-8: %q", tc.p)
			}
			if s := tc.p.String(); !strings.Contains(s, "…") || len(s) > 2*(maxProblemKey+maxProblemReason) {
				t.Errorf("problem %d bytes, not shortened with an ellipsis: %s", len(s), s)
			}
		})
	}
}

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"a longer string", 10, "a longe…"},
		{"ééééé", 8, "éé…"}, // cut at a character boundary
		{"bad \xff byte", 20, "bad \uFFFD byte"},
	} {
		if got := clip(tc.in, tc.n); got != tc.want || len(got) > max(tc.n, len(tc.want)) {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
	if got := echo([]byte(strings.Repeat("x", 100))); got != `"`+strings.Repeat("x", maxProblemEcho)+`"…` {
		t.Errorf("echo = %s", got)
	}
}
