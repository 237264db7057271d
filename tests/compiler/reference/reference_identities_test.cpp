// Every row of einops_identities.tsv, evaluated on random values: both columns are small
// Python expressions (einops calls, numpy methods and functions), read by a tiny evaluator
// here; the einops side runs on the reference interpreter, the numpy side on numpy_subset.
// A row whose form the evaluator cannot read fails the test unless it is in kSkipped.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "conformance/tsv.h"
#include <ein/pattern_cache.h>
#include "compiler/reference/reference.h"
#include "compiler/reference/numpy_subset.h"

namespace ein::testing {
namespace {

using reference::Array;

/// Rows whose text is prose, not an expression: the expression it stands for, and why.
const std::map<std::string, std::string> kRewritten{
    // "y[j,k,i] == x[i,j,k]" is the claim itself; the equivalent column states it as numpy.
    {"rearrange(x, 'a b c -> b c a')[2,3,1]... i.e. y[j,k,i]==x[i,j,k]",
     "rearrange(x, 'a b c -> b c a')"},
    // einops' check_reversion passes the same axis lengths to both calls; the row abbreviates
    // them to the inner call, and (c copy a b) cannot be split without them.
    {"reduce(repeat(x, 'a b c -> (c copy a b)', {'copy': 2, 'a': 2, 'b': 3, 'c': 5}), "
     "' (c copy a b)->a b c ', 'min' or 'max')",
     "reduce(repeat(x, 'a b c -> (c copy a b)', {'copy': 2, 'a': 2, 'b': 3, 'c': 5}), "
     "' (c copy a b)->a b c ', 'min' or 'max', copy=2, a=2, b=3, c=5)"},
};

/// Rows left out on purpose, by einops expression, with the reason. Empty: every row runs.
const std::map<std::string, std::string> kSkipped{};

/// A Python value: an array, a number, a string, a list/tuple, a dict, `...`, None, or a
/// function (with its bound `self` in items[0] for methods).
struct Value {
  enum class Kind { array, number, text, list, dict, ellipsis, none, function };
  Kind kind = Kind::none;
  Array array;
  double number = 0;
  std::string text;               // the string, or the function's name
  std::vector<Value> items;       // list/tuple items; dict values; a method's self
  std::vector<std::string> keys;  // dict keys
};

Value make(Value::Kind kind) {
  Value v;
  v.kind = kind;
  return v;
}
Value make_array(Array a) {
  Value v = make(Value::Kind::array);
  v.array = std::move(a);
  return v;
}
Value make_number(double n) {
  Value v = make(Value::Kind::number);
  v.number = n;
  return v;
}
Value make_text(std::string s) {
  Value v = make(Value::Kind::text);
  v.text = std::move(s);
  return v;
}
Value make_list(std::vector<Value> items) {
  Value v = make(Value::Kind::list);
  v.items = std::move(items);
  return v;
}
Value make_function(std::string name, std::vector<Value> self = {}) {
  Value v = make(Value::Kind::function);
  v.text = std::move(name);
  v.items = std::move(self);
  return v;
}

struct Token {
  enum class Kind { name, number, text, punct, end } kind;
  std::string s;
  double v = 0;
};

std::vector<Token> tokenize(const std::string& src) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < src.size()) {
    const char c = src[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (src.compare(i, 3, "...") == 0) {
      out.push_back({Token::Kind::punct, "...", 0});
      i += 3;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < src.size() && (std::isdigit(static_cast<unsigned char>(src[j])) ||
                                (src[j] == '.' && j + 1 < src.size() &&
                                 std::isdigit(static_cast<unsigned char>(src[j + 1])))))
        ++j;
      out.push_back({Token::Kind::number, src.substr(i, j - i), std::stod(src.substr(i, j - i))});
      // `4c` in the prose forms means 4 * c.
      if (j < src.size() && std::isalpha(static_cast<unsigned char>(src[j])))
        out.push_back({Token::Kind::punct, "*", 0});
      i = j;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < src.size() && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_'))
        ++j;
      out.push_back({Token::Kind::name, src.substr(i, j - i), 0});
      i = j;
    } else if (c == '\'' || c == '"') {
      const size_t j = src.find(c, i + 1);
      if (j == std::string::npos) throw std::runtime_error("unterminated string");
      out.push_back({Token::Kind::text, src.substr(i + 1, j - i - 1), 0});
      i = j + 1;
    } else if (std::string("()[]{},=:.-*").find(c) != std::string::npos) {
      out.push_back({Token::Kind::punct, std::string(1, c), 0});
      ++i;
    } else {
      throw std::runtime_error(std::string("unexpected character '") + c + "'");
    }
  }
  out.push_back({Token::Kind::end, "", 0});
  return out;
}

