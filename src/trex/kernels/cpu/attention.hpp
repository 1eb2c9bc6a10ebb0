#pragma once
// CPU kernels of the attention core ops (backend.hpp; the equations are in
// model/attention.hpp): per query token, scores against its window and
// compressed keys, softmax with the head's sink, and the weighted sum of the
// keys (K = V, shared by all heads). The window keys are handled as GEMMs
// per block of consecutive queries (and of keys for their gradient), in
// dims.precision; blocks are fixed by the shape, so results do not depend on
// the thread count. Callers validate (model/attention.cpp, Backend).
#include <cstdint>

#include "trex/kernels/op_params.hpp"

namespace trex::kernels {

// The keys of N query rows: kv [N, c] (window keys), compressed [E, c],
// comp_offsets [N+1], comp_list, prob_offsets [N+1].
template <class T>
struct AttentionKeySets {
  const T* kv = nullptr;
  const T* compressed = nullptr;
  int64_t entries = 0;  // E
  const int64_t* comp_offsets = nullptr;
  const int64_t* comp_list = nullptr;
  const int64_t* prob_offsets = nullptr;
};

// q [N, H, c], sink [H] -> prob [prob_offsets[N]], sink_prob [N, H], o [N, H, c]
// (written).
template <class T>
void attention_core_forward(const AttentionCoreDims& dims, int64_t N, int64_t H, int64_t c,
                            const T* q, const AttentionKeySets<T>& keys, const T* sink, T* prob,
                            T* sink_prob, T* o);

// d_o [N, H, c] -> dq [N, H, c], dkv [N, c], dcompressed [E, c] (written),
// dsink? [H] (+=, in token order).
template <class T>
void attention_core_backward(const AttentionCoreDims& dims, int64_t N, int64_t H, int64_t c,
                             const T* q, const AttentionKeySets<T>& keys, const T* prob,
                             const T* sink_prob, const T* o, const T* d_o, T* dq, T* dkv,
                             T* dcompressed, T* dsink);

// The indexer's target (spec §3.2): per query, the main attention's
// probabilities summed over heads on its selected compressed entries
// (selected [N, k], −1 pads skipped; the comp_list order), L1-normalised.
// target [N, k] written (0 for pads).
template <class T>
void attention_selected_mass(const AttentionCoreDims& dims, int64_t N, int64_t H, int64_t k,
                             const T* prob, const int64_t* prob_offsets,
                             const int64_t* comp_offsets, const int64_t* selected, T* target);

}  // namespace trex::kernels
