#pragma once
// What a person planning a job asks of an estimate: for a token budget, the
// steps, wall-clock hours, device-hours and cost; the size of a resumable
// checkpoint and its save/load time; the goodput that failures, checkpoints
// and restarts leave (Young/Daly) instead of one hand-set number; the MFU's
// uncertainty from the validation's measured errors; whether the layout lies
// inside the region the validation covers; and whether `trex train` can run
// it or only the planner models it. (The side-by-side breakdown is in report.hpp.) See
// docs/planner.md ("Planning a job").
#include <string>
#include <vector>

#include "trex/plan/planner.hpp"
#include "trex/plan/validation.hpp"

namespace trex::plan {

struct JobQuestions {
  double tokens = 0;                 // training tokens (0: no budget asked)
  double price_per_device_hour = 0;  // cost per device-hour (0: no cost line)
  double storage_gbps = 0;           // aggregate checkpoint write/read bandwidth, GB/s
  double mtbf_hours = 0;             // mean time between job-stopping failures (0: none)
  double restart_minutes = 10;       // relaunch + checkpoint load + warm-up after a failure
  double checkpoint_minutes = 0;     // interval between checkpoints (0: Young/Daly optimum)
  // SFT rows: real tokens over row tokens when whole samples are packed into
  // rows (0: not asked; the token budget then counts every row token), the
  // same with one sample per row, and where the figures come from.
  double packing_efficiency = 0;
  double unpacked_efficiency = 0;
  std::string packing_from;
};

struct JobAnswers {
  double real_tokens_per_step = 0;  // row tokens × packing efficiency (1 when not asked)
  double steps = 0;
  double steady_hours = 0;   // steps × step time
  double goodput = 1;        // share of wall-clock in steady-state steps
  std::string goodput_from;  // how the goodput was obtained
  double wall_hours = 0;
  double device_hours = 0;
  double cost = 0;
  double checkpoint_bytes = 0;   // master weights + optimizer state (resumable)
  double checkpoint_save_s = 0;  // at storage_gbps (0: not asked)
  double checkpoint_interval_s = 0;
};

// Bytes of a resumable checkpoint: FP32 master weights and the optimizer's
// FP32 state (AdamW: two moments; Muon: momentum) for every parameter.
// FP32 master weights plus the moments (AdamW m, v or Muon momentum) in
// `moment_bytes` each (Job::moment_bytes), for every parameter.
double checkpoint_bytes(const ModelShape& model, Optimizer optimizer, double moment_bytes = 4);

// Young/Daly: with a save time δ and a mean time between failures M, the
// interval τ = sqrt(2·δ·M) minimises the lost share δ/τ + (τ/2 + R)/M
// (R: restart). Returns the goodput 1 − lost share (at least 0) for `interval_s`
// (0: the optimum, which is written back).
double failure_goodput(double save_s, double mtbf_s, double restart_s, double& interval_s);

JobAnswers answer_job(const Estimate& estimate, const ModelShape& model, const Job& job,
                      const JobQuestions& questions);
std::string format_job_answers(const JobAnswers& answers, const JobQuestions& questions,
                               const Job& job);

// The layout features the engine's `trex train` cannot run (TP, CP, ZeRO-3,
// optimizer offload, FP8 GEMMs, selective recompute — full recompute it runs —,
// interleaved or DualPipe schedules): empty when it runs the layout.
std::vector<std::string> planner_only_features(const Layout& layout);

// The region the validation covers: each layout feature's range over the
// published points the planner predicts within ±20% (and whose layout fits).
struct ValidatedRegion {
  int64_t max_tp = 1, max_cp = 1, max_pp = 1, max_ep = 1;
  int max_zero = 0;
  bool offload = false;
  std::vector<Schedule> schedules;
  size_t points = 0;
};
ValidatedRegion validated_region(const std::vector<ValidationRow>& rows);
// What of `layout` lies outside `region` ("CP4 (validated: CP <= 1)").
std::vector<std::string> outside_region(const Layout& layout, const ValidatedRegion& region);

// The MFU band from the validation's errors on validation points: the
// prediction divided by (1 ± median error) and (1 ± worst error).
struct MfuBand {
  double median_low = 0, median_high = 0, worst_low = 0, worst_high = 0;
};
MfuBand mfu_band(double mfu, const ErrorSummary& validation_errors);

}  // namespace trex::plan
