# Roost: the two set-up commands are `make serve` and `make test`.
# Both install what is missing (Debian/Ubuntu), build, and run.

SWIFT        ?= swift
SYSTEM_DEPS  := libzstd-dev libssl-dev pkg-config python3 python3-venv
# Tests only: DamageTests injects ENOSPC into a running server's log writes.
SYSTEM_DEPS  += strace
BUILD_FLAGS  := --explicit-target-dependency-import-check=error
# Release builds link the Swift runtime into the binary (decision 0093): its
# calls (retain, release, exclusivity checks) are direct and its thread-local
# look-ups cheaper, and the binary runs where no Swift toolchain is installed.
# They are optimised whole at link time (decision 0094): LLVM inlines across
# modules what Swift's own optimiser does not (members of `package` types).
# Every `-c release` build uses these flags, so that one build serves them all.
RELEASE_FLAGS := $(BUILD_FLAGS) --static-swift-stdlib --experimental-lto-mode=full
LISTEN       ?= 127.0.0.1:8080
DATA         ?= ./roost-data
BENCH_SECONDS ?= 10
FUZZ_SECONDS ?= 60
FUZZ_DIR     ?= .build/fuzz
FUZZ_TARGETS := fuzz-json fuzz-csv fuzz-identity fuzz-storage fuzz-engine fuzz-connection fuzz-ndjson

.PHONY: serve cluster cluster-soak cluster-history test alloc-budget test-venv test-deps console-assets deps build release lint format bench bench-http bench-durability \
  bench-spine bench-attribute bench-instructions bench-latency bench-fairness bench-registry \
  bench-deps bench-memory bench-peers release-harness crash-short soak fuzz-http clean fuzz $(FUZZ_TARGETS)

## Install the Debian packages Roost links against, if any is missing.
deps:
	@missing=""; for p in $(SYSTEM_DEPS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = "0" ]; then \
	    echo "installing:$$missing"; \
	    apt-get install -y $$missing >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y $$missing; }; \
	  else \
	    echo "missing system packages; run: sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

build: deps
	$(SWIFT) build $(BUILD_FLAGS)

release: deps
	$(SWIFT) build -c release $(RELEASE_FLAGS)

## Build release (`roost` alone: each executable is linked as a whole
## program, decision 0094) and serve on $(LISTEN) with data in $(DATA). `exec`: the shell
## becomes roost, so the SIGTERM or SIGINT that make forwards reaches the
## server (it drains and exits 0) instead of leaving it orphaned and serving.
serve: deps
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product roost
	exec "$$($(SWIFT) build -c release --show-bin-path)/roost" serve --listen $(LISTEN) --data $(DATA)

lint:
	$(SWIFT) format lint --strict --recursive Package.swift Sources Tests Benchmarks

format:
	$(SWIFT) format --in-place --recursive Package.swift Sources Tests Benchmarks

## Install, build (debug, with the layering check) and run every test.
## Serially: many system tests block a thread of Swift's cooperative pool on a
## socket, and on 2 cores that starved the async tests running beside them
## (timeouts under load). Serial, the whole suite takes well under a minute.
## Then a short kill -9 run of the release binary: `roost-bench crash`
## (docs/crash-testing.md), CRASH_CYCLES cycles, well under a minute; then
## the allocation budget against the release build (alloc-budget).
## Before all of it, every fuzz target is built and run for a few seconds (fuzz-smoke).
test: deps test-deps lint test-venv fuzz-smoke
	$(SWIFT) build $(BUILD_FLAGS) --build-tests
	ROOST_TEST_PYTHON=$(CURDIR)/$(VENV_TEST)/bin/python $(SWIFT) test $(BUILD_FLAGS) --skip-build --no-parallel
	$(MAKE) --no-print-directory crash-short
	$(MAKE) --no-print-directory alloc-budget

## The allocation budget (issue 25, decision 0070, docs/testing.md): the
## suite that holds the ceilings, run against the release roost-alloc-count
## (the suite above ran it against the debug one). A few seconds once the
## release modules exist (crash-short builds them).
alloc-budget: deps
	$(SWIFT) build $(BUILD_FLAGS) --build-tests
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product roost-alloc-count
	ROOST_ALLOC_COUNT_BIN=$(RELEASE_DIR)/roost-alloc-count $(SWIFT) test $(BUILD_FLAGS) --skip-build --no-parallel \
	  --filter AllocationBudgetTests

