// profinfer record on the stock Vulkan libraries of the pinned llama.cpp (Mesa's lavapipe
// here): the graph split between the CPU and Vulkan backends, and the Vulkan backend's host
// side per node (dispatch) and per submit and wait.
#include <gtest/gtest.h>

#include "profinfer/llama_install.h"
#include "profinfer/store.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

TEST(RecordVulkan, GraphSplitAndEveryDispatchedNode) {
    PROFINFER_REQUIRE_BPF();
    PROFINFER_REQUIRE_VULKAN();
    const LlamaInstall vk = LlamaInstall::locate("vulkan", true);  // unpacked and set up once
    TempDir d;
    const fs::path db = d / "run.db";
    // Half the tiny model's two layers on Vulkan: each call computes a Vulkan and a CPU graph.
    auto r = run({profinfer_bin(), "record", "--level", "op", "-o", db, "--", vk.program("llama-bench"), "-m",
                  tiny_model("llama3.2-1b"), "-t", "2", "-p", "8", "-n", "4", "-ngl", "1", "-r", "1", "-o", "json"},
                 {{"GGML_VK_VISIBLE_DEVICES", "0"}});
    ASSERT_EQ(r.status, 0) << r.err;
    store::Database s(db, store::Database::Mode::ReadOnly);
    // Both backends' graphs, by name, inside the same calls.
    EXPECT_GT(s.scalar("SELECT count(*) FROM call_graphs WHERE backend = 'VULKAN'"), 0);
    EXPECT_GT(s.scalar("SELECT count(*) FROM call_graphs WHERE backend = 'CPU' AND api = 'backend'"), 0);
    EXPECT_GT(s.scalar("SELECT count(*) FROM calls c WHERE EXISTS (SELECT 1 FROM call_graphs g WHERE g.call = c.call AND "
                       "g.backend = 'VULKAN') AND EXISTS (SELECT 1 FROM call_graphs g WHERE g.call = c.call AND "
                       "g.backend = 'CPU')"),
              0);
    // Every dispatch lies inside a Vulkan graph and names a node recorded for that graph.
    const int64_t dispatches = s.scalar("SELECT count(*) FROM gpu_events WHERE kind = 'dispatch'");
    EXPECT_GT(dispatches, 0);
    EXPECT_EQ(s.scalar("SELECT count(*) FROM gpu_events e JOIN graphs g ON g.seq = e.graph_seq WHERE e.kind = 'dispatch' "
                       "AND g.backend_name = 'VULKAN' AND e.start_ns >= g.start_ns AND e.end_ns <= g.end_ns"),
              dispatches);
    EXPECT_EQ(s.scalar("SELECT count(*) FROM gpu_events e JOIN nodes n ON n.graph_seq = e.graph_seq AND "
                       "n.tensor = e.tensor WHERE e.kind = 'dispatch'"),
              dispatches);
    // The same nodes every decode call: the Vulkan graph's MatMuls are dispatched each time.
    EXPECT_GT(s.scalar("SELECT count(*) FROM gpu_events e JOIN nodes n ON n.graph_seq = e.graph_seq AND "
                       "n.tensor = e.tensor WHERE e.kind = 'dispatch' AND n.op = 'MUL_MAT'"),
              0);
    // The host hands work to the device and waits for it.
    EXPECT_GT(s.scalar("SELECT count(*) FROM gpu_events WHERE kind = 'submit'"), 0);
    EXPECT_GT(s.scalar("SELECT count(*) FROM gpu_events WHERE kind IN ('fence_wait', 'synchronize')"), 0);
    // The CPU part is still recorded per operator and thread.
    EXPECT_GT(s.scalar("SELECT count(*) FROM ops"), 0);
    EXPECT_EQ(s.scalar("SELECT coalesce(sum(count), 0) FROM lost_events"), 0);
}
