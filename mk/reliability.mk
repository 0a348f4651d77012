# Reliability: static checks, fuzzing and the long runs of the concurrency
# tests. `make test` already runs the short forms: the rapid property with
# 1,000 checks, 1,000 linearizability histories, the fuzz corpus and a small
# soak (see controller/*_test.go).

STATICCHECK      ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
STRESS_HISTORIES ?= 100000
STRESS_FORGOTTEN ?= 1000000
STRESS_STREAMED  ?= 1000000
STRESS_CHECKS    ?= 10000

.PHONY: lint fuzz stress

## lint: go vet and staticcheck (pinned, run through go run) over the module.
lint:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd bench && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

## fuzz: fuzz the lease against its model for FUZZTIME (default 60s), after
## the fuzz targets the issuers' files add (fuzz-redis).
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzLease$$' -fuzztime=$(FUZZTIME) ./controller

## stress: under the race detector, STRESS_HISTORIES linearizability
## histories, the full soak (100,000 leases), STRESS_FORGOTTEN contexts
## whose cancel is forgotten on one live lease, STRESS_STREAMED contexts in
## each server pattern of TestContextPatternsHeapFlat, and STRESS_CHECKS
## rapid schedules of TestContextRegistrationsBound; prints the figures.
stress:
	$(GO) test -race -count=1 -timeout=30m -v -run='^(TestLinearizable|TestSoak)$$' ./controller \
		-lin.histories=$(STRESS_HISTORIES) -soak
	$(GO) test -race -count=1 -timeout=30m -v -run='^(TestContextForgottenCancelHeapFlat|TestContextPatternsHeapFlat)$$' ./signal \
		-forgotten=$(STRESS_FORGOTTEN) -streamed=$(STRESS_STREAMED)
	$(GO) test -race -count=1 -timeout=30m -v -run='^TestContextRegistrationsBound$$' ./signal \
		-rapid.checks=$(STRESS_CHECKS)