## What the tests need beyond `deps`: headless Chromium and its WebDriver for
## the console's browser tests (Tests/SystemTests/ConsoleBrowserSystemTests.swift),
## and etcd 3.4 for the etcd client's tests against a real server
## (Tests/SystemTests/EtcdClientSystemTests.swift, decision 0078).
TEST_DEPS := chromium chromium-driver etcd-server
test-deps:
	@$(MAKE) --no-print-directory deps SYSTEM_DEPS="$(TEST_DEPS)"

## A try-out of cluster mode (spec §13, docs/cluster.md): one etcd member
## (Debian etcd-server) and three nodes on 127.0.0.1:8081..8083, data in
## ./roost-cluster; Ctrl-C stops them all.
cluster: release
	@$(MAKE) --no-print-directory deps SYSTEM_DEPS="etcd-server"
	scripts/cluster.sh "$$($(SWIFT) build -c release --show-bin-path)/roost"

## The cluster soak (issue 22, docs/crash-testing.md): three etcd members,
## three nodes, writers with idempotency keys, CLUSTER_SOAK_FAULTS faults
## (kill -9 and SIGSTOP of the leader, kill -9 of a follower and of an etcd
## member, step-down); fails on a lost or invented write, nodes that differ,
## or an epoch won twice. About a second and a half per fault.
CLUSTER_SOAK_FAULTS ?= 200
CLUSTER_SOAK_SEED   ?= 20261206
cluster-soak: release
	@$(MAKE) --no-print-directory deps SYSTEM_DEPS="etcd-server"
	python3 Benchmarks/cluster/soak.py "$$($(SWIFT) build -c release --show-bin-path)/roost" \
	  --faults $(CLUSTER_SOAK_FAULTS) --seed $(CLUSTER_SOAK_SEED)

## The cluster history checker (issue 22, docs/crash-testing.md): `roost-bench
## cluster` on CLUSTER_HISTORY_ETCD etcd members and three nodes, writers,
## readers and a feed follower recorded operation by operation,
## CLUSTER_HISTORY_FAULTS faults; fails on a lost, duplicated or invented
## write, two writers in an epoch, a reused position, a dirty read, nodes that
## differ or a gap in the change feed. About two seconds per fault.
CLUSTER_HISTORY_FAULTS ?= 20
CLUSTER_HISTORY_SEED   ?= 1
CLUSTER_HISTORY_ETCD   ?= 3
cluster-history: release-harness
	@$(MAKE) --no-print-directory deps SYSTEM_DEPS="etcd-server"
	$(RELEASE_DIR)/roost-bench cluster --roost $(RELEASE_DIR)/roost --faults $(CLUSTER_HISTORY_FAULTS) \
	  --seed $(CLUSTER_HISTORY_SEED) --etcd-members $(CLUSTER_HISTORY_ETCD)

## The test-only Python environment whose prometheus_client parses GET /metrics
## (Tests/SystemTests/MetricsSystemTests.swift), whose openapi-spec-validator
## checks docs/openapi.yaml (Tests/RoostAPITests/OpenAPITests.swift), and whose
## selenium and axe-core-python (it bundles axe-core 4.4: nothing is fetched)
## drive the console in Chromium (docs/console.md); made only when missing or stale.
VENV_TEST := .venv-test
PROMETHEUS_CLIENT_VERSION := 0.26.0
OPENAPI_SPEC_VALIDATOR_VERSION := 0.9.0
SELENIUM_VERSION := 4.51.0
AXE_CORE_PYTHON_VERSION := 0.1.0
test-venv:
	@if ! $(VENV_TEST)/bin/python -c 'import importlib.metadata as m, sys; \
	  sys.exit(m.version("prometheus_client") != "$(PROMETHEUS_CLIENT_VERSION)" or \
	  m.version("openapi-spec-validator") != "$(OPENAPI_SPEC_VALIDATOR_VERSION)" or \
	  m.version("selenium") != "$(SELENIUM_VERSION)" or \
	  m.version("axe-core-python") != "$(AXE_CORE_PYTHON_VERSION)")' 2>/dev/null; then \
	  echo "creating $(VENV_TEST) with prometheus_client==$(PROMETHEUS_CLIENT_VERSION)" \
	    "openapi-spec-validator==$(OPENAPI_SPEC_VALIDATOR_VERSION) selenium==$(SELENIUM_VERSION)" \
	    "axe-core-python==$(AXE_CORE_PYTHON_VERSION)"; \
	  rm -rf $(VENV_TEST) && python3 -m venv $(VENV_TEST) && \
	  $(VENV_TEST)/bin/pip install --quiet --disable-pip-version-check \
	    prometheus_client==$(PROMETHEUS_CLIENT_VERSION) \
	    openapi-spec-validator==$(OPENAPI_SPEC_VALIDATOR_VERSION) \
	    selenium==$(SELENIUM_VERSION) axe-core-python==$(AXE_CORE_PYTHON_VERSION); \
	fi

