#pragma once
// One extracted completion -> one sandbox task -> one outcome. MathProg and LP
// are translated and solved by the T-Rex solver layer inside the sandboxed
// child (GLPK/CBC never run in the harness process); Python runs with the
// user's interpreter next to the trusted runner/probe.
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/or/eval/extract.hpp"
#include "trex/or/eval/grade.hpp"
#include "trex/or/eval/sandbox.hpp"

namespace trex::orlib::eval {

struct RunSettings {
  std::string python;                   // absolute path of the interpreter
  std::vector<std::string> python_env;  // environment of Python tasks
  std::string solver = "glpk";          // for MathProg/LP: glpk | cbc
  SandboxLimits limits;
};

// The Python environment: a fixed, documented set of variables plus a few
// passed through from the harness environment (solver licences, PYTHONPATH...).
std::vector<std::string> python_environment(const std::string& python_path);

struct Outcome {
  bool ran = false;  // executed to completion; the category is then decided by grade()
  Category category = Category::runtime_error;  // when !ran
  Reported status = Reported::none;
  double objective = std::numeric_limits<double>::quiet_NaN();
  std::string objective_source;  // glpk | cbc | probe:<lib> | stdout:<rule> | none
  std::string detail;
  std::string stdout_excerpt;
  std::string stderr_excerpt;
  std::string sandbox_end;
  double wall_seconds = 0.0;
  double cpu_seconds = 0.0;
  long peak_rss_kb = 0;
};

SandboxTask make_task(const Extraction& extraction, const RunSettings& settings);
Outcome interpret(const Extraction& extraction, SandboxResult&& result,
                  const std::string& solver = "glpk");

// The last `max_bytes` of `text` (at a UTF-8 boundary when possible).
std::string excerpt(const std::string& text, size_t max_bytes = 2000);

// Runs the preflight script with `settings.python` in the sandbox; returns its
// JSON ({"version", "executable", "modules"}) or throws trex::Error saying why
// the interpreter cannot be used.
nlohmann::json python_preflight(Sandbox& sandbox, const RunSettings& settings);

}  // namespace trex::orlib::eval
