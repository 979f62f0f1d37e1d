#include "kernel_tick.h"
#include "profinfer/probe_cost.h"

#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <ctime>
#include <vector>

#include "elf_symbols.h"
#include "probe_site.h"
#include "profinfer/error.h"
#include "profinfer/output_file.h"
#include "profinfer/store.h"
#include "struct_layout.h"
#include "synthetic_decode.h"
#include "trace_writer.h"
#include "tracer_bpf.skel.h"

// x86-64 uprobes emulate a push (or a branch) at the trap and single-step any other
// instruction out of line, a debug exception more per hit.
#if defined(__x86_64__)
// As the CET-built release libraries do: endbr64, then the push. The recorder probes the push
// (entry_probe_offset); EndbrEntry puts the probe on the endbr64 itself.
extern "C" bool profinfer_bench_node(void* params, void* tensor);
asm(".text\n.globl profinfer_bench_node\n.type profinfer_bench_node, @function\nprofinfer_bench_node:\n"
    "  endbr64\n  push %rbx\n  xor %eax, %eax\n  pop %rbx\n  ret\n.size profinfer_bench_node, .-profinfer_bench_node\n");
// Its twin, never probed: the same call without the hit, in the same loop.
extern "C" bool profinfer_bench_plain(void* params, void* tensor);
asm(".text\n.globl profinfer_bench_plain\n.type profinfer_bench_plain, @function\nprofinfer_bench_plain:\n"
    "  endbr64\n  push %rbx\n  xor %eax, %eax\n  pop %rbx\n  ret\n.size profinfer_bench_plain, .-profinfer_bench_plain\n");
#else
extern "C" __attribute__((noinline, used)) bool profinfer_bench_node(void* params, void* tensor) {
    asm volatile("" : : "r"(params), "r"(tensor) : "memory");
    return false;
}
extern "C" __attribute__((noinline, used)) bool profinfer_bench_plain(void* params, void* tensor) {
    asm volatile("" : : "r"(params), "r"(tensor) : "memory");
    return false;
}
#endif

namespace profinfer {

struct NodeProbeHarness::Impl {
    tracer_bpf* skel = nullptr;
    bpf_link* link = nullptr;
    ring_buffer* rb = nullptr;
    std::atomic<bool> stop{false};
    std::thread drain;
    void fail() {
        if (link) bpf_link__destroy(link);
        tracer_bpf__destroy(skel);
        skel = nullptr, link = nullptr;
    }
};

NodeProbeHarness::NodeProbeHarness(Mode mode) : impl_(std::make_unique<Impl>()) {
    if (mode == Untraced) return;
    Impl& p = *impl_;
    p.skel = tracer_bpf__open();
    if (!p.skel) return;
    p.skel->bss->target_tgid = uint32_t(getpid());
    p.skel->rodata->trace_ops = true;
    p.skel->rodata->ablate = mode == Trap || mode == EndbrEntry ? PI_ABLATE_TRAP : PI_ABLATE_NONE;
    bpf_map__set_max_entries(p.skel->maps.events, 64u << 20);
    for (bpf_program* g = bpf_object__next_program(p.skel->obj, nullptr); g; g = bpf_object__next_program(p.skel->obj, g))
        bpf_program__set_autoload(g, g == p.skel->progs.extra_compute_forward);
    if (tracer_bpf__load(p.skel)) {
        p.fail();
        return;
    }
    p.skel->bss->layout = GgmlLayout::builtin().offsets;
    ElfSymbols self("/proc/self/exe");
    const uint64_t entry = self.file_offset("profinfer_bench_node");
    const uint64_t at = mode == EndbrEntry ? entry
                                           : entry_probe_offset("/proc/self/exe", entry,
                                                                self.function_size("profinfer_bench_node"),
                                                                kReadsArg1 | kReadsArg2);
    LIBBPF_OPTS(bpf_uprobe_opts, uo);
    p.link = bpf_program__attach_uprobe_opts(p.skel->progs.extra_compute_forward, getpid(), "/proc/self/exe", at, &uo);
    if (!p.link) {
        p.fail();
        return;
    }
    p.rb = ring_buffer__new(bpf_map__fd(p.skel->maps.events), [](void*, void*, size_t) { return 0; }, nullptr, nullptr);
    if (!p.rb) {
        p.fail();
        return;
    }
    p.drain = std::thread([&p] {
        while (!p.stop.load()) ring_buffer__poll(p.rb, 50);
    });
}

NodeProbeHarness::~NodeProbeHarness() {
    Impl& p = *impl_;
    p.stop = true;
    if (p.drain.joinable()) p.drain.join();
    if (p.rb) ring_buffer__free(p.rb);
    if (p.link) bpf_link__destroy(p.link);
    if (p.skel) tracer_bpf__destroy(p.skel);
}

bool NodeProbeHarness::ok() const { return !impl_->skel || (impl_->link && impl_->rb); }

bool NodeProbeHarness::call(int ith, bool probed) {
    // ggml_compute_params {ith, nth, ...} and a tensor: a 1 MiB MUL_MAT-like node.
    struct Params {
        int32_t ith, nth;
        char rest[56];
    };
    struct Node {
        alignas(64) unsigned char bytes[512];
    };
    static thread_local Params params{};
    static thread_local Node tensor = [] {
        Node n{};
        const auto& o = GgmlLayout::builtin().offsets;
        const int64_t ne[4] = {2048, 1, 1, 1};
        std::memcpy(n.bytes + o.tensor_ne, ne, sizeof ne);
        std::strcpy(reinterpret_cast<char*>(n.bytes + o.tensor_name), "bench-node");
        return n;
    }();
    params.ith = ith, params.nth = 2;
    return probed ? profinfer_bench_node(&params, tensor.bytes) : profinfer_bench_plain(&params, tensor.bytes);
}

namespace {

using Clock = std::chrono::steady_clock;

// This thread's CPU time in ns: what it ran, whatever else the machine runs (a hit's trap and
// a sample's interrupt are charged to the thread they interrupt).
double thread_cpu_ns() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}

// CPU nanoseconds per call of the bench function: the median of batches over SECONDS.
double ns_per_call(double seconds) {
    std::vector<double> batches;
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < end || batches.size() < 5) {
        constexpr int kCalls = 2000;
        const double t0 = thread_cpu_ns();
        for (int i = 0; i < kCalls; ++i) NodeProbeHarness::call(1);
        batches.push_back((thread_cpu_ns() - t0) / kCalls);
    }
    std::nth_element(batches.begin(), batches.begin() + batches.size() / 2, batches.end());
    return batches[batches.size() / 2];
}

