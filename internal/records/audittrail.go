package records

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	"github.com/simba-go/simba/backend"
)

// AuditPruneBatch bounds the entries one AppendAudit prunes, so that an
// operation stays quick after a burst or a change of the bounds.
const AuditPruneBatch = 100

// AppendAudit writes entry to the audit trail through rec, under a new key
// (AuditKey of its time and a random suffix), then prunes the trail (see
// AuditKeep and AuditMaxAge), deleting at most AuditPruneBatch entries: a
// failed prune is left to the next write. Package admin writes its
// operations' entries with it, and the core the entry of a schedule that
// paused itself.
func AppendAudit(ctx context.Context, rec backend.Records, entry Audit) error {
	key := AuditKey(entry.At, AuditSuffix())
	if _, err := rec.PutRecord(ctx, key, Encode(entry), backend.Condition{IfVersion: true}); err != nil {
		return err
	}
	list, err := rec.ListRecords(ctx, AuditPrefix)
	if err != nil {
		return nil // pruned by the next write
	}
	for _, k := range PruneAuditKeys(list, entry.At) {
		if err := rec.DeleteRecord(ctx, k, backend.Condition{}); err != nil {
			return nil // the rest by the next write
		}
	}
	return nil
}

// PruneAuditKeys returns the keys of the audit entries to delete at now,
// oldest first, at most AuditPruneBatch: those beyond the newest AuditKeep,
// and those older than AuditMaxAge. Entries whose key has no time are left
// alone (admin's Audit reports them).
func PruneAuditKeys(list []backend.Record, now time.Time) []string {
	type keyed struct {
		key string
		at  time.Time
	}
	var entries []keyed
	for _, r := range list {
		if at, err := AuditKeyTime(r.Key); err == nil {
			entries = append(entries, keyed{r.Key, at})
		}
	}
	slices.SortFunc(entries, func(x, y keyed) int { return cmp.Or(x.at.Compare(y.at), strings.Compare(x.key, y.key)) })
	var out []string
	for i, e := range entries {
		if len(out) == AuditPruneBatch {
			break
		}
		if len(entries)-i > AuditKeep || now.Sub(e.at) > AuditMaxAge {
			out = append(out, e.key)
		}
	}
	return out
}

// AuditSuffix returns 16 random lowercase hex digits, the unique part of
// an audit entry's key.
func AuditSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
