#pragma once
// Continued-pre-training loader: documents tokenised as BOS + text + EOS,
// shuffled by seed per epoch, concatenated and cut into sequences of S tokens
// (a document may continue in the next sequence; positions restart there).
// Labels are the tokens, −100 at each segment start and on the padding of the
// epoch's last sequence. Resumable through LoaderState. See docs/training.md.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trex/core/jsonl.hpp"
#include "trex/io/tokenizer.hpp"
#include "trex/train/data/packing.hpp"

namespace trex::train {

struct CptLoaderOptions {
  int64_t seq_len = 1024;
  int64_t batch_size = 1;
  uint64_t seed = 0;
  bool shuffle = true;
};

// Reads a JSONL of {"text": "..."} documents and tokenises each as
// [BOS] + encode(text) + [EOS]. Blank lines are skipped; a record without a
// string "text" is a trex::Error naming the file, line and field with
// `read.strict` (the default here), else skipped and counted in `*stats`.
// Throws when the tokenizer lacks BOS or EOS.
std::vector<std::vector<int32_t>> tokenize_text_jsonl(const std::string& path,
                                                      const io::Tokenizer& tokenizer,
                                                      const JsonlOptions& read = strict_jsonl(),
                                                      JsonlStats* stats = nullptr);

class CptLoader {
 public:
  // `documents` are already framed (BOS … EOS); pad_id fills the epoch's last sequence.
  CptLoader(const std::vector<std::vector<int32_t>>& documents, int32_t pad_id,
            CptLoaderOptions options);
  // Reads and tokenises the JSONL; pads with the tokenizer's pad token (EOS when absent).
  // `strict` unset: default_data_strict() (data_sft.hpp).
  static CptLoader from_jsonl(const std::string& path, const io::Tokenizer& tokenizer,
                              CptLoaderOptions options, std::optional<bool> strict = std::nullopt);

  PackedBatch next_batch() { return packer_.next_batch(); }
  const LoaderState& state() const { return packer_.state(); }
  void restore(const LoaderState& state) { packer_.restore(state); }
  int64_t document_count() const { return packer_.item_count(); }
  int64_t token_count() const { return token_count_; }
  const JsonlStats& input() const { return input_; }  // from_jsonl: lines read, skipped, repaired
  int64_t sequences_in_epoch() { return packer_.sequences_in_epoch(); }

 private:
  PackingLoader packer_;
  int64_t token_count_ = 0;
  JsonlStats input_;
};

}  // namespace trex::train
