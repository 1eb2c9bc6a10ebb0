// Grading rules at their edges, the pass@k estimator, statuses, printed-output parsing.
#include <gtest/gtest.h>

#include "trex/core/error.hpp"

#include <cmath>
#include <vector>

#include "trex/or/eval/grade.hpp"
#include "trex/or/eval/python_probe.hpp"
#include "trex/or/eval/report.hpp"

namespace trex::orlib::eval {
namespace {

TEST(EvalRules, Rel1e6AtItsEdge) {
  // |p - g| / (|g| + 1) <= 1e-6
  EXPECT_TRUE(objective_matches(Rule::rel1e6, 1000.0 + 1001.0 * 0.999e-6, 1000.0));
  EXPECT_FALSE(objective_matches(Rule::rel1e6, 1000.0 + 1001.0 * 1.001e-6, 1000.0));
  EXPECT_TRUE(objective_matches(Rule::rel1e6, 0.9e-6, 0.0));  // gt 0: absolute 1e-6
  EXPECT_FALSE(objective_matches(Rule::rel1e6, 1.1e-6, 0.0));
  EXPECT_TRUE(objective_matches(Rule::rel1e6, -5.0, -5.0));
  EXPECT_FALSE(objective_matches(Rule::rel1e6, NAN, 1.0));
  EXPECT_FALSE(objective_matches(Rule::rel1e6, INFINITY, 1.0));
}

TEST(EvalRules, Rel1e4AndAbs1e2AtTheirEdges) {
  EXPECT_TRUE(objective_matches(Rule::rel1e4, 100.0 + 101.0 * 0.99e-4, 100.0));
  EXPECT_FALSE(objective_matches(Rule::rel1e4, 100.0 + 101.0 * 1.01e-4, 100.0));
  EXPECT_TRUE(objective_matches(Rule::abs1e2, 5.0 + 0.0099, 5.0));
  EXPECT_FALSE(objective_matches(Rule::abs1e2, 5.0 + 0.0101, 5.0));
  EXPECT_FALSE(objective_matches(Rule::abs1e2, 1e6 + 0.02, 1e6));  // absolute, whatever the scale
}

TEST(EvalRules, OrlmRoundsThenAllowsFivePercent) {
  // Both rounded (half to even) then |rp - rg| / |rg| <= 0.05.
  EXPECT_TRUE(objective_matches(Rule::orlm, 105.0, 100.0));
  EXPECT_FALSE(objective_matches(Rule::orlm, 106.0, 100.0));
  EXPECT_TRUE(objective_matches(Rule::orlm, 105.4, 100.0));   // rounds to 105
  EXPECT_FALSE(objective_matches(Rule::orlm, 105.6, 100.0));  // rounds to 106
  EXPECT_TRUE(objective_matches(Rule::orlm, 2.5, 2.0));       // 2.5 -> 2 (half to even)
  EXPECT_FALSE(objective_matches(Rule::orlm, 3.5, 3.0));      // 3.5 -> 4: 33 %
  // gt rounding to 0: the prediction must round to 0 as well
  EXPECT_TRUE(objective_matches(Rule::orlm, 0.4, 0.0));
  EXPECT_TRUE(objective_matches(Rule::orlm, -0.5, 0.2));  // -0.5 -> -0 (half to even)
  EXPECT_FALSE(objective_matches(Rule::orlm, 0.6, 0.0));
}

TEST(EvalRules, MamoAbsoluteOrRelative) {
  EXPECT_TRUE(objective_matches(Rule::mamo, 3.0099, 3.0));      // abs < 1e-2
  EXPECT_FALSE(objective_matches(Rule::mamo, 3.0101, 3.0));     // abs 0.0101, rel 3.4e-3
  EXPECT_TRUE(objective_matches(Rule::mamo, 1e6 + 99.0, 1e6));  // rel 0.99e-4
  EXPECT_FALSE(objective_matches(Rule::mamo, 1e6 + 101.0, 1e6));
  EXPECT_FALSE(objective_matches(Rule::mamo, 0.02, 0.0));  // gt 0: absolute only
  EXPECT_TRUE(objective_matches(Rule::mamo, -0.005, 0.0));
}

TEST(EvalRules, NamesRoundTrip) {
  for (Rule r : all_rules()) EXPECT_EQ(parse_rule(to_string(r)), r);
  EXPECT_EQ(parse_rule("REL1E-6"), Rule::rel1e6);
  EXPECT_THROW(parse_rule("rel1e-3"), Error);
  for (Category c : all_categories()) EXPECT_EQ(parse_category(to_string(c)), c);
}

// Brute force: the fraction of k-subsets of n samples that contain a correct one.
double brute_pass_at_k(int n, int c, int k) {
  int64_t total = 0, hit = 0;
  for (uint32_t mask = 0; mask < (1u << n); ++mask) {
    if (__builtin_popcount(mask) != k) continue;
    ++total;
    if ((mask & ((1u << c) - 1)) != 0) ++hit;  // samples 0..c-1 are the correct ones
  }
  return static_cast<double>(hit) / static_cast<double>(total);
}

TEST(EvalPassAtK, MatchesBruteForce) {
  for (int n = 1; n <= 12; ++n)
    for (int c = 0; c <= n; ++c)
      for (int k = 1; k <= n; ++k)
        EXPECT_NEAR(pass_at_k(n, c, k), brute_pass_at_k(n, c, k), 1e-12)
            << "n=" << n << " c=" << c << " k=" << k;
  EXPECT_DOUBLE_EQ(pass_at_k(10, 3, 1), 0.3);
  EXPECT_THROW(pass_at_k(3, 1, 4), Error);
}

TEST(EvalPassAtK, AveragesOverItems) {
  std::vector<ItemTally> items = {{"LP", 4, 1}, {"LP", 4, 4}, {"IP", 0, 0}, {"IP", 2, 1}};
  std::vector<const ItemTally*> ptrs;
  for (const auto& t : items) ptrs.push_back(&t);
  EXPECT_NEAR(pass1_percent(ptrs), 100.0 * (0.25 + 1.0 + 0.0 + 0.5) / 4.0, 1e-12);
  int64_t excluded = 0;
  // k = 3: the item with 2 samples is left out; the one without samples counts as 0.
  double expected = 100.0 * (pass_at_k(4, 1, 3) + 1.0 + 0.0) / 3.0;
  EXPECT_NEAR(passk_percent(ptrs, 3, excluded), expected, 1e-12);
  EXPECT_EQ(excluded, 1);
}

TEST(EvalGrade, StatusesAgainstTruths) {
  GroundTruth opt{TruthKind::optimal, 10.0, "optimal"};
  GroundTruth none{TruthKind::no_solution, NAN, "infeasible_or_unbounded"};
  EXPECT_EQ(grade(Rule::rel1e6, opt, Reported::optimal, 10.0), Category::correct);
  EXPECT_EQ(grade(Rule::rel1e6, opt, Reported::optimal, 10.1), Category::wrong_objective);
  EXPECT_EQ(grade(Rule::rel1e6, opt, Reported::infeasible, 0), Category::infeasible);
  EXPECT_EQ(grade(Rule::rel1e6, opt, Reported::infeasible_or_unbounded, 0), Category::infeasible);
  EXPECT_EQ(grade(Rule::rel1e6, opt, Reported::unbounded, 0), Category::unbounded);
  EXPECT_EQ(grade(Rule::rel1e6, opt, Reported::none, NAN), Category::wrong_objective);
  for (Reported r : {Reported::infeasible, Reported::unbounded, Reported::infeasible_or_unbounded})
    EXPECT_EQ(grade(Rule::orlm, none, r, NAN), Category::correct);
  EXPECT_EQ(grade(Rule::orlm, none, Reported::optimal, 0.0), Category::wrong_objective);
  EXPECT_EQ(grade(Rule::orlm, none, Reported::none, NAN), Category::wrong_objective);
}

TEST(EvalGrade, GroundTruthFromRecords) {
  using nlohmann::json;
  auto gt = ground_truth(json{{"answer", 12.5}, {"answer_status", "optimal"}});
  EXPECT_EQ(gt.kind, TruthKind::optimal);
  EXPECT_DOUBLE_EQ(gt.value, 12.5);
  EXPECT_EQ(ground_truth(json{{"answer", "1,200.5"}}).value, 1200.5);
  EXPECT_EQ(
      ground_truth(json{{"answer", nullptr}, {"answer_status", "infeasible_or_unbounded"}}).kind,
      TruthKind::no_solution);
  json sentinel{{"answer", nullptr}, {"answer_status", "sentinel_no_solution"}};
  EXPECT_EQ(ground_truth(sentinel).kind, TruthKind::no_solution);
  EXPECT_EQ(ground_truth(sentinel, true).kind, TruthKind::unknown);
  EXPECT_EQ(ground_truth(json{{"answer", nullptr}, {"answer_status", "unknown"}}).kind,
            TruthKind::unknown);
  EXPECT_EQ(ground_truth(json{{"answer", "n/a"}}).kind, TruthKind::unknown);
}

TEST(EvalPrinted, MarkersStatusesAndFallbacks) {
  auto p = parse_printed_result("Status: Optimal\nx = 3\nObjective value: 1,160.50\n");
  EXPECT_EQ(p.status, Reported::optimal);
  EXPECT_DOUBLE_EQ(p.objective, 1160.5);
  // the number after the first ':'/'=' following the marker, not glued digits
  EXPECT_DOUBLE_EQ(parse_printed_result("Objective (x1 + 2 x2) = 5\n").objective, 5.0);
  EXPECT_DOUBLE_EQ(parse_printed_result("Optimal objective: -2.5e3 (x=3)\n").objective, -2500.0);
  EXPECT_DOUBLE_EQ(parse_printed_result("obj = 7\nOptimal value is 9 dollars\n").objective, 9.0);
  EXPECT_DOUBLE_EQ(parse_printed_result("Objective value:\n  42\n").objective, 42.0);
  // the later of a status phrase and an objective wins
  EXPECT_EQ(parse_printed_result("Objective: 3\nModel is infeasible\n").status,
            Reported::infeasible);
  EXPECT_EQ(parse_printed_result("No Best Solution\n").status, Reported::infeasible_or_unbounded);
  EXPECT_EQ(parse_printed_result("Problem is unbounded").status, Reported::unbounded);
  EXPECT_EQ(parse_printed_result("infeasible or unbounded").status,
            Reported::infeasible_or_unbounded);
  EXPECT_EQ(parse_printed_result("model infeasible\nretry...\nOptimal objective: 4\n").status,
            Reported::optimal);
  // fallbacks: secondary markers, then a lone last number
  auto sec = parse_printed_result("Total cost: $1,500\n");
  EXPECT_EQ(sec.how, "fallback:secondary-marker");
  EXPECT_DOUBLE_EQ(sec.objective, 1500.0);
  auto last = parse_printed_result("x = 2\ny = 3\n17.25\n");
  EXPECT_EQ(last.how, "fallback:last-number");
  EXPECT_DOUBLE_EQ(last.objective, 17.25);
  EXPECT_EQ(parse_printed_result("x = 2\ny = 3\n").status, Reported::none);
  EXPECT_EQ(parse_printed_result(std::string("\xff\xfe garbage \x00 objective: 8", 25)).objective,
            8.0);
}

TEST(EvalPrinted, PythonExceptionsAreClassified) {
  std::string d;
  EXPECT_EQ(
      classify_python_exception("ModuleNotFoundError", "No module named 'gurobipy'", false, d),
      Category::runtime_missing);
  EXPECT_EQ(classify_python_exception("PulpSolverError", "Pulp: cannot execute cbc", false, d),
            Category::runtime_missing);
  EXPECT_EQ(classify_python_exception("GurobiError", "Model too large for size-limited license",
                                      false, d),
            Category::runtime_missing);
  EXPECT_EQ(classify_python_exception("SyntaxError", "invalid syntax", false, d),
            Category::syntax_error);
  EXPECT_EQ(classify_python_exception("ValueError", "null bytes", true, d), Category::syntax_error);
  EXPECT_EQ(classify_python_exception("ZeroDivisionError", "division by zero", false, d),
            Category::runtime_error);
  EXPECT_EQ(d, "ZeroDivisionError: division by zero");
  std::string type, message;
  ASSERT_TRUE(last_traceback_exception(
      "Traceback (most recent call last):\n  File \"s.py\", line 1\nKeyError: 'x'\n", type,
      message));
  EXPECT_EQ(type, "KeyError");
  EXPECT_EQ(message, "'x'");
}

}  // namespace
}  // namespace trex::orlib::eval
