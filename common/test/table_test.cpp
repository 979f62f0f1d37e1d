// Table's text forms.
#include <gtest/gtest.h>

#include <cmath>

#include "profinfer/table.h"

using namespace profinfer;

TEST(Table, MarkdownPrintsTextAsItIsNumbersAtThreeDigitsNullAsADash) {
    Table t{{"name", "value", "note"}, {}};
    t.rows.push_back({"**a**", 3.14159, nullptr});
    t.rows.push_back({"b [1, 2]", int64_t(42), "x"});
    EXPECT_EQ(t.to_markdown(), "| name | value | note |\n|---|---|---|\n| **a** | 3.14 | – |\n| b [1, 2] | 42 | x |\n");
    EXPECT_EQ(Table({{"only"}, {}}).to_markdown(), "| only |\n|---|\n");
}

TEST(Table, NumberOrNullKeepsFiniteNumbersOnly) {
    EXPECT_TRUE(number_or_null(NAN).is_null());
    EXPECT_TRUE(number_or_null(INFINITY).is_null());
    EXPECT_EQ(number_or_null(1.5).get<double>(), 1.5);
}
