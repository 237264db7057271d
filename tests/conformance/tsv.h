// A tiny reader for the conformance TSV files: '#' lines are comments, the first other line
// names the columns, every later line is a row. Used by the table-driven test runners.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ein::testing {

/// One data row: column name -> cell text, plus the 1-based line it came from.
struct TsvRow {
  std::map<std::string, std::string> cells;  ///< by column name
  int line = 0;                              ///< 1-based line in the file
  /// The cell of `column`; throws std::out_of_range naming the column when absent.
  const std::string& operator[](const std::string& column) const;
};

/// Reads `path`; throws std::runtime_error when the file cannot be read.
std::vector<TsvRow> read_tsv(const std::string& path);

/// "(2,3);(4,5)" → the shapes; "-" → none (the input_shapes column).
std::vector<std::vector<int64_t>> parse_shapes(const std::string& text);

/// "[[2,-1],[1,5]]" → packed shapes (unpack's ps= keyword).
std::vector<std::vector<int64_t>> parse_ps(const std::string& text);

/// Path of a conformance data file (tests/conformance/data, fixed at configure time).
std::string conformance_file(const std::string& name);

}  // namespace ein::testing
