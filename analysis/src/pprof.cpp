#include "profinfer/pprof.h"
#include "profinfer/sampled_ops.h"

#include <map>
#include <string>
#include <unordered_map>

#include "profile.pb.h"
#include "profinfer/error.h"

namespace profinfer {

namespace {

namespace pb = perftools::profiles;

// The profile under construction: strings, functions and locations interned (a frame is
// one function at one location; ids start at 1, 0 meaning none).
class Builder {
public:
    // string_table[0] must be ""; every frame is in one mapping, named after what was profiled
    // (pprof otherwise warns that the main binary is unknown).
    Builder() {
        str("");
        auto* m = p.add_mapping();
        m->set_id(1);
        m->set_filename(str("llama.cpp"));
        m->set_has_functions(true);
    }
    int64_t str(const std::string& s) {
        auto [it, fresh] = strings_.try_emplace(s, static_cast<int64_t>(strings_.size()));
        if (fresh) p.add_string_table(s);
        return it->second;
    }
    uint64_t frame(const std::string& name) {
        auto [it, fresh] = frames_.try_emplace(name, frames_.size() + 1);
        if (fresh) {
            auto* f = p.add_function();
            f->set_id(it->second);
            f->set_name(str(name));
            f->set_system_name(f->name());
            auto* loc = p.add_location();
            loc->set_id(it->second);
            loc->set_mapping_id(1);
            loc->add_line()->set_function_id(it->second);
        }
        return it->second;
    }
    void label(pb::Sample* s, const char* key, const std::string& value) {
        auto* l = s->add_label();
        l->set_key(str(key));
        l->set_str(str(value));
    }
    void label(pb::Sample* s, const char* key, int64_t value) {
        auto* l = s->add_label();
        l->set_key(str(key));
        l->set_num(value);
    }
    pb::Profile p;

private:
    std::unordered_map<std::string, int64_t> strings_;
    std::unordered_map<std::string, uint64_t> frames_;
};

}  // namespace

namespace {

// --level op-sampled: no operator was timed; the CPU-clock samples are the profile, each
// function's under its operator (or bucket): value the samples and the CPU time they stand
// for (samples ÷ rate).
PprofSummary write_sampled(store::Database& db, Builder& b, std::ostream& out) {
    for (const auto& [type, unit] : {std::pair{"samples", "count"}, {"cpu_estimate", "nanoseconds"}}) {
        auto* st = b.p.add_sample_type();
        st->set_type(b.str(type));
        st->set_unit(b.str(unit));
    }
    b.p.set_default_sample_type(b.str("cpu_estimate"));
    b.p.add_comment(b.str("profinfer: CPU-clock samples of llama.cpp's graphs in " + db.path().filename().string() +
                          " (--level op-sampled): estimates; stack operator > function"));
    const double hz = sample_hz_of(db);
    PprofSummary sum;
    sum.sampled = true;
    for_each_sampled_function(db, [&](const SampledFunction& f) {
        auto* s = b.p.add_sample();
        s->add_location_id(b.frame(f.function.empty() ? f.library + " (no symbol)" : f.function));
        s->add_location_id(b.frame(f.op));
        const int64_t ns = hz > 0 ? int64_t(double(f.samples) * 1e9 / hz) : 0;
        s->add_value(f.samples);
        s->add_value(ns);
        b.label(s, "op", f.op);
        ++sum.samples;
        sum.total_ns += ns;
    });
    if (hz > 0) b.p.set_period(int64_t(1e9 / hz));
    b.p.set_duration_nanos(db.scalar("SELECT coalesce(max(end_ns) - min(start_ns), 0) FROM calls"));
    if (!b.p.SerializeToOstream(&out) || !out) throw Error("writing the pprof profile failed");
    return sum;
}

}  // namespace

PprofSummary write_pprof(store::Database& db, std::ostream& out) {
    GOOGLE_PROTOBUF_VERIFY_VERSION;
    Builder b;
    // cpu_samples first: whether block_times has a row is known only once a pass over
    // node_times has (a second pass of the view below on every exact trace: 12.7 s of a
    // 1024-token full-level trace's export).
    db.keep_block_times();
    if (has_cpu_samples(db) && !db.scalar("SELECT EXISTS (SELECT 1 FROM block_times)")) return write_sampled(db, b, out);
    auto* st = b.p.add_sample_type();
    st->set_type(b.str("operator_time"));
    st->set_unit(b.str("nanoseconds"));
    b.p.set_default_sample_type(st->type());
    b.p.add_comment(b.str("profinfer: llama.cpp operator time of " + db.path().filename().string() +
                          "; stack request > layer > block > operator"));

    PprofSummary sum;
    // A call's operators go to the requests its batch served by token share (request_calls);
    // a call without sequence ids (llama-bench, llama-simple) wholly to no request.
    store::Statement q(db.handle(),
                       "WITH s AS MATERIALIZED (SELECT call, request, seq, tokens, call_tokens FROM request_calls) "
                       "SELECT s.request, s.seq, b.block_layer, b.block, b.op, b.base, "
                       "       sum(CASE WHEN s.call IS NULL THEN b.dur_ns "
                       "                ELSE b.dur_ns * s.tokens / max(1, s.call_tokens) END) "
                       "FROM block_times b LEFT JOIN s ON s.call = b.call "
                       "GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 3, 4, 5, 6");
    int64_t last_request = -1;
    while (q.step()) {
        const std::string block = q.column_text(3);
        const int64_t value = q.column_int(6);
        if (value <= 0) continue;
        auto* s = b.p.add_sample();
        // pprof stacks run from the leaf to the root.
        s->add_location_id(b.frame(block + ": " + q.column_text(4) + " " + q.column_text(5)));
        s->add_location_id(b.frame(block));
        s->add_location_id(b.frame(q.column_is_null(2) ? "outside the layers"
                                                       : "layer " + std::to_string(q.column_int(2))));
        if (!q.column_is_null(0)) {
            const int64_t request = q.column_int(0);
            s->add_location_id(b.frame("request " + std::to_string(request) + " (sequence " +
                                       std::to_string(q.column_int(1)) + ")"));
            b.label(s, "request", request);
            if (request != last_request) ++sum.requests;
            last_request = request;
        }
        s->add_value(value);
        b.label(s, "block", block);
        if (!q.column_is_null(2)) b.label(s, "layer", q.column_int(2));
        ++sum.samples;
        sum.total_ns += value;
    }
    b.p.set_duration_nanos(db.scalar("SELECT coalesce(max(end_ns) - min(start_ns), 0) FROM calls"));
    if (!b.p.SerializeToOstream(&out) || !out) throw Error("writing the pprof profile failed");
    return sum;
}

}  // namespace profinfer
