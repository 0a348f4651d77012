# The etcd issuer, in issuers/etcdlease, a module of its own so that the
# library never depends on etcd. Its tests start a real etcd server inside the
# test process; the first run downloads etcd's dependency tree through the
# module proxy. Neither target is part of `make test`: .ci/run calls
# `make e2e` after it.

ETCD_EXAMPLE := issuers/etcdlease

.PHONY: e2e-etcd faults-etcd demo-etcd bench-many-etcd

E2E_STEPS += e2e-etcd
FAULTS_STEPS += faults-etcd
BENCH_MANY_STEPS += bench-many-etcd

# ETCD_FAULT_TRIALS is how many times faults-etcd runs each fault;
# ETCD_FAULT_FLAGS adds flags to its test, such as
# -faults.benign-latency=500ms.
ETCD_FAULT_TRIALS ?= 30
ETCD_FAULT_FLAGS  ?=

## e2e-etcd: vet the etcd example and run its tests, against embedded etcd
## servers, under the race detector; TestFaults runs each fault 3 times on
## three-member clusters and fails on any overlap or false loss.
e2e-etcd:
	cd $(ETCD_EXAMPLE) && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 10m ./...

## faults-etcd: run each fault of the etcd issuer ETCD_FAULT_TRIALS times (30)
## and write the table of the trials into its README.
faults-etcd:
	cd $(ETCD_EXAMPLE) && $(GO) test -count=1 -timeout 60m -run '^TestFaults$$' . \
		-faults.trials=$(ETCD_FAULT_TRIALS) -faults.readme=README.md -faults.command='make faults-etcd' $(ETCD_FAULT_FLAGS)

## demo-etcd: two holders contend for one lock on an embedded etcd server;
## the first is told it lost the lock when its session is revoked, the second
## takes over; prints the timeline and each holder's fencing revision.
demo-etcd:
	cd $(ETCD_EXAMPLE) && $(GO) run ./demo

# ETCD_MANY_LEASES are the counts of leases bench-many-etcd holds on one
# session, ETCD_MANY_HOLD how long it holds each; ETCD_MANY_FLAGS adds
# flags, such as -many.readme= to leave the README as it is.
ETCD_MANY_LEASES ?= 1000,10000
ETCD_MANY_HOLD   ?= 60s
ETCD_MANY_FLAGS  ?=

## bench-many-etcd: hold ETCD_MANY_LEASES leases (1,000 and 10,000) on one
## session for ETCD_MANY_HOLD (60 s), and as many concurrency.Mutex locks on
## one session beside, on an etcd server in a process of its own: the time
## to grant them all, the keepalive and watch streams and the watchers on
## the server, its requests a second while they are held, the holder's
## goroutines and heap per lock, and the locks lost with no fault; writes
## the table into the etcd README. About 5 minutes; not part of make test or
## make e2e, which runs a smoke of 1,000 leases held 3 s.
bench-many-etcd:
	cd $(ETCD_EXAMPLE) && $(GO) test -count=1 -timeout 30m -run '^TestHoldMany$$' . \
		-many.leases=$(ETCD_MANY_LEASES) -many.hold=$(ETCD_MANY_HOLD) -many.peer \
		-many.readme=README.md -many.command='make bench-many-etcd' -v $(ETCD_MANY_FLAGS)
