#pragma once
// A table of numbers and strings as the analysis commands print it and the studies write
// and read it back: aligned text, CSV (7 significant digits) or JSON.
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace profinfer {

struct Table {
    std::vector<std::string> columns;
    std::vector<std::vector<nlohmann::json>> rows;  // numbers or strings

    std::string to_text() const;  // aligned columns
    std::string to_csv() const;
    // A Markdown table: the columns as its header, each cell as text (strings as they are,
    // numbers as format_double prints them, null as "–"). Cells meant for a reader are
    // strings already (a median with its interval, a bold verdict).
    std::string to_markdown() const;
    nlohmann::json to_json() const;
    // The table as FORMAT: table (aligned text), csv or json — what --format chooses.
    std::string formatted(const std::string& format) const;  // array of objects keyed by column

    // The inverse of to_csv: a header line, then rows; numbers become numbers, empty cells
    // null. Throws profinfer::Error on a row whose width differs from the header's.
    static Table from_csv(const std::string& text);
    // A CSV file read with from_csv; an error naming the file when it cannot be read.
    static Table read_csv_file(const std::filesystem::path& f);
    // Column index by name; throws profinfer::Error when absent.
    size_t column(const std::string& name) const;
};

// A table cell: the number, or null when it is not finite (no interval, no measure).
nlohmann::json number_or_null(double v);

}  // namespace profinfer
