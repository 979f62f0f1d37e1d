#include "profinfer/vulkan_timings.h"

#include <map>
#include <regex>

namespace profinfer {

std::vector<VulkanOpTiming> parse_vulkan_timings(std::istream& in) {
    // NAME: COUNT x MEAN us = TOTAL us [(… GFLOPS/s)]; NAME itself may hold ": " only in
    // fused names, so the last ": <n> x " splits it.
    static const std::regex line(R"(^(.*): (\d+) x [0-9.eE+-]+ us = ([0-9.eE+-]+) us.*$)");
    // A MatMul's shape, after the fusion's name when the logger timed a fused kernel
    // ("MUL_MAT_ADD MUL_MAT_VEC q4_0 m=64 n=1 k=128": the MatMul and the ADD after it).
    static const std::regex mm(R"(^(?:(\S+) )?(MUL_MAT(?:_VEC|_ID|_ID_VEC)?) (\S+) m=(\d+) n=(\d+) k=(\d+)(.*)$)");
    std::vector<VulkanOpTiming> out;
    std::map<std::string, size_t> at;
    bool in_block = false;
    std::string s;
    while (std::getline(in, s)) {
        if (s == "Vulkan Timings:") {
            in_block = true;
            continue;
        }
        if (s.rfind("Total time:", 0) == 0) in_block = false;
        std::smatch m;
        if (!in_block || !std::regex_match(s, m, line)) continue;
        const std::string name = m[1];
        auto [it, fresh] = at.emplace(name, out.size());
        if (fresh) {
            VulkanOpTiming t;
            t.name = name;
            t.op = name.substr(0, name.find(' '));
            std::smatch x;
            if (std::regex_match(name, x, mm)) {
                t.fused = x[1];
                t.op = x[2];
                t.type = x[3];
                t.m = std::stoll(x[4]);
                t.n = std::stoll(x[5]);
                t.k = std::stoll(x[6]);
                t.batched = x[7].str().find("batch=") != std::string::npos;
            }
            out.push_back(t);
        }
        auto& t = out[it->second];
        t.count += std::stoll(m[2]);
        t.total_us += std::stod(m[3]);
    }
    return out;
}

std::filesystem::path vulkan_timings_file(const std::filesystem::path& db) {
    auto p = db;
    return p.replace_extension(".vulkan-timings.txt");
}

}  // namespace profinfer
