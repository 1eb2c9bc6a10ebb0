#pragma once
// Grading: error taxonomy, reported statuses, the tolerance rules used in the
// OR-modelling literature, and the unbiased Pass@k estimator.
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace trex::orlib::eval {

// Final class of one graded sample. The order is the order of report tables.
enum class Category {
  no_code,            // nothing that looks like code
  extraction_failed,  // code-like content, but no executable block could be taken
  syntax_error,       // MathProg translation / LP read / Python compile error
  runtime_error,      // crash, exception, memory/output/disk/process limit
  runtime_missing,    // an imported module or solver is not installed
  timeout,            // wall or CPU time limit (or the solver's own time limit)
  infeasible,         // reported infeasible, ground truth has an optimum
  unbounded,          // reported unbounded, ground truth has an optimum
  wrong_objective,    // ran, but the objective is wrong or missing
  correct,
};
constexpr size_t kNumCategories = 10;
const char* to_string(Category category);
Category parse_category(std::string_view name);  // throws trex::Error
const std::array<Category, kNumCategories>& all_categories();
// The code ran to completion and reported something (or nothing) gradable.
bool executed(Category category);

// What an executed completion reported.
enum class Reported { none, optimal, infeasible, unbounded, infeasible_or_unbounded };
const char* to_string(Reported status);

enum class Rule { rel1e6, rel1e4, abs1e2, orlm, mamo };
const char* to_string(Rule rule);        // "rel1e-6", "rel1e-4", "abs1e-2", "orlm", "mamo"
Rule parse_rule(std::string_view name);  // throws trex::Error listing the names
const std::vector<Rule>& all_rules();
std::string rule_description(Rule rule);
// Whether `predicted` matches `truth` under `rule` (both finite).
bool objective_matches(Rule rule, double predicted, double truth);

// Ground truth of a benchmark record.
enum class TruthKind { optimal, no_solution, unknown };
struct GroundTruth {
  TruthKind kind = TruthKind::unknown;
  double value = std::numeric_limits<double>::quiet_NaN();
  std::string status;  // answer_status as given
};
// From the normalised schema (`answer`, `answer_status`). Records without
// `answer_status` are `optimal` when `answer` is a finite number, else unknown.
// `sentinel_no_solution` counts as no_solution unless `sentinel_as_unknown`.
GroundTruth ground_truth(const nlohmann::json& record, bool sentinel_as_unknown = false);
const char* to_string(TruthKind kind);

// Final category of a sample that executed and reported `status`/`objective`.
Category grade(Rule rule, const GroundTruth& truth, Reported status, double objective);

// Unbiased pass@k for one item with n samples of which c are correct
// (Chen et al. 2021): 1 - C(n-c, k) / C(n, k). Requires 1 <= k <= n.
double pass_at_k(int n, int c, int k);

// Parses a number the way Python's float() does for what scripts print
// (also "1,234.5" with thousands separators). Returns false when it is not one.
bool parse_double(std::string_view text, double& out);

}  // namespace trex::orlib::eval
