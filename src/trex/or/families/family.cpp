#include "trex/or/families/family.hpp"

#include <cmath>

#include "trex/core/error.hpp"
#include "trex/core/strings.hpp"

namespace trex::orlib {

const char* to_string(Difficulty d) {
  switch (d) {
    case Difficulty::easy:
      return "easy";
    case Difficulty::medium:
      return "medium";
    case Difficulty::hard:
      return "hard";
  }
  return "medium";
}

Difficulty parse_difficulty(std::string_view text) {
  if (text == "easy") return Difficulty::easy;
  if (text == "medium") return Difficulty::medium;
  if (text == "hard") return Difficulty::hard;
  throw Error("unknown difficulty '" + std::string(text) + "' (expected easy, medium or hard)")
      .field("difficulty");
}

const char* to_string(ProblemClass c) {
  switch (c) {
    case ProblemClass::lp:
      return "LP";
    case ProblemClass::ip:
      return "IP";
    case ProblemClass::milp:
      return "MILP";
  }
  return "LP";
}

int choose_template(Rng& rng, const GenOptions& options, int template_count) {
  if (options.nl_template < 0) return rng.uniform_int(0, template_count - 1);
  if (options.nl_template >= template_count)
    throw Error("template " + std::to_string(options.nl_template) + " out of range (family has " +
                std::to_string(template_count) + ")")
        .field("nl_template");
  return options.nl_template;
}

int size_for(Rng& rng, Difficulty d, std::pair<int, int> easy, std::pair<int, int> medium,
             std::pair<int, int> hard) {
  auto r = d == Difficulty::easy ? easy : d == Difficulty::medium ? medium : hard;
  return rng.uniform_int(r.first, r.second);
}

std::string column_name(std::string_view var, const std::vector<std::string>& index) {
  std::string name(var);
  if (!index.empty()) name += "[" + join(index, ",") + "]";
  return name;
}

Solution Solution::from_columns(double objective, const std::vector<std::string>& names,
                                const std::vector<double>& x) {
  require(names.size() == x.size(), "Solution::from_columns: names and values differ in length");
  std::unordered_map<std::string, double> values;
  values.reserve(names.size());
  for (size_t j = 0; j < names.size(); ++j) values.emplace(names[j], x[j]);
  return Solution(objective, std::move(values));
}

double Solution::value(std::string_view var, std::initializer_list<std::string_view> index) const {
  std::string name(var);
  if (index.size() > 0) {
    name += '[';
    bool first = true;
    for (auto part : index) {
      if (!first) name += ',';
      name += part;
      first = false;
    }
    name += ']';
  }
  auto it = values_.find(name);
  return it == values_.end() ? 0.0 : it->second;
}

double Solution::value(std::string_view var, const std::vector<std::string>& index) const {
  auto it = values_.find(column_name(var, index));
  return it == values_.end() ? 0.0 : it->second;
}

double Checker::slack(double a, double b) const {
  return tol_ * std::max({1.0, std::fabs(a), std::fabs(b)});
}

void Checker::record(const std::string& message) {
  ++violations_;
  if (messages_.size() < 5) messages_.push_back(message);
}

void Checker::le(double lhs, double rhs, const std::string& what) {
  if (lhs > rhs + slack(lhs, rhs))
    record(what + ": " + format_number(lhs) + " > " + format_number(rhs));
}

void Checker::ge(double lhs, double rhs, const std::string& what) {
  if (lhs < rhs - slack(lhs, rhs))
    record(what + ": " + format_number(lhs) + " < " + format_number(rhs));
}

void Checker::eq(double lhs, double rhs, const std::string& what) {
  if (std::fabs(lhs - rhs) > slack(lhs, rhs))
    record(what + ": " + format_number(lhs) + " != " + format_number(rhs));
}

void Checker::integral(double v, const std::string& what) {
  if (std::fabs(v - std::round(v)) > 1e-6) record(what + " is not integral: " + format_number(v));
}

void Checker::binary(double v, const std::string& what) {
  if (std::fabs(v) > 1e-6 && std::fabs(v - 1.0) > 1e-6)
    record(what + " is not binary: " + format_number(v));
}

void Checker::fail(const std::string& what) {
  record(what);
}

CheckResult Checker::result(double objective) const {
  CheckResult r;
  r.feasible = violations_ == 0;
  r.violations = messages_;
  if (violations_ > static_cast<int>(messages_.size()))
    r.violations.push_back(
        "... and " + std::to_string(violations_ - static_cast<int>(messages_.size())) + " more");
  r.objective = objective;
  return r;
}

}  // namespace trex::orlib