## Regenerates Sources/RoostAPI/Console/ConsoleAssets+Generated.swift from the
## console's files (decision 0068); ConsoleAssetTests fails while it is stale.
console-assets:
	python3 scripts/console-assets.py

## The release binaries the harnesses run (roost-bench load/crash, make bench,
## roost-alloc-count for alloc-budget): `release`, every executable in one
## build, so that their whole-program links (decision 0094, ~75 s each on one
## core) run side by side.
RELEASE_DIR = $(shell $(SWIFT) build -c release --show-bin-path)
release-harness: release

CRASH_CYCLES ?= 8
CRASH_SEED   ?= 20261201
## `always` syncs before it answers; `never` answers once written, and under
## it a loop writes its round's group itself (decision 0095): both paths.
CRASH_FSYNC  ?= always never
crash-short: release-harness
	for policy in $(CRASH_FSYNC); do \
	  $(RELEASE_DIR)/roost-bench crash --bin $(RELEASE_DIR)/roost --fsync $$policy --cycles $(CRASH_CYCLES) \
	    --seed $(CRASH_SEED) || exit 1; \
	done

## What the benchmarks need beyond `deps` (never part of `make test`): the
## peers nginx, Redis 7 and PostgreSQL 15 (docs/benchmarking.md, "Peers"), wrk.
BENCH_DEPS := $(SYSTEM_DEPS) curl nginx-light redis-server redis-tools postgresql-15 postgresql-client-15 wrk
bench-deps:
	@$(MAKE) --no-print-directory deps SYSTEM_DEPS="$(BENCH_DEPS)"

## The standard suite (docs/benchmarking.md): peers side by side (nginx, roost
## always/everysec/never, Redis 7, PostgreSQL 15), the mix in every dialect,
## latency against offered rate, memory and restart next to Redis; regenerates
## the bench and peers-memory blocks of docs/performance.md and docs/img/bench-*.svg.
bench: release-harness bench-deps
	Benchmarks/bench.sh $(BENCH_SECONDS)

## The peers table alone, BENCH_ROUNDS rounds of BENCH_SECONDS per run, medians
## and per-round ratios to roost --fsync always (Benchmarks/peers/run.sh).
bench-peers: release-harness bench-deps
	nice -n 10 Benchmarks/peers/run.sh $(BENCH_SECONDS) $(BENCH_ROUNDS)

## Issue 12's side by side alone: BENCH_DEVICES devices in Roost and Redis,
## RSS per device, restart from snapshot/RDB and log/AOF (prints the table).
BENCH_RESTARTS ?= 3
bench-memory: bench-deps
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product roost
	nice -n 10 python3 Benchmarks/peers/memory.py --roost-bin "$(RELEASE_DIR)/roost" --devices $(BENCH_DEVICES) \
	  --restarts $(BENCH_RESTARTS)

## HTTP benchmark against nginx (see docs/performance.md). Needs wrk and nginx.
bench-http: release
	Benchmarks/http/run.sh $(BENCH_SECONDS)

## Registrations/s through HTTP per --fsync policy (`roost-bench load`, every
## status checked), records per fdatasync.
bench-durability: release-harness
	Benchmarks/durability/run.sh $(BENCH_SECONDS)

