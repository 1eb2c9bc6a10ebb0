#include "trex/or/eval/grade.hpp"

#include <cfenv>
#include <charconv>
#include <cstdlib>

#include "trex/core/error.hpp"
#include "trex/core/strings.hpp"

namespace trex::orlib::eval {

const char* to_string(Category category) {
  switch (category) {
    case Category::no_code:
      return "no_code";
    case Category::extraction_failed:
      return "extraction_failed";
    case Category::syntax_error:
      return "syntax_error";
    case Category::runtime_error:
      return "runtime_error";
    case Category::runtime_missing:
      return "runtime_missing";
    case Category::timeout:
      return "timeout";
    case Category::infeasible:
      return "infeasible";
    case Category::unbounded:
      return "unbounded";
    case Category::wrong_objective:
      return "wrong_objective";
    case Category::correct:
      return "correct";
  }
  return "runtime_error";
}

const std::array<Category, kNumCategories>& all_categories() {
  static const std::array<Category, kNumCategories> all = {
      Category::no_code,       Category::extraction_failed, Category::syntax_error,
      Category::runtime_error, Category::runtime_missing,   Category::timeout,
      Category::infeasible,    Category::unbounded,         Category::wrong_objective,
      Category::correct};
  return all;
}

Category parse_category(std::string_view name) {
  for (Category c : all_categories())
    if (name == to_string(c)) return c;
  throw Error("unknown category '" + std::string(name) + "'");
}

bool executed(Category category) {
  return category == Category::infeasible || category == Category::unbounded ||
         category == Category::wrong_objective || category == Category::correct;
}

const char* to_string(Reported status) {
  switch (status) {
    case Reported::none:
      return "none";
    case Reported::optimal:
      return "optimal";
    case Reported::infeasible:
      return "infeasible";
    case Reported::unbounded:
      return "unbounded";
    case Reported::infeasible_or_unbounded:
      return "infeasible_or_unbounded";
  }
  return "none";
}

const char* to_string(Rule rule) {
  switch (rule) {
    case Rule::rel1e6:
      return "rel1e-6";
    case Rule::rel1e4:
      return "rel1e-4";
    case Rule::abs1e2:
      return "abs1e-2";
    case Rule::orlm:
      return "orlm";
    case Rule::mamo:
      return "mamo";
  }
  return "rel1e-6";
}

const std::vector<Rule>& all_rules() {
  static const std::vector<Rule> rules = {Rule::rel1e6, Rule::rel1e4, Rule::abs1e2, Rule::orlm,
                                          Rule::mamo};
  return rules;
}

Rule parse_rule(std::string_view name) {
  std::string lower = to_lower(name);
  for (Rule r : all_rules())
    if (lower == to_string(r)) return r;
  std::vector<std::string> names;
  for (Rule r : all_rules()) names.emplace_back(to_string(r));
  throw Error("unknown rule '" + std::string(name) + "' (expected one of: " + join(names, ", ") +
              ")")
      .field("--rule");
}

std::string rule_description(Rule rule) {
  switch (rule) {
    case Rule::rel1e6:
      return "|pred-gt|/(|gt|+1) <= 1e-6 (SIRL, OptiMind, OptMATH paper)";
    case Rule::rel1e4:
      return "|pred-gt|/(|gt|+1) <= 1e-4";
    case Rule::abs1e2:
      return "|pred-gt| <= 1e-2 (ORThought)";
    case Rule::orlm:
      return "both rounded to integers (half to even), |rp-rg|/|rg| <= 0.05; rg = 0: |rp| <= "
             "0.05 (ORLM)";
    case Rule::mamo:
      return "|pred-gt| < 1e-2 or |pred-gt|/|gt| <= 1e-4 (MAMO)";
  }
  return "";
}

namespace {
// Python's round(): to nearest, ties to even.
double round_half_even(double v) {
  const int previous = std::fegetround();
  std::fesetround(FE_TONEAREST);
  double r = std::nearbyint(v);
  std::fesetround(previous);
  return r;
}
}  // namespace

bool objective_matches(Rule rule, double predicted, double truth) {
  if (!std::isfinite(predicted) || !std::isfinite(truth)) return false;
  const double diff = std::fabs(predicted - truth);
  switch (rule) {
    case Rule::rel1e6:
      return diff / (std::fabs(truth) + 1.0) <= 1e-6;
    case Rule::rel1e4:
      return diff / (std::fabs(truth) + 1.0) <= 1e-4;
    case Rule::abs1e2:
      return diff <= 1e-2;
    case Rule::orlm: {
      const double rp = round_half_even(predicted);
      const double rg = round_half_even(truth);
      if (rg == 0.0) return std::fabs(rp) <= 0.05;
      return std::fabs((rp - rg) / rg) <= 0.05;
    }
    case Rule::mamo:
      if (diff < 1e-2) return true;
      return truth != 0.0 && diff / std::fabs(truth) <= 1e-4;
  }
  return false;
}

const char* to_string(TruthKind kind) {
  switch (kind) {
    case TruthKind::optimal:
      return "optimal";
    case TruthKind::no_solution:
      return "no_solution";
    case TruthKind::unknown:
      return "unknown";
  }
  return "unknown";
}

bool parse_double(std::string_view text, double& out) {
  std::string s = trim(text);
  if (s.empty()) return false;
  std::string cleaned;
  cleaned.reserve(s.size());
  for (char c : s)
    if (c != ',' && c != '_') cleaned += c;
  if (!cleaned.empty() && cleaned[0] == '+') cleaned.erase(0, 1);
  const char* begin = cleaned.data();
  const char* end = begin + cleaned.size();
  auto [ptr, ec] = std::from_chars(begin, end, out);
  if (ec != std::errc() || ptr != end) {
    std::string lower = to_lower(cleaned);
    if (lower == "inf" || lower == "infinity") {
      out = std::numeric_limits<double>::infinity();
      return true;
    }
    if (lower == "-inf" || lower == "-infinity") {
      out = -std::numeric_limits<double>::infinity();
      return true;
    }
    return false;
  }
  return true;
}

GroundTruth ground_truth(const nlohmann::json& record, bool sentinel_as_unknown) {
  GroundTruth gt;
  auto read_answer = [&](double& value) {
    auto it = record.find("answer");
    if (it == record.end()) return false;
    if (it->is_number()) {
      value = it->get<double>();
      return std::isfinite(value);
    }
    if (it->is_string()) return parse_double(it->get<std::string>(), value) && std::isfinite(value);
    return false;
  };
  auto st = record.find("answer_status");
  gt.status = st != record.end() && st->is_string() ? st->get<std::string>() : "";
  if (gt.status == "optimal" || gt.status.empty()) {
    double v;
    if (read_answer(v)) {
      gt.kind = TruthKind::optimal;
      gt.value = v;
    } else {
      gt.kind = TruthKind::unknown;
    }
  } else if (gt.status == "infeasible_or_unbounded" || gt.status == "infeasible" ||
             gt.status == "unbounded") {
    gt.kind = TruthKind::no_solution;
  } else if (gt.status == "sentinel_no_solution") {
    gt.kind = sentinel_as_unknown ? TruthKind::unknown : TruthKind::no_solution;
  } else {
    gt.kind = TruthKind::unknown;
  }
  return gt;
}

Category grade(Rule rule, const GroundTruth& truth, Reported status, double objective) {
  const bool no_solution_reported = status == Reported::infeasible ||
                                    status == Reported::unbounded ||
                                    status == Reported::infeasible_or_unbounded;
  if (truth.kind == TruthKind::no_solution) {
    if (no_solution_reported) return Category::correct;
    return Category::wrong_objective;
  }
  switch (status) {
    case Reported::infeasible:
    case Reported::infeasible_or_unbounded:
      return Category::infeasible;
    case Reported::unbounded:
      return Category::unbounded;
    case Reported::none:
      return Category::wrong_objective;
    case Reported::optimal:
      return objective_matches(rule, objective, truth.value) ? Category::correct
                                                             : Category::wrong_objective;
  }
  return Category::wrong_objective;
}

double pass_at_k(int n, int c, int k) {
  if (k < 1 || n < k || c < 0 || c > n) throw Error("pass@k needs 1 <= k <= n and 0 <= c <= n");
  if (n - c < k) return 1.0;
  // 1 - prod_{i = n-c+1}^{n} (1 - k / i): numerically stable, no binomials.
  double fail = 1.0;
  for (int i = n - c + 1; i <= n; ++i) fail *= 1.0 - static_cast<double>(k) / i;
  return 1.0 - fail;
}

}  // namespace trex::orlib::eval
