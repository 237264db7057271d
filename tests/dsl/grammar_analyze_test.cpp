// PEGTL's static grammar analysis: no rule can loop without consuming input.
#include <gtest/gtest.h>

#include <tao/pegtl/contrib/analyze.hpp>

#include "dsl/expr_grammar.h"
#include "dsl/map_grammar.h"
#include "dsl/pattern_grammar.h"
#include "dsl/script_grammar.h"

namespace ein {
namespace {

namespace pegtl = tao::pegtl;

// The smallest language over the shared operator ladder: names and parenthesised
// comparisons, whitespace anywhere, one token per level. Analysing it checks the ladder on
// its own; the map and script grammars below check it with their own atoms and tokens.
namespace tiny {
struct compare;
struct paren : pegtl::seq<pegtl::one<'('>, compare, pegtl::one<')'>> {};
struct atom_rule : pegtl::sor<paren, pegtl::identifier> {};
struct ops {
  using atom = atom_rule;
  using sp = pegtl::star<pegtl::space>;
  using ws = pegtl::star<pegtl::space>;
  using prefix = pegtl::one<'-'>;
  using mul = pegtl::one<'*'>;
  using add = pegtl::one<'+'>;
};
struct compare : grammar::expr::compare<ops> {};
struct whole : pegtl::seq<compare, pegtl::eof> {};
}  // namespace tiny

TEST(GrammarAnalyze, SharedExpressionLadderHasNoIssues) {
  EXPECT_EQ(pegtl::analyze<tiny::whole>(-1), 0u);
}

TEST(GrammarAnalyze, PatternGrammarHasNoIssues) {
  EXPECT_EQ(tao::pegtl::analyze<grammar::pattern::grammar>(-1), 0u);
}

TEST(GrammarAnalyze, MapGrammarHasNoIssues) {
  EXPECT_EQ(tao::pegtl::analyze<grammar::map::grammar>(-1), 0u);
}

TEST(GrammarAnalyze, ScriptGrammarHasNoIssues) {
  EXPECT_EQ(tao::pegtl::analyze<grammar::script::grammar>(-1), 0u);
}

}  // namespace
}  // namespace ein
