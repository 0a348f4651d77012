# The Kubernetes issuer, in issuers/k8slease, a module of its own so
# that the library never depends on client-go. Its tests run a real
# kube-apiserver, built from k8s.io/kubernetes through the module proxy by
# the module in internal/kubetest/apiserver, on an etcd server started in
# the test process. The binary is kept, one for each Kubernetes version, in
# the user's cache folder (zukhruf-lease/kube-apiserver-VERSION; the
# environment variable KUBE_APISERVER names another file): only the first
# build is long (figures in issuers/k8slease/internal/kubetest/README.md),
# and a test that finds no binary builds it itself.

K8S_EXAMPLE := issuers/k8slease

.PHONY: k8s-apiserver

## k8s-apiserver: build kube-apiserver into the cache unless it is there,
## and print its path.
k8s-apiserver:
	cd $(K8S_EXAMPLE) && $(GO) run ./internal/kubetest/cmd/k8s-apiserver

.PHONY: e2e-k8s faults-k8s demo-k8s

E2E_STEPS    += e2e-k8s
FAULTS_STEPS += faults-k8s

# K8S_FAULT_TRIALS is how many times faults-k8s runs each fault.
K8S_FAULT_TRIALS ?= 30

## e2e-k8s: vet the Kubernetes example and run its tests against a real
## kube-apiserver, under the race detector: 3 trials of each fault with
## client-go's LeaderElector beside the holder, a mixed fleet, mutual
## exclusion of 3 holders over 100 rounds, leasetest's conformance suite
## on the Locker, the demo.
# The packages' tests run one at a time (-p 1), after a build of them all at
# once: the fault trials' benign rows want a 2 s lease renewed through 500 ms
# of latency with 300 ms to spare, which the apiservers of kubetest's own
# tests, started beside them on 2 cores, can take.
e2e-k8s: k8s-apiserver
	cd $(K8S_EXAMPLE) && $(GO) vet ./... && $(GO) test -race -count=1 -run '^$$' ./... && \
		$(GO) test -race -count=1 -p 1 -timeout 20m ./...

## faults-k8s: run each fault of the Kubernetes issuer K8S_FAULT_TRIALS
## times (30), with client-go's LeaderElector beside the holder, and the
## mixed fleet as many times; write the table into the example's README.
faults-k8s: k8s-apiserver
	cd $(K8S_EXAMPLE) && $(GO) test -count=1 -timeout 60m -v -run '^(TestFaults|TestMixedFleet|TestMutualExclusion)$$' . \
		-faults.trials=$(K8S_FAULT_TRIALS) -faults.readme=README.md -faults.command='make faults-k8s'

## demo-k8s: two holders contend for one Kubernetes Lease on a real
## kube-apiserver; an operator takes it away from the first, which is told
## at once with the cause; the second takes over with a larger fencing
## token; prints the timeline.
demo-k8s: k8s-apiserver
	cd $(K8S_EXAMPLE) && $(GO) run ./demo

.PHONY: bench-many-k8s

BENCH_MANY_STEPS += bench-many-k8s

# K8S_MANY is the numbers of leases bench-many-k8s holds, K8S_MANY_HOLD how
# long; K8S_MANY_PEER=false leaves client-go's LeaderElector out.
K8S_MANY      ?= 100,1000
K8S_MANY_HOLD ?= 60s
K8S_MANY_PEER ?= true

## bench-many-k8s: hold K8S_MANY leases (100 and 1,000) from one clientset
## for K8S_MANY_HOLD (60 s) on a kubetest apiserver, k8slease's beside
## client-go's LeaderElector (one per Lease) in the same run, and print the
## table of the README's "Many leases, one clientset": time to grant all,
## the apiserver's Lease watches, requests a second while holding,
## goroutines and heap per lease, leases lost with no fault.
bench-many-k8s: k8s-apiserver
	cd $(K8S_EXAMPLE) && $(GO) run ./internal/kubetest/cmd/bench-many -n $(K8S_MANY) -hold $(K8S_MANY_HOLD) -peer=$(K8S_MANY_PEER)

.PHONY: lint-k8s

lint: lint-k8s

## lint-k8s: go vet and staticcheck over the Kubernetes example's module.
lint-k8s:
	cd $(K8S_EXAMPLE) && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
