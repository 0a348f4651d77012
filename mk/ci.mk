# CI: ci-soak runs the whole of `make e2e` back to back while a busy loop
# keeps one core busy, as on a CI machine that other jobs share, to find the
# e2e tests that fail only under load. It is not part of `make test`, nor of
# .ci/run: five runs take five times `make e2e`.

# CI_SOAK_RUNS is how many times ci-soak runs `make e2e`; CI_SOAK_LOGS is
# the folder of the runs' logs, one a run.
CI_SOAK_RUNS ?= 5
CI_SOAK_LOGS ?= $(or $(TMPDIR),/tmp)/lease-ci-soak

.PHONY: ci-soak

## ci-soak: run `make e2e` (-k: every issuer's step, whatever failed
## before it) CI_SOAK_RUNS times (5) back to back beside a busy loop on one
## core; print each run's time and, for each failed run, its log's path and
## its failures; end with how many runs failed, and fail if any did.
ci-soak:
	@mkdir -p $(CI_SOAK_LOGS); \
	sh -c 'while :; do :; done' & busy=$$!; \
	trap 'kill $$busy 2>/dev/null' EXIT INT TERM; \
	failed=0; \
	for i in $$(seq 1 $(CI_SOAK_RUNS)); do \
		log=$(CI_SOAK_LOGS)/run-$$i.log; \
		start=$$(date +%s); \
		if $(MAKE) --no-print-directory -k e2e > $$log 2>&1; then \
			echo "ci-soak: run $$i of $(CI_SOAK_RUNS): ok in $$(( $$(date +%s) - start )) s"; \
		else \
			failed=$$(( failed + 1 )); \
			echo "ci-soak: run $$i of $(CI_SOAK_RUNS): FAILED in $$(( $$(date +%s) - start )) s; log: $$log"; \
			awk '/^ *--- FAIL|^FAIL|^panic:|^WARNING: DATA RACE|^make(\[[0-9]+\])?: \*\*\*|^ +[^ ]+_test\.go:[0-9]+: / { print; more = 1; next } \
				more && /^        / { print; next } { more = 0 }' $$log | head -n 200 | sed 's/^/    /'; \
		fi; \
	done; \
	echo "ci-soak: $$failed of $(CI_SOAK_RUNS) runs of make e2e failed, one core kept busy beside them"; \
	[ $$failed -eq 0 ]
