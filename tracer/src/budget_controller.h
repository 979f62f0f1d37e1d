#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <vector>

#include "operator_gate.h"

namespace profinfer {

// --budget PCT: keeps the operator level's cost on decode under PCT % of decode time by
// tracing operators on windows of a few consecutive decode calls and detaching the
// operator probes between windows (the token and graph probes stay: they cost nothing
// measurable). The cost is measured on the run itself, from the calls' durations:
//   base    median duration of untraced calls away from a switch;
//   c       median traced call / base - 1 (the operator level's cost per traced call);
//   s       what switching costs per window, in calls: for each switch (note_switch: when
//           the recorder began and ended attaching or detaching), the time the calls that
//           overlap it took beyond base, / base; twice the median (attach and detach).
//           The recorder's own wall time would overstate it: closing a uprobe waits ~0.1 s
//           for a grace period the target does not wait for.
// A period of P calls traces W of them and costs (W c + s) / P of decode time, so the gap
// after each window is P - W with P = (W c + s) / budget. Until the run has shown its own
// cost the controller assumes c = kPriorCost (conservative). When c alone is within the
// budget it stops switching and traces every call.
class BudgetController : public OperatorGate {
public:
    static constexpr int kWindow = 4;           // traced calls per window
    static constexpr double kPriorCost = 0.10;  // assumed cost per traced call until measured
    static constexpr size_t kHistory = 64;      // calls each median looks at

    explicit BudgetController(double budget_pct) : budget_(budget_pct / 100.0) {}

    Action on_decode(uint64_t duration_ns, uint64_t end_ns, bool attached, bool ops_traced) override {
        if (budget_ <= 0) return Action::None;
        const uint64_t start_ns = end_ns - duration_ns;
        if (switch_.open && start_ns >= switch_.end_ns) {
            push(switch_excess_, switch_.excess_ns);
            switch_.open = false;
        }
        if (switch_.open && end_ns > switch_.start_ns) {
            if (base_ns_ > 0) switch_.excess_ns += std::max(0.0, double(duration_ns) - base_ns_);
        } else {
            // Medians: a slow first traced call, or a stray hiccup, does not move them.
            push(ops_traced ? traced_ : untraced_, double(duration_ns));
        }
        ++since_switch_;
        if (attached) {
            if (ops_traced) ++traced_in_window_;
            if (traced_in_window_ < kWindow || always_) return Action::None;
            update_estimates();
            if (always_) return Action::None;
            return switched(), Action::Detach;
        }
        if (since_switch_ < gap_) return Action::None;
        return switched(), Action::Attach;
    }

    // The recorder attached or detached the probes from START_NS to END_NS (CLOCK_MONOTONIC,
    // the clock of the calls' times).
    void note_switch(uint64_t start_ns, uint64_t end_ns) {
        if (switch_.open) push(switch_excess_, switch_.excess_ns);
        switch_ = {start_ns, end_ns, 0.0, true};
    }

    double tps() const override { return base_ns_ > 0 ? 1e9 / base_ns_ : 0; }
    double cost() const { return cost_; }               // c, a fraction (prior until measured)
    double switch_cost() const { return switch_cost_; }  // s, in calls' worth of time
    int gap() const { return gap_; }
    bool tracing_every_call() const { return always_; }

private:
    static void push(std::deque<double>& q, double v) {
        q.push_back(v);
        if (q.size() > kHistory) q.pop_front();
    }
    static double median(const std::deque<double>& q) {
        std::vector<double> v(q.begin(), q.end());
        std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
        return v[v.size() / 2];
    }
    void switched() { since_switch_ = 0, traced_in_window_ = 0; }
    void update_estimates() {
        if (!untraced_.empty()) {
            base_ns_ = median(untraced_);
            if (!traced_.empty()) cost_ = std::max(0.0, median(traced_) / base_ns_ - 1);
            if (!switch_excess_.empty()) switch_cost_ = 2 * median(switch_excess_) / base_ns_;
            always_ = cost_ <= budget_;
        }
        const double period = (kWindow * cost_ + switch_cost_) / budget_;
        gap_ = std::max(1, int(std::ceil(period)) - kWindow);
    }

    double budget_;
    double base_ns_ = 0, cost_ = kPriorCost, switch_cost_ = 0;
    int gap_ = 1, since_switch_ = 0, traced_in_window_ = 0;
    bool always_ = false;
    std::deque<double> traced_, untraced_, switch_excess_;
    struct {
        uint64_t start_ns = 0, end_ns = 0;
        double excess_ns = 0;
        bool open = false;
    } switch_;
};

}  // namespace profinfer
