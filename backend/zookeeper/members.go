package zookeeper

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/go-zookeeper/zk"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kit/frame"
	"github.com/simba-go/simba/backend/kit/wake"
)

// memberVersion is the first byte of an encoded member record.
const memberVersion = 1

// encodeMember encodes a member record: a version byte, the ID's length as
// a uvarint, the ID, then the data.
func encodeMember(id string, data []byte) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(id)+len(data))
	b = append(b, memberVersion)
	b = binary.AppendUvarint(b, uint64(len(id)))
	b = append(b, id...)
	return append(b, data...)
}

// decodeMember decodes a member record.
func decodeMember(b []byte) (id string, data []byte, err error) {
	if len(b) == 0 || b[0] != memberVersion {
		return "", nil, errors.New("not a simba member record")
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n > uint64(len(b)-1-k) {
		return "", nil, errors.New("corrupt member record")
	}
	rest := b[1+k:]
	id = string(rest[:n])
	if len(rest) > int(n) {
		data = slices.Clone(rest[n:])
	}
	return id, data, nil
}

// isSessionID reports whether s is a session ID as ID returns it.
func isSessionID(s string) bool {
	if len(s) != 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Join makes the session a member of group: the ephemeral znode
// <root>/group/<group>/<session ID>, whose data holds m.ID (the session ID
// when empty) and m.Data. Joining again replaces the znode in one atomic
// multi-operation, so that member watches fire. A request cannot be
// withdrawn: a Join whose caller gave up goes on, but if Leave is called
// for the group meanwhile, it writes nothing once the Leave's request has
// run (the requests of Join and Leave take one lock of the session), so a
// Join given up never makes the session a member again after a Leave.
func (s *session) Join(ctx context.Context, group string, m backend.Member) error {
	if err := checkName("group", group); err != nil {
		return err
	}
	if len(m.Data) > backend.MaxMemberData {
		return fmt.Errorf("simba/zookeeper: join %q: member data of %d bytes exceeds %d", group, len(m.Data), backend.MaxMemberData)
	}
	if err := s.live("join"); err != nil {
		return err
	}
	id := m.ID
	if id == "" {
		id = s.sid
	}
	data := encodeMember(id, m.Data)
	path := s.p.member(group, s.sid)
	acl := s.b.cfg.acl
	s.mu.Lock()
	leaves := s.leaves[group]
	s.mu.Unlock()
	_, err := callWith(s, ctx, fmt.Sprintf("join %q", group), false, func(c *zk.Conn) (struct{}, error) {
		// A request goes on after its caller gave up: if a Leave was
		// called since, this Join is superseded and must not make the
		// session a member again after the Leave's delete.
		s.memberMu.Lock()
		defer s.memberMu.Unlock()
		s.mu.Lock()
		superseded := s.leaves[group] != leaves
		s.mu.Unlock()
		if superseded {
			return struct{}{}, nil
		}
		for attempt := 0; ; attempt++ {
			_, err := c.Create(path, data, zk.FlagEphemeral, acl)
			if errors.Is(err, zk.ErrNodeExists) {
				_, err = c.Multi(
					&zk.DeleteRequest{Path: path, Version: -1},
					&zk.CreateRequest{Path: path, Data: data, Acl: acl, Flags: zk.FlagEphemeral},
				)
			}
			if !errors.Is(err, zk.ErrNoNode) || attempt == 3 {
				return struct{}{}, err
			}
			if err := s.ensureDir(c, s.p.group(group)); err != nil {
				return struct{}{}, err
			}
		}
	})
	return err
}

// Leave deletes the session's member znode of group, if any.
func (s *session) Leave(ctx context.Context, group string) error {
	if err := checkName("group", group); err != nil {
		return err
	}
	path := s.p.member(group, s.sid)
	s.mu.Lock()
	s.leaves[group]++
	s.mu.Unlock()
	_, err := callWith(s, ctx, fmt.Sprintf("leave %q", group), false, func(c *zk.Conn) (struct{}, error) {
		s.memberMu.Lock()
		defer s.memberMu.Unlock()
		err := c.Delete(path, -1)
		if errors.Is(err, zk.ErrNoNode) {
			err = nil
		}
		return struct{}{}, err
	})
	return err
}

// Members lists the member znodes of group, ordered by session ID. Children
// that are not simba member records are skipped (and logged).
func (s *session) Members(ctx context.Context, group string) ([]backend.Member, error) {
	out, skipped, err := s.MembersWithSkipped(ctx, group)
	for _, bad := range skipped {
		s.b.cfg.logger.Warn("simba/zookeeper: skipping a member znode", "path", s.p.member(group, bad.Key), "reason", bad.Reason)
	}
	return out, err
}

// MembersWithSkipped is Members, which also returns the member znodes it
// skipped, by name (a session ID). Children whose names are not session
// IDs are not members, and not reported.
func (s *session) MembersWithSkipped(ctx context.Context, group string) ([]backend.Member, []backend.MalformedError, error) {
	if err := checkName("group", group); err != nil {
		return nil, nil, err
	}
	dir := s.p.group(group)
	type listing struct {
		members []backend.Member
		skipped []backend.MalformedError
	}
	l, err := callWith(s, ctx, fmt.Sprintf("members %q", group), false, func(c *zk.Conn) (listing, error) {
		names, _, err := c.Children(dir)
		if errors.Is(err, zk.ErrNoNode) {
			return listing{}, nil
		}
		if err != nil {
			return listing{}, err
		}
		names = slices.DeleteFunc(names, func(n string) bool { return !isSessionID(n) })
		slices.Sort(names)
		out := make([]backend.Member, len(names))
		bad := make([]backend.MalformedError, len(names))
		if err := together(len(names), func(i int) error {
			n := names[i]
			data, _, err := c.Get(dir + "/" + n)
			switch {
			case errors.Is(err, zk.ErrNoNode): // left meanwhile
			case err != nil:
				return err
			default:
				id, d, err := decodeMember(data)
				if err == nil && id == "" {
					err = errors.New("it names no member id") // Join always writes one
				}
				if err != nil {
					bad[i] = backend.MalformedError{Key: n, Reason: fmt.Sprintf("data %s: %v", frame.Quote(data), err)}
					return nil
				}
				out[i] = backend.Member{ID: id, Session: n, Data: d}
			}
			return nil
		}); err != nil {
			return listing{}, err
		}
		bad = slices.DeleteFunc(bad, func(m backend.MalformedError) bool { return m.Key == "" })
		if len(bad) == 0 {
			bad = nil
		}
		return listing{slices.DeleteFunc(out, func(m backend.Member) bool { return m.Session == "" }), bad}, nil
	})
	return l.members, l.skipped, err
}

// WatchMembers sets a child watch on the group's znode (an exists watch
// while it does not exist) before it returns and, each time one fires,
// sets the next, then sends a hint on the channel. The channel is closed
// when ctx ends or the session is over.
func (s *session) WatchMembers(ctx context.Context, group string) (<-chan struct{}, error) {
	if err := checkName("group", group); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("watch members %q", group)
	dir := s.p.group(group)
	re := s.reconnection() // before the watch is set
	ev, err := call(s, ctx, op, func(c *zk.Conn) (<-chan zk.Event, error) { return watchChildren(c, dir) })
	if err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	if !s.goCall(func() { s.watchMembers(ctx, op, dir, ev, re, ch) }) {
		return nil, s.live(op)
	}
	return ch, nil
}

// watchChildren sets a child watch on dir, or an exists watch while dir
// does not exist.
func watchChildren(c *zk.Conn, dir string) (<-chan zk.Event, error) {
	for {
		_, _, ev, err := c.ChildrenW(dir)
		if !errors.Is(err, zk.ErrNoNode) {
			return ev, err
		}
		ok, _, ev, err := c.ExistsW(dir)
		if err != nil || !ok {
			return ev, err
		}
	}
}

// watchMembers turns watch events into hints until ctx ends or the session
// is over; it closes ch. A reconnection (re closes) counts as an event:
// the watch go-zookeeper restores may be lost (see reconnected).
func (s *session) watchMembers(ctx context.Context, op, dir string, ev <-chan zk.Event, re <-chan struct{}, ch chan struct{}) {
	defer close(ch)
	for {
		select {
		case <-ev:
		case <-re:
		case <-ctx.Done():
			return
		case <-s.ctx.Done():
			return
		}
		// The next watch is set before the hint: a caller that reads the
		// members after the hint cannot miss a change made before the
		// watch was set.
		re = s.reconnection()
		for failures := 1; ; failures++ {
			next, err := call(s, ctx, op, func(c *zk.Conn) (<-chan zk.Event, error) { return watchChildren(c, dir) })
			if err == nil {
				ev = next
				break
			}
			if !s.sleep(ctx, backoff.Wait(failures, s.link.granted()/3)) {
				return
			}
		}
		wake.Poke(ch)
	}
}
