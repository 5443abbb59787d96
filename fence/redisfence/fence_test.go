package redisfence_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/fence/redisfence"
	"github.com/simba-go/simba/internal/fencetest"
)

func TestRedisSet(t *testing.T) {
	c, prefix := redisClient(t)
	ctx := fencetest.Ctx(t)
	f := redisfence.Fence{Client: c, Prefix: prefix + "fence:"}
	key := prefix + "cursor"
	if _, ok, err := f.Highest(ctx, "ingest"); err != nil || ok {
		t.Fatalf("Highest before any write: %v, %v", ok, err)
	}
	steps := []struct {
		token   uint64
		value   string
		stale   bool
		highest uint64
	}{
		{token: 5, value: "a", highest: 5},
		{token: 5, value: "b", highest: 5},
		{token: 4, value: "c", stale: true, highest: 5},
		{token: 0, value: "d", stale: true, highest: 5},
		{token: 9, value: "e", highest: 9},
		{token: 6, value: "f", stale: true, highest: 9},
	}
	want := ""
	for i, s := range steps {
		err := f.Set(ctx, "ingest", s.token, key, s.value, 0)
		if s.stale {
			var se *fence.StaleError
			if !errors.As(err, &se) || !errors.Is(err, fence.ErrStale) {
				t.Fatalf("step %d: Set(%d) = %v, want a *StaleError", i, s.token, err)
			}
			if se.Resource != "ingest" || se.Token != s.token || se.Highest != s.highest {
				t.Errorf("step %d: %+v", i, *se)
			}
		} else {
			if err != nil {
				t.Fatalf("step %d: Set(%d) = %v", i, s.token, err)
			}
			want = s.value
		}
		if got, err := c.Get(ctx, key).Result(); err != nil || got != want {
			t.Errorf("step %d: %s = %q (%v), want %q", i, key, got, err, want)
		}
		if got, ok, err := f.Highest(ctx, "ingest"); err != nil || !ok || got != s.highest {
			t.Errorf("step %d: Highest = %d, %v, %v; want %d", i, got, ok, err, s.highest)
		}
	}
	// The token is a readable decimal in the token key, without a TTL.
	if v, err := c.Get(ctx, f.TokenKey("ingest")).Result(); err != nil || v != "9" {
		t.Errorf("token key %s = %q, %v", f.TokenKey("ingest"), v, err)
	}
	if ttl, err := c.PTTL(ctx, f.TokenKey("ingest")).Result(); err != nil || ttl != -1 {
		t.Errorf("token key's TTL %v (%v), want none", ttl, err)
	}
	// One resource fences any number of keys: once token 9 wrote key, a
	// stale token cannot write another key either.
	if err := f.Set(ctx, "ingest", 8, prefix+"other", "x", 0); !errors.Is(err, fence.ErrStale) {
		t.Errorf("Set of another key with a stale token: %v", err)
	}
	if n, _ := c.Exists(ctx, prefix+"other").Result(); n != 0 {
		t.Error("a stale Set created a key")
	}
	if (redisfence.Fence{}).TokenKey("x") != redisfence.DefaultPrefix+"x" {
		t.Error("the default prefix")
	}
}

func TestRedisTTL(t *testing.T) {
	c, prefix := redisClient(t)
	ctx := fencetest.Ctx(t)
	f := redisfence.Fence{Client: c, Prefix: prefix}
	key := prefix + "k"
	pttl := func() time.Duration {
		d, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if err := f.Set(ctx, "r", 1, key, "v", time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d <= 59*time.Second || d > time.Minute {
		t.Errorf("PTTL after Set with a minute: %v", d)
	}
	if err := f.Set(ctx, "r", 1, key, "v", redis.KeepTTL); err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d <= 59*time.Second {
		t.Errorf("PTTL after Set with KeepTTL: %v", d)
	}
	if err := f.Set(ctx, "r", 1, key, "v", 0); err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d != -1 {
		t.Errorf("PTTL after Set with no TTL: %v, want none", d)
	}
	if err := f.Set(ctx, "r", 1, key, "v", 1500*time.Microsecond); err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d > 2*time.Millisecond {
		t.Errorf("PTTL after Set with 1.5ms: %v, want it rounded up to 2ms", d)
	}
	// The key expires; the token does not: a stale writer cannot recreate it.
	if err := c.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, "r", 2, key, "new", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		if n, _ := c.Exists(ctx, key).Result(); n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the key did not expire")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := f.Set(ctx, "r", 1, key, "old", 0); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale Set after the key expired: %v", err)
	}
	if n, _ := c.Exists(ctx, key).Result(); n != 0 {
		t.Error("a stale Set recreated the expired key")
	}
	if err := f.Set(ctx, "r", 1, key, "v", -2); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Errorf("Set with ttl -2: %v", err)
	}
}

