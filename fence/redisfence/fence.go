package redisfence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/simba-go/simba/fence"
)

// DefaultPrefix is the prefix of token keys when [Fence].Prefix is
// empty.
const DefaultPrefix = "simba:fence:"

// Fence is the fence of keys kept in Redis: every write is one server-side
// Lua script that compares the token with the highest one recorded for the
// resource, and only if it is not lower, writes the key and records the
// token. Redis runs a script alone, so nothing comes between the comparison
// and the writes. The scripts are sent by EVALSHA, and by EVAL when the
// server does not have them cached (after a restart or SCRIPT FLUSH).
//
// A Fence is a plain value, safe for concurrent use. Client is required.
//
// # Where the token is
//
// The highest token of a resource is a decimal string in its token key,
// Prefix + resource ([Fence.TokenKey]), for instance "simba:fence:ingest".
// One resource may fence any number of keys: fence every key a leader
// writes with the same resource, so that once a new leader has written any
// of them, a deposed one can write none. Tokens are compared as integers
// of up to 64 bits, exactly (not as Lua's floating-point numbers).
//
// In Redis Cluster all the keys of a script must be in one slot: give the
// resource and the keys it fences the same hash tag, as in resource
// "{ingest}" and keys "{ingest}:cursor", "{ingest}:stats". Otherwise the
// server refuses the script (CROSSSLOT) and the write is not done.
//
// # Expiry
//
// The token key is written without a TTL (SET clears any), so it outlives
// the keys it fences: a key that expired cannot be recreated by a deposed
// leader. If the token key itself is deleted or evicted the fence forgets
// the resource and accepts the next token, whatever it is: do not give it a
// TTL, and run Redis with a maxmemory-policy that does not evict keys
// without a TTL (noeviction or a volatile-* policy). [Fence.Set] sets the
// key's TTL as SET does ([Fence.Set] explains its ttl), and [Fence.HSet]
// leaves the hash's TTL as HSET does.
//
// Redis replicates asynchronously: after a fail-over the new primary may
// have lost the latest writes, the token record with them, and accept an
// older token again. The fence is as durable as the data it guards.
type Fence struct {
	// Client runs the scripts: a *redis.Client, *redis.ClusterClient or
	// *redis.Ring. Not a pipeline: the scripts' replies are read at once.
	Client redis.Scripter
	// Prefix is prepended to a resource's name to make its token key.
	// Empty means DefaultPrefix.
	Prefix string
}

// scriptPrelude compares the token ARGV[1] with the one recorded in KEYS[1]
// and returns {0, recorded} when the recorded one is higher. Tokens are
// decimal strings of up to 20 digits (2^64-1 has 20), compared as two
// halves of 10 digits each: Lua's numbers are doubles, exact only up to
// 2^53.
const scriptPrelude = `
local function pad(s) return string.rep('0', 20 - #s) .. s end
local function above(a, b)
  a, b = pad(a), pad(b)
  local ah, bh = tonumber(string.sub(a, 1, 10)), tonumber(string.sub(b, 1, 10))
  if ah ~= bh then return ah > bh end
  return tonumber(string.sub(a, 11)) > tonumber(string.sub(b, 11))
end
local cur = redis.call('GET', KEYS[1])
if cur then
  if #cur > 20 or not string.match(cur, '^%d+$') then
    return redis.error_reply('simba/fence: the token key ' .. KEYS[1] .. ' holds no token')
  end
  if above(cur, ARGV[1]) then return {0, cur} end
end
`

// setScript: KEYS[1] the token key, KEYS[2] the key; ARGV[1] the token,
// ARGV[2] the value, ARGV[3] "", "PX" or "KEEPTTL", ARGV[4] the TTL in
// milliseconds for PX. The key is written before the token is recorded: a
// script that fails half-way is not rolled back, and a failed write must
// not leave the token recorded.
var setScript = redis.NewScript(scriptPrelude + `
if ARGV[3] == 'PX' then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[4])
elseif ARGV[3] == 'KEEPTTL' then
  redis.call('SET', KEYS[2], ARGV[2], 'KEEPTTL')
else
  redis.call('SET', KEYS[2], ARGV[2])
end
redis.call('SET', KEYS[1], ARGV[1])
return {1, ARGV[1]}
`)

// hsetScript: KEYS[1] the token key, KEYS[2] the hash; ARGV[1] the token,
// ARGV[2] the field, ARGV[3] the value.
var hsetScript = redis.NewScript(scriptPrelude + `
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('SET', KEYS[1], ARGV[1])
return {1, ARGV[1]}
`)

// getScript: KEYS[1] the token key.
var getScript = redis.NewScript(`return redis.call('GET', KEYS[1])`)

// TokenKey returns the key holding the highest token of resource.
func (r Fence) TokenKey(resource string) string {
	if r.Prefix == "" {
		return DefaultPrefix + resource
	}
	return r.Prefix + resource
}

