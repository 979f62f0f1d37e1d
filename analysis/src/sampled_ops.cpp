#include "profinfer/sampled_ops.h"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "profinfer/stats.h"

namespace profinfer {

namespace {

std::string demangled(const std::string& name) {
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), std::free);
    return status == 0 && d ? std::string(d.get()) : name;
}

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// ggml_compute_forward_<op>[_<type or variant>...] → <OP>, the op's name as ggml spells it.
std::string op_of_forward(std::string rest) {
    static const char* const suffixes[] = {"_one_chunk", "_non_quantized", "_quantized", "_f32", "_f16", "_bf16", "_q_f32",
                                           "_flt", "_fused", "_back", "_impl", "_thread", "_rows", "_i32", "_q",
                                           "_bytes", "_same_cont", "_to_q", "_to_f32", "_to_f16"};
    for (bool cut = true; cut;) {
        cut = false;
        for (const char* s : suffixes) {
            const std::string suf(s);
            if (rest.size() > suf.size() && rest.compare(rest.size() - suf.size(), suf.size(), suf) == 0 &&
                !(suf == "_rows" && (rest == "get_rows" || rest == "set_rows"))) {
                rest.resize(rest.size() - suf.size());
                cut = true;
            }
        }
    }
    if (rest == "rms_norm_mul") return "RMS_NORM";  // the fused RMS_NORM+MUL: the exact level names it RMS_NORM
    if (rest == "dup") return "CONT";              // CONT and CPY run ggml's dup code
    // The GLU family's dispatch (ggml_compute_forward_glu): its kernels, inlined into it, are
    // named by the recorder from DWARF (GEGLU, SWIGLU...); what is left, or all of it in a
    // library without DWARF, is the family's.
    if (rest == "glu") return "GLU";
    std::transform(rest.begin(), rest.end(), rest.begin(), [](unsigned char c) { return char(std::toupper(c)); });
    return rest;
}

}  // namespace

std::string op_of_sampled_function(const std::string& function, const std::string& library, bool in_kernel,
                                   bool flash_attn) {
    if (in_kernel) return "[kernel]";
    if (library.rfind("libgomp", 0) == 0 || function == "ggml_barrier") return "[barrier wait]";
    if (function.empty()) return "[other]";
    const std::string f = demangled(function);
    // FLASH_ATTN_EXT computes with the f16 helpers (K·Q dot products, V accumulation, Q to
    // f16) that an f16 MUL_MAT without a GEMM kernel uses too: where flash attention runs, they
    // are its (llama3.2-1b q4_0, 1 thread: FLASH_ATTN_EXT 3.9 % by its own function alone
    // against 7.9 % exact; 81 of its samples were in ggml_vec_dot_f16).
    if (flash_attn && (has(f, "vec_dot_f16") || has(f, "vec_mad_f16") || has(f, "vec_scale_f16") ||
                       has(f, "fp32_to_fp16")))
        return "FLASH_ATTN_EXT";
    // The kernels of matrix products (dot products, GEMV/GEMM of repacked weights, tinyBLAS,
    // the quantization of src1 and the chunk counter they share): MUL_MAT (MUL_MAT_ID where
    // the name says so).
    if (has(f, "mul_mat_id")) return "MUL_MAT_ID";
    if (has(f, "flash_attn")) return "FLASH_ATTN_EXT";
    if (has(f, "vec_dot") || has(f, "gemv") || has(f, "gemm") || has(f, "mul_mat") || has(f, "tinyBLAS") ||
        has(f, "llamafile_sgemm") || has(f, "repack") || has(f, "quantize_row_q") || has(f, "quantize_mat") ||
        has(f, "threadpool_chunk") || has(f, "fp32_to_fp16"))
        return "MUL_MAT";
    if (has(f, "soft_max")) return "SOFT_MAX";
    if (has(f, "rope") || has(f, "rotate_pairs")) return "ROPE";
    if (has(f, "swiglu")) return "SWIGLU";
    if (has(f, "geglu")) return "GEGLU";
    const size_t fwd = f.find("ggml_compute_forward_");
    if (fwd != std::string::npos) {
        std::string rest = f.substr(fwd + 21);
        rest = rest.substr(0, rest.find_first_of("(<"));
        return op_of_forward(rest);
    }
    if (f.rfind("ggml_graph_compute", 0) == 0 || f == "ggml_compute_forward" || f == "ggml_cpu_extra_compute_forward" ||
        has(f, "_omp_fn") || f.rfind("GOMP_", 0) == 0 || f.rfind("ggml_is_", 0) == 0 || f.rfind("ggml_nrows", 0) == 0 ||
        f.rfind("ggml_row_size", 0) == 0 || f.rfind("ggml_blck_size", 0) == 0 || f.rfind("ggml_type_size", 0) == 0 ||
        f.rfind("ggml_nbytes", 0) == 0 || f.rfind("ggml_are_same_shape", 0) == 0 || has(f, "get_tensor_traits") ||
        f.rfind("ggml_threadpool", 0) == 0)
        return "[graph loop]";
    return "[other]";
}

