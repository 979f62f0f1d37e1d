#include <cctype>
#include <toml++/toml.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "profinfer/error.h"
#include "profinfer/text_file.h"
#include "profinfer/experiment_spec.h"
#include "profinfer/figures.h"
#include "profinfer/stable_random.h"
#include "profinfer/moe_routing.h"

namespace profinfer {

namespace {

// Every parameter a point has, and its value when the spec does not sweep it.
const std::vector<std::pair<std::string, std::string>> kParameters = {
    {"model", "llama3.2-1b"}, {"type", "q4_0"}, {"backend", "cpu"}, {"threads", "2"}, {"ctx", "0"},
    {"prompt", "0"},          {"gen", "32"},    {"fa", "on"},       {"ngl", "0"},      {"reps", "1"},
    {"hog", "none"},          {"ot", "none"},   {"nopo", "0"},      {"mem", "none"},   {"program", "llama-bench"},
    {"tracer", "level"},      {"routing", "zipf:1"}, {"vkperf", "off"}, {"mmap", "on"}, {"clients", "1"}};

// Parameters added after results were recorded: at their default they are left out of a
// point's key, so that the points recorded before keep their identity.
bool left_out_of_key(const std::string& name, const std::string& value) {
    return (name == "hog" && value == "none") || (name == "ot" && value == "none") || (name == "nopo" && value == "0") ||
           (name == "mem" && value == "none") || (name == "program" && value == "llama-bench") ||
           (name == "tracer" && value == "level") || (name == "routing" && value == "zipf:1") ||
           (name == "vkperf" && value == "off") || (name == "mmap" && value == "on") ||
           (name == "clients" && value == "1");
}

std::string as_text(const toml::node& n) {
    if (n.is_boolean()) return *n.value<bool>() ? "on" : "off";
    if (auto s = n.value<std::string>()) return *s;
    if (auto i = n.value<int64_t>()) return std::to_string(*i);
    throw Error("a sweep value must be a string, an integer or a boolean");
}

// A name that stays one file name wherever it is used: no '/', no '..', nothing hidden.
void check_file_name_part(const std::string& v, const std::string& what) {
    bool ok = !v.empty() && v.size() <= 128 && std::isalnum(static_cast<unsigned char>(v[0]));
    for (unsigned char c : v) ok = ok && (std::isalnum(c) || c == '.' || c == '_' || c == '-' || c == '+');
    if (!ok)
        throw Error(what + " '" + v + "' must be letters, digits, '.', '_', '-' or '+', starting with a letter or digit");
}

// The programs a point can run, and the tracers it can run under (docs/experiments.md).
bool known_tracer(const std::string& t) {
    static const std::set<std::string> kTracers = {
        "level", "none", "none-again", "token", "graph", "op-sampled", "op", "full", "full-exact", "op-trap", "op-nosend", "op-defer", "op-idle", "op-vs-bpftrace", "op-sampled-timer", "noprobe", "noprobe-apart", "bpftrace", "watch", "token-attached", "graph-attached", "bpftrace-graph", "none-start-lag",
        "bpftrace-stream", "op-paired", "full-paired", "op-detach-paired", "trap-detach-paired", "full-detach-paired",
        "evalcb", "dump-dot", "ort-profile"};
    if (kTracers.count(t)) return true;
    if (t.rfind("budget-", 0) != 0) return false;
    char* end = nullptr;
    const double pct = std::strtod(t.c_str() + 7, &end);
    return end && *end == 0 && pct > 0 && pct < 100;
}

void check_value(const std::string& name, const std::string& v, const std::string& where) {
    if (name == "program" && v != "llama-bench" && v != "evalcb" && v != "ort" && v != "server" && v != "attach" &&
        v != "duet" && v != "kernel-roof")
        throw Error(where + ": program is llama-bench, evalcb, ort, server, attach, duet or kernel-roof, not '" + v + "'");
    if (name == "clients" && (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) < 1 ||
                              std::stoi(v) > 64))
        throw Error(where + ": clients is the number of concurrent clients (and server slots), 1 to 64, not '" + v + "'");
    if (name == "tracer" && !known_tracer(v))
        throw Error(where + ": tracer '" + v + "' is not one profinfer knows (docs/experiments.md lists them)");
    if (name == "mmap" && v != "on" && v != "off")
        throw Error(where + ": mmap is on (llama-bench maps the model file) or off (`-mmp 0`: the weights read into "
                            "memory that page reclaim cannot take between runs), not '" + v + "'");
    if (name == "vkperf" && v != "on" && v != "off")
        throw Error(where + ": vkperf is on (ggml-vulkan's GGML_VK_PERF_LOGGER: device time per operator) or off, not '" + v + "'");
    // Counts: a whole number in range, refused here rather than by llama.cpp after the runs
    // before it (threads = [0] was accepted).
    // (gen, prompt and ctx may be llama-bench's lists, "16,64": left to it.)
    static const std::map<std::string, std::pair<long, long>> counts = {
        {"threads", {1, 1024}}, {"ngl", {0, 1024}}, {"nopo", {0, 1}}, {"reps", {1, 1000}}};
    if (auto c = counts.find(name); c != counts.end()) {
        const bool digits = !v.empty() && v.size() < 10 && v.find_first_not_of("0123456789") == std::string::npos;
        if (!digits || std::stol(v) < c->second.first || std::stol(v) > c->second.second)
            throw Error(where + ": " + name + " is a whole number from " + std::to_string(c->second.first) + " to " +
                        std::to_string(c->second.second) + ", not '" + v + "'");
    }
    if (name == "routing") {
        try {
            MoeRouting::parse(v);
        } catch (const Error& e) {
            throw Error(where + ": " + e.what());
        }
    }
}

std::map<std::string, std::vector<std::string>> read_sweep(const toml::table* t, const std::string& where) {
    std::map<std::string, std::vector<std::string>> out;
    if (!t) return out;
    for (const auto& [k, v] : *t) {
        const std::string key(k.str());
        bool known = false;
        for (const auto& [name, def] : kParameters) known |= name == key;
        if (!known) {
            std::string names;
            for (const auto& [name, def] : kParameters) names += (names.empty() ? "" : ", ") + name;
            throw Error(where + ": unknown parameter '" + key + "' (parameters: " + names + ")");
        }
        std::vector<std::string> values;
        if (const auto* a = v.as_array()) {
            for (const auto& e : *a) values.push_back(as_text(e));
        } else {
            values.push_back(as_text(v));
        }
        if (values.empty()) throw Error(where + ": parameter '" + key + "' has no values");
        // These become parts of file names (the point's DB, the synthesised model).
        if (key == "model" || key == "type" || key == "backend" || key == "threads")
            for (const auto& v : values) check_file_name_part(v, where + " " + key);
        out[key] = values;
    }
    return out;
}

// A claim's side: parameter → value, every parameter known (a sweep parameter, or for a claim
// on the fitted lines one of a line's: model — "all" for the line pooled over the models —,
// type, backend, threads, batch — "n=1" or "n>1").
std::map<std::string, std::string> read_selector(const toml::node_view<const toml::node>& n, const std::string& where,
                                                 const std::string& on = "") {
    std::map<std::string, std::string> out;
    if (!n) return out;
    const auto* t = n.as_table();
    if (!t) throw Error(where + " is a table of parameter values, e.g. { ctx = 0 }");
    if (!on.empty()) {
        // What a derived sample is named by: a fitted line, or a model's shares.
        const std::set<std::string> keys = on == "fits" ? std::set<std::string>{"model", "type", "backend", "threads", "batch"}
                                                        : std::set<std::string>{"model", "type", "threads"};
        for (const auto& [k, v] : *t) {
            const std::string key(k.str());
            if (!keys.count(key))
                throw Error(where + ": " + (on == "fits" ? "a fitted line has model, type, backend, threads and batch"
                                                         : "a model's shares have model, type and threads") +
                            ", not '" + key + "'");
            out[key] = as_text(v);
        }
        return out;
    }
    for (const auto& [k, v] : read_sweep(t, where))
        if (v.size() == 1)
            out[k] = v.front();
        else
            throw Error(where + ": '" + k + "' takes one value");
    return out;
}

Claim read_claim(const toml::table& t, const std::string& where) {
    Claim c;
    c.says = t["says"].value_or(std::string());
    c.metric = t["metric"].value_or(std::string());
    c.metric_b = t["metric_b"].value_or(std::string());
    if (c.says.empty() || c.metric.empty()) throw Error(where + " needs says and metric");
    c.on = t["on"].value_or(std::string());
    if (!c.on.empty() && c.on != "fits" && c.on != "shares" && c.on != "baseline")
        throw Error(where + ": on is \"fits\" (the fitted lines), \"shares\" (op-sampled's shares against op's), "
                    "\"baseline\" (each point's slowdown against its group's baseline) or absent (the points), not '" +
                    c.on + "'");
    // Against the baseline, a point is named by its parameters as on the points.
    const std::string named_by = c.on == "baseline" ? "" : c.on;
    c.a = read_selector(t["a"], where + " a", named_by);
    c.b = read_selector(t["b"], where + " b", named_by);
    if (auto v = t["value"].value<double>()) c.value = *v;
    const std::string expect = t["expect"].value_or(std::string());
    const std::string other = c.value ? "value" : "b";
    c.over = t["over"].value_or(std::string());
    if (!c.over.empty()) {
        if (!c.value) throw Error(where + ": over (a trend) needs value, the slope it is held against");
        if (!c.b.empty() || t["factor"]) throw Error(where + ": over (a trend) takes a and value, not b or factor");
        if (c.a.count(c.over)) throw Error(where + ": over = \"" + c.over + "\" is the trend's own axis: a cannot fix it");
    }
    if (auto m = t["margin"].value<double>()) {
        if (!(*m > 0)) throw Error(where + ": margin must be a positive number");
        c.margin = *m;
    }
    if (expect == "a ~ " + other || expect == "a - b ~ value") {
        if (!c.margin) throw Error(where + ": expect \"" + expect + "\" needs margin (how far from " + other + " is still the same)");
        c.difference = expect == "a - b ~ value";
        if (c.difference && !c.value) throw Error(where + ": expect \"a - b ~ value\" needs value");
    } else if (c.margin) {
        throw Error(where + ": margin goes with expect \"a ~ " + other + "\" (an equivalence), not with \"" + expect + "\"");
    } else if (expect == "a - b > value" || expect == "a - b < value") {
        if (!c.value) throw Error(where + ": expect \"" + expect + "\" needs value (the difference it is held against)");
        c.difference = true;
        c.expect_greater = expect[6] == '>';
    } else if (expect == "a > " + other) {
        c.expect_greater = true;
    } else if (expect == "a < " + other) {
        c.expect_greater = false;
    } else {
        throw Error(where + ": expect is \"a > " + other + "\", \"a < " + other + "\", \"a ~ " + other + "\" (with margin)" +
                    (c.value ? ", \"a - b > value\", \"a - b < value\" or \"a - b ~ value\"" : "") + ", not '" + expect + "'");
    }
    if (!c.over.empty() && (c.difference || !c.metric_b.empty()))
        throw Error(where + ": over (a trend) is \"a > value\", \"a < value\" or \"a ~ value\" on one metric");
    if ((!c.value || c.difference) && c.a.empty() && c.b.empty() && c.metric_b.empty())
        throw Error(where + ": a and b select the same points: give a, b or metric_b");
    if (t["factor"]) {
        if (c.value && !c.difference) throw Error(where + ": factor goes with b, not with value");
        c.factor = t["factor"].value_or(0.0);
        if (!(c.factor > 0)) throw Error(where + ": factor must be a positive number");
    }
    c.requires_cpus = int(t["requires_cpus"].value_or(int64_t(0)));
    c.requires_pmu = t["requires_pmu"].value_or(false);
    c.not_testable = t["not_testable"].value_or(std::string());
    return c;
}

}  // namespace

