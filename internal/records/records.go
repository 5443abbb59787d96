// Package records defines the records simba keeps in a backend's Records
// store: the status of each election, the execution history of scheduled
// elections, and the cluster-wide operations every node watches. The core
// writes and obeys them; package admin (the simba command and the console)
// reads and writes them. Values are JSON.
//
// Keys:
//
//	status/<lease>              Status, written by the holder, fenced by its token
//	history/<lease>/<slot>      Run, written by the holder, fenced: run seq in slot seq%HistoryLen
//	terms/<lease>               TermLog, written by each holder after its term began, fenced
//	ops/disabled/<name>         Op: the election, job or group runs nothing anywhere
//	ops/trigger/<lease>         Op: the holder runs the schedule once as soon as it can
//	ops/resign/<lease>          Op: the holder of the given token hands off
//	ops/drain/<member>          Op: the member hands off everything and stops contending
//	audit/<time>-<unique>       Audit: one operation, who asked, why, what it changed
//	health/<member>             Health: a client's recent renewals, how much of its term was left
package records

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// HistoryLen is the number of runs kept per election.
const HistoryLen = 50

// Key prefixes.
const (
	DataPrefix     = "data/" // the records of Term.PutRecord
	StatusPrefix   = "status/"
	HistoryPrefix  = "history/"
	TermsPrefix    = "terms/"
	OpsPrefix      = "ops/"
	DisabledPrefix = OpsPrefix + "disabled/"
	TriggerPrefix  = OpsPrefix + "trigger/"
	ResignPrefix   = OpsPrefix + "resign/"
	DrainPrefix    = OpsPrefix + "drain/"
	AuditPrefix    = "audit/"
	HealthPrefix   = "health/"
)

// StatusKey is the key of the status of lease.
func StatusKey(lease string) string { return StatusPrefix + lease }

// TermsKey is the key of the term log of lease.
func TermsKey(lease string) string { return TermsPrefix + lease }

// HistoryKey is the key of run seq of lease: the runs take HistoryLen
// slots in turn, so that a run's record replaces that of the run HistoryLen
// before it, and the history needs neither trimming nor new keys once
// full. Order runs by their Seq, not by key.
func HistoryKey(lease string, seq uint64) string {
	return fmt.Sprintf("%s%s/%02d", HistoryPrefix, lease, seq%HistoryLen)
}

// HistoryKeys is the prefix of the history of lease.
func HistoryKeys(lease string) string { return HistoryPrefix + lease + "/" }

// Holder is the holder of a term.
type Holder struct {
	Member  string    `json:"member"`  // the holder's member id
	Session string    `json:"session"` // its session
	Token   uint64    `json:"token"`   // the term's fencing token
	Since   time.Time `json:"since"`   // when the term began
}

// Status is the status of one election or partition lease.
type Status struct {
	Lease     string `json:"lease"`           // the election, or "{group}.{p}"
	Group     string `json:"group,omitempty"` // the group, for a partition
	Partition int    `json:"partition"`       // -1 for a plain election
	// Holder is the current holder; nil once it handed off cleanly. A
	// holder found here by its successor ended without a hand-off (a crash,
	// a partition): a fail-over.
	Holder *Holder `json:"holder,omitempty"`
	// Schedule describes the schedule, "" for RunWhileLeader.
	Schedule string `json:"schedule,omitempty"`
	// NextPlanned is the next planned start of the schedule; a successor
	// that finds it passed knows a start was missed while no one held the
	// lease.
	NextPlanned time.Time `json:"nextPlanned,omitzero"`
	LastRun     *Run      `json:"lastRun,omitempty"` // the last run started
	Succeeded   uint64    `json:"succeeded"`         // runs that did not fail
	Failed      uint64    `json:"failed"`            // runs that failed
	// FailStreak is the number of runs in a row that failed, up to the
	// last run (0 after a success).
	FailStreak int `json:"failStreak,omitempty"`
	// SkippedRuns counts planned starts skipped (see Run.Skipped).
	SkippedRuns uint64 `json:"skippedRuns,omitempty"`
	// HistorySeq is the sequence number of the last run in the history.
	HistorySeq uint64    `json:"historySeq"`
	Updated    time.Time `json:"updated"` // when it was written
	// Terms are the lease's terms that its term log (the TermLog record
	// at TermsKey) may not have as they are now, oldest first: the
	// holder's own, open, or ended by its hand-off, and any earlier term
	// the holder has not written to the log yet (or could not read it to
	// write). The lease's last terms are MergeTerms of the log's and
	// these; a reader reads the status before the log (the holder drops a
	// term from here only once the log it wrote holds it).
	//
	// Each holder adds its own term when it writes its first status and
	// ends it with its hand-off, in the write that releases the lease: the
	// hand-off's write carries this one term, not the whole log. A
	// successor ends the previous one when it finds it still open (a
	// fail-over), and writes the log once its term has begun.
	Terms []Term `json:"terms,omitempty"`
}

