#pragma once
#include <algorithm>
#include <cstdint>
#include <deque>
#include <vector>

#include "operator_gate.h"
#include "profinfer/statistics.h"

namespace profinfer {

// Detaches the operator probes while decode runs slower than the requirement and
// re-attaches them once the untraced speed leaves room for their overhead (paper §3.1).
class QosController : public OperatorGate {
public:
    explicit QosController(double min_tps) : min_tps_(min_tps) {}
    // Called with each decode call's duration and end time (CLOCK_MONOTONIC ns) and
    // whether the operator probes are attached; says what to do with them. The speed is
    // the median of the last four calls; after a switch it waits a second and four new
    // calls before it decides again.
    Action on_decode(uint64_t duration_ns, uint64_t now_ns, bool attached, bool = true) override {
        if (min_tps_ <= 0) return Action::None;
        recent_.push_back(duration_ns);
        if (recent_.size() > 4) recent_.pop_front();
        if (recent_.size() < 4 || now_ns - last_switch_ns_ < 1'000'000'000ull) return Action::None;
        tps_ = 1e9 / median_of(std::vector<double>(recent_.begin(), recent_.end()));
        if (attached && tps_ < min_tps_) return switched(now_ns), Action::Detach;
        if (!attached && tps_ >= min_tps_ * kHeadroom) return switched(now_ns), Action::Attach;
        return Action::None;
    }
    double tps() const override { return tps_; }

private:
    static constexpr double kHeadroom = 1.2;  // re-attach only with 20 % to spare
    void switched(uint64_t now) { last_switch_ns_ = now, recent_.clear(); }
    double min_tps_, tps_ = 0;
    std::deque<uint64_t> recent_;
    uint64_t last_switch_ns_ = 0;
};

}  // namespace profinfer
