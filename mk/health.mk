# Lease health: the observer of package health (in the root module, so
# `make test` covers it), its Prometheus and OpenTelemetry adapters in
# modules of their own (health/promhealth, health/otelhealth: their tests
# need no server and run in `make test`), and health/internal/healthtest, an
# unpublished module that runs them and the at-risk warning on a real
# redis-server (Debian's redis-server, installed by redis-deps).

HEALTH_ADAPTERS := health/promhealth health/otelhealth
HEALTH_TEST     := health/internal/healthtest

.PHONY: test-health e2e-health demo-health lint-health

TEST_STEPS += test-health
E2E_STEPS  += e2e-health

## test-health: vet the adapters' modules and run their tests under the race
## detector (no server).
test-health:
	for m in $(HEALTH_ADAPTERS); do \
		(cd $$m && $(GO) vet ./... && $(GO) test -race -count=1 ./...) || exit 1; \
	done

## e2e-health: on a real redis-server, a lease renewed, released, cut and
## lost to a slowed link, with every metric of both adapters checked
## through the Prometheus handler's scrape and the OpenTelemetry reader;
## and 30 trials of a link slowed to a round trip of 80% of the deadline
## span, each of which must report AtRisk before the loss.
e2e-health: redis-deps
	cd $(HEALTH_TEST) && $(GO) vet ./... && $(REDIS_ENV) $(GO) test -race -count=1 -timeout 10m ./...

## demo-health: a redislease holder on a real redis-server whose link is
## slowed after three renewals; prints the margin of each renewal, the
## at-risk warning and the loss that follows it.
demo-health: redis-deps
	cd $(HEALTH_TEST) && $(REDIS_ENV) $(GO) run ./demo

lint: lint-health

## lint-health: go vet and staticcheck over the adapters and the test
## module.
lint-health:
	for m in $(HEALTH_ADAPTERS) $(HEALTH_TEST); do \
		(cd $$m && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...) || exit 1; \
	done