// TermLog is the lease's last terms, oldest first, at most TermsLen,
// written by each holder once its term has begun (and its first status
// written), fenced by its token: the log it read, the terms of the status
// it read (MergeTerms), and its own term, open. How a term ended, when its
// holder handed off, is in the status until the next holder writes the log.
type TermLog struct {
	Lease   string    `json:"lease"`
	Terms   []Term    `json:"terms"`
	Updated time.Time `json:"updated"` // when it was written
}

// TermsLen is the number of terms a term log keeps.
const TermsLen = 32

// MergeTerms returns the lease's last terms from its term log's and its
// status's (Status.Terms): a term in both once, by token, oldest first, at
// most TermsLen. Where both have a term, the entry that says how it ended wins,
// the status's when both do or neither does (the status is written later
// in a term than the log).
func MergeTerms(log, status []Term) []Term {
	out := make([]Term, 0, len(log)+len(status))
	out = append(out, log...)
	for _, t := range status {
		// Matched against the log's terms only: each record is taken as it
		// is.
		i := slices.IndexFunc(out[:len(log)], func(o Term) bool { return o.Token == t.Token })
		switch {
		case i < 0:
			out = append(out, t)
		case t.Ended != "" || out[i].Ended == "":
			out[i] = t
		}
	}
	slices.SortStableFunc(out, func(a, b Term) int { return cmp.Compare(a.Token, b.Token) })
	if n := len(out) - TermsLen; n > 0 {
		out = out[n:]
	}
	return out
}

// How terms ended, in Term.Ended, besides the words of a revocation's
// reason (simba.RevokeReason's String: "resigned", "member drained", …).
const (
	// EndedFailOver: the holder ended without a hand-off (a crash, a
	// partition, a lost session); its successor wrote the end, at its own
	// start: the term ended no later than End.
	EndedFailOver = "fail-over"
	// EndedMoved: the group's assignment gave the partition to another
	// member, and this one handed it off.
	EndedMoved = "moved"
)

// Term is one term of a lease, in its status's term log.
type Term struct {
	Token  uint64    `json:"token"`  // the term's fencing token
	Member string    `json:"member"` // its holder's member id
	Start  time.Time `json:"start"`  // when it began, on its holder's clock
	// End is when it ended: its revocation, on its holder's clock, for a
	// hand-off; its successor's start, on the successor's clock, for a
	// fail-over. Zero while it holds, or when it ended unseen.
	End time.Time `json:"end,omitzero"`
	// Ended says how it ended: EndedFailOver, EndedMoved, or the reason
	// its holder gave; "" while it holds.
	Ended string `json:"ended,omitempty"`
	// TTLms is the session TTL its holder was granted, in milliseconds:
	// a term that failed over ended at most about a TTL before its
	// successor began, when a successor was waiting.
	TTLms int64 `json:"ttlMs,omitempty"`
}

// HealthLen is the number of renewals a Health record keeps.
const HealthLen = 16

// HealthEvery is how often a client writes its health record while it has
// renewals the record does not show yet: a record much older than that is
// of a client that may be gone.
const HealthEvery = 5 * time.Second

// HealthKey is the key of member's health record.
func HealthKey(member string) string { return HealthPrefix + member }

// Health is a client's recent session renewals, written by the client
// itself, unfenced, every few seconds while it has new ones: how much of
// its term it had left when each renewal was confirmed. A client living
// close to its deadline (a slow backend, long pauses) shows here before it
// loses a term.
type Health struct {
	Member  string    `json:"member"`  // the client's member id
	Session string    `json:"session"` // its session now
	TTLms   int64     `json:"ttlMs"`   // the TTL granted, in milliseconds
	Updated time.Time `json:"updated"` // when it was written
	// Renewals are the last renewals confirmed, oldest first, at most
	// HealthLen.
	Renewals []Renewal `json:"renewals"`
	// Failed counts renewals that failed since the client started.
	Failed uint64 `json:"failed,omitempty"`
}

// Renewal is one confirmed session renewal.
type Renewal struct {
	At time.Time `json:"at"` // when it was confirmed
	// LeftMs is how much of the term was left when it was confirmed: the
	// deadline before it, less the time of its confirmation, in
	// milliseconds (negative never: a renewal past the deadline ends the
	// session).
	LeftMs int64 `json:"leftMs"`
	// RTTms is the renewal's round trip, in milliseconds.
	RTTms int64 `json:"rttMs"`
}

