// DimSymbols (tools/report_symbols.h): one retrace per dim, exponents from size ratios, exact
// rational coefficients in int64 (a formula that would overflow stays a number).
#include "tools/report_symbols.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include <ein/diagnostic.h>
#include "ein/errors.h"

namespace ein::report {
namespace {

__extension__ typedef __int128 Wide;  // exact products of int64 sizes

bool fits(Wide v) { return v <= INT64_MAX && v >= INT64_MIN; }

/// n / d in lowest terms with d > 0; false on overflow.
bool reduce(Wide n, Wide d, Monomial& m) {
  if (d < 0) n = -n, d = -d;
  if (!fits(n) || !fits(d) || d == 0) return false;
  const int64_t g = std::gcd(static_cast<int64_t>(n), static_cast<int64_t>(d));
  m.num = static_cast<int64_t>(n) / (g ? g : 1);
  m.den = static_cast<int64_t>(d) / (g ? g : 1);
  return true;
}

std::string superscript(int e) {
  static constexpr const char* kDigits[] = {"⁰", "¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹"};
  std::string out;
  for (char c : std::to_string(e)) out += kDigits[c - '0'];
  return out;
}

/// The exponent k with after == before · 2^k, if there is one.
std::optional<int> doubling_exponent(int64_t before, int64_t after) {
  if (before <= 0 || after <= 0) return std::nullopt;
  for (int k = 0; k < 62; ++k) {
    const Wide up = static_cast<Wide>(before) << k, down = static_cast<Wide>(after) << k;
    if (up == after) return k;
    if (down == before) return -k;
    if (up > after && down > before) break;
  }
  return std::nullopt;
}

bool same_structure(const Graph& a, const Graph& b) {
  if (a.nodes.size() != b.nodes.size()) return false;
  for (size_t i = 0; i < a.nodes.size(); ++i)
    if (a.nodes[i].op != b.nodes[i].op || a.nodes[i].shape.size() != b.nodes[i].shape.size() ||
        a.nodes[i].inputs != b.nodes[i].inputs)
      return false;
  return true;
}

}  // namespace

bool Monomial::multiply(const Monomial& o) {
  Monomial r;
  if (!reduce(static_cast<Wide>(num) * o.num, static_cast<Wide>(den) * o.den, r)) return false;
  r.exp = exp;
  r.exp.resize(std::max(exp.size(), o.exp.size()), 0);
  for (size_t i = 0; i < o.exp.size(); ++i) r.exp[i] += o.exp[i];
  *this = r;
  return true;
}

DimSymbols::DimSymbols(const Graph& graph, const std::string& file,
                       const std::vector<script::Setting>& sets, const std::string& fn,
                       std::vector<script::DimInfo> dims)
    : graph_(&graph), dims_(std::move(dims)) {
  for (const script::DimInfo& d : dims_) {
    std::vector<script::Setting> doubled;
    for (const script::Setting& s : sets)
      if (s.name != d.name) doubled.push_back(s);
    doubled.push_back({d.name, std::to_string(2 * d.value)});
    std::vector<Shape> shapes;
    try {
      script::LoadOptions load{doubled, 0, {}};
      load.allocate = false;
      auto program = script::Program::load(file, load);
      const Graph g = program->trace(fn, program->example_types(fn));
      if (same_structure(graph, g))
        for (const GraphNode& n : g.nodes) shapes.push_back(n.shape);
    } catch (const UserError&) {
      // A check the doubled size fails (a divisibility, a bound): no formula uses this dim.
    } catch (const RuntimeError&) {
      // A check the doubled size fails (a divisibility, a bound): no formula uses this dim.
    }
    if (shapes.empty()) structural_.push_back(d.name);
    doubled_.push_back(std::move(shapes));
    order_.push_back(order_.size());
  }
}

void DimSymbols::lead_with(const std::vector<int>& nodes) {
  std::vector<size_t> order;
  const auto add = [&](size_t d) {
    if (std::find(order.begin(), order.end(), d) == order.end()) order.push_back(d);
  };
  for (int node : nodes)
    for (size_t a = 0; a < graph_->nodes[node].shape.size(); ++a) {
      const Monomial m = axis(node, static_cast<int>(a));
      for (size_t d = 0; d < m.exp.size(); ++d)
        if (m.exp[d] != 0) add(d);
    }
  for (size_t d = 0; d < dims_.size(); ++d) add(d);
  order_ = order;
}

Monomial DimSymbols::axis(int node, int ax) const {
  const int64_t size = graph_->nodes[node].shape[ax];
  Monomial number{size, 1, std::vector<int>(dims_.size(), 0)};
  Monomial m = number;
  Wide num = size, den = 1;
  for (size_t d = 0; d < dims_.size(); ++d) {
    if (doubled_[d].empty()) continue;
    const std::optional<int> e = doubling_exponent(size, doubled_[d][node][ax]);
    if (!e) return number;
    m.exp[d] = *e;
    for (int k = 0; k < std::abs(*e); ++k) {
      (*e > 0 ? den : num) *= dims_[d].value;
      if (!fits(num) || !fits(den)) return number;
    }
  }
  if (!reduce(num, den, m)) return number;
  return m;
}

std::string DimSymbols::shape(int node) const {
  std::vector<std::string> axes;
  for (size_t a = 0; a < graph_->nodes[node].shape.size(); ++a) axes.push_back(text(axis(node, static_cast<int>(a))));
  return fmt::format("{}", fmt::join(axes, " "));
}

std::string DimSymbols::text(const Monomial& m) const {
  std::vector<std::string> up, down;
  for (size_t d : order_) {
    if (d >= m.exp.size() || m.exp[d] == 0) continue;
    const int e = std::abs(m.exp[d]);
    (m.exp[d] > 0 ? up : down).push_back(dims_[d].name + (e > 1 ? superscript(e) : ""));
  }
  if (m.num != 1 || up.empty()) up.insert(up.begin(), std::to_string(m.num));
  if (m.den != 1) down.insert(down.begin(), std::to_string(m.den));
  std::string out = fmt::format("{}", fmt::join(up, "·"));
  if (down.size() == 1) out += "/" + down[0];
  if (down.size() > 1) out += fmt::format("/({})", fmt::join(down, "·"));
  return out;
}

std::string DimSymbols::sum_text(const std::vector<Monomial>& terms) const {
  std::vector<Monomial> combined;
  for (const Monomial& t : terms) {
    bool merged = false;
    for (Monomial& c : combined)
      if (c.same_dims(t)) {
        Monomial sum = c;
        if (reduce(static_cast<Wide>(c.num) * t.den + static_cast<Wide>(t.num) * c.den,
                   static_cast<Wide>(c.den) * t.den, sum)) {
          c.num = sum.num;
          c.den = sum.den;
          merged = true;
        }
        break;
      }
    if (!merged) combined.push_back(t);
  }
  std::vector<std::string> parts;
  for (const Monomial& c : combined) parts.push_back(text(c));
  return fmt::format("{}", fmt::join(parts, " + "));
}

}  // namespace ein::report
