// `trex generate`: batched sampling from a DeepSeek-V4 checkpoint with the
// incremental KV cache (model/decode.hpp). Prompts are `trex or prompts`
// records rendered in the non-thinking chat format; the output is the
// completions JSONL `trex or eval` grades. See docs/generation.md.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "trex/cli/commands.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/progress.hpp"
#include "trex/io/tokenizer.hpp"
#include "trex/model/decode.hpp"
#include "trex/train/data_sft.hpp"

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
};

struct PromptRecord {
  json id;
  json source;
  std::vector<int32_t> tokens;
};

// "messages" when present, else "prompt" as a single user turn.
PromptRecord read_prompt(const json& record, const io::Tokenizer& tokenizer,
                         const std::string& path, long line) {
  try {
    if (!record.is_object()) throw Error("a prompt record must be a JSON object");
    if (!record.contains("id")) throw Error("missing key").field("id");
    PromptRecord p;
    p.id = record["id"];
    p.source = record.value("source", json());
    json messages;
    if (record.contains("messages")) {
      messages = record["messages"];
    } else if (record.contains("prompt") && record["prompt"].is_string()) {
      messages = json::array({{{"role", "user"}, {"content", record["prompt"]}}});
    } else {
      throw Error("needs \"messages\" or a string \"prompt\"").field("messages");
    }
    p.tokens = train::encode_chat_prompt(tokenizer, messages, path);
    return p;
  } catch (Error& e) {
    if (e.file_name().empty()) e.file(path);
    throw e.line(line);
  }
}

int run_generate(const GenerateCli& o) {
  namespace fs = std::filesystem;
  const std::string tokenizer_path =
      o.tokenizer.empty() ? (fs::path(o.checkpoint) / "tokenizer.json").string() : o.tokenizer;
  if (!fs::exists(tokenizer_path))
    throw Error("no tokenizer (give --tokenizer FILE or put tokenizer.json in the checkpoint)")
        .file(tokenizer_path);
  const io::Tokenizer tokenizer = io::Tokenizer::load(tokenizer_path);
  const model::Model<float> m = model::Model<float>::from_checkpoint(o.checkpoint);
  if (tokenizer.vocab_size() > m.config().vocab_size)
    throw Error("tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                " tokens, the model's vocabulary only " + std::to_string(m.config().vocab_size))
        .file(tokenizer_path);

  std::vector<PromptRecord> prompts;
  read_jsonl(o.prompts, [&](const json& record, long line) {
    prompts.push_back(read_prompt(record, tokenizer, o.prompts, line));
  });
  std::vector<std::vector<int32_t>> prompt_tokens;
  for (const PromptRecord& p : prompts) prompt_tokens.push_back(p.tokens);

  model::GenerateOptions options;
  options.max_new_tokens = o.max_new_tokens;
  options.sampling = {o.temperature, o.top_p};
  options.samples = o.n;
  options.seed = o.seed;
  options.batch_size = o.batch_size;
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  Progress progress("generate", static_cast<int64_t>(prompts.size()) * o.n, 5.0);
  options.on_progress = [&](int64_t done, int64_t tokens) {
    char note[64];
    std::snprintf(note, sizeof note, "%.0f tok/s", static_cast<double>(tokens) / seconds());
    progress.update(done, note);
  };
  const model::Generation g = model::generate(m, tokenizer, prompt_tokens, options);
  const double elapsed = seconds();
  progress.finish();

  JsonlWriter writer(o.out);
  int64_t stopped = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    json record = {{"id", prompts[p].id}, {"source", prompts[p].source}};
    json counts = json::array();
    for (size_t k = 0; k < g.tokens[p].size(); ++k) {
      counts.push_back(g.tokens[p][k].size());
      stopped += g.stopped_at_eos[p][k] ? 1 : 0;
    }
    if (o.n == 1) {
      record["completion"] = g.texts[p][0];
      record["tokens"] = counts[0];
    } else {
      record["completions"] = g.texts[p];
      record["tokens"] = counts;
    }
    record["prompt_tokens"] = prompts[p].tokens.size();
    writer.write(record);
  }
  writer.commit();
  char summary[256];
  std::snprintf(summary, sizeof summary,
                "generated %lld completions for %zu prompts: %lld tokens (%lld prompt tokens) in "
                "%.1f s, %.0f tok/s; %lld stopped at EOS",
                static_cast<long long>(prompts.size() * o.n), prompts.size(),
                static_cast<long long>(g.generated_tokens), static_cast<long long>(g.prompt_tokens),
                elapsed, static_cast<double>(g.generated_tokens) / std::max(elapsed, 1e-9),
                static_cast<long long>(stopped));
  std::cout << summary << " -> " << o.out << "\n";
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
  cmd->callback([o] {
    if (!(o->top_p > 0.0)) throw Error("--top-p must be in (0, 1]").field("top_p");
    const int rc = run_generate(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace trex::cli
