package kubetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	typedcoordv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/simba-go/simba/backend/kit/backoff"
)

// The labels and annotations of backend/kubernetes that the tests read (see
// its package documentation).
const (
	// SimbaSelector selects every object the backend writes.
	SimbaSelector = "app.kubernetes.io/managed-by=simba"
	labelKind     = "simba.io/kind"
	annName       = "simba.io/name"
	annLast       = "simba.io/last"
	annQueue      = "simba.io/queue"
	sessionPrefix = "simba-s-"
)

// Kinds of simba objects, by the label simba.io/kind.
const (
	KindSession = "session"
	KindLease   = "lease"
	KindRecord  = "record"
)

// Kind returns the kind of the simba object l (KindSession, KindLease,
// KindRecord), or "" if it is none.
func Kind(l *coordv1.Lease) string { return l.Labels[labelKind] }

// SessionID returns the id of the session whose object l is; ok is false
// if l is not a session object.
func SessionID(l *coordv1.Lease) (id string, ok bool) {
	if Kind(l) != KindSession {
		return "", false
	}
	return strings.TrimPrefix(l.Name, sessionPrefix), true
}

// Candidacy is one entry of a lease name's queue, as the backend writes it
// in the annotation simba.io/queue: the token and the session id. The
// first entry holds the lease while its session's object exists.
type Candidacy struct {
	T uint64 `json:"t"`
	S string `json:"s"`
}

// Queue returns the lease name of the lease name object l, its queue
// (oldest first) and the last token its counter gave out. It fails if l is
// not a lease name object, or its annotations do not decode.
func Queue(l *coordv1.Lease) (name string, queue []Candidacy, last uint64, err error) {
	if Kind(l) != KindLease {
		return "", nil, 0, fmt.Errorf("kubetest: %s is not a lease name object (kind %q)", l.Name, Kind(l))
	}
	name = l.Annotations[annName]
	if s := l.Annotations[annQueue]; s != "" {
		if err := json.Unmarshal([]byte(s), &queue); err != nil {
			return name, nil, 0, fmt.Errorf("kubetest: the queue of %s: %w", l.Name, err)
		}
	}
	if s := l.Annotations[annLast]; s != "" {
		if last, err = strconv.ParseUint(s, 10, 64); err != nil {
			return name, queue, 0, fmt.Errorf("kubetest: the counter of %s: %w", l.Name, err)
		}
	}
	return name, queue, last, nil
}

// ResourceVersion returns the resourceVersion rv as a number: the revision
// of the etcd under the server, which orders every write of the server
// (clients must treat it as opaque; the tests, which know the server, may
// compare it).
func ResourceVersion(rv string) (uint64, error) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("kubetest: resourceVersion %q is not a number", rv)
	}
	return n, nil
}

// LeaseHandler takes what [WatchLeases] sees. Its methods are called from
// one goroutine, in the server's order of the writes.
type LeaseHandler interface {
	// Listed takes a list of every simba object, answered at the instant at
	// at revision rv. The first comes before any event; a later one
	// follows a watch that could not go on from where it was (the server
	// restarted, or its watch cache no longer reaches back): the writes
	// made since the last event show only as the difference.
	Listed(items []coordv1.Lease, rv uint64, at time.Time)
	// Event takes one write, as the watch delivered it at the instant at;
	// rv is its revision (the object's resourceVersion; for a delete, the
	// revision of the delete).
	Event(typ watch.EventType, l *coordv1.Lease, rv uint64, at time.Time)
}

// WatchLeases follows the simba objects of leases' namespace until ctx
// ends, with h: a list, then a watch from the list's revision; when a watch
// ends it watches again from the last revision it delivered, so that no
// write is missed, and lists again only when that fails. Failed requests
// are retried with a jittered backoff (up to 500ms). It returns when ctx
// ends.
func WatchLeases(ctx context.Context, leases typedcoordv1.LeaseInterface, h LeaseHandler) {
	const most = 500 * time.Millisecond
	var rv uint64 // of the last list or event; 0: list first
	for attempt := 0; ctx.Err() == nil; {
		if rv == 0 {
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			list, err := leases.List(lctx, metav1.ListOptions{LabelSelector: SimbaSelector})
			cancel()
			at := time.Now()
			if err == nil {
				rv, err = ResourceVersion(list.ResourceVersion)
			}
			if err != nil {
				attempt++
				backoff.Sleep(ctx, backoff.Wait(attempt, most))
				continue
			}
			h.Listed(list.Items, rv, at)
		}
		w, err := leases.Watch(ctx, metav1.ListOptions{LabelSelector: SimbaSelector, ResourceVersion: strconv.FormatUint(rv, 10),
			AllowWatchBookmarks: true})
		if err != nil {
			attempt++
			backoff.Sleep(ctx, backoff.Wait(attempt, most))
			continue
		}
		got := false
		for ev := range w.ResultChan() {
			got = true
			at := time.Now()
			l, ok := ev.Object.(*coordv1.Lease)
			if !ok {
				// An error (such as 410 Gone: the revision is too old to
				// watch from): list again.
				rv = 0
				break
			}
			n, err := ResourceVersion(l.ResourceVersion)
			if err != nil {
				rv = 0
				break
			}
			rv = n
			if ev.Type != watch.Bookmark {
				h.Event(ev.Type, l, n, at)
			}
		}
		w.Stop()
		if got && rv != 0 {
			attempt = 0
			continue
		}
		attempt++ // an error, or a watch that ended at once
		backoff.Sleep(ctx, backoff.Wait(attempt, most))
	}
}
