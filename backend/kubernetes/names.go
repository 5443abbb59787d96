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

	"github.com/simba-go/simba/internal/backoff"
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

// decodeName decodes a lease name object, or says what is wrong with it.
func decodeName(name string, l *coordv1.Lease) (*nameState, error) {
	bad := func(why string) error {
		return fmt.Errorf("simba/kubernetes: lease object %q for %q is not one this backend wrote (edited by hand?): %s; repair or delete it", l.Name, name, why)
	}
	if got := l.Annotations[annName]; got != name {
		return nil, bad(fmt.Sprintf("annotation %s is %q", annName, trunc(got)))
	}
	last, err := strconv.ParseUint(l.Annotations[annLast], 10, 64)
	if err != nil || last > maxToken {
		return nil, bad(fmt.Sprintf("annotation %s is %q, want a token", annLast, trunc(l.Annotations[annLast])))
	}
	var q []entry
	if err := json.Unmarshal([]byte(l.Annotations[annQueue]), &q); err != nil {
		return nil, bad(fmt.Sprintf("annotation %s does not decode: %v", annQueue, err))
	}
	for i, e := range q {
		if e.T == 0 || e.T > last || e.S == "" || i > 0 && e.T <= q[i-1].T {
			return nil, bad(fmt.Sprintf("annotation %s: entry %d (%d, %q) out of order", annQueue, i, e.T, trunc(e.S)))
		}
	}
	return &nameState{obj: l, last: last, queue: q}, nil
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
