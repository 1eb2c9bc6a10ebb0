#pragma once
// The solver facade: an in-memory LP/MIP built by GLPK from GNU MathProg or
// CPLEX LP text, solved by GLPK and by COIN-OR CBC from the *same* in-memory
// rows and columns (never through LP text, whose dialects differ between the
// two readers), with typed statuses and per-solve time limits.
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "trex/core/error.hpp"

struct glp_prob;
struct glp_tran;

namespace trex::orlib {

enum class SolveStatus { optimal, infeasible, unbounded, time_limit, error };
const char* to_string(SolveStatus status);

struct SolveOptions {
  double time_limit_seconds = 10.0;
};

struct SolveResult {
  SolveStatus status = SolveStatus::error;
  double objective = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> x;  // primal values in model column order (empty unless optimal)
  double seconds = 0.0;
  std::string message;  // why, when status is not optimal
  std::string output;   // text printed by the model's statements after `solve;` (GLPK only)
};

// A MathProg translation or LP-read failure. message() holds GLPK's own
// diagnostics; line_number() is the first line GLPK complained about.
class ModelError : public Error {
 public:
  using Error::Error;
  // Keep the static type when chaining, so `throw ModelError(..).file(..)` throws a ModelError.
  ModelError& file(std::string path) {
    Error::file(std::move(path));
    return *this;
  }
  ModelError& line(long number) {
    Error::line(number);
    return *this;
  }
};

class LinearModel {
 public:
  // GLPK 5.0's MathProg translator asserts (abort()) on some malformed models
  // (fuzz/known_crashes/mathprog). For text from outside (user files, problem
  // records, injected faults) `checked_in_child` translates it in a forked child
  // first, so such a model is a ModelError instead of the end of the process;
  // the program's own generated models skip the fork.
  enum class Translator { in_process, checked_in_child };

  // `name` is used in diagnostics in place of any temporary file path.
  static LinearModel from_mathprog(const std::string& text, const std::string& name = "model.mod",
                                   Translator translator = Translator::in_process);
  static LinearModel from_mathprog_file(const std::string& model_path,
                                        const std::string& data_path = {},
                                        Translator translator = Translator::in_process);
  static LinearModel from_lp(const std::string& text, const std::string& name = "model.lp");
  static LinearModel from_lp_file(const std::string& path);

  LinearModel(LinearModel&& other) noexcept;
  LinearModel& operator=(LinearModel&& other) noexcept;
  LinearModel(const LinearModel&) = delete;
  LinearModel& operator=(const LinearModel&) = delete;
  ~LinearModel();

  int num_rows() const;
  int num_cols() const;
  int num_nonzeros() const;
  int num_integer() const;  // including binaries
  int num_binary() const;
  bool is_mip() const { return num_integer() > 0; }
  bool maximize() const;
  const std::vector<std::string>& column_names() const { return column_names_; }
  const std::string& name() const { return name_; }
  // Translator/reader messages (warnings included) from building the model.
  const std::string& build_log() const { return build_log_; }

  // CPLEX LP text as written by GLPK. GLPK's writer keeps an objective constant
  // only as a comment; `objective_constant()` reports it.
  std::string to_cplex_lp() const;
  double objective_constant() const;

  // GLPK simplex (+ branch-and-cut for MIPs). For MathProg models, statements
  // after `solve;` run on the optimal solution and their output is captured.
  SolveResult solve_glpk(const SolveOptions& options = {});
  // CBC (CLP + branch-and-cut) on a copy of the same rows and columns.
  SolveResult solve_cbc(const SolveOptions& options = {}) const;

  // Sensitivity analysis of the last solve_glpk() call. For an LP solved to
  // optimality: row activities, shadow prices (row duals), reduced costs and,
  // while GLPK's basis factorisation exists, objective-coefficient ranges of
  // the columns. For a MIP: activities at the integer optimum, binding flags,
  // no duals (`has_duals` false). Throws trex::Error when there is no optimum.
  struct RowSensitivity {
    std::string name;
    double activity = 0.0;
    double lower = 0.0;    // -inf when free below
    double upper = 0.0;    // +inf when free above
    double dual = 0.0;     // shadow price (0 for a MIP)
    bool binding = false;  // activity at a finite bound (within 1e-7 relative)
  };
  struct ColumnSensitivity {
    std::string name;
    double value = 0.0;
    double objective_coef = 0.0;
    double reduced_cost = 0.0;
    bool has_range = false;  // objective coefficient range keeping the basis optimal
    double coef_lower = 0.0;
    double coef_upper = 0.0;
  };
  struct Sensitivity {
    bool has_duals = false;
    std::vector<RowSensitivity> rows;
    std::vector<ColumnSensitivity> columns;
  };
  Sensitivity sensitivity() const;

 private:
  LinearModel() = default;
  void read_column_names();

  glp_prob* prob_ = nullptr;
  glp_tran* tran_ = nullptr;  // MathProg workspace, kept for post-solve statements
  std::string name_;
  std::string build_log_;
  std::vector<std::string> column_names_;
};

}  // namespace trex::orlib
