# Sparrow's front door: `make demo` and `make test` install dependencies, build, and run.
BUILD       ?= build
BUILD_ASAN  ?= build-asan
BUILD_FUZZ  ?= build-fuzz
BUILD_TSAN  ?= build-tsan
JOBS        ?= $(shell nproc)
# Tests at a time: one more than the cores. The integration tests mostly wait (Kafka group joins,
# session timeouts, checkpoint intervals): at 2 on 2 cores the CPUs idled half the run; at 4 the
# whole suite took 387 s instead of 677 s, but the heavier load brought out two unit tests that
# leaned on timing (fixed), so 3 leaves a margin.
TEST_JOBS   ?= $(shell echo $$(( $(JOBS) + 1 )))
FUZZ_SECONDS ?= 30
CMAKE_FLAGS ?=
SOURCES = $(shell git ls-files '*.c' '*.h' '*.cu' 2>/dev/null)

.PHONY: all deps build test demo asan tsan fuzz format format-check docs bench tidy clean

all: build

deps:
	@if [ -z "$$SPARROW_SKIP_DEPS" ]; then scripts/install-deps.sh; fi

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(TEST_JOBS) --timeout 600

demo: build
	scripts/demo.sh $(BUILD)/sparrow

# The tests again under AddressSanitizer + UndefinedBehaviorSanitizer (clang; CUDA off).
asan: deps
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
	    -DSPARROW_SANITIZE=address,undefined -DSPARROW_CUDA=off -DSPARROW_BENCH=OFF
	cmake --build $(BUILD_ASAN) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    ctest --test-dir $(BUILD_ASAN) --output-on-failure -j $(TEST_JOBS) --timeout 900

# The threaded modules' unit tests (ctest label "tsan": common's metrics, HTTP and log, the PS
# client, the pserver's server thread, serve's table, the coordinator) under ThreadSanitizer
# (clang; CUDA and benchmarks off), building only their targets (tsan_tests). Tests that run
# librdkafka are not labelled tsan: it crashes inside the library under TSan (STYLE.md).
tsan: deps
	cmake -S . -B $(BUILD_TSAN) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
	    -DSPARROW_SANITIZE=thread -DSPARROW_CUDA=off -DSPARROW_BENCH=OFF
	cmake --build $(BUILD_TSAN) -j $(JOBS) --target tsan_tests
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/tests/tsan.supp \
	    ctest --test-dir $(BUILD_TSAN) -L tsan --output-on-failure -j $(JOBS) --timeout 900

# Builds only the libFuzzer targets (clang; target fuzz_targets) and fuzzes each for FUZZ_SECONDS,
# JOBS at a time.
fuzz: deps
	cmake -S . -B $(BUILD_FUZZ) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
	    -DSPARROW_FUZZ=ON -DSPARROW_SANITIZE=address,undefined -DSPARROW_CUDA=off \
	    -DSPARROW_BENCH=OFF -DSPARROW_TESTS=ON
	cmake --build $(BUILD_FUZZ) -j $(JOBS) --target fuzz_targets
	scripts/run-fuzzers.sh $(BUILD_FUZZ) $(FUZZ_SECONDS) $(JOBS)

format:
	clang-format -i $(SOURCES)

format-check:
	clang-format --dry-run -Werror $(SOURCES)

docs: build
	cmake --build $(BUILD) --target config-doc

# Every benchmark (each printing its figures as ratios against a baseline of the same run) and the
# studies of issue 9, written to docs/BENCHMARKS.md with plots in docs/bench/ (about 30 minutes on
# 2 cores before the scaling study, which adds about 30: some 130 runs of 10-20 s; `bench/run_all
# --quick` is the smoke run CI does, about 9.5 minutes).
bench: build
	bench/run_all --build $(BUILD)

# clang-tidy (.clang-tidy: the checks and why some are left out), warnings as errors, over every .c
# file of the compile database under the modules, cmd/, tests/ and bench/: not the build tree's
# protobuf-generated code, not CUDA. JOBS files at a time.
TIDY_DIRS = common|ckpt|curve|dense|proto|kafka|ingest|pserver|psclient|coordinator|trainer|serve|tools|cmd|tests|bench
tidy: build
	python3 -c 'import json, sys; print("\n".join(sorted({e["file"] for e in json.load(open(sys.argv[1]))})))' \
	    $(BUILD)/compile_commands.json | grep -E '^$(CURDIR)/($(TIDY_DIRS))/.*\.c$$' | \
	    xargs -P $(JOBS) -n 4 clang-tidy -p $(BUILD) --quiet --warnings-as-errors='*'

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_FUZZ) $(BUILD_TSAN)