bool has_cpu_samples(store::Database& db) { return db.scalar("SELECT EXISTS (SELECT 1 FROM cpu_samples)") != 0; }

void for_each_sampled_function(store::Database& db, const std::function<void(const SampledFunction&)>& f) {
    // Each distinct instruction once: resolved against the function ranges (the greatest lo at
    // or below it, if its range holds it); kernel addresses (negative) as one. A sample outside
    // the named code (libm, libc) is its caller's, where the recorder found one (schema 10).
    store::Statement st(db.handle(),
                        "WITH ips AS (SELECT CASE WHEN ip < 0 THEN -1 ELSE coalesce(caller_ip, ip) END AS ip, count(*) "
                        "AS n FROM cpu_samples "
                        "GROUP BY 1), named AS (SELECT ips.ip < 0 AS kernel, r.library, r.function, ips.n FROM ips "
                        "LEFT JOIN code_ranges r ON r.lo = (SELECT max(lo) FROM code_ranges WHERE lo <= ips.ip) "
                        "AND ips.ip < r.hi) "
                        "SELECT kernel, coalesce(library, ''), coalesce(function, ''), sum(n) FROM named GROUP BY 1, 2, 3");
    std::vector<SampledFunction> rows;
    std::vector<bool> in_kernel;
    bool flash_attn = false;  // flash attention's own code was sampled: the f16 helpers are its
    while (st.step()) {
        rows.push_back({st.column_text(1), st.column_text(2), "", st.column_int(3)});
        in_kernel.push_back(st.column_int(0) != 0);
        flash_attn = flash_attn || rows.back().function.find("flash_attn") != std::string::npos;
    }
    std::set<std::string> glu_kernels;  // the GLU family's kernels the samples name
    for (size_t i = 0; i < rows.size(); ++i) {
        SampledFunction& s = rows[i];
        s.op = op_of_sampled_function(s.function, s.library, in_kernel[i], flash_attn);
        if (in_kernel[i]) s.function = "[kernel]";
        if (s.op.find("GLU") != std::string::npos && s.op != "GLU") glu_kernels.insert(s.op);
    }
    for (SampledFunction& s : rows) {
        // The family's dispatch code is the one GLU kernel's the samples name, if one.
        if (s.op == "GLU" && glu_kernels.size() == 1) s.op = *glu_kernels.begin();
        f(s);
    }
}

double sample_hz_of(store::Database& db) {
    const store::Meta meta = db.meta();
    return meta.has(store::MetaKey::SampleHz) ? double(meta.integer(store::MetaKey::SampleHz)) : 0;
}

Table sampled_op_table(store::Database& db) {
    std::map<std::string, int64_t> by_op;
    int64_t all = 0, named = 0;
    for_each_sampled_function(db, [&](const SampledFunction& s) {
        by_op[s.op] += s.samples;
        all += s.samples;
        if (s.op.front() != '[') named += s.samples;
    });
    const double hz = sample_hz_of(db);
    std::vector<std::pair<std::string, int64_t>> order(by_op.begin(), by_op.end());
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
        return (a.first.front() == '[') != (b.first.front() == '[') ? b.first.front() == '[' : a.second > b.second;
    });
    Table t{{"op", "samples", "share_pct", "op_share_pct", "ci95_lo", "ci95_hi", "est_cpu_ms", "estimate"}, {}};
    for (const auto& [op, n] : order) {
        const bool is_op = op.front() != '[';
        nlohmann::json share = nullptr, lo = nullptr, hi = nullptr;
        if (is_op && named > 0) {
            const auto [l, h] = wilson_interval(n, named);
            share = 100.0 * double(n) / double(named), lo = 100.0 * l, hi = 100.0 * h;
        }
        t.rows.push_back({op, n, 100.0 * double(n) / double(std::max<int64_t>(1, all)), share, lo, hi,
                          hz > 0 ? nlohmann::json(double(n) * 1e3 / hz) : nlohmann::json(nullptr), "sampled"});
    }
    return t;
}

}  // namespace profinfer
