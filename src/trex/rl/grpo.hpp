#pragma once
// Group-relative policy optimisation with a solver-verified reward (docs/rl.md):
// `trex train` with data.mode = "grpo". Each optimizer step
//   1. takes prompts_per_step prompts (benchmark-schema records of data.train,
//      rendered as the eval harness's zero-shot prompts), split over the
//      data-parallel ranks;
//   2. samples group_size completions of each with the incremental decoder
//      (batched: many sequences per decoding step), recording each token's
//      log-probability (the old policy's);
//   3. grades every completion in the sandboxed solver grader (rl/reward.hpp)
//      while the next chunk of prompts generates;
//   4. turns rewards into group-normalised advantages and the clipped token-level
//      surrogate (rl/objective.hpp) into per-token weights of the LM loss, and
//      takes the trainer's usual step (optimizer, clipping, guard, checkpoints).
// Prompts follow a seeded permutation per epoch and rollouts are seeded by
// (seed, step, prompt, sample), so a resumed run redoes exactly the steps it
// would have done.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "trex/or/eval/grade.hpp"
#include "trex/train/trainer.hpp"

namespace trex::io {
class Tokenizer;
}

namespace trex::rl {

// One RL prompt: a benchmark record rendered as a chat prompt.
struct PromptItem {
  std::string id;
  std::vector<int32_t> tokens;
  orlib::eval::GroundTruth truth;
};

struct PromptSet {
  std::vector<PromptItem> items;
  int64_t skipped_lines = 0;  // bad JSONL lines (data.strict = false)
  int64_t unknown_truth = 0;  // records without a gradable answer
  int64_t too_long = 0;       // prompts longer than seq_len − max_new_tokens
};

// Reads a benchmark-schema JSONL (id, question, answer, answer_status) and
// renders every gradable record as one user turn: `prompt_template` with its
// "{question}" replaced, or (empty) the eval prompt of `format`. Records that
// cannot be graded or do not fit max_prompt_tokens are left out and counted.
PromptSet load_prompts(const std::string& path, const io::Tokenizer& tokenizer,
                       const std::string& format, const std::string& prompt_template,
                       int64_t max_prompt_tokens, bool strict);

struct GrpoOptions {
  train::TrainerOptions trainer;
  // Replaces the solver grader: reward of (prompt id, completion ids). Tests of the
  // loop's learning signal only; a real run grades with the sandboxed solver.
  std::function<double(const std::string& prompt_id, const std::vector<int32_t>& completion)>
      reward_hook;
  // Called after each step's record is complete (before it is written).
  std::function<void(int64_t step, train::MetricsRecord& record)> on_step;
};

struct GrpoSummary {
  train::TrainSummary train;
  int64_t rollouts = 0;
  double generate_seconds = 0, grade_seconds = 0, train_seconds = 0;
  double generated_tokens = 0;
  double mean_reward = 0;       // over this run's rollouts
  double pass_rate = 0;         // correct rollouts / rollouts
  double final_val_pass1 = -1;  // percent; < 0: not evaluated
};

// Runs the GRPO loop of `config` (data.mode = "grpo") to config.steps.
GrpoSummary run_grpo(const train::RunConfig& config, const GrpoOptions& options = {});

std::string format_grpo_summary(const GrpoSummary& summary);

}  // namespace trex::rl