// Run results in the history, besides the simba.Result names.
const (
	Running     = "running"     // in flight, or its holder is gone (see Interrupted)
	Interrupted = "interrupted" // the holder's term ended while it ran, without a hand-off
	Skipped     = "skipped"     // planned starts not run: see Run.Skipped
)

// Sources of runs.
const (
	SourceNormal   = "normal"
	SourceMisfire  = "misfire"
	SourceTrigger  = "trigger"
	SourceFailOver = "fail-over"
)

// Run is one entry of the execution history.
type Run struct {
	Seq    uint64    `json:"seq"`             // its place in the history
	Token  uint64    `json:"token"`           // the term's token
	Member string    `json:"member"`          // who ran it
	Start  time.Time `json:"start"`           // when it started
	End    time.Time `json:"end,omitzero"`    // when it ended (zero while running)
	Result string    `json:"result"`          // succeeded, failed, cancelled, running or interrupted
	Error  string    `json:"error,omitempty"` // the error, if any
	Source string    `json:"source"`          // normal, misfire, trigger or fail-over
	// ExitCode is the exit status of the command the run ran, as the run
	// reported it (an error with a method ExitCode() int: see "Exit codes"
	// in package simba's doc); nil when it reported none, as runs
	// of other functions, runs of commands a signal ended, and records
	// written before the field existed.
	ExitCode *int `json:"exitCode,omitempty"`
	// Attempt is the run's attempt, 1 for the first (and in records
	// written before retries existed, 0); more for a retry.
	Attempt int `json:"attempt,omitempty"`
	// Args are the arguments of a triggered run.
	Args map[string]string `json:"args,omitempty"`
	// Skipped, for an entry of Result Skipped, is how many planned starts
	// it stands for, from Start to End; Error says why (a
	// simba.SkipReason's words).
	Skipped int `json:"skipped,omitempty"`
}

// Op is a cluster-wide operation request.
type Op struct {
	// Token, for a resign, is the token of the term to end (0: whichever
	// holds the lease when the request is seen).
	Token  uint64    `json:"token,omitempty"`
	By     string    `json:"by,omitempty"`     // who asked
	At     time.Time `json:"at"`               // when
	Reason string    `json:"reason,omitempty"` // why, in the operator's words
	// Args, for a trigger, are the arguments the run receives (see
	// simba.RunInfo).
	Args map[string]string `json:"args,omitempty"`
	// Paused, for a disable, says the job paused itself after failed runs
	// in a row (simba.Schedule.WithPauseAfter) rather than an operator
	// disabling it.
	Paused bool `json:"paused,omitempty"`
}

// Encode marshals v.
func Encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only the package's own types are encoded
	}
	return b
}

// StatusEncoder encodes a holder's status records, as Encode does, but
// encodes again only the terms (Status.Terms) that changed since its last
// encoding: a term appended, or ended in place, once a term, while the
// rest changes with every run. A status carries one term or two as a rule,
// but up to TermsLen (32) when its holder could not write the term log,
// and a hand-off encodes the status on its path. The zero StatusEncoder is
// ready; it is not safe for concurrent use.
type StatusEncoder struct {
	terms   []Term   // the term log last encoded
	parts   [][]byte // each term's encoding
	encoded []byte   // and the log's
}

// Encode returns Encode(st): the status without its term log, and the
// log's encoding spliced in as its last field, where Status declares it
// (the test of StatusEncoder compares the bytes with Encode's).
func (e *StatusEncoder) Encode(st *Status) []byte {
	if !slices.Equal(e.terms, st.Terms) {
		e.encodeTerms(st.Terms)
	}
	rest := *st
	rest.Terms = nil
	b := Encode(&rest)
	if e.encoded == nil {
		return b // no terms: omitted
	}
	const field = `,"terms":`
	out := make([]byte, 0, len(b)+len(field)+len(e.encoded))
	out = append(out, b[:len(b)-1]...) // without its closing brace
	out = append(out, field...)
	out = append(out, e.encoded...)
	return append(out, '}')
}

// encodeTerms encodes terms, reusing the encodings of the terms last
// encoded where they are unchanged at the same place or one place later
// (the oldest dropped as a term was appended). The log's encoding is
// json.Marshal's: its elements', between brackets, separated by commas.
func (e *StatusEncoder) encodeTerms(terms []Term) {
	parts := make([][]byte, len(terms))
	size := 2
	for i, t := range terms {
		for _, j := range [2]int{i, i + 1} {
			if j < len(e.terms) && e.terms[j] == t {
				parts[i] = e.parts[j]
				break
			}
		}
		if parts[i] == nil {
			parts[i] = Encode(t)
		}
		size += len(parts[i]) + 1
	}
	e.terms, e.parts, e.encoded = slices.Clone(terms), parts, nil
	if len(terms) == 0 {
		return
	}
	b := make([]byte, 0, size)
	b = append(b, '[')
	for i, p := range parts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, p...)
	}
	e.encoded = append(b, ']')
}

