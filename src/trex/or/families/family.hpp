#pragma once
// An OR problem family: a parametric generator that plants a feasible
// solution, a solver-independent checker, and renderers to the three problem
// representations (R-NL word problem, R-ALG algebraic formulation, R-EXE GNU
// MathProg model with its data). See docs/or-synth.md.
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trex/core/rng.hpp"

namespace trex::orlib {

using json = nlohmann::json;

enum class Difficulty { easy, medium, hard };
const char* to_string(Difficulty d);
Difficulty parse_difficulty(std::string_view text);  // throws trex::Error

enum class ProblemClass { lp, ip, milp };
const char* to_string(ProblemClass c);

struct GenOptions {
  Difficulty difficulty = Difficulty::medium;
  // Probability of adding each optional "one more realistic condition".
  double side_constraint_rate = 0.35;
  // NL phrasing template to use; -1 picks one at random. The template is chosen
  // at generation time so that names and units agree across representations.
  int nl_template = -1;
};

// Variable values returned by a solver, keyed by MathProg column name
// ("x[P1,R2]", "y[3]", "Z").
class Solution {
 public:
  Solution(double objective, std::unordered_map<std::string, double> values)
      : objective_(objective), values_(std::move(values)) {}
  static Solution from_columns(double objective, const std::vector<std::string>& names,
                               const std::vector<double>& x);

  double objective() const { return objective_; }
  // Value of var[idx...]; 0 when the column is absent (MathProg drops
  // variables that appear in no row or objective).
  double value(std::string_view var, std::initializer_list<std::string_view> index = {}) const;
  double value(std::string_view var, const std::vector<std::string>& index) const;
  const std::unordered_map<std::string, double>& values() const { return values_; }

 private:
  double objective_;
  std::unordered_map<std::string, double> values_;
};

std::string column_name(std::string_view var, const std::vector<std::string>& index);

struct CheckResult {
  bool feasible = true;
  std::vector<std::string> violations;  // first few, human-readable
  double objective = 0.0;               // recomputed from the instance data
};

// Collects constraint violations while a family checks a solution against
// its own data. Tolerances are relative to the magnitude of the terms.
class Checker {
 public:
  explicit Checker(double tolerance = 1e-6) : tol_(tolerance) {}
  void le(double lhs, double rhs, const std::string& what);
  void ge(double lhs, double rhs, const std::string& what);
  void eq(double lhs, double rhs, const std::string& what);
  void integral(double v, const std::string& what);
  void binary(double v, const std::string& what);
  void fail(const std::string& what);
  bool ok() const { return violations_ == 0; }
  CheckResult result(double objective) const;

 private:
  double slack(double a, double b) const;
  void record(const std::string& message);

  double tol_;
  int violations_ = 0;
  std::vector<std::string> messages_;
};

class Instance {
 public:
  virtual ~Instance() = default;
  // Size figures, e.g. {"items": 12, "knapsacks": 2, "side_constraints": 1}.
  virtual json size() const = 0;
  // Names of the optional side constraints this instance carries.
  virtual std::vector<std::string> variants() const { return {}; }
  // The phrasing template this instance was generated with (0 <= id < Family::nl_templates()).
  virtual int nl_template() const = 0;
  // R-NL: the word problem, with every number the model needs.
  virtual std::string nl() const = 0;
  // Identifies the wording of nl() apart from its names and numbers: two
  // instances with the same value read alike. A template family has one form
  // per template; a composed one (phrasing.hpp) one per combination of choices.
  virtual uint64_t surface_form() const { return static_cast<uint64_t>(nl_template()); }
  // R-ALG: Sets -> Parameters -> Decision variables -> Objective -> Constraints.
  virtual std::string alg() const = 0;
  // R-EXE: complete GNU MathProg model + data that prints "Optimal objective: <z>".
  virtual std::string gmpl() const = 0;
  // Validates a solution against the instance's own data (no solver involved)
  // and recomputes its objective value.
  virtual CheckResult check(const Solution& solution) const = 0;
};

class Family {
 public:
  virtual ~Family() = default;
  virtual std::string_view name() const = 0;   // identifier, e.g. "knapsack"
  virtual std::string_view title() const = 0;  // human title
  virtual ProblemClass problem_class() const = 0;
  virtual int nl_templates() const = 0;  // >= 5
  virtual std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const = 0;
};

// Every registered family, in a fixed order.
const std::vector<const Family*>& all_families();
// Looks a family up by name; throws trex::Error listing the known names.
const Family& find_family(std::string_view name);
// Parses "all" or a comma-separated list of family names.
std::vector<const Family*> parse_family_list(std::string_view list);

// Picks the phrasing template: options.nl_template if set (validated), else random.
int choose_template(Rng& rng, const GenOptions& options, int template_count);
// Picks a size from [lo, hi] ranges per difficulty: {easy, medium, hard}.
int size_for(Rng& rng, Difficulty d, std::pair<int, int> easy, std::pair<int, int> medium,
             std::pair<int, int> hard);

}  // namespace trex::orlib
