#pragma once
// The experts of a DeepSeek-V4 MoE block (spec §2.7, §3.6): SwiGLU FFNs with a clamp,
//
//   Expert(x) = (SiLU(min(x W1ᵀ, L)) ⊙ clamp(x W3ᵀ, −L, L)) W2ᵀ   (L ≤ 0: no clamp).
//
// Routed experts run grouped: the rows of every expert lie in one contiguous
// block, and W1, W3 and W2 each run as one grouped GEMM over all blocks
// (Backend::grouped_linear_* with the blocks' offsets); a row's output is
// scaled by its combine weight before W2 (Backend::swiglu_*). The shared
// expert runs over all N tokens, unscaled. Expert GEMMs multiply in the
// OpContext's precision (bf16 operands when kBF16).
#include <cstdint>
#include <span>
#include <vector>

#include "trex/kernels/array.hpp"
#include "trex/kernels/backend.hpp"
#include "trex/model/moe_types.hpp"

namespace trex::model {

// What an expert forward keeps for its backward.
template <class T>
struct ExpertActivations {
  kernels::Array<T> gate_pre;  // [rows, I] x W1ᵀ before the clamp
  kernels::Array<T> up_pre;    // [rows, I] x W3ᵀ before the clamp
};

// Rows grouped by expert: expert e's rows are [offsets[e], offsets[e + 1]).
template <class T>
struct GroupedRows {
  kernels::Tensor offsets;   // I64 [E + 1], in the backend's memory
  int64_t row_count = 0;     // offsets[E], known on the host (it sizes the buffers)
  const T* x = nullptr;      // [rows, d] input rows
  const T* scale = nullptr;  // [rows] their combine weights
  int64_t rows() const { return row_count; }
};

// Whether the block has a shared expert; throws trex::Error unless its three
// weights are all present or all null.
template <class T>
bool has_shared_expert(const MoeWeights<T>& weights);

// out [rows, d] (written) = scale ⊙ Expert_e(x) for the rows of every expert e;
// saved is resized to the rows.
template <class T>
void grouped_experts_forward(const MoeDims& dims, const MoeWeights<T>& weights,
                             const GroupedRows<T>& rows, ExpertActivations<T>& saved, T* out,
                             const kernels::OpContext& ctx = {});
// dout [rows, d] -> dx [rows, d] (written; nullable), dscale [rows] (written);
// the weight gradients of every expert with rows accumulate into grads (its
// expert vectors empty or of size E).
template <class T>
void grouped_experts_backward(const MoeDims& dims, const MoeWeights<T>& weights,
                              const MoeGrads<T>& grads, const GroupedRows<T>& rows,
                              const ExpertActivations<T>& saved, const T* dout, T* dx, T* dscale,
                              const kernels::OpContext& ctx = {});

// y [N, d] (written) = Shared(x), zeros without a shared expert; gate_pre and
// up_pre [N, I] are kept for the backward (emptied without one).
template <class T>
void shared_expert_forward(const MoeDims& dims, const MoeWeights<T>& weights, const T* x,
                           kernels::Array<T>& gate_pre, kernels::Array<T>& up_pre, T* y,
                           const kernels::OpContext& ctx = {});
// dy [N, d] -> dx [N, d] (written; nullable), shared weight gradients accumulated.
template <class T>
void shared_expert_backward(const MoeDims& dims, const MoeWeights<T>& weights,
                            const MoeGrads<T>& grads, const T* x, const kernels::Array<T>& gate_pre,
                            const kernels::Array<T>& up_pre, const T* dy, T* dx,
                            const kernels::OpContext& ctx = {});

}  // namespace trex::model
