// Shared sema bookkeeping for pattern ops: axis registry, dimension binding with einops'
// one-unknown-per-group rule, identifier validation, and error construction with notes.
#include "compiler/sema/axis_table.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include <ein/diagnostic.h>
#include "dsl/pattern_messages.h"
#include <ein/pattern_printer.h>

namespace ein::detail {
namespace {

// einops' identifier rule: a Python identifier not starting or ending with '_'.
bool valid_identifier(std::string_view name) {
  if (name.empty() || name.front() == '_' || name.back() == '_') return false;
  return !std::isdigit(static_cast<unsigned char>(name.front()));
}

// "(h w)", as written: numbers for anonymous axes, names otherwise.
std::string describe_group(const AxisTable& t, const std::vector<int>& ids) {
  std::string out = "(";
  for (size_t i = 0; i < ids.size(); ++i)
    out += (i ? " " : "") + t.axis(ids[i]).name;
  return out + ")";
}

}  // namespace

AxisTable::AxisTable(const Pattern& pattern, const ResolveRequest& request)
    : pattern_(pattern), request_(request) {
  for (const AxisSize& s : request.sizes) {
    if (s.size < 0) throw UserError(messages::given_negative(s.name, s.size));
    given_.push_back({s, false});
  }
}

int AxisTable::find(std::string_view name) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].axis.origin != ElementaryAxis::Origin::anonymous && axes_[i].axis.name == name)
      return static_cast<int>(i);
  return -1;
}

int AxisTable::add(std::string name, ElementaryAxis::Origin origin, SourceRange range,
                   std::optional<int64_t> size) {
  Entry e;
  e.axis = {std::move(name), 0, origin, range};
  e.size = size;
  if (origin == ElementaryAxis::Origin::named) {
    for (Given& g : given_) {
      if (g.size.name != e.axis.name) continue;
      g.used = true;
      e.size = g.size.size;
    }
  }
  axes_.push_back(std::move(e));
  return static_cast<int>(axes_.size()) - 1;
}

bool AxisTable::all_known(const std::vector<int>& ids) const {
  for (int id : ids)
    if (!axes_[id].size) return false;
  return true;
}

void AxisTable::bind_dimension(const std::vector<int>& ids, int64_t length, SourceRange range) {
  const auto record = [&](int id, int64_t size) {
    axes_[id].size = size;
    axes_[id].bind_order = next_order_++;
  };
  if (ids.size() == 1) {  // a lone axis: bind or verify
    const Entry& e = axes_[ids[0]];
    if (!e.size) return record(ids[0], length);
    if (*e.size == length) return;
    if (e.axis.origin == ElementaryAxis::Origin::anonymous)
      fail(*e.size == 1 ? messages::unit_mismatch(length)
                        : messages::anonymous_mismatch(*e.size, length),
           range);
    if (e.bind_order < 0) fail(messages::given_mismatch(e.axis.name, length, *e.size), range);
    fail(messages::length_mismatch(e.axis.name, length, *e.size), range,
         DiagnosticNote{messages::first_appears(e.axis.name, *e.size), pattern_.source,
                        e.axis.range});
  }
  if (ids.empty()) {  // `()` or `(1 1)`
    if (length != 1) fail(messages::unit_mismatch(length), range);
    return;
  }
  int64_t product = 1;
  std::vector<int> unknown;
  std::string known_text;
  for (int id : ids) {
    if (!axes_[id].size) {
      unknown.push_back(id);
      continue;
    }
    product = checked_product(product, *axes_[id].size, range);
    if (axes_[id].axis.origin == ElementaryAxis::Origin::anonymous)
      continue;  // visible in the group
    if (!known_text.empty()) known_text += ", ";
    known_text += fmt::format("{}={}", axes_[id].axis.name, *axes_[id].size);
  }
  const std::string group = describe_group(*this, ids);
  if (unknown.empty()) {
    if (product != length)
      fail(messages::product_mismatch(group, known_text, product, length), range);
    return;
  }
  if (unknown.size() > 1) {
    std::string names;
    for (size_t i = 0; i < unknown.size(); ++i)
      names += (i == 0                    ? ""
                : i + 1 == unknown.size() ? " and "
                                          : ", ") +
               axes_[unknown[i]].axis.name;
    fail(messages::cannot_infer(group, names, length, axes_[unknown[0]].axis.name), range);
  }
  if (product == 0) {
    if (length != 0) fail(messages::product_mismatch(group, known_text, 0, length), range);
    fail(messages::cannot_infer_zero(group, axes_[unknown[0]].axis.name), range);
  }
  if (length % product != 0)
    fail(messages::not_divisible(group, length, known_text, product), range);
  record(unknown[0], length / product);
}