// A node hit as a decode pays it: between two hits a node streams megabytes of weights
// through the caches (~2.5 MB a node in a 1B model), so the trap's kernel path and the
// handler's maps are out of L1 and L2 each time — measured in the duet at ~2.5× the hot
// loop's hit. Each call here follows a read of a buffer twice the L2 cache (it stays in L3:
// streaming from memory instead makes the difference below noise); probed and unprobed twin
// calls alternate in batches, the hit is the median difference (the streaming cancels out).
double cold_hit_ns(double seconds) {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    std::vector<unsigned char> buf(size_t(std::clamp(l2 > 0 ? 2 * l2 : 4l << 20, 1l << 20, 16l << 20)), 1);
    volatile uint64_t sink = 0;
    auto stream = [&] {
        uint64_t sum = 0;
        for (size_t i = 0; i < buf.size(); i += 64) sum += buf[i];
        sink = sink + sum;
    };
    constexpr int kCalls = 16;
    auto batch = [&](bool probed) {
        const double t0 = thread_cpu_ns();
        for (int i = 0; i < kCalls; ++i) stream(), NodeProbeHarness::call(1, probed);
        return thread_cpu_ns() - t0;
    };
    std::vector<double> diffs;
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    for (bool first = true; Clock::now() < end || diffs.size() < 9; first = !first) {
        // Alternating which twin goes first: neither gets the other's warm-up.
        const double a = batch(first), b = batch(!first);
        diffs.push_back((first ? a - b : b - a) / kCalls);
    }
    std::nth_element(diffs.begin(), diffs.begin() + diffs.size() / 2, diffs.end());
    return std::max(0.0, diffs[diffs.size() / 2]);
}

// What the consumer spends storing one record (ring-buffer records turned into rows by the
// recorder's own TraceWriter, committed as the recorder does, into a trace in a private
// temporary directory): decode steps of NODES operator records on one thread.
double record_cost_ns(double seconds, int nodes) {
    PrivateTempDir dir("profinfer-estimate");
    store::Database db(dir.path() / "estimate.db", store::Database::Mode::Create);
    const GgmlLayout& layout = GgmlLayout::builtin();
    store::TraceTables tables(db);
    TraceWriter writer(tables, layout, SchedPeers::Comm);
    bench::SyntheticDecode decode(writer, layout, nodes, 1);
    decode.step();  // the node details, sent once
    writer.commit();
    uint64_t records = 0, steps = 0;
    const double t0 = thread_cpu_ns();
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < end || steps < 8) {
        records += decode.step();
        if (++steps % 4 == 0) writer.commit();
    }
    writer.commit();
    return (thread_cpu_ns() - t0) / double(records);
}

