#pragma once
// Generated corpora that exercise the harness: hostile completions (loops,
// fork bombs, allocation bombs, output floods, crashes, malformed and huge
// models, ...), gold-free completions for real benchmark files, and
// benchmark-sized models for throughput measurements.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/or/eval/grade.hpp"

namespace trex::orlib::eval {

struct HostileCase {
  std::string id;
  std::string kind;
  std::string completion;
  std::vector<Category> expected;  // acceptable verdicts (ground truth is 42)
};

struct HostileFlags {
  bool writes_confined = false;   // Landlock confines writes: escaping writes must fail
  bool signals_confined = false;  // kill(parent) / kill(-1) cannot reach the harness
};

// The kinds, in generation order (case i has kind i % kinds).
const std::vector<std::string>& hostile_kinds(const HostileFlags& flags);
std::vector<HostileCase> hostile_corpus(int64_t n, uint64_t seed, const HostileFlags& flags);

struct HostileOptions {
  int64_t n = 1000;
  uint64_t seed = 1;
  std::string out_dir;
  int jobs = 0;
  double timeout = 2.0;
  uint64_t memory_mb = 512;
  int max_processes = 32;
  std::string python = "python3";
  unsigned sandbox_uid = 61000;
  bool progress = true;
  std::string temp_root;
};
// Writes OUT/hostile_bench.jsonl and OUT/hostile_completions.jsonl, evaluates
// them into OUT/eval/, and returns (and writes to OUT/hostile_summary.json):
// cases, classified, unexpected verdicts, verdicts per kind, harness peak RSS,
// wall time.
nlohmann::json run_hostile(const HostileOptions& options);

// Gold-free completions for every item of the given benchmark files, cycling
// through: empty, prose without code, a MathProg model with a constant wrong
// objective, an infeasible CPLEX LP model, a Python script printing a number
// (only when `with_python`). Never looks at the answers. Returns the count.
int64_t write_gold_free_completions(const std::vector<std::string>& bench_paths,
                                    const std::string& out_path, bool with_python);

struct ThroughputOptions {
  int64_t n = 400;        // MathProg and LP completions each
  int64_t n_python = 40;  // Python completions
  int jobs = 2;
  std::string python = "python3";
  uint64_t seed = 1;
  unsigned sandbox_uid = 61000;
  std::string out_dir;
  bool progress = false;
  std::string temp_root;
};
// Benchmark-sized models with planted optima (8x8 assignment MIPs, bounded LPs
// with 40 variables and 40 rows; PuLP versions of the assignment when PuLP is
// installed, else plain Python): completions per second and verdicts.
nlohmann::json run_throughput(const ThroughputOptions& options);

}  // namespace trex::orlib::eval