## Spine (issue 8): registrations over HTTP against nginx, --fsync always/never,
## context switches per request, open-loop p99 at half the peak (docs/performance.md).
## Needs wrk and nginx. ROOST_BIN_BASELINE=/path/to/roost alternates a second binary.
BENCH_ROUNDS ?= 3
bench-spine: deps
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product roost
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product roost-bench
	Benchmarks/spine/run.sh $(BENCH_SECONDS) $(BENCH_ROUNDS)

## Attribution (issue 25 item 1): server CPU per registration at older commits
## against this checkout and nginx, alternated in one sitting (docs/performance.md).
## ATTRIBUTE_COMMITS lists the commits oldest first; each is built once into
## .build/attribute/bin. Needs wrk and nginx. SPINE_POLICY (default never).
ATTRIBUTE_COMMITS ?= c1174b5 441236a
bench-attribute: deps
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product roost
	Benchmarks/spine/attribute.sh $(BENCH_SECONDS) $(BENCH_ROUNDS) \
	  $$(Benchmarks/spine/build-commits.sh $(ATTRIBUTE_COMMITS)) \
	  HEAD=$$($(SWIFT) build -c release $(RELEASE_FLAGS) --show-bin-path)/roost

## User-space instructions per registration, counted by valgrind's callgrind (the
## median of three runs), for changes too small for bench-attribute (docs/benchmarking.md).
bench-instructions: deps
	@$(MAKE) --no-print-directory deps SYSTEM_DEPS="$(SYSTEM_DEPS) valgrind binutils"
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product roost
	python3 Benchmarks/spine/instructions.py $$($(SWIFT) build -c release --show-bin-path)/roost

## Latency by fsync policy (issue 25's p99): one open-loop run per POLICY@RATE of
## LATENCY_RUNS on a fresh server, p50/p99 from the intended send time, the
## generator's own delay and the log's fdatasyncs (docs/performance.md). ROOST_BIN
## picks another binary; TMPDIR=/dev/shm puts the data on tmpfs (the sync's cost apart).
LATENCY_RUNS ?= always@20000 never@20000
bench-latency: deps
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product roost
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product roost-bench
	Benchmarks/spine/latency_by_policy.sh $(BENCH_SECONDS) $(LATENCY_RUNS)

## Fairness (issue 9): one app's p50 while another floods (docs/performance.md). Needs wrk.
## ROOST_BIN_BASELINE=/path/to/roost alternates a second binary; FAIR_NICE, FAIR_FSYNC_DELAY_US.
bench-fairness: deps
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product roost
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product roost-bench
	Benchmarks/fairness/run.sh $(BENCH_SECONDS) $(BENCH_ROUNDS)

## In-process registrations/s through the Registry and RSS bytes per device.
BENCH_DEVICES ?= 1000000
bench-registry: deps
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product roost-bench
	$$($(SWIFT) build -c release --show-bin-path)/roost-bench registry --devices $(BENCH_DEVICES) --shards 1

## Long crash soak: `roost-bench crash` with $(SOAK_CYCLES) kill -9 cycles of the
## release binary under each policy of SOAK_FSYNC (make test runs CRASH_CYCLES),
## then the in-suite crash test with as many cycles (make test runs 20).
SOAK_CYCLES ?= 200
SOAK_FSYNC  ?= always everysec never
soak: release-harness
	for policy in $(SOAK_FSYNC); do \
	  nice -n 10 $(RELEASE_DIR)/roost-bench crash --bin $(RELEASE_DIR)/roost --fsync $$policy \
	    --cycles $(SOAK_CYCLES) --seed $(CRASH_SEED) || exit 1; \
	done
	$(SWIFT) build $(BUILD_FLAGS) --build-tests
	ROOST_CRASH_CYCLES=$(SOAK_CYCLES) $(SWIFT) test $(BUILD_FLAGS) --skip-build --no-parallel --filter CrashRecoveryTests

## Every libFuzzer target for $(FUZZ_SECONDS) s each, one after the other
## (docs/testing.md); fails if any target found a crash, leak or timeout.
## One target: `make fuzz-http` (or -json, -csv, -ndjson, -identity, -storage,
## -engine, -connection). A crash input lands in $(FUZZ_DIR)/artifacts/;
## commit it to the target's Tests/…/FuzzCorpus directory.
fuzz:
	@failed=""; for target in fuzz-http $(FUZZ_TARGETS); do \
	  $(MAKE) --no-print-directory $$target || failed="$$failed $$target"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzzing failed:$$failed (inputs in $(FUZZ_DIR)/artifacts/)"; exit 1; fi

