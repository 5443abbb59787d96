package kubernetes

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/backoff"
)

// errNotHolder marks a fenced write whose lease is not held.
var errNotHolder = errors.New("not the holder")

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

// checkFence requires this session's candidacy (lease, token) to be first
// in the queue and the session live.
func (s *session) checkFence(ctx context.Context, op string, cond backend.Condition) error {
	if cond.Token == 0 {
		return nil
	}
	fail := fmt.Errorf("simba/kubernetes: %s: lease %q is not held with token %d by session %s: %w (%w)", op, cond.Lease, cond.Token, s.id, backend.ErrConflict, errNotHolder)
	if !backend.ValidName(cond.Lease) || cond.Token > maxToken {
		return fail
	}
	st, err := s.b.readName(ctx, cond.Lease)
	if err != nil {
		return s.fail(ctx, op, err)
	}
	if len(st.queue) == 0 || st.queue[0] != (entry{T: cond.Token, S: s.id}) || !s.live() {
		return fail
	}
	return nil
}

func (s *session) GetRecord(ctx context.Context, key string) (backend.Record, error) {
	if err := backend.CheckKey(key); err != nil {
		return backend.Record{}, fmt.Errorf("simba/kubernetes: %w", err)
	}
	if err := s.overErr("get record"); err != nil {
		return backend.Record{}, err
	}
	return s.b.getRecord(ctx, key)
}

func (b *Backend) getRecord(ctx context.Context, key string) (backend.Record, error) {
	op := fmt.Sprintf("get record %q", key)
	l, err := b.leases.Get(ctx, recordObject(key), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return backend.Record{}, fmt.Errorf("simba/kubernetes: %s: %w", op, backend.ErrNoRecord)
	}
	if err != nil {
		return backend.Record{}, b.apiErr(op, err)
	}
	r, me := decodeRecord(l)
	if me != nil {
		me.Key = key
		return backend.Record{}, fmt.Errorf("simba/kubernetes: %s: %w", op, me)
	}
	if r.Key != key {
		return backend.Record{}, fmt.Errorf("simba/kubernetes: %s: %w", op, &backend.MalformedError{Key: key, Reason: "the object holds key " + trunc(r.Key)})
	}
	return r, nil
}

func (s *session) ListRecords(ctx context.Context, prefix string) ([]backend.Record, error) {
	list, _, err := s.ListRecordsWithSkipped(ctx, prefix)
	return list, err
}

func (s *session) ListRecordsWithSkipped(ctx context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	if err := s.overErr("list records"); err != nil {
		return nil, nil, err
	}
	return s.b.listRecords(ctx, prefix)
}

func (b *Backend) listRecords(ctx context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	list, err := b.leases.List(ctx, metav1.ListOptions{LabelSelector: selector(kindRecord)})
	if err != nil {
		return nil, nil, b.apiErr("list records", err)
	}
	var out []backend.Record
	var skipped []backend.MalformedError
	for i := range list.Items {
		l := &list.Items[i]
		if !strings.HasPrefix(l.Annotations[annKey], prefix) {
			continue
		}
		r, me := decodeRecord(l)
		if me != nil {
			skipped = append(skipped, *me)
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, c backend.Record) int { return strings.Compare(a.Key, c.Key) })
	slices.SortFunc(skipped, func(a, c backend.MalformedError) int { return strings.Compare(a.Key, c.Key) })
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
	return s.putRecord(ctx, key, value, cond, false)
}

