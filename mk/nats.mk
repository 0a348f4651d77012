# The NATS issuer, in issuers/natslease, a module of its own so that the
# library never depends on a NATS client. Its tests, its demo and its fault
# trials run real nats-server processes (a single server, and a cluster of
# three with the KV bucket at R3), built from github.com/nats-io/nats-server/v2
# through the module proxy by the module in internal/natstest/server. The
# binary is kept, one for each nats-server version, in the user's cache
# folder (zukhruf-lease/nats-server-VERSION; the environment variable
# NATS_SERVER names another file): only the first build is long, and a test
# that finds no binary builds it itself.

NATS_EXAMPLE := issuers/natslease

.PHONY: nats-server e2e-nats faults-nats demo-nats lint-nats bench-many-nats

E2E_STEPS        += e2e-nats
FAULTS_STEPS     += faults-nats
BENCH_MANY_STEPS += bench-many-nats

# NATS_FAULT_TRIALS is how many times faults-nats runs each fault.
NATS_FAULT_TRIALS ?= 30

## nats-server: build nats-server into the cache unless it is there, and
## print its path.
nats-server:
	cd $(NATS_EXAMPLE) && $(GO) run ./internal/natstest/cmd/nats-server

## e2e-nats: vet the NATS example and run its tests against real
## nats-server processes, under the race detector: 3 trials of each fault
## with the hand-written Create-then-Update holder beside A, leasetest's
## conformance suite on a single server and on a cluster of three
## (TestConformance, TestConformanceCluster), the mistakes, the TTL of
## renewals checked on the server, 1,000 leases of one client, the
## observer's events and the warning before a loss on a slowed link
## (TestObserverEvents, TestAtRiskBeforeLoss: 30 trials), Unlock on an
## ended context, and the test servers' own tests. About 3 minutes warm on
## 2 cores.
e2e-nats: nats-server
	cd $(NATS_EXAMPLE) && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 15m ./...

## faults-nats: run each fault of the NATS issuer NATS_FAULT_TRIALS times
## (30), with the hand-written holder beside A, without the race detector,
## whose slowness is not the lease's; write the table into the README.
faults-nats: nats-server
	cd $(NATS_EXAMPLE) && $(GO) test -count=1 -timeout 150m -v -run '^TestFaults$$' . \
		-faults.trials=$(NATS_FAULT_TRIALS) -faults.readme=README.md -faults.command='make faults-nats'

## demo-nats: two holders contend for one key on a real nats-server; an
## operator deletes it under the first, which is told at once with the
## cause; the second takes over with a larger fencing token; prints the
## timeline.
demo-nats: nats-server
	cd $(NATS_EXAMPLE) && $(GO) run ./demo

# NATS_MANY_LEASES are the counts of leases bench-many-nats holds on one
# client, NATS_MANY_HOLD how long it holds them.
NATS_MANY_LEASES ?= 1000,10000
NATS_MANY_HOLD   ?= 60s

## bench-many-nats: hold NATS_MANY_LEASES leases (1,000 and 10,000) of one
## client for NATS_MANY_HOLD (60 s), then as many hand-written holders
## (Create, then Update every third of the TTL), on a nats-server of their
## own: the time to grant them all, the goroutines and heap a lease, the
## bucket's consumers, the leases lost with no fault; writes the table into
## the README. Not part of make test or make e2e, which runs a smoke of
## 1,000 leases held 5 s.
bench-many-nats: nats-server
	cd $(NATS_EXAMPLE) && $(GO) test -count=1 -timeout 60m -v -run '^TestHoldMany$$' . \
		-many.leases=$(NATS_MANY_LEASES) -many.hold=$(NATS_MANY_HOLD) -many.readme=README.md -many.command='make bench-many-nats'

lint: lint-nats

## lint-nats: go vet and staticcheck over the NATS example's module.
lint-nats:
	cd $(NATS_EXAMPLE) && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
