package admin

import "time"

// The records the nodes write, as Admin reads them. Their JSON is that of
// the records in the backend, so that a program may print them as JSON
// (the simba command's --json) and read them back.

// Status is the status of one election or partition, written by its
// holder.
type Status struct {
	Lease     string `json:"lease"`           // the election, or "{group}.{p}"
	Group     string `json:"group,omitempty"` // the group, for a partition
	Partition int    `json:"partition"`       // the partition number; -1 for a plain election
	// Holder is the current holder; nil once it handed off cleanly. A
	// holder found here by its successor ended without a hand-off (a crash,
	// a partition): a fail-over.
	Holder *Holder `json:"holder,omitempty"`
	// Schedule describes the schedule, "" for an election that runs while
	// it holds its lease (simba's Election.RunWhileLeader).
	Schedule string `json:"schedule,omitempty"`
	// NextPlanned is the next planned start of the schedule; a successor
	// that finds it passed knows a start was missed while no one held the
	// lease.
	NextPlanned time.Time `json:"nextPlanned,omitzero"`
	LastRun     *Run      `json:"lastRun,omitempty"` // the last run started
	Succeeded   uint64    `json:"succeeded"`         // runs that did not fail
	Failed      uint64    `json:"failed"`            // runs that failed
	// FailStreak is the number of runs in a row that failed, up to the
	// last run (0 after a success): a schedule that pauses itself after N
	// failures (simba.WithPauseAfter) pauses when it reaches N.
	FailStreak int `json:"failStreak,omitempty"`
	// SkippedRuns counts the planned starts skipped, with a reason (see
	// Run.Skipped).
	SkippedRuns uint64 `json:"skippedRuns,omitempty"`
	// HistorySeq is the sequence number (Run.Seq) of the last run in the
	// history.
	HistorySeq uint64    `json:"historySeq"`
	Updated    time.Time `json:"updated"` // when it was written
	// Terms are the lease's last terms, oldest first, at most 32: each
	// holder appends its own when it writes its first status and ends it
	// with its hand-off; a successor ends the previous one when it finds
	// it still open (a fail-over). They are read from two records: the
	// lease's term log (terms/<lease>, which each holder writes once its
	// term has begun) and the terms the status record carries beside it
	// (the holder's own, whose end its hand-off writes with the release).
	Terms []Term `json:"terms,omitempty"`
}

// Holder is the holder of a term.
type Holder struct {
	Member  string    `json:"member"`  // the holder's member id
	Session string    `json:"session"` // its session
	Token   uint64    `json:"token"`   // the term's fencing token
	Since   time.Time `json:"since"`   // when the term began
}

// Term is one term of a lease, in its status's term log (Status.Terms).
type Term struct {
	Token  uint64    `json:"token"`  // the term's fencing token
	Member string    `json:"member"` // its holder's member id
	Start  time.Time `json:"start"`  // when it began, on its holder's clock
	// End is when it ended: its revocation, on its holder's clock, for a
	// hand-off; its successor's start, on the successor's clock, for a
	// fail-over. Zero while it holds, or when it ended unseen.
	End time.Time `json:"end,omitzero"`
	// Ended says how it ended: EndedFailOver, EndedMoved, or the reason
	// its holder gave (simba.RevokeReason's String: "resigned", "member
	// drained", …); "" while it holds.
	Ended string `json:"ended,omitempty"`
	// TTLms is the session TTL its holder was granted, in milliseconds:
	// a term that failed over ended at most about a TTL before its
	// successor began, when a successor was waiting.
	TTLms int64 `json:"ttlMs,omitempty"`
}

// How terms ended (Term.Ended), besides the words of a revocation's
// reason.
const (
	// EndedFailOver: the holder ended without a hand-off (a crash, a
	// partition, a lost session); its successor wrote the end, at its own
	// start: the term ended no later than End.
	EndedFailOver = "fail-over"
	// EndedMoved: the group's assignment gave the partition to another
	// member, and this one handed it off.
	EndedMoved = "moved"
)

