package kubernetes

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kit/view"
	"github.com/simba-go/simba/backend/kit/wake"
)

// errNotHolder marks a fenced write whose lease is not held.
var errNotHolder = errors.New("not the holder")

// errChanged marks a compare-and-swap that found its object changed since
// it was read: the caller reads again.
var errChanged = errors.New("changed since read")

// MaxLeaseRecordBytes bounds the records kept in one lease name's object:
// the sum, over the records last written fenced by that lease (and not
// moved or deleted since), of their encoded annotations (about 4/3 of the
// value plus the key plus 100 bytes each). A write past it is refused with
// an error saying so; the rest of the object's 256 KiB of annotations is
// left to the queue (about 60 bytes a candidacy). So a lease may fence two
// records of the largest size (64 KiB), or a few hundred small ones; store
// larger data unfenced, where each record has an object of its own.
const MaxLeaseRecordBytes = 192 << 10

// fencedAnnPfx prefixes the annotation (and the label) of a record kept in
// a lease name's object.
const fencedAnnPfx = "r.simba.io/"

func fencedAnn(key string) string { return fencedAnnPfx + hashName(key) }

// fencedRecord is the annotation of a record kept in a lease name's object.
type fencedRecord struct {
	K string `json:"k"` // key
	V []byte `json:"v"` // value
	T uint64 `json:"t"` // token
	N uint64 `json:"n"` // version
}

// decodeRecord decodes a record object.
func decodeRecord(l *coordv1.Lease) (backend.Record, *backend.MalformedError) {
	key, ok := l.Annotations[annKey]
	if !ok || backend.CheckKey(key) != nil {
		return backend.Record{}, &backend.MalformedError{Key: l.Name, Reason: fmt.Sprintf("annotation %s is missing or not a key: %q", annKey, trunc(key))}
	}
	bad := func(why string) (backend.Record, *backend.MalformedError) {
		return backend.Record{}, &backend.MalformedError{Key: key, Reason: why}
	}
	if l.Name != recordObject(key) {
		return bad(fmt.Sprintf("object %s is not the record object of its key", l.Name))
	}
	v, err := base64.StdEncoding.DecodeString(l.Annotations[annValue])
	if err != nil {
		return bad(fmt.Sprintf("annotation %s is not base64: %q", annValue, trunc(l.Annotations[annValue])))
	}
	tok, err := strconv.ParseUint(l.Annotations[annToken], 10, 64)
	if err != nil {
		return bad(fmt.Sprintf("annotation %s is not a token: %q", annToken, trunc(l.Annotations[annToken])))
	}
	ver, err := strconv.ParseUint(l.Annotations[annVersion], 10, 64)
	if err != nil || ver == 0 {
		return bad(fmt.Sprintf("annotation %s is not a version: %q", annVersion, trunc(l.Annotations[annVersion])))
	}
	return backend.Record{Key: key, Value: v, Version: ver, Token: tok}, nil
}

// decodeFenced decodes the record annotation ann of a lease name object.
// It returns the key it holds ("" when not even that decodes).
func decodeFenced(l *coordv1.Lease, ann string) (string, backend.Record, *backend.MalformedError) {
	var f fencedRecord
	raw := l.Annotations[ann]
	if err := json.Unmarshal([]byte(raw), &f); err != nil || backend.CheckKey(f.K) != nil || fencedAnn(f.K) != ann {
		return "", backend.Record{}, &backend.MalformedError{Key: l.Name + "/" + ann, Reason: fmt.Sprintf("annotation %s of lease object %s is not a record: %q", ann, l.Name, trunc(raw))}
	}
	if f.T > maxToken || f.N == 0 || len(f.V) > backend.MaxRecordValue {
		return f.K, backend.Record{}, &backend.MalformedError{Key: f.K, Reason: fmt.Sprintf("annotation %s of lease object %s has token %d, version %d, %d bytes", ann, l.Name, f.T, f.N, len(f.V))}
	}
	if f.V == nil {
		f.V = []byte{}
	}
	return f.K, backend.Record{Key: f.K, Value: f.V, Version: f.N, Token: f.T}, nil
}

