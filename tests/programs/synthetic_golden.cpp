// Writes the schema-current golden trace (tests/golden/synthetic-decode.db) without BPF: the
// records the kernel side would send for a short 2-thread decode — 8 llama_decode calls of
// one CPU graph of 64 nodes (MatMul and ADD, 2 layers) — plus scheduler events, a Vulkan
// host event and the recorder's own rows (probes, libraries, counters, losses, meta), all
// through the recorder's own TraceWriter and store::TraceTables. The golden test writes it
// again and compares: a change to the writer or the schema that is not regenerated here
// fails that test.  Usage: synthetic_golden OUT.db
#include <tuple>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "profinfer/events.h"
#include "profinfer/store.h"
#include "profinfer/trace_tables.h"
#include "struct_layout.h"
#include "synthetic_decode.h"
#include "trace_writer.h"

using namespace profinfer;

namespace {

constexpr int kNodes = 64, kSteps = 8, kThreads = 2;

void scheduler_events(TraceWriter& w) {
    // The hog preempts thread 101 once (prev_state 0: runnable), then wakes it.
    auto s = bench::record<pi_switch_event>(PI_EV_SWITCH, 101);
    s.ts_ns = 5000, s.prev_tid = 101, s.prev_tgid = 100, s.next_tid = 555, s.next_tgid = 555, s.prev_state = 0;
    s.preempt = 1;
    std::strcpy(s.prev_comm, "llama-bench");
    std::strcpy(s.next_comm, "hog");
    w.write(&s, sizeof s);
    auto k = bench::record<pi_wakeup_event>(PI_EV_WAKEUP, 101);
    k.ts_ns = 5600, k.waker_tid = 100, k.waker_tgid = 100, k.target_cpu = 1;
    std::strcpy(k.waker_comm, "llama-bench");
    w.write(&k, sizeof k);
    // Three CPU-clock samples of graph 1 (--level op-sampled's records): one in the kernel, one
    // outside the named code with the return address found on its stack.
    for (auto [ts, ip, caller] : {std::tuple<uint64_t, uint64_t, uint64_t>{2000, 0x7f0000001010, 0},
                                  {3000, 0xffffffff81000000, 0},
                                  {4000, 0x7f00ff000100, 0x7f0000001020}}) {
        auto c = bench::record<pi_sample_event>(PI_EV_SAMPLE, 101);
        c.ts_ns = ts, c.ip = ip, c.graph_seq = 1, c.caller = caller;
        w.write(&c, sizeof c);
    }
}

}  // namespace

int main(int argc, char** argv) try {
    if (argc != 2) {
        std::cerr << "usage: synthetic_golden OUT.db\n";
        return 2;
    }
    store::Database db(argv[1], store::Database::Mode::Create);
    store::TraceTables tables(db);
    const GgmlLayout layout = GgmlLayout::builtin();
    using K = store::MetaKey;
    for (auto [k, v] : {std::pair{K::Status, "complete"}, {K::Level, "op"}, {K::Board, "host"},
                        {K::Command, "llama-bench -m synthetic.gguf -t 2 -p 0 -n 8"}, {K::Pid, "100"},
                        {K::Host, "golden"}, {K::Kernel, "Linux golden x86_64"}, {K::Clock, "CLOCK_MONOTONIC"},
                        {K::StructLayout, "synthetic"}, {K::OpStrategy, "synthetic"}})
        tables.set_meta(k, v);
    tables.set_meta(K::EventsVersion, std::to_string(PI_EVENTS_VERSION));
    tables.add(store::ProbeRow{"llama_decode", "/golden/libllama.so", "uprobe", true, ""});
    tables.add(store::ProbeRow{"ggml_vk_build_graph", "/golden/libggml-vulkan.so", "uprobe", false, "not loaded"});
    tables.add(store::LibraryRow{"/golden/libllama.so", "libllama", "00", false});
    tables.add(store::CounterRow{0, "task-clock", 1, 1, true, ""});
    tables.add(store::CodeRangeRow{0x7f0000001000, 0x7f0000001100, "libggml-cpu.so", "ggml_vec_dot_q4_0_q8_0"});
    TraceWriter writer(tables, layout, SchedPeers::Comm);
    bench::SyntheticDecode decode(writer, layout, kNodes, kThreads);
    for (int s = 0; s < kSteps; ++s) decode.step();
    scheduler_events(writer);
    writer.commit();
    tables.begin();
    for (size_t k = 1; k < store::kRecordKinds.size(); ++k) tables.set_lost(store::kRecordKinds[k], 0);
    tables.commit();
    return 0;
} catch (const std::exception& e) {
    std::cerr << "synthetic_golden: " << e.what() << "\n";
    return 1;
}
