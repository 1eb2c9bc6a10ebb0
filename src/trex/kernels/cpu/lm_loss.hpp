#pragma once
// CPU kernel of the fused LM head + cross-entropy op (backend.hpp; the
// equations are in model/lm_loss.hpp). Rows are processed in chunks so only a
// [chunk, V] block of logits exists at a time; without a logits output only
// the rows with a target are computed. Per-row losses are summed in token
// order, so the result does not depend on the thread count. Callers validate
// (model/lm_loss.cpp).
#include <cstdint>

#include "trex/kernels/precision.hpp"

namespace trex::kernels {

// h [N, d], head [V, d], targets [N] (< 0: ignored; all < V), weights? [N]
// (w_t, null = 1). Returns loss_scale · Σ w_t·CE_t. dh? [N, d] written (0 rows for ignored tokens),
// dhead? [V, d] +=, per_token_loss? [N] written (unscaled), logits? [N, V] written. chunk_rows 0:
// about 32M logits per chunk.
template <class T, class Index>
double lm_head_cross_entropy(const T* h, const T* head, const Index* targets, const T* weights,
                             int64_t N, int64_t d, int64_t V, int64_t chunk_rows, double loss_scale,
                             Precision precision, T* dh, T* dhead, T* per_token_loss, T* logits);

}  // namespace trex::kernels