// putRecord checks the fence, then writes by compare-and-swap on the
// record object's resourceVersion, never replacing a larger token.
func (s *session) putRecord(ctx context.Context, key string, value []byte, cond backend.Condition, _ bool) (backend.Record, error) {
	op := fmt.Sprintf("put record %q", key)
	if err := s.checkFence(ctx, op, cond); err != nil {
		return backend.Record{}, err
	}
	for attempt := 1; ; attempt++ {
		cur, err := s.b.leases.Get(ctx, recordObject(key), metav1.GetOptions{})
		exists := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return backend.Record{}, s.fail(ctx, op, err)
		}
		var curRec backend.Record
		if exists {
			if r, me := decodeRecord(cur); me == nil {
				curRec = r
			}
		}
		switch {
		case cond.IfVersion && cond.Version == 0 && exists:
			return backend.Record{}, fmt.Errorf("simba/kubernetes: %s: a record exists, want none: %w", op, backend.ErrConflict)
		case cond.IfVersion && cond.Version != 0 && !exists:
			return backend.Record{}, fmt.Errorf("simba/kubernetes: %s: no record, want version %d: %w", op, cond.Version, backend.ErrConflict)
		case cond.IfVersion && cond.Version != 0 && curRec.Version != cond.Version:
			return backend.Record{}, fmt.Errorf("simba/kubernetes: %s: version %d, want %d: %w", op, curRec.Version, cond.Version, backend.ErrConflict)
		case cond.Token != 0 && curRec.Token > cond.Token:
			return backend.Record{}, fmt.Errorf("simba/kubernetes: %s: written with token %d, newer than %d: %w", op, curRec.Token, cond.Token, backend.ErrConflict)
		}
		version := rand.Uint64N(1<<63-1) + 1
		var obj *coordv1.Lease
		if exists {
			obj = cur.DeepCopy()
		} else {
			obj = &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: recordObject(key), Labels: newLabels(kindRecord)}}
		}
		if obj.Annotations == nil {
			obj.Annotations = map[string]string{}
		}
		obj.Labels = newLabels(kindRecord)
		obj.Annotations[annKey] = key
		obj.Annotations[annValue] = base64.StdEncoding.EncodeToString(value)
		obj.Annotations[annToken] = strconv.FormatUint(cond.Token, 10)
		obj.Annotations[annVersion] = strconv.FormatUint(version, 10)
		if exists {
			_, err = s.b.leases.Update(ctx, obj, metav1.UpdateOptions{})
		} else {
			_, err = s.b.leases.Create(ctx, obj, metav1.CreateOptions{})
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			if !backoff.Sleep(ctx, backoff.Wait(attempt, 200*time.Millisecond)) {
				return backend.Record{}, fmt.Errorf("simba/kubernetes: %s: %w", op, context.Cause(ctx))
			}
			continue
		}
		if err != nil {
			return backend.Record{}, s.fail(ctx, op, err)
		}
		return backend.Record{Key: key, Value: append([]byte{}, value...), Version: version, Token: cond.Token}, nil
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
	if err := s.checkFence(ctx, op, cond); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		cur, err := s.b.leases.Get(ctx, recordObject(key), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if cond.IfVersion && cond.Version != 0 {
				return fmt.Errorf("simba/kubernetes: %s: no record, want version %d: %w", op, cond.Version, backend.ErrConflict)
			}
			return nil
		}
		if err != nil {
			return s.fail(ctx, op, err)
		}
		r, _ := decodeRecord(cur)
		switch {
		case cond.IfVersion && r.Version != cond.Version:
			return fmt.Errorf("simba/kubernetes: %s: version %d, want %d: %w", op, r.Version, cond.Version, backend.ErrConflict)
		case cond.Token != 0 && r.Token > cond.Token:
			return fmt.Errorf("simba/kubernetes: %s: written with token %d, newer than %d: %w", op, r.Token, cond.Token, backend.ErrConflict)
		}
		rv := cur.ResourceVersion
		err = s.b.leases.Delete(ctx, cur.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return s.fail(ctx, op, err)
		}
		if !backoff.Sleep(ctx, backoff.Wait(attempt, 200*time.Millisecond)) {
			return fmt.Errorf("simba/kubernetes: %s: %w", op, context.Cause(ctx))
		}
	}
}

func (s *session) WatchRecords(ctx context.Context, prefix string) (<-chan struct{}, error) {
	if err := s.overErr("watch records"); err != nil {
		return nil, err
	}
	return s.b.watch(ctx, s.ctx, func(f func()) func() { return s.b.hub.subscribeRecords(prefix, f) }, nil), nil
}

// watch returns a hint channel fed by subscribe, closed when ctx or stop
// ends; next, if not nil, returns when the next hint is due with no event
// (negative: none).
func (b *Backend) watch(ctx, stop context.Context, subscribe func(func()) func(), next func(context.Context) time.Duration) <-chan struct{} {
	out := make(chan struct{}, 1)
	wake := make(chan struct{}, 1)
	unsub := subscribe(func() { poke(wake) })
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer close(out)
		defer unsub()
		for {
			var timer <-chan time.Time
			var t *time.Timer
			if next != nil {
				if d := next(ctx); d >= 0 {
					t = time.NewTimer(d)
					timer = t.C
				}
			}
			select {
			case <-ctx.Done():
			case <-stop.Done():
			case <-wake:
			case <-timer:
			}
			if t != nil {
				t.Stop()
			}
			if ctx.Err() != nil || stop.Err() != nil {
				return
			}
			poke(out)
		}
	}()
	return out
}

// memberRecord is the annotation of a member on its session object.
type memberRecord struct {
	G  string `json:"g"`
	ID string `json:"id"`
	D  []byte `json:"d"`
}

func (s *session) Join(ctx context.Context, group string, m backend.Member) error {
	if err := checkName("group", group); err != nil {
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
	if err := checkName("group", group); err != nil {
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

func (s *session) Members(ctx context.Context, group string) ([]backend.Member, error) {
	ms, _, err := s.MembersWithSkipped(ctx, group)
	return ms, err
}

func (s *session) MembersWithSkipped(ctx context.Context, group string) ([]backend.Member, []backend.MalformedError, error) {
	if err := checkName("group", group); err != nil {
		return nil, nil, err
	}
	if err := s.overErr("members"); err != nil {
		return nil, nil, err
	}
	ms, skipped, _, err := s.b.members(ctx, group)
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
		if ttl, err := sessionTTL(l); err == nil {
			left := time.Until(b.obs.observe(l.Name, l.ResourceVersion).Add(takeoverAfter(ttl)))
			if left <= 0 {
				continue // stopped renewing: dead by this clock
			}
			if next < 0 || left < next {
				next = left
			}
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

func (s *session) WatchMembers(ctx context.Context, group string) (<-chan struct{}, error) {
	if err := checkName("group", group); err != nil {
		return nil, err
	}
	if err := s.overErr("watch members"); err != nil {
		return nil, err
	}
	return s.b.watchMembers(ctx, s.ctx, group), nil
}

func (b *Backend) watchMembers(ctx, stop context.Context, group string) <-chan struct{} {
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
