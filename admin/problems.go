package admin

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/records"
)

// Problem is a record that a read skipped because it could not be used: a
// value that is not the JSON of its kind of record, a key that names
// nothing simba writes, or a stored value that the backend cannot read as a
// record or a group member at all (see backend.MalformedError), such as a
// value put under the prefix with etcdctl. The read goes on without it; Snapshot and
// HistoryWithProblems report the records skipped, and Ops and Group carry
// theirs.
type Problem struct {
	// Key is the record's key (for a group member's record,
	// "group/{group}/{session}"), cut to 160 bytes with "…".
	Key string `json:"key"`
	// Reason says why it was skipped, cut to 320 bytes with "…". It
	// quotes at most the first 48 bytes of a bad value.
	Reason string `json:"reason"`
}

// Bounds of what a Problem repeats of a record, so that a huge key or value
// is not printed whole (the numbers are in Problem's documentation).
const (
	maxProblemKey    = 160 // bytes of the key
	maxProblemReason = 320 // bytes of the reason
	maxProblemEcho   = 48  // bytes of a bad value or name quoted in a reason
)

// String formats p for a line of text: the key quoted, then the reason.
func (p Problem) String() string { return strconv.Quote(p.Key) + ": " + p.Reason }

// newProblem returns the problem of key, with both parts cut to their
// bounds.
func newProblem(key, format string, args ...any) *Problem {
	return &Problem{Key: clip(key, maxProblemKey), Reason: clip(fmt.Sprintf(format, args...), maxProblemReason)}
}

// RecordError is the error of a read of one record that could not be used
// (see Problem), such as Status of a lease whose status record is not JSON.
type RecordError struct{ Problem Problem }

func (e *RecordError) Error() string {
	return "simba/admin: record " + e.Problem.String()
}

// clip returns s as valid UTF-8, cut at a character boundary to at most n
// bytes, the last three of them an ellipsis, when it is longer.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// echo quotes the first maxProblemEcho bytes of b for a reason, with "…"
// when there is more.
func echo(b []byte) string {
	if len(b) <= maxProblemEcho {
		return strconv.Quote(string(b))
	}
	return strconv.Quote(string(b[:maxProblemEcho])) + "…"
}

// echoString is echo of a string.
func echoString(s string) string { return echo([]byte(s)) }

// nameRule describes a valid lease, election or group name, for reasons.
const nameRule = "1-128 characters of A-Z a-z 0-9 . _ -, the first a letter or digit"

// maxPartitions bounds the partition count and numbers the admin accepts
// from a record: a record claiming more is taken for garbage rather than
// shown as that many partitions.
const maxPartitions = 1 << 20

// decodeProblem is the problem of a value that did not decode as what.
func decodeProblem(key, what string, value []byte, err error) *Problem {
	if len(value) == 0 {
		return newProblem(key, "the value is empty, not %s", what)
	}
	return newProblem(key, "the value is not %s: %v (value %s)", what, err, echo(value))
}

// parseStatus checks a status record: its key names a lease, its value is
// a Status of that lease, and a partition's status names its group and
// partition consistently.
func parseStatus(r backend.Record) (Status, *Problem) { return parseStatusWith(r, nil) }

// parseStatusWith is parseStatus, the status's terms merged with log, the
// terms of the lease's term log (records.MergeTerms).
func parseStatusWith(r backend.Record, log []records.Term) (Status, *Problem) {
	name, ok := strings.CutPrefix(r.Key, records.StatusPrefix)
	if !ok || !backend.ValidName(name) {
		return Status{}, newProblem(r.Key, "the key does not name a lease (status/ then %s)", nameRule)
	}
	var rec records.Status
	if err := records.Decode(r.Value, &rec); err != nil {
		return Status{}, decodeProblem(r.Key, "a status record (JSON)", r.Value, err)
	}
	rec.Terms = records.MergeTerms(log, rec.Terms)
	st := statusOf(rec)
	switch {
	case st.Lease == "":
		return Status{}, newProblem(r.Key, "the status names no lease (value %s)", echo(r.Value))
	case st.Lease != name:
		return Status{}, newProblem(r.Key, "the status is of lease %s, not of the lease its key names", echoString(st.Lease))
	case st.Group == "":
		return st, nil
	case !backend.ValidName(st.Group):
		return Status{}, newProblem(r.Key, "the status names group %s, which is not a group name (%s)", echoString(st.Group), nameRule)
	case st.Partition < 0 || st.Partition >= maxPartitions:
		return Status{}, newProblem(r.Key, "the status names partition %d of group %s, out of range (0 to %d)", st.Partition, echoString(st.Group), maxPartitions-1)
	case st.Lease != st.Group+"."+strconv.Itoa(st.Partition):
		return Status{}, newProblem(r.Key, "the status names partition %d of group %s, whose lease is not %s", st.Partition, echoString(st.Group), echoString(st.Lease))
	}
	return st, nil
}

// parseHealth checks a health record: its key names the member its value
// is of.
func parseHealth(r backend.Record) (Health, *Problem) {
	member, _ := strings.CutPrefix(r.Key, records.HealthPrefix)
	var rec records.Health
	if err := records.Decode(r.Value, &rec); err != nil {
		return Health{}, decodeProblem(r.Key, "a health record (JSON)", r.Value, err)
	}
	h := healthOf(rec)
	if h.Member != member {
		return Health{}, newProblem(r.Key, "the health record is of member %s, not of the member its key names", echoString(h.Member))
	}
	return h, nil
}

