#pragma once
// The planner's validation against published training runs, and the ablation
// of the report's V4-Pro recipe (baseline-like -> tuned) by lever. The layouts
// are the published ones; the efficiencies are the cluster files' defaults —
// no per-point factor. See docs/planner.md.
#include <string>
#include <vector>

#include "trex/plan/planner.hpp"

namespace trex::plan {

struct ValidationPoint {
  std::string name;
  std::string model_file;    // relative to the repository root
  std::string cluster_file;  // relative to the repository root
  Job job;
  Layout layout;
  std::string metric;  // "mfu" or "model_tflops"
  double published = 0;
  std::string source;
  // The published figure is a whole run's tokens over its total GPU-hours
  // (wall clock, not steady-state steps): evaluated with Job::goodput =
  // kEndToEndGoodput. Per-iteration logs and benchmarks: false (goodput 1).
  bool end_to_end = false;
};

struct ValidationRow {
  ValidationPoint point;
  Estimate estimate;
  double predicted = 0;
  double ratio = 0;  // predicted / published
  bool within_20_percent = false;
};

std::vector<ValidationPoint> validation_points();
std::vector<ValidationRow> run_validation(const std::string& repo_root);

// V4-Pro on the 910C cluster: the open-source-baseline-like recipe, the tuned
// recipe, and the steps between them, one lever group at a time.
struct AblationRow {
  std::string step;   // what was switched on
  std::string lever;  // "placement/parallelism", "overlap", "kernels/memory"
  Estimate estimate;
  double speedup_vs_previous = 0;
  double share_of_gain = 0;  // this step's share of log(total speedup)
};
Layout v4_pro_baseline_layout();
Layout v4_pro_tuned_layout();
Job v4_pro_job();
std::vector<AblationRow> run_ablation(const std::string& repo_root);

std::string format_validation(const std::vector<ValidationRow>& rows);
std::string format_ablation(const std::vector<AblationRow>& rows);

}  // namespace trex::plan