std::string Claim::expectation() const {
    std::string f;
    if ((!value || difference) && factor != 1) {
        char b[32];
        std::snprintf(b, sizeof b, " %g ×", factor);
        f = b;
    }
    char m[40] = "";
    if (margin) std::snprintf(m, sizeof m, " ± %g", *margin);
    const std::string op = margin ? "≈" : expect_greater ? ">" : "<";
    if (!over.empty()) return "slope over " + over + " " + op + " value" + m;
    if (difference) return std::string("a −") + f + " b " + op + " value" + m;
    return std::string("a ") + op + f + (value ? " value" : " b") + m;
}

std::string Claim::compared() const { return metric_b.empty() ? metric : metric + " / " + metric_b; }

const std::string& SweepPoint::at(const std::string& name) const {
    auto it = params.find(name);
    if (it == params.end()) throw Error("sweep point has no parameter '" + name + "'");
    return it->second;
}

std::string SweepPoint::key() const {
    std::string k;
    for (const auto& [name, value] : params)
        if (!left_out_of_key(name, value)) k += (k.empty() ? "" : ",") + name + "=" + value;
    return k;
}

std::string SweepPoint::id() const {
    // Readable where it matters, unique through a hash of the whole key.
    const uint64_t fnv = fnv1a(key());  // the same on every machine and build
    char h[17];
    std::snprintf(h, sizeof h, "%016llx", static_cast<unsigned long long>(fnv));
    return at("model") + "-" + at("type") + "-" + at("backend") + "-t" + at("threads") + "-" + std::string(h).substr(0, 8);
}

