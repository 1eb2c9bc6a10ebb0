#pragma once
// `trex or eval --self-test`: (1) every benchmark ground truth graded against
// itself through every rule, in-process and end to end (a MathProg completion
// that fixes the objective at the ground truth, run through the sandbox);
// (2) a built-in set of known-good and known-bad completions in every format
// (MathProg, LP, Python without solver, PuLP) with their expected verdicts.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trex::orlib::eval {

struct SelfTestOptions {
  std::vector<std::string> bench_paths;  // ground-truth sanity; may be empty
  std::string python = "python3";
  int jobs = 0;
  double timeout = 5.0;
  unsigned sandbox_uid = 61000;
  std::string out_dir;  // keeps the runs' outputs when set
  bool progress = false;
  std::string temp_root;
};

struct SelfTestResult {
  int64_t checks = 0;
  int64_t failures = 0;
  std::vector<std::string> failure_lines;
  nlohmann::json json;  // per-part summaries and per-case results
  std::string table;    // human-readable summary
};

SelfTestResult run_self_test(const SelfTestOptions& options);

}  // namespace trex::orlib::eval