// Spin iterations per CPU second of this thread, the median of 10-ms batches over SECONDS.
double spins_per_s(double seconds) {
    std::vector<double> batches;
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < end || batches.size() < 5) {
        uint64_t n = 0;
        const double t0 = thread_cpu_ns();
        const auto stop = Clock::now() + std::chrono::milliseconds(10);
        while (Clock::now() < stop)
            for (int i = 0; i < 256; ++i) {
                asm volatile("" ::: "memory");
                ++n;
            }
        batches.push_back(double(n) / (thread_cpu_ns() - t0) * 1e9);
    }
    std::nth_element(batches.begin(), batches.begin() + batches.size() / 2, batches.end());
    return batches[batches.size() / 2];
}

// The op-sampled sampler on this thread's CPU at HZ, sending every sample (a CPU graph is
// "running"): what a sample costs the sampled thread.
double sample_cost_ns(double seconds, int hz) {
    cpu_set_t was;
    sched_getaffinity(0, sizeof was, &was);
    const int cpu = sched_getcpu();
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    sched_setaffinity(0, sizeof one, &one);
    struct Restore {
        cpu_set_t set;
        ~Restore() { sched_setaffinity(0, sizeof set, &set); }
    } restore{was};
    tracer_bpf* skel = tracer_bpf__open();
    if (!skel) throw_errno("opening the BPF object");
    struct Destroy {
        tracer_bpf* s;
        bpf_link* l = nullptr;
        ring_buffer* rb = nullptr;
        ~Destroy() {
            if (rb) ring_buffer__free(rb);
            if (l) bpf_link__destroy(l);
            tracer_bpf__destroy(s);
        }
    } destroy{skel};
    skel->bss->target_tgid = uint32_t(getpid());
    bpf_map__set_max_entries(skel->maps.events, 16u << 20);
    for (bpf_program* g = bpf_object__next_program(skel->obj, nullptr); g; g = bpf_object__next_program(skel->obj, g))
        bpf_program__set_autoload(g, g == skel->progs.op_sample);
    if (int err = tracer_bpf__load(skel)) throw Error(std::string("loading the sampler: ") + std::strerror(-err));
    skel->bss->cpu_graph_running = 1;
    destroy.rb = ring_buffer__new(bpf_map__fd(skel->maps.events), [](void*, void*, size_t) { return 0; }, nullptr, nullptr);
    const double off1 = spins_per_s(seconds / 3);
    perf_event_attr a{};
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_CPU_CLOCK;
    a.sample_period = 1000000000ull / unsigned(hz);
    const int fd = int(syscall(SYS_perf_event_open, &a, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) throw_errno("opening a CPU-clock sampler");
    destroy.l = bpf_program__attach_perf_event(skel->progs.op_sample, fd);
    if (!destroy.l) {
        ::close(fd);
        throw_errno("attaching the sampler");
    }
    const double on = spins_per_s(seconds / 3);
    bpf_link__destroy(destroy.l);
    destroy.l = nullptr;
    if (destroy.rb) ring_buffer__consume(destroy.rb);
    const double off2 = spins_per_s(seconds / 3);
    const double off = (off1 + off2) / 2;
    return std::max(0.0, (1 - on / off) / hz * 1e9);
}

}  // namespace

ProbeCosts measure_probe_costs(double seconds) {
    ProbeCosts c;
    const double before = ns_per_call(seconds / 16);
    {
        NodeProbeHarness trap(NodeProbeHarness::Trap);
        if (!trap.ok()) throw Error("cannot attach a uprobe to profinfer itself (root and uprobes needed)");
        c.trap_ns = ns_per_call(seconds / 8);
    }
    {
        NodeProbeHarness worker(NodeProbeHarness::Worker);
        if (!worker.ok()) throw Error("cannot attach the node program to profinfer itself");
        c.node_hit_ns = ns_per_call(seconds / 8);
    }
    {
        NodeProbeHarness worker(NodeProbeHarness::Worker);
        c.cold_hit_ns = cold_hit_ns(seconds / 4);
    }
    const double untraced = std::min(before, ns_per_call(seconds / 16));
    c.trap_ns = std::max(0.0, c.trap_ns - untraced);
    c.node_hit_ns = std::max(0.0, c.node_hit_ns - untraced);
    // A hit with its caches streamed through costs at least the hot loop's hit: the cold
    // estimate is a median of differences between batches that each stream megabytes, and on a
    // busy machine it reads below the hot hit — even 0 (seen in CI: every exact level then
    // predicted 0 %).
    c.cold_hit_ns = std::max(c.cold_hit_ns, c.node_hit_ns);
    c.sample_hz = 10000;
    c.sample_ns = sample_cost_ns(seconds / 4, c.sample_hz);
    c.record_ns = record_cost_ns(seconds / 8, 283);
    if (const KernelTick tick = KernelTick::find(); tick.usable()) c.tick_hz = int(tick.hz);
    return c;
}

}  // namespace profinfer
