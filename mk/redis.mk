# The Redis issuer, in issuers/redislease, a module of its own so that
# the library never depends on a Redis client. Its tests, its demo and its
# fault trials start real servers from the binaries of the Debian packages
# redis-server and redis-sentinel (Redis 7.0): standalone primaries, and
# groups of a primary, two replicas and three Sentinels, each on free
# loopback ports in a temporary folder. redis-deps installs the packages
# when they are missing and the targets run as root with apt-get, and fails
# naming them otherwise. No target is part of `make test`: .ci/run calls
# `make e2e` after it.

REDIS_EXAMPLE  := issuers/redislease
REDIS_SERVER   ?= /usr/bin/redis-server
REDIS_SENTINEL ?= /usr/bin/redis-sentinel

.PHONY: redis-deps e2e-redis faults-redis demo-redis lint-redis fuzz-redis bench-many-redis

E2E_STEPS    += e2e-redis
FAULTS_STEPS += faults-redis
BENCH_MANY_STEPS += bench-many-redis

# REDIS_MANY_FLAGS sets bench-many-redis's counts, hold and TTL, such as
# -n 1000 -hold 10s for a short run.
REDIS_MANY_FLAGS ?= -n 1000,10000,20000,100000 -hold 60s

# REDIS_FAULT_TRIALS is how many times faults-redis runs each fault.
REDIS_FAULT_TRIALS ?= 30

REDIS_ENV = REDIS_SERVER=$(REDIS_SERVER) REDIS_SENTINEL=$(REDIS_SENTINEL)

## redis-deps: check that redis-server and redis-sentinel are at
## REDIS_SERVER and REDIS_SENTINEL; install the Debian packages redis-server
## and redis-sentinel with apt-get for what is missing if we are root, and
## fail naming the package otherwise.
redis-deps:
	@missing=; \
	[ -x "$(REDIS_SERVER)" ] || missing="$$missing redis-server"; \
	[ -x "$(REDIS_SENTINEL)" ] || missing="$$missing redis-sentinel"; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing || exit 1; \
	fi; \
	if [ ! -x "$(REDIS_SERVER)" ]; then \
		echo "redis-deps: $(REDIS_SERVER) not found: install the Debian package redis-server (apt-get install redis-server), or set REDIS_SERVER to its path" >&2; \
		exit 1; \
	fi; \
	if [ ! -x "$(REDIS_SENTINEL)" ]; then \
		echo "redis-deps: $(REDIS_SENTINEL) not found: install the Debian package redis-sentinel (apt-get install redis-sentinel), or set REDIS_SENTINEL to its path" >&2; \
		exit 1; \
	fi

## e2e-redis: vet the Redis example and run its tests against real servers,
## under the race detector: 3 trials of each fault and 1 of each sequence of
## faults with redsync's Mutex beside the holders, three holders over 100
## rounds, 1,000 leases on a server, behind Sentinel and on a Cluster,
## leasetest's conformance suite (TestConformance), the demo. -parallel 8:
## the tests that mark themselves parallel spend their time waiting for
## failovers and expiries, not working, and run side by side.
e2e-redis: redis-deps
	cd $(REDIS_EXAMPLE) && $(GO) vet ./... && $(REDIS_ENV) $(GO) test -race -count=1 -timeout 15m -parallel 8 ./...

## faults-redis: run each fault and each sequence of faults of the Redis
## issuer REDIS_FAULT_TRIALS times (30), with redsync's Mutex beside the
## holders, without the race detector, whose slowness is not the lease's;
## write the tables into the example's README.
faults-redis: redis-deps
	cd $(REDIS_EXAMPLE) && $(REDIS_ENV) $(GO) test -count=1 -timeout 150m -v -run '^(TestFaults|TestMutualExclusion|TestSequences)$$' . \
		-faults.trials=$(REDIS_FAULT_TRIALS) -sequence.trials=$(REDIS_FAULT_TRIALS) -faults.readme=README.md -faults.command='make faults-redis'

## demo-redis: two holders contend for one key on a real redis-server; an
## operator deletes it under the first, which is told at once with the
## cause; the second takes over with a larger fencing token; then a
## Sentinel failover; prints the timeline.
demo-redis: redis-deps
	cd $(REDIS_EXAMPLE) && $(REDIS_ENV) $(GO) run ./demo

## bench-many-redis: hold 1,000, 10,000, 20,000 and 100,000 leases of one
## process on one redis-server (its default maxclients) for 60 s each, then
## as many of redsync's Mutex extended every third of their expiry, on the
## same server in the same run; prints the time to grant all, the server's
## connections and commands a second while holding, the goroutines and heap
## a lease, the false losses, and the loss of one lease whose key an
## operator deletes. About 12 minutes on 2 cores. REDIS_MANY_FLAGS changes
## the counts and the hold.
bench-many-redis: redis-deps
	cd $(REDIS_EXAMPLE) && $(REDIS_ENV) $(GO) run ./internal/redistest/cmd/bench-many $(REDIS_MANY_FLAGS)

lint: lint-redis
fuzz: fuzz-redis

## lint-redis: go vet and staticcheck over the Redis example's module.
lint-redis:
	cd $(REDIS_EXAMPLE) && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

## fuzz-redis: fuzz the RESP3 reader of the Redis issuer's connections for
## FUZZTIME. go test -fuzz takes one target of one package a run; the
## package's TestMain starts a redis-server, hence redis-deps.
fuzz-redis: redis-deps
	cd $(REDIS_EXAMPLE) && $(REDIS_ENV) $(GO) test -run='^$$' -fuzz='^FuzzReadValue$$' -fuzztime=$(FUZZTIME) .
