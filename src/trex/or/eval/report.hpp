#pragma once
// Metrics over graded samples: Pass@1 and unbiased Pass@k per benchmark file,
// per problem type, macro and micro; the error taxonomy; the execution rate;
// and their rendering as report.json and report.md.
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/or/eval/grade.hpp"

namespace trex::orlib::eval {

struct ItemTally {
  std::string problem_type;
  int n = 0;  // samples graded
  int c = 0;  // correct samples
};

struct BenchTally {
  std::string name;
  std::string path;
  bool has_types = false;
  std::vector<ItemTally> items;   // scoreable items (ground truth known), file order
  int64_t excluded_unknown = 0;   // items without a usable ground truth
  int64_t missing = 0;            // scoreable items without any completion
  int64_t no_solution_items = 0;  // scoreable items whose truth is infeasible/unbounded
  int64_t samples = 0;
  std::array<int64_t, kNumCategories> categories{};
};

// Mean over items of c/n (0 for items without samples), in percent.
double pass1_percent(const std::vector<const ItemTally*>& items);
// Mean unbiased pass@k over items with n >= k (items with 0 < n < k are left
// out and counted in `excluded`; items with n = 0 count as 0), in percent.
double passk_percent(const std::vector<const ItemTally*>& items, int k, int64_t& excluded);

// report.json: {"benchmarks": {NAME: {"n", "pass@1", ["pass@K"], ...}}, "macro", "micro",
// "errors", "execution_rate", ...}; `extra` is merged in at the top level.
nlohmann::json build_report(const std::vector<BenchTally>& benches, int k,
                            const nlohmann::json& extra);
std::string render_markdown(const nlohmann::json& report);

}  // namespace trex::orlib::eval
