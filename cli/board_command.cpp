#include <iostream>

#include "profinfer/board.h"
#include "profinfer/error.h"
#include "subcommands.h"

namespace profinfer::cli {

namespace {

// NAME's profile; "host" (or the detected board's own name) is this machine, from what it reports.
BoardProfile profile_named(const std::string& name, const std::string& root) {
    if (name == "host") return host_profile(MachineFacts::read(root));
    return board_profile(name);
}

}  // namespace

void add_board(CLI::App& app, std::function<int()>& action) {
    auto* cmd = app.add_subcommand("board", "Board profiles (boards/profiles) and which one this machine is");
    cmd->require_subcommand(1);
    auto root = std::make_shared<std::string>("/");
    auto json = std::make_shared<bool>(false);
    auto name = std::make_shared<std::string>();

    auto* detect = cmd->add_subcommand(
        "detect", "Print the board this machine is (a profile's name, or host), from /proc/cpuinfo's CPU part ids "
                  "and /proc/device-tree/model; the reason on stderr");
    detect->add_option("--root", *root, "Read proc/cpuinfo, proc/device-tree/model and proc/meminfo under this directory")
        ->capture_default_str();
    detect->callback([&action, root] {
        action = [root] {
            auto m = detect_board(MachineFacts::read(*root), board_profiles());
            std::cout << m.name << "\n";
            std::cerr << "profinfer: " << m.why << "\n";
            return 0;
        };
    });

    auto* show = cmd->add_subcommand("show", "Print a board profile: clusters, pinned CPUs, thread sweep, counters, backends");
    show->add_option("name", *name, "Profile name (host: this machine as it reports itself)")->required();
    show->add_option("--root", *root, "For host: read the machine's facts under this directory")->capture_default_str();
    show->add_flag("--json", *json, "JSON instead of text");
    show->callback([&action, name, root, json] {
        action = [name, root, json] {
            BoardProfile p = profile_named(*name, *root);
            if (*json) return std::cout << p.to_json().dump(2) << "\n", 0;
            std::cout << p.name << ": " << p.description << "\n";
            for (const auto& c : p.clusters)
                std::cout << "  cpus " << cpu_list(c.cpus) << ": " << c.core << (c.part.empty() ? "" : " (part " + c.part + ")") << "\n";
            std::cout << "  inference threads: " << (p.pin_cpus.empty() ? "not pinned" : "pinned to cpus " + cpu_list(p.pin_cpus))
                      << "; thread counts " << cpu_list(p.threads) << "\n";
            for (const auto& c : p.counters)
                std::cout << "  counter " << c.name << " = " << c.event << (c.meaning.empty() ? "" : ": " + c.meaning) << "\n";
            std::cout << "  backends: ";
            for (size_t i = 0; i < p.backends.size(); ++i) std::cout << (i ? ", " : "") << p.backends[i];
            std::cout << (p.backend_notes.empty() ? "" : " (" + p.backend_notes + ")") << "\n";
            return 0;
        };
    });

    auto* list = cmd->add_subcommand("list", "List the board profiles");
    list->callback([&action] {
        action = [] {
            std::cout << "host: this machine, as it reports itself\n";
            for (const auto& p : board_profiles()) std::cout << p.name << ": " << p.description << "\n";
            return 0;
        };
    });
}

}  // namespace profinfer::cli
