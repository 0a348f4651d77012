# The PostgreSQL issuer, in issuers/pglease, a module of its own so
# that the library never depends on a database driver. Its tests, its demo
# and its fault trials start real PostgreSQL servers from the binaries of the
# Debian package postgresql (initdb into a temporary folder, a loopback
# port), and PgBouncer from the Debian package pgbouncer in front of them;
# both run as the user postgres (or nobody) when the tests run as root.
# pg-deps installs the packages when they are missing and the targets run as
# root with apt-get, and fails naming them otherwise. No target is part of
# `make test`: .ci/run calls `make e2e` after it.

PG_EXAMPLE := issuers/pglease
PG_BIN     ?= /usr/lib/postgresql/15/bin
PGBOUNCER  ?= /usr/sbin/pgbouncer

.PHONY: pg-deps e2e-pg demo-pg faults-pg bench-many-pg

E2E_STEPS        += e2e-pg
FAULTS_STEPS     += faults-pg
BENCH_MANY_STEPS += bench-many-pg

# BENCH_MANY_PG_FLAGS sets the numbers of leases and how long each is held:
# -pg.many=100,1000 -pg.hold=10s for a shorter run.
BENCH_MANY_PG_FLAGS ?= -pg.many=100,1000,10000 -pg.hold=60s

## pg-deps: check that PostgreSQL's initdb is in PG_BIN and pgbouncer in
## PGBOUNCER; install the Debian packages postgresql and pgbouncer with
## apt-get for what is missing if we are root, and fail naming the package
## otherwise.
pg-deps:
	@missing=; \
	[ -x "$(PG_BIN)/initdb" ] || missing="$$missing postgresql"; \
	[ -x "$(PGBOUNCER)" ] || missing="$$missing pgbouncer"; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing || exit 1; \
	fi; \
	if [ ! -x "$(PG_BIN)/initdb" ]; then \
		echo "pg-deps: $(PG_BIN)/initdb not found: install the Debian package postgresql (apt-get install postgresql), or set PG_BIN to the folder of PostgreSQL's initdb, postgres and pg_ctl" >&2; \
		exit 1; \
	fi; \
	if [ ! -x "$(PGBOUNCER)" ]; then \
		echo "pg-deps: $(PGBOUNCER) not found: install the Debian package pgbouncer (apt-get install pgbouncer), or set PGBOUNCER to its path" >&2; \
		exit 1; \
	fi

## e2e-pg: vet the PostgreSQL example and run its tests, against real
## servers, under the race detector: a few trials of each fault.
e2e-pg: pg-deps
	cd $(PG_EXAMPLE) && $(GO) vet ./... && PGBIN=$(PG_BIN) PGBOUNCER=$(PGBOUNCER) $(GO) test -race -count=1 -timeout 10m ./...

## demo-pg: two holders contend for one advisory lock; the first is told
## when its backend is terminated, the second takes over with a larger
## fencing token; prints the timeline.
demo-pg: pg-deps
	cd $(PG_EXAMPLE) && PGBIN=$(PG_BIN) PGBOUNCER=$(PGBOUNCER) $(GO) run ./demo

## faults-pg: the goal trials (50 terminates, 20 shutdowns of each mode,
## 200 same-process takeovers, 30 of each other fault) and 1,000 tries of
## the caller's misuse, without the race detector, whose slowness is not the
## lease's; checks the goals and writes the table into the example's README.
faults-pg: pg-deps
	cd $(PG_EXAMPLE) && PGBIN=$(PG_BIN) PGBOUNCER=$(PGBOUNCER) $(GO) test -count=1 -timeout 30m -run '^(TestFaults|TestCallerMisuse)$$' -v . \
		-pg.goals -pg.readme=README.md -pg.misuse=1000

## bench-many-pg: hold 100, 1,000 and 10,000 leases from one pool of 8
## connections, on a server of max_connections 50, for 60 s each, beside as
## many pg_advisory_lock taken by hand on one connection: the time to grant
## all, the server sessions, the statements a second while holding, the
## goroutines and heap per lease, the false losses; checks the goals and
## writes the table into the example's README. About 7 minutes; not part of
## make e2e, which holds 1,000 for 3 s. BENCH_MANY_PG_FLAGS shortens it.
bench-many-pg: pg-deps
	cd $(PG_EXAMPLE) && PGBIN=$(PG_BIN) PGBOUNCER=$(PGBOUNCER) $(GO) test -count=1 -timeout 30m -run '^TestManyLeases$$' -v . \
		$(BENCH_MANY_PG_FLAGS) -pg.manyreport=README.md