ExperimentSpec ExperimentSpec::load(const std::filesystem::path& file) {
    toml::table t;
    try {
        t = toml::parse_file(file.string());
    } catch (const toml::parse_error& e) {
        throw Error(toml_error_text(file, e, "malformed experiment spec"));
    } catch (const std::exception&) {
        throw Error("cannot read experiment spec " + file.string());
    }
    ExperimentSpec s;
    s.name = t["name"].value_or(file.stem().string());
    check_file_name_part(s.name, file.string() + ": name");
    s.title = t["title"].value_or(s.name);
    s.paper = t["paper"].value_or(std::string());
    s.level = t["level"].value_or(std::string("op"));
    if (s.level != "none" && s.level != "token" && s.level != "graph" && s.level != "op" && s.level != "full")
        throw Error(file.string() + ": level is none (untraced: the program's own numbers), token, graph, op or full, not '" +
                    s.level + "'");
    s.wait = t["wait"].value_or(std::string());
    if (!s.wait.empty() && (s.level != "full" || (s.wait != "exact" && s.wait != "sampled")))
        throw Error(file.string() + ": wait is exact or sampled, at level full only");
    s.scale = t["scale"].value_or(std::string("full"));
    // [sweep], or [[sweep]]: several sweeps whose points are joined (a study of unlike runs,
    // e.g. llama-bench under each tracer and the peers under theirs).
    if (const auto* arr = t["sweep"].as_array()) {
        int i = 0;
        for (const auto& e : *arr) {
            ++i;
            if (!e.as_table()) throw Error(file.string() + ": [[sweep]] " + std::to_string(i) + " is not a table");
            s.sweeps.push_back(read_sweep(e.as_table(), file.string() + " [[sweep]] " + std::to_string(i)));
        }
    } else {
        s.sweeps.push_back(read_sweep(t["sweep"].as_table(), file.string() + " [sweep]"));
    }
    for (const auto& sw : s.sweeps)
        for (const auto& [k, values] : sw)
            for (const auto& v : values) check_value(k, v, file.string());
    s.quick_sweep = read_sweep(t["quick"].as_table(), file.string() + " [quick]");
    if (const auto* f = t["figure"].as_table()) {
        s.x = (*f)["x"].value_or(std::string());
        s.series = (*f)["series"].value_or(std::string());
        if (const auto* m = (*f)["metrics"].as_array())
            for (const auto& e : *m) s.metrics.push_back(e.value_or(std::string()));
    }
    if (const auto* o = t["outputs"].as_table()) {
        s.dag = (*o)["dag"].value_or(std::string());
        if (!s.dag.empty() && s.dag != "attn" && s.dag != "ffn" && s.dag != "layer")
            throw Error(file.string() + ": [outputs] dag is attn, ffn or layer, not '" + s.dag + "'");
        if (const auto* a = (*o)["stat"].as_array())
            for (const auto& e : *a) s.stats.push_back(e.value_or(std::string()));
        s.timeline = (*o)["timeline"].value_or(false);
        if (const auto* a = (*o)["figures"].as_array()) {
            for (const auto& e : *a) s.figures.push_back(e.value_or(std::string()));
            try {
                check_figure_kinds(s.figures);
            } catch (const Error& e) {
                throw Error(file.string() + ": [outputs] figures: " + e.what());
            }
        }
        s.baseline = read_selector((*o)["baseline"], file.string() + " [outputs] baseline");
        s.fidelity = (*o)["fidelity"].value_or(false);
        s.predicted = (*o)["predicted"].value_or(false);
        s.matmuls = (*o)["matmuls"].value_or(false);
        s.matmul_backends = (*o)["matmul_backends"].value_or(false);
        s.sampled_shares = (*o)["sampled_shares"].value_or(false);
    }
    if (const auto* d = t["duet"].as_table()) {
        s.duet_load = (*d)["load"].value_or(std::string());
        if (s.duet_load != "together" && s.duet_load != "apart" && s.duet_load != "gated")
            throw Error(file.string() + ": [duet] load is together, apart or gated, not '" + s.duet_load + "'");
        const bool duets = std::any_of(s.sweeps.begin(), s.sweeps.end(), [](const auto& sw) {
            const auto p = sw.find("program");
            return p != sw.end() && std::find(p->second.begin(), p->second.end(), "duet") != p->second.end();
        });
        if (!duets) throw Error(file.string() + ": [duet] belongs to a study with program duet");
    }
    s.rounds = int(t["rounds"].value_or(int64_t(5)));
    s.quick_rounds = int(t["quick_rounds"].value_or(int64_t(2)));
    if (s.rounds < 5 || s.quick_rounds < 2)
        throw Error(file.string() + ": rounds must be at least 5 and quick_rounds at least 2 (medians with intervals need them)");
    if (const auto* cl = t["claim"].as_array()) {
        int i = 0;
        for (const auto& e : *cl) {
            ++i;
            if (!e.as_table()) throw Error(file.string() + ": [[claim]] " + std::to_string(i) + " is not a table");
            s.claims.push_back(read_claim(*e.as_table(), file.string() + " [[claim]] " + std::to_string(i)));
        }
    }
    for (const auto& c : s.claims)
        if (c.on == "baseline" && s.baseline.empty())
            throw Error(file.string() + ": a claim on \"baseline\" (\"" + c.says + "\") needs [outputs] baseline");
    if (const auto* n = t["notes"].as_array())
        for (const auto& e : *n) s.notes.push_back(e.value_or(std::string()));
    if (s.x.empty() || s.metrics.empty()) throw Error(file.string() + ": [figure] needs x and metrics");
    // Checked before any run (x = "bogus" failed only once the whole sweep had run).
    if (std::none_of(kParameters.begin(), kParameters.end(), [&](const auto& p) { return p.first == s.x; })) {
        std::string names;
        for (const auto& [name, def] : kParameters) names += (names.empty() ? "" : ", ") + name;
        throw Error(file.string() + ": [figure] x '" + s.x + "' is not a parameter (parameters: " + names + ")");
    }
    return s;
}

