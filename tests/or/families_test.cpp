// Every registered family, at every difficulty: generate, render the three
// representations, translate, solve with both solvers, check both solutions.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <set>

#include "trex/or/families/family.hpp"
#include "trex/or/solver/linear_model.hpp"
#include "trex/or/synth/verify.hpp"

namespace trex::orlib {
namespace {

class EveryFamily : public ::testing::TestWithParam<const Family*> {};

TEST_P(EveryFamily, GeneratesRendersSolvesAndChecks) {
  const Family& family = *GetParam();
  EXPECT_GE(family.nl_templates(), 5);
  int checked = 0;
  for (Difficulty d : {Difficulty::easy, Difficulty::medium, Difficulty::hard}) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE(std::string(to_string(d)) + " seed " + std::to_string(seed));
      Rng rng(seed, {hash_string(family.name()), 99});
      GenOptions options;
      options.difficulty = d;
      options.side_constraint_rate = seed == 3 ? 1.0 : 0.0;  // exercise side constraints
      auto inst = family.generate(rng, options);
      std::string nl = inst->nl(), alg = inst->alg(), gmpl = inst->gmpl();
      EXPECT_GT(nl.size(), 150u);
      // R-ALG sections in the fixed order.
      size_t pos = 0;
      for (const char* section : {"### Sets", "### Parameters", "### Decision variables",
                                  "### Objective", "### Constraints"}) {
        size_t at = alg.find(section, pos);
        ASSERT_NE(at, std::string::npos) << section << " missing or out of order";
        pos = at;
      }
      EXPECT_NE(gmpl.find("data;"), std::string::npos);
      EXPECT_NE(gmpl.find("Optimal objective"), std::string::npos);
      EXPECT_TRUE(inst->size().is_object());

      LinearModel model = LinearModel::from_mathprog(gmpl, std::string(family.name()) + ".mod");
      SolveResult g = model.solve_glpk(), c = model.solve_cbc();
      ASSERT_EQ(g.status, SolveStatus::optimal) << g.message;
      ASSERT_EQ(c.status, SolveStatus::optimal) << c.message;
      EXPECT_TRUE(objectives_agree(g.objective, c.objective))
          << g.objective << " vs " << c.objective;
      for (const SolveResult* r : {&g, &c}) {
        CheckResult check =
            inst->check(Solution::from_columns(r->objective, model.column_names(), r->x));
        EXPECT_TRUE(check.feasible) << (check.violations.empty() ? "" : check.violations[0]);
        EXPECT_TRUE(objectives_agree(r->objective, check.objective))
            << "solver " << r->objective << " vs checker " << check.objective;
      }
      // The checker must be able to fail: the all-zero point is either infeasible
      // or worse than the (non-trivial) optimum.
      std::vector<double> zeros(model.column_names().size(), 0.0);
      CheckResult zero = inst->check(Solution::from_columns(0.0, model.column_names(), zeros));
      EXPECT_TRUE(!zero.feasible || !objectives_agree(zero.objective, g.objective))
          << "all-zero solution passes the checker with the optimal objective";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 9);
}

TEST_P(EveryFamily, EveryTemplateRendersDistinctText) {
  const Family& family = *GetParam();
  std::set<std::string> openings;
  for (int t = 0; t < family.nl_templates(); ++t) {
    Rng rng(5, {static_cast<uint64_t>(t)});
    GenOptions options;
    options.nl_template = t;
    options.difficulty = Difficulty::easy;
    auto inst = family.generate(rng, options);
    EXPECT_EQ(inst->nl_template(), t);
    std::string nl = inst->nl();
    ASSERT_FALSE(nl.empty());
    EXPECT_EQ(nl.find("{"), std::string::npos)
        << "unfilled placeholder in template " << t << ": " << nl;
    openings.insert(nl.substr(0, 40));
  }
  EXPECT_EQ(static_cast<int>(openings.size()), family.nl_templates())
      << "templates should differ in their opening";
  GenOptions bad;
  bad.nl_template = family.nl_templates();
  Rng rng(1);
  EXPECT_THROW(family.generate(rng, bad), Error);
}

TEST_P(EveryFamily, SameStreamGivesSameInstance) {
  const Family& family = *GetParam();
  Rng a(17, {3}), b(17, {3});
  GenOptions options;
  auto x = family.generate(a, options), y = family.generate(b, options);
  EXPECT_EQ(x->nl(), y->nl());
  EXPECT_EQ(x->gmpl(), y->gmpl());
  EXPECT_EQ(x->alg(), y->alg());
}

// Numbers of a text: thousands separators dropped ("1,250" -> 1250), words
// with digits ("P1", "x_2") skipped.
std::set<double> numbers_in(std::string text) {
  text = std::regex_replace(text, std::regex(R"((\d),(\d{3})\b)"), "$1$2");
  text = std::regex_replace(text, std::regex(R"((\d),(\d{3})\b)"), "$1$2");  // 1,234,567
  std::set<double> out;
  static const std::regex number(R"((^|[^A-Za-z_\d.])(-?\d+(\.\d+)?))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), number);
       it != std::sregex_iterator(); ++it)
    out.insert(std::round(std::stod((*it)[2].str()) * 1e6) / 1e6);
  return out;
}

// The word problem states every number of the model's data: as written, or as
// a percentage of it. Small integers (counts, indices, 0/1 incidences, "no X")
// may be implicit.
TEST_P(EveryFamily, TheTextStatesTheDataNumbers) {
  const Family& family = *GetParam();
  std::set<uint64_t> forms;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    Rng rng(seed, {hash_string(family.name()), 7});
    GenOptions options;
    options.difficulty = seed % 3 == 0 ? Difficulty::medium : Difficulty::easy;
    options.side_constraint_rate = seed % 2 == 0 ? 1.0 : 0.0;
    auto inst = family.generate(rng, options);
    const std::string nl = inst->nl(), gmpl = inst->gmpl();
    forms.insert(inst->surface_form());
    const std::set<double> stated = numbers_in(nl);
    for (double v : numbers_in(gmpl.substr(gmpl.find("data;")))) {
      if (v == std::round(v) && std::fabs(v) <= 12) continue;
      const double pct = std::round(v * 100 * 1e6) / 1e6;
      EXPECT_TRUE(stated.count(v) || stated.count(pct))
          << v << " of the data is not in the text (seed " << seed << "):\n"
          << nl;
    }
  }
  EXPECT_GE(forms.size(), 2u);
}

INSTANTIATE_TEST_SUITE_P(Families, EveryFamily, ::testing::ValuesIn(all_families()),
                         [](const ::testing::TestParamInfo<const Family*>& info) {
                           return std::string(info.param->name());
                         });

TEST(Families, RegistryHasTheRequiredCoverage) {
  const auto& families = all_families();
  EXPECT_GE(families.size(), 20u);
  std::set<std::string> names;
  std::set<ProblemClass> classes;
  for (const Family* f : families) {
    EXPECT_TRUE(names.insert(std::string(f->name())).second) << "duplicate " << f->name();
    classes.insert(f->problem_class());
  }
  EXPECT_EQ(classes.size(), 3u) << "LP, IP and MILP must all be covered";
  EXPECT_THROW(find_family("no_such_family"), Error);
  EXPECT_EQ(parse_family_list("all").size(), families.size());
  EXPECT_EQ(parse_family_list("knapsack").size(), 1u);
  EXPECT_THROW(parse_family_list("knapsack,knapsack"), Error);
}

}  // namespace
}  // namespace trex::orlib
