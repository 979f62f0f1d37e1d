# Thin entry points; the real build is CMake (build/), the experiments Makefile.reproduce.
#   make test                 install what is missing, build llama.cpp (cached) and profinfer, run all tests
#   make reproduce [BOARD=host] [QUICK=1]   the paper's studies on this board; INVESTIGATIONS=1 adds experiments/specs/investigations/
#   make build                the pinned llama.cpp (cached) and build/profinfer
#   make test-repeat [N=3]    the eBPF integration tests N times each, stopping at the first failure
#   make test-under-load [LOAD_N=1] [LOAD_SUITE=all]   the same beside stress-ng keeping every CPU half busy at the lowest priority
#   make test-sanitized       the suite under ASan + UBSan, and the fuzzers (build-sanitized/)
#   make cross-arm64          profinfer for aarch64 (build-arm64/), with the pinned llama.cpp for arm64
#   make test-arm64           that build's tests under qemu-user (BPF cannot load there: those skip, saying so)
#   make farm INVENTORY=FILE [STUDIES=a,b] [QUICK=1]   the studies on every board of an Ansible inventory
#   make vboard NAME=… KERNEL=6.1|5.10   boot an emulated Cortex-A76 Debian board (scripts/vboard.sh; SSH)
#   make test-vboard          the arm64 build's tests inside a virtual board on each kernel, eBPF included,
#                             then the farm over SSH to two virtual boards (6.1 and 5.10) at once
#   make reproduce-vboard [QUICK=1]   make reproduce BOARD=virt-a76 inside a virtual board (results/virt-a76/,
#                             its quick sweep: emulated speed)
BUILD ?= build
BOARD ?= host
JOBS ?= $(shell nproc)
CMAKE_BUILD_TYPE ?= RelWithDebInfo

.PHONY: all deps llama build test test-repeat test-under-load test-sanitized bench reproduce clean cross-arm64 test-arm64 farm vboard test-vboard \
	farm-vboards reproduce-vboard

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
	@cd $(BUILD) && ctest --output-on-failure -j1 -LE vboard $(if $(CI),,--timeout 1800)

# A test that fails by chance shows here: the eBPF integration tests (label ebpf) N times each
# (ctest --repeat until-fail), and the same while stress-ng keeps every CPU busy at 50 % at
# nice 19 — a machine shared with other work, as CI's and users' are. LOAD_SUITE=all: the whole
# suite under load instead.
N ?= 3
LOAD_N ?= 1
test-repeat: build
	@cd $(BUILD) && ctest --output-on-failure -j1 -L ebpf -LE vboard --repeat until-fail:$(N)

test-under-load: build
	@scripts/install-deps.sh --with-stress-ng
	@nice -n 19 stress-ng --cpu 0 --cpu-load 50 --quiet & load=$$!; \
	  cd $(BUILD) && ctest --output-on-failure -j1 $(if $(filter all,$(LOAD_SUITE)),,-L ebpf) -LE vboard \
	    --repeat until-fail:$(LOAD_N) && rc=0 || rc=$$?; kill $$load; wait $$load 2>/dev/null; exit $$rc

# The whole suite under AddressSanitizer + UBSan (clang), plus the libFuzzer targets for a
# fixed number of inputs each: docs/reliability.md. The virtual-board tests (label vboard)
# build and boot boards of their own: they belong to make test-vboard, as in make test.
test-sanitized: deps llama
	@cmake -S . -B build-sanitized -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_CXX_COMPILER=clang++ -DPROFINFER_SANITIZE=address,undefined -DPROFINFER_FUZZ=ON >/dev/null
	@cmake --build build-sanitized -j$(JOBS)
	@cd build-sanitized && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j1 -LE vboard

# Micro-benchmarks: the consumer + store writer in records/s, the analysis in operators/s, what
# one operator probe hit costs (root: it attaches the recorder's own BPF program)
# (CPU time beside wall time; medians and spread over 5 repetitions).
bench: build
	@$(BUILD)/tracer/trace_writer_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
	@$(BUILD)/analysis/analysis_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
	@$(BUILD)/tracer/probe_cost_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

# Only what the studies run (profinfer and the peers it starts), not the tests.
reproduce: deps llama $(BUILD)/Makefile
	@cmake --build $(BUILD) -j$(JOBS) --target profinfer
	@$(MAKE) --no-print-directory -f Makefile.reproduce BOARD=$(BOARD) BUILD=$(BUILD)

# aarch64, cross-compiled here (docs/boards.md): the user-space code, the BPF object for
# arm64 (-D__TARGET_ARCH_arm64, tracer/bpf/vmlinux_min.h) and the tests, against the pinned
# llama.cpp for arm64 — cross-built with debug info, and the stock @node-llama-cpp/linux-arm64.
# Whatever the arm64 tests and studies take from the npm registry is fetched here, into the
# cache: a virtual board has no route out (and no npm) — onnxruntime-node, the overhead
# study's peer (its tarball holds the linux-arm64 libraries too).
cross-arm64:
	@scripts/install-deps.sh --cross-arm64
	@PROFINFER_ARCH=arm64 scripts/llama.sh ensure debug >/dev/null
	@PROFINFER_ARCH=arm64 scripts/llama.sh ensure release >/dev/null
	@scripts/ort.sh node-path >/dev/null
	@PROFINFER_ARCH=arm64 cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@PROFINFER_ARCH=arm64 cmake --build build-arm64 -j$(JOBS)
	@file -b build-arm64/profinfer | cut -d, -f1-2