int64_t AxisTable::checked_product(int64_t a, int64_t b, SourceRange range) const {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) fail(messages::size_overflow(), range);
  return out;
}

int64_t AxisTable::group_size(const std::vector<int>& ids, SourceRange range) const {
  int64_t n = 1;
  for (int id : ids)
    n = checked_product(n, *axes_[id].size, range);
  return n;
}

void AxisTable::check_all_given_used() const {
  for (const Given& g : given_)
    if (!g.used)
      fail(messages::given_unused(g.size.name),
           {0, static_cast<uint32_t>(pattern_.source->text().size())});
}

std::string AxisTable::bound_summary() const {
  std::vector<std::string> parts;
  for (const Given& g : given_)
    parts.push_back(fmt::format("{}={} (given)", g.size.name, g.size.size));
  std::vector<const Entry*> bound;
  for (const Entry& e : axes_)
    if (e.bind_order >= 0 && e.axis.origin != ElementaryAxis::Origin::anonymous)
      bound.push_back(&e);
  std::sort(bound.begin(), bound.end(),
            [](auto* a, auto* b) { return a->bind_order < b->bind_order; });
  for (const Entry* e : bound)
    parts.push_back(fmt::format("{}={}", e->axis.name, *e->size));
  return fmt::format("{}", fmt::join(parts, ", "));
}

void AxisTable::fail(std::string message, SourceRange range,
                     std::optional<DiagnosticNote> related) const {
  UserError err(std::move(message), pattern_.source, range);
  if (related) err.note_at(related->text, related->source, related->range);
  std::vector<std::string> shapes;
  for (const Shape& s : request_.shapes)
    shapes.push_back(format_shape(s));
  if (!shapes.empty()) {
    const char* what = request_.list_input           ? "input list of shapes"
                       : request_.shapes.size() == 1 ? "input shape"
                                                     : "input shapes";
    err.note(fmt::format("{}: {}", what, fmt::join(shapes, ", ")));
  }
  const std::string bound = bound_summary();
  if (!bound.empty()) err.note("sizes bound so far: " + bound);
  throw err;
}

std::vector<ElementaryAxis> AxisTable::finish() const {
  std::vector<ElementaryAxis> out;
  out.reserve(axes_.size());
  for (const Entry& e : axes_) {
    out.push_back(e.axis);
    out.back().size = e.size.value_or(0);
  }
  return out;
}

std::vector<int> term_axes(AxisTable& table, const AxisTerm& term,
                           const std::vector<int>& ellipsis_ids) {
  std::vector<int> ids;
  for (const AxisToken& tok : term.tokens) {
    switch (tok.kind) {
      case AxisToken::Kind::named: {
        const int id = table.find(tok.name);
        ids.push_back(id >= 0 ? id : table.add(tok.name, ElementaryAxis::Origin::named, tok.range));
        break;
      }
      case AxisToken::Kind::number:
        if (!tok.is_unit())
          ids.push_back(table.add(std::to_string(tok.value), ElementaryAxis::Origin::anonymous,
                                  tok.range, tok.value));
        break;
      case AxisToken::Kind::ellipsis:
        ids.insert(ids.end(), ellipsis_ids.begin(), ellipsis_ids.end());
        break;
      case AxisToken::Kind::star:
        break;
    }
  }
  return ids;
}

void append_output_term(std::vector<std::vector<int>>& groups, const AxisTerm& term,
                        std::vector<int> ids) {
  if (!term.is_group && term.tokens[0].kind == AxisToken::Kind::ellipsis) {
    for (int id : ids)
      groups.push_back({id});
    return;
  }
  groups.push_back(std::move(ids));
}

std::vector<BoundDim> bind_side(AxisTable& table, const PatternSide& side, const Shape& shape,
                                const std::vector<int>& ellipsis_ids, bool bind) {
  const int ell = ellipsis_term(side);
  const size_t fixed = side.terms.size() - (ell >= 0 ? 1 : 0);
  if (ell >= 0 ? shape.size() < fixed : shape.size() != fixed)
    table.fail(messages::rank_mismatch(fixed, ell >= 0, shape.size(), format_shape(shape)),
               side.range);
  const size_t extra = shape.size() - fixed;
  std::vector<BoundDim> dims;
  size_t dim = 0;
  for (size_t t = 0; t < side.terms.size(); ++t) {
    const AxisTerm& term = side.terms[t];
    if (static_cast<int>(t) != ell) {
      dims.push_back({term_axes(table, term, {}), shape[dim], term.range, false});
      ++dim;
      continue;
    }
    for (size_t j = 0; j < extra; ++j, ++dim) {
      BoundDim d{{}, shape[dim], term.range, true};
      if (ellipsis_ids.empty()) {
        d.ids.push_back(
            table.add("\u2026" + std::to_string(j), ElementaryAxis::Origin::ellipsis, term.range));
      } else {
        const int id = ellipsis_ids[ellipsis_ids.size() - extra + j];
        if (!(shape[dim] == 1 && table.size(id) != 1)) d.ids.push_back(id);
      }
      dims.push_back(std::move(d));
    }
  }
  if (bind) {
    std::vector<BoundDim*> ptrs;
    for (auto& d : dims)
      ptrs.push_back(&d);
    bind_dims(table, std::move(ptrs));
  }
  return dims;
}

