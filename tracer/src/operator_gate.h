#pragma once
#include <cstdint>

namespace profinfer {

// Switches the operator probes on and off between llama_decode calls: the QoS controller
// (--qos-min-tps) and the overhead budget (--budget). The consumer hands it every decode
// call as it is recorded; the recorder applies what it says and logs it in qos_events.
class OperatorGate {
public:
    enum class Action { None, Detach, Attach };
    virtual ~OperatorGate() = default;
    // A decode call (one token) ended at END_NS after DURATION_NS. ATTACHED: the operator
    // probes are in now; OPS_TRACED: this call's operators were recorded from its start to
    // its end (not a call the probes were switched off for, or switched during).
    virtual Action on_decode(uint64_t duration_ns, uint64_t end_ns, bool attached, bool ops_traced) = 0;
    // What qos_events.tokens_per_s records at a switch.
    virtual double tps() const = 0;
};

}  // namespace profinfer
