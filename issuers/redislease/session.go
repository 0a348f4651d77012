package redislease

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// endpoint finds the server a lease's key lives on and dials connections to
// it that the lease owns. It reads the caller's client only for its
// options (address, dialer, credentials, database) and, on a Cluster, for
// the node that serves the key's slot: no command of the lease runs on the
// caller's connections.
type endpoint struct {
	rdb     redis.UniversalClient
	key     string
	cluster *redis.ClusterClient // nil unless rdb is one
	// sentinel is set for a Sentinel client (redis.NewFailoverClient):
	// its dialer asks a Sentinel for the primary's address at every dial.
	sentinel bool
	// bound bounds a dial and its handshake: a server that accepts a
	// connection but does not answer (paused, its backlog still taking
	// connections) is left for the next dial, which may find another.
	bound time.Duration

	// known is the options of the server the lease last reached, or that
	// a Cluster redirection named since: once the caller closed its
	// client, whose Sentinel dialer or Cluster map the lease can no longer
	// ask, the lease reconnects there.
	mu    sync.Mutex
	known *redis.Options
}

// newEndpoint checks that rdb is a client the lease can work with.
func newEndpoint(rdb redis.UniversalClient, key string, bound time.Duration) (*endpoint, error) {
	if rdb == nil {
		return nil, errors.New("nil client")
	}
	if v := reflect.ValueOf(rdb); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("nil %T client", rdb)
	}
	switch c := rdb.(type) {
	case *redis.Client:
		// go-redis names the options of every Sentinel client so.
		sentinel := c.Options().Addr == "FailoverClient"
		return &endpoint{rdb: rdb, key: key, sentinel: sentinel, bound: bound}, nil
	case *redis.ClusterClient:
		if c.Options().ClusterSlots != nil {
			// redis.NewFailoverClusterClient routes a Sentinel group so:
			// the lease would miss every rule it keeps behind Sentinel.
			return nil, errors.New("a Cluster client whose slots come from ClusterSlots (redis.NewFailoverClusterClient among them) is not supported: pass redis.NewFailoverClient for a Sentinel group")
		}
		return &endpoint{rdb: rdb, key: key, cluster: c, bound: bound}, nil
	}
	return nil, fmt.Errorf("a %T is not supported: pass a *redis.Client (redis.NewClient, or redis.NewFailoverClient for Sentinel) or a *redis.ClusterClient", rdb)
}

// dialAt opens a connection of the lease's own to the server at addr, a
// Cluster node the key's slot is migrating to, with the options of the
// key's primary; "" means the primary itself.
func (e *endpoint) dialAt(ctx context.Context, reload bool, addr string) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, e.bound)
	defer cancel()
	var opt *redis.Options
	gone := e.clientClosed()
	if gone {
		e.mu.Lock()
		opt = e.known
		e.mu.Unlock()
		if opt == nil {
			return nil, redis.ErrClosed
		}
	} else {
		var err error
		if opt, err = e.options(ctx, reload); err != nil {
			return nil, err
		}
	}
	if addr != "" {
		o := *opt
		o.Addr = addr
		opt = &o
	}
	cred, err := credentialsOf(ctx, opt)
	if err != nil {
		return nil, err
	}
	dialer := opt.Dialer
	if dialer == nil {
		dialer = redis.NewDialer(opt)
	}
	network := opt.Network
	if network == "" {
		network = "tcp"
	}
	dial := func(ctx context.Context) (net.Conn, error) {
		if opt.DialTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, opt.DialTimeout)
			defer cancel()
		}
		if opt.TLSConfig != nil {
			return dialWithin(ctx, dialer, network, opt.Addr)
		}
		return dialer(ctx, network, opt.Addr)
	}
	cn, err := dialConn(ctx, dial, cred, opt.DB)
	if err == nil && !gone {
		// Without the client, only a redirection moves the lease.
		e.remember(opt, cn.addr())
	}
	return cn, err
}

