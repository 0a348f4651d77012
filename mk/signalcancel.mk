# The signalcancel analyzer, in signalcancel/, a module of its own so that the
# library never depends on golang.org/x/tools. It reports a cancel of
# Signal.Context or a release of signal.Any that is dropped or not called on
# every path, as go vet's lostcancel does for package context. test-signalcancel,
# part of `make test`, runs its analysistest tests; lint-signalcancel, part of
# `make lint`, runs it over the repository's own code and examples. Test files
# are left out there: the library's tests forget cancels on purpose, to
# measure what a forgotten cancel costs.

SIGNALCANCEL_DIRS := . bench issuers/etcdlease issuers/pglease issuers/redislease issuers/mysqllease internal/lockset

TEST_STEPS += test-signalcancel

.PHONY: test-signalcancel lint-signalcancel

# analysistest loads signalcancel/testdata, a module over this repository's
# signal package, without the module proxy: what it requires is downloaded
# first.
test-signalcancel:
	cd signalcancel/testdata && $(GO) mod download
	cd signalcancel && $(GO) vet ./... && $(GO) test -count=1 ./...

lint: lint-signalcancel

lint-signalcancel:
	cd signalcancel && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && \
		(cd signalcancel && $(GO) build -o "$$dir/signalcancel" ./cmd/signalcancel) && \
		for d in $(SIGNALCANCEL_DIRS); do \
			echo "signalcancel: $$d"; \
			(cd $$d && "$$dir/signalcancel" -test=false ./...) || exit 1; \
		done
