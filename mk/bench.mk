# Benchmarks of the lease beside its peers (context, a context child of a
# lease that is a context, and a hand-rolled signal), in bench/,
# a module of its own. `make bench` takes minutes and is not part of
# `make test`; test-bench, which is, runs bench/'s tests (the check that
# Signal.Err and Signal.Done are inlined into a holder) and no benchmark.

BENCH_COUNT ?= 10
BENCH_TXT   ?= testdata/bench.txt

TEST_STEPS += test-bench

.PHONY: bench test-bench

test-bench:
	cd bench && $(GO) vet ./... && $(GO) test -count=1 -run . ./...

## bench: run the whole suite BENCH_COUNT times, keep the output in
## bench/testdata/bench.txt, print benchstat's tables of the lease against
## each peer, and redraw docs/benchmarks.svg. Each round runs every
## benchmark once, so that a change in the machine's load over the minutes
## of the run falls on the lease and its peers alike; go test -count would
## run all the samples of one sub-benchmark back to back.
bench:
	cd bench && dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && \
		$(GO) test -c -o "$$dir/bench.test" . && : > "$$dir/all.txt" && \
		for i in $$(seq $(BENCH_COUNT)); do \
			echo "round $$i of $(BENCH_COUNT)"; \
			"$$dir/bench.test" -test.run '^$$' -test.bench . -test.timeout 30m > "$$dir/round.txt" || \
				{ cat "$$dir/round.txt"; exit 1; }; \
			cat "$$dir/round.txt" >> "$$dir/all.txt"; \
		done && cp "$$dir/all.txt" $(BENCH_TXT)
	cd bench && $(GO) tool benchstat -filter '/impl:(context OR lease)' -col '/impl@(context lease)' $(BENCH_TXT)
	cd bench && $(GO) tool benchstat -filter '.name:ErrLost /impl:(context.Cause OR lease)' -col '/impl@(context.Cause lease)' $(BENCH_TXT)
	cd bench && $(GO) tool benchstat -filter '/impl:(handrolled OR lease)' -col '/impl@(handrolled lease)' $(BENCH_TXT)
	cd bench && $(GO) tool benchstat -filter '.name:Context /impl:(context.child OR lease)' -col '/impl@(context.child lease)' $(BENCH_TXT)
	cd bench && $(GO) tool benchstat -filter '.name:ContextRequest /impl:(floor OR lease)' -col '/impl@(floor lease)' $(BENCH_TXT)
	cd bench && $(GO) tool benchstat -filter '/impl:(lease.viacontroller OR lease)' -col '/impl@(lease lease.viacontroller)' $(BENCH_TXT)
	cd bench && $(GO) run ./cmd/benchreport -svg ../docs/benchmarks.svg $(BENCH_TXT)

# The lock cycle of each issuer beside its peers, by the command cycle of
# the lock-set module (internal/lockset), which imports both; built into a
# binary of its own.
BENCH_LOCK_BIN   = $(or $(TMPDIR),/tmp)/lockset-cycle
BENCH_LOCK_DOC  ?= docs/benchmarks.md
BENCH_LOCK_FLAGS ?=
# BENCH_LOCK_NOTE is a sentence the doc adds after the machine's load,
# such as what else ran on the machine during the run.
BENCH_LOCK_NOTE  ?=
export BENCH_LOCK_NOTE

.PHONY: bench-lock test-bench-lock

# test-bench-lock, in make test, runs the measuring function's tests, over
# leasetest's in-memory Locker: no server, no issuer built.
TEST_STEPS += test-bench-lock

test-bench-lock:
	cd $(LOCKSET_DIR) && $(GO) vet ./lockcycle/ && $(GO) test -race -count=1 ./lockcycle/

## bench-lock: Lock→Unlock of each issuer beside its peers, every client of
## a coordinator on one server it starts (Redis, etcd, PostgreSQL,
## MariaDB, Kubernetes): p50 and p99 from one goroutine, cycles a second
## from 32, and the hand-over of a held subject to a waiter; prints the
## table and writes it, with the machine, into BENCH_LOCK_DOC's section
## "The lock cycle". About 5 minutes, after the first build of
## kube-apiserver (k8s-apiserver); not part of make test or make e2e.
## BENCH_LOCK_FLAGS adds flags, such as -coordinators redis,etcd.
bench-lock: redis-deps pg-deps mysql-deps lockset-kube
	cd $(LOCKSET_DIR) && $(GO) build -o $(BENCH_LOCK_BIN) . && \
		$(LOCKSET_ENV) $(BENCH_LOCK_BIN) cycle -doc $(CURDIR)/$(BENCH_LOCK_DOC) -command 'make bench-lock' \
			-commit "$$(git describe --always --dirty 2>/dev/null)" -note "$$BENCH_LOCK_NOTE" $(BENCH_LOCK_FLAGS)
