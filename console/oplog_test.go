package console

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/records"
)

// opRecord reads the operation record at key through a session of its own.
func opRecord(t *testing.T, b *memory.Backend, key string) records.Op {
	t.Helper()
	sess, err := b.Node("inspect").Open(t.Context(), backend.SessionOptions{TTL: time.Minute})
	require.NoError(t, err)
	defer sess.Close(t.Context())
	rec, err := sess.(backend.Records).GetRecord(t.Context(), key)
	require.NoError(t, err, key)
	var op records.Op
	require.NoError(t, records.Decode(rec.Value, &op), key)
	return op
}

// aliceToken is the token of operator alice in the tests.
const aliceToken = "alice-token-0123456789abcdef"

// logLines decodes the JSON log lines of buf.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m)
	}
	return out
}

// opLine returns the one log line of an operation on target, or fails.
func opLine(t *testing.T, lines []map[string]any, op, target string) map[string]any {
	t.Helper()
	var found []map[string]any
	for _, l := range lines {
		if l["op"] == op && l["target"] == target {
			found = append(found, l)
		}
	}
	require.Len(t, found, 1, "log lines of %s %s", op, target)
	return found[0]
}

func TestOperationsAreLoggedWithTheirOperator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		f := startFleet(t, b)
		defer f.StopAll()
		var logs bytes.Buffer
		s, _, done := openConsole(t, b, WithToken(testToken), WithOperators(map[string]string{aliceToken: "alice"}),
			WithTimeout(outageTimeout), WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
		defer done()

		// Accepted: per-operator token (a name sent besides is ignored),
		// the shared token with a name, the shared token without.
		w := call(s, opCall{op: "disable", body: body("digest", 0, "month end"),
			headers: map[string]string{TokenHeader: aliceToken, OperatorHeader: "mallory"}})
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		r := decode(t, w.Body)
		assert.Equal(t, "alice", r.Operator)
		assert.Contains(t, r.Message, "recorded as done by alice")
		op := opRecord(t, b, records.DisabledPrefix+"digest")
		assert.Equal(t, "alice", op.By, "recorded in the backend under the token's operator")
		assert.Equal(t, "month end", op.Reason)

		w = call(s, opCall{op: "drain", body: body("c", 0, ""), headers: map[string]string{OperatorHeader: "bob"}})
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		assert.Equal(t, "bob", decode(t, w.Body).Operator)
		assert.Equal(t, "bob", opRecord(t, b, records.DrainPrefix+"c").By, "recorded under the name sent with the shared token")

		w = call(s, opCall{op: "trigger", body: body("report", 0, "")})
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		assert.Empty(t, decode(t, w.Body).Operator, "no name: the admin's own")

		// Refused: a wrong token, another origin, an unknown name, a bad
		// operator name; and failed: the backend does not answer.
		call(s, opCall{op: "drain", body: body("a", 0, "x"), headers: map[string]string{TokenHeader: "wrong-token-0123456789abcdef", OperatorHeader: "eve"}})
		call(s, opCall{op: "undrain", body: body("a", 0, ""), headers: map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://attacker.example"}})
		call(s, opCall{op: "enable", body: body("nothing", 0, "")})
		w = call(s, opCall{op: "trigger", body: body("billing.1", 0, ""), headers: map[string]string{OperatorHeader: "bad\nname"}})
		assert.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
		b.Node("console").Partition()
		start := time.Now()
		w = call(s, opCall{op: "drain", body: body("b", 0, "maintenance"), headers: map[string]string{TokenHeader: aliceToken}})
		assert.Equal(t, http.StatusBadGateway, w.Code, w.Body.String())
		assert.LessOrEqual(t, time.Since(start), outageTimeout, "bounded by the timeout")
		assert.Contains(t, decode(t, w.Body).Error, "no answer within 2s")
		b.Node("console").Heal()

		lines := logLines(t, &logs)
		for _, tc := range []struct {
			op, target, level, msg, outcome, operator, reason string
			status                                            float64
			answer                                            string
		}{
			{"disable", "digest", "INFO", "operation done", "done", "alice", "month end", 200, "disabled digest"},
			{"drain", "c", "INFO", "operation done", "done", "bob", "", 200, "drained member c"},
			{"trigger", "report", "INFO", "operation done", "done", "", "", 200, "triggered report"},
			{"drain", "a", "WARN", "operation refused", "refused", "eve", "x", 401, "wrong operations token"},
			{"undrain", "a", "WARN", "operation refused", "refused", "", "", 403, "cross-origin request refused"},
			{"enable", "nothing", "WARN", "operation refused", "refused", "", "", 404, `no election, job or group "nothing"`},
			{"trigger", "billing.1", "WARN", "operation refused", "refused", "bad\nname", "", 400, "the operator name must be"},
			{"drain", "b", "WARN", "operation failed", "failed", "alice", "maintenance", 502, "no answer within 2s"},
		} {
			l := opLine(t, lines, tc.op, tc.target)
			what := tc.op + " " + tc.target
			assert.Equal(t, tc.level, l["level"], what)
			assert.Equal(t, tc.msg, l["msg"], what)
			assert.Equal(t, tc.outcome, l["outcome"], what)
			assert.Equal(t, tc.operator, l["operator"], what)
			assert.Equal(t, tc.reason, l["reason"], what)
			assert.Equal(t, tc.status, l["status"], what)
			assert.Contains(t, l["answer"], tc.answer, what)
			assert.Equal(t, "192.0.2.1:1234", l["remote"], what)
		}
		for _, secret := range []string{testToken, aliceToken, "wrong-token"} {
			assert.NotContains(t, logs.String(), secret, "no token in the log")
		}
	})
}

