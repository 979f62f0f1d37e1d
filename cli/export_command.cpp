#include <iostream>

#include "profinfer/gzip_stream.h"
#include "profinfer/output_file.h"
#include "profinfer/pprof.h"
#include "subcommands.h"

namespace profinfer::cli {

void add_export(CLI::App& app, std::function<int()>& action) {
    auto* cmd = app.add_subcommand("export", "A recording in another tool's format (see also `profinfer timeline` for Perfetto)");
    cmd->require_subcommand(1);

    auto db = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>();
    auto* pprof = cmd->add_subcommand(
        "pprof",
        "Operator time as a pprof profile for `go tool pprof`: stacks request > layer > block (attention, ffn, moe, "
        "rest) > operator, values in nanoseconds; a call serving several requests is shared by token count");
    pprof->add_option("db", *db, "Trace database")->required();
    pprof->add_option("-o,--output", *out, "run.pb.gz (gzip-compressed, as pprof writes them) or run.pb")->required();
    pprof->callback([&action, db, out] {
        action = [db, out] {
            store::Database d(*db, store::Database::Mode::ReadOnly);
            warn_if_partial(d);
            OutputFile file(*out, {*db});
            const PprofSummary s =
                write_gzip_if_named(file.stream(), *out, [&](std::ostream& o) { return write_pprof(d, o); });
            file.commit();
            if (s.samples == 0)
                std::cerr << "profinfer: no operator time in " << *db
                          << " (recorded at --level token or graph?): the profile is empty\n";
            std::cerr << "profinfer: " << s.samples << " stacks, " << s.total_ns / 1e6
                      << (s.sampled ? " ms of CPU time estimated from samples (--level op-sampled)" : " ms of operator time");
            if (s.requests) std::cerr << " over " << s.requests << " requests";
            std::cerr << " → " << *out << "\n";
            return 0;
        };
    });
}

}  // namespace profinfer::cli