## The fuzz step of `make test`, so that no target rots (decision 0074): every
## target built into .build/fuzz-smoke (-Onone, libFuzzer's coverage without
## ASan: a fraction of the full build's time; two compiles at once), then each
## run for FUZZ_SMOKE_SECONDS from a fresh corpus over its seeds and committed
## inputs, its output in .build/fuzz-smoke/<target>.log (the tail is printed
## when it fails). Fails as `make fuzz` does.
FUZZ_SMOKE_SECONDS ?= 3
FUZZ_SMOKE_VARS    := FUZZ_DIR=.build/fuzz-smoke FUZZ_OPT=-Onone FUZZ_SANITIZERS=fuzzer \
  FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS) FUZZ_QUIET=1
.PHONY: fuzz-smoke
fuzz-smoke:
	rm -rf .build/fuzz-smoke/corpus-*
	$(MAKE) --no-print-directory -j2 $(FUZZ_SMOKE_VARS) \
	  $(addprefix .build/fuzz-smoke/bin/,http json csv ndjson identity storage engine connection)
	$(MAKE) --no-print-directory $(FUZZ_SMOKE_VARS) fuzz

# Each target is its Fuzz/<Target>/main.swift and its property file from
# Tests/RoostFuzzChecks (the RoostFuzzChecks module the replay tests import),
# linked with the modules it tests. Each module is compiled once by swiftc
# with libFuzzer's coverage (and ASan) into $(FUZZ_MODULES), whole-module,
# from every file under Sources/<Module>/ (decisions 0040, 0074: SwiftPM
# would link its own main over libFuzzer's). CSystemShims gets a module map.
FUZZ_OPT        ?= -O -g
FUZZ_SANITIZERS ?= fuzzer,address
FUZZ_MODULES := $(FUZZ_DIR)/modules
FUZZ_SWIFTC  := swiftc -swift-version 6 -sanitize=$(FUZZ_SANITIZERS) $(FUZZ_OPT) -package-name Roost \
  -I $(FUZZ_MODULES) -I Sources/CZstd -I Sources/CCrypto
FUZZ_RUN     := SWIFT_BACKTRACE=enable=no nice -n 15
FUZZ_FLAGS   := -max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1
FUZZ_CHECKS  := Tests/RoostFuzzChecks

$(FUZZ_MODULES)/CSystemShims.o: Sources/CSystemShims/shims.c Sources/CSystemShims/include/CSystemShims.h
	mkdir -p $(FUZZ_MODULES)
	printf 'module CSystemShims {\n  header "%s"\n  export *\n}\n' \
	  "$(CURDIR)/Sources/CSystemShims/include/CSystemShims.h" > $(FUZZ_MODULES)/module.modulemap
	clang -O2 -g -c $< -I Sources/CSystemShims/include -o $@

# $(1): a module under Sources/; $(2): the modules it imports.
define fuzz_module
$(FUZZ_MODULES)/$(1).o: $$(shell find Sources/$(1) -name '*.swift') $$(foreach m,$(2),$(FUZZ_MODULES)/$$(m).o)
	mkdir -p $(FUZZ_MODULES)
	nice -n 10 $(FUZZ_SWIFTC) -parse-as-library -wmo -module-name $(1) -emit-module \
	  -emit-module-path $(FUZZ_MODULES)/$(1).swiftmodule -c $$(filter %.swift,$$^) -o $$@
	@# swiftc leaves an unchanged object untouched; make must see it as new.
	touch $$@
endef
$(eval $(call fuzz_module,RoostPlatform,CSystemShims))
$(eval $(call fuzz_module,RoostTelemetry,RoostPlatform))
$(eval $(call fuzz_module,RoostCrypto,))
$(eval $(call fuzz_module,RoostModel,RoostCrypto))
$(eval $(call fuzz_module,RoostJSON,))
$(eval $(call fuzz_module,RoostStorage,RoostPlatform CSystemShims RoostTelemetry))
$(eval $(call fuzz_module,RoostHTTP,RoostPlatform RoostTelemetry))
$(eval $(call fuzz_module,RoostEngine,RoostModel RoostStorage RoostTelemetry))
$(eval $(call fuzz_module,RoostAPI,RoostCrypto RoostHTTP RoostJSON RoostModel RoostEngine RoostStorage RoostTelemetry))
$(eval $(call fuzz_module,RoostCluster,RoostJSON RoostPlatform RoostStorage))
$(eval $(call fuzz_module,RoostTesting,RoostPlatform RoostHTTP RoostStorage RoostCluster))

