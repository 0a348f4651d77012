# The S3 issuer, in issuers/s3lease, a module of its own so that the library
# never depends on an S3 client. Its tests, and those of fencing/s3fence,
# run versitygw (an Apache-2.0 S3 gateway written in Go) on its posix
# backend in temporary folders, built from github.com/versity/versitygw
# through the module proxy by the module in internal/s3test/versitygw. The
# binary is kept, one for each versitygw version, in the user's cache folder
# (zukhruf-lease/versitygw-VERSION; the environment variable VERSITYGW
# names another file): only the first build is long, and a test that finds
# no binary builds it itself.

S3_EXAMPLE := issuers/s3lease

.PHONY: s3-versitygw e2e-s3 faults-s3 demo-s3 lint-s3 bench-many-s3

E2E_STEPS        += e2e-s3
FAULTS_STEPS     += faults-s3
BENCH_MANY_STEPS += bench-many-s3

# S3_FAULT_TRIALS is how many times faults-s3 runs each fault.
S3_FAULT_TRIALS ?= 30

## s3-versitygw: build versitygw into the cache unless it is there, and
## print its path.
s3-versitygw:
	cd $(S3_EXAMPLE) && $(GO) run ./internal/s3test/cmd/versitygw

## e2e-s3: vet the S3 issuer and run its tests against versitygw, under the
## race detector: leasetest's conformance suite, the store probe (a fake
## store that ignores If-None-Match, one that checks and writes in two
## steps), the operator's delete and overwrite, the clock ahead by the
## skew and beyond it, 3 trials of each fault with the hand-written
## lockfile beside the holder, the observer's events, Unlock on an ended
## context, and 30 trials of a link slowed to a round trip of 80% of the
## deadline span, each warned (AtRisk) before its loss.
e2e-s3: s3-versitygw
	cd $(S3_EXAMPLE) && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 10m ./...

## faults-s3: run each fault of the S3 issuer S3_FAULT_TRIALS times (30),
## with the hand-written lockfile beside the holder, and write the table
## into its README.
faults-s3: s3-versitygw
	cd $(S3_EXAMPLE) && $(GO) test -count=1 -timeout 60m -v -run '^TestFaults$$' . \
		-faults.trials=$(S3_FAULT_TRIALS) -faults.readme=README.md -faults.command='make faults-s3'

## demo-s3: two holders contend for one S3 lock object on versitygw; an
## operator deletes it under the first, which is told at its next renewal
## with the cause; the second takes over with a larger fencing token;
## prints the timeline.
demo-s3: s3-versitygw
	cd $(S3_EXAMPLE) && $(GO) run ./demo

## bench-many-s3: hold 1,000 leases of one client for 60 s on versitygw
## and print what they cost: the renewals a second, the goroutines and the
## leases lost with no fault.
bench-many-s3: s3-versitygw
	cd $(S3_EXAMPLE) && $(GO) test -count=1 -timeout 10m -v -run '^TestHoldMany$$' . -many.leases=1000 -many.hold=60s

lint: lint-s3

## lint-s3: go vet and staticcheck over the S3 issuer's module.
lint-s3:
	cd $(S3_EXAMPLE) && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
