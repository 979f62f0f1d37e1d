#include <iostream>
#include <optional>
#include <regex>

#include "profinfer/error.h"
#include "profinfer/gzip_stream.h"
#include "profinfer/output_file.h"
#include "profinfer/timeline.h"
#include "subcommands.h"

namespace profinfer::cli {

void add_timeline(CLI::App& app, std::function<int()>& action) {
    auto db = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand("timeline", "ProfTime: the recording as a Chrome trace (open in ui.perfetto.dev)");
    cmd->add_option("db", *db, "Trace database")->required();
    cmd->add_option("-o,--output", *out, "trace.json, or trace.json.gz to write it gzip-compressed (Perfetto opens both)")
        ->required();
    auto calls = std::make_shared<std::string>();
    cmd->add_option("--calls", *calls,
                    "The calls to show: FIRST-LAST or N (call numbers, as stat --by token prints them), or all. Default: "
                    "every call, unless they hold more than " + std::to_string(kTimelineDefaultParts) +
                        " operator parts (a viewer's limit): then the first calls that do, and it says so");
    cmd->callback([&action, db, out, calls] {
        action = [db, out, calls] {
            store::Database d(*db, store::Database::Mode::ReadOnly);  // the run, opened once
            warn_if_partial(d);
            std::optional<CallWindow> window;
            const int64_t n_calls = d.scalar("SELECT count(*) FROM calls");
            if (calls->empty()) {
                window = default_call_window(d);
                if (window && window->last + 1 >= n_calls && window->first == 0) window.reset();  // every call
                if (window)
                    std::cerr << "profinfer: the timeline holds calls " << window->first << "-" << window->last << " of "
                              << n_calls << " (their operator parts fit " << kTimelineDefaultParts
                              << ", what a viewer loads); --calls FIRST-LAST for another window, --calls all for every call\n";
            } else if (*calls != "all") {
                static const std::regex form(R"(([0-9]+)(-([0-9]+))?)");
                std::smatch m;
                if (!std::regex_match(*calls, m, form))
                    throw Error("--calls takes FIRST-LAST, N or all, not '" + *calls + "'");
                window = CallWindow{std::stoll(m[1]), m[3].matched ? std::stoll(m[3]) : std::stoll(m[1])};
                if (window->last < window->first)
                    throw Error("--calls " + *calls + ": the last call comes before the first");
                if (window->first >= n_calls)
                    throw Error("--calls " + *calls + ": the recording has " +
                                (n_calls ? "calls 0-" + std::to_string(n_calls - 1) : std::string("no calls")));
            }
            OutputFile file(*out, {*db});
            const int64_t events =
                write_gzip_if_named(file.stream(), *out, [&](std::ostream& o) { return write_timeline(d, o, window); });
            file.commit();
            std::cerr << "profinfer: " << events << " trace events → " << *out << "\n";
            return 0;
        };
    });
}

}  // namespace profinfer::cli
