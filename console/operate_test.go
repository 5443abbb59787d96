package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend/memory"
)

// body returns the JSON body of an operation on target.
func body(target string, token uint64, reason string) string {
	b, _ := json.Marshal(opRequest{Target: target, Token: token, Reason: reason})
	return string(b)
}

// argsBody returns the JSON body of a trigger of target with args, the
// lines of the page's text area.
func argsBody(target string, args ...string) string {
	b, _ := json.Marshal(opRequest{Target: target, Args: args})
	return string(b)
}

func decode(t *testing.T, b *bytes.Buffer) opReply {
	t.Helper()
	var r opReply
	require.NoError(t, json.Unmarshal(b.Bytes(), &r), b.String())
	return r
}

func TestOperationsWithTheToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		f := startFleet(t, b)
		defer f.StopAll()
		var logs bytes.Buffer
		s, a, done := openConsole(t, b, WithToken(testToken), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		defer done()
		// step runs one part of the test; t.Run is not allowed in a bubble.
		step := func(name string, fn func()) {
			t.Log("step:", name)
			fn()
		}
		ok := func(op, target string, token uint64, reason string) opReply {
			t.Helper()
			w := call(s, opCall{op: op, body: body(target, token, reason)})
			require.Equal(t, http.StatusOK, w.Code, "%s %s: %s", op, target, w.Body)
			r := decode(t, w.Body)
			require.True(t, r.OK)
			return r
		}

		step("trigger runs once", func() {
			require.Empty(t, f.RunsOf("report"), "report's schedule is not due")
			r := ok("trigger", "report", 0, "")
			assert.Contains(t, r.Message, "triggered report")
			time.Sleep(10 * time.Second)
			runs := f.RunsOf("report")
			require.Len(t, runs, 1)
			h, _ := f.Holder("report")
			assert.Equal(t, h.Member, runs[0].Member, "the holder runs it")
			hist, err := a.History(t.Context(), "report")
			require.NoError(t, err)
			require.Len(t, hist, 1)
			assert.Equal(t, "trigger", hist[0].Source)
			ops, err := a.Ops(t.Context())
			require.NoError(t, err)
			assert.Empty(t, ops.Triggers, "carried out")
			assert.Contains(t, get(s, "/jobs").Body.String(), `data-source="trigger"`)
		})

		step("trigger with arguments", func() {
			w := call(s, opCall{op: "trigger", body: argsBody("report", "day=2025-03-04", "note=two words")})
			require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			assert.Equal(t, `triggered report with day=2025-03-04 note="two words": its holder runs it once`, decode(t, w.Body).Message)
			entries, _, err := a.Audit(t.Context(), admin.AuditFilter{Name: "report", Limit: 1})
			require.NoError(t, err)
			require.Len(t, entries, 1)
			assert.Equal(t, `trigger requested with arguments day=2025-03-04 note="two words"`, entries[0].Change)
			time.Sleep(10 * time.Second)
			require.Len(t, f.RunsOf("report"), 2, "the trigger ran once")
			hist, err := a.History(t.Context(), "report")
			require.NoError(t, err)
			require.Len(t, hist, 2)
			assert.Equal(t, "trigger", hist[1].Source)
		})

		step("disable and enable", func() {
			ok("disable", "digest", 0, "maintenance")
			time.Sleep(5 * time.Second)
			n := len(f.RunsOf("digest"))
			time.Sleep(10 * time.Second)
			assert.Len(t, f.RunsOf("digest"), n, "a disabled job runs nowhere")
			_, held := f.Holder("digest")
			assert.False(t, held, "nobody holds a disabled election")
			page := get(s, "/jobs").Body.String()
			assert.Contains(t, page, `data-op="enable" data-target="digest"`)
			ok("enable", "digest", 0, "")
			time.Sleep(10 * time.Second)
			assert.Greater(t, len(f.RunsOf("digest")), n, "enabled, it runs again")
		})

		step("resign", func() {
			before, held := f.Holder("ingest")
			require.True(t, held)
			ok("resign", "ingest", before.Token, "")
			time.Sleep(10 * time.Second)
			after, held := f.Holder("ingest")
			require.True(t, held)
			assert.Greater(t, after.Token, before.Token, "a new term with a higher token")
			w := call(s, opCall{op: "resign", body: body("ingest", before.Token, "")})
			assert.Equal(t, http.StatusConflict, w.Code, "that term is over")
			assert.Contains(t, decode(t, w.Body).Error, fmt.Sprintf("token %d holds it now", after.Token))
		})

		step("drain and undrain", func() {
			ok("drain", "c", 0, "")
			time.Sleep(15 * time.Second)
			for p, h := range f.PartitionHolders() {
				assert.NotEqual(t, "c", h.Member, "partition %d", p)
			}
			assert.Contains(t, get(s, "/members").Body.String(), `<tr data-member="c" data-drained="true" data-state="drained">`)
			ok("undrain", "c", 0, "")
			time.Sleep(15 * time.Second)
			ops, err := a.Ops(t.Context())
			require.NoError(t, err)
			assert.Empty(t, ops.Drained)
			assert.Contains(t, get(s, "/members").Body.String(), `<tr data-member="c" data-drained="false" data-state="active">`)
		})

		step("disable a group", func() {
			ok("disable", "billing", 0, "")
			ops, err := a.Ops(t.Context())
			require.NoError(t, err)
			assert.True(t, ops.Disabled["billing"])
			ok("enable", "billing", 0, "")
		})

		step("disable and enable a partition", func() {
			ok("disable", "billing.1", 0, "one partition")
			ops, err := a.Ops(t.Context())
			require.NoError(t, err)
			assert.True(t, ops.Disabled["billing.1"])
			assert.False(t, ops.Disabled["billing"])
			time.Sleep(5 * time.Second)
			_, held := f.Holder("billing.1")
			assert.False(t, held, "nobody holds a disabled partition")
			ok("enable", "billing.1", 0, "")
			time.Sleep(5 * time.Second)
			_, held = f.Holder("billing.1")
			assert.True(t, held, "enabled, it is held again")
		})

		assert.NotContains(t, logs.String(), testToken, "the token is never logged")
		assert.Contains(t, logs.String(), "operation done")
	})
}

func TestOperationsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		f := startFleet(t, b)
		defer f.StopAll()
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		s, a, done := openConsole(t, b, WithToken(testToken), WithLogger(log))
		defer done()
		ro, err := New(a, WithReadOnly(true), WithToken(testToken))
		require.NoError(t, err)
		defer ro.Close()

		trigger := body("report", 0, "")
		ingest, held := f.Holder("ingest")
		require.True(t, held)
		for _, tc := range []struct {
			name   string
			h      http.Handler
			call   opCall
			status int
		}{
			{"without the token", s, opCall{op: "trigger", body: trigger, headers: map[string]string{TokenHeader: ""}}, http.StatusUnauthorized},
			{"with a wrong token", s, opCall{op: "trigger", body: trigger, headers: map[string]string{TokenHeader: "wrong-token-0123456789abcdef"}}, http.StatusUnauthorized},
			{"with a prefix of the token", s, opCall{op: "trigger", body: trigger, headers: map[string]string{TokenHeader: testToken[:20]}}, http.StatusUnauthorized},
			{"with the token and more", s, opCall{op: "trigger", body: trigger, headers: map[string]string{TokenHeader: testToken + "x"}}, http.StatusUnauthorized},
			{"with GET", s, opCall{method: http.MethodGet, op: "trigger", body: trigger}, http.StatusMethodNotAllowed},
			{"with PUT", s, opCall{method: http.MethodPut, op: "trigger", body: trigger}, http.StatusMethodNotAllowed},
			{"read-only", ro, opCall{op: "trigger", body: trigger}, http.StatusForbidden},
			{"cross-site", s, opCall{op: "trigger", body: trigger, headers: map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://attacker.example"}}, http.StatusForbidden},
			{"same-site, other origin", s, opCall{op: "trigger", body: trigger, headers: map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:9999"}}, http.StatusForbidden},
			{"other origin, old browser", s, opCall{op: "trigger", body: trigger, headers: map[string]string{"Sec-Fetch-Site": "", "Origin": "http://attacker.example"}}, http.StatusForbidden},
			{"a form", s, opCall{op: "trigger", body: "target=report", headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}, http.StatusUnsupportedMediaType},
			{"plain text", s, opCall{op: "trigger", body: trigger, headers: map[string]string{"Content-Type": "text/plain"}}, http.StatusUnsupportedMediaType},
			{"an unknown operation", s, opCall{op: "delete", body: trigger}, http.StatusNotFound},
			{"an unknown job", s, opCall{op: "trigger", body: body("nothing", 0, "")}, http.StatusNotFound},
			{"an unknown member", s, opCall{op: "drain", body: body("nobody", 0, "")}, http.StatusNotFound},
			{"an unknown election", s, opCall{op: "disable", body: body("nothing", 0, "")}, http.StatusNotFound},
			{"a trigger of an unscheduled election", s, opCall{op: "trigger", body: body("ingest", 0, "")}, http.StatusConflict},
			{"a resignation of a term that is over", s, opCall{op: "resign", body: body("ingest", ingest.Token+1000, "")}, http.StatusConflict},
			{"no target", s, opCall{op: "trigger", body: `{}`}, http.StatusBadRequest},
			{"an unknown field", s, opCall{op: "trigger", body: `{"target":"report","force":true}`}, http.StatusBadRequest},
			{"a long reason", s, opCall{op: "disable", body: body("digest", 0, strings.Repeat("x", 201))}, http.StatusBadRequest},
			{"a large body", s, opCall{op: "trigger", body: `{"target":"report","args":["a=` + strings.Repeat("x", maxOpBody) + `"]}`}, http.StatusBadRequest},
			{"an argument without =", s, opCall{op: "trigger", body: argsBody("report", "day")}, http.StatusBadRequest},
			{"an argument with a bad key", s, opCall{op: "trigger", body: argsBody("report", "1day=x")}, http.StatusBadRequest},
			{"an argument twice", s, opCall{op: "trigger", body: argsBody("report", "a=1", "a=2")}, http.StatusBadRequest},
			{"a value too long", s, opCall{op: "trigger", body: argsBody("report", "a="+strings.Repeat("x", 1025))}, http.StatusBadRequest},
			{"arguments of a disable", s, opCall{op: "disable", body: `{"target":"digest","args":["a=1"]}`}, http.StatusBadRequest},
		} {
			w := call(tc.h, tc.call) // no t.Run in a bubble
			assert.Equal(t, tc.status, w.Code, "%s: %s", tc.name, w.Body)
			if tc.status == http.StatusUnauthorized {
				assert.NotEmpty(t, w.Header().Get("WWW-Authenticate"), tc.name)
			}
			if want, ok := map[string]string{
				"an argument without =":      `invalid trigger arguments: "day" is not key=value (no '=')`,
				"an argument with a bad key": `invalid trigger arguments: key "1day": a key is a letter or _, then at most 63 letters, digits, _, . or -`,
				"an argument twice":          `invalid trigger arguments: key "a" given twice`,
				"a value too long":           "invalid trigger arguments: the value of a is 1025 bytes, at most 1024",
				"arguments of a disable":     "arguments are for a trigger only",
			}[tc.name]; ok {
				assert.Equal(t, want, decode(t, bytes.NewBuffer(w.Body.Bytes())).Error, tc.name)
			}
			if tc.status == http.StatusMethodNotAllowed {
				assert.Equal(t, "POST", w.Header().Get("Allow"), tc.name)
			} else {
				assert.NotEmpty(t, decode(t, w.Body).Error, tc.name)
			}
		}
		time.Sleep(5 * time.Second)
		ops, err := a.Ops(t.Context())
		require.NoError(t, err)
		assert.Empty(t, ops.Disabled)
		assert.Empty(t, ops.Drained)
		assert.Empty(t, ops.Triggers)
		assert.Empty(t, ops.Resigns)
		assert.Empty(t, f.RunsOf("report"), "nothing was triggered")
		assert.NotContains(t, logs.String(), testToken[:20], "no token in the log")
		assert.NotContains(t, logs.String(), "wrong-token", "no token in the log")
		assert.Contains(t, logs.String(), "operation refused")
	})
}
