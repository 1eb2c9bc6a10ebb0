# The two set-up commands: `make demo` and `make test` (see README.md).
# Both install the Debian packages they need, build, then run.
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan
CMAKE_FLAGS ?=

.PHONY: demo test deps build build-trex build-asan test-release test-asan fuzz format clean

deps:
	bash scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DTREX_WERROR=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# -O1 -g1 (line tables: sanitizer reports keep file:line): ASan + UBSan at
# -O2 -g took ~34 of CI's ~80 minutes to compile on 2 cores; -O1 -g1 compiles
# a translation unit ~40% faster. The test programs, the CLI and the data
# layers build at -O0 here (cmake/build-time.cmake).
build-asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DTREX_WERROR=ON \
	  -DTREX_SANITIZE=ON -DTREX_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)

# The demo needs only the CLI: building just that target keeps `make demo` on a
# fresh machine short (~5 min on 2 cores).
build-trex: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DTREX_WERROR=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS) --target trex

# Passive OpenMP waiting: on a loaded machine, spinning threads that wait for a
# descheduled peer at every barrier slow a step by an order of magnitude.
# DEMO_RANKS processes (mpirun) share the cores: the demo's small GEMMs and
# per-step work scale better over data-parallel ranks than over threads (an SFT
# step of the demo model: 2 ranks x 1 thread 1.3-1.7x faster than 1 x 2 on an
# AMX machine, docs/results/demo.md). Two ranks where there are two cores; the
# demo's batches split over 2 (not over every core of a big machine).
DEMO_RANKS ?= $(shell [ $(JOBS) -ge 2 ] && echo 2 || echo 1)
DEMO_THREADS ?= $(shell n=$$(( $(JOBS) / $(DEMO_RANKS) )); [ $$n -ge 1 ] && echo $$n || echo 1)
MPIRUN_DEMO = OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np $(DEMO_RANKS) \
  --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
  -x OMP_WAIT_POLICY=passive -x OMP_NUM_THREADS=$(DEMO_THREADS)
demo: build-trex
	@if [ "$(DEMO_RANKS)" -gt 1 ]; then \
	  $(MPIRUN_DEMO) ./$(BUILD)/trex demo; \
	else \
	  OMP_WAIT_POLICY=passive ./$(BUILD)/trex demo; \
	fi

test-release: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer.
test-asan: build-asan
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS)

test: test-release test-asan

# libFuzzer targets (clang, ASan + UBSan) in build-fuzz, each run FUZZ_SECONDS on
# a scratch copy of its seed corpus; prints executions, coverage and findings per
# target (docs/fuzzing.md). FUZZ_TARGETS="jsonl lp" runs a subset.
FUZZ_SECONDS ?= 60
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) bash scripts/fuzz.sh

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
