#pragma once
// Shared body of the MathProg and CPLEX LP targets: the solver facade builds
// the model with GLPK's translator / LP reader (in process, as `trex or solve`,
// the synthesizer and the dataset builders do), then, for small models, both
// solvers run under a short time limit and the model is written back as LP.
#include <string>

#include "fuzz_common.hpp"
#include "trex/or/solver/linear_model.hpp"

namespace {

using trex::orlib::LinearModel;

void exercise(LinearModel& model) {
  trex::fuzz::check(model.num_cols() >= 0 && model.num_rows() >= 0, "negative dimensions");
  trex::fuzz::check(static_cast<int>(model.column_names().size()) == model.num_cols(),
                    "column names and columns disagree");
  if (model.num_cols() > 64 || model.num_rows() > 64 || model.num_nonzeros() > 512) return;
  trex::orlib::SolveOptions options;
  options.time_limit_seconds = 0.05;
  const trex::orlib::SolveResult glpk = model.solve_glpk(options);
  if (glpk.status == trex::orlib::SolveStatus::optimal) {
    trex::fuzz::check(static_cast<int>(glpk.x.size()) == model.num_cols(), "x has the wrong size");
    trex::fuzz::expect_only_trex_errors([&] { (void)model.sensitivity(); });
  }
  if (!model.is_mip()) (void)model.solve_cbc(options);
  const std::string lp = model.to_cplex_lp();
  trex::fuzz::expect_only_trex_errors([&] { (void)LinearModel::from_lp(lp, "written.lp"); });
}

}  // namespace
