# The controller-runtime issuer, in issuers/ctrllease, a module of its
# own so that users of k8slease never download controller-runtime. Its tests
# on a real kube-apiserver live in issuers/k8slease/internal/ctrltest,
# an unpublished module beside the kubetest harness they import.

CTRL_EXAMPLE := issuers/ctrllease
CTRL_TEST    := issuers/k8slease/internal/ctrltest

.PHONY: e2e-ctrl demo-ctrl lint-ctrl

E2E_STEPS += e2e-ctrl

## e2e-ctrl: vet the controller-runtime example and run its tests under the
## race detector: its own (no server), then those on a real kube-apiserver
## (a takeover cuts the term, a stop hands over, ten terms in one process,
## the gate, the stop timeout, the mistakes).
e2e-ctrl: k8s-apiserver
	cd $(CTRL_EXAMPLE) && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	cd $(CTRL_TEST) && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 20m ./...

lint: lint-ctrl

## lint-ctrl: go vet and staticcheck over the controller-runtime example
## and its tests' module.
lint-ctrl:
	cd $(CTRL_EXAMPLE) && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	cd $(CTRL_TEST) && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

.PHONY: faults-ctrl

FAULTS_STEPS += faults-ctrl

# CTRL_FAULT_TRIALS is how many times faults-ctrl runs each fault, and
# CTRL_FLEET_TRIALS how many times the mixed fleet hands over each way.
CTRL_FAULT_TRIALS ?= 30
CTRL_FLEET_TRIALS ?= 20

## faults-ctrl: run each fault of the controller-runtime example
## CTRL_FAULT_TRIALS times (30) with a stock controller-runtime Manager
## beside, and the mixed fleet CTRL_FLEET_TRIALS times (20); write the
## table into the example's README.
faults-ctrl: k8s-apiserver
	cd $(CTRL_TEST) && $(GO) test -count=1 -timeout 90m -v -run '^(TestFaults|TestMixedFleet|TestStopHandsOver)$$' . \
		-faults.trials=$(CTRL_FAULT_TRIALS) -fleet.trials=$(CTRL_FLEET_TRIALS) -handover.trials=$(CTRL_FAULT_TRIALS) \
		-faults.readme=../../../ctrllease/README.md -faults.command='make faults-ctrl'

## demo-ctrl: two replicas of a small controller-runtime operator, each a
## process, on a real kube-apiserver; an operator takes the leader's Lease,
## its reconcile is cut with the cause and its writes refused, the other
## replica leads, and the first leads again later; prints the timeline.
demo-ctrl: k8s-apiserver
	cd $(CTRL_TEST) && $(GO) run ./demo