// clientClosed reports whether the caller closed its client.
func (e *endpoint) clientClosed() bool {
	if closed(e.rdb) {
		return true
	}
	if e.cluster == nil {
		return false
	}
	// A closed Cluster client still answers from its map of slots, and
	// the Ping above may have met the context first: its nodes' clients
	// tell.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	node, err := e.cluster.MasterForKey(ctx, e.key)
	return errors.Is(err, redis.ErrClosed) || err == nil && closed(node)
}

// remember keeps opt as the options of the server at addr, with a dialer
// that dials addr itself, not the one a Sentinel names.
func (e *endpoint) remember(opt *redis.Options, addr string) {
	o := *opt
	o.Addr = addr
	if e.sentinel {
		o.Dialer = redis.NewDialer(&o)
	}
	e.mu.Lock()
	e.known = &o
	e.mu.Unlock()
}

// dialWithin returns when dialer does or when ctx ends, whichever is first:
// go-redis's dialers make a TLS handshake without the context, bounded
// only by DialTimeout. A connection that comes after ctx ended is closed.
func dialWithin(ctx context.Context, dialer func(context.Context, string, string) (net.Conn, error), network, addr string) (net.Conn, error) {
	type result struct {
		nc  net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := dialer(ctx, network, addr)
		done <- result{nc, err}
	}()
	select {
	case r := <-done:
		return r.nc, r.err
	case <-ctx.Done():
		go func() {
			// A dialer may return a typed nil with its error.
			if r := <-done; r.err == nil {
				r.nc.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// checkPrimary asks a Sentinel, through a Sentinel client's dialer, which
// server is the primary now, and returns an error unless it is the one at
// addr. A primary that Sentinel replaced while it was paused believes it is
// still the primary once it is back, until a Sentinel makes it a replica
// seconds later, and a replica that Sentinel has not yet moved may still
// confirm a grant there. go-redis asks one Sentinel, the last that
// answered: one that has not yet heard of the failover still names the old
// primary, and only the rules of Config.replicas cover that.
func (e *endpoint) checkPrimary(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, e.bound)
	defer cancel()
	opt := e.rdb.(*redis.Client).Options()
	// The dialer asks a Sentinel, then connects to the address it names:
	// the connection's address is the Sentinel's answer.
	nc, err := dialWithin(ctx, opt.Dialer, "tcp", opt.Addr)
	if err != nil {
		return fmt.Errorf("the primary as Sentinel names it: %w", err)
	}
	named := nc.RemoteAddr().String()
	nc.Close()
	if named != addr {
		return fmt.Errorf("the Sentinel asked names %s the primary, not %s, the server that granted the key: a primary replaced while it was paused", named, addr)
	}
	return nil
}

// options returns the options of the client that serves the key: rdb's own,
// or those of the Cluster node that holds the key's slot (after reloading
// the slots, if reload).
func (e *endpoint) options(ctx context.Context, reload bool) (*redis.Options, error) {
	if e.cluster == nil {
		return e.rdb.(*redis.Client).Options(), nil
	}
	if reload {
		e.cluster.ReloadState(ctx)
	}
	node, err := e.cluster.MasterForKey(ctx, e.key)
	if err != nil {
		return nil, fmt.Errorf("the Cluster node of the key's slot: %w", err)
	}
	return node.Options(), nil
}

// credentialsOf returns the user and password the client authenticates with.
func credentialsOf(ctx context.Context, opt *redis.Options) (credentials, error) {
	switch {
	case opt.CredentialsProviderContext != nil:
		u, p, err := opt.CredentialsProviderContext(ctx)
		if err != nil {
			return credentials{}, fmt.Errorf("credentials: %w", err)
		}
		return credentials{u, p}, nil
	case opt.CredentialsProvider != nil:
		u, p := opt.CredentialsProvider()
		return credentials{u, p}, nil
	}
	return credentials{opt.Username, opt.Password}, nil
}