// Run is one entry of an election's execution history.
type Run struct {
	Seq    uint64    `json:"seq"`          // its place in the history, from 1
	Token  uint64    `json:"token"`        // the term's fencing token
	Member string    `json:"member"`       // who ran it
	Start  time.Time `json:"start"`        // when it started
	End    time.Time `json:"end,omitzero"` // when it ended (zero while running)
	// Result is "succeeded", "failed" or "cancelled" (simba.Result's
	// String), "running" (in flight, or its holder is gone),
	// "interrupted" (the holder's term ended while it ran, without a
	// hand-off) or "skipped" (not a run, but planned starts that did not
	// happen: see Skipped).
	Result string `json:"result"`
	Error  string `json:"error,omitempty"` // the error, if any
	// Source says why it ran: "normal" (its schedule), "misfire" (a start
	// missed while no one held the lease), "trigger" (Admin.Trigger) or
	// "fail-over" (the first run of a term that took over from a holder
	// that ended without a hand-off).
	Source string `json:"source"`
	// ExitCode is the exit status of the command the run ran, as the run
	// reported it (an error with a method ExitCode() int: see "Exit codes"
	// in package simba's doc); nil when it reported none, as runs of other
	// functions, runs of commands a signal ended, and records written
	// before the field existed.
	ExitCode *int `json:"exitCode,omitempty"`
	// Attempt is the run's attempt under its schedule's retry policy: 1
	// for the first, more for a retry; 0 in records written before
	// retries existed.
	Attempt int `json:"attempt,omitempty"`
	// Args are the arguments of a triggered run (Admin.TriggerWith), nil
	// for other runs.
	Args map[string]string `json:"args,omitempty"`
	// Skipped, for an entry of Result "skipped", is how many planned
	// starts it stands for, the first at Start and the last at End; Error
	// says why, in a simba.SkipReason's words: "overlap", "misfire",
	// "catch-up window", "disabled" or "paused".
	Skipped int `json:"skipped,omitempty"`
}

// Op is an operation in force or pending: who asked, when and why (see
// DescribeOp).
type Op struct {
	// Token, for a resign, is the token of the term to end (0: whichever
	// holds the lease when the request is seen).
	Token  uint64    `json:"token,omitempty"`
	By     string    `json:"by,omitempty"`     // who asked (WithOperator, Admin.As)
	At     time.Time `json:"at"`               // when
	Reason string    `json:"reason,omitempty"` // why, in the operator's words
	// Args, for a trigger, are the arguments the run receives
	// (Admin.TriggerWith; simba.RunInfo in the run).
	Args map[string]string `json:"args,omitempty"`
	// Paused, for a disable, says that the job paused itself after failed
	// runs in a row (simba.WithPauseAfter) rather than that an operator
	// disabled it; Enable resumes it all the same. DescribeOp and the
	// simba command and console show it as "paused after failures".
	Paused bool `json:"paused,omitempty"`
}

// Health is a client's recent session renewals, written by the client
// itself every few seconds while it has new ones: how much of its term it
// had left when each renewal was confirmed. A client living close to its
// deadline (a slow backend, long pauses) shows here before it loses a
// term.
type Health struct {
	Member  string    `json:"member"`  // the client's member id
	Session string    `json:"session"` // its session now
	TTLms   int64     `json:"ttlMs"`   // the TTL granted, in milliseconds
	Updated time.Time `json:"updated"` // when it was written
	// Renewals are the last renewals confirmed, oldest first, at most 16.
	Renewals []Renewal `json:"renewals"`
	// Failed counts renewals that failed since the client started.
	Failed uint64 `json:"failed,omitempty"`
}

// Renewal is one confirmed session renewal of a Health.
type Renewal struct {
	At time.Time `json:"at"` // when it was confirmed
	// LeftMs is how much of the term was left when it was confirmed: the
	// deadline before it, less the time of its confirmation, in
	// milliseconds (never negative: a renewal past the deadline ends the
	// session).
	LeftMs int64 `json:"leftMs"`
	// RTTms is the renewal's round trip, in milliseconds.
	RTTms int64 `json:"rttMs"`
}

// AuditEntry is one entry of the audit trail: an operation an Admin
// performed, who asked, why, when, and what it changed.
type AuditEntry struct {
	// V is the version of the entry's format (1); Audit skips entries of
	// another version, as a Problem.
	V      int       `json:"v"`
	At     time.Time `json:"at"`               // when
	By     string    `json:"by"`               // who: the operator
	Reason string    `json:"reason,omitempty"` // why, in the operator's words
	// Op is the operation: "disable", "enable", "trigger", "resign",
	// "drain" or "undrain".
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