// A record annotation's token is 0 when an unfenced write replaced, in
// place, a record that a fenced write had put there.

// stored is one stored copy of a key's record: in its record object
// (lease "") or in the object of the lease name that fenced its write.
type stored struct {
	obj   *coordv1.Lease
	lease string
	raw   string // the record annotation, for a lease object
	rec   backend.Record
	bad   *backend.MalformedError
}

// wins reports whether copy a is read in preference to copy c: the larger
// token; on a tie a lease object's copy over the record object's, then the
// smaller object name. Two copies exist only between a write that moved a
// record and its removal of the old copy (see the package documentation).
func (a *stored) wins(c *stored) bool {
	if a.rec.Token != c.rec.Token {
		return a.rec.Token > c.rec.Token
	}
	if (a.lease == "") != (c.lease == "") {
		return a.lease != ""
	}
	return a.obj.Name < c.obj.Name
}

// winner returns the copy read for the key, nil when there is none.
func winner(cs []stored) *stored {
	var w *stored
	for i := range cs {
		if w == nil || cs[i].wins(w) {
			w = &cs[i]
		}
	}
	return w
}

// locate reads every stored copy of key: its record object and the lease
// objects labelled with it.
func (b *Backend) locate(ctx context.Context, key string) ([]stored, error) {
	var cs []stored
	l, err := b.leases.Get(ctx, recordObject(key), metav1.GetOptions{})
	switch {
	case err == nil:
		r, me := decodeRecord(l)
		if me == nil && r.Key != key {
			me = &backend.MalformedError{Key: key, Reason: "the object holds key " + trunc(r.Key)}
		}
		if me != nil {
			me.Key = key
			r = backend.Record{}
		}
		cs = append(cs, stored{obj: l, rec: r, bad: me})
	case !apierrors.IsNotFound(err):
		return nil, err
	}
	ann := fencedAnn(key)
	list, err := b.leases.List(ctx, metav1.ListOptions{LabelSelector: selector(kindLease) + "," + ann})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		o := &list.Items[i]
		raw, ok := o.Annotations[ann]
		if !ok {
			continue
		}
		k, r, me := decodeFenced(o, ann)
		if me == nil && k != key {
			continue // a hash collision of 160 bits: not this key
		}
		if me != nil {
			me.Key = key
			r = backend.Record{}
		}
		cs = append(cs, stored{obj: o, lease: o.Annotations[annName], raw: raw, rec: r, bad: me})
	}
	return cs, nil
}

// notHolder is the error of a fenced write whose lease is not held.
func (s *session) notHolder(op string, cond backend.Condition) error {
	return fmt.Errorf("simba/kubernetes: %s: lease %q is not held with token %d by session %s: %w (%w)", op, cond.Lease, cond.Token, s.id, backend.ErrConflict, errNotHolder)
}

// holds reports whether st's first candidacy is (token, this session),
// the object's spec.preferredHolder does not name another session that
// waits (see nameState.yieldsTo), and the session is within its deadline.
func (s *session) holds(st *nameState, token uint64) bool {
	return len(st.queue) > 0 && st.queue[0] == (entry{T: token, S: s.id}) && st.yieldsTo(s.id) == "" && s.live()
}

// checkFence requires this session's candidacy (lease, token) to be first
// in the queue and the session live: a check before a write, used only
// where the write cannot be in the lease's object (see DeleteRecord).
func (s *session) checkFence(ctx context.Context, op string, cond backend.Condition) error {
	if cond.Token == 0 {
		return nil
	}
	if !backend.ValidName(cond.Lease) || cond.Token > maxToken {
		return s.notHolder(op, cond)
	}
	st, err := s.b.readName(ctx, cond.Lease)
	if err != nil {
		return s.fail(ctx, op, err)
	}
	if !s.holds(st, cond.Token) {
		return s.notHolder(op, cond)
	}
	return nil
}

