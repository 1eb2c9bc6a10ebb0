#pragma once
// `trex or eval`: grades completions against benchmark files and writes
// items.jsonl, report.json and report.md (see docs/or-eval.md).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/or/eval/extract.hpp"
#include "trex/or/eval/grade.hpp"

namespace trex::orlib::eval {

struct EvalOptions {
  std::vector<std::string> bench_paths;
  std::string completions_path;
  std::string out_dir;
  Rule rule = Rule::rel1e6;
  int k = 1;
  int jobs = 0;           // 0: one per core
  double timeout = 60.0;  // wall and CPU seconds per completion
  std::string python = "python3";
  CodeKind format = CodeKind::none;  // extraction hint (none = auto)
  std::string solver = "glpk";       // MathProg/LP: glpk | cbc
  uint64_t memory_mb = 4096;
  int max_processes = 64;
  unsigned sandbox_uid = 61000;  // root only; 0 keeps root
  bool sentinel_as_unknown = false;
  bool progress = true;
  // Bad lines of the benchmark and completion files: false skips and counts
  // them (report.json "input"), true makes the first one a trex::Error.
  bool strict = false;
  std::string temp_root;  // parent of sandbox directories (default $TMPDIR or /tmp)
};

// Runs the whole evaluation; returns report.json's content. Its "input"
// section counts the lines read, skipped and repaired per file; "skipped_lines"
// is their total (a command exits with kExitRecordsSkipped when it is > 0).
nlohmann::json run_eval(const EvalOptions& options);

// The default number of jobs: online cores.
int default_jobs();

}  // namespace trex::orlib::eval
