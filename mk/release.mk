# Releases: the published modules (listed with their next version in
# versions.txt) must stay installable with go get from their tags, and keep
# their API unless the break is recorded. internal/release, a module of its
# own that is never published, does the work with golang.org/x/mod and
# golang.org/x/exp/apidiff; docs/releasing.md says how a release is made.

RELEASE_TOOL := cd internal/release && $(GO) run .

.PHONY: install-check apicheck apicheck-update release test-release lint-release

TEST_STEPS += test-release

lint: lint-release install-check apicheck

lint-release:
	cd internal/release && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

test-release:
	cd internal/release && $(GO) vet ./... && $(GO) test -count=1 ./...

## install-check: package the root and each published module from the
## working tree as its tag would serve it, into a GOPROXY=file:// folder in
## front of the usual proxy; in a fresh module, go get each at its version
## and build all its packages, and run the signalcancel analyzer with
## go run …@version; no replace, no workspace, GOFLAGS=-mod=mod.
install-check:
	$(RELEASE_TOOL) install-check

## apicheck: fail on any incompatible change of a published module's API
## since its record in testdata/api, naming the change.
apicheck:
	$(RELEASE_TOOL) apicheck

## apicheck-update: record each published module's API as it is now; commit
## the records with the change that breaks the API.
apicheck-update:
	$(RELEASE_TOOL) apicheck -update

## release: make the tree into release VERSION (make release VERSION=v0.1.0):
## rewrite versions.txt and every nested require of the root, tidy, check
## the API and the install, record the API, and print the tags to push.
release:
	@test -n "$(VERSION)" || { echo "release: set VERSION, as in make release VERSION=v0.1.0" >&2; exit 2; }
	$(RELEASE_TOOL) release $(VERSION)
