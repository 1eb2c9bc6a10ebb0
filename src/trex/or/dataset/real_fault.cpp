#include "trex/or/dataset/real_fault.hpp"

#include <vector>

#include "trex/core/strings.hpp"
#include "trex/or/synth/verify.hpp"

namespace trex::orlib {

std::optional<RealFault> first_real_fault(const std::string& gmpl, double objective,
                                          double time_limit, Rng& rng) {
  std::vector<FaultKind> kinds = all_fault_kinds();
  rng.shuffle(kinds);
  for (FaultKind kind : kinds) {
    auto fault = inject_fault(gmpl, kind, rng);
    if (!fault) continue;
    FaultSymptom symptom;
    try {
      LinearModel model = LinearModel::from_mathprog(fault->model, "model.mod",
                                                     LinearModel::Translator::checked_in_child);
      SolveOptions options;
      options.time_limit_seconds = time_limit;
      SolveResult r = model.solve_glpk(options);
      if (r.status == SolveStatus::time_limit || r.status == SolveStatus::error) continue;
      symptom.status = r.status;
      if (r.status != SolveStatus::optimal) {
        symptom.kind = FaultSymptom::Kind::status;
      } else if (!objectives_agree(r.objective, objective)) {
        symptom.kind = FaultSymptom::Kind::objective;
        symptom.objective = r.objective;
      } else {
        continue;  // not a real fault: same status and optimum
      }
    } catch (const ModelError& e) {
      if (!may_fail_translation(kind)) continue;  // the diagnosis would not match
      symptom.kind = FaultSymptom::Kind::translation_error;
      symptom.translation_error = trim(e.message());
    }
    return RealFault{std::move(*fault), std::move(symptom)};
  }
  return std::nullopt;
}

}  // namespace trex::orlib
