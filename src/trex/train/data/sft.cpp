#include "trex/train/data/sft.hpp"

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

std::pair<PackingItems, SftStats> prepare(std::vector<io::EncodedChat> examples,
                                          const SftLoaderOptions& options) {
  PackingItems items;
  SftStats stats;
  for (io::EncodedChat& example : examples) {
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
                      [](int32_t l) { return l == io::kIgnoredLabel; })) {
        ++stats.dropped;
        continue;
      }
      ++stats.truncated;
    }
    stats.tokens += static_cast<int64_t>(example.tokens.size());
    stats.trained_tokens += std::count_if(example.labels.begin() + 1, example.labels.end(),
                                          [](int32_t l) { return l != io::kIgnoredLabel; });
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

SftLoader::SftLoader(std::pair<PackingItems, SftStats> prepared, int32_t pad_id,
                     const SftLoaderOptions& options)
    : packer_(std::move(prepared.first),
              PackingOptions{options.seq_len, options.batch_size, options.seed, options.shuffle,
                             pad_id, PackingMode::kWholeItems}),
      stats_(prepared.second) {}

SftLoader::SftLoader(std::vector<io::EncodedChat> examples, int32_t pad_id,
                     SftLoaderOptions options)
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
  std::vector<io::EncodedChat> examples;
  JsonlOptions read;
  read.strict = strict.value_or(default_data_strict());
  const JsonlStats input = read_jsonl(path, read, [&](const json& record, long line) {
    const std::string origin = path + ":" + std::to_string(line);
    if (!record.is_object() || !record.contains("messages"))
      throw Error("expected an object with \"messages\"").file(path).line(line).field("messages");
    try {
      examples.push_back(
          io::encode_chat(tokenizer, record["messages"], path, options.train_all_assistant_turns));
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
