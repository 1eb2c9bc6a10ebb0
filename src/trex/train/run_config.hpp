#pragma once
// The run configuration of `trex train` (a JSON or TOML file; keys in docs/training.md):
// model to start from, tokenizer, data, batch geometry, optimizer, schedule,
// precision, loss weights, evaluation / checkpoint / logging cadence, output
// directory and the MFU peak. Parsing rejects unknown keys and bad values with
// a trex::Error naming the file and the key path (e.g. "schedule.peak_lr").
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/kernels/precision.hpp"
#include "trex/model/model.hpp"
#include "trex/parallel/pipeline.hpp"
#include "trex/train/optim/optimizer.hpp"
#include "trex/train/optim/schedule.hpp"

namespace trex::train {

enum class DataMode { kCpt, kSft, kGrpo };
enum class TrainPrecision { kFp32, kBf16 };
enum class CheckpointFormat { kAuto, kWhole, kSharded };
const char* checkpoint_format_name(CheckpointFormat format);  // "auto", "whole", "sharded"

// The `parallel` section (docs/distributed.md): the DP × EP × PP process grid
// (world size = dp · ep · pp, launched with `mpirun -np N trex train ...`) and
// how gradients and optimizer state are distributed.
struct ParallelConfig {
  int64_t dp = 1;
  int64_t ep = 1;
  int64_t pp = 1;
  parallel::PipelineSchedule pipeline_schedule = parallel::PipelineSchedule::k1F1B;
  // Main layers per pipeline chunk in model order (pp counts for 1F1B, 2·pp for
  // DualPipeV); empty: balanced (docs/pipeline-parallel.md, "Layer partition").
  std::vector<int64_t> pipeline_layers;
  // 0: replicated optimizer; 1: optimizer state sharded over the data group;
  // 2: gradients too (reduce-scatter instead of all-reduce).
  int64_t zero = 0;
  double bucket_mb = 25.0;  // gradient-reduction bucket cap (MiB)
  // Bucket reductions running at once (0: no bound): bounds the reduction's
  // staging and, under ZeRO-2, the gradient pages not yet given back.
  int64_t max_in_flight_buckets = 4;
  bool overlap_grad_reduce = true;  // reduce buckets while backward runs
  bool ep_overlap = true;           // two-half dispatch/compute overlap in EP
  // Expert -> EP-rank map per MoE layer (`trex plan experts --out`); empty = contiguous.
  std::string expert_placement;
  int64_t world_size() const { return dp * ep * pp; }
  int64_t data_size() const { return dp * ep; }  // ranks that take different micro-batches
};

// The `grpo` section (docs/rl.md): group-relative policy optimisation with a
// solver-verified reward, run by the rl layer with data.mode = "grpo". Each
// optimizer step samples group_size completions for each of prompts_per_step
// prompts (the benchmark-schema records of data.train), grades them with the
// eval harness's sandboxed solver grader and takes a clipped policy-gradient step.
struct GrpoConfig {
  int64_t prompts_per_step = 8;  // P (split over the data-parallel ranks)
  int64_t group_size = 8;        // G: completions per prompt
  int64_t max_new_tokens = 256;
  double temperature = 1.0;  // sampling; the objective's log-probabilities are at temperature 1
  double top_p = 1.0;
  int64_t generation_batch = 64;        // sequences decoded together
  int64_t updates_per_batch = 1;        // optimizer steps on each batch of rollouts (mu)
  double clip_low = 0.2;                // ratio clip: [1 - clip_low, 1 + clip_high]
  double clip_high = 0.28;              // DAPO's clip-higher
  double kl_coef = 0.0;                 // > 0: k3 KL penalty to the frozen reference model
  std::string reference;                // its checkpoint (default: model.init_checkpoint)
  bool scale_advantages_by_std = true;  // false: mean-centred only (Dr. GRPO)
  std::string format = "mathprog";      // prompt and answer format: mathprog | lp | python
  // The user turn, with "{question}" where the question goes; empty = the zero-shot
  // prompt of `trex or prompts` for `format` (set it to what SFT trained on).
  std::string prompt_template;
  // The reward (rl/reward.hpp): correct, ran but wrong, did not parse or solve.
  double reward_correct = 1.0;
  double reward_wrong = 0.0;
  double failure_penalty = 0.0;
  double format_reward = 0.0;    // added when an executable block was extracted
  std::string rule = "rel1e-6";  // the grading tolerance (or eval --rule)
  double grade_timeout = 10.0;   // wall and CPU seconds per rollout
  int64_t grade_jobs = 0;        // sandboxed graders at a time; 0 = online cores
  std::string python = "python3";
  std::string solver = "glpk";
  int64_t eval_prompts = 0;  // > 0: Pass@1 (greedy) on that many validation records per eval
};

// One `debug.inject` entry: "KIND@step=N" (or "nan_weight_on_load").
struct FaultInjection {
  // nan_grad, inf_grad, nan_activation, inf_activation, loss_spike, nan_weight_on_load
  std::string kind;
  int64_t step = 0;          // the step it fires at (0 for nan_weight_on_load)
  std::string text() const;  // back to "KIND@step=N"
  static FaultInjection parse(const std::string& text);  // throws trex::Error (message only)
};

struct RunConfig {
  // Start from random init of `model_config` (with `init_seed`) or from the
  // weights of `init_checkpoint` (exactly one of the two).
  std::string model_config;
  uint64_t init_seed = 1;
  std::string init_checkpoint;

