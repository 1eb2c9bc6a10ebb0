#pragma once
// A fault that really changes what GLPK makes of a model: the first step of
// the CPT debugging narratives and of the SFT repair task.
#include <optional>
#include <string>

#include "trex/core/rng.hpp"
#include "trex/or/dataset/gmpl_edit.hpp"
#include "trex/or/solver/linear_model.hpp"

namespace trex::orlib {

// What GLPK reports for the faulty model instead of the expected optimum.
struct FaultSymptom {
  enum class Kind { status, objective, translation_error };
  Kind kind = Kind::status;
  SolveStatus status = SolveStatus::optimal;  // GLPK's status unless Kind::translation_error
  double objective = 0.0;                     // Kind::objective: the other optimum
  std::string translation_error;              // Kind::translation_error: GLPK's message, trimmed
};

struct RealFault {
  Fault fault;
  FaultSymptom symptom;
};

// Tries the fault kinds in an order drawn from `rng` and returns the first
// that changes GLPK's answer for `gmpl`, whose optimum is `objective`: another
// status, another optimum, or a translation error where that is a faithful
// symptom of the kind. The faulty model is translated in a child process (a
// crash of GLPK's translator is a ModelError) and solved within `time_limit`
// seconds; a solve that runs out of time or fails does not count. nullopt when
// no kind gives a real fault.
std::optional<RealFault> first_real_fault(const std::string& gmpl, double objective,
                                          double time_limit, Rng& rng);

}  // namespace trex::orlib
