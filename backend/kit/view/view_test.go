package view_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/view"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// source is a fake backend's reads: one record, one member, one held
// lease; its watches close when ctx or stop ends.
type source struct {
	wg    sync.WaitGroup
	calls []string
	stops []context.Context
}

func (s *source) called(what string, stop context.Context) {
	s.calls = append(s.calls, what)
	s.stops = append(s.stops, stop)
}

func (s *source) GetRecord(ctx, stop context.Context, key string) (backend.Record, error) {
	s.called("get "+key, stop)
	if key != "a" {
		return backend.Record{}, fmt.Errorf("simba/fake: %w", backend.ErrNoRecord)
	}
	return backend.Record{Key: "a", Value: []byte("1"), Version: 1}, nil
}

func (s *source) ListRecords(ctx, stop context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	s.called("list "+prefix, stop)
	return []backend.Record{{Key: "a"}}, []backend.MalformedError{{Key: "b", Reason: "garbage"}}, nil
}

func (s *source) Members(ctx, stop context.Context, group string) ([]backend.Member, []backend.MalformedError, error) {
	s.called("members "+group, stop)
	return []backend.Member{{ID: "m", Session: "1"}}, []backend.MalformedError{{Key: "2", Reason: "garbage"}}, nil
}

func (s *source) HeldLeases(ctx, stop context.Context, prefix string) ([]string, error) {
	s.called("held "+prefix, stop)
	return []string{prefix + "x"}, nil
}

func (s *source) watch(ctx, stop context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	s.wg.Go(func() {
		defer close(ch)
		select {
		case <-ctx.Done():
		case <-stop.Done():
		}
	})
	return ch
}

func (s *source) WatchRecords(ctx, stop context.Context, prefix string) <-chan struct{} {
	s.called("watch records "+prefix, stop)
	return s.watch(ctx, stop)
}

func (s *source) WatchMembers(ctx, stop context.Context, group string) <-chan struct{} {
	s.called("watch members "+group, stop)
	return s.watch(ctx, stop)
}

// TestReader: the reads reach the source with the reader's stop, after
// the checks; ListRecords and Members drop what was skipped.
func TestReader(t *testing.T) {
	src := &source{}
	stop, cancel := context.WithCancel(t.Context())
	defer cancel()
	over := false
	r := view.NewReader("simba/fake", stop, func(op string) error {
		if over {
			return fmt.Errorf("simba/fake: %s: %w", op, backend.ErrSessionDone)
		}
		return nil
	}, src)
	ctx := t.Context()

	if rec, err := r.GetRecord(ctx, "a"); err != nil || string(rec.Value) != "1" {
		t.Errorf("GetRecord: %+v, %v", rec, err)
	}
	if list, err := r.ListRecords(ctx, "s/"); err != nil || len(list) != 1 {
		t.Errorf("ListRecords: %v, %v", list, err)
	}
	if list, skipped, err := r.ListRecordsWithSkipped(ctx, "s/"); err != nil || len(list) != 1 || len(skipped) != 1 {
		t.Errorf("ListRecordsWithSkipped: %v, %v, %v", list, skipped, err)
	}
	if ms, err := r.Members(ctx, "g"); err != nil || len(ms) != 1 {
		t.Errorf("Members: %v, %v", ms, err)
	}
	if ms, skipped, err := r.MembersWithSkipped(ctx, "g"); err != nil || len(ms) != 1 || len(skipped) != 1 {
		t.Errorf("MembersWithSkipped: %v, %v, %v", ms, skipped, err)
	}
	if held, err := r.HeldLeases(ctx, "p."); err != nil || len(held) != 1 || held[0] != "p.x" {
		t.Errorf("HeldLeases: %v, %v", held, err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	wr, err := r.WatchRecords(wctx, "s/")
	if err != nil {
		t.Fatal(err)
	}
	wm, err := r.WatchMembers(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	wcancel()
	<-wr // closed by its ctx
	cancel()
	<-wm // closed by the reader's stop
	src.wg.Wait()
	for i, s := range src.stops {
		if s != stop {
			t.Errorf("%s: the source got another stop than the reader's", src.calls[i])
		}
	}
	if len(src.calls) != 8 {
		t.Errorf("source calls %q, want 8", src.calls)
	}

	// The checks: nothing reaches the source.
	src.calls = nil
	if _, err := r.GetRecord(ctx, "//"); err == nil || !strings.HasPrefix(err.Error(), "simba/fake: ") {
		t.Errorf("GetRecord of an invalid key: %v", err)
	}
	for what, call := range map[string]func(string) error{
		"MembersWithSkipped": func(g string) error { _, _, err := r.MembersWithSkipped(ctx, g); return err },
		"WatchMembers":       func(g string) error { _, err := r.WatchMembers(ctx, g); return err },
		"CheckGroup":         r.CheckGroup,
	} {
		if err := call("a/b"); !errors.Is(err, backend.ErrInvalidName) || !strings.HasPrefix(err.Error(), "simba/fake: group name: ") {
			t.Errorf("%s of an invalid group: %v, want an invalid-name error", what, err)
		}
	}
	over = true
	for what, call := range map[string]func() error{
		"GetRecord":              func() error { _, err := r.GetRecord(ctx, "a"); return err },
		"ListRecordsWithSkipped": func() error { _, _, err := r.ListRecordsWithSkipped(ctx, ""); return err },
		"MembersWithSkipped":     func() error { _, _, err := r.MembersWithSkipped(ctx, "g"); return err },
		"HeldLeases":             func() error { _, err := r.HeldLeases(ctx, ""); return err },
		"WatchRecords":           func() error { _, err := r.WatchRecords(ctx, ""); return err },
		"WatchMembers":           func() error { _, err := r.WatchMembers(ctx, "g"); return err },
	} {
		if err := call(); !errors.Is(err, backend.ErrSessionDone) {
			t.Errorf("%s once the check fails: %v, want its error", what, err)
		}
	}
	if len(src.calls) != 0 {
		t.Errorf("refused calls reached the source: %q", src.calls)
	}
}

// TestView: a View reads until its Close or its parent's end, then fails
// with ErrClosed and closes its watches.
func TestView(t *testing.T) {
	for _, how := range []string{"Close", "parent"} {
		t.Run(how, func(t *testing.T) {
			src := &source{}
			parent, cancel := context.WithCancel(t.Context())
			defer cancel()
			v := view.New(parent, "simba/fake", src)
			ctx := t.Context()
			if _, err := v.GetRecord(ctx, "a"); err != nil {
				t.Fatal(err)
			}
			w, err := v.WatchRecords(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if how == "Close" {
				if err := v.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				cancel()
			}
			<-w
			src.wg.Wait()
			_, err = v.GetRecord(ctx, "a")
			if !errors.Is(err, backend.ErrClosed) || !strings.HasPrefix(err.Error(), "simba/fake: view: get record: ") {
				t.Errorf("GetRecord after %s: %v, want ErrClosed", how, err)
			}
			if _, err := v.WatchMembers(ctx, "g"); !errors.Is(err, backend.ErrClosed) {
				t.Errorf("WatchMembers after %s: %v, want ErrClosed", how, err)
			}
			if err := v.Close(); err != nil {
				t.Errorf("a second Close: %v", err)
			}
		})
	}
}

// TestNilCheck: a Reader without a check always reads.
func TestNilCheck(t *testing.T) {
	r := view.NewReader("simba/fake", t.Context(), nil, &source{})
	if _, err := r.HeldLeases(t.Context(), ""); err != nil {
		t.Errorf("HeldLeases with no check: %v", err)
	}
}
