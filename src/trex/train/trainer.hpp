#pragma once
// The trainer (docs/training.md, "The trainer"): full-parameter CPT or SFT of a
// DeepSeek-V4 model from a RunConfig. Each optimizer step (run_step, step.hpp)
// accumulates gradients over global/micro micro-batches (normalised by the
// trained tokens of the whole step), clips, applies the scheduled AdamW/Muon
// update and the aux-loss-free router-bias rule, and records metrics;
// non-finite steps are skipped, loss spikes reported; checkpoints are atomic
// and resumable bitwise. Under mpirun the step's micro-batches are split over
// the data ranks and the gradients reduced in buckets (parallel_gradients.hpp,
// docs/distributed.md); checkpoints do not depend on the parallel layout.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trex/io/tokenizer.hpp"
#include "trex/model/model.hpp"
#include "trex/parallel/communicator.hpp"
#include "trex/parallel/process_grid.hpp"
#include "trex/train/data/source.hpp"
#include "trex/train/metrics.hpp"
#include "trex/train/optim/optimizer.hpp"
#include "trex/train/run_config.hpp"

namespace trex::train {

struct TrainerOptions {
  bool resume = false;           // continue from OUT/checkpoints/latest (error when none)
  bool quiet = false;            // no progress bar and no per-interval log lines
  int64_t stop_after_step = -1;  // >= 0: run() checkpoints and returns after this step
  bool write_metrics = true;     // metrics.jsonl + TensorBoard under out_dir
  // The ranks to train on (their count must equal parallel.dp·ep·pp); null:
  // parallel::world() (every rank under mpirun, else this process alone). Tests
  // pass parallel::make_self_communicator() for a 1-rank run inside an MPI job.
  std::shared_ptr<parallel::Communicator> world = nullptr;
};

// TrainSummary and format_summary: train/metrics.hpp.

class Trainer {
 public:
  // Called at every evaluation (eval_interval and the end) with the record
  // that will be written for that step: add named scalars (e.g. a validation Pass@1).
  using EvalHook = std::function<void(Trainer&, int64_t step, MetricsRecord& record)>;
  // Test hook: runs after the gradients of a step are assembled, before the guard.
  using GradientHook = std::function<void(int64_t step, model::ParamStore<float>& params)>;

  explicit Trainer(RunConfig config, TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains until total_steps (or stop_after_step), evaluating and checkpointing
  // at the configured intervals; the final state is always checkpointed.
  TrainSummary run(const EvalHook& on_eval = {});

  // One optimizer step (or a skipped one); returns its metrics record (not written).
  MetricsRecord train_step();
  // The same on micro-batches built by the caller (the policy-gradient step of the
  // rl layer: rollouts with per-token loss weights): every rank passes the step's
  // whole list (global_batch / micro_batch of them, identical on every rank); a rank
  // trains my_micro_batches() of it. Same guard, clipping, schedule and metrics.
  MetricsRecord train_step_on(const StepBatches& batches);
  // The indices of a step's `count` micro-batches that this rank trains.
  std::vector<size_t> my_micro_batches(size_t count) const;
  // Forward only (no gradients, no collectives with dp > 1): log p(labels[r] | tokens
  // before r) at every target of `batch` under the current weights, 0 elsewhere ([B·S]);
  // with data.mode = "grpo", of softmax(logits / grpo.temperature), the sampler's policy.
  std::vector<double> label_log_probs(const model::Batch& batch);
  // MTP blocks counted in a step's FLOPs (0 when loss.mtp_weight = 0).
  int64_t mtp_layers() const;
  // Mean LM loss over the first eval_batches micro-batches of the validation
  // file (file order); throws when the config has no validation file.
  double validation_loss();
  std::string save_checkpoint();  // returns the checkpoint directory
  // The whole model's parameter values in the layout of model::parameter_specs.
  // With EP (parallel.ep > 1) a rank stores only its own routed experts
  // (model().params() is that shard); this gathers the others from their
  // owners: collective over the rank's EP group. Otherwise model().params().values().
  std::vector<float> full_parameters();

  model::Model<float>& model();
  const model::Model<float>& model() const;
  Optimizer& optimizer();
  const io::Tokenizer& tokenizer() const;
  const RunConfig& config() const;
  int64_t step() const;
  int64_t total_steps() const;
  const TrainSummary& summary() const;
  // The DP × EP × PP grid this trainer runs on; rank 0 of its world writes
  // the metrics, logs and checkpoints.
  parallel::ProcessGrid& grid();
  bool is_root() const;
  void set_gradient_hook(GradientHook hook);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trex::train
