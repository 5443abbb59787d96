package etcdfence

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/fence"
)

// DefaultPrefix is the prefix of token keys when [Fence].Prefix is
// empty. simba's etcd backend keeps its own keys under "/simba/" too, in
// other directories.
const DefaultPrefix = "/simba/fence/"

// Fence is the fence of data kept in etcd: a guard that goes into the
// caller's own transaction, so that the transaction applies only if no
// higher token was recorded for the resource, and records its token when it
// applies. The zero value uses [DefaultPrefix]. A Fence is a plain value,
// safe for concurrent use.
//
// # Key layout
//
// A resource's highest token is the name of the one key in the resource's
// directory:
//
//	<prefix><resource, path-escaped>/<token, 20 decimal digits>  = "<token>"
//
// for instance "/simba/fence/ingest/00000000000000004711". The zero-padded
// digits sort like the numbers, so "no higher token is recorded" is one
// compare over a key range: nothing in the directory after the token's own
// key. etcd cannot compare the value of a key that does not exist yet (such
// a compare fails), which the range compare avoids. The resource's name is
// path-escaped ([url.PathEscape]), so any name is allowed and a name with a
// "/" does not reach into another resource's directory.
//
// Keep the prefix apart from the transaction's other keys: the guard's
// operations may not overlap the caller's in one transaction, which etcd
// refuses.
type Fence struct {
	// Prefix is the prefix of the token keys. Empty means
	// DefaultPrefix.
	Prefix string
}

// dir returns the directory of resource's token key, ending in "/".
func (e Fence) dir(resource string) string {
	p := e.Prefix
	if p == "" {
		p = DefaultPrefix
	}
	return p + url.PathEscape(resource) + "/"
}

// tokenKey returns the key recording token in dir.
func tokenKey(dir string, token uint64) string { return fmt.Sprintf("%s%020d", dir, token) }

// Guard returns the compare and the operations that fence a transaction with
// token for resource. Add the compare to the transaction's If, and the
// operations to its Then:
//
//	cmps, ops := f.Guard("ingest", term.Token())
//	resp, err := cli.Txn(ctx).
//		If(append(cmps, myCmps...)...).
//		Then(append(ops, clientv3.OpPut("/ingest/cursor", cursor))...).
//		Commit()
//
// The compare holds while no token higher than token is recorded; the
// operations record token, replacing the lower one. A transaction whose
// compare fails applies nothing. When resp.Succeeded is false and the
// transaction has compares of its own, ask [Fence.Stale] which failed;
// [Fence.Commit] does all of it for a transaction with no compares of its own.
func (e Fence) Guard(resource string, token uint64) ([]clientv3.Cmp, []clientv3.Op) {
	dir := e.dir(resource)
	key := tokenKey(dir, token)
	// Nothing after key in dir: "\x00" makes the range start just after it.
	higher := clientv3.Compare(clientv3.CreateRevision(key+"\x00"), "=", 0).
		WithRange(clientv3.GetPrefixRangeEnd(dir))
	return []clientv3.Cmp{higher}, []clientv3.Op{
		clientv3.OpDelete(dir, clientv3.WithRange(key)), // the lower tokens
		clientv3.OpPut(key, strconv.FormatUint(token, 10)),
	}
}

// Commit runs ops in one transaction fenced with token for resource (see
// [Fence.Guard]). It returns the transaction's response, and a [*fence.StaleError],
// matching [fence.ErrStale], when a higher token was recorded and nothing was
// applied; the transaction reads the highest token in its Else branch, so
// that takes no second request. Other errors are those of kv, wrapped; when
// one comes back the transaction may or may not have been applied.
func (e Fence) Commit(ctx context.Context, kv clientv3.KV, resource string, token uint64, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	if kv == nil {
		return nil, fence.Invalid("nil etcd KV")
	}
	cmps, guard := e.Guard(resource, token)
	resp, err := kv.Txn(ctx).
		If(cmps...).
		Then(append(guard, ops...)...).
		Else(clientv3.OpGet(e.dir(resource), clientv3.WithLastKey()...)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("simba/fence: fenced transaction for %q: %w", resource, err)
	}
	if resp.Succeeded {
		return resp, nil
	}
	if len(resp.Responses) == 1 {
		if r := resp.Responses[0].GetResponseRange(); r != nil && len(r.Kvs) == 1 {
			if highest, ok := e.parse(resource, string(r.Kvs[0].Key)); ok {
				return resp, &fence.StaleError{Resource: resource, Token: token, Highest: highest}
			}
		}
	}
	return resp, fmt.Errorf("simba/fence: fenced transaction for %q failed with an unexpected response %v", resource, resp)
}

// Stale reports whether token is stale for resource: it returns a
// [*fence.StaleError], matching [fence.ErrStale], when a higher token is recorded, and
// nil when none is. Use it after a transaction carrying the guard of
// [Fence.Guard] and compares of its own failed: recorded tokens only grow, so
// if token is not stale now, it was not when the transaction ran, the
// guard's compare held, and one of the caller's own compares failed.
func (e Fence) Stale(ctx context.Context, kv clientv3.KV, resource string, token uint64) error {
	highest, ok, err := e.Highest(ctx, kv, resource)
	if err != nil {
		return err
	}
	if ok && highest > token {
		return &fence.StaleError{Resource: resource, Token: token, Highest: highest}
	}
	return nil
}

// Highest returns the highest token recorded for resource, with ok false
// when none is.
func (e Fence) Highest(ctx context.Context, kv clientv3.KV, resource string) (token uint64, ok bool, err error) {
	if kv == nil {
		return 0, false, fence.Invalid("nil etcd KV")
	}
	resp, err := kv.Get(ctx, e.dir(resource), clientv3.WithLastKey()...)
	if err != nil {
		return 0, false, fmt.Errorf("simba/fence: read the highest token of %q: %w", resource, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, false, nil
	}
	token, ok = e.parse(resource, string(resp.Kvs[0].Key))
	if !ok {
		return 0, false, fmt.Errorf("simba/fence: %q is not a token key of %q", resp.Kvs[0].Key, resource)
	}
	return token, true, nil
}

// parse returns the token that key, a key in resource's directory, records.
func (e Fence) parse(resource, key string) (uint64, bool) {
	digits, found := strings.CutPrefix(key, e.dir(resource))
	if !found || len(digits) != 20 {
		return 0, false
	}
	token, err := strconv.ParseUint(digits, 10, 64)
	return token, err == nil
}

// Claim records token as resource's highest in a transaction of its own
// ([Fence.Commit] with no operations), so that from then on every guarded
// transaction with a lower token fails; it returns a [*fence.StaleError],
// matching [fence.ErrStale], when a higher token is recorded already. Call it at
// the start of a term, before reading the keys the term's writes depend on
// (see simba.WithClaim). etcd applies transactions one at a time, so a
// deposed leader's transaction either was applied before the claim, and is
// seen by what the new leader reads afterwards (at a later revision), or
// fails its guard.
//
// Errors are those of [Fence.Commit].
func (e Fence) Claim(ctx context.Context, kv clientv3.KV, resource string, token uint64) error {
	_, err := e.Commit(ctx, kv, resource, token)
	return err
}