func TestOperatorOptions(t *testing.T) {
	b := memory.New()
	defer b.Close()
	a, err := admin.Open(t.Context(), b.Node("console"))
	require.NoError(t, err)
	defer a.Close()
	s, err := New(a, WithOperators(map[string]string{aliceToken: "alice"}))
	require.NoError(t, err, "operators alone authorize operations")
	s.Close()
	for name, tc := range map[string]struct {
		opts []Option
		want error
	}{
		"a weak token":          {[]Option{WithOperators(map[string]string{"short": "alice"})}, ErrWeakToken},
		"an empty name":         {[]Option{WithOperators(map[string]string{aliceToken: ""})}, ErrInvalidOption},
		"a name with a newline": {[]Option{WithOperators(map[string]string{aliceToken: "al\nice"})}, ErrInvalidOption},
		"a long name":           {[]Option{WithOperators(map[string]string{aliceToken: strings.Repeat("a", MaxOperatorLen+1)})}, ErrInvalidOption},
		"a short timeout":       {[]Option{WithToken(testToken), WithTimeout(time.Millisecond)}, ErrInvalidOption},
		"an empty backend name": {[]Option{WithToken(testToken), WithBackendName("")}, ErrInvalidOption},
	} {
		s, err := New(a, tc.opts...)
		assert.ErrorIs(t, err, tc.want, name)
		assert.Nil(t, s, name)
	}
}

func TestParseOperators(t *testing.T) {
	got, err := ParseOperators(strings.NewReader("# operators\n\nalice: " + aliceToken + "\n bob :" + testToken + "\n"))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{aliceToken: "alice", testToken: "bob"}, got)
	for text, want := range map[string]string{
		"":                    "no operators",
		"alice " + aliceToken: "line 1: want name:token",
		"alice:short":         `line 1: the token of "alice"`,
		":" + aliceToken:      "line 1: ",
		"alice:" + aliceToken + "\nalice:" + testToken: `line 2: operator "alice" is on line 1`,
		"alice:" + aliceToken + "\nbob:" + aliceToken:  `line 2: "bob" has the same token as "alice"`,
	} {
		_, err := ParseOperators(strings.NewReader(text))
		require.ErrorIs(t, err, ErrInvalidOption, text)
		assert.Contains(t, err.Error(), want, text)
		assert.NotContains(t, err.Error(), aliceToken, "no token in the error")
	}
}
