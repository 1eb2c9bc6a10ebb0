#pragma once
// Builder for the R-ALG representation: an algebraic formulation in the fixed
// order Sets -> Parameters -> Decision variables -> Objective -> Constraints,
// as Markdown with LaTeX math.
#include <string>
#include <utility>
#include <vector>

namespace trex::orlib {

class AlgebraicFormulation {
 public:
  explicit AlgebraicFormulation(std::string title) : title_(std::move(title)) {}

  // "$I = \{1,\dots,8\}$" + "items"
  AlgebraicFormulation& set(std::string math, std::string meaning);
  // "$w_i$" + "weight of item $i$ (kg)" + optional instance values "(12, 5, 8)"
  AlgebraicFormulation& parameter(std::string math, std::string meaning, std::string values = {});
  // "$x_i \in \{0,1\}$" + "1 if item $i$ is packed"
  AlgebraicFormulation& variable(std::string math, std::string meaning);
  // "\max \sum_{i \in I} v_i x_i" (display math, no dollars) + meaning
  AlgebraicFormulation& objective(std::string math, std::string meaning);
  // name + display math (no dollars), e.g. "capacity", "\sum_i w_i x_i \le W"
  AlgebraicFormulation& constraint(std::string name, std::string math);

  std::string markdown() const;

 private:
  std::string title_;
  std::vector<std::pair<std::string, std::string>> sets_;
  std::vector<std::pair<std::string, std::string>> parameters_;
  std::vector<std::pair<std::string, std::string>> variables_;
  std::string objective_math_;
  std::string objective_meaning_;
  std::vector<std::pair<std::string, std::string>> constraints_;
};

// A set's elements in LaTeX: "\{\text{trade\_show}, \text{TV\_spot}\}".
std::string latex_set(const std::vector<std::string>& elements);
// One symbol in LaTeX math: "\text{trade\_show}".
std::string latex_name(const std::string& symbol);
// "(12, 5, 8)" from numbers.
std::string latex_vector(const std::vector<double>& values);
// Rows "(1, 2; 3, 4)" style for small matrices.
std::string latex_matrix(const std::vector<std::vector<double>>& values);

}  // namespace trex::orlib
