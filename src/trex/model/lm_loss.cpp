#include "trex/model/lm_loss.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"

namespace trex::model {

template <class Index>
int64_t lm_loss_count_targets(const Index* targets, int64_t tokens, int64_t vocab,
                              const kernels::OpContext& ctx) {
  if (tokens > 0 && targets == nullptr) throw Error("lm loss: null targets").field("targets");
  // Negative targets are ignored: any value below vocab passes, those >= 0 count.
  const kernels::IndexScan scan = ctx.ops().scan_indices(
      kernels::Tensor::of(targets, {tokens}), std::numeric_limits<int64_t>::min(), vocab);
  if (scan.first_bad >= 0)
    throw Error("lm loss: target " + std::to_string(scan.bad_value) + " at token " +
                std::to_string(scan.first_bad) + " is >= vocab size " + std::to_string(vocab))
        .field("targets");
  return scan.counted;
}

template <class T, class Index>
LmLossResult lm_head_cross_entropy(const LmLossDims& dims, const T* h, const T* head,
                                   const Index* targets, double loss_scale,
                                   const LmLossOutputs<T>& outputs, const kernels::OpContext& ctx) {
  return lm_head_cross_entropy(dims, h, head, targets, static_cast<const T*>(nullptr), loss_scale,
                               outputs, ctx);
}

template <class T, class Index>
LmLossResult lm_head_cross_entropy(const LmLossDims& dims, const T* h, const T* head,
                                   const Index* targets, const T* token_weights, double loss_scale,
                                   const LmLossOutputs<T>& outputs, const kernels::OpContext& ctx) {
  if (dims.tokens < 0) throw Error("lm loss: tokens must be >= 0").field("tokens");
  if (dims.hidden <= 0) throw Error("lm loss: hidden must be > 0").field("hidden_size");
  if (dims.vocab <= 0) throw Error("lm loss: vocab must be > 0").field("vocab_size");
  if (dims.chunk_rows < 0) throw Error("lm loss: chunk_rows must be >= 0").field("chunk_rows");
  if (!std::isfinite(loss_scale)) throw Error("lm loss: loss scale not finite").field("loss_scale");
  const int64_t N = dims.tokens, d = dims.hidden, V = dims.vocab;
  // One op, forward and backward fused per chunk: the head GEMMs are timed per
  // direction, the cross-entropy and the chunk bookkeeping as loss.ce.
  TREX_PROFILE(profile::Op::kLoss, profile::Phase::kForward);
  LmLossResult result;
  result.counted = lm_loss_count_targets(targets, N, V, ctx);
  if (N == 0) return result;
  if (h == nullptr) throw Error("lm loss: null hidden states").field("h");
  if (head == nullptr) throw Error("lm loss: null head weight").field("head.weight");

  using kernels::Tensor;
  const kernels::LmHeadOutputs out{
      Tensor::optional(outputs.dh, {N, d}), Tensor::optional(outputs.dhead, {V, d}),
      Tensor::optional(outputs.per_token_loss, {N}), Tensor::optional(outputs.logits, {N, V})};
  result.loss = ctx.ops().lm_head_cross_entropy(
      Tensor::of(h, {N, d}), Tensor::of(head, {V, d}), Tensor::of(targets, {N}),
      Tensor::optional(token_weights, {N}), loss_scale, out, dims.chunk_rows, ctx.precision);
  return result;
}

template int64_t lm_loss_count_targets<int32_t>(const int32_t*, int64_t, int64_t,
                                                const kernels::OpContext&);
template int64_t lm_loss_count_targets<int64_t>(const int64_t*, int64_t, int64_t,
                                                const kernels::OpContext&);
template LmLossResult lm_head_cross_entropy<float, int32_t>(const LmLossDims&, const float*,
                                                            const float*, const int32_t*, double,
                                                            const LmLossOutputs<float>&,
                                                            const kernels::OpContext&);
template LmLossResult lm_head_cross_entropy<float, int64_t>(const LmLossDims&, const float*,
                                                            const float*, const int64_t*, double,
                                                            const LmLossOutputs<float>&,
                                                            const kernels::OpContext&);
template LmLossResult lm_head_cross_entropy<double, int32_t>(const LmLossDims&, const double*,
                                                             const double*, const int32_t*, double,
                                                             const LmLossOutputs<double>&,
                                                             const kernels::OpContext&);
template LmLossResult lm_head_cross_entropy<double, int64_t>(const LmLossDims&, const double*,
                                                             const double*, const int64_t*, double,
                                                             const LmLossOutputs<double>&,
                                                             const kernels::OpContext&);

template LmLossResult lm_head_cross_entropy<float, int32_t>(const LmLossDims&, const float*,
                                                            const float*, const int32_t*,
                                                            const float*, double,
                                                            const LmLossOutputs<float>&,
                                                            const kernels::OpContext&);
template LmLossResult lm_head_cross_entropy<float, int64_t>(const LmLossDims&, const float*,
                                                            const float*, const int64_t*,
                                                            const float*, double,
                                                            const LmLossOutputs<float>&,
                                                            const kernels::OpContext&);
template LmLossResult lm_head_cross_entropy<double, int32_t>(const LmLossDims&, const double*,
                                                             const double*, const int32_t*,
                                                             const double*, double,
                                                             const LmLossOutputs<double>&,
                                                             const kernels::OpContext&);
template LmLossResult lm_head_cross_entropy<double, int64_t>(const LmLossDims&, const double*,
                                                             const double*, const int64_t*,
                                                             const double*, double,
                                                             const LmLossOutputs<double>&,
                                                             const kernels::OpContext&);

}  // namespace trex::model
