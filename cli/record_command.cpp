#include "profinfer/board.h"
#include "profinfer/recorder.h"
#include "subcommands.h"

namespace profinfer::cli {

void add_record(CLI::App& app, std::function<int()>& action) {
    auto opts = std::make_shared<RecordOptions>();
    auto level = std::make_shared<std::string>("token");
    auto pid = std::make_shared<int>(0);
    auto* cmd = app.add_subcommand("record", "Record a llama.cpp process into a trace database");
    cmd->footer(
        "Examples:\n"
        "  profinfer record -o run.db -- llama-simple -m model.gguf -n 16 \"Hello\"\n"
        "  profinfer record --pid 1234 -o run.db\n"
        "A launched command is held before exec until the probes are in place, so its first\n"
        "llama_decode is recorded; libraries it loads later (dlopen) are attached when loaded.\n"
        "The database is created readable by its owner only (it may hold other processes' command names).\n"
        "Needs root, or CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN (see docs/reliability.md).");
    cmd->add_option("-o,--output", opts->output, "Trace database to create (must not exist)")->capture_default_str();
    cmd->add_option("--level", *level,
                    "token: llama_decode calls; graph: + backend graphs; op-sampled: + CPU-clock samples of the "
                    "inference threads, named by the operator whose code they interrupted (operator time shares as "
                    "estimates, without a probe per node: about the cost of graph); op: + every graph node on every "
                    "thread; full: + each thread's compute/wait split, scheduler events, counters, MoE expert ids")
        ->capture_default_str();
    auto* pid_opt = cmd->add_option("--pid", *pid, "Attach to this running process instead of launching a command");
    auto peers = std::make_shared<std::string>("comm");
    cmd->add_option("--sched-peers", *peers,
                    "At --level full, what scheduler events keep of other processes' threads that preempt, wake or "
                    "follow the target's: none, comm (the command name only) or full (also pid and tid)")
        ->check(CLI::IsMember({"none", "comm", "full"}))
        ->capture_default_str();
    cmd->add_option("--board", opts->board,
                    "Board profile (profinfer board list) stored with the run; at --level full its counters (the "
                    "paper's Table 3 on rk3588) are read unless --counters says otherwise")
        ->capture_default_str();
    cmd->add_option("--counters", opts->counters,
                    std::string("Counters read per operator: perf names (cycles, cache-misses, major-faults, ...), "
                                "raw codes (r2a) or libpfm4 names; default at --level full: ") + kDefaultCounters);
    cmd->add_option("--qos-min-tps", opts->qos_min_tps,
                    "Detach the operator probes while decode is slower than this many tokens/s; re-attach when the "
                    "untraced speed is 20% above it")
        ->check(number_in(0.001, std::numeric_limits<double>::infinity()));
    cmd->add_option("--budget", opts->budget_pct,
                    "Keep the operator level's cost under PCT % of decode time: operators are traced on windows of "
                    "4 whole decode calls, each begun once the budget earned so far covers what a window costs on "
                    "this run (measured from the calls' durations; the run starts with the operator probes out; "
                    "every call is traced when that fits); the untraced calls are listed in the DB and left out of "
                    "operator figures (--level op or full)")
        ->check(number_in(0.01, 100))
        ->excludes("--qos-min-tps");
    auto memory_limit = std::make_shared<std::string>();
    cmd->add_option("--memory-limit", *memory_limit,
                    "Run the launched command in a memory cgroup of its own with this limit (e.g. 3G): a model "
                    "larger than it pages in from disk as it runs (MoE experts, paper Fig. 13); its page cache counts. "
                    "Needs root and a memory cgroup (v1 or v2); not with --pid")
        ->excludes(pid_opt);
    auto buffer_mb = std::make_shared<size_t>(64);
    auto* mb = cmd->add_option("--buffer-mb", *buffer_mb, "Ring buffer size in MiB (power of two, 1 to 1024)")
                   ->capture_default_str();
    cmd->add_option("--buffer-kb", opts->buffer_kb,
                    "Ring buffer size in KiB (power of two, from the page size): for small boards and loss tests")
        ->excludes(mb);
    auto wait = std::make_shared<std::string>("sampled");
    cmd->add_option("--wait", *wait,
                    "At --level full, how each thread's part of a node is split into compute and wait: sampled "
                    "(CPU-clock samples classified by whether the thread's IP is in barrier code; a statistical split "
                    "with confidence intervals, at a fraction of the cost), exact (a probe on every ggml_barrier call), "
                    "or both (to compare the two on one run)")
        ->check(CLI::IsMember({"sampled", "exact", "both"}))
        ->capture_default_str();
    auto* sample_hz = cmd->add_option("--sample-hz", opts->sample_hz,
                                      "Samples per second and CPU: for --wait sampled (default 250) and for "
                                      "--level op-sampled (default: the kernel's scheduler tick, HZ a second at no cost of its own; a rate "
                                      "given here uses a timer of its own, whose cost profinfer estimate measures)")
                          ->check(CLI::Range(1, 20000));
    auto consumer = std::make_shared<std::string>("auto");
    cmd->add_option("--consumer", *consumer,
                    "How profinfer's own reading and writing share the CPUs with the target: hold (the records "
                    "read at once, held in memory — up to 256 MB — while the CPUs profinfer may run on are busy, "
                    "stored into the trace DB while a quarter of one sits idle, when the hold is full and at the "
                    "end: SQLite's ~1 µs per operator record off a machine the target's threads fill; a recorder "
                    "killed outright loses what it held, counted in lost_events), idle (stored as read, at "
                    "SCHED_IDLE, raised whenever the ring buffer is a sixteenth full or the target waits for it; "
                    "normal priority with --qos-min-tps or --budget), normal (the DB follows the run live, at the "
                    "cost of CPU time the target's threads may need), auto: hold at --level op and full, idle "
                    "otherwise")
        ->check(CLI::IsMember({"auto", "hold", "idle", "normal"}))
        ->capture_default_str();
    cmd->add_flag("-q,--quiet", opts->quiet, "No summary on stderr");
    cmd->add_flag("--stop-with-parent", opts->stop_with_parent,
                  "Stop recording, as on SIGTERM (forwarded to a launched command), when the process that started "
                  "profinfer dies: for harnesses, so that a killed one leaves nothing recording behind it");
    cmd->add_option("--duration", opts->duration_s,
                    "With --pid: stop recording after S seconds and detach; the process goes on untouched (a server "
                    "profiled for a while, not to its end). The trace is complete, with meta duration_s. SIGUSR1 "
                    "ends it the same way before then")
        ->check(number_in(0.001, 31536000))  // a year: nan, negatives and absurd bounds refused in one line
        ->needs(pid_opt);
    cmd->add_option("--max-db-mb", opts->max_db_mb,
                    "Keep the trace under M MB (10^6 bytes) by dropping its oldest llama_decode calls whole, with "
                    "everything recorded before the first call kept (an attach that runs for days); how many were "
                    "dropped is said at the end and in meta calls_dropped")
        ->check(number_in(1, std::numeric_limits<double>::infinity()));
    cmd->add_option("--flush-ms", opts->flush_ms,
                    "Look for records at least every MS ms: a target gone quiet (a server between requests) has its "
                    "last records in the trace within that, not at its next record (one wake-up of the recorder per MS; "
                    "default: only when records arrive)")
        ->check(CLI::Range(1, 3600000));
    cmd->add_option("--defer-mb", opts->defer_mb,
                    "Keep the records in memory, up to M MB, and store them only when that fills or the recording "
                    "ends: the writer's work (about 1 µs per operator record) off the CPUs the target decodes on. A "
                    "recorder killed outright loses what it held, and the trace counts it (lost_events <kind>_not_stored); meta "
                    "defer_mb, deferred_flushes")
        ->check(number_in(1, 65536));
    // Cost measurements, not traces (the overhead studies' ablations): hidden from --help.
    cmd->add_option("--ablate", opts->ablate, "trap, send or attach: what the operator probes leave out (not a trace)")
        ->check(CLI::IsMember({"trap", "send", "attach"}))
        ->group("");
    cmd->add_option("--alternate", opts->alternate, "W or W:detach: windows of W calls recorded and not (not a trace)")
        ->group("");
    cmd->add_option("command", opts->command, "Command to launch (after --)");
    cmd->positionals_at_end();
    cmd->callback([&action, opts, level, pid, pid_opt, peers, buffer_mb, mb, consumer, wait, memory_limit, sample_hz] {
        const bool pid_given = pid_opt->count() > 0;
        if (sample_hz->count() > 0) opts->op_sample_hz = opts->sample_hz, opts->op_sample_on_tick = false;
        if (!memory_limit->empty()) opts->memory_limit = parse_memory_size(*memory_limit);
        opts->idle_consumer = *consumer != "normal";
        opts->wait = parse_wait_method(*wait);
        if (mb->count() > 0) opts->buffer_kb = *buffer_mb << 10;
        action = [opts, level, pid, pid_given, peers, consumer] {
            opts->level = parse_trace_level(*level);
            opts->hold = *consumer == "hold" ||
                         (*consumer == "auto" && (opts->level == TraceLevel::Op || opts->level == TraceLevel::Full));
            // A board's own counters at --level full (an unknown board is refused, listing the
            // known ones); the other levels read counters only when --counters asks.
            if (opts->board != "host") {
                const BoardProfile profile = board_profile(opts->board);
                if (opts->level == TraceLevel::Full && opts->counters.empty()) opts->counters = profile.counter_list();
            }
            opts->sched_peers = parse_sched_peers(*peers);
            if (pid_given) opts->pid = *pid;
            return record(*opts);
        };
    });
}

}  // namespace profinfer::cli
