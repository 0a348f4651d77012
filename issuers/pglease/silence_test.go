package pglease_test

import (
	"context"
	"testing"
	"time"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/issuers/pglease"
)

// TestServerFreesSilentSession checks the server's half of the deadline
// rule: a session with the timeouts Lock sets, holding the lock, goes silent
// at a proxy that keeps its connection open (a lease closes its connection
// at the loss, and the proxy would pass that close on): the server frees the
// lock, and not before ServerTimeout after the last statement was sent.
func TestServerFreesSilentSession(t *testing.T) {
	proxy, err := faultnet.Listen(server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	admin := connect(t, server, server.Addr())
	x := connect(t, server, proxy.Addr())
	ctx := context.Background()
	if err := pglease.SetTimeouts(ctx, x, fast); err != nil {
		t.Fatal(err)
	}
	key := pglease.Key("silent session")
	sent := time.Now()
	if _, err := x.Exec(ctx, "select pg_advisory_lock($1::bigint)", key); err != nil {
		t.Fatal(err)
	}
	silent := time.Now()
	proxy.Drop(faultnet.Both)
	b := startWaiter(t, server, admin, key)
	grantAt, granted := b.granted(waitTimeout)
	if !granted {
		t.Fatalf("B not granted %v after the session went silent", waitTimeout)
	}
	if free := grantAt.Sub(sent); free < fast.ServerTimeout {
		t.Errorf("the server freed the lock %v after the last statement was sent, before the server timeout %v", free, fast.ServerTimeout)
	}
	t.Logf("the server freed the silent session's lock %v after it went silent (server timeout %v)", grantAt.Sub(silent), fast.ServerTimeout)
	b.close(t)
	proxy.Heal()
	proxy.Cut()
}