func TestRedisHSet(t *testing.T) {
	c, prefix := redisClient(t)
	ctx := fencetest.Ctx(t)
	f := redisfence.Fence{Client: c, Prefix: prefix}
	key := prefix + "h"
	if err := f.HSet(ctx, "r", 3, key, "a", "1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Expire(ctx, key, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.HSet(ctx, "r", 3, key, "b", 2); err != nil {
		t.Fatal(err)
	}
	if err := f.HSet(ctx, "r", 2, key, "a", "stale"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("HSet with a stale token: %v", err)
	}
	if err := f.HSet(ctx, "r", 4, key, "c", []byte("3")); err != nil {
		t.Fatal(err)
	}
	got, err := c.HGetAll(ctx, key).Result()
	if err != nil || len(got) != 3 || got["a"] != "1" || got["b"] != "2" || got["c"] != "3" {
		t.Errorf("hash %v (%v), want a=1 b=2 c=3", got, err)
	}
	if d, _ := c.TTL(ctx, key).Result(); d < 59*time.Minute {
		t.Errorf("HSet changed the hash's TTL: %v", d)
	}
	// Set and HSet share the resource's token.
	if err := f.Set(ctx, "r", 3, prefix+"s", "x", 0); !errors.Is(err, fence.ErrStale) {
		t.Errorf("Set with token 3 after HSet with 4: %v", err)
	}
}

// TestRedisLargeTokens compares tokens that Lua's doubles cannot tell apart.
func TestRedisLargeTokens(t *testing.T) {
	c, prefix := redisClient(t)
	ctx := fencetest.Ctx(t)
	f := redisfence.Fence{Client: c, Prefix: prefix}
	for _, p := range [][2]uint64{
		{1 << 53, 1<<53 + 1},
		{math.MaxUint64 - 1, math.MaxUint64},
		{9_999_999_999, 10_000_000_000},
		{19_999_999_999, 20_000_000_000},
		{math.MaxInt64, math.MaxInt64 + 1},
	} {
		lo, hi := p[0], p[1]
		r := "r" + time.Now().Format("150405.000000000")
		if err := f.Set(ctx, r, hi, prefix+"k", "hi", 0); err != nil {
			t.Fatal(err)
		}
		err := f.Set(ctx, r, lo, prefix+"k", "lo", 0)
		var se *fence.StaleError
		if !errors.As(err, &se) || se.Highest != hi || se.Token != lo {
			t.Errorf("Set(%d) after %d: %v, want stale", lo, hi, err)
		}
		if err := f.Set(ctx, r, hi, prefix+"k", "hi", 0); err != nil {
			t.Errorf("Set(%d) again: %v", hi, err)
		}
		if got, _, _ := f.Highest(ctx, r); got != hi {
			t.Errorf("Highest %d, want %d", got, hi)
		}
	}
}

func TestRedisErrors(t *testing.T) {
	c, prefix := redisClient(t)
	ctx := fencetest.Ctx(t)
	f := redisfence.Fence{Client: c, Prefix: prefix + "fence:"}
	// A write that Redis refuses records no token.
	if err := c.Set(ctx, prefix+"str", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := f.HSet(ctx, "r", 7, prefix+"str", "f", "v")
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.HasPrefix(err.Error(), "simba/fence: ") {
		t.Errorf("HSet on a string: %v", err)
	}
	if _, ok, _ := f.Highest(ctx, "r"); ok {
		t.Error("a failed write recorded its token")
	}
	// A token key holding something else is an error, not a token.
	if err := c.Set(ctx, f.TokenKey("bad"), "12x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, "bad", 1, prefix+"k", "v", 0); err == nil || errors.Is(err, fence.ErrStale) {
		t.Errorf("Set with a corrupt token key: %v", err)
	}
	if _, _, err := f.Highest(ctx, "bad"); err == nil {
		t.Error("Highest of a corrupt token key")
	}
	for name, err := range map[string]error{
		"nil client":    redisfence.Fence{}.Set(ctx, "r", 1, "k", "v", 0),
		"nil client h":  redisfence.Fence{}.HSet(ctx, "r", 1, "k", "f", "v"),
		"token key":     f.Set(ctx, "r", 1, f.TokenKey("r"), "v", 0),
		"token key h":   f.HSet(ctx, "r", 1, f.TokenKey("r"), "f", "v"),
		"nil client hi": func() error { _, _, err := (redisfence.Fence{}).Highest(ctx, "r"); return err }(),
	} {
		if !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

// TestRedisScriptFlush checks the EVAL fallback when the server lost the
// cached scripts.
func TestRedisScriptFlush(t *testing.T) {
	c, prefix := redisClient(t)
	ctx := fencetest.Ctx(t)
	f := redisfence.Fence{Client: c, Prefix: prefix}
	if err := f.Set(ctx, "r", 1, prefix+"k", "v", 0); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, "r", 2, prefix+"k", "v2", 0); err != nil {
		t.Fatalf("Set after SCRIPT FLUSH: %v", err)
	}
	if err := f.HSet(ctx, "r", 1, prefix+"h", "f", "v"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("HSet after SCRIPT FLUSH: %v", err)
	}
}
