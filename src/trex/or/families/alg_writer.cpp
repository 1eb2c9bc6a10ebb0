#include "trex/or/families/alg_writer.hpp"

#include "trex/core/strings.hpp"

namespace trex::orlib {

AlgebraicFormulation& AlgebraicFormulation::set(std::string math, std::string meaning) {
  sets_.emplace_back(std::move(math), std::move(meaning));
  return *this;
}

AlgebraicFormulation& AlgebraicFormulation::parameter(std::string math, std::string meaning,
                                                      std::string values) {
  if (!values.empty()) meaning += "; values: " + values;
  parameters_.emplace_back(std::move(math), std::move(meaning));
  return *this;
}

AlgebraicFormulation& AlgebraicFormulation::variable(std::string math, std::string meaning) {
  variables_.emplace_back(std::move(math), std::move(meaning));
  return *this;
}

AlgebraicFormulation& AlgebraicFormulation::objective(std::string math, std::string meaning) {
  objective_math_ = std::move(math);
  objective_meaning_ = std::move(meaning);
  return *this;
}

AlgebraicFormulation& AlgebraicFormulation::constraint(std::string name, std::string math) {
  constraints_.emplace_back(std::move(name), std::move(math));
  return *this;
}

std::string AlgebraicFormulation::markdown() const {
  std::string out = "## " + title_ + "\n\n### Sets\n";
  for (const auto& [m, t] : sets_) out += "- " + m + ": " + t + "\n";
  out += "\n### Parameters\n";
  for (const auto& [m, t] : parameters_) out += "- " + m + ": " + t + "\n";
  out += "\n### Decision variables\n";
  for (const auto& [m, t] : variables_) out += "- " + m + ": " + t + "\n";
  out += "\n### Objective\n" + objective_meaning_ + ":\n$$" + objective_math_ + "$$\n";
  out += "\n### Constraints\n";
  for (const auto& [name, m] : constraints_) out += "- " + name + ": $$" + m + "$$\n";
  return out;
}

std::string latex_name(const std::string& symbol) {
  return "\\text{" + replace_all(symbol, "_", "\\_") + "}";
}

std::string latex_set(const std::vector<std::string>& elements) {
  std::vector<std::string> parts;
  parts.reserve(elements.size());
  for (const auto& e : elements) parts.push_back(latex_name(e));
  return "\\{" + join(parts, ", ") + "\\}";
}

std::string latex_vector(const std::vector<double>& values) {
  std::vector<std::string> parts;
  parts.reserve(values.size());
  for (double v : values) parts.push_back(format_number(v));
  return "(" + join(parts, ", ") + ")";
}

std::string latex_matrix(const std::vector<std::vector<double>>& values) {
  std::vector<std::string> rows;
  for (const auto& r : values) {
    std::vector<std::string> parts;
    for (double v : r) parts.push_back(format_number(v));
    rows.push_back(join(parts, ", "));
  }
  return "(" + join(rows, "; ") + ")";
}

}  // namespace trex::orlib