# $(1): target name; $(2): Fuzz/ directory; $(3): modules linked;
# $(4): committed regression inputs; $(5): -max_len; $(6): its file of $(FUZZ_CHECKS).
define fuzz_target
$(FUZZ_DIR)/bin/$(1): $(2)/main.swift $(FUZZ_CHECKS)/$(strip $(6)) $$(foreach m,$(3),$(FUZZ_MODULES)/$$(m).o)
	mkdir -p $(FUZZ_DIR)/bin
	nice -n 10 $(FUZZ_SWIFTC) -parse-as-library -use-ld=lld -module-name $(notdir $(2)) $$^ -lzstd -lcrypto -o $$@
fuzz-$(1): $(FUZZ_DIR)/bin/$(1)
	mkdir -p $(FUZZ_DIR)/corpus-$(1) $(FUZZ_DIR)/artifacts $(4)
	$(FUZZ_RUN) $(FUZZ_DIR)/bin/$(1) $(FUZZ_FLAGS) -max_len=$(strip $(5)) -artifact_prefix=$(FUZZ_DIR)/artifacts/$(1)- \
	  $(FUZZ_DIR)/corpus-$(1) $(2)/seeds $(4) $(if $(FUZZ_QUIET),>$(FUZZ_DIR)/$(1).log 2>&1 \
	  && grep -h '^Done' $(FUZZ_DIR)/$(1).log | sed 's/^/fuzz-$(1): /' || { tail -n 40 $(FUZZ_DIR)/$(1).log; exit 1; })
endef
HTTP_MODULES := CSystemShims RoostPlatform RoostTelemetry RoostHTTP
ENGINE_MODULES := CSystemShims RoostPlatform RoostTelemetry RoostCrypto RoostModel RoostStorage RoostEngine
ALL_MODULES := CSystemShims RoostPlatform RoostTelemetry RoostCrypto RoostModel RoostJSON RoostStorage RoostHTTP RoostEngine RoostAPI
$(eval $(call fuzz_target,http,Fuzz/HTTPParserFuzz,$(HTTP_MODULES),Tests/RoostHTTPTests/FuzzCorpus,4096,\
  HTTPParserFuzzCheck.swift))
$(eval $(call fuzz_target,json,Fuzz/JSONFuzz,RoostJSON,Tests/RoostJSONTests/FuzzCorpus,4096,JSONFuzzCheck.swift))
$(eval $(call fuzz_target,csv,Fuzz/CSVReaderFuzz,$(ALL_MODULES),Tests/RoostAPITests/FuzzCorpus/csv,4096,\
  CSVReaderFuzzCheck.swift))
$(eval $(call fuzz_target,ndjson,Fuzz/NDJSONImportFuzz,$(ALL_MODULES),Tests/RoostAPITests/FuzzCorpus/ndjson,8192,\
  NDJSONImportFuzzCheck.swift))
$(eval $(call fuzz_target,identity,Fuzz/IdentityTokenFuzz,$(ALL_MODULES),Tests/RoostAPITests/FuzzCorpus/identity,2048,\
  IdentityTokenFuzzCheck.swift))
$(eval $(call fuzz_target,storage,Fuzz/StorageFuzz,$(HTTP_MODULES) RoostJSON RoostStorage RoostCluster RoostTesting,\
  Tests/RoostStorageTests/FuzzCorpus,8192,StorageFuzzCheck.swift))
$(eval $(call fuzz_target,engine,Fuzz/EngineRecordFuzz,$(ENGINE_MODULES),Tests/RoostEngineTests/FuzzCorpus,8192,\
  EngineRecordFuzzCheck.swift))
$(eval $(call fuzz_target,connection,Fuzz/HTTPConnectionFuzz,$(HTTP_MODULES),Tests/RoostHTTPTests/ConnectionFuzzCorpus,\
  4096,HTTPConnectionFuzzCheck.swift))

clean:
	rm -rf .build