std::vector<int64_t> ints_of(const Value& v) {
  if (v.kind == Value::Kind::number) return {static_cast<int64_t>(v.number)};
  std::vector<int64_t> out;
  for (const Value& item : v.items)
    out.push_back(static_cast<int64_t>(item.number));
  return out;
}

std::vector<Array> arrays_of(const Value& v) {
  std::vector<Array> out;
  for (const Value& item : v.items)
    out.push_back(item.array);
  return out;
}

/// Evaluates one expression against an environment of variables; records the named axes of
/// every einops call as variables too, so that `x.reshape(b,c,h,2,w,2)` can use them.
class Evaluator {
 public:
  std::map<std::string, Value> env;  ///< variables; "..." holds the row's operand list

  Value evaluate(const std::string& src) {
    tokens_ = tokenize(src);
    pos_ = 0;
    Value v = expression();
    if (peek().kind != Token::Kind::end) throw std::runtime_error("trailing '" + peek().s + "'");
    return v;
  }

 private:
  std::vector<Token> tokens_;
  size_t pos_ = 0;

  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  bool accept(const std::string& punct) {
    if (peek().kind != Token::Kind::punct || peek().s != punct) return false;
    ++pos_;
    return true;
  }
  void expect(const std::string& punct) {
    if (!accept(punct)) throw std::runtime_error("expected '" + punct + "' at '" + peek().s + "'");
  }

  Value expression() {
    Value v = unary();
    while (accept("*"))
      v = make_number(v.number * unary().number);
    return v;
  }

  Value unary() {
    if (accept("-")) return make_number(-unary().number);
    return postfix(primary());
  }

  Value primary() {
    const Token t = peek();
    ++pos_;
    switch (t.kind) {
      case Token::Kind::number:
        return make_number(t.v);
      case Token::Kind::text:
        return make_text(t.s);
      case Token::Kind::name:
        return name(t.s);
      case Token::Kind::end:
        throw std::runtime_error("unexpected end");
      case Token::Kind::punct:
        break;
    }
    if (t.s == "...") return make(Value::Kind::ellipsis);
    if (t.s == "(" || t.s == "[") return make_list(sequence(t.s == "(" ? ")" : "]"));
    if (t.s == "{") {
      Value d = make(Value::Kind::dict);
      while (!accept("}")) {
        d.keys.push_back(expression().text);
        expect(":");
        d.items.push_back(expression());
        accept(",");
      }
      return d;
    }
    throw std::runtime_error("unexpected '" + t.s + "'");
  }

  std::vector<Value> sequence(const std::string& close) {
    std::vector<Value> items;
    while (!accept(close)) {
      items.push_back(expression());
      if (!accept(",")) {
        expect(close);
        break;
      }
    }
    return items;
  }

  Value name(const std::string& n) {
    if (n == "None") return {};
    if (n == "True" || n == "False") return make_number(n == "True");
    if (n == "np" || n == "einops") {
      expect(".");
      return make_function(n + "." + tokens_[pos_++].s);
    }
    if (n == "rearrange" || n == "reduce" || n == "repeat" || n == "pack") return make_function(n);
    const auto it = env.find(n);
    if (it == env.end()) throw std::runtime_error("unknown name '" + n + "'");
    return it->second;
  }

  Value postfix(Value v) {
    for (;;) {
      if (accept(".")) {
        const std::string attr = tokens_[pos_++].s;
        if (attr == "shape") {
          std::vector<Value> dims;
          for (int64_t d : v.array.shape)
            dims.push_back(make_number(static_cast<double>(d)));
          v = make_list(std::move(dims));
        } else {
          v = make_function(attr, {v});
        }
      } else if (accept("(")) {
        std::vector<Value> args;
        std::map<std::string, Value> kwargs;
        while (!accept(")")) {
          if (peek().kind == Token::Kind::name && peek(1).s == "=") {
            const std::string key = peek().s;
            pos_ += 2;
            kwargs[key] = expression();
          } else {
            args.push_back(expression());
          }
          if (!accept(",")) {
            expect(")");
            break;
          }
        }
        v = call(v, std::move(args), kwargs);
      } else if (accept("[")) {
        v = subscript(v, sequence("]"));
      } else {
        return v;
      }
    }
  }

