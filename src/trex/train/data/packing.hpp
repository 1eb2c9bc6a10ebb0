#pragma once
// What the CPT and SFT loaders share: packed batches with per-token position
// and document ids, the resumable loader state, and the packing engine that
// shuffles items by (seed, epoch) and cuts them into fixed-length sequences.
// See docs/training.md.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/model/model.hpp"

namespace trex::train {

// B sequences of S tokens. batch.labels follow model::Batch (labels[t] is the
// token expected at t, −100 masked); a segment's first token is always −100 so
// no position is trained to predict across a document boundary.
struct PackedBatch {
  model::Batch batch;
  std::vector<int64_t> position_ids;  // [B·S] restart at 0 at each segment
  std::vector<int64_t> document_ids;  // [B·S] 0, 1, 2 … per sequence; attend only within equal ids
};

// Where a loader is: the next sequence is number `cursor` of epoch `epoch`, in
// the order drawn from the random stream Rng(seed, {epoch}). `data_fingerprint`
// identifies the items and packing options (sequence length, mode, shuffling, pad id; not
// the batch size, which may change between runs), so a state is never restored onto
// other data. Everything else is a pure function of these fields.
struct LoaderState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t cursor = 0;
  uint64_t data_fingerprint = 0;

  nlohmann::json to_json() const;  // 64-bit values as decimal strings (exact in any JSON reader)
  static LoaderState from_json(const nlohmann::json& value, const std::string& origin = "<json>");
  bool operator==(const LoaderState&) const = default;
};

// Items to pack: tokens and their labels (same length), concatenated.
struct PackingItems {
  std::vector<int32_t> tokens;
  std::vector<int32_t> labels;         // per token: itself, or −100 when not trained
  std::vector<int64_t> offsets = {0};  // item i is [offsets[i], offsets[i+1])
  int64_t count() const { return static_cast<int64_t>(offsets.size()) - 1; }
};

enum class PackingMode {
  kContinuous,  // CPT: items back to back, an item may continue in the next sequence
  kWholeItems,  // SFT: an item never straddles sequences (items are at most S tokens)
};

struct PackingOptions {
  int64_t seq_len = 1024;
  int64_t batch_size = 1;
  uint64_t seed = 0;
  bool shuffle = true;  // false: items in file order every epoch
  int32_t pad_id = 0;   // fills sequence tails; label −100, a segment of its own
  PackingMode mode = PackingMode::kContinuous;
};

class PackingLoader {
 public:
  PackingLoader(PackingItems items, PackingOptions options);

  // The next B sequences; moves to the next epoch (new order) when one ends.
  PackedBatch next_batch();

  const LoaderState& state() const { return state_; }
  // Continue from a saved state: the batches that follow are bitwise those the
  // saving loader would have produced. Throws trex::Error on another seed,
  // other data/options, or a cursor outside the epoch.
  void restore(const LoaderState& state);

  int64_t item_count() const { return items_.count(); }
  // Number of sequences in the current epoch (kWholeItems: depends on the order).
  int64_t sequences_in_epoch();
  const PackingOptions& options() const { return options_; }

 private:
  struct Segment {
    int64_t item;  // −1 = padding
    int64_t begin;
    int64_t length;
  };
  void build_epoch(int64_t epoch);
  void write_sequence(const std::vector<Segment>& sequence, int64_t row, PackedBatch& out) const;

  PackingItems items_;
  PackingOptions options_;
  LoaderState state_;
  int64_t built_epoch_ = -1;
  std::vector<std::vector<Segment>> sequences_;
};

}  // namespace trex::train
