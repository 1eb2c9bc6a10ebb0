#pragma once
// CPU index bookkeeping (Backend's "Index bookkeeping" ops): positions,
// index scans and counts, the counting sort of the MoE dispatch, and the key
// sets of the attention core. Serial: these are O(tokens) next to the GEMMs.
#include <cstdint>

#include "trex/kernels/op_params.hpp"

namespace trex::kernels {

// out[i] = (i mod period)·stride for i < n.
void sequence_positions(int64_t* out, int64_t n, int64_t period, int64_t stride);

template <class Index>
IndexScan scan_indices(const Index* index, int64_t n, int64_t lo, int64_t hi);

// counts[v] = #{i : index[i] = v} for v < E; throws trex::Error on an entry
// outside [0, E).
void count_indices(const int32_t* index, int64_t n, int64_t E, int64_t* counts);

// Stable counting sort of keys [n] in [0, E): offsets [E+1], order [n], rank [n].
void counting_sort(const int32_t* keys, int64_t n, int64_t E, int64_t* offsets, int64_t* order,
                   int64_t* rank);

// selected [N, k] (−1 pads; null: none) as in Backend::attention_key_offsets.
int64_t first_invisible_selection(const AttentionKeySetDims& dims, const int64_t* selected,
                                  int64_t N, int64_t k);
AttentionKeySetSizes attention_key_offsets(const AttentionKeySetDims& dims, const int64_t* selected,
                                           int64_t N, int64_t k, int64_t* comp_offsets,
                                           int64_t* prob_offsets);
void attention_compressed_keys(const AttentionKeySetDims& dims, const int64_t* selected, int64_t N,
                               int64_t k, const int64_t* comp_offsets, int64_t* comp_list);

}  // namespace trex::kernels
