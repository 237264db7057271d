// PEGTL's static grammar analysis: no rule can loop without consuming input.
#include <gtest/gtest.h>

#include <tao/pegtl/contrib/analyze.hpp>

#include "dsl/map_grammar.h"
#include "dsl/pattern_grammar.h"
#include "dsl/script_grammar.h"

namespace ein {
namespace {

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
