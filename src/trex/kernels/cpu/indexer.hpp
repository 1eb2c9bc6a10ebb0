#pragma once
// CPU kernels of the lightning-indexer ops (backend.hpp; the equations are in
// model/indexer.hpp). Every row is selected by one thread from scores it
// computed itself (kernels/top_k.hpp), and every reduction over tokens runs in
// token order, so results do not depend on the thread count.
#include <cstdint>
#include <vector>

#include "trex/kernels/op_params.hpp"

namespace trex::kernels {

// The scoring inputs: q [T, n_I, c_I] (after RoPE), head weights [T, n_I]
// (scale included), keys [B·blocks, c_I].
template <class T>
struct IndexerScoring {
  const T* q = nullptr;
  const T* head_weights = nullptr;
  const T* keys = nullptr;
  int64_t heads = 0;
  int64_t head_dim = 0;
};

// I_{row, block} of one pair.
template <class T>
T indexer_score(const IndexerScoreDims& dims, const IndexerScoring<T>& in, int64_t row,
                int64_t block);

// selected [tokens, k] (written): per row the top-min(k, visible) visible
// blocks in ranks_before order, padded with −1. boundaries (nullable) receives
// one SelectionBoundary per row.
template <class T>
void indexer_select(const IndexerScoreDims& dims, const IndexerScoring<T>& in, int64_t tokens,
                    int64_t* selected, std::vector<SelectionBoundary>* boundaries);

// scores [tokens, k] (written): I of every selected block, 0 for −1 pads.
template <class T>
void indexer_selected_scores(const IndexerScoreDims& dims, const IndexerScoring<T>& in,
                             int64_t tokens, const int64_t* selected, T* scores);

// L_I = Σ_t KL(target_t ‖ softmax(scores_t)) over the selected entries;
// dscores [tokens, k] (written) = softmax − target. Returns L_I.
template <class T>
double indexer_kl_loss(int64_t tokens, int64_t k, const int64_t* selected, const T* scores,
                       const T* target, T* dscores);

// scale·dscores -> dq [T, n_I, c_I], dweights [T, n_I], dkeys [B·blocks, c_I]
// (written; dweights without the head-weight scale).
template <class T>
void indexer_score_backward(const IndexerScoreDims& dims, const IndexerScoring<T>& in,
                            int64_t tokens, const int64_t* selected, const T* dscores, T scale,
                            T* dq, T* dweights, T* dkeys);

}  // namespace trex::kernels