# The arm64 build's tests under qemu-user, with the arm64 llama.cpp: every test that needs
# no kernel support runs; the eBPF ones skip, each saying why. The virtual-board tests (label
# vboard) build and boot boards of their own: they belong to make test-vboard, not here.
test-arm64: cross-arm64
	@scripts/qemu-binfmt.sh
	@cd build-arm64 && PROFINFER_ARCH=arm64 ctest --output-on-failure -j1 -LE vboard --timeout 1800

# Virtual boards (docs/boards.md): whole arm64 systems under qemu-system-aarch64, their own
# kernels included, so that what qemu-user cannot run (bpf()) runs there.
NAME ?= vboard-6.1
KERNEL ?= 6.1
vboard:
	@scripts/vboard.sh start $(NAME) $(KERNEL) >/dev/null

# The arm64 suite inside a virtual board on each kernel, as CI runs it (CI=true: a skipped
# eBPF test fails). The repository and the cache are shared in at the same paths.
VBOARD_KERNELS ?= 6.1 5.10
# A board per kernel, one after the other (scripts/vboard.sh suite): a failure on one kernel
# does not hide the other's; the make fails if either did.
test-vboard: cross-arm64 build
	@scripts/vboard.sh suite $(VBOARD_KERNELS)
	@cd $(BUILD) && ctest --output-on-failure -j1 -L vboard

# The studies inside one virtual board, as on a real board: BOARD=virt-a76 (its profile:
# tiny models, the Table 3 counters), this machine's arm64 build shared in. The emulated
# board's committed results are its quick sweep (2 interleaved rounds: the full sweep's ~800
# runs would take days at emulated speed, and no timing there is a board's): results/virt-a76/
# of this checkout (shared in at the same path). QUICK=0 runs the full sweeps instead.
# The overhead-where study's ONNX model (its ONNX Runtime peer) is made here, into the shared
# cache: the board has no apt for python3-onnx's first install, and numpy is slow emulated.
reproduce-vboard: cross-arm64
	@scripts/ort.sh model models/cards/llama3.2-1b.toml tiny >/dev/null
	@scripts/vboard.sh start reproduce 6.1 >/dev/null
	@scripts/vboard.sh ssh reproduce "cd $(CURDIR) && make --no-print-directory -f Makefile.reproduce BOARD=virt-a76 BUILD=build-arm64 QUICK=$(or $(QUICK),1) RESULTS=results/virt-a76 COMMIT=$$(git rev-parse --short HEAD)" \
	  && rc=0 || rc=$$?; scripts/vboard.sh stop reproduce; exit $$rc

# The farm over SSH (farm/inventory-vboards.ini): both virtual boards booted at the
# inventory's ports, the studies on both at once, merged here; the boards stopped after.
farm-vboards: cross-arm64 build
	@scripts/vboard.sh start vboard-6.1 6.1 22061 >/dev/null
	@scripts/vboard.sh start vboard-5.10 5.10 22510 >/dev/null
	@$(MAKE) --no-print-directory farm INVENTORY=farm/inventory-vboards.ini STUDIES=$(STUDIES) \
	  FARM_EXTRA="-e profinfer=$(CURDIR)/build-arm64/profinfer -e ansible_ssh_private_key_file=$$(scripts/vboard.sh key) $(FARM_EXTRA)" \
	  && rc=0 || rc=$$?; scripts/vboard.sh stop vboard-6.1; scripts/vboard.sh stop vboard-5.10; exit $$rc

# Every board of an Ansible inventory at once, one exclusive job per board (farm/playbook.yml),
# results back in farm-results/<board>/, indexes merged (farm-results/farm.db) and compared
# side by side (farm-results/compare/). STUDIES=all runs make reproduce on each board.
INVENTORY ?= farm/inventory-local.ini
STUDIES ?= all
FARM_QUICK ?= 1
FARM_RESULTS ?= farm-results
# The controller's profinfer, which merges what came back.
FARM_PROFINFER ?= $(BUILD)/profinfer
farm:
	@command -v ansible-playbook >/dev/null || scripts/install-deps.sh --with-ansible
	@mkdir -p $(FARM_RESULTS)
	@ANSIBLE_PYTHON_INTERPRETER=/usr/bin/python3 ansible-playbook -i $(INVENTORY) farm/playbook.yml \
	  -e controller_dir=$(CURDIR) -e farm_results=$(abspath $(FARM_RESULTS)) -e studies=$(STUDIES) \
	  -e quick=$(FARM_QUICK) $(FARM_EXTRA)
	@$(FARM_PROFINFER) experiment merge $(FARM_RESULTS) >/dev/null

clean:
	rm -rf $(BUILD) build-sanitized build-arm64
