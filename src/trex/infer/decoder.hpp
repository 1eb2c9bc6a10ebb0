#pragma once
// Incremental decoding of a DeepSeek-V4 model (spec §2, compressor state §2.11).
//
// A Decoder keeps, per sequence and per main layer, exactly what later tokens
// can still read: the last n_win K=V latents (a ring buffer), every emitted
// compressed entry (CSA/HCA) and, for CSA, every indexer key, plus the
// compressor's pending rows (the projections of the tokens of the current and,
// when overlapping, the previous block) from which the next entry is pooled
// once its block is complete. Feeding a sequence's tokens one at a time, or in
// chunks, reproduces the logits of Model::forward_backward on the whole
// sequence (the per-token parts — mHC, norms, MoE, head — are the engine's own
// functions, on the model's backend; the attention core of each query runs as
// the backend's decoding ops, the same equations with scalar sums).
// The MTP block is not used for decoding. See docs/generation.md.
#include <cstdint>
#include <memory>
#include <vector>

#include "trex/model/model.hpp"

namespace trex::infer {

template <class T>
class Decoder {
 public:
  // The model must outlive the decoder and must not change while it is in use.
  explicit Decoder(const model::Model<T>& model);
  ~Decoder();
  Decoder(Decoder&&) noexcept;
  Decoder& operator=(Decoder&&) noexcept;

  // A new, empty sequence; returns its handle (handles of released sequences are reused).
  int64_t add_sequence();
  // A new sequence whose state is a copy of `source` (n samples of one prompt share its prefill).
  int64_t fork_sequence(int64_t source);
  void release_sequence(int64_t sequence);
  // Tokens fed so far (= the position of the next token).
  int64_t length(int64_t sequence) const;
  int64_t active_sequences() const;

  // Feeds tokens[i] to sequences[i]. Several sequences advance together (every
  // per-token GEMM runs over all rows); a sequence may appear several times, its
  // tokens in order (prompt prefill). logits (nullable) receives [rows, V] for the
  // rows listed in logit_rows, in that order; empty logit_rows = every row.
  void feed(const std::vector<int64_t>& sequences, const std::vector<int64_t>& tokens, T* logits,
            const std::vector<int64_t>& logit_rows = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trex::infer