void bind_dims(AxisTable& table, std::vector<BoundDim*> dims) {
  std::vector<BoundDim*> groups;
  for (BoundDim* d : dims) {
    if (d->ids.size() == 1 || d->ids.empty())
      table.bind_dimension(d->ids, d->length, d->range);
    else
      groups.push_back(d);
  }
  // A composition can be completed once at most one of its axes is unknown.
  for (bool progress = true; progress && !groups.empty();) {
    progress = false;
    for (auto it = groups.begin(); it != groups.end();) {
      int unknown = 0;
      for (int id : (*it)->ids)
        unknown += table.size(id) ? 0 : 1;
      if (unknown <= 1) {
        table.bind_dimension((*it)->ids, (*it)->length, (*it)->range);
        it = groups.erase(it);
        progress = true;
      } else {
        ++it;
      }
    }
  }
  if (!groups.empty())
    table.bind_dimension(groups.front()->ids, groups.front()->length, groups.front()->range);
}

void check_numel(const AxisTable& table, const Shape& shape, SourceRange range) {
  int64_t n = 1;
  for (int64_t d : shape)
    n = table.checked_product(n, d, range);
}

void fail_at(const Pattern& pattern, std::string message, SourceRange range) {
  throw UserError(std::move(message), pattern.source, range);
}

int ellipsis_term(const PatternSide& side) {
  for (size_t i = 0; i < side.terms.size(); ++i)
    if (!side.terms[i].is_group && side.terms[i].tokens[0].kind == AxisToken::Kind::ellipsis)
      return static_cast<int>(i);
  return -1;
}

bool has_ellipsis(const PatternSide& side) {
  for (const AxisTerm& t : side.terms)
    for (const AxisToken& tok : t.tokens)
      if (tok.kind == AxisToken::Kind::ellipsis) return true;
  return false;
}

void validate_side(const Pattern& pattern, const PatternSide& side, const SideRules& rules) {
  const AxisToken* ellipsis = nullptr;
  const AxisToken* star = nullptr;
  std::vector<const AxisToken*> names;
  for (const AxisTerm& term : side.terms) {
    if (term.is_group && !rules.groups && !(rules.trivial_groups && term.tokens.size() <= 1))
      fail_at(pattern, messages::groups_not_allowed(rules.op), term.range);
    for (const AxisToken& tok : term.tokens) {
      switch (tok.kind) {
        case AxisToken::Kind::ellipsis:
          if (ellipsis) fail_at(pattern, messages::second_ellipsis(), tok.range);
          if (term.is_group && !rules.ellipsis_in_group)
            fail_at(pattern, messages::ellipsis_in_group(rules.op), term.range);
          ellipsis = &tok;
          break;
        case AxisToken::Kind::star:
          if (!rules.star) fail_at(pattern, messages::star_not_allowed(rules.op), tok.range);
          if (star) fail_at(pattern, messages::star_count(), tok.range);
          star = &tok;
          break;
        case AxisToken::Kind::number:
          if (tok.value == 0) fail_at(pattern, messages::anonymous_zero(), tok.range);
          break;
        case AxisToken::Kind::named:
          if (tok.name == "_" && rules.lone_underscore) break;
          if (!valid_identifier(tok.name) && !(tok.name == "_" && rules.underscore_name)) {
            if (tok.name == "_")
              fail_at(pattern, messages::underscore_not_allowed(rules.op), tok.range);
            fail_at(pattern, messages::bad_identifier(tok.name), tok.range);
          }
          if (!rules.duplicates)
            for (const AxisToken* seen : names)
              if (seen->name == tok.name)
                fail_at(pattern, messages::duplicate_axis(tok.name), tok.range);
          names.push_back(&tok);
          break;
      }
    }
  }
  if (rules.star && !star) fail_at(pattern, messages::star_count(), side.range);
}

}  // namespace ein::detail
