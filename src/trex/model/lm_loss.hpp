#pragma once
// Fused LM head + cross-entropy (spec §2.9, MTP loss §2.10).
//
//   logits_t = h_t · headᵀ            h [N, d] (final normed hidden), head [V, d] (untied)
//   CE_t     = logsumexp(logits_t) − logits_t[target_t]
//   loss     = loss_scale · Σ_{t counted} w_t·CE_t   (w_t = 1 unless token weights are given)
// A negative target means "ignore" (SFT loss mask, no next token): CE_t = 0, no gradient.
// The caller chooses the reduction through loss_scale (1/count for a mean,
// λ/count for the MTP loss, 1 for a sum).
//
// Tokens are processed in chunks of `chunk_rows` rows, so only a
// [chunk_rows, V] block of logits exists at a time (never [N, V], unless the
// caller asks for the logits). Logits, softmax and the loss are in the scalar
// type T (fp32 for training); the log-sum-exp is max-subtracted and its sum
// accumulated in double. The head GEMMs run on ctx's backend in ctx.precision
// (bf16: bf16 operands with fp32 accumulation, as the reference's BF16 head).
#include <cstdint>

#include "trex/kernels/backend.hpp"

namespace trex::model {

struct LmLossDims {
  int64_t tokens = 0;
  int64_t hidden = 0;
  int64_t vocab = 0;
  // Rows per chunk; 0 = automatic (about 32M logits per chunk, at least 1 row).
  int64_t chunk_rows = 0;
};

struct LmLossResult {
  double loss = 0.0;    // loss_scale · Σ CE over counted tokens
  int64_t counted = 0;  // tokens with a target in [0, V)
};

template <class T>
struct LmLossOutputs {
  T* dh = nullptr;              // [N, d] written (0 rows for ignored tokens); null = skip
  T* dhead = nullptr;           // [V, d] accumulated (+=); null = frozen / no backward
  T* per_token_loss = nullptr;  // [N] written: unscaled CE_t, 0 for ignored; nullable
  T* logits = nullptr;          // [N, V] written when non-null (parity tests, `trex forward`)
};

// Counts targets in [0, vocab) (what `counted` will be), e.g. to choose loss_scale = 1/count
// before the fused call. Throws trex::Error (field "targets") on a target >= vocab.
template <class Index>
int64_t lm_loss_count_targets(const Index* targets, int64_t tokens, int64_t vocab,
                              const kernels::OpContext& ctx = {});

// Forward and (when dh/dhead are given) backward in one pass. Index = int32_t or int64_t.
// Throws trex::Error naming the field on bad dims or a target >= vocab.
template <class T, class Index>
LmLossResult lm_head_cross_entropy(const LmLossDims& dims, const T* h, const T* head,
                                   const Index* targets, double loss_scale,
                                   const LmLossOutputs<T>& outputs,
                                   const kernels::OpContext& ctx = {});

// The same with a weight per token (token_weights [N], nullable = 1): the loss is
// loss_scale · Σ w_t·CE_t and each row's gradient is scaled by w_t (a weight may be
// negative or 0: the policy-gradient step weights log-probabilities this way).
template <class T, class Index>
LmLossResult lm_head_cross_entropy(const LmLossDims& dims, const T* h, const T* head,
                                   const Index* targets, const T* token_weights, double loss_scale,
                                   const LmLossOutputs<T>& outputs,
                                   const kernels::OpContext& ctx = {});

}  // namespace trex::model
