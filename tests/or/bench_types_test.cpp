// The problem-type classifier of benchmark questions (or/eval/bench_types) and
// `trex or bench-types`: hand-written questions of each type (not benchmark
// text), the type -> family map against the registry, and a sample of the
// shared benchmark files whose counts must add up.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "test_paths.hpp"
#include "trex/core/error.hpp"
#include "trex/or/eval/bench_types.hpp"
#include "trex/or/families/family.hpp"

namespace trex::orlib::eval {
namespace {

struct Case {
  const char* type;
  const char* question;
};

const Case kCases[] = {
    {"resource_allocation",
     "A bakery makes muffins and scones. A tray of muffins needs 2 hours of oven time and a tray "
     "of scones 3 hours; 40 oven hours are available. Muffins earn $5 per tray and scones $7. How "
     "many trays of each should it bake to maximize profit?"},
    {"blending",
     "A refinery blends two crude oils into gasoline. Crude A has a sulfur content of 2% and "
     "crude B 0.5%; the gasoline may contain at most 1% sulfur. Minimize the cost of the blend."},
    {"diet",
     "A student wants at least 60 grams of protein and 2000 calories a day from rice and beans at "
     "the lowest cost. Rice costs $1 per serving and beans $2."},
    {"transportation",
     "Two factories supply three stores. Factory 1 can ship 300 units and factory 2 400 units; "
     "the stores need 200, 250 and 250 units. The cost per unit shipped from each factory to "
     "each store is given. Minimize the total shipping cost."},
    {"assignment",
     "Four workers must be assigned to four tasks, each worker to exactly one task. The hours "
     "each worker needs for each task are given. Find the assignment with the fewest total "
     "hours."},
    {"production_inventory",
     "A plant plans the next four months. Demand is 100, 150, 200 and 120 units; it can make "
     "160 units a month, and units stored for a later month cost $2 per month in holding cost. "
     "Plan production and inventory at minimum cost."},
    {"lot_sizing",
     "Over a six-period horizon a shop faces known demand. Each production run has a setup cost "
     "of $300 and inventory held costs $1 per unit per period. When should it produce?"},
    {"staffing",
     "A call centre needs at least 8 agents from 6:00 to 10:00, 12 from 10:00 to 14:00 and 9 "
     "from 14:00 to 18:00. Each agent works a shift of 8 consecutive hours. Minimize the number "
     "of agents hired."},
    {"investment",
     "Ann has $50,000 to invest in bonds and stocks. Bonds return 4% a year and stocks 9%. At "
     "least 30% must go into bonds and at most $30,000 into stocks. Maximize her annual return."},
    {"portfolio_risk",
     "Choose weights for three assets to minimize the variance of the portfolio while the "
     "expected return is at least 6%."},
    {"knapsack",
     "A hiker can carry 15 kg. Choose which of the items below to take to maximize their total "
     "value; each item has a weight and a value."},
    {"bin_packing_cutting",
     "Steel bars of 12 m are cut into pieces of 3 m, 4 m and 5 m to fill an order. Minimize the "
     "number of bars used."},
    {"facility_location",
     "A retailer may open warehouses at five candidate sites, each with a fixed opening cost and "
     "a capacity, to serve eight customer regions. Minimize fixed plus shipping costs."},
    {"network_flow",
     "Find the shortest path from node A to node F in a road network; the length of each arc is "
     "given."},
    {"routing",
     "A courier must visit six cities exactly once and return to the starting city. Minimize the "
     "total distance travelled."},
    {"scheduling",
     "Five jobs are processed on three machines in the same order. Processing times are given. "
     "Minimize the makespan."},
    {"set_covering",
     "A city wants to build fire stations so that every district is covered by at least one "
     "station. Each candidate station covers some districts. Minimize the number of stations."},
    {"unit_commitment",
     "Three generators meet an hourly electricity demand in MW. Each generator has a startup "
     "cost and a minimum output when it operates. Minimize the total cost over the day."},
    {"algebraic",
     "Minimize 1.5 times x[0] plus 2 times x[1] subject to the equality constraint x[0] + x[1] = "
     "4 with coefficients as given."},
    {"other", "Tell me a story about a dragon."},
};

TEST(BenchTypes, ClassifiesHandWrittenQuestions) {
  std::set<std::string> seen;
  for (const Case& c : kCases) {
    EXPECT_EQ(classify_question(c.question), c.type) << c.question;
    seen.insert(c.type);
  }
  // Every type but network design has a case above; it gets its own.
  EXPECT_EQ(classify_question("Which roads should the county build? Each link has a "
                              "construction cost and a capacity, and the planned flows must fit."),
            "network_design");
  EXPECT_EQ(seen.size() + 1, problem_types().size());
}

TEST(BenchTypes, ScoresExplainTheChoice) {
  const auto scores = question_type_scores(kCases[4].question);  // assignment
  ASSERT_FALSE(scores.empty());
  int best = 0;
  std::string best_type;
  for (const auto& [type, score] : scores)
    if (score > best) best = score, best_type = type;
  EXPECT_EQ(best_type, "assignment");
}

TEST(BenchTypes, TypesNameRegisteredFamiliesAndCoverEveryFamily) {
  std::set<std::string> registered, mapped;
  for (const Family* f : all_families()) registered.emplace(f->name());
  for (const ProblemType& t : problem_types()) {
    for (const std::string& f : t.families) {
      EXPECT_TRUE(registered.count(f)) << t.id << " names unknown family " << f;
      mapped.insert(f);
    }
    EXPECT_EQ(&problem_type(t.id), &t);
  }
  // A new family must say which benchmark type it generates.
  for (const std::string& f : registered) EXPECT_TRUE(mapped.count(f)) << f << " has no type";
  EXPECT_EQ(problem_types().back().id, "other");
  EXPECT_THROW(problem_type("no_such_type"), Error);
}

std::string bench_dir() {
  return test::shared_dir() + "/or_bench";
}

TEST(BenchTypes, SampleOfTheBenchmarksAddsUp) {
  if (!std::filesystem::exists(bench_dir())) GTEST_SKIP() << "no " << bench_dir();
  BenchTypesOptions o;
  o.bench_dir = bench_dir();
  const nlohmann::json r = bench_types_report(o);
  ASSERT_EQ(r["sample"].get<int64_t>(), 200);

  int64_t items = 0, sampled = 0;
  for (const auto& f : r["files"]) {
    EXPECT_GT(f["items"].get<int64_t>(), 0) << f["name"];
    items += f["items"].get<int64_t>();
    sampled += f["sampled"].get<int64_t>();
  }
  EXPECT_EQ(items, r["items"].get<int64_t>());
  EXPECT_EQ(sampled, 200);

  // Every item has exactly one known type: the per-type counts add up.
  int64_t count = 0, all = 0;
  double share = 0;
  std::set<std::string> ids;
  for (const auto& t : r["types"]) {
    ids.insert(t["id"].get<std::string>());
    count += t["count"].get<int64_t>();
    all += t["all_count"].get<int64_t>();
    share += t["share"].get<double>();
    EXPECT_NO_THROW(problem_type(t["id"].get<std::string>()));
  }
  EXPECT_EQ(ids.size(), problem_types().size());
  EXPECT_EQ(count, 200);
  EXPECT_EQ(all, items);
  EXPECT_NEAR(share, 1.0, 1e-9);
  ASSERT_EQ(r["classified"].size(), 200u);
  for (const auto& c : r["classified"]) EXPECT_TRUE(ids.count(c["type"].get<std::string>()));

  // The same seed draws the same sample; another seed another one; 0 takes every item.
  EXPECT_EQ(bench_types_report(o), r);
  o.seed = 2;
  EXPECT_NE(bench_types_report(o)["files"], r["files"]);
  o.sample = 0;
  EXPECT_EQ(bench_types_report(o)["sample"].get<int64_t>(), items);
}

TEST(BenchTypes, CommandPrintsTheTableAndWritesJson) {
  if (!std::filesystem::exists(bench_dir())) GTEST_SKIP() << "no " << bench_dir();
  test::TempDir dir;
  const auto run = test::run_trex("or bench-types --bench-dir '" + bench_dir() +
                                  "' --files nl4opt_sirl,complexor --sample 50 --json '" +
                                  dir.file("types.json") + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("resource_allocation"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("sample 50 of"), std::string::npos) << run.output;
  std::ifstream in(dir.file("types.json"));
  const nlohmann::json r = nlohmann::json::parse(in);
  EXPECT_EQ(r["sample"].get<int64_t>(), 50);
  EXPECT_EQ(r["files"].size(), 2u);

  const auto missing = test::run_trex("or bench-types --bench-dir '" + dir.path() + "'");
  EXPECT_NE(missing.exit_code, 0);
}

}  // namespace
}  // namespace trex::orlib::eval
