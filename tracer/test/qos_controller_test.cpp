#include "qos_controller.h"

#include <gtest/gtest.h>

using namespace profinfer;
using Action = QosController::Action;

namespace {
// Feeds N decode calls of DURATION_MS each, one after another from *NOW; returns the
// actions taken, applying them to *ATTACHED.
std::vector<Action> feed(QosController& q, int n, double duration_ms, uint64_t* now, bool* attached) {
    std::vector<Action> out;
    for (int i = 0; i < n; ++i) {
        const uint64_t d = uint64_t(duration_ms * 1e6);
        *now += d;
        Action a = q.on_decode(d, *now, *attached);
        if (a != Action::None) out.push_back(a), *attached = a == Action::Attach;
    }
    return out;
}
}  // namespace

TEST(QosController, DetachesBelowAndReattachesOnlyWithHeadroom) {
    QosController q(100.0);  // 100 tokens/s required
    uint64_t now = 2'000'000'000;
    bool attached = true;
    EXPECT_TRUE(feed(q, 50, 5.0, &now, &attached).empty());  // 200 t/s: fine
    EXPECT_EQ(feed(q, 50, 20.0, &now, &attached), std::vector<Action>{Action::Detach});  // 50 t/s
    EXPECT_FALSE(attached);
    // Decided when the last four calls were 5, 5, 20, 20 ms: their median 12.5 ms, 80 t/s.
    EXPECT_NEAR(q.tps(), 80.0, 1e-9);
    // 110 t/s is above the requirement but within the 20 % headroom: stays detached.
    EXPECT_TRUE(feed(q, 500, 1000.0 / 110, &now, &attached).empty());
    // 125 t/s leaves room: re-attached once.
    EXPECT_EQ(feed(q, 500, 8.0, &now, &attached), std::vector<Action>{Action::Attach});
    EXPECT_TRUE(attached);
}

TEST(QosController, WaitsASecondAndFourCallsAfterASwitch) {
    QosController q(100.0);
    uint64_t now = 2'000'000'000;
    bool attached = true;
    ASSERT_EQ(feed(q, 4, 20.0, &now, &attached), std::vector<Action>{Action::Detach});
    // Fast calls right after: no decision within the second that follows the switch.
    EXPECT_TRUE(feed(q, 100, 1.0, &now, &attached).empty());  // 100 ms in all
    EXPECT_EQ(feed(q, 1000, 1.0, &now, &attached), std::vector<Action>{Action::Attach});
}

TEST(QosController, OffWithoutARequirement) {
    QosController q(0);
    uint64_t now = 0;
    bool attached = true;
    EXPECT_TRUE(feed(q, 1000, 1000.0, &now, &attached).empty());
}
