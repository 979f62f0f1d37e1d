#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <vector>

#include "operator_gate.h"
#include "profinfer/statistics.h"

namespace profinfer {

// --budget PCT: keeps the operator level's cost on decode under PCT % of decode time by
// tracing operators on windows of a few consecutive decode calls and detaching the
// operator probes between windows (the token and graph probes stay: they cost nothing
// measurable). Accounting, on the run itself, in calls' worth of time:
//   base    median duration of the last 9 untraced calls away from a switch (kept current);
//   credit  grows by the budget with every decode call and shrinks by the excess
//           (d / base - 1) of every call tracing touched: traced calls, the calls a switch
//           falls in, the first kAftermath calls after a window (the recorder catching up)
//           — so windows that last longer than planned (the recorder sees calls late) are
//           paid for by a longer gap. Until base is known a traced call is charged
//           kPriorCost.
// The run starts with the operator probes out and the credit at 0. A window of W traced
// calls begins when the credit covers what a window costs: the larger of what the last
// window really cost (the credit it used up from its attach to the end of its aftermath — the
// recorder catching up on a window's records slows the calls after it too — with the budget
// those calls earned added back; not to the credit's lowest point, which calls that vary by
// several % push down by their noise alone: 3× the true cost at ±8 %) and the planned W c + s:
//   c       median traced call / base - 1 (the operator level's cost per traced call);
//   s       what a window's two switches cost: for each switch (note_switch: when the
//           recorder began and ended attaching or detaching), the excess of the calls that
//           overlap it, median, times two. (The recorder's own wall time would overstate
//           it: closing a uprobe waits ~0.1 s for a grace period the target does not.)
//           Until a switch has been measured it is taken as kPriorSwitchCost: a run too
//           short to repay a window's switches never opens one.
// Two windows are at least kAftermath + 1 untraced calls apart (the base stays current), and
// the credit banks at most two windows' worth (a slow start is not spent in a burst later:
// with both missing, windows ran back to back on banked credit, the base went stale and the
// traced calls were undercharged — 2.6 % under --budget 1 in simulation, 1.2-2.6 % measured).
// When c alone is within the budget — its upper bound (cost_upper), from at least
// kMinForAlways traced and untraced calls, at every window's end over kHistory traced calls —
// it stops switching and traces every call. (On
// the point estimate alone, calls whose time varies by several % from one to the next (two
// decodes sharing a machine's memory) made one window's median look free now and then, and the
// gate latched: --budget 0.5 traced 77 % of the calls and cost 1.2-1.5 %, 2026-12-06.)
class BudgetController : public OperatorGate {
public:
    static constexpr int kWindow = 4;           // traced calls per window
    static constexpr double kPriorCost = 0.10;  // assumed cost per traced call until measured
    // Assumed cost of a window's two switches, in calls, until measured. Attaching and
    // detaching the operator probes rewrites the target's code pages, and a detach takes
    // ~0.3 s during which calls run up to 1.7× slower: measured here 1.0–2.3 calls' worth
    // per window (meta budget_switch_cost_pct, tiny and 1B models).
    static constexpr double kPriorSwitchCost = 2.0;
    static constexpr size_t kHistory = 64;      // calls the cost medians look at
    static constexpr size_t kBaseWindow = 9;    // the last untraced calls base is the median of
    static constexpr int kAftermath = 4;        // calls after a window charged as its own
    static constexpr size_t kMinForAlways = 16;  // traced and untraced calls before c may decide to trace all

    explicit BudgetController(double budget_pct) : budget_(budget_pct / 100.0) {}

