#pragma once
// Checks of operand *contents* (offsets, ranges) for the ops whose validity
// depends on them. Backend's public ops check dtypes and shapes only, never
// reading an operand's memory (a device backend's is not host-readable); a
// backend runs these where its memory is readable — the CPU backend on entry
// to the op. Each throws trex::Error naming the op and operand.
#include <cstdint>
#include <span>

#include "trex/kernels/backend.hpp"

namespace trex::kernels {

// prob holds prob_offsets[N] values.
void check_attention_probabilities(const AttentionKeyTensors& keys, const Tensor& prob,
                                   const char* op);
// Balance sequences [B, 2] (first row, length): non-empty, inside the N tokens.
void check_balance_sequences(const Tensor& sequences, int64_t N, const char* op);
// offsets [G+1] ascend from 0 to rows; every group with rows has its weight.
void check_row_groups(const Tensor& offsets, int64_t rows, std::span<const Tensor> w,
                      const char* op);
// comp_list holds comp_offsets[N] entries (attention_compressed_keys).
void check_compressed_keys_length(const Tensor& comp_offsets, const Tensor& comp_list);
// sum_squares' ranges [begin, end) lie inside x.
void check_sum_ranges(const Tensor& x, const Tensor& bounds);

}  // namespace trex::kernels
