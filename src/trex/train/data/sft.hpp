#pragma once
// Supervised fine-tuning loader: chat examples encoded in DeepSeek-V4's
// non-thinking chat format (spec §5), loss only on the assistant answers,
// several whole examples packed per sequence with position / document ids.
// Resumable through LoaderState. See docs/training.md.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/core/jsonl.hpp"
#include "trex/io/chat.hpp"
#include "trex/io/tokenizer.hpp"
#include "trex/train/data/packing.hpp"

namespace trex::train {

enum class OverlongPolicy {
  kTruncate,  // keep the first S tokens (dropped anyway if no trained token survives)
  kDrop,
};

// How the training loaders read their JSONL (data.strict in the run config):
// a bad line (invalid JSON, a record the loader rejects) is skipped, counted
// and logged unless strict, when it is a trex::Error naming the file and line.
// from_jsonl calls without `strict` use this process-wide default
// (false until set; `trex train` sets it from data.strict).
void set_default_data_strict(bool strict);
bool default_data_strict();
// The counts of every training JSONL file the loaders of this process read
// (lines, skipped, repaired; file:line of the first skipped lines).
JsonlStats data_input_totals();
// Adds one file's counts to data_input_totals() and logs a warning when it
// had skipped or repaired lines (used by the SFT and CPT loaders).
void note_data_input(const JsonlStats& stats);

struct SftLoaderOptions {
  int64_t seq_len = 1024;
  int64_t batch_size = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  OverlongPolicy overlong = OverlongPolicy::kTruncate;
  bool train_all_assistant_turns = true;
};

struct SftStats {
  int64_t examples = 0;        // read
  int64_t truncated = 0;       // longer than S, cut to S tokens and kept
  int64_t dropped = 0;         // longer than S and dropped (kDrop, or nothing trained left)
  int64_t tokens = 0;          // kept tokens
  int64_t trained_tokens = 0;  // kept tokens with a label
  JsonlStats input;            // from_jsonl: lines read, skipped, repaired
};

class SftLoader {
 public:
  SftLoader(std::vector<io::EncodedChat> examples, int32_t pad_id, SftLoaderOptions options);
  // JSONL of {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}]}.
  // `strict` unset: default_data_strict() (data_sft.hpp).
  static SftLoader from_jsonl(const std::string& path, const io::Tokenizer& tokenizer,
                              SftLoaderOptions options, std::optional<bool> strict = std::nullopt);

  PackedBatch next_batch() { return packer_.next_batch(); }
  const LoaderState& state() const { return packer_.state(); }
  void restore(const LoaderState& state) { packer_.restore(state); }
  const SftStats& stats() const { return stats_; }
  int64_t example_count() const { return packer_.item_count(); }
  int64_t sequences_in_epoch() { return packer_.sequences_in_epoch(); }

 private:
  SftLoader(std::pair<PackingItems, SftStats> prepared, int32_t pad_id,
            const SftLoaderOptions& options);
  PackingLoader packer_;
  SftStats stats_;
};

}  // namespace trex::train
