#pragma once
// CPU kernels of the incremental decoder's ops (backend.hpp; infer/decoder.cpp):
// one query token against the keys its sequence has kept. Scalar loops in a
// fixed order (the decoder's own order of operations: plain dot products,
// softmax with the head's sink), run on the calling thread: the decoder runs
// sequences in parallel, each row's keys from its own sequence.
#include <cstdint>

namespace trex::kernels {

// The lightning indexer for one query: score_i = Σ_h w_h·ReLU(q_h·key_i) over
// keys [visible, c_I] (q [heads, c_I], head_weights [heads]); selected [take]
// (written) = the take ≤ visible best in ranks_before order (kernels/top_k.hpp).
template <class T>
void decode_indexer_select(const T* q, const T* head_weights, int64_t heads, int64_t head_dim,
                           const T* keys, int64_t visible, int64_t take, int64_t* selected);

// o [heads, c] (written) = Σ_k p_k·key_k, p = softmax over the n keys [n, c]
// (K = V) of q_h·key_k / sqrt(c), with the head's sink logit in the normaliser.
template <class T>
void decode_attention(const T* q, int64_t heads, int64_t c, const T* keys, int64_t n, const T* sink,
                      T* o);

}  // namespace trex::kernels
