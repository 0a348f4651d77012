# The two commands a newcomer needs are `make demo` and `make test`; both need
# only Go and the module proxy. Each mk/*.mk file adds the targets of one area
# (benchmarks, reliability, the etcd example) and may add steps to `make test`
# through TEST_STEPS.

GO       ?= go
FUZZTIME ?= 60s

TEST_STEPS :=
E2E_STEPS  :=
FAULTS_STEPS :=
BENCH_MANY_STEPS :=

.PHONY: all test demo vet unit e2e faults bench-many

all: test

include $(sort $(wildcard mk/*.mk))

## test: vet and every test of the library under the race detector.
test: vet unit $(TEST_STEPS)

vet:
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 ./...

## demo: the copyRows scenario: a holder copies batches to a warehouse over
## HTTP until its issuer loses the lease, then a run where it releases it.
demo:
	$(GO) run ./docs/examples/copyrows

## e2e: the issuers' tests against real servers (each mk/*.mk adds its
## issuer through E2E_STEPS); .ci/run calls it after `make test`.
e2e: $(E2E_STEPS)

## faults: the issuers' long fault trials (at least 30 per fault), which
## write their tables into each issuer's README; not part of `make test`.
faults: $(FAULTS_STEPS)

## bench-many: each issuer holds many leases from one client for a minute
## beside its peer (each mk/*.mk adds its issuer through BENCH_MANY_STEPS);
## the tables go into the issuers' READMEs. Not part of `make test` or CI.
bench-many: $(BENCH_MANY_STEPS)
