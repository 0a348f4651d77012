# The MySQL/MariaDB issuer, in issuers/mysqllease, a module of its own
# so that the library never depends on a database driver. Its tests, its
# demo and its fault trials start real MariaDB servers from the binaries of
# the Debian package mariadb-server (mariadb-install-db into a temporary
# folder, a loopback port; a primary and a replica for the failover rows).
# mysql-deps installs the package when it is missing and the targets run as
# root with apt-get, and fails naming it otherwise. No target is part of
# `make test`: .ci/run calls `make e2e` after it.

MYSQL_EXAMPLE      := issuers/mysqllease
MARIADBD           ?= /usr/sbin/mariadbd
MARIADB_INSTALL_DB ?= /usr/bin/mariadb-install-db

.PHONY: mysql-deps e2e-mysql faults-mysql demo-mysql lint-mysql

E2E_STEPS    += e2e-mysql
FAULTS_STEPS += faults-mysql

# MYSQL_FAULT_TRIALS is how many times faults-mysql runs each fault.
MYSQL_FAULT_TRIALS ?= 30

MYSQL_ENV = MARIADBD=$(MARIADBD) MARIADB_INSTALL_DB=$(MARIADB_INSTALL_DB)

## mysql-deps: check that mariadbd and mariadb-install-db are at MARIADBD
## and MARIADB_INSTALL_DB; install the Debian package mariadb-server with
## apt-get when they are missing if we are root, and fail naming the package
## otherwise.
mysql-deps:
	@if { [ ! -x "$(MARIADBD)" ] || [ ! -x "$(MARIADB_INSTALL_DB)" ]; } && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y mariadb-server || exit 1; \
	fi; \
	for b in "$(MARIADBD)" "$(MARIADB_INSTALL_DB)"; do \
		if [ ! -x "$$b" ]; then \
			echo "mysql-deps: $$b not found: install the Debian package mariadb-server (apt-get install mariadb-server), or set MARIADBD and MARIADB_INSTALL_DB to the paths of mariadbd and mariadb-install-db" >&2; \
			exit 1; \
		fi; \
	done

## e2e-mysql: vet the MySQL example and run its tests against real MariaDB
## servers, under the race detector: a few trials of each fault, with a
## once-a-second pinging GET_LOCK holder beside them, three holders over 100
## rounds, the mistakes, the demo, and the conformance suite of every
## issuer (TestConformance).
e2e-mysql: mysql-deps
	cd $(MYSQL_EXAMPLE) && $(GO) vet ./... && $(MYSQL_ENV) $(GO) test -race -count=1 -timeout 15m ./...

## faults-mysql: run each fault of the MySQL issuer MYSQL_FAULT_TRIALS
## times (30), with the pinging holder beside it, without the race
## detector, whose slowness is not the lease's; check the goals and write
## the table into the example's README.
faults-mysql: mysql-deps
	cd $(MYSQL_EXAMPLE) && $(MYSQL_ENV) $(GO) test -count=1 -timeout 60m -v -run '^TestFaults$$' . \
		-faults.trials=$(MYSQL_FAULT_TRIALS) -faults.goals -faults.readme=README.md

## demo-mysql: two holders contend for one lock on a real MariaDB server;
## the first's session is killed, it is told at once with the cause, and the
## second takes over with a larger fencing token; prints the timeline.
demo-mysql: mysql-deps
	cd $(MYSQL_EXAMPLE) && $(MYSQL_ENV) $(GO) run ./demo

lint: lint-mysql

## lint-mysql: go vet and staticcheck over the MySQL example's module.
lint-mysql:
	cd $(MYSQL_EXAMPLE) && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

# BENCH_MANY_MYSQL_FLAGS shortens bench-many-mysql, such as
# -bench-many.hold=5s -bench-many.leases=100,1000, or notes the machine's
# load in the table, -bench-many.note='shared with other builds'.
BENCH_MANY_MYSQL_FLAGS ?=

.PHONY: bench-many-mysql
BENCH_MANY_STEPS += bench-many-mysql

## bench-many-mysql: hold 100, 1,000 and 10,000 leases from one *sql.DB
## for 60 s each on a MariaDB server of max_connections 50, beside the same
## locks taken with GET_LOCK by hand on one connection: the time to grant
## all, the server's sessions (Threads_connected), its statements a second
## (Questions), the goroutines, the heap a lease and the false losses;
## writes the table into the example's README. About 7 minutes.
bench-many-mysql: mysql-deps
	cd $(MYSQL_EXAMPLE) && $(MYSQL_ENV) $(GO) test -count=1 -timeout 30m -v -run '^TestBenchMany$$' . \
		-bench-many -bench-many.readme=README.md $(BENCH_MANY_MYSQL_FLAGS)