  Value subscript(const Value& v, const std::vector<Value>& index) {
    if (v.kind == Value::Kind::list && index.size() == 1)
      return v.items.at(static_cast<size_t>(index[0].number));
    if (v.kind == Value::Kind::array && index.size() == 2 &&
        index[0].kind == Value::Kind::ellipsis && index[1].kind == Value::Kind::none) {
      Shape shape = v.array.shape;  // x[..., None]: a new trailing axis
      shape.push_back(1);
      return make_array(Array(shape, v.array.data));
    }
    throw std::runtime_error("unsupported subscript");
  }

  // `...` as an argument stands for the row's operands.
  std::vector<Value> operands(const std::vector<Value>& args) {
    std::vector<Value> out;
    for (const Value& a : args)
      if (a.kind == Value::Kind::ellipsis)
        for (const Value& x : env.at("...").items)
          out.push_back(x);
      else
        out.push_back(a);
    return out;
  }

  static int64_t axis_kw(const std::map<std::string, Value>& kw, int64_t fallback) {
    const auto it = kw.find("axis");
    return it == kw.end() ? fallback : static_cast<int64_t>(it->second.number);
  }

  // Makes the named axes of an einops call's pattern visible as variables.
  void bind_axes(PatternOp op, const Value& x, const std::string& pattern,
                 const std::vector<AxisSize>& sizes, Reduction reduction) {
    ResolveRequest r;
    r.op = op;
    r.dtype = DType::f64;
    r.sizes = sizes;
    r.reduction = reduction;
    if (reduction == Reduction::var || reduction == Reduction::std) r.ddof = 0;
    r.list_input = x.kind == Value::Kind::list;
    for (const Array& a : r.list_input ? arrays_of(x) : std::vector<Array>{x.array})
      r.shapes.push_back(a.shape);
    for (const ElementaryAxis& axis : resolve_cached(pattern, r)->axes)
      if (axis.origin == ElementaryAxis::Origin::named)
        env.try_emplace(axis.name, make_number(static_cast<double>(axis.size)));
  }

