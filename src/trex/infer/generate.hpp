#pragma once
// Batched generation with the incremental decoder (docs/generation.md): token
// prompts to completions, and `trex generate`'s prompts file to completions file.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "trex/core/jsonl.hpp"
#include "trex/infer/sampler.hpp"
#include "trex/model/model.hpp"

namespace trex::io {
class Tokenizer;
}

namespace trex::infer {

struct GenerateOptions {
  int64_t max_new_tokens = 256;
  SamplingOptions sampling;
  int64_t samples = 1;  // completions per prompt (n)
  uint64_t seed = 1;    // sample (p, k) uses Rng(seed, {stream, first_prompt_index + p, k})
  int64_t first_prompt_index = 0;  // index of prompt 0 in a larger set (a shard keeps its samples)
  int64_t batch_size = 64;         // sequences decoded together
  int64_t eos_id = -1;             // -1: the tokenizer's EOS (generate), else config eos_token_id
  // Also record, for every generated token (EOS included), its log-probability and
  // the entropy of the distribution it was drawn from, softmax(logits / temperature)
  // (temperature 1 when greedy; top-p not applied): the policy-gradient step's
  // old-policy log-probabilities.
  bool record_log_probs = false;
  // Called after every decoding step: (finished completions, generated tokens so far).
  std::function<void(int64_t, int64_t)> on_progress;
};

struct GeneratedTokens {
  // [prompt][sample]: the generated ids, without the EOS that stopped them.
  std::vector<std::vector<std::vector<int32_t>>> tokens;
  // [prompt][sample]: true when stopped by EOS, false when max_new_tokens ran out.
  std::vector<std::vector<bool>> stopped_at_eos;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;  // EOS tokens included
  // With record_log_probs, [prompt][sample][i]: of generated token i (the EOS last
  // when stopped_at_eos): log p(token) and the distribution's entropy (nats).
  std::vector<std::vector<std::vector<float>>> log_probs;
  std::vector<std::vector<std::vector<float>>> entropies;
};

struct Generation : GeneratedTokens {
  std::vector<std::vector<std::string>> texts;  // [prompt][sample], special tokens skipped
};

// Token-level generation: every prompt (non-empty ids) gets options.samples completions.
template <class T>
GeneratedTokens generate_tokens(const model::Model<T>& model,
                                const std::vector<std::vector<int32_t>>& prompt_tokens,
                                const GenerateOptions& options);

// generate_tokens, with EOS from the tokenizer (unless options.eos_id >= 0) and decoded texts.
template <class T>
Generation generate(const model::Model<T>& model, const io::Tokenizer& tokenizer,
                    const std::vector<std::vector<int32_t>>& prompt_tokens,
                    const GenerateOptions& options);

// `trex generate` on a model in memory (the demo generates with the model it just
// trained): prompts JSONL (`trex or prompts` records) in, completions JSONL out.
// The contiguous block `index` of `count` equal blocks of a prompts file (the
// ranks of `mpirun -np N trex demo` each generate one; docs/demo.md).
struct PromptShard {
  int index = 0;
  int count = 1;
};

struct GenerateFileStats {
  int64_t prompts = 0;
  int64_t completions = 0;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;  // EOS tokens included
  int64_t stopped_at_eos = 0;    // completions that ended with EOS
  double seconds = 0.0;          // generation only (not reading / writing)
  JsonlStats input;              // the prompts file: lines read, skipped, repaired
  double tokens_per_second() const {
    return seconds > 0 ? static_cast<double>(generated_tokens) / seconds : 0.0;
  }
};

// Renders every record ("messages", else "prompt" as one user turn) with
// io::encode_chat_prompt, generates options.samples completions each and writes
// {"id", "source", "completion" | "completions", "tokens", "prompt_tokens"} per
// prompt to out_path atomically. progress: draw a progress bar (stderr).
// With a shard, only that block of the prompts is generated and written, with
// the samples (seeds) it would get in a whole-file run, so the shards'
// outputs concatenated in order are the whole file's.
// Bad records: with `read.strict` (the default here) trex::Error naming the
// file, line and field (nothing written); otherwise skipped (every shard skips
// the same lines) and counted in GenerateFileStats::input.
GenerateFileStats generate_file(const model::Model<float>& model, const io::Tokenizer& tokenizer,
                                const std::string& prompts_path, const std::string& out_path,
                                const GenerateOptions& options, bool progress = true,
                                PromptShard shard = {}, const JsonlOptions& read = strict_jsonl());

}  // namespace trex::infer