// setFenced sets (rec not nil) or removes the record annotation and label
// of key on a lease name object.
func setFenced(obj *coordv1.Lease, key string, rec *backend.Record) {
	ann := fencedAnn(key)
	if rec == nil {
		delete(obj.Annotations, ann)
		delete(obj.Labels, ann)
		return
	}
	raw, _ := json.Marshal(fencedRecord{K: key, V: rec.Value, T: rec.Token, N: rec.Version})
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	if obj.Labels == nil {
		obj.Labels = map[string]string{}
	}
	obj.Annotations[ann] = string(raw)
	obj.Labels[ann] = "1"
}

// checkLeaseSize refuses a lease name object whose records exceed
// MaxLeaseRecordBytes.
func checkLeaseSize(op, name string, obj *coordv1.Lease) error {
	n := 0
	for k, v := range obj.Annotations {
		if strings.HasPrefix(k, fencedAnnPfx) {
			n += len(k) + len(v)
		}
	}
	if n > MaxLeaseRecordBytes {
		return fmt.Errorf("simba/kubernetes: %s: the records fenced by lease %q would take %d bytes of its object, more than MaxLeaseRecordBytes (%d): write fewer or smaller records under this lease, or large ones unfenced", op, name, n, MaxLeaseRecordBytes)
	}
	return nil
}

// writeInLease writes rec (nil: removes the record) of key in the object
// of lease name, in one compare-and-swap that also requires, when
// cond.Token is set, this session's candidacy with that token to be
// first, and requires the record annotation there to be raw (had: present
// at all) as last read. It returns errChanged when the object changed
// since it was read, errNotHolder-wrapping errors when the fence fails.
func (s *session) writeInLease(ctx context.Context, op, name, key string, rec *backend.Record, cond backend.Condition, raw string, had bool) error {
	st, err := s.b.readName(ctx, name)
	if err != nil {
		return err
	}
	if cond.Token != 0 && !s.holds(st, cond.Token) {
		return s.notHolder(op, cond)
	}
	if st.obj == nil {
		return errChanged
	}
	if cur, ok := st.obj.Annotations[fencedAnn(key)]; ok != had || cur != raw {
		return errChanged
	}
	obj := st.obj.DeepCopy()
	setFenced(obj, key, rec)
	if rec != nil {
		if err := checkLeaseSize(op, name, obj); err != nil {
			return err
		}
	}
	if hook := s.b.beforeFencedWrite; hook != nil {
		hook()
	}
	_, err = s.b.leases.Update(ctx, obj, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return errChanged
	}
	return err
}

// writeRecordObject writes rec in key's own record object, cur being that
// object as read (nil: none), by compare-and-swap on its resourceVersion.
func (b *Backend) writeRecordObject(ctx context.Context, key string, rec backend.Record, cur *coordv1.Lease) error {
	var obj *coordv1.Lease
	if cur != nil {
		obj = cur.DeepCopy()
	} else {
		obj = &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: recordObject(key)}}
	}
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	// The labels and annotations of others stay (see the package
	// documentation): only this backend's are set.
	if obj.Labels == nil {
		obj.Labels = map[string]string{}
	}
	maps.Copy(obj.Labels, newLabels(kindRecord))
	obj.Annotations[annKey] = key
	obj.Annotations[annValue] = base64.StdEncoding.EncodeToString(rec.Value)
	obj.Annotations[annToken] = strconv.FormatUint(rec.Token, 10)
	obj.Annotations[annVersion] = strconv.FormatUint(rec.Version, 10)
	var err error
	if cur != nil {
		_, err = b.leases.Update(ctx, obj, metav1.UpdateOptions{})
	} else {
		_, err = b.leases.Create(ctx, obj, metav1.CreateOptions{})
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return errChanged
	}
	return err
}

