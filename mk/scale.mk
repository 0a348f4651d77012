# Scaling benchmarks: the ops a server makes on one lease from every core at
# once (bench/scale), each beside the same op on a lease per goroutine (the
# limit) and beside package context's way, and the single-flight group's Do
# and DoParallel beside x/sync's, at each core count of the machine. Not
# part of `make test`; docs/benchmarks.md ("Every core at once") has the
# figures and says how long a run takes.

SCALE_ROUNDS ?= 5
SCALE_TIME   ?= 150ms
SCALE_TXT    ?= testdata/scale-$(shell nproc)core.txt
# SCALE_BEFORE: the same benchmarks' output from an earlier tree, shown as
# "lease before"; empty for none.
SCALE_BEFORE ?=

.PHONY: bench-scale bench-scale-report

## bench-scale: run bench/scale and the single-flight Do and DoParallel
## SCALE_ROUNDS times at 1, 2, 4, ... cores and at every core of the
## machine (-test.cpu), each round all of them, keep the output in
## bench/$(SCALE_TXT), and write the table into docs/benchmarks.md (the
## section of this machine's core count) and the chart of throughput
## against cores into docs/scale-<cores>core.svg.
bench-scale:
	cd bench && dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && \
		$(GO) test -c -o "$$dir/scale.test" ./scale && \
		$(GO) test -c -o "$$dir/singleflight.test" ./singleflight && \
		n=$$(nproc) && cpus=1 && c=2 && \
		while [ $$c -lt $$n ]; do cpus=$$cpus,$$c; c=$$((c * 2)); done && \
		if [ $$n -gt 1 ]; then cpus=$$cpus,$$n; fi && \
		echo "nproc: $$n" > "$$dir/all.txt" && \
		for i in $$(seq $(SCALE_ROUNDS)); do \
			echo "round $$i of $(SCALE_ROUNDS), -test.cpu $$cpus"; \
			"$$dir/scale.test" -test.run '^$$' -test.bench '^BenchmarkScale' -test.cpu $$cpus \
				-test.benchtime $(SCALE_TIME) -test.timeout 30m >> "$$dir/all.txt" || exit 1; \
			"$$dir/singleflight.test" -test.run '^$$' -test.bench '^Benchmark(Do|DoParallel)$$' -test.cpu $$cpus \
				-test.benchtime $(SCALE_TIME) -test.timeout 30m >> "$$dir/all.txt" || exit 1; \
		done && cp "$$dir/all.txt" $(SCALE_TXT)
	$(MAKE) bench-scale-report

## bench-scale-report: write the table and the chart of bench/$(SCALE_TXT)
## (and bench/$(SCALE_BEFORE), if set) without running anything.
bench-scale-report:
	cd bench && n=$$(sed -n 's/^nproc: //p' $(SCALE_TXT) | head -1) && \
		$(GO) run ./cmd/scalereport -md ../docs/benchmarks.md -section $$n-core \
			-svg ../docs/scale-$${n}core.svg $(if $(SCALE_BEFORE),-before $(SCALE_BEFORE)) $(SCALE_TXT)