bool ExperimentSpec::reads_traces_across_points() const {
    return matmuls || matmul_backends || sampled_shares || std::find(figures.begin(), figures.end(), "threads") != figures.end();
}

std::vector<SweepPoint> ExperimentSpec::points(bool quick) const {
    std::vector<SweepPoint> all;
    std::set<std::string> ids;
    for (const auto& sweep : sweeps) {
        std::vector<std::pair<std::string, std::vector<std::string>>> axes;
        for (const auto& [name, def] : kParameters) {
            std::vector<std::string> values{def};
            if (auto it = sweep.find(name); it != sweep.end()) values = it->second;
            if (quick)
                if (auto it = quick_sweep.find(name); it != quick_sweep.end()) values = it->second;
            axes.push_back({name, values});
        }
        std::vector<SweepPoint> out{SweepPoint{}};
        for (const auto& [name, values] : axes) {
            std::vector<SweepPoint> next;
            for (const auto& p : out)
                for (const auto& v : values) {
                    SweepPoint q = p;
                    q.params[name] = v;
                    next.push_back(q);
                }
            out = std::move(next);
        }
        for (auto& p : out) {
            if (p.params["program"] == "kernel-roof") p.params["model"] = "none";  // a kernel alone: no model (quick's list too)
            if (ids.insert(p.id()).second) all.push_back(std::move(p));
        }
    }
    return all;
}

}  // namespace profinfer