// removeCopy removes one stored copy if it is still as read; a copy that
// changed meanwhile stays (errChanged).
func (b *Backend) removeCopy(ctx context.Context, key string, c *stored) error {
	if c.lease == "" {
		rv := c.obj.ResourceVersion
		err := b.leases.Delete(ctx, c.obj.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		if apierrors.IsConflict(err) {
			return errChanged
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	ann := fencedAnn(key)
	for attempt := 1; attempt <= 3; attempt++ {
		o, err := b.leases.Get(ctx, c.obj.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if raw, ok := o.Annotations[ann]; !ok || raw != c.raw {
			if !ok {
				return nil
			}
			return errChanged
		}
		setFenced(o, key, nil)
		_, err = b.leases.Update(ctx, o, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return errChanged
}

// dropCopies removes, best effort, the copies of key other than the one in
// home (a lease name, or "" for the record object) that were read before a
// write there: the written copy wins over them (see stored.wins), so what
// is left only costs space until the key's next write.
func (b *Backend) dropCopies(ctx context.Context, key string, cs []stored, home string) {
	for i := range cs {
		if cs[i].lease == home {
			continue
		}
		if err := b.removeCopy(ctx, key, &cs[i]); err != nil {
			b.log.Debug("simba/kubernetes: removing an old copy of a record", "key", key, "object", cs[i].obj.Name, "err", err)
		}
	}
}

// retry sleeps before attempt's retry of op.
func retry(ctx context.Context, op string, attempt int) error {
	if !backoff.Sleep(ctx, backoff.Wait(attempt, 200*time.Millisecond)) {
		return fmt.Errorf("simba/kubernetes: %s: %w", op, context.Cause(ctx))
	}
	return nil
}

// source is what sessions and views read (view.Source): Gets and Lists
// of the namespace's objects.
type source struct{ b *Backend }

var (
	_ view.Source = source{}
	// With view.Reader's reads: records, skipped entries, held leases.
	_ backend.Records      = (*session)(nil)
	_ backend.SkipReporter = (*session)(nil)
	_ backend.LeaseLister  = (*session)(nil)
)

// GetRecord reads the copies of key's record and returns the one that
// wins (see stored.wins).
func (src source) GetRecord(ctx, _ context.Context, key string) (backend.Record, error) {
	b := src.b
	op := fmt.Sprintf("get record %q", key)
	cs, err := b.locate(ctx, key)
	if err != nil {
		return backend.Record{}, b.apiErr(op, err)
	}
	w := winner(cs)
	if w == nil {
		return backend.Record{}, fmt.Errorf("simba/kubernetes: %s: %w", op, backend.ErrNoRecord)
	}
	if w.bad != nil {
		return backend.Record{}, fmt.Errorf("simba/kubernetes: %s: %w", op, w.bad)
	}
	return w.rec, nil
}

// ListRecords lists the record objects and the lease objects' records,
// and keeps, for each key under prefix, the copy that wins.
func (src source) ListRecords(ctx, _ context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	b := src.b
	recs, err := b.leases.List(ctx, metav1.ListOptions{LabelSelector: selector(kindRecord)})
	if err != nil {
		return nil, nil, b.apiErr("list records", err)
	}
	names, err := b.leases.List(ctx, metav1.ListOptions{LabelSelector: selector(kindLease)})
	if err != nil {
		return nil, nil, b.apiErr("list records", err)
	}
	best := map[string]*stored{}
	var skipped []backend.MalformedError
	offer := func(c stored) {
		if w, ok := best[c.rec.Key]; !ok || c.wins(w) {
			best[c.rec.Key] = &c
		}
	}
	for i := range recs.Items {
		l := &recs.Items[i]
		if !strings.HasPrefix(l.Annotations[annKey], prefix) {
			continue
		}
		r, me := decodeRecord(l)
		if me != nil {
			skipped = append(skipped, *me)
			continue
		}
		offer(stored{obj: l, rec: r})
	}
	for i := range names.Items {
		l := &names.Items[i]
		for ann := range l.Annotations {
			if !strings.HasPrefix(ann, fencedAnnPfx) {
				continue
			}
			k, r, me := decodeFenced(l, ann)
			if me != nil {
				if strings.HasPrefix(k, prefix) && (k != "" || prefix == "") {
					skipped = append(skipped, *me)
				}
				continue
			}
			if strings.HasPrefix(k, prefix) {
				offer(stored{obj: l, lease: l.Annotations[annName], rec: r})
			}
		}
	}
	out := make([]backend.Record, 0, len(best))
	for _, c := range best {
		out = append(out, c.rec)
	}
	// A key with a record besides a malformed copy is a record.
	skipped = slices.DeleteFunc(skipped, func(m backend.MalformedError) bool { return best[m.Key] != nil })
	slices.SortFunc(out, func(a, c backend.Record) int { return strings.Compare(a.Key, c.Key) })
	slices.SortFunc(skipped, func(a, c backend.MalformedError) int { return strings.Compare(a.Key, c.Key) })
	if len(out) == 0 {
		out = nil
	}
	return out, skipped, nil
}

func checkCond(op string, cond backend.Condition) error {
	if cond.Token != 0 && (cond.Token > maxToken || !backend.ValidName(cond.Lease)) {
		return fmt.Errorf("simba/kubernetes: %s: lease %q is not held with token %d: %w", op, cond.Lease, cond.Token, backend.ErrConflict)
	}
	return nil
}

func (s *session) PutRecord(ctx context.Context, key string, value []byte, cond backend.Condition) (backend.Record, error) {
	if err := backend.CheckRecord(key, value); err != nil {
		return backend.Record{}, fmt.Errorf("simba/kubernetes: %w", err)
	}
	op := fmt.Sprintf("put record %q", key)
	if err := s.overErr(op); err != nil {
		return backend.Record{}, err
	}
	if err := checkCond(op, cond); err != nil {
		return backend.Record{}, err
	}
	return s.putRecord(ctx, op, key, value, cond)
}

// putRecord writes a record: fenced, in the fencing lease's object, in one
// compare-and-swap with the check that the lease is held; unfenced, where
// the key's record is (its own record object when it has none).
func (s *session) putRecord(ctx context.Context, op, key string, value []byte, cond backend.Condition) (backend.Record, error) {
	for attempt := 1; ; attempt++ {
		cs, err := s.b.locate(ctx, key)
		if err != nil {
			return backend.Record{}, s.fail(ctx, op, err)
		}
		cur := winner(cs)
		var curRec backend.Record
		if cur != nil {
			curRec = cur.rec
		}
		switch {
		case cond.IfVersion && cond.Version == 0 && cur != nil:
			return backend.Record{}, fmt.Errorf("simba/kubernetes: %s: a record exists, want none: %w", op, backend.ErrConflict)
		case cond.IfVersion && cond.Version != 0 && cur == nil:
			return backend.Record{}, fmt.Errorf("simba/kubernetes: %s: no record, want version %d: %w", op, cond.Version, backend.ErrConflict)
		case cond.IfVersion && cond.Version != 0 && curRec.Version != cond.Version:
			return backend.Record{}, fmt.Errorf("simba/kubernetes: %s: version %d, want %d: %w", op, curRec.Version, cond.Version, backend.ErrConflict)
		case cond.Token != 0 && curRec.Token > cond.Token:
			return backend.Record{}, fmt.Errorf("simba/kubernetes: %s: written with token %d, newer than %d: %w", op, curRec.Token, cond.Token, backend.ErrConflict)
		}
		rec := backend.Record{Key: key, Value: append([]byte{}, value...), Version: rand.Uint64N(1<<63-1) + 1, Token: cond.Token}
		home := ""
		switch {
		case cond.Token != 0:
			home = cond.Lease
		case cur != nil:
			home = cur.lease
		}
		if home == "" {
			var obj *coordv1.Lease
			for i := range cs {
				if cs[i].lease == "" {
					obj = cs[i].obj
				}
			}
			err = s.b.writeRecordObject(ctx, key, rec, obj)
		} else {
			var raw string
			had := false
			for i := range cs {
				if cs[i].lease == home {
					raw, had = cs[i].raw, true
				}
			}
			err = s.writeInLease(ctx, op, home, key, &rec, cond, raw, had)
		}
		switch {
		case errors.Is(err, errChanged):
			if err := retry(ctx, op, attempt); err != nil {
				return backend.Record{}, err
			}
			continue
		case errors.Is(err, errNotHolder), err != nil && strings.Contains(err.Error(), "MaxLeaseRecordBytes"):
			return backend.Record{}, err
		case err != nil:
			return backend.Record{}, s.fail(ctx, op, err)
		}
		s.b.dropCopies(ctx, key, cs, home)
		return rec, nil
	}
}

func (s *session) DeleteRecord(ctx context.Context, key string, cond backend.Condition) error {
	if err := backend.CheckKey(key); err != nil {
		return fmt.Errorf("simba/kubernetes: %w", err)
	}
	op := fmt.Sprintf("delete record %q", key)
	if err := s.overErr(op); err != nil {
		return err
	}
	if err := checkCond(op, cond); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		cs, err := s.b.locate(ctx, key)
		if err != nil {
			return s.fail(ctx, op, err)
		}
		cur := winner(cs)
		if cur == nil {
			if err := s.checkFence(ctx, op, cond); err != nil {
				return err
			}
			if cond.IfVersion && cond.Version != 0 {
				return fmt.Errorf("simba/kubernetes: %s: no record, want version %d: %w", op, cond.Version, backend.ErrConflict)
			}
			return nil
		}
		switch {
		case cond.IfVersion && cur.rec.Version != cond.Version:
			return fmt.Errorf("simba/kubernetes: %s: version %d, want %d: %w", op, cur.rec.Version, cond.Version, backend.ErrConflict)
		case cond.Token != 0 && cur.rec.Token > cond.Token:
			return fmt.Errorf("simba/kubernetes: %s: written with token %d, newer than %d: %w", op, cur.rec.Token, cond.Token, backend.ErrConflict)
		}
		if cond.Token != 0 && cur.lease == cond.Lease {
			// In the fencing lease's object: one compare-and-swap.
			err = s.writeInLease(ctx, op, cur.lease, key, nil, cond, cur.raw, true)
		} else {
			// Elsewhere: the fence is checked just before (not atomic).
			if err := s.checkFence(ctx, op, cond); err != nil {
				return err
			}
			err = s.b.removeCopy(ctx, key, cur)
		}
		switch {
		case errors.Is(err, errChanged):
			if err := retry(ctx, op, attempt); err != nil {
				return err
			}
			continue
		case errors.Is(err, errNotHolder):
			return err
		case err != nil:
			return s.fail(ctx, op, err)
		}
		s.b.dropCopies(ctx, key, cs, cur.lease)
		return nil
	}
}

// WatchRecords hints changes of the records under prefix, from the
// watch's events.
func (src source) WatchRecords(ctx, stop context.Context, prefix string) <-chan struct{} {
	return src.b.watch(ctx, stop, func(f func()) func() { return src.b.hub.subscribeRecords(prefix, f) }, nil)
}

// watch returns a hint channel fed by subscribe, closed when ctx or stop
// ends; next, if not nil, returns when the next hint is due with no event
// (negative: none).
func (b *Backend) watch(ctx, stop context.Context, subscribe func(func()) func(), next func(context.Context) time.Duration) <-chan struct{} {
	return wake.Hints(ctx, stop, &b.wg, subscribe, next)
}

// memberRecord is the annotation of a member on its session object.
type memberRecord struct {
	G  string `json:"g"`
	ID string `json:"id"`
	D  []byte `json:"d"`
}

func (s *session) Join(ctx context.Context, group string, m backend.Member) error {
	if err := s.CheckGroup(group); err != nil {
		return err
	}
	if len(m.Data) > backend.MaxMemberData {
		return fmt.Errorf("simba/kubernetes: join %q: member data of %d bytes, more than %d", group, len(m.Data), backend.MaxMemberData)
	}
	ann, _ := json.Marshal(memberRecord{G: group, ID: m.ID, D: append([]byte{}, m.Data...)})
	return s.write(ctx, fmt.Sprintf("join %q", group), func(l *coordv1.Lease) {
		if l.Labels == nil {
			l.Labels = map[string]string{}
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Labels[groupLabel(group)] = "1"
		l.Annotations[memberAnn(group)] = string(ann)
	})
}

func (s *session) Leave(ctx context.Context, group string) error {
	if err := s.CheckGroup(group); err != nil {
		return err
	}
	op := fmt.Sprintf("leave %q", group)
	if err := s.overErr(op); err != nil {
		return err
	}
	s.wmu.Lock()
	_, member := s.cur.Labels[groupLabel(group)]
	s.wmu.Unlock()
	if !member {
		return nil
	}
	return s.write(ctx, op, func(l *coordv1.Lease) {
		delete(l.Labels, groupLabel(group))
		delete(l.Annotations, memberAnn(group))
	})
}

// Members lists the member sessions of group that this process has not
// seen unchanged for their TTL plus margin (see members).
func (src source) Members(ctx, _ context.Context, group string) ([]backend.Member, []backend.MalformedError, error) {
	ms, skipped, _, err := src.b.members(ctx, group)
	return ms, skipped, err
}

// members lists the member sessions of group that this process has not
// seen unchanged for their TTL plus margin, and returns how long until the
// first of them would be (negative: no member).
func (b *Backend) members(ctx context.Context, group string) ([]backend.Member, []backend.MalformedError, time.Duration, error) {
	list, err := b.leases.List(ctx, metav1.ListOptions{LabelSelector: selector(kindSession) + "," + groupLabel(group)})
	if err != nil {
		return nil, nil, 0, b.apiErr("members", err)
	}
	var ms []backend.Member
	var skipped []backend.MalformedError
	next := time.Duration(-1)
	for i := range list.Items {
		l := &list.Items[i]
		id := strings.TrimPrefix(l.Name, "simba-s-")
		// A spoilt TTL counts as the longest (see sessionTTL): the member
		// stays listed.
		ttl, _ := sessionTTL(l)
		left := time.Until(b.obs.observe(l.Name, l.ResourceVersion).Add(takeoverAfter(ttl)))
		if left <= 0 {
			continue // stopped renewing: dead by this clock
		}
		if next < 0 || left < next {
			next = left
		}
		var m memberRecord
		if err := json.Unmarshal([]byte(l.Annotations[memberAnn(group)]), &m); err != nil || m.G != group || len(m.D) > backend.MaxMemberData {
			skipped = append(skipped, backend.MalformedError{Key: id, Reason: fmt.Sprintf("annotation %s is not a member of %q: %q", memberAnn(group), group, trunc(l.Annotations[memberAnn(group)]))})
			continue
		}
		ms = append(ms, backend.Member{ID: m.ID, Session: id, Data: m.D})
	}
	slices.SortFunc(ms, func(a, c backend.Member) int { return strings.Compare(a.Session, c.Session) })
	slices.SortFunc(skipped, func(a, c backend.MalformedError) int { return strings.Compare(a.Key, c.Key) })
	return ms, skipped, next, nil
}

// WatchMembers hints changes of group: the watch's events of its members'
// session objects, and a wake when the first of them would be seen
// unchanged for its TTL plus margin (a session that stops renewing
// writes nothing).
func (src source) WatchMembers(ctx, stop context.Context, group string) <-chan struct{} {
	b := src.b
	return b.watch(ctx, stop, func(f func()) func() { return b.hub.subscribe("g:"+groupLabel(group), f) }, func(ctx context.Context) time.Duration {
		rctx, cancel := context.WithTimeout(ctx, lookTimeout)
		defer cancel()
		_, _, next, err := b.members(rctx, group)
		if err != nil {
			return time.Second // look again soon
		}
		if next < 0 {
			return -1
		}
		return next + time.Millisecond
	})
}