// Set sets key to value, as SET does, if token is not lower than the
// highest recorded for resource, and records token; otherwise it writes
// nothing and returns a [*fence.StaleError], matching [fence.ErrStale].
//
// ttl is the key's new TTL: a positive duration (rounded up to a
// millisecond), 0 for none (SET removes an earlier TTL), or redis.KeepTTL
// to keep the key's current TTL (Redis 6.0 or later). value is any value
// go-redis can send: a string, []byte, number, bool, time.Time or an
// encoding.BinaryMarshaler.
//
// Other errors are those of Redis, wrapped, and errors matching
// [fence.ErrInvalidArgument] for a nil Client, another negative ttl, or a key that
// is the resource's token key. When Set returns a network error the script
// may or may not have run.
func (r Fence) Set(ctx context.Context, resource string, token uint64, key string, value any, ttl time.Duration) error {
	if err := r.check(resource, key); err != nil {
		return err
	}
	mode, ms := "", "0"
	switch {
	case ttl > 0:
		mode = "PX"
		ms = strconv.FormatInt(int64((ttl+time.Millisecond-1)/time.Millisecond), 10)
	case ttl == redis.KeepTTL:
		mode = "KEEPTTL"
	case ttl < 0:
		return fence.Invalid("ttl %v: want a positive duration, 0 or redis.KeepTTL", ttl)
	}
	return r.run(ctx, setScript, resource, token, key, value, mode, ms)
}

// HSet sets field of the hash key to value, as HSET does, if token is not
// lower than the highest recorded for resource, and records token; otherwise
// it writes nothing and returns a [*fence.StaleError], matching [fence.ErrStale]. The
// hash's TTL is left as it is.
//
// Other errors are those of [Fence.Set].
func (r Fence) HSet(ctx context.Context, resource string, token uint64, key, field string, value any) error {
	if err := r.check(resource, key); err != nil {
		return err
	}
	return r.run(ctx, hsetScript, resource, token, key, field, value)
}

// Highest returns the highest token recorded for resource, with ok false
// when none is.
func (r Fence) Highest(ctx context.Context, resource string) (token uint64, ok bool, err error) {
	if r.Client == nil {
		return 0, false, fence.Invalid("nil Redis client")
	}
	s, err := getScript.Run(ctx, r.Client, []string{r.TokenKey(resource)}).Text()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("simba/fence: read the highest token of %q: %w", resource, err)
	}
	token, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("simba/fence: the token key %s holds %q, not a token", r.TokenKey(resource), s)
	}
	return token, true, nil
}

// check validates the arguments of a write.
func (r Fence) check(resource, key string) error {
	if r.Client == nil {
		return fence.Invalid("nil Redis client")
	}
	if key == r.TokenKey(resource) {
		return fence.Invalid("key %q is the token key of resource %q", key, resource)
	}
	return nil
}

// run runs a write script of key and interprets its reply.
func (r Fence) run(ctx context.Context, s *redis.Script, resource string, token uint64, key string, args ...any) error {
	return r.runKeys(ctx, s, resource, token, []string{r.TokenKey(resource), key}, fmt.Sprintf("fenced write of %q", key), args...)
}

// runKeys runs a script whose first key is the token key and interprets
// its reply {accepted, token}; what names the write in errors.
func (r Fence) runKeys(ctx context.Context, s *redis.Script, resource string, token uint64, keys []string, what string, args ...any) error {
	argv := append([]any{strconv.FormatUint(token, 10)}, args...)
	reply, err := s.Run(ctx, r.Client, keys, argv...).Slice()
	if err != nil {
		return fmt.Errorf("simba/fence: %s for %q: %w", what, resource, err)
	}
	if len(reply) != 2 {
		return fmt.Errorf("simba/fence: %s for %q: unexpected reply %v", what, resource, reply)
	}
	accepted, ok1 := reply[0].(int64)
	recorded, ok2 := reply[1].(string)
	if !ok1 || !ok2 {
		return fmt.Errorf("simba/fence: %s for %q: unexpected reply %v", what, resource, reply)
	}
	if accepted == 1 {
		return nil
	}
	highest, err := strconv.ParseUint(recorded, 10, 64)
	if err != nil {
		return fmt.Errorf("simba/fence: the token key %s holds %q, not a token", r.TokenKey(resource), recorded)
	}
	return &fence.StaleError{Resource: resource, Token: token, Highest: highest}
}

// claimScript: KEYS[1] the token key; ARGV[1] the token.
var claimScript = redis.NewScript(scriptPrelude + `
redis.call('SET', KEYS[1], ARGV[1])
return {1, ARGV[1]}
`)

// Claim records token as resource's highest, in one script, so that from
// then on every write with a lower token is rejected; it returns a
// [*fence.StaleError], matching [fence.ErrStale], when a higher token is recorded
// already. Call it at the start of a term, before reading the keys the
// term's writes depend on (see simba.WithClaim). Redis runs scripts one at
// a time, so a deposed leader's write either ran before the claim, and is
// seen by what the new leader reads afterwards, or is rejected.
//
// Errors are those of [Fence.Set].
func (r Fence) Claim(ctx context.Context, resource string, token uint64) error {
	if r.Client == nil {
		return fence.Invalid("nil Redis client")
	}
	return r.runKeys(ctx, claimScript, resource, token, []string{r.TokenKey(resource)}, "claim")
}
