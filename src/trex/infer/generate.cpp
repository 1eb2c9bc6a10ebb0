#include "trex/infer/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/progress.hpp"
#include "trex/infer/decoder.hpp"
#include "trex/io/chat.hpp"
#include "trex/io/tokenizer.hpp"

namespace trex::infer {

using model::Model;
using model::ModelConfig;

namespace {

// Rng stream tag of generation samples: Rng(seed, {kSampleStream, prompt, sample}).
constexpr uint64_t kSampleStream = 0x67656e65726174ULL;

}  // namespace

template <class T>
GeneratedTokens generate_tokens(const Model<T>& model,
                                const std::vector<std::vector<int32_t>>& prompt_tokens,
                                const GenerateOptions& options) {
  const ModelConfig& c = model.config();
  if (options.max_new_tokens < 0) throw Error("must be >= 0").field("max_new_tokens");
  if (options.samples < 1) throw Error("must be >= 1").field("n");
  if (options.batch_size < 1) throw Error("must be >= 1").field("batch_size");
  const int64_t eos = options.eos_id >= 0 ? options.eos_id : c.eos_token_id;
  const int64_t P = static_cast<int64_t>(prompt_tokens.size()), K = options.samples,
                V = c.vocab_size;
  GeneratedTokens out;
  out.tokens.assign(static_cast<size_t>(P),
                    std::vector<std::vector<int32_t>>(static_cast<size_t>(K)));
  out.stopped_at_eos.assign(static_cast<size_t>(P), std::vector<bool>(static_cast<size_t>(K)));
  for (int64_t p = 0; p < P; ++p) {
    if (prompt_tokens[p].empty())
      throw Error("prompt " + std::to_string(p) + " has no tokens").field("prompt");
    for (int32_t tok : prompt_tokens[p])
      if (tok < 0 || tok >= V)
        throw Error("prompt " + std::to_string(p) + ": token id " + std::to_string(tok) +
                    " outside the vocabulary")
            .field("prompt");
    out.prompt_tokens += static_cast<int64_t>(prompt_tokens[p].size());
  }
  if (options.record_log_probs) {
    out.log_probs.assign(static_cast<size_t>(P),
                         std::vector<std::vector<float>>(static_cast<size_t>(K)));
    out.entropies = out.log_probs;
  }
  if (options.max_new_tokens == 0) return out;

  struct Active {
    int64_t prompt, sample, sequence;
    trex::Rng rng;
    int64_t last_token = -1;
  };
  Decoder<T> decoder(model);
  std::vector<Active> active;
  std::vector<T> logits;
  int64_t next_prompt = 0, finished = 0;

  const double log_prob_temperature =
      options.sampling.temperature > 0 ? options.sampling.temperature : 1.0;
  // Records a sampled token (drawn from logits row z); returns true when its
  // completion is finished.
  auto accept = [&](Active& a, const T* z, int64_t token) {
    ++out.generated_tokens;
    if (options.record_log_probs) {
      const TokenLogProb lp = token_log_prob(z, V, token, log_prob_temperature);
      out.log_probs[a.prompt][a.sample].push_back(static_cast<float>(lp.log_prob));
      out.entropies[a.prompt][a.sample].push_back(static_cast<float>(lp.entropy));
    }
    auto& toks = out.tokens[a.prompt][a.sample];
    if (token == eos) {
      out.stopped_at_eos[a.prompt][a.sample] = true;
      return true;
    }
    toks.push_back(static_cast<int32_t>(token));
    a.last_token = token;
    return static_cast<int64_t>(toks.size()) >= options.max_new_tokens;
  };
  auto retire = [&](std::vector<bool>& done) {
    std::vector<Active> kept;
    for (size_t i = 0; i < active.size(); ++i) {
      if (done[i]) {
        decoder.release_sequence(active[i].sequence);
        ++finished;
      } else {
        kept.push_back(std::move(active[i]));
      }
    }
    active = std::move(kept);
  };

  while (next_prompt < P || !active.empty()) {
    // Admit whole prompts (all their samples) while they fit; prefill them together.
    std::vector<int64_t> admitted;
    while (next_prompt < P &&
           ((active.empty() && admitted.empty()) ||
            static_cast<int64_t>(active.size() + admitted.size() * K) + K <= options.batch_size))
      admitted.push_back(next_prompt++);
    if (!admitted.empty()) {
      std::vector<int64_t> seqs, toks, last_rows, handles;
      for (int64_t p : admitted) {
        const int64_t h = decoder.add_sequence();
        handles.push_back(h);
        for (int32_t tok : prompt_tokens[p]) {
          seqs.push_back(h);
          toks.push_back(tok);
        }
        last_rows.push_back(static_cast<int64_t>(toks.size()) - 1);
      }
      logits.resize(static_cast<size_t>(admitted.size() * V));
      decoder.feed(seqs, toks, logits.data(), last_rows);
      std::vector<bool> done;
      for (size_t i = 0; i < admitted.size(); ++i) {
        const int64_t p = admitted[i];
        for (int64_t k = 0; k < K; ++k) {
          const int64_t h = k + 1 < K ? decoder.fork_sequence(handles[i]) : handles[i];
          Active a{p, k, h,
                   trex::Rng(options.seed,
                             {kSampleStream, static_cast<uint64_t>(options.first_prompt_index + p),
                              static_cast<uint64_t>(k)})};
          const T* z = logits.data() + i * V;
          const int64_t tok = sample_token(z, V, options.sampling, a.rng);
          active.push_back(std::move(a));
          done.push_back(accept(active.back(), z, tok));
        }
      }
      std::vector<bool> all_done(active.size() - done.size(), false);
      all_done.insert(all_done.end(), done.begin(), done.end());
      retire(all_done);
      if (options.on_progress) options.on_progress(finished, out.generated_tokens);
      continue;  // admit more before stepping, so steps run with full batches
    }
    // One decoding step of every active completion.
    std::vector<int64_t> seqs, toks;
    for (const Active& a : active) {
      seqs.push_back(a.sequence);
      toks.push_back(a.last_token);
    }
    logits.resize(static_cast<size_t>(active.size() * V));
    decoder.feed(seqs, toks, logits.data());
    std::vector<bool> done(active.size());
    for (size_t i = 0; i < active.size(); ++i) {
      const T* z = logits.data() + i * V;
      const int64_t tok = sample_token(z, V, options.sampling, active[i].rng);
      done[i] = accept(active[i], z, tok);
    }
    retire(done);
    if (options.on_progress) options.on_progress(finished, out.generated_tokens);
  }
  return out;
}

template <class T>
Generation generate(const Model<T>& model, const io::Tokenizer& tokenizer,
                    const std::vector<std::vector<int32_t>>& prompt_tokens,
                    const GenerateOptions& options) {
  GenerateOptions o = options;
  if (o.eos_id < 0 && tokenizer.special_ids().eos >= 0) o.eos_id = tokenizer.special_ids().eos;
  Generation g;
  static_cast<GeneratedTokens&>(g) = generate_tokens(model, prompt_tokens, o);
  for (const auto& samples : g.tokens) {
    auto& texts = g.texts.emplace_back();
    for (const auto& ids : samples) texts.push_back(tokenizer.decode(ids, true));
  }
  return g;
}

namespace {

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
    p.tokens = io::encode_chat_prompt(tokenizer, messages, path);
    return p;
  } catch (Error& e) {
    if (e.file_name().empty()) e.file(path);
    throw e.line(line);
  }
}

}  // namespace

