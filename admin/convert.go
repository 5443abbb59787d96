package admin

import (
	"maps"

	"github.com/simba-go/simba/internal/records"
)

// The conversions from the records as the nodes store them (package
// internal/records, the storage format) to the types of this package, one
// function per type. Every field is copied: TestConvertCopiesEveryField
// fails when a record gains a field that its type here lacks.

func statusOf(r records.Status) Status {
	return Status{
		Lease:       r.Lease,
		Group:       r.Group,
		Partition:   r.Partition,
		Holder:      ptrOf(r.Holder, holderOf),
		Schedule:    r.Schedule,
		NextPlanned: r.NextPlanned,
		LastRun:     ptrOf(r.LastRun, runOf),
		Succeeded:   r.Succeeded,
		Failed:      r.Failed,
		FailStreak:  r.FailStreak,
		SkippedRuns: r.SkippedRuns,
		HistorySeq:  r.HistorySeq,
		Updated:     r.Updated,
		Terms:       sliceOf(r.Terms, termOf),
	}
}

func holderOf(r records.Holder) Holder {
	return Holder{Member: r.Member, Session: r.Session, Token: r.Token, Since: r.Since}
}

func termOf(r records.Term) Term {
	return Term{Token: r.Token, Member: r.Member, Start: r.Start, End: r.End, Ended: r.Ended, TTLms: r.TTLms}
}

func runOf(r records.Run) Run {
	run := Run{
		Seq: r.Seq, Token: r.Token, Member: r.Member, Start: r.Start, End: r.End,
		Result: r.Result, Error: r.Error, Source: r.Source,
		Attempt: r.Attempt, Args: maps.Clone(r.Args), Skipped: r.Skipped,
	}
	if r.ExitCode != nil {
		code := *r.ExitCode
		run.ExitCode = &code
	}
	return run
}

func opOf(r records.Op) Op {
	return Op{Token: r.Token, By: r.By, At: r.At, Reason: r.Reason, Args: maps.Clone(r.Args), Paused: r.Paused}
}

func healthOf(r records.Health) Health {
	return Health{
		Member: r.Member, Session: r.Session, TTLms: r.TTLms, Updated: r.Updated,
		Renewals: sliceOf(r.Renewals, renewalOf), Failed: r.Failed,
	}
}

func renewalOf(r records.Renewal) Renewal {
	return Renewal{At: r.At, LeftMs: r.LeftMs, RTTms: r.RTTms}
}

func auditEntryOf(r records.Audit) AuditEntry {
	return AuditEntry{
		V: r.V, At: r.At, By: r.By, Reason: r.Reason, Op: r.Op, Target: r.Target,
		Token: r.Token, Changed: r.Changed, Change: r.Change,
	}
}

// ptrOf converts *r with conv; nil stays nil.
func ptrOf[R, T any](r *R, conv func(R) T) *T {
	if r == nil {
		return nil
	}
	t := conv(*r)
	return &t
}

// sliceOf converts each of rs with conv; nil stays nil.
func sliceOf[R, T any](rs []R, conv func(R) T) []T {
	if rs == nil {
		return nil
	}
	out := make([]T, len(rs))
	for i, r := range rs {
		out[i] = conv(r)
	}
	return out
}