// Decode unmarshals data into v.
func Decode(data []byte, v any) error { return json.Unmarshal(data, v) }

// Name returns the name after prefix in key.
func Name(key, prefix string) string { return strings.TrimPrefix(key, prefix) }

// AuditVersion is the version of the audit entries this build writes, in
// their field "v". A reader rejects another version rather than guess
// what its fields mean.
const AuditVersion = 1

// AuditTimeLayout is the layout of the time in an audit entry's key: UTC,
// fixed width, so that keys sort as the times do.
const AuditTimeLayout = "20060102T150405.000000000Z"

// Audit retention: the writer of an entry deletes the entries beyond the
// newest AuditKeep, and those older than AuditMaxAge.
const (
	AuditKeep   = 1000
	AuditMaxAge = 30 * 24 * time.Hour
)

// Audit is one entry of the audit trail: an operation an Admin performed.
type Audit struct {
	V      int       `json:"v"`                // AuditVersion
	At     time.Time `json:"at"`               // when
	By     string    `json:"by"`               // who: the operator
	Reason string    `json:"reason,omitempty"` // why, in the operator's words
	// Op is the operation: disable, enable, trigger, resign, drain or
	// undrain.
	Op string `json:"op"`
	// Target is what it applies to: an election, job or group, a lease, or
	// a member id.
	Target string `json:"target"`
	Token  uint64 `json:"token,omitempty"` // the term a resign is of (0: any)
	// Changed reports whether the operation changed what is in force (an
	// enable of what was not disabled changed nothing).
	Changed bool `json:"changed"`
	// Change says what it changed, in words: "disabled; was enabled".
	Change string `json:"change"`
}

// Audit operations.
const (
	OpDisable = "disable"
	OpEnable  = "enable"
	OpTrigger = "trigger"
	OpResign  = "resign"
	OpDrain   = "drain"
	OpUndrain = "undrain"
)

// AuditOps lists the operations an audit entry may name.
var AuditOps = []string{OpDisable, OpEnable, OpTrigger, OpResign, OpDrain, OpUndrain}

// AuditKey is the key of an audit entry written at at; unique (letters and
// digits) tells apart entries written at the same instant.
func AuditKey(at time.Time, unique string) string {
	return AuditPrefix + at.UTC().Format(AuditTimeLayout) + "-" + unique
}

// AuditKeyTime returns the time in an audit entry's key.
func AuditKeyTime(key string) (time.Time, error) {
	rest, ok := strings.CutPrefix(key, AuditPrefix)
	if !ok {
		return time.Time{}, fmt.Errorf("not under %s", AuditPrefix)
	}
	stamp, unique, ok := strings.Cut(rest, "-")
	if !ok || unique == "" || strings.Trim(unique, "0123456789abcdefghijklmnopqrstuvwxyz") != "" {
		return time.Time{}, fmt.Errorf("not %s, a time, - and a lowercase suffix", AuditPrefix)
	}
	if len(stamp) != len(AuditTimeLayout) {
		return time.Time{}, fmt.Errorf("the time is not of the form %s", AuditTimeLayout)
	}
	t, err := time.Parse(AuditTimeLayout, stamp)
	if err != nil {
		return time.Time{}, fmt.Errorf("the time is not of the form %s", AuditTimeLayout)
	}
	return t, nil
}

// DecodeAudit decodes an audit entry and checks its version and
// operation.
func DecodeAudit(data []byte) (Audit, error) {
	var a Audit
	if err := json.Unmarshal(data, &a); err != nil {
		return Audit{}, err
	}
	switch {
	case a.V == 0:
		return Audit{}, errors.New("no version (field v)")
	case a.V != AuditVersion:
		return Audit{}, fmt.Errorf("version %d, not %d: written by another simba", a.V, AuditVersion)
	case !validOp(a.Op):
		return Audit{}, fmt.Errorf("unknown operation %q", clip(a.Op))
	case a.At.IsZero():
		return Audit{}, errors.New("no time (field at)")
	}
	return a, nil
}

func validOp(op string) bool {
	for _, o := range AuditOps {
		if op == o {
			return true
		}
	}
	return false
}

// clip cuts s to 32 bytes for an error message.
func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}