  Value call(const Value& f, std::vector<Value> args, const std::map<std::string, Value>& kw) {
    const std::string& fn = f.text;
    if (f.items.empty() && (fn == "rearrange" || fn == "reduce" || fn == "repeat")) {
      std::vector<AxisSize> sizes;
      for (const auto& [k, v] : kw)
        sizes.push_back({k, static_cast<int64_t>(v.number)});
      for (const Value& a : args)  // einops' older form: the sizes as a dict argument
        for (size_t i = 0; a.kind == Value::Kind::dict && i < a.keys.size(); ++i)
          sizes.push_back({a.keys[i], static_cast<int64_t>(a.items[i].number)});
      const Value& x = args.at(0);
      const std::string& pattern = args.at(1).text;
      const bool list = x.kind == Value::Kind::list;
      if (fn == "reduce") {
        const auto r = parse_reduction(args.at(2).text);
        if (!r) throw std::runtime_error("unknown reduction " + args[2].text);
        bind_axes(PatternOp::reduce, x, pattern, sizes, *r);
        return make_array(list ? reference::reduce(arrays_of(x), pattern, *r, sizes)
                               : reference::reduce(x.array, pattern, *r, sizes));
      }
      if (fn == "repeat") {
        bind_axes(PatternOp::repeat, x, pattern, sizes, Reduction::none);
        return make_array(reference::repeat(x.array, pattern, sizes));
      }
      bind_axes(PatternOp::rearrange, x, pattern, sizes, Reduction::none);
      return make_array(list ? reference::rearrange(arrays_of(x), pattern, sizes)
                             : reference::rearrange(x.array, pattern, sizes));
    }
    if (fn == "pack") {
      auto [packed, ps] = reference::pack(arrays_of(args.at(0)), args.at(1).text);
      std::vector<Value> shapes;
      for (const Shape& s : ps) {
        std::vector<Value> dims;
        for (int64_t d : s)
          dims.push_back(make_number(static_cast<double>(d)));
        shapes.push_back(make_list(std::move(dims)));
      }
      return make_list({make_array(std::move(packed)), make_list(std::move(shapes))});
    }
    if (fn == "einops.einsum") {
      args = operands(args);
      const std::string pattern = args.back().text;
      args.pop_back();
      return make_array(reference::einsum(pattern, arrays_of(make_list(args))));
    }
    if (fn == "np.einsum") {
      const std::string spec = args.at(0).text;
      args.erase(args.begin());
      return make_array(np::einsum(spec, arrays_of(make_list(operands(args)))));
    }
    if (fn == "np.stack" || fn == "np.concatenate") {
      const Value list = args.at(0).kind == Value::Kind::ellipsis ? env.at("...") : args.at(0);
      return make_array(fn == "np.stack" ? np::stack(arrays_of(list), axis_kw(kw, 0))
                                         : np::concatenate(arrays_of(list), axis_kw(kw, 0)));
    }
    if (fn == "np.any" || fn == "np.all") {
      const auto it = kw.find("keepdims");
      return make_array(
          np::reduce(args.at(0).array, fn.substr(3),
                     kw.count("axis") ? ints_of(kw.at("axis")) : std::vector<int64_t>{},
                     it != kw.end() && it->second.number != 0));
    }
    if (fn == "np.transpose")
      return make_array(np::transpose(args.at(0).array, ints_of(args.at(1))));
    if (fn == "np.tile") return make_array(np::tile(args.at(0).array, ints_of(args.at(1))));
    if (fn == "np.broadcast_to")
      return make_array(np::broadcast_to(args.at(0).array, ints_of(args.at(1))));
    if (f.items.size() == 1 && f.items[0].kind == Value::Kind::array) {  // a method of x
      const Array& self = f.items[0].array;
      // x.transpose(0,2,3,1) and x.reshape(b, -1) take their sizes as separate arguments.
      std::vector<int64_t> flat;
      for (const Value& a : args)
        for (int64_t i : ints_of(a))
          flat.push_back(i);
      if (fn == "min" || fn == "max" || fn == "sum" || fn == "mean" || fn == "prod") {
        const auto it = kw.find("keepdims");
        return make_array(
            np::reduce(self, fn, kw.count("axis") ? ints_of(kw.at("axis")) : std::vector<int64_t>{},
                       it != kw.end() && it->second.number != 0));
      }
      if (fn == "transpose") return make_array(np::transpose(self, flat));
      if (fn == "reshape") return make_array(np::reshape(self, flat));
      if (fn == "flatten") return make_array(np::reshape(self, {-1}));
      if (fn == "repeat")
        return make_array(
            np::repeat(self, static_cast<int64_t>(args.at(0).number), axis_kw(kw, 0)));
    }
    throw std::runtime_error("unsupported function " + fn);
  }
};

// "(2,3,4)" -> {2,3,4}.
Shape parse_shape_text(const std::string& text) {
  Shape shape;
  std::string digits;
  for (char c : text) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digits += c;
    } else if (!digits.empty()) {
      shape.push_back(std::stoll(digits));
      digits.clear();
    }
  }
  return shape;
}

Array random_array(const Shape& shape, bool boolean, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  Array x = Array::filled(shape, 0);
  for (double& v : x.data)
    v = boolean ? (dist(rng) > 0 ? 1 : 0) : dist(rng);
  return x;
}

// einsum rows give no shapes: each name gets its own length (2, 3, 4, ...), '...' is (3, 2).
std::vector<Array> einsum_operands(const std::string& pattern, std::mt19937_64& rng) {
  std::map<std::string, int64_t> sizes;
  std::vector<Array> out;
  std::string left = pattern.substr(0, pattern.find("->"));
  std::stringstream operands(left);
  for (std::string operand; std::getline(operands, operand, ',');) {
    std::stringstream names(operand);
    Shape shape;
    for (std::string n; names >> n;) {
      if (n == "...") {
        shape.insert(shape.end(), {3, 2});
        continue;
      }
      sizes.try_emplace(n, static_cast<int64_t>(sizes.size()) + 2);
      shape.push_back(sizes[n]);
    }
    out.push_back(random_array(shape, false, rng));
  }
  return out;
}

