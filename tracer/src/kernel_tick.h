#pragma once
#include <cstdint>
#include <string>

namespace profinfer {

// The kernel's scheduler tick, where --level op-sampled can take its samples for free (the
// op_tick program on tp_btf/hrtimer_expire_entry, tracer/bpf/wait_sample.bpf.h): the tick's
// hrtimer callback (tick_nohz_handler from 6.9, tick_sched_timer before) from /proc/kallsyms,
// HZ from the kernel's config (/proc/config.gz, else /boot/config-RELEASE), and what the
// program needs of the kernel: the tracepoint's BTF with its two arguments, and the
// bpf_task_pt_regs helper (5.15). Not usable (why_not says why) with any of those missing, or
// with nohz_full= on the command line (a CPU running one task has no tick there).
struct KernelTick {
    uint64_t function = 0;  // the tick's hrtimer callback
    unsigned hz = 0;
    std::string why_not;    // empty when usable
    bool usable() const { return why_not.empty(); }
    static KernelTick find();
};

// CONFIG_HZ in the text of a kernel config ("CONFIG_HZ=250"), 0 when absent.
unsigned config_hz(const std::string& config);
// The address of FUNCTION in the text of /proc/kallsyms, 0 when absent or hidden (all zeros).
uint64_t kallsyms_address(const std::string& kallsyms, const std::string& function);

}  // namespace profinfer
