package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/simba-go/simba/backend/kit/backoff"
)

// entry is one candidacy in a lease name's queue.
type entry struct {
	T uint64 `json:"t"` // token
	S string `json:"s"` // session id
}

// nameState is the decoded lease name object.
type nameState struct {
	obj   *coordv1.Lease // nil: no object yet
	last  uint64
	queue []entry
}

// CorruptObjectError reports a lease name object that is not as this
// backend writes it: edited by hand (kubectl edit, apply) or written by
// another program. Acquire, Release and Candidates of that name fail with
// an error wrapping it (see [errors.As]), and the backend never rewrites
// the object: whoever edited it repairs it (deleting it restarts the
// name's tokens at 1, which breaks the fencing of records and of anything
// that compares tokens: do not). Other names are not affected.
type CorruptObjectError struct {
	Namespace string // the object's namespace
	Object    string // the Lease object's name, "simba-l-..."
	Name      string // the lease name it is the object of
	Field     string // the annotation (or spec field) at fault
	Reason    string // what is wrong with it, quoting at most its start
}

func (e *CorruptObjectError) Error() string {
	return fmt.Sprintf("simba/kubernetes: lease object %s/%s (of lease name %q) is not as this backend writes it (edited by hand?): %s %s; repair it by hand, or restore it from a backup (deleting it restarts the name's tokens at 1)", e.Namespace, e.Object, e.Name, e.Field, e.Reason)
}

// decodeName decodes a lease name object, or says what is wrong with it
// (a *CorruptObjectError).
func decodeName(name string, l *coordv1.Lease) (*nameState, error) {
	bad := func(field, format string, args ...any) error {
		return &CorruptObjectError{Namespace: l.Namespace, Object: l.Name, Name: name, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if got, ok := l.Annotations[annName]; !ok {
		return nil, bad(annName, "is missing")
	} else if got != name {
		return nil, bad(annName, "is %q, want %q", trunc(got), trunc(name))
	}
	raw, ok := l.Annotations[annLast]
	if !ok {
		return nil, bad(annLast, "is missing")
	}
	last, err := strconv.ParseUint(raw, 10, 64)
	if err != nil || last > maxToken {
		return nil, bad(annLast, "is %q, want the last token granted (a decimal integer from 0 to 2^62)", trunc(raw))
	}
	raw, ok = l.Annotations[annQueue]
	if !ok {
		return nil, bad(annQueue, "is missing")
	}
	var q []entry
	if err := json.Unmarshal([]byte(raw), &q); err != nil {
		return nil, bad(annQueue, "is %q, not a JSON list of candidacies: %v", trunc(raw), err)
	}
	seen := make(map[string]bool, len(q))
	for i, e := range q {
		switch {
		case e.T == 0:
			return nil, bad(annQueue, "entry %d has token 0", i)
		case e.T > last:
			return nil, bad(annQueue, "entry %d has token %d, above the last token granted (annotation %s: %d)", i, e.T, annLast, last)
		case i > 0 && e.T <= q[i-1].T:
			return nil, bad(annQueue, "entry %d has token %d after token %d: out of order or repeated", i, e.T, q[i-1].T)
		case !validSessionID(e.S):
			return nil, bad(annQueue, "entry %d has session %q, want 32 hex digits", i, trunc(e.S))
		case seen[e.S]:
			return nil, bad(annQueue, "entry %d: session %s has more than one candidacy", i, e.S)
		}
		seen[e.S] = true
	}
	var holder string
	if h := l.Spec.HolderIdentity; h != nil {
		holder = *h
	}
	switch {
	case len(q) > 0 && holder != q[0].S:
		return nil, bad("spec.holderIdentity", "is %q, but the first candidacy of %s is session %s", trunc(holder), annQueue, q[0].S)
	case len(q) == 0 && holder != "":
		return nil, bad("spec.holderIdentity", "is %q, but %s is empty", trunc(holder), annQueue)
	}
	return &nameState{obj: l, last: last, queue: q}, nil
}

// yieldsTo returns the session that the object's spec.preferredHolder
// names when it is not sid and has a candidacy in the queue: the session
// that sid's candidacy stands aside for (see the package documentation,
// "Preferred holder"); "" when there is none.
func (st *nameState) yieldsTo(sid string) string {
	if st.obj == nil || st.obj.Spec.PreferredHolder == nil {
		return ""
	}
	p := *st.obj.Spec.PreferredHolder
	if p == "" || p == sid {
		return ""
	}
	for _, e := range st.queue {
		if e.S == p {
			return p
		}
	}
	return ""
}

// validSessionID reports whether id is a session id: 32 lower-case hex
// digits.
func validSessionID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, c := range []byte(id) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func trunc(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// readName reads the queue of name (an empty state when it has no object).
func (b *Backend) readName(ctx context.Context, name string) (*nameState, error) {
	l, err := b.leases.Get(ctx, nameObject(name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &nameState{}, nil
	}
	if err != nil {
		return nil, b.apiErr(fmt.Sprintf("reading the queue of %q", name), err)
	}
	return decodeName(name, l)
}

// updateName applies f to the queue of name by compare-and-swap, retrying
// on conflicts; f reports whether it changed anything (nothing written if
// not). It returns the state written (or read, unchanged).
func (b *Backend) updateName(ctx context.Context, name string, f func(*nameState) (bool, error)) (*nameState, error) {
	for attempt := 1; ; attempt++ {
		st, err := b.readName(ctx, name)
		if err != nil {
			return nil, err
		}
		changed, err := f(st)
		if err != nil || !changed {
			return st, err
		}
		obj := st.obj
		if obj == nil {
			obj = &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nameObject(name), Labels: newLabels(kindLease)}}
		} else {
			obj = obj.DeepCopy()
		}
		encodeName(obj, name, st)
		var got *coordv1.Lease
		if st.obj == nil {
			got, err = b.leases.Create(ctx, obj, metav1.CreateOptions{})
		} else {
			got, err = b.leases.Update(ctx, obj, metav1.UpdateOptions{})
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			if !backoff.Sleep(ctx, backoff.Wait(attempt, 200*time.Millisecond)) {
				return nil, fmt.Errorf("simba/kubernetes: updating the queue of %q: %w", name, context.Cause(ctx))
			}
			continue
		}
		if err != nil {
			return nil, b.apiErr(fmt.Sprintf("updating the queue of %q", name), err)
		}
		st.obj = got
		return st, nil
	}
}

// encodeName writes st's counter and queue into obj, the object of name.
func encodeName(obj *coordv1.Lease, name string, st *nameState) {
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	q, _ := json.Marshal(st.queue)
	if st.queue == nil {
		q = []byte("[]")
	}
	obj.Annotations[annName] = name
	obj.Annotations[annLast] = strconv.FormatUint(st.last, 10)
	obj.Annotations[annQueue] = string(q)
	if len(st.queue) > 0 {
		h := st.queue[0].S
		obj.Spec.HolderIdentity = &h
	} else {
		obj.Spec.HolderIdentity = nil
	}
}

// removeEntries removes from the queue of name the candidacies of session
// sid (only the one with token, if token is not 0), and reports whether
// there were any.
func (b *Backend) removeEntries(ctx context.Context, name, sid string, token uint64) (bool, error) {
	removed := false
	_, err := b.updateName(ctx, name, func(st *nameState) (bool, error) {
		removed = false
		q := st.queue[:0:0]
		for _, e := range st.queue {
			if e.S == sid && (token == 0 || e.T == token) {
				removed = true
				continue
			}
			q = append(q, e)
		}
		st.queue = q
		return removed, nil
	})
	return removed, err
}