// parseRun checks a history record of lease: its key is a slot of the
// lease's history, its value a Run with a sequence number.
func parseRun(r backend.Record, lease string) (Run, *Problem) {
	slot, ok := strings.CutPrefix(r.Key, records.HistoryKeys(lease))
	if !ok || slot == "" || len(slot) > 4 || strings.Trim(slot, "0123456789") != "" {
		return Run{}, newProblem(r.Key, "the key is not a slot of the history of %s (history/%s/ then a number)", lease, lease)
	}
	var rec records.Run
	if err := records.Decode(r.Value, &rec); err != nil {
		return Run{}, decodeProblem(r.Key, "a run record (JSON)", r.Value, err)
	}
	if rec.Seq == 0 {
		return Run{}, newProblem(r.Key, "the run has no sequence number (value %s)", echo(r.Value))
	}
	return runOf(rec), nil
}

// Kinds of operation records, by key prefix.
var opKinds = []string{records.DisabledPrefix, records.TriggerPrefix, records.ResignPrefix, records.DrainPrefix}

// parseOp checks an operation record: its key is one of the operations'
// prefixes followed by a name (a member id for a drain), its value an Op.
func parseOp(r backend.Record) (prefix, name string, op Op, p *Problem) {
	i := slices.IndexFunc(opKinds, func(k string) bool { return strings.HasPrefix(r.Key, k) })
	if i < 0 {
		return "", "", Op{}, newProblem(r.Key, "not an operation simba knows (ops/disabled/, ops/trigger/, ops/resign/ or ops/drain/, then a name)")
	}
	prefix = opKinds[i]
	name = records.Name(r.Key, prefix)
	if prefix == records.DrainPrefix {
		if !validMemberID(name) {
			return "", "", Op{}, newProblem(r.Key, "the key does not name a member (ops/drain/ then 1-%d characters without /)", backend.MaxNameLen)
		}
	} else if !backend.ValidName(name) {
		return "", "", Op{}, newProblem(r.Key, "the key does not name an election, job, group or lease (%s then %s)", prefix, nameRule)
	}
	var rec records.Op
	if err := records.Decode(r.Value, &rec); err != nil {
		return "", "", Op{}, decodeProblem(r.Key, "an operation record (JSON)", r.Value, err)
	}
	return prefix, name, opOf(rec), nil
}

// validMemberID reports whether id may be a member id in an operation.
func validMemberID(id string) bool {
	return id != "" && len(id) <= backend.MaxNameLen && !strings.ContainsAny(id, "/ ")
}

// memberData is what a member of a group publishes: the partition count
// and assignment it uses.
type memberData struct {
	P int    `json:"p"`
	A string `json:"a"`
}

// memberKey names the record of a group member in a Problem.
func memberKey(group, session string) string { return "group/" + group + "/" + session }

// parseMember checks the record a member of group publishes.
func parseMember(group string, m backend.Member) (memberData, *Problem) {
	key := memberKey(group, m.Session)
	var d memberData
	if err := records.Decode(m.Data, &d); err != nil {
		return memberData{}, decodeProblem(key, "a member record (JSON)", m.Data, err)
	}
	if d.P <= 0 || d.P > maxPartitions {
		return memberData{}, newProblem(key, "member %s uses %d partitions, out of range (1 to %d)", echoString(m.ID), d.P, maxPartitions)
	}
	return d, nil
}

// malformedRecord is the problem of a stored value at key that the backend
// cannot read as a record; reason is the backend's.
func malformedRecord(key, reason string) *Problem {
	return newProblem(key, "the backend cannot read it as a record: %s", reason)
}

// malformedMember is the problem of a member entry of group that the
// backend cannot read as a member record; reason is the backend's.
func malformedMember(group, session, reason string) *Problem {
	return newProblem(memberKey(group, session), "the backend cannot read it as a group member: %s", reason)
}

// sortProblems sorts ps by key and reason and drops duplicates.
func sortProblems(ps []Problem) []Problem {
	slices.SortFunc(ps, func(x, y Problem) int {
		if c := strings.Compare(x.Key, y.Key); c != 0 {
			return c
		}
		return strings.Compare(x.Reason, y.Reason)
	})
	return slices.Compact(ps)
}

// parseTermLog checks a term log record: its key names a lease, its value
// is a TermLog of that lease. It returns the lease and its terms.
func parseTermLog(r backend.Record) (string, []records.Term, *Problem) {
	name, ok := strings.CutPrefix(r.Key, records.TermsPrefix)
	if !ok || !backend.ValidName(name) {
		return "", nil, newProblem(r.Key, "the key does not name a lease (terms/ then %s)", nameRule)
	}
	var rec records.TermLog
	if err := records.Decode(r.Value, &rec); err != nil {
		return "", nil, decodeProblem(r.Key, "a term log record (JSON)", r.Value, err)
	}
	if rec.Lease != name {
		return "", nil, newProblem(r.Key, "the term log is of lease %s, not of the lease its key names", echoString(rec.Lease))
	}
	return name, rec.Terms, nil
}
