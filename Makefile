# Thin entry points; the real build is CMake (build/), the experiments Makefile.reproduce.
#   make test                 install what is missing, build llama.cpp (cached) and profinfer, run all tests
#   make reproduce [BOARD=host] [QUICK=1]   the paper's studies on this board
#   make build                the pinned llama.cpp (cached) and build/profinfer
#   make test-sanitized       the suite under ASan + UBSan, and the fuzzers (build-sanitized/)
BUILD ?= build
BOARD ?= host
JOBS ?= $(shell nproc)
CMAKE_BUILD_TYPE ?= RelWithDebInfo

.PHONY: all deps llama build test test-sanitized bench reproduce clean

all: build

deps:
	@scripts/install-deps.sh

# The pinned llama.cpp: a debug-info build and the stock release libraries, cached in
# $${PROFINFER_CACHE:-~/.cache/profinfer}; a second run costs seconds.
llama: deps
	@scripts/llama.sh ensure debug >/dev/null
	@scripts/llama.sh ensure release >/dev/null

$(BUILD)/Makefile: CMakeLists.txt
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(CMAKE_BUILD_TYPE) >/dev/null

build: deps llama $(BUILD)/Makefile
	@cmake --build $(BUILD) -j$(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j1 $(if $(CI),,--timeout 1800)

# The whole suite under AddressSanitizer + UBSan (clang), plus the libFuzzer targets for a
# fixed number of inputs each: docs/reliability.md.
test-sanitized: deps llama
	@cmake -S . -B build-sanitized -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_CXX_COMPILER=clang++ -DPROFINFER_SANITIZE=address,undefined -DPROFINFER_FUZZ=ON >/dev/null
	@cmake --build build-sanitized -j$(JOBS)
	@cd build-sanitized && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j1

# Micro-benchmarks: the consumer + store writer in records/s, the analysis in operators/s
# (CPU time beside wall time; medians and spread over 5 repetitions).
bench: build
	@$(BUILD)/tracer/trace_writer_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
	@$(BUILD)/analysis/analysis_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

reproduce: build llama
	@$(MAKE) --no-print-directory -f Makefile.reproduce BOARD=$(BOARD) BUILD=$(BUILD)

clean:
	rm -rf $(BUILD) build-sanitized
