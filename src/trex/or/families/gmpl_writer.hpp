#pragma once
// Builders for the R-EXE representation: the `data;` section of a GNU
// MathProg model, and the common epilogue (solve, print the optimum, data).
#include <string>
#include <vector>

namespace trex::orlib {

class GmplData {
 public:
  // set NAME := a b c;
  GmplData& set(const std::string& name, const std::vector<std::string>& elements);
  // param NAME := v;
  GmplData& param(const std::string& name, double value);
  // param NAME := k1 v1  k2 v2 ...;   (one line per key)
  GmplData& param(const std::string& name, const std::vector<std::string>& keys,
                  const std::vector<double>& values);
  // param NAME : c1 c2 ... :=  r1 v11 v12 ...   (a table; rows x cols)
  GmplData& param(const std::string& name, const std::vector<std::string>& rows,
                  const std::vector<std::string>& cols,
                  const std::vector<std::vector<double>>& values);
  // Sparse 2-D parameter: param NAME := [a,b] v ...; entries with default elsewhere.
  GmplData& param_sparse(const std::string& name,
                         const std::vector<std::pair<std::vector<std::string>, double>>& entries);
  // set NAME := (a,b) (c,d) ...;  (a set of pairs)
  GmplData& set_of_tuples(const std::string& name,
                          const std::vector<std::vector<std::string>>& tuples);
  // A raw line, e.g. a comment.
  GmplData& raw(const std::string& line);

  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// Assembles a complete model: `model` (declarations, objective, constraints),
// then `solve;`, a line that prints "Optimal objective: <value>" for the
// objective named `objective_name`, then the data section and `end;`.
std::string compose_gmpl(const std::string& model, const std::string& objective_name,
                         const GmplData& data);

// Elements "P1".."Pn" style names or 1..n as strings.
std::vector<std::string> numbered(const std::string& prefix, int n);

}  // namespace trex::orlib
