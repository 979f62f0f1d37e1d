#include "kernel_tick.h"
#include "kernel_btf.h"

#include <bpf/btf.h>
#include <sys/utsname.h>
#include <zlib.h>

#include <fstream>
#include <sstream>


namespace profinfer {

namespace {

std::string read_text(const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

std::string read_gzip(const std::string& path) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f) return "";
    std::string out;
    char buf[1 << 15];
    int n;
    while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
    gzclose(f);
    return out;
}

bool kernel_has_function(const char* name) {
    struct btf* vmlinux = btf__load_vmlinux_btf();
    if (!vmlinux) return false;
    const bool found = btf__find_by_name_kind(vmlinux, name, BTF_KIND_FUNC) > 0;
    btf__free(vmlinux);
    return found;
}

}  // namespace

unsigned config_hz(const std::string& config) {
    std::istringstream in(config);
    for (std::string line; std::getline(in, line);)
        if (line.rfind("CONFIG_HZ=", 0) == 0) return unsigned(std::stoul(line.substr(10)));
    return 0;
}

uint64_t kallsyms_address(const std::string& kallsyms, const std::string& function) {
    std::istringstream in(kallsyms);
    std::string addr, type, name;
    for (std::string line; std::getline(in, line);) {
        std::istringstream l(line);
        if (l >> addr >> type >> name && name == function) return std::stoull(addr, nullptr, 16);
    }
    return 0;
}

KernelTick KernelTick::find() {
    KernelTick t;
    utsname u{};
    uname(&u);
    std::string config = read_gzip("/proc/config.gz");
    if (config.empty()) config = read_text(std::string("/boot/config-") + u.release);
    t.hz = config_hz(config);
    const std::string kallsyms = read_text("/proc/kallsyms");
    for (const char* f : {"tick_nohz_handler", "tick_sched_timer"})
        if (!t.function) t.function = kallsyms_address(kallsyms, f);
    if (t.hz == 0)
        t.why_not = "the kernel's HZ is unknown (no /proc/config.gz or /boot/config-" + std::string(u.release) + ")";
    else if (t.function == 0)
        t.why_not = "no tick_nohz_handler or tick_sched_timer address in /proc/kallsyms";
    else if (read_text("/proc/cmdline").find("nohz_full=") != std::string::npos)
        t.why_not = "nohz_full= stops the tick on a CPU running one task";
    else if (tracepoint_arg_count("hrtimer_expire_entry") != 2)
        t.why_not = "the kernel's BTF has no hrtimer_expire_entry(hrtimer, now) tracepoint";
    else if (!kernel_has_function("bpf_task_pt_regs"))
        t.why_not = "the kernel has no bpf_task_pt_regs (5.15)";
    return t;
}

}  // namespace profinfer
