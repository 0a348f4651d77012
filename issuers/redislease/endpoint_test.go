package redislease

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestEndpointKnowsSentinel pins how the lease tells a Sentinel client
// from a plain one (go-redis names its options "FailoverClient"), and that
// a Cluster client routed by Sentinel is refused rather than taken for a
// Cluster: either mistake would skip the rules the lease keeps behind
// Sentinel.
func TestEndpointKnowsSentinel(t *testing.T) {
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	defer failover.Close()
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer plain.Close()
	for _, tc := range []struct {
		name string
		rdb  redis.UniversalClient
		want bool
	}{{"NewFailoverClient", failover, true}, {"NewClient", plain, false}} {
		ep, err := newEndpoint(tc.rdb, "k", MinTTL)
		if err != nil || ep.sentinel != tc.want {
			t.Errorf("%s: newEndpoint = sentinel %v, %v; want %v, nil", tc.name, ep != nil && ep.sentinel, err, tc.want)
		}
	}
	routed := redis.NewFailoverClusterClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	defer routed.Close()
	if _, err := newEndpoint(routed, "k", MinTTL); err == nil || !strings.Contains(err.Error(), "NewFailoverClusterClient") {
		t.Errorf("newEndpoint(NewFailoverClusterClient) = %v, want an error naming it", err)
	}
}
