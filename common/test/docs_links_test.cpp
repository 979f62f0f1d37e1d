// The documentation's relative links lead somewhere: a figure renamed by a study's new point
// ids, a doc moved, and a link in docs/ or a results README points at nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "profinfer/knobs.h"

namespace fs = std::filesystem;
using namespace profinfer;

TEST(DocsLinks, EveryRelativeLinkInTheDocsAndReadmesLeadsToAFile) {
    const fs::path root = compiled_in(CompiledIn::SourceDir);
    std::vector<fs::path> docs{root / "README.md"};
    for (const char* dir : {"docs", "results"})
        for (const auto& e : fs::recursive_directory_iterator(root / dir))
            if (e.is_regular_file() && e.path().extension() == ".md") docs.push_back(e.path());
    const std::regex link(R"(\]\(([^)#\s]+)(#[^)]*)?\))");
    size_t links = 0;
    std::string dead;
    for (const auto& doc : docs) {
        std::ifstream f(doc);
        std::stringstream ss;
        ss << f.rdbuf();
        const std::string text = ss.str();
        for (std::sregex_iterator it(text.begin(), text.end(), link), end; it != end; ++it) {
            const std::string target = (*it)[1];
            if (target.find("://") != std::string::npos || target.rfind("mailto:", 0) == 0) continue;
            ++links;
            if (!fs::exists(doc.parent_path() / target))
                dead += fs::relative(doc, root).string() + " -> " + target + "\n";
        }
    }
    EXPECT_GT(links, 20u) << "the docs were not found under " << root;
    EXPECT_EQ(dead, "") << "links to nothing:\n" << dead;
}
