#include "trex/train/data_sft.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/log.hpp"

namespace trex::train {

namespace {

std::atomic<bool> g_default_strict{false};
std::mutex g_input_mutex;
JsonlStats g_input_totals;

constexpr int32_t kIgnore = -100;

int32_t require_special(int32_t id, const char* name, const std::string& origin) {
  if (id < 0) throw Error(std::string("the tokenizer has no ") + name + " token").file(origin);
  return id;
}

std::pair<PackingItems, SftStats> prepare(std::vector<EncodedChat> examples,
                                          const SftLoaderOptions& options) {
  PackingItems items;
  SftStats stats;
  for (EncodedChat& example : examples) {
    ++stats.examples;
    if (example.tokens.size() != example.labels.size() || example.tokens.empty())
      throw Error("SFT example " + std::to_string(stats.examples - 1) +
                  ": tokens and labels differ in length or are empty");
    if (static_cast<int64_t>(example.tokens.size()) > options.seq_len) {
      if (options.overlong == OverlongPolicy::kDrop) {
        ++stats.dropped;
        continue;
      }
      example.tokens.resize(static_cast<size_t>(options.seq_len));
      example.labels.resize(static_cast<size_t>(options.seq_len));
      // Position 0 never is a target, so a label must survive after it.
      if (std::all_of(example.labels.begin() + 1, example.labels.end(),
                      [](int32_t l) { return l == kIgnore; })) {
        ++stats.dropped;
        continue;
      }
      ++stats.truncated;
    }
    stats.tokens += static_cast<int64_t>(example.tokens.size());
    stats.trained_tokens += std::count_if(example.labels.begin() + 1, example.labels.end(),
                                          [](int32_t l) { return l != kIgnore; });
    items.tokens.insert(items.tokens.end(), example.tokens.begin(), example.tokens.end());
    items.labels.insert(items.labels.end(), example.labels.begin(), example.labels.end());
    items.offsets.push_back(static_cast<int64_t>(items.tokens.size()));
  }
  if (items.count() == 0)
    throw Error("SFT loader: no example fits (" + std::to_string(stats.dropped) + " of " +
                std::to_string(stats.examples) + " dropped as longer than " +
                std::to_string(options.seq_len) + " tokens)");
  return {std::move(items), stats};
}

}  // namespace

EncodedChat encode_chat(const io::Tokenizer& tokenizer, const nlohmann::json& messages,
                        const std::string& origin, bool all_turns) {
  const io::SpecialTokenIds& special = tokenizer.special_ids();
  const int32_t bos = require_special(special.bos, "BOS", origin);
  const int32_t eos = require_special(special.eos, "EOS", origin);
  const int32_t user = require_special(special.user, "<｜User｜>", origin);
  const int32_t assistant = require_special(special.assistant, "<｜Assistant｜>", origin);
  const int32_t end_think = require_special(special.end_think, "</think>", origin);
  if (!messages.is_array() || messages.empty())
    throw Error("expected a non-empty array of messages").file(origin).field("messages");

  EncodedChat out;
  auto append = [&](int32_t token, bool trained) {
    out.tokens.push_back(token);
    out.labels.push_back(trained ? token : kIgnore);
  };
  auto append_text = [&](const std::string& text, bool trained) {
    for (int32_t token : tokenizer.encode(text)) append(token, trained);
  };
  size_t last_assistant = messages.size();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string field = "messages[" + std::to_string(i) + "]";
    const nlohmann::json& message = messages[i];
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string())
      throw Error("message without a string \"role\"").file(origin).field(field + ".role");
    if (!message.contains("content") || !message["content"].is_string())
      throw Error("message without a string \"content\"").file(origin).field(field + ".content");
    const std::string& role = message["role"].get_ref<const std::string&>();
    if (role != "system" && role != "user" && role != "assistant")
      throw Error("unknown role '" + role + "' (system, user or assistant)")
          .file(origin)
          .field(field + ".role");
    if (role == "assistant") last_assistant = i;
  }
  if (last_assistant == messages.size())
    throw Error("conversation has no assistant message to train on").file(origin).field("messages");

  append(bos, false);
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i]["role"].get_ref<const std::string&>();
    const std::string& content = messages[i]["content"].get_ref<const std::string&>();
    if (role == "system") {
      append_text(content, false);
    } else if (role == "user") {
      append(user, false);
      append_text(content, false);
    } else {
      const bool trained = all_turns || i == last_assistant;
      append(assistant, false);
      append(end_think, false);
      append_text(content, trained);
      append(eos, trained);
    }
  }
  return out;
}

