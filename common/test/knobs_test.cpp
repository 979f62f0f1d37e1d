// The one table of environment knobs and compiled-in paths (profinfer/knobs.h).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "profinfer/knobs.h"

namespace fs = std::filesystem;
using namespace profinfer;

TEST(Knobs, EachOnceNamedProfinferAndReadFromTheEnvironment) {
    std::set<std::string> names;
    for (const auto& k : knobs()) {
        EXPECT_TRUE(names.insert(k.env).second) << k.env << " twice";
        EXPECT_EQ(std::string(k.env).rfind("PROFINFER_", 0), 0u) << k.env;
        EXPECT_GT(std::string(k.meaning).size(), 10u) << k.env;
    }
    ::setenv("PROFINFER_THREAD_SLOTS", "7", 1);
    EXPECT_EQ(knob(Knob::ThreadSlots).value_or(""), "7");
    ::unsetenv("PROFINFER_THREAD_SLOTS");
    EXPECT_FALSE(knob(Knob::ThreadSlots).has_value());
    const std::string help = knobs_help({{"extra", "/some/where"}});
    for (const auto& k : knobs()) EXPECT_NE(help.find(k.env), std::string::npos) << k.env;
    EXPECT_NE(help.find(compiled_in(CompiledIn::LlamaScript)), std::string::npos);
    EXPECT_NE(help.find("/some/where"), std::string::npos);
    EXPECT_TRUE(fs::exists(fs::path(compiled_in(CompiledIn::SourceDir)) / "scripts" / "llama.sh"));
}

// No code reads a PROFINFER_* variable but through knob(): the table is the whole list.
TEST(Knobs, NoOtherReaderInTheSources) {
    const fs::path src = PROFINFER_SOURCE_DIR;
    for (const char* dir : {"common", "store", "models", "boards", "tracer", "analysis", "experiments", "fit", "cli"}) {
        for (const auto& e : fs::recursive_directory_iterator(src / dir)) {
            const auto ext = e.path().extension();
            if (ext != ".cpp" && ext != ".h" && ext != ".hpp" && ext != ".c") continue;
            if (e.path().parent_path().filename() == "test") continue;  // tests set them
            if (e.path().filename() == "knobs.cpp") continue;
            std::ifstream f(e.path());
            std::stringstream text;
            text << f.rdbuf();
            EXPECT_EQ(text.str().find("getenv(\"PROFINFER_"), std::string::npos) << e.path();
        }
    }
}