    Action on_decode(uint64_t duration_ns, uint64_t end_ns, bool attached, bool ops_traced) override {
        if (budget_ <= 0) return Action::None;
        const uint64_t start_ns = end_ns - duration_ns;
        if (switch_.open && start_ns >= switch_.end_ns) {
            push(switch_excess_, switch_.excess_ns);
            switch_.open = false;
        }
        const bool in_switch = switch_.open && end_ns > switch_.start_ns;
        if (in_switch) {
            if (base_ns_ > 0) switch_.excess_ns += std::max(0.0, double(duration_ns) - base_ns_);
        } else {
            // Medians: a slow first traced call, or a stray hiccup, does not move them.
            push(ops_traced ? traced_ : untraced_, double(duration_ns));
            traced_seen_ += ops_traced;
        }
        ++since_switch_;
        // base follows the run: decode calls slow down as the KV cache grows (a few % per
        // 100 tokens here), and a base a little low would charge that to the budget.
        if (!ops_traced && untraced_.size() >= kBaseWindow)
            base_ns_ = median(std::deque<double>(untraced_.end() - kBaseWindow, untraced_.end()));
        // The calls tracing touched pay their excess: traced calls, the calls a switch falls
        // in, and the first calls after a window (the recorder catching up on its records).
        // The others are untraced calls like any: charging their noise would charge the
        // skew of call times (a median base, slow outliers) to the budget.
        // Credit is banked up to two windows' worth: what a long stretch without windows
        // earned (the first window's prior cost, a slow start) is not spent later in a burst
        // of windows back to back.
        credit_ = std::min(credit_ + budget_, 2 * window_cost() + budget_);
        const bool touched = ops_traced || in_switch || (after_window_ && since_switch_ <= kAftermath);
        if (touched && base_ns_ > 0)
            credit_ -= double(duration_ns) / base_ns_ - 1;
        else if (ops_traced)
            credit_ -= kPriorCost;
        if (window_.open) {
            ++window_.calls;
            if (after_window_ && since_switch_ == kAftermath) window_.at_end = credit_, window_.calls_to_end = window_.calls;
        }
        if (attached) {
            if (ops_traced) ++traced_in_window_;
            if (traced_in_window_ < kWindow || always_) return Action::None;
            update_estimates();
            if (always_) return Action::None;
            after_window_ = true;
            return switched(), Action::Detach;
        }
        // Between two windows, untraced calls that are not the recorder catching up: they
        // keep the base current (windows back to back left it as it was and the traced calls
        // were charged against a stale one).
        if (after_window_ && since_switch_ <= kAftermath) return Action::None;
        if (credit_ < window_cost()) return Action::None;
        if (window_.open) {  // what the last window used, the budget it earned meanwhile included
            // Averaged over the last windows (weight 1/4 each new one): one window's cost, summed
            // over ~10 calls charged against one base, varies by a third of a call at ±8 %, and
            // a single high one would hold the next window back.
            const double used = window_.at_attach - window_.at_end + budget_ * window_.calls_to_end;
            last_window_cost_ = windows_measured_++ ? 0.75 * last_window_cost_ + 0.25 * used : used;
        }
        window_ = {true, credit_, credit_, 0, 0};
        after_window_ = false;
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
    double last_window_cost() const { return last_window_cost_; }  // in calls' worth of time
    // Untraced calls still to come before the next window, as the credit stands.
    int gap() const { return int(std::ceil(std::max(0.0, window_cost() - credit_) / budget_)); }
    bool tracing_every_call() const { return always_; }

private:
    static void push(std::deque<double>& q, double v) {
        q.push_back(v);
        if (q.size() > kHistory) q.pop_front();
    }
    static double median(const std::deque<double>& q) { return median_of(std::vector<double>(q.begin(), q.end())); }
    void switched() { since_switch_ = 0, traced_in_window_ = 0; }
    void update_estimates() {
        if (!untraced_.empty()) {
            base_ns_ = median(untraced_);
            if (!traced_.empty()) cost_ = std::max(0.0, median(traced_) / base_ns_ - 1);
            if (!switch_excess_.empty()) switch_cost_ = 2 * median(switch_excess_) / base_ns_;
            // Within the budget at every window's end over a whole turnover of the traced
            // history (kHistory traced calls since the bound first held): a chance low median
            // of one window's calls does not last that long.
            const bool within = traced_.size() >= kMinForAlways && untraced_.size() >= kMinForAlways && cost_upper() <= budget_;
            if (!within) within_since_ = -1;
            else if (within_since_ < 0) within_since_ = traced_seen_;
            always_ = within && traced_seen_ - within_since_ >= int64_t(kHistory);
        }
    }
    // c's upper bound: each median's standard error from its calls' spread (1.2533 σ / √n,
    // σ = 1.4826 × the median absolute deviation), relative, combined, times 3.5: the bound is
    // checked at every window's end, hundreds of times a run. Simulated (calls ±8 %, c 1.7 %,
    // budgets 0.5 and 1, 10 runs): the point estimate latched in 10 of 10, a one-sided 95 %
    // bound (1.645) in 4, 3.5 in 1, 3.5 held over kHistory traced calls (update_estimates) in
    // none (and in 0-1 of 200 runs per budget and spread).
    double cost_upper() const {
        auto se_rel = [](const std::deque<double>& q) {
            const double m = median(q);
            std::vector<double> dev;
            for (double v : q) dev.push_back(std::abs(v - m));
            return 1.2533 * 1.4826 * median_of(dev) / std::sqrt(double(q.size())) / m;
        };
        const double ratio = median(traced_) / median(untraced_);
        return ratio - 1 + 3.5 * ratio * std::hypot(se_rel(traced_), se_rel(untraced_));
    }
    double window_cost() const { return std::max(kWindow * cost_ + switch_cost_, last_window_cost_); }

    double budget_;
    double base_ns_ = 0, cost_ = kPriorCost, switch_cost_ = kPriorSwitchCost, credit_ = 0, last_window_cost_ = 0;
    struct {
        bool open = false;
        double at_attach = 0, at_end = 0;  // the credit at the attach, at the aftermath's end
        int calls = 0, calls_to_end = 0;
    } window_;
    int since_switch_ = 0, traced_in_window_ = 0, windows_measured_ = 0;
    bool always_ = false, after_window_ = false;
    int64_t traced_seen_ = 0, within_since_ = -1;  // traced calls measured; when the bound began to hold
    std::deque<double> traced_, untraced_, switch_excess_;
    struct {
        uint64_t start_ns = 0, end_ns = 0;
        double excess_ns = 0;
        bool open = false;
    } switch_;
};

}  // namespace profinfer