  std::string tokenizer;  // tokenizer.json
  DataMode mode = DataMode::kCpt;
  std::string train_file;       // JSONL ({"text"} for cpt, {"messages"} for sft)
  std::string validation_file;  // optional, same format
  uint64_t data_seed = 1;
  bool shuffle = true;
  // data.strict: a bad line of the train/validation JSONL stops the run
  // (trex::Error with file:line); false skips and counts it (exit status 3).
  bool data_strict = false;

  int64_t seq_len = 256;
  int64_t micro_batch = 1;
  int64_t global_batch = 1;  // sequences per optimizer step; a multiple of micro_batch
  int64_t steps = 0;         // optimizer steps; 0 = derive from epochs
  double epochs = 0.0;       // passes over the training data when steps = 0

  OptimizerOptions optimizer;
  double peak_lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 0;
  double clip = 1.0;  // global-norm clip; <= 0 disables
  TrainPrecision precision = TrainPrecision::kFp32;
  // param_dtype ("fp32" | "bf16") is optimizer.master_weights: with "bf16"
  // every rank's parameters hold bf16 values and the fp32 master weights live
  // only in the optimizer's (ZeRO) ranges; gradients accumulate in fp32.
  // The GEMM precision of `precision` (model forward/backward and Muon's Newton–Schulz).
  kernels::Precision compute_precision() const {
    return precision == TrainPrecision::kBf16 ? kernels::Precision::kBF16
                                              : kernels::Precision::kF32;
  }

  // Activation recomputation of the training forward (model.hpp): "none" keeps
  // every block's activations; "selective" recomputes the mHC/norm outputs and
  // the attention core in the block's backward (no GEMMs); "full" keeps each
  // block's input only and re-runs the block in its backward (bitwise the same
  // gradients, one more forward).
  model::ActivationRecompute recompute = model::ActivationRecompute::kNone;

  double mtp_weight = 0.3;
  double balance_weight = 1e-4;
  double router_bias_speed = 1e-3;

  int64_t eval_interval = 0;  // steps; 0 = only at the end (when validation data is given)
  int64_t eval_batches = 4;
  int64_t checkpoint_interval = 0;  // steps; 0 = only at the end
  int64_t keep_checkpoints = 3;
  // kSharded: every data rank of the first stage writes its part (no gather;
  // docs/checkpoints.md); kWhole: rank 0 gathers and writes single files;
  // kAuto: whole on one rank, sharded on more.
  CheckpointFormat checkpoint_format = CheckpointFormat::kAuto;
  int64_t log_interval = 1;  // progress-bar / log cadence (JSONL and TensorBoard get every step)
  std::string out_dir = "runs/train";

  double peak_gflops = 0.0;  // > 0: given; 0 = measured at start (bench peak, short budget)
  int64_t spike_window = 20;
  double spike_z_threshold = 4.0;

  ParallelConfig parallel;
  GrpoConfig grpo;  // data.mode = "grpo" only

  // Fault injection, for tests of the stability guard only (`debug.inject`,
  // docs/training.md "Fault injection"): never set in a real run.
  std::vector<FaultInjection> debug_inject;

  int64_t accumulation_steps() const { return global_batch / micro_batch; }
  LrSchedule schedule(int64_t total_steps) const {
    return {peak_lr, min_lr, warmup_steps, total_steps};
  }

  // `origin` names the file in errors; relative paths are resolved against `base_dir`.
  static RunConfig from_json(const nlohmann::json& json, const std::string& origin,
                             const std::string& base_dir = "");
  // Reads a JSON file, or TOML when the name ends in .toml; relative paths in
  // it are relative to the file's directory.
  static RunConfig load(const std::string& path);
  nlohmann::json to_json() const;  // the same keys, every value explicit
  void validate(const std::string& origin) const;

 private:
  void validate_grpo(const std::string& origin) const;
};

}  // namespace trex::train
