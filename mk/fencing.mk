# The fences of package fencing, checked by the resource: the root module's
# fencing and fencingtest run in `make test`; the SQL fence runs on real
# PostgreSQL and MariaDB servers in fencing/internal/sqltest, a module of
# its own so that the library never depends on a database driver, with the
# packages that pg-deps and mysql-deps install. No target here is part of
# `make test`: .ci/run calls `make e2e` after it.

FENCING_SQL := fencing/internal/sqltest

.PHONY: e2e-fencing bench-fencing lint-fencing

E2E_STEPS += e2e-fencing

## e2e-fencing: vet the SQL fence's test module and run its tests under the
## race detector on real PostgreSQL and MariaDB servers: fencingtest's
## conformance suite and its negative controls on each, and the SQL
## mistakes of a transaction.
e2e-fencing: pg-deps mysql-deps
	cd $(FENCING_SQL) && $(GO) vet ./... && PGBIN=$(PG_BIN) $(MYSQL_ENV) $(GO) test -race -count=1 -timeout 10m ./...

## bench-fencing: a fenced write beside an unfenced one on each server, 5
## runs of each, without the race detector.
bench-fencing: pg-deps mysql-deps
	cd $(FENCING_SQL) && PGBIN=$(PG_BIN) $(MYSQL_ENV) $(GO) test -run '^$$' -bench . -benchtime 2s -count 5 .

lint: lint-fencing

## lint-fencing: go vet and staticcheck over the SQL fence's test module.
lint-fencing:
	cd $(FENCING_SQL) && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
