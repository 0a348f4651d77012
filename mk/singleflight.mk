# The single-flight group of issuers/singleflight lives in the root
# module (it needs only the standard library and the lease), so `make test`
# and `make lint` cover it with the rest of the library. Its comparison with
# golang.org/x/sync/singleflight lives in bench/singleflight, whose tests
# (the allocation counts beside x/sync's) run in `make test` through
# test-bench. bench-singleflight runs the benchmarks; it is not part of
# `make test`.

SF_BENCH_COUNT ?= 10
SF_BENCH_TXT   ?= testdata/singleflight.txt

.PHONY: bench-singleflight

## bench-singleflight: run the singleflight benchmarks SF_BENCH_COUNT times,
## each round both implementations, keep the output in
## bench/testdata/singleflight.txt and print benchstat's table of the lease's
## Group against x/sync's.
bench-singleflight:
	cd bench && dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && \
		$(GO) test -c -o "$$dir/singleflight.test" ./singleflight && : > "$$dir/all.txt" && \
		for i in $$(seq $(SF_BENCH_COUNT)); do \
			echo "round $$i of $(SF_BENCH_COUNT)"; \
			"$$dir/singleflight.test" -test.run '^$$' -test.bench . -test.timeout 30m > "$$dir/round.txt" || \
				{ cat "$$dir/round.txt"; exit 1; }; \
			cat "$$dir/round.txt" >> "$$dir/all.txt"; \
		done && cp "$$dir/all.txt" $(SF_BENCH_TXT)
	cd bench && $(GO) tool benchstat -col '/impl@(xsync lease)' $(SF_BENCH_TXT)