GenerateFileStats generate_file(const Model<float>& model, const io::Tokenizer& tokenizer,
                                const std::string& prompts_path, const std::string& out_path,
                                const GenerateOptions& options, bool progress, PromptShard shard,
                                const JsonlOptions& read) {
  if (shard.count < 1 || shard.index < 0 || shard.index >= shard.count)
    throw Error("prompt shard " + std::to_string(shard.index) + " of " +
                std::to_string(shard.count) + " does not exist")
        .field("shard");
  if (tokenizer.vocab_size() > model.config().vocab_size)
    throw Error("the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                " tokens, the model's vocabulary only " + std::to_string(model.config().vocab_size))
        .field("vocab_size");
  std::vector<PromptRecord> prompts;
  const JsonlStats input = read_jsonl(prompts_path, read, [&](const json& record, long line) {
    prompts.push_back(read_prompt(record, tokenizer, prompts_path, line));
  });
  // Every record is read (and checked) before the shard's block is cut out.
  const auto block = [&](int i) { return static_cast<int64_t>(prompts.size()) * i / shard.count; };
  const int64_t first = block(shard.index), last = block(shard.index + 1);
  prompts = std::vector<PromptRecord>(prompts.begin() + first, prompts.begin() + last);
  std::vector<std::vector<int32_t>> prompt_tokens;
  for (const PromptRecord& p : prompts) prompt_tokens.push_back(p.tokens);

  GenerateOptions o = options;
  o.first_prompt_index = options.first_prompt_index + first;
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  std::unique_ptr<Progress> bar;
  if (progress) {
    bar = std::make_unique<Progress>("generate",
                                     static_cast<int64_t>(prompts.size()) * options.samples, 5.0);
    o.on_progress = [&](int64_t done, int64_t tokens) {
      char note[64];
      std::snprintf(note, sizeof note, "%.0f tok/s",
                    static_cast<double>(tokens) / std::max(seconds(), 1e-9));
      bar->update(done, note);
      if (options.on_progress) options.on_progress(done, tokens);
    };
  }
  const Generation g = generate(model, tokenizer, prompt_tokens, o);
  GenerateFileStats stats;
  stats.input = input;
  stats.seconds = seconds();
  if (bar) bar->finish();

  JsonlWriter writer(out_path);
  for (size_t p = 0; p < prompts.size(); ++p) {
    json record = {{"id", prompts[p].id}, {"source", prompts[p].source}};
    json counts = json::array();
    for (size_t k = 0; k < g.tokens[p].size(); ++k) {
      counts.push_back(g.tokens[p][k].size());
      stats.stopped_at_eos += g.stopped_at_eos[p][k] ? 1 : 0;
    }
    if (options.samples == 1) {
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
  stats.prompts = static_cast<int64_t>(prompts.size());
  stats.completions = stats.prompts * options.samples;
  stats.prompt_tokens = g.prompt_tokens;
  stats.generated_tokens = g.generated_tokens;
  return stats;
}

template GeneratedTokens generate_tokens(const Model<float>&,
                                         const std::vector<std::vector<int32_t>>&,
                                         const GenerateOptions&);
template GeneratedTokens generate_tokens(const Model<double>&,
                                         const std::vector<std::vector<int32_t>>&,
                                         const GenerateOptions&);
template Generation generate(const Model<float>&, const io::Tokenizer&,
                             const std::vector<std::vector<int32_t>>&, const GenerateOptions&);
template Generation generate(const Model<double>&, const io::Tokenizer&,
                             const std::vector<std::vector<int32_t>>&, const GenerateOptions&);

}  // namespace trex::infer
