# The lock-set harness, in internal/lockset, a module of its own that is
# never published: it imports the issuers and their peer libraries. A run
# starts the issuer's server and, per lock, contenders in processes of
# their own (so that a pause is a real SIGSTOP of a holder), each behind a
# fault proxy; makes faults on a random schedule from the seed; records the
# history (one JSON object a line, on the machine's monotonic clock) and
# checks it: overlaps, writes the guarded register applied while another
# process held the lock, stale writes the fenced register accepted, false
# losses, porcupine on each lock. lockcheck checks a history alone.

LOCKSET_DIR := internal/lockset
ISSUER  ?= etcd
SECONDS ?= 60
SEED    ?= 1
MIX     ?= all
SEEDS   ?= 10
LOCKS   ?= 3
CLIENTS ?= 5
LOCKS_PER_PROCESS ?= 1
PARALLEL ?= false
HISTORY ?=
REGISTER ?=

.PHONY: test-lockset lint-lockset lockset lockset-all lockset-smoke lockcheck lockset-kube lockset-redis faketime-deps e2e-fakeclock

LOCKSET_BIN = $(or $(TMPDIR),/tmp)/lockset-bin

# The server binaries each issuer's runs start, by the paths the issuers'
# own targets check.
# Kubernetes's server is lockset-kube, a command of the k8slease module
# (etcd and kube-apiserver, by its internal package kubetest), built here.
LOCKSET_KUBE = $(or $(TMPDIR),/tmp)/lockset-kube
# Redis's sentinel and cluster mixes run lockset-redis, a command of the
# redislease module (a primary, two replicas and three Sentinels, or a
# Cluster, by its internal package redistest), built here.
LOCKSET_REDIS = $(or $(TMPDIR),/tmp)/lockset-redis
# Redis's clock mix runs its server under libfaketime (faketime-deps).
LOCKSET_DEPS = $(if $(filter redis,$(1)),redis-deps lockset-redis) $(if $(filter pg,$(1)),pg-deps) $(if $(filter mysql,$(1)),mysql-deps) $(if $(filter k8s,$(1)),lockset-kube) $(if $(filter nats,$(1)),nats-server) $(if $(filter s3,$(1)),s3-versitygw) $(if $(filter clock,$(MIX)),faketime-deps) \
	$(if $(filter redis,$(REGISTER)),redis-deps) $(if $(filter pg,$(REGISTER)),pg-deps) $(if $(filter mysql,$(REGISTER)),mysql-deps) $(if $(filter s3,$(REGISTER)),s3-versitygw)
LOCKSET_ENV  = REDIS_SERVER=$(REDIS_SERVER) REDIS_SENTINEL=$(REDIS_SENTINEL) PGBIN=$(PG_BIN) $(MYSQL_ENV) LOCKSET_KUBE=$(LOCKSET_KUBE) LOCKSET_REDIS=$(LOCKSET_REDIS)

TEST_STEPS += test-lockset
lint: lint-lockset

# test-lockset runs the checker's tests, which feed it hand-made histories;
# they need no server, and build no issuer.
test-lockset:
	cd $(LOCKSET_DIR) && $(GO) vet ./check/... ./history/... ./layout/... && $(GO) test -race -count=1 ./check/... ./history/... ./layout/...

lint-lockset:
	cd $(LOCKSET_DIR) && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

## lockset: one lock-set run of ISSUER (etcd, redis, pg, mysql, k8s, nats or s3) for
## SECONDS (60) with the fault schedule of SEED (1) and the faults of MIX
## (all; network, server, process, operator; Redis's clock, sentinel and
## cluster; etcd's failover; PostgreSQL's standby), LOCKS locks a side
## (3), CLIENTS contenders a lock (5), the peer's clients beside the
## issuer's; prints the run's folder and each side's counts, and fails on
## an overlap, an unsafe write or a stale write accepted that nothing
## excuses. REGISTER (pg, mysql, redis, etcd, s3 or memory; none by default)
## keeps the register in that real store too, started beside the
## harness's register and outside the faults: each write goes to both, to
## the store through its fence of package fencing, and the counts of each
## side give the store's writes, refusals and stale writes accepted beside
## the harness register's:
##   make lockset ISSUER=pg REGISTER=mysql MIX=process
## LOCKS_PER_PROCESS (1) is how many locks each contender process
## of the leases takes at once through one client, its leases sharing the
## client's sessions; LOCKS must be a multiple of it, and the peer then
## has LOCKS/LOCKS_PER_PROCESS locks, one a process:
##   make lockset ISSUER=redis LOCKS=400 LOCKS_PER_PROCESS=200 CLIENTS=2
lockset: $(call LOCKSET_DEPS,$(ISSUER))
	cd $(LOCKSET_DIR) && $(GO) build -o $(LOCKSET_BIN) . && \
		$(LOCKSET_ENV) $(LOCKSET_BIN) run -issuer $(ISSUER) -seconds $(SECONDS) -seed $(SEED) -mix $(MIX) \
			-locks $(LOCKS) -clients $(CLIENTS) -perprocess $(LOCKS_PER_PROCESS) $(if $(REGISTER),-register $(REGISTER))