// Binds the row's inputs: x, a list (list_of_arrays; r, g, b), or einsum operands.
void bind_inputs(Evaluator& ev, const TsvRow& row, const std::string& lhs, std::mt19937_64& rng) {
  const std::string& text = row["input_shape"];
  if (text == "-") {
    const size_t q = lhs.find('\'');
    const std::string pattern = lhs.substr(q + 1, lhs.find('\'', q + 1) - q - 1);
    std::vector<Value> ops;
    for (Array& a : einsum_operands(pattern, rng))
      ops.push_back(make_array(std::move(a)));
    ev.env["..."] = make_list(std::move(ops));
    return;
  }
  const size_t times = text.find(" x ");
  if (times != std::string::npos) {
    const Shape shape = parse_shape_text(text.substr(times));
    std::vector<Value> list;
    for (int64_t i = 0; i < std::stoll(text.substr(0, times)); ++i)
      list.push_back(make_array(random_array(shape, false, rng)));
    if (list.size() == 3) {
      ev.env["r"] = list[0];
      ev.env["g"] = list[1];
      ev.env["b"] = list[2];
    }
    ev.env["list_of_arrays"] = ev.env["..."] = make_list(std::move(list));
    return;
  }
  const bool boolean = text.find("bool") != std::string::npos;
  ev.env["x"] = make_array(random_array(parse_shape_text(text), boolean, rng));
}

// Prose after an expression, "x.flatten()  (C-order composition)", is not part of it.
std::string strip_annotation(const std::string& s) {
  static const std::regex note(R"(\s{2,}\([^()']*\)\s*$)");
  return std::regex_replace(s, note, "");
}

// "'min' or 'max'" stands for two rows.
std::vector<std::string> variants(const std::string& s) {
  const std::string both = "'min' or 'max'";
  const size_t at = s.find(both);
  if (at == std::string::npos) return {s};
  std::string a = s, b = s;
  return {a.replace(at, both.size(), "'min'"), b.replace(at, both.size(), "'max'")};
}

bool same_values(const Value& a, const Value& b, std::string& why) {
  if (a.kind != Value::Kind::array || b.kind != Value::Kind::array) {
    why = "a side is not an array";
    return false;
  }
  if (a.array.shape != b.array.shape) {
    why = "shapes " + format_shape(a.array.shape) + " vs " + format_shape(b.array.shape);
    return false;
  }
  for (size_t i = 0; i < a.array.data.size(); ++i) {
    const double x = a.array.data[i], y = b.array.data[i];
    // Sums and products in another order: a few ulps per element.
    if (std::fabs(x - y) > 1e-12 * std::max(1.0, std::fabs(y))) {
      why =
          "flat index " + std::to_string(i) + ": " + std::to_string(x) + " vs " + std::to_string(y);
      return false;
    }
  }
  return true;
}

TEST(ReferenceIdentities, EveryEinopsIdentityRowHoldsOnValues) {
  const auto rows = read_tsv(conformance_file("einops_identities.tsv"));
  ASSERT_FALSE(rows.empty());
  std::mt19937_64 rng(20240601);
  int evaluated = 0, skipped = 0;
  std::vector<std::string> failures;
  for (const TsvRow& row : rows) {
    const std::string& original = row["einops_expression"];
    if (kSkipped.count(original)) {
      ++skipped;
      continue;
    }
    const auto rewritten = kRewritten.find(original);
    const std::string lhs_text = rewritten != kRewritten.end() ? rewritten->second : original;
    const std::string rhs_text = strip_annotation(row["equivalent"]);
    for (const std::string& lhs : variants(strip_annotation(lhs_text))) {
      const std::string where =
          "line " + std::to_string(row.line) + ": " + lhs + "  vs  " + rhs_text;
      try {
        Evaluator ev;
        bind_inputs(ev, row, lhs, rng);
        const Value left = ev.evaluate(lhs);
        const Value right = ev.evaluate(rhs_text);
        std::string why;
        if (!same_values(left, right, why)) failures.push_back(where + " -- differ: " + why);
      } catch (const std::exception& e) {
        failures.push_back(where + " -- cannot evaluate: " + e.what());
      }
      ++evaluated;
    }
  }
  for (const std::string& f : failures)
    ADD_FAILURE() << f;
  std::printf("einops identities: %d evaluated (from %zu rows), %d skipped, %zu failed\n",
              evaluated, rows.size(), skipped, failures.size());
  EXPECT_EQ(skipped, static_cast<int>(kSkipped.size()));
}

}  // namespace
}  // namespace ein::testing
