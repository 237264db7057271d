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

// "(2,3);(4,5)" → shapes; "-" → none.
std::vector<std::vector<int64_t>> parse_shapes(const std::string& text) {
  std::vector<std::vector<int64_t>> out;
  if (text == "-") return out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find(')', pos);
    std::vector<int64_t> s;
    std::string inner = text.substr(pos + 1, end - pos - 1);
    size_t p = 0;
    while (p < inner.size()) {
      size_t q = inner.find(',', p);
      if (q == std::string::npos) q = inner.size();
      if (q > p) s.push_back(std::stoll(inner.substr(p, q - p)));
      p = q + 1;
    }
    out.push_back(s);
    pos = end + 2;  // skip ");"
  }
  return out;
}

// "[[2,-1],[1,5]]" → packed shapes.
std::vector<std::vector<int64_t>> parse_ps(const std::string& text) {
  std::vector<std::vector<int64_t>> out;
  size_t pos = 1;
  while ((pos = text.find('[', pos)) != std::string::npos) {
    const size_t end = text.find(']', pos);
    std::vector<int64_t> dims;
    std::string inner = text.substr(pos + 1, end - pos - 1);
    size_t p = 0;
    while (p < inner.size()) {
      size_t q = inner.find(',', p);
      if (q == std::string::npos) q = inner.size();
      dims.push_back(std::stoll(inner.substr(p, q - p)));
      p = q + 1;
    }
    out.push_back(dims);
    pos = end + 1;
  }
  return out;
}

}  // namespace ein::testing
