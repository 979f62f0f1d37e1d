#pragma once
#include <cstdint>

#include "operator_gate.h"

namespace profinfer {

// --alternate W:detach (the overhead study's paired measure of a level's whole
// cost): the operator probes go in for W traced decode calls, then out for W calls, and so
// on, so that neighbouring windows of one run compare tracing with not tracing. Switches come
// as late as the consumer sees the calls; the calls' own flags (ops_untraced) and the switch
// times (qos_events) say which window each call was in. The consumer runs at normal
// priority, as with every gate (at idle priority it would see the calls only when the
// target leaves a CPU free: at the end of the run), so these windows charge its work at
// normal priority.
class AlternatingGate : public OperatorGate {
public:
    explicit AlternatingGate(int window) : window_(window) {}

    Action on_decode(uint64_t, uint64_t, bool attached, bool ops_traced) override {
        if (attached) {
            if (ops_traced && ++calls_ >= window_) return calls_ = 0, Action::Detach;
        } else if (++calls_ >= window_) {
            return calls_ = 0, Action::Attach;
        }
        return Action::None;
    }
    double tps() const override { return 0; }

private:
    const int window_;
    int calls_ = 0;
};

}  // namespace profinfer
