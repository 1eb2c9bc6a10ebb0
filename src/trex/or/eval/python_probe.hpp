#pragma once
// Python completions: the runner/probe script executed next to the
// completion, and how its report and the script's output are read.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "trex/or/eval/grade.hpp"

namespace trex::orlib::eval {

// The trusted runner (written to the sandbox as __trex_run.py): executes
// solution.py as __main__, records every solve call of the supported solver
// libraries, and at exit (also after sys.exit or an uncaught exception)
// writes a JSON report of the model objects found (solve calls, the script's
// globals, then the garbage collector) to fd 3.
const std::string& python_runner_source();

// The preflight script: prints {"version", "executable", "modules": {...}}.
const std::string& python_preflight_source();

// Solver libraries the probe knows (and the preflight looks for).
const std::vector<std::string>& probed_python_modules();

// What the script printed, read with the documented rules: the number after
// the last "objective"/"optimal"/"obj" marker (the first number after the
// first ':' or '=' that follows the marker on its line, else the first number
// after the marker), unless a later "infeasible"/"unbounded"/"no (best|
// feasible) solution" phrase reports a status; fallbacks: the same with
// secondary markers (total, cost, profit, value, minimum, maximum, answer,
// result), then a last output line that is a lone number.
struct PrintedResult {
  Reported status = Reported::none;
  double objective = std::numeric_limits<double>::quiet_NaN();
  std::string how;  // "marker:objective", "status:infeasible", "fallback:last-number", ...
};
PrintedResult parse_printed_result(std::string_view output);

// The probe's choice: status string as written by the probe
// (optimal/feasible/infeasible/unbounded/infeasible_or_unbounded/time_limit/...).
struct ProbeChoice {
  bool found = false;
  std::string lib;
  std::string status;
  double objective = std::numeric_limits<double>::quiet_NaN();
  std::string where;  // solved | globals | gc
};
ProbeChoice probe_choice(const nlohmann::json& report);

// Classifies a Python exception (type name + message) that ended the script.
// Returns runtime_missing for missing modules/solvers/licences, syntax_error
// for compile errors, else runtime_error; `detail` gets a short reason.
Category classify_python_exception(std::string_view type, std::string_view message,
                                   bool compile_phase, std::string& detail);

// The exception type and message of the last traceback in `stderr_text`.
bool last_traceback_exception(std::string_view stderr_text, std::string& type,
                              std::string& message);

}  // namespace trex::orlib::eval
