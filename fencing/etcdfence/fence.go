// Package etcdfence fences etcd keys: one Txn compares a write's fencing
// token with the highest one the key accepted and, in the same
// transaction, runs the caller's operations and raises the fence, or
// refuses them with a *[fencing.StaleError].
//
// A key's fence is a key beside it, named by [Fence.TokenKey]: the key's
// name and "/fence", holding the token as 20 decimal digits, so that etcd's
// byte compare orders tokens as numbers. Tokens are not negative: an
// issuer's token (etcdlease's create revision among them) never is.
package etcdfence

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zukhruf/lease/fencing"
)

// Fence runs operations on keys of one etcd cluster under their fences. A
// Fence is safe for use by many goroutines at once; the zero Fence has no
// client and each call returns an error that says so.
type Fence struct {
	KV clientv3.KV // a *clientv3.Client, or a namespaced KV
}

// TokenKey returns the name of key's fence.
func (Fence) TokenKey(key string) string { return key + "/fence" }

// Encode returns token as the fence stores it: 20 decimal digits.
func Encode(token int64) string { return fmt.Sprintf("%020d", token) }

// Txn runs ops in one transaction if token is at least the highest token
// key accepted, and raises key's fence to token in the same transaction;
// otherwise it runs nothing and returns an error wrapping a
// *[fencing.StaleError]. An equal token passes. No op may write key's fence
// (etcd refuses a key twice in one transaction). It returns the
// transaction's response, whose Responses after the first are those of ops.
func (f Fence) Txn(ctx context.Context, key string, token int64, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	if f.KV == nil {
		return nil, errors.New("etcdfence: Fence without a KV")
	}
	if key == "" {
		return nil, errors.New("etcdfence: empty key")
	}
	if token < 0 {
		return nil, fmt.Errorf("etcdfence: token %d of %q is negative, which the fence's fixed-width digits cannot order", token, key)
	}
	fk := f.TokenKey(key)
	// A value compare on a missing key fails, so a key never fenced takes
	// the Else branch: the write.
	resp, err := f.KV.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(fk), ">", Encode(token))).
		Then(clientv3.OpGet(fk)).
		Else(append([]clientv3.Op{clientv3.OpPut(fk, Encode(token))}, ops...)...).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("etcdfence: fenced transaction on %q: %w", key, err)
	}
	if !resp.Succeeded {
		return resp, nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) != 1 {
		return resp, fmt.Errorf("etcdfence: the fence of %q was refused but not read", key)
	}
	current, err := strconv.ParseInt(string(kvs[0].Value), 10, 64)
	if err != nil {
		return resp, fmt.Errorf("etcdfence: the fence of %q holds %q, not a token", key, kvs[0].Value)
	}
	return resp, &fencing.StaleError{Resource: key, Token: token, Current: current}
}

// Put puts value at key under key's fence, as [Fence.Txn] runs its ops.
func (f Fence) Put(ctx context.Context, key string, token int64, value string) error {
	_, err := f.Txn(ctx, key, token, clientv3.OpPut(key, value))
	return err
}

// Delete deletes key under its fence; the fence stays, so that an older
// holder cannot write the key again.
func (f Fence) Delete(ctx context.Context, key string, token int64) error {
	_, err := f.Txn(ctx, key, token, clientv3.OpDelete(key))
	return err
}

// Advance raises key's fence to token without a write, or returns an error
// wrapping a *[fencing.StaleError]: the call a new holder makes right after
// Lock, so that every older holder's write is refused from then on.
func (f Fence) Advance(ctx context.Context, key string, token int64) error {
	_, err := f.Txn(ctx, key, token)
	return err
}
