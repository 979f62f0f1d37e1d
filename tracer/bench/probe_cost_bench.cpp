// What one operator probe hit costs the thread that hits it, on this machine: a function
// shaped like ggml_cpu_extra_compute_forward(params, tensor), called in a loop, untraced and
// with profinfer's own node program on it (the very object the recorder loads, attached to
// this process by uprobe). Needs root (BPF); the consumer is a thread draining the ring buffer.
//   untraced        the call alone
//   trap            PROFINFER_ABLATE=trap: the program returns at once (the uprobe's trap)
//   endbr64-entry   the same with the probe on the function's first instruction, endbr64,
//                   which the kernel single-steps (x86-64; where the recorder probed before)
//   worker          the operator level on a worker thread (ith 1): stamp and record the node
//   thread0         thread 0 (ith 0) in a graph not described before (the identity check)
// The difference from `untraced` is the per-hit cost; times the hits per decode call over
// the call's duration (experiments/handler_cost.sh prints both), the share of decode it takes.
#include <benchmark/benchmark.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "elf_symbols.h"
#include "probe_site.h"
#include "struct_layout.h"
#include "tracer_bpf.skel.h"

using namespace profinfer;

// x86-64 uprobes emulate a push (or a branch) at the trap and single-step any other
// instruction out of line, a debug exception more per hit.
#if defined(__x86_64__)
// As the CET-built release libraries do: endbr64, then the push. The recorder probes the push
// (entry_probe_offset); `endbr64-entry` puts the probe on the endbr64 itself.
extern "C" bool profinfer_bench_node(void* params, void* tensor);
asm(".text\n.globl profinfer_bench_node\n.type profinfer_bench_node, @function\nprofinfer_bench_node:\n"
    "  endbr64\n  push %rbx\n  xor %eax, %eax\n  pop %rbx\n  ret\n.size profinfer_bench_node, .-profinfer_bench_node\n");
#else
extern "C" __attribute__((noinline, used)) bool profinfer_bench_node(void* params, void* tensor) {
    asm volatile("" : : "r"(params), "r"(tensor) : "memory");
    return false;
}
#endif

namespace {

enum Mode { Untraced = 0, Trap = 1, Worker = 2, Thread0 = 3, EndbrEntry = 4 };

struct Probe {
    tracer_bpf* skel = nullptr;
    bpf_link* link = nullptr;
    ring_buffer* rb = nullptr;
    std::atomic<bool> stop{false};
    std::thread drain;

    explicit Probe(Mode mode) {
        skel = tracer_bpf__open();
        if (!skel) return;
        skel->bss->target_tgid = uint32_t(getpid());
        skel->rodata->trace_ops = true;
        skel->rodata->ablate = mode == Trap || mode == EndbrEntry ? PI_ABLATE_TRAP : PI_ABLATE_NONE;
        bpf_map__set_max_entries(skel->maps.events, 64u << 20);
        for (bpf_program* p = bpf_object__next_program(skel->obj, nullptr); p; p = bpf_object__next_program(skel->obj, p))
            bpf_program__set_autoload(p, p == skel->progs.extra_compute_forward);
        if (tracer_bpf__load(skel)) { fail(); return; }
        skel->bss->layout = GgmlLayout::builtin().offsets;
        ElfSymbols self("/proc/self/exe");
        const uint64_t entry = self.file_offset("profinfer_bench_node");
        const uint64_t at = mode == EndbrEntry ? entry
                                               : entry_probe_offset("/proc/self/exe", entry, self.function_size("profinfer_bench_node"),
                                                                    kReadsArg1 | kReadsArg2);
        LIBBPF_OPTS(bpf_uprobe_opts, uo);
        link = bpf_program__attach_uprobe_opts(skel->progs.extra_compute_forward, getpid(), "/proc/self/exe", at, &uo);
        if (!link) { fail(); return; }
        rb = ring_buffer__new(bpf_map__fd(skel->maps.events), [](void*, void*, size_t) { return 0; }, nullptr, nullptr);
        if (!rb) { fail(); return; }
        drain = std::thread([this] {
            while (!stop.load()) ring_buffer__poll(rb, 50);
        });
    }
    void fail() {
        if (link) bpf_link__destroy(link);
        tracer_bpf__destroy(skel);
        skel = nullptr, link = nullptr;
    }
    bool ok() const { return skel && link && rb; }
    ~Probe() {
        stop = true;
        if (drain.joinable()) drain.join();
        if (rb) ring_buffer__free(rb);
        if (link) bpf_link__destroy(link);
        if (skel) tracer_bpf__destroy(skel);
    }
};

void BM_NodeProbeHit(benchmark::State& state) {
    const Mode mode = Mode(state.range(0));
    std::unique_ptr<Probe> probe;
    if (mode != Untraced) {
        probe = std::make_unique<Probe>(mode);
        if (!probe->ok()) {
            state.SkipWithError("cannot load or attach the node program (needs root and uprobes)");
            return;
        }
    }
    // ggml_compute_params {ith, nth, ...} and a tensor: a 1 MiB MUL_MAT-like node.
    struct {
        int32_t ith, nth;
        char rest[56];
    } params{mode == Thread0 ? 0 : 1, 2, {}};
    alignas(64) unsigned char tensor[512] = {};
    const auto& o = GgmlLayout::builtin().offsets;
    const int64_t ne[4] = {2048, 1, 1, 1};
    std::memcpy(tensor + o.tensor_ne, ne, sizeof ne);
    std::strcpy(reinterpret_cast<char*>(tensor + o.tensor_name), "bench-node");
    for (auto _ : state) benchmark::DoNotOptimize(profinfer_bench_node(&params, tensor));
    state.SetLabel(mode == Untraced ? "untraced" : mode == Trap ? "trap" : mode == Worker ? "worker"
                   : mode == Thread0 ? "thread0" : "endbr64-entry");
}
BENCHMARK(BM_NodeProbeHit)->Arg(Untraced)->Arg(Trap)->Arg(Worker)->Arg(Thread0)->Unit(benchmark::kNanosecond);
#if defined(__x86_64__)
BENCHMARK(BM_NodeProbeHit)->Arg(EndbrEntry)->Unit(benchmark::kNanosecond);
#endif

}  // namespace

BENCHMARK_MAIN();
