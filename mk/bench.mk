# Benchmarks of the lease beside context and a hand-rolled signal, in bench/,
# a module of its own. `make bench` takes minutes and is not part of
# `make test`; test-bench, which is, runs bench/'s tests (the check that
# Signal.Err and Signal.Done are inlined into a holder) and no benchmark.

BENCH_COUNT ?= 8
BENCH_TXT   ?= testdata/bench.txt

TEST_STEPS += test-bench

.PHONY: bench test-bench

test-bench:
	cd bench && $(GO) vet ./... && $(GO) test -count=1 -run . ./...

## bench: run every benchmark BENCH_COUNT times, keep the output in
## bench/testdata/bench.txt, print benchstat's tables of the lease against
## each peer, and redraw docs/benchmarks.svg.
bench:
	cd bench && ( $(GO) test -run '^$$' -bench . -count $(BENCH_COUNT) -timeout 60m . ; \
		echo $$? > $(BENCH_TXT).status ) | tee $(BENCH_TXT).new
	cd bench && st=$$(cat $(BENCH_TXT).status); rm -f $(BENCH_TXT).status; \
		test "$$st" = 0 && mv $(BENCH_TXT).new $(BENCH_TXT)
	cd bench && $(GO) tool benchstat -filter '/impl:(context OR lease)' -col '/impl@(context lease)' $(BENCH_TXT)
	cd bench && $(GO) tool benchstat -filter '.name:ErrLost /impl:(context.Cause OR lease)' -col '/impl@(context.Cause lease)' $(BENCH_TXT)
	cd bench && $(GO) tool benchstat -filter '/impl:(handrolled OR lease)' -col '/impl@(handrolled lease)' $(BENCH_TXT)
	cd bench && $(GO) run ./cmd/benchreport -svg ../docs/benchmarks.svg $(BENCH_TXT)
