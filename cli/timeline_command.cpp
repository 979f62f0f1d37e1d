#include <iostream>

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
    cmd->callback([&action, db, out] {
        action = [db, out] {
            store::Database d(*db, store::Database::Mode::ReadOnly);  // the run, opened once
            warn_if_partial(d);
            OutputFile file(*out, {*db});
            const int64_t events =
                write_gzip_if_named(file.stream(), *out, [&](std::ostream& o) { return write_timeline(d, o); });
            file.commit();
            std::cerr << "profinfer: " << events << " trace events → " << *out << "\n";
            return 0;
        };
    });
}

}  // namespace profinfer::cli
