#pragma once
// The planner's validation against published training runs, and the ablation
// of the report's V4-Pro recipe (baseline-like -> tuned) by lever. The layouts
// are the published ones; the efficiencies are the cluster files' defaults —
// no per-point factor. See docs/planner.md.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "trex/plan/planner.hpp"

namespace trex::plan {

// Calibration points were used to set a knob of the planner (an efficiency,
// the end-to-end goodput, a job assumption): agreeing with them is by
// construction. Validation points were never used to set anything: they are
// the evidence.
enum class PointRole { kCalibration, kValidation };

struct ValidationPoint {
  std::string name;
  std::string model_file;   // relative to the repository root
  int64_t mtp_layers = -1;  // the run's MTP layers when it differs from the file's; -1: as the file
  std::string cluster_file;  // relative to the repository root
  Job job;
  Layout layout;
  std::string metric;  // "mfu", "model_tflops" or "step_seconds"
  double published = 0;
  std::string source;
  // The published figure is a whole run's tokens over its total GPU-hours
  // (wall clock, not steady-state steps): evaluated with Job::goodput =
  // kEndToEndGoodput. Per-iteration logs and benchmarks: false (goodput 1).
  bool end_to_end = false;
  PointRole role = PointRole::kValidation;
  std::string sets;  // calibration points: the knob(s) this point set, and to what
};

struct ValidationRow {
  ValidationPoint point;
  Estimate estimate;
  double predicted = 0;
  double ratio = 0;  // predicted / published
  // The memory model's verdict on the published layout. A published run did
  // fit; "does not fit" here is an error of the memory model, and the row
  // never counts as agreeing.
  bool fits_memory = false;
  bool within_20_percent = false;  // runnable, fits and |ratio − 1| <= 0.2
  double error() const { return ratio > 0 ? std::abs(ratio - 1) : 1; }
};

// Median and worst |predicted/published − 1| over the rows of one role.
struct ErrorSummary {
  size_t points = 0;
  double median = 0;
  double worst = 0;
  std::string worst_point;
};
ErrorSummary summarize_errors(const std::vector<ValidationRow>& rows, PointRole role);

std::vector<ValidationPoint> validation_points();
std::vector<ValidationRow> run_validation(const std::string& repo_root);
// `point` on its model and cluster (edit_cluster, when given, changes the
// cluster first: a sensitivity); goodput kEndToEndGoodput for end_to_end
// points, otherwise the point's job.goodput (1 unless set).
ValidationRow evaluate_point(const ValidationPoint& point, const std::string& repo_root,
                             const std::function<void(ClusterSpec&)>& edit_cluster = {});

// One assumption of the planner varied over a range: the affected points'
// predictions (and the V4-Pro ablation's speed-up) at each value.
struct SensitivityRow {
  std::string knob;   // what was varied
  std::string value;  // at this value ("*" marks the default)
  std::string point;  // the affected point (or "V4-Pro ablation")
  double predicted = 0;
  double ratio = 0;  // predicted / published (the ablation: speed-up / 2.93)
};
std::vector<SensitivityRow> run_sensitivity(const std::string& repo_root);

// Every cluster-file figure whose source is an assumption, scaled by each
// factor in every file that assumes it (calibrated knobs not re-fitted): the
// validation points' median and worst error at each scale.
struct AssumptionRow {
  std::string field;  // "efficiency.attention"
  int64_t files = 0;  // cluster files that label it an assumption
  std::vector<double> factors;
  std::vector<ErrorSummary> validation;  // one per factor
  std::vector<double> ablation_speedup;  // V4-Pro tuned / baseline-like MFU, one per factor
  // false: the scaled value left the field's range in some file, which kept
  // its value (the column reads "out of the field's range").
  std::vector<bool> in_range;
};
std::vector<AssumptionRow> run_assumption_sensitivity(const std::string& repo_root,
                                                      std::vector<double> factors = {0.8, 1.2});
std::string format_assumption_sensitivity(const std::vector<AssumptionRow>& rows);

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
std::string format_sensitivity(const std::vector<SensitivityRow>& rows);
// Every efficiency of the clusters the points use, with its source (or
// "assumption: ..."), from the cluster files' `sources`.
std::string format_knob_sources(const std::vector<ValidationRow>& rows,
                                const std::string& repo_root);
std::string format_ablation(const std::vector<AblationRow>& rows);

}  // namespace trex::plan
