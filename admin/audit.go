package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/records"
)

// ErrAuditNotWritten is wrapped by the error of an operation that took
// effect but whose audit entry could not be written: the operation is not
// to be repeated.
var ErrAuditNotWritten = errors.New("simba/admin: the operation took effect, but its audit entry was not written")

// OpError is the error of an operation (disable, enable, trigger, resign,
// drain, undrain) that did not take effect: Err says why.
type OpError struct {
	Op     string // "disable", …
	Target string // the name or member operated on
	Err    error
}

func (e *OpError) Error() string {
	return fmt.Sprintf("simba/admin: %s %q: %v", e.Op, e.Target, e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }

// operate performs one operation with the admin's session and then appends
// its audit entry: do writes the operation record at the instant at and
// says whether it changed what is in force and how. The backend's records
// cannot write two keys in one atomic step, so the operation comes first
// and the entry after it: an entry never records an operation that did
// not happen, and an operation whose entry failed returns an error
// wrapping ErrAuditNotWritten.
func (a *Admin) operate(ctx context.Context, op, target string, token uint64, reason string,
	do func(ctx context.Context, w *session, at time.Time) (changed bool, change string, err error)) error {
	at := time.Now()
	var changed bool
	var change string
	var w *session
	err := a.withSession(ctx, func(s *session) (err error) {
		w = s
		changed, change, err = do(ctx, s, at)
		return err
	})
	switch {
	case errors.Is(err, errClosed):
		return err
	case err != nil:
		return &OpError{Op: op, Target: target, Err: err}
	}
	entry := records.Audit{
		V: records.AuditVersion, At: at, By: a.by, Reason: reason,
		Op: op, Target: target, Token: token, Changed: changed, Change: change,
	}
	if err := a.appendAudit(ctx, w, entry); err != nil {
		return fmt.Errorf("%w: %s %q: %w", ErrAuditNotWritten, op, target, err)
	}
	return nil
}

// appendAudit writes entry under a new key, then prunes the trail (see
// records.AppendAudit, which the core's pause after failures uses too).
func (a *Admin) appendAudit(ctx context.Context, w *session, entry records.Audit) error {
	return records.AppendAudit(ctx, w.rec, entry)
}

// pruneBatch bounds the entries one write prunes (records.AuditPruneBatch).
const pruneBatch = records.AuditPruneBatch

// AuditFilter selects entries of the audit trail. The zero filter selects
// every entry.
type AuditFilter struct {
	// Name, when set, selects the entries of operations on it: an
	// election, job, group or lease, or a member id.
	Name string
	// Since, when set, selects the entries written at or after it.
	Since time.Time
	// Limit, when positive, is the most entries returned (the newest).
	Limit int
}

// Audit returns the entries of the audit trail that filter selects, newest
// first, and the problems of the entries that could not be used (skipped
// whatever the filter). It reads through the view, like the other reads.
func (a *Admin) Audit(ctx context.Context, filter AuditFilter) ([]AuditEntry, []Problem, error) {
	list, problems, err := a.list(ctx, records.AuditPrefix)
	if err != nil {
		return nil, nil, err
	}
	type keyed struct {
		key string
		e   AuditEntry
	}
	var out []keyed
	for _, r := range list {
		e, p := parseAudit(r)
		switch {
		case p != nil:
			problems = append(problems, *p)
		case filter.Name != "" && e.Target != filter.Name:
		case !filter.Since.IsZero() && e.At.Before(filter.Since):
		default:
			out = append(out, keyed{r.Key, e})
		}
	}
	slices.SortFunc(out, func(x, y keyed) int { return cmp.Or(y.e.At.Compare(x.e.At), strings.Compare(y.key, x.key)) })
	if filter.Limit > 0 && len(out) > filter.Limit {
		out = out[:filter.Limit]
	}
	entries := make([]AuditEntry, len(out))
	for i, k := range out {
		entries[i] = k.e
	}
	return entries, sortProblems(problems), nil
}

// parseAudit checks an audit record: its key is audit/, a time and a
// suffix, its value an entry of this version with an operation.
func parseAudit(r backend.Record) (AuditEntry, *Problem) {
	if _, err := records.AuditKeyTime(r.Key); err != nil {
		return AuditEntry{}, newProblem(r.Key, "the key is not that of an audit entry: %v", err)
	}
	e, err := records.DecodeAudit(r.Value)
	if err != nil {
		return AuditEntry{}, decodeProblem(r.Key, "an audit entry (JSON)", r.Value, err)
	}
	return auditEntryOf(e), nil
}
