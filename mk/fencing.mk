# The fences of package fencing, checked by the resource: the root module's
# fencing and fencingtest run in `make test`; the SQL fence runs on real
# PostgreSQL and MariaDB servers in fencing/internal/sqltest (pgxfence's
# too: fencing/pgxfence's own tests need no server), the Redis
# fence on a real redis-server in fencing/redisfence, and the etcd fence on
# an etcd member in its test process in fencing/etcdfence, modules of their
# own so that the library never depends on a store's client, with the
# packages that pg-deps, mysql-deps and redis-deps install; the S3 fence
# on versitygw in fencing/s3fence, with the binary that s3-versitygw
# builds (mk/s3.mk). No target here
# is part of `make test`: .ci/run calls `make e2e` after it.

FENCING_SQL     := fencing/internal/sqltest
FENCING_MODULES := $(FENCING_SQL) fencing/pgxfence fencing/redisfence fencing/etcdfence fencing/s3fence
FENCING_ENV      = PGBIN=$(PG_BIN) $(MYSQL_ENV) $(REDIS_ENV)
# The starters of the real PostgreSQL and MariaDB servers that the SQL
# fence's tests run against: internal/testservers, a module of its own that
# is never published, which fencing/internal/sqltest requires through a
# replace; its own tests start each server.
FENCING_MODULES += internal/testservers

.PHONY: e2e-fencing bench-fencing lint-fencing demo-fencing

E2E_STEPS += e2e-fencing

## e2e-fencing: vet each fence's module and run its tests under the race
## detector on real servers: fencingtest's conformance suite and its
## negative controls on PostgreSQL, MariaDB, Redis, etcd and versitygw (S3),
## and each fence's mistakes.
e2e-fencing: pg-deps mysql-deps redis-deps s3-versitygw
	for m in $(FENCING_MODULES); do \
		(cd $$m && $(GO) vet ./... && $(FENCING_ENV) $(GO) test -race -count=1 -timeout 10m ./...) || exit 1; \
	done

## demo-fencing: a holder of a redislease lease, stopped with SIGSTOP past
## its lease, resumes and sends its rows to PostgreSQL; the SQL fence
## refuses them with ErrStale and the next holder's rows are intact; prints
## the timeline.
demo-fencing: pg-deps redis-deps
	cd $(FENCING_SQL) && $(FENCING_ENV) $(GO) run ./demo

## bench-fencing: a fenced write beside an unfenced one on each store, 5
## runs of each, without the race detector.
bench-fencing: pg-deps mysql-deps redis-deps s3-versitygw
	for m in $(FENCING_MODULES); do \
		(cd $$m && $(FENCING_ENV) $(GO) test -run '^$$' -bench . -benchtime 2s -count 5 .) || exit 1; \
	done

lint: lint-fencing

## lint-fencing: go vet and staticcheck over each fence's module.
lint-fencing:
	for m in $(FENCING_MODULES); do \
		(cd $$m && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...) || exit 1; \
	done
