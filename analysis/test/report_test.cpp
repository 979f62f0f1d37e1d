// The HTML report and its figures, from a full-level recording of the tiny MoE model.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "profinfer/error.h"
#include "profinfer/figures.h"
#include "profinfer/machine_bench.h"
#include "profinfer/plotter.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

TEST(Report, SelfContainedWithFiguresDagAndRoofline) {
    TempDir d;
    fs::copy_file(golden_trace("qwen1.5-moe-a2.7b-full"), d / "moe.db");
    MachineBench m;
    m.cpu = "test machine";
    m.roofs = {{1, 10.0, 50.0}, {2, 15.0, 100.0}};
    std::ofstream(d / "machine.json") << m.to_json().dump();

    auto figs = draw_figures(*open_trace(d / "moe.db"), d / "figs", &m);
    std::set<std::string> ids;
    for (const auto& f : figs) {
        ids.insert(f.id);
        EXPECT_GT(fs::file_size(f.png), 2000u) << f.id;
        EXPECT_GT(fs::file_size(f.svg), 2000u) << f.id;
    }
    // The golden MoE run has scheduler events (latency, Fig. 8), expert records (Fig. 13: per
    // layer, per step, time vs reuse distance) and the major-faults counter (time vs faults).
    EXPECT_EQ(ids, (std::set<std::string>{"timeline", "op_types", "tokens", "threads", "roofline", "experts", "experts-steps",
                                          "experts-reuse", "experts-faults", "latency"}));

    auto r = run({profinfer_bin(), "report", d / "moe.db", "--machine", d / "machine.json", "-o", d / "report.html"});
    ASSERT_EQ(r.status, 0) << r.err;
    std::ifstream f(d / "report.html");
    std::string html((std::istreambuf_iterator<char>(f)), {});
    auto count = [&](const std::string& needle) {
        size_t n = 0;
        for (size_t p = html.find(needle); p != std::string::npos; p = html.find(needle, p + 1)) ++n;
        return n;
    };
    EXPECT_EQ(count("data:image/png;base64,"), ids.size());
    EXPECT_EQ(count("<svg"), 1u);  // the DAG of one block
    EXPECT_GE(count("memory-bound") + count("compute-bound") + count("overhead-dominated"), 3u);
    EXPECT_EQ(count("src=\"http"), 0u);  // nothing fetched from the network
    EXPECT_EQ(count("<script"), 0u);
    EXPECT_NE(html.find("ffn_moe_up"), std::string::npos);
    // A directory of runs works the same way.
    r = run({profinfer_bin(), "report", d.path(), "-o", d / "all.html", "--machine", d / "none.json"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_GT(fs::file_size(d / "all.html"), 10000u);
}

// A caption longer than the figure is broken at its "; " into lines, none lost (a virtual
// board's machine name pushed the end of every caption off the figure).
TEST(Report, ALongCaptionIsBrokenIntoLinesThatFit) {
    TempDir d;
    const std::string head = "4x Cortex-A55 (0xd05) + 4x Cortex-A76 (0xd0b), Xunlong Orange Pi 5 Plus (rk3588)";
    const std::string tail = "n = 2 rounds per point: median and 95 % bootstrap interval (none: too few rounds)";
    const std::string caption = head + "; llama3.2-1b, qwen2.5-1.5b; --level full; " + tail;
    const Figure f = draw_timeline(*open_trace(golden_trace("llama3.2-1b-full")), d.path(), "step", -1, caption);
    const std::string svg = read_file(f.svg);
    EXPECT_NE(svg.find(head), std::string::npos);
    EXPECT_NE(svg.find(tail), std::string::npos);
    EXPECT_EQ(svg.find(caption), std::string::npos) << "drawn on one line";
}

// The lines of a caption (a study's panels draw them too): none longer than the width unless
// one part alone is, broken only at "; ", nothing lost.
TEST(Report, CaptionLinesFitTheirWidthAndKeepEveryPart) {
    const std::string caption = "4x Cortex-A76 (0xd0b), linux,dummy-virt (virt-a76); gemma2-2b, llama3.2-1b, qwen2.5-1.5b; "
                                "level or tracer per point (tracer); n = 2 rounds per point: median and 95 % bootstrap "
                                "interval (none: too few rounds)";
    for (size_t width : {40u, 80u, 150u}) {
        const auto lines = Plotter::caption_lines(caption, width);
        std::string joined;
        for (const auto& l : lines) {
            const bool one_part = l.find("; ") == std::string::npos || l.find("; ") == l.size() - 2;
            EXPECT_TRUE(l.size() <= width || one_part) << width << ": " << l;
            joined += l;
        }
        EXPECT_EQ(joined, caption) << width;
        EXPECT_EQ(lines.size() > 1, caption.size() > width) << width;
    }
    EXPECT_EQ(Plotter::caption_lines("one part longer than the width", 10),
              std::vector<std::string>{"one part longer than the width"});
}

// Paper Fig. 5: one decode step, a row per thread with its operators and its barrier waits;
// the legend names only the classes the step has.
TEST(Report, TimelineOfOneDecodeStep) {
    TempDir d;
    const Figure f = draw_timeline(*open_trace(golden_trace("llama3.2-1b-full")), d.path(), "step", -1, "test caption");
    const std::string svg = read_file(f.svg);
    for (const char* s : {"weight MatMul", "attention (KQ, KQV, flash)", "other operators", "barrier wait", "test caption",
                          "thread (ith)", "time since the call began (ms)"})
        EXPECT_NE(svg.find(s), std::string::npos) << s;
    EXPECT_GT(fs::file_size(f.png), 5000u);
    // A call out of range is an error naming it.
    try {
        draw_timeline(*open_trace(golden_trace("llama3.2-1b-full")), d.path(), "none", 100000);
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("100000"), std::string::npos) << e.what();
    }
}
