// `trex generate`: batched sampling from a DeepSeek-V4 checkpoint with the
// incremental KV cache (infer/generate.hpp). Prompts are `trex or prompts`
// records rendered in the non-thinking chat format; the output is the
// completions JSONL `trex or eval` grades. See docs/generation.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "trex/cli/commands.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/infer/generate.hpp"
#include "trex/io/tokenizer.hpp"

namespace trex::cli {
namespace {

struct GenerateCli {
  std::string checkpoint;
  std::string prompts;
  std::string out;
  std::string tokenizer;
  int64_t max_new_tokens = 256;
  double temperature = 0.0;
  double top_p = 1.0;
  int64_t n = 1;
  uint64_t seed = 1;
  int64_t batch_size = 64;
  bool strict = false;
};

int run_generate(const GenerateCli& o) {
  namespace fs = std::filesystem;
  const std::string tokenizer_path =
      o.tokenizer.empty() ? (fs::path(o.checkpoint) / "tokenizer.json").string() : o.tokenizer;
  if (!fs::exists(tokenizer_path))
    throw Error("no tokenizer (give --tokenizer FILE or put tokenizer.json in the checkpoint)")
        .file(tokenizer_path);
  const io::Tokenizer tokenizer = io::Tokenizer::load(tokenizer_path);
  const model::Model<float> m = model::Model<float>::from_checkpoint(o.checkpoint);

  infer::GenerateOptions options;
  options.max_new_tokens = o.max_new_tokens;
  options.sampling = {o.temperature, o.top_p};
  options.samples = o.n;
  options.seed = o.seed;
  options.batch_size = o.batch_size;
  infer::GenerateFileStats s;
  try {
    JsonlOptions read;
    read.strict = o.strict;
    s = infer::generate_file(m, tokenizer, o.prompts, o.out, options, true, {}, read);
  } catch (Error& e) {
    if (e.file_name().empty() && e.field_name() == "vocab_size") e.file(tokenizer_path);
    throw;
  }
  char summary[256];
  std::snprintf(summary, sizeof summary,
                "generated %lld completions for %lld prompts: %lld tokens (%lld prompt tokens) in "
                "%.1f s, %.0f tok/s; %lld stopped at EOS",
                static_cast<long long>(s.completions), static_cast<long long>(s.prompts),
                static_cast<long long>(s.generated_tokens), static_cast<long long>(s.prompt_tokens),
                s.seconds, s.tokens_per_second(), static_cast<long long>(s.stopped_at_eos));
  std::cout << summary << " -> " << o.out << "\n";
  std::cout << "prompts file: " << s.input.summary() << "\n";
  if (s.input.skipped > 0) {
    std::cerr << "trex: warning: " << o.prompts << ": " << s.input.summary() << "\n";
    for (const auto& k : s.input.skips)
      std::cerr << "  " << o.prompts << ":" << k.line << ": " << k.reason << "\n";
    return kExitRecordsSkipped;  // completed, but some prompts were not generated for
  }
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateCli>();
  auto* cmd = app.add_subcommand(
      "generate",
      "Sample completions for chat prompts from a V4 checkpoint (incremental KV cache)");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "Checkpoint directory (config.json + safetensors, tokenizer.json)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--prompts", o->prompts,
                  "Prompts JSONL ({\"id\", \"source\", \"messages\" | \"prompt\"}, as written by "
                  "`trex or prompts`)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", o->out, "Completions JSONL (written atomically)")->required();
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Generated tokens per completion at most")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "0 = greedy")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "Nucleus mass in (0, 1]")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--n", o->n, "Completions per prompt")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size, "Sequences decoded together")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.json (default: the checkpoint's)");
  cmd->add_flag("--strict", o->strict,
                "Stop at the first bad prompt line (default: skip and count it, and exit 3 when "
                "any was skipped)");
  cmd->callback([o] {
    if (!(o->top_p > 0.0)) throw Error("--top-p must be in (0, 1]").field("top_p");
    const int rc = run_generate(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace trex::cli