std::vector<int32_t> encode_chat_prompt(const io::Tokenizer& tokenizer,
                                        const nlohmann::json& messages, const std::string& origin) {
  if (!messages.is_array() || messages.empty())
    throw Error("expected a non-empty array of messages").file(origin).field("messages");
  // An empty final assistant turn renders `<｜Assistant｜></think><EOS>`; the
  // prompt is everything before that EOS.
  nlohmann::json with_answer = messages;
  with_answer.push_back({{"role", "assistant"}, {"content", ""}});
  std::vector<int32_t> tokens = encode_chat(tokenizer, with_answer, origin).tokens;
  tokens.pop_back();
  return tokens;
}

SftLoader::SftLoader(std::pair<PackingItems, SftStats> prepared, int32_t pad_id,
                     const SftLoaderOptions& options)
    : packer_(std::move(prepared.first),
              PackingOptions{options.seq_len, options.batch_size, options.seed, options.shuffle,
                             pad_id, PackingMode::kWholeItems}),
      stats_(prepared.second) {}

SftLoader::SftLoader(std::vector<EncodedChat> examples, int32_t pad_id, SftLoaderOptions options)
    : SftLoader(prepare(std::move(examples), options), pad_id, options) {}

void set_default_data_strict(bool strict) {
  g_default_strict = strict;
}

bool default_data_strict() {
  return g_default_strict;
}

JsonlStats data_input_totals() {
  std::lock_guard<std::mutex> lock(g_input_mutex);
  return g_input_totals;
}

void note_data_input(const JsonlStats& stats) {
  {
    std::lock_guard<std::mutex> lock(g_input_mutex);
    g_input_totals.merge(stats);
  }
  if (stats.skipped > 0) {
    log::warn("training data ", stats.path, ": ", stats.summary());
    for (const auto& k : stats.skips) log::warn("  ", stats.path, ":", k.line, ": ", k.reason);
  } else if (stats.repaired > 0) {
    log::info("training data ", stats.path, ": ", stats.summary());
  }
}

SftLoader SftLoader::from_jsonl(const std::string& path, const io::Tokenizer& tokenizer,
                                SftLoaderOptions options, std::optional<bool> strict) {
  std::vector<EncodedChat> examples;
  JsonlOptions read;
  read.strict = strict.value_or(default_data_strict());
  const JsonlStats input = read_jsonl(path, read, [&](const json& record, long line) {
    const std::string origin = path + ":" + std::to_string(line);
    if (!record.is_object() || !record.contains("messages"))
      throw Error("expected an object with \"messages\"").file(path).line(line).field("messages");
    try {
      examples.push_back(
          encode_chat(tokenizer, record["messages"], path, options.train_all_assistant_turns));
    } catch (Error& e) {
      throw e.line(line);
    }
  });
  note_data_input(input);
  if (examples.empty())
    throw Error(input.skipped > 0 ? "no SFT examples (" + input.summary() + ")" : "no SFT examples")
        .file(path);
  const io::SpecialTokenIds& special = tokenizer.special_ids();
  SftLoader loader(std::move(examples), special.pad >= 0 ? special.pad : special.eos, options);
  loader.stats_.input = input;
  return loader;
}

}  // namespace trex::train