## lockset-all: for every issuer, SEEDS runs (10) of SECONDS each, seed n
## with the fault mix n-1 modulo the issuer's (all, network, server,
## process, operator; after them Redis's clock, sentinel and cluster,
## etcd's failover, PostgreSQL's standby), LOCKS locks a side (3);
## PARALLEL=true runs the issuers at once; writes the table into
## docs/lockset.md; fails if a run of the lease has a violation.
## SECONDS=600 SEEDS=10 takes 100 minutes an issuer.
lockset-all: redis-deps pg-deps mysql-deps lockset-kube lockset-redis faketime-deps nats-server s3-versitygw
	cd $(LOCKSET_DIR) && $(GO) build -o $(LOCKSET_BIN) . && \
		$(LOCKSET_ENV) $(LOCKSET_BIN) all -seconds $(SECONDS) -seeds $(SEEDS) -locks $(LOCKS) -parallel=$(PARALLEL) -doc $(CURDIR)/docs/lockset.md

## lockset-smoke: a 60 s run of each issuer with every fault mix, in make e2e,
## after the tests of the harness's servers' binaries (NATS_SERVER, VERSITYGW).
E2E_STEPS += lockset-smoke
lockset-smoke: redis-deps pg-deps mysql-deps lockset-kube nats-server s3-versitygw
	cd $(LOCKSET_DIR) && $(GO) test -count=1 . && $(GO) build -o $(LOCKSET_BIN) . && \
		$(LOCKSET_ENV) $(LOCKSET_BIN) all -seconds 60 -seeds 1

## lockcheck: check the history HISTORY (a history.jsonl; the faults are
## read from the summary.json beside it); prints each side's counts and the
## violations, writes porcupine's view of each lock with one beside the
## history, and exits 1 on a violation.
lockcheck:
	@test -n "$(HISTORY)" || { echo "lockcheck: set HISTORY, as in make lockcheck HISTORY=path/to/history.jsonl" >&2; exit 2; }
	cd $(LOCKSET_DIR) && $(GO) run . check -history $(abspath $(HISTORY))

## faketime-deps: check for libfaketime and a C compiler, with which the
## clock mix runs redis-server on a clock of its own (package fakeclock);
## install the Debian packages libfaketime and gcc with apt-get for what is
## missing if we are root, and fail naming the package otherwise.
faketime-deps:
	@missing=; \
	ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || [ -n "$$FAKETIME_LIB" ] || missing="$$missing libfaketime"; \
	command -v cc >/dev/null 2>&1 || missing="$$missing gcc"; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing || exit 1; \
	fi; \
	if ! ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 && [ -z "$$FAKETIME_LIB" ]; then \
		echo "faketime-deps: libfaketime.so.1 not found: install the Debian package libfaketime (apt-get install libfaketime), or set FAKETIME_LIB to its path" >&2; \
		exit 1; \
	fi; \
	if ! command -v cc >/dev/null 2>&1; then \
		echo "faketime-deps: cc not found: install the Debian package gcc (apt-get install gcc)" >&2; \
		exit 1; \
	fi

## e2e-fakeclock: the clock of the clock mix, on a real redis-server: its
## rate, its continuity across changes and a restart, a key's expiry.
E2E_STEPS += e2e-fakeclock
e2e-fakeclock: redis-deps faketime-deps
	cd $(LOCKSET_DIR) && $(GO) vet ./fakeclock/ && REDIS_SERVER=$(REDIS_SERVER) $(GO) test -race -count=1 ./fakeclock/

# lockset-kube builds the Kubernetes server of the runs, after
# kube-apiserver (k8s-apiserver: from the cache, or built into it).
lockset-kube: k8s-apiserver
	cd $(K8S_EXAMPLE) && $(GO) build -o $(LOCKSET_KUBE) ./internal/kubetest/cmd/lockset-kube

# lockset-redis builds the Redis servers of the sentinel and cluster mixes.
lockset-redis: redis-deps
	cd $(REDIS_EXAMPLE) && $(GO) build -o $(LOCKSET_REDIS) ./internal/redistest/cmd/lockset-redis
