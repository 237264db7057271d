// The TSV reader behind the table-driven conformance tests.
#include "tsv.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ein::testing {
namespace {

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, '\t'))
    out.push_back(cell);
  if (!line.empty() && line.back() == '\t') out.emplace_back();
  return out;
}

}  // namespace

const std::string& TsvRow::operator[](const std::string& column) const {
  auto it = cells.find(column);
  if (it == cells.end()) throw std::out_of_range("no column '" + column + "'");
  return it->second;
}

std::vector<TsvRow> read_tsv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<std::string> header;
  std::vector<TsvRow> rows;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    auto cells = split_tabs(line);
    if (header.empty()) {
      header = cells;
      continue;
    }
    TsvRow row;
    row.line = number;
    for (size_t i = 0; i < header.size(); ++i)
      row.cells[header[i]] = i < cells.size() ? cells[i] : "";
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string conformance_file(const std::string& name) {
  return std::string(EIN_CONFORMANCE_DIR) + "/" + name;
}

}  // namespace ein::testing
