#pragma once
// Training metrics: the per-step record (built from what a step did), its
// sinks (JSONL flushed per line + TensorBoard event files), the log and
// progress text, the summary of a run, and the loss-spike detector of the
// stability guard. docs/training.md, "Metrics of each step".
#include <cmath>
#include <cstdint>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/parallel/communicator.hpp"
#include "trex/train/step.hpp"
#include "trex/train/tensorboard.hpp"

namespace trex::train {

// One record: the step and named scalars (kept in insertion order).
struct MetricsRecord {
  int64_t step = 0;
  std::vector<std::pair<std::string, double>> scalars;
  void set(const std::string& name, double value);  // adds or replaces
  double get(const std::string& name, double fallback = 0.0) const;
};

// Writes OUT/metrics.jsonl ({"step": n, name: value, ...} per line, flushed)
// and OUT/tensorboard/events.out.tfevents.* (every scalar as a TensorBoard tag).
// With `resume_from_step` >= 0 the JSONL keeps only the records of steps <= it
// (rewritten atomically) and appends after them: a resumed run does not
// duplicate the steps the interrupted one logged after its last checkpoint.
class MetricsWriter {
 public:
  MetricsWriter(const std::string& out_dir, int64_t resume_from_step = -1);
  void write(const MetricsRecord& record);
  const std::string& jsonl_path() const { return jsonl_path_; }
  std::string tensorboard_dir() const;
  const std::string& tensorboard_file() const { return tensorboard_->path(); }

 private:
  std::string out_dir_;
  std::string jsonl_path_;
  std::ofstream jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

// z-score of each new value against the mean and (population) standard
// deviation of the previous `window` values; a spike is z > threshold once the
// window is full. Non-finite values are never added.
class SpikeDetector {
 public:
  SpikeDetector(int64_t window, double z_threshold) : window_(window), threshold_(z_threshold) {}
  struct Result {
    bool spike = false;
    double z = 0.0;  // 0 until the window is full
  };
  Result observe(double value);
  nlohmann::json state() const;  // the trailing values (exact doubles)
  void restore(const nlohmann::json& state);

 private:
  int64_t window_;
  double threshold_;
  std::deque<double> values_;
};

// What one optimizer step did, for its metrics record (step_record).
struct StepMetrics {
  int64_t step = 0;
  double loss = 0, lm_loss = 0, mtp_loss = 0, balance_loss = 0;
  bool finite_loss = true;
  double lr = 0;
  bool fault_injected = false;  // debug.inject fired at this step
  double grad_norm = NAN;       // before clipping; NaN when not measured
  bool skipped = false;
  SpikeDetector::Result spike;
  int64_t tokens = 0, consumed_tokens = 0;  // B·S of the step; of the run so far
  double seconds = 0, flops = 0;            // the step's wall time and model FLOPs
  double world_peak_flops = 0;              // FLOP/s of every rank together (the MFU denominator)
  // Multi-rank runs: communication and gradient reduction of the step.
  struct Communication {
    double exposed_seconds = 0, reduce_wait_seconds = 0;
    int64_t groups_overlapped = 0, buckets = 0, buckets_done_in_backward = 0;
    int64_t gradient_bytes = 0;  // the largest gradient memory held during the step
  };
  std::optional<Communication> communication;
  std::optional<double> pipeline_bubble;  // pp > 1: the worst stage's bubble fraction
  std::optional<int64_t> ep_bytes_sent;   // ep > 1: token-row bytes sent to other EP ranks
  // The most bytes of the backend's buffers alive at once during the step on
  // this rank: activations and work arrays (the dry-run's "activations").
  int64_t activation_peak_bytes = 0;
  std::vector<std::vector<int64_t>> expert_load;  // tokens routed to each expert of each block
};

// The losses, gradient norm, skip and expert loads of run_step's `outcome` at `step`.
StepMetrics step_metrics(int64_t step, const StepOutcome& outcome, double mtp_weight);

// The record of a step, scalars in the documented order: losses, lr,
// [fault_injected], grad_norm, skipped, loss_z, spike, throughput and MFU,
// activation_peak_mib, [communication], [pipeline_bubble], [ep_bytes_sent], expert imbalance per
// block and its maximum.
MetricsRecord step_record(const StepMetrics& step);

// The progress bar's text of a record ("loss … lr … tok/s … MFU …%").
std::string progress_text(const MetricsRecord& record);
// The log line of a record: "step N/T loss … (lm …, mtp …) gnorm … lr …" and,
// when `validated`, " val …".
std::string step_log_line(const MetricsRecord& record, int64_t total_steps, bool validated);

// printf-style text of one value ("%.4g" unless told).
std::string format_value(double value, const char* spec = "%.4g");

// The MFU denominator when the run config gives none: the measurement of
// `trex bench peak` on a short budget (sizes 512 and 1024, 3 repeats) on rank 0
// of `world`, broadcast to every rank (a per-rank peak).
double measure_peak_gflops(bool bf16, parallel::Communicator& world);

struct TrainSummary {
  int64_t steps = 0;               // steps done (including skipped ones), cumulative over resumes
  int64_t total_steps = 0;         // the planned total
  int64_t skipped_steps = 0;       // non-finite loss or gradients
  int64_t spikes = 0;              // loss z-score above the threshold
  int64_t data_lines_skipped = 0;  // bad training-file lines skipped (data.strict = false)
  int64_t data_records_repaired = 0;  // records whose strings were repaired to U+FFFD
  int64_t tokens = 0;                 // tokens processed (B·S per micro-batch), cumulative
  int64_t trained_tokens = 0;
  double seconds = 0.0;  // wall time of this run() call
  double tokens_per_second = 0.0;
  double model_tflops = 0.0;  // model FLOP/s of this run() call, in TFLOP/s
  double mfu = 0.0;           // against world size × peak_gflops (a per-rank peak)
  double peak_gflops = 0.0;
  double final_loss = 0.0, final_lm_loss = 0.0, final_mtp_loss = 0.0;
  double final_validation_loss = -1.0;  // < 0: never evaluated
  bool interrupted = false;             // stopped by stop_after_step
  // This process's resident memory: its peak, and what it held before the
  // model was built (libraries, tokenizer, communicator): the part the
  // memory accounting (trex train --dry-run) leaves out.
  int64_t peak_resident_bytes = 0, resident_before_model = 0;
  std::string last_checkpoint;
  std::string metrics_jsonl;
  std::string tensorboard_dir;
  std::vector<std::string> skip_reasons;  // "step N: reason"
};

// "ok" / human-readable multi-line summary for the CLI.
std::string format_summary(const TrainSummary& summary);

}  // namespace trex::train
