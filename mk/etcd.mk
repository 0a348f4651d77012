# The etcd issuer, in docs/examples/etcdlease, a module of its own so that the
# library never depends on etcd. Its tests start a real etcd server inside the
# test process; the first run downloads etcd's dependency tree through the
# module proxy. Neither target is part of `make test`: .ci/run calls
# `make e2e` after it.

ETCD_EXAMPLE := docs/examples/etcdlease

.PHONY: e2e-etcd demo-etcd

E2E_STEPS += e2e-etcd

## e2e-etcd: vet the etcd example and run its tests, against embedded etcd
## servers, under the race detector.
e2e-etcd:
	cd $(ETCD_EXAMPLE) && $(GO) vet ./... && $(GO) test -race -count=1 ./...

## demo-etcd: two holders contend for one lock on an embedded etcd server;
## the first is told it lost the lock when its session is revoked, the second
## takes over; prints the timeline and each holder's fencing revision.
demo-etcd:
	cd $(ETCD_EXAMPLE) && $(GO) run ./demo
