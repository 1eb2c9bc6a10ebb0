#include "trex/model/lm_loss.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"
#include "trex/kernels/cpu/elementwise.hpp"
#include "trex/kernels/cpu/gemm.hpp"

namespace trex::model {
namespace {
constexpr int64_t kAutoChunkLogits = int64_t{1} << 25;  // ~128 MiB of fp32 logits per chunk
}

template <class Index>
int64_t lm_loss_count_targets(const Index* targets, int64_t tokens, int64_t vocab) {
  if (tokens > 0 && targets == nullptr) throw Error("lm loss: null targets").field("targets");
  int64_t counted = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t target = static_cast<int64_t>(targets[t]);
    if (target >= vocab)
      throw Error("lm loss: target " + std::to_string(target) + " at token " + std::to_string(t) +
                  " is >= vocab size " + std::to_string(vocab))
          .field("targets");
    if (target >= 0) ++counted;
  }
  return counted;
}

template <class T, class Index>
LmLossResult lm_head_cross_entropy(const LmLossDims& dims, const T* h, const T* head,
                                   const Index* targets, double loss_scale,
                                   const LmLossOutputs<T>& outputs) {
  if (dims.tokens < 0) throw Error("lm loss: tokens must be >= 0").field("tokens");
  if (dims.hidden <= 0) throw Error("lm loss: hidden must be > 0").field("hidden_size");
  if (dims.vocab <= 0) throw Error("lm loss: vocab must be > 0").field("vocab_size");
  if (dims.chunk_rows < 0) throw Error("lm loss: chunk_rows must be >= 0").field("chunk_rows");
  if (!std::isfinite(loss_scale)) throw Error("lm loss: loss scale not finite").field("loss_scale");
  const int64_t N = dims.tokens, d = dims.hidden, V = dims.vocab;
  // Forward and backward are fused per chunk: the head GEMMs are timed per
  // direction, the cross-entropy and the chunk bookkeeping as loss.ce.
  TREX_PROFILE(profile::Op::kLoss, profile::Phase::kForward);
  LmLossResult result;
  result.counted = lm_loss_count_targets(targets, N, V);
  if (N == 0) return result;
  if (h == nullptr) throw Error("lm loss: null hidden states").field("h");
  if (head == nullptr) throw Error("lm loss: null head weight").field("head.weight");

  const bool backward = outputs.dh != nullptr || outputs.dhead != nullptr;
  // Without a logits output only the counted tokens are computed (an SFT batch
  // masks most prompt tokens): their rows of h are gathered into a chunk buffer
  // and the chunk's dh rows scattered back. With a logits output every row is
  // computed in place.
  const bool compact = outputs.logits == nullptr;
  std::vector<int64_t> rows_of;  // token index of each computed row
  rows_of.reserve(static_cast<size_t>(compact ? result.counted : N));
  for (int64_t t = 0; t < N; ++t)
    if (!compact || static_cast<int64_t>(targets[t]) >= 0) rows_of.push_back(t);
  const int64_t total_rows = static_cast<int64_t>(rows_of.size());
  if (outputs.dh) std::fill(outputs.dh, outputs.dh + N * d, T(0));

  const int64_t chunk = std::max<int64_t>(
      1, std::min(total_rows, dims.chunk_rows > 0 ? dims.chunk_rows
                                                  : std::max<int64_t>(1, kAutoChunkLogits / V)));
  std::vector<T> own_logits(compact ? static_cast<size_t>(chunk * V) : 0);
  std::vector<T> grad_buffer(backward && !compact ? static_cast<size_t>(chunk * V) : 0);
  std::vector<T> h_chunk(compact ? static_cast<size_t>(chunk * d) : 0);
  std::vector<T> dh_chunk(compact && outputs.dh ? static_cast<size_t>(chunk * d) : 0);
  std::vector<double> row_loss(static_cast<size_t>(N), 0.0);
  const T scale = static_cast<T>(loss_scale);

  for (int64_t r0 = 0; r0 < total_rows; r0 += chunk) {
    const int64_t rows = std::min(chunk, total_rows - r0);
    const T* hc = h + r0 * d;
    if (compact) {
      for (int64_t i = 0; i < rows; ++i)
        std::copy(h + rows_of[r0 + i] * d, h + (rows_of[r0 + i] + 1) * d, h_chunk.data() + i * d);
      hc = h_chunk.data();
    }
    T* logits = compact ? own_logits.data() : outputs.logits + r0 * V;
    {
      TREX_PROFILE(profile::Op::kGemmLmHead, profile::Phase::kForward,
                   profile::linear_flops(rows, V, d));
      kernels::linear_forward(hc, head, logits, rows, V, d);
    }
    // Per row: loss and, for backward, dlogits = scale·(softmax − onehot) (zero
    // for ignored rows). In compact mode the logits are overwritten in place.
    T* grad = compact ? logits : grad_buffer.data();
#pragma omp parallel for schedule(static) if (rows * V > (1 << 15))
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t t = rows_of[r0 + i];
      const int64_t target = static_cast<int64_t>(targets[t]);
      const T* z = logits + i * V;
      T* g = grad + i * V;
      if (target < 0) {
        if (backward) std::fill(g, g + V, T(0));
        continue;
      }
      if constexpr (std::is_same_v<T, float>) {
        // Vectorised exp, Σexp in double over fixed lanes (kernels/cpu/elementwise).
        row_loss[t] =
            kernels::softmax_cross_entropy_row(z, V, target, scale, backward ? g : nullptr);
        continue;
      }
      T mx = z[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, z[v]);
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += static_cast<double>(std::exp(z[v] - mx));
      const double lse = static_cast<double>(mx) + std::log(sum);
      row_loss[t] = lse - static_cast<double>(z[target]);
      if (backward) {
        const T shift = static_cast<T>(lse);
        for (int64_t v = 0; v < V; ++v) g[v] = scale * std::exp(z[v] - shift);
        g[target] -= scale;
      }
    }
    if (backward) {
      T* dh = outputs.dh ? (compact ? dh_chunk.data() : outputs.dh + r0 * d) : nullptr;
      {
        TREX_PROFILE(profile::Op::kGemmLmHead, profile::Phase::kBackward,
                     profile::linear_backward_flops(rows, V, d));
        kernels::linear_backward(hc, head, grad, dh, outputs.dhead, rows, V, d);
      }
      if (compact && outputs.dh)
        for (int64_t i = 0; i < rows; ++i)
          std::copy(dh_chunk.data() + i * d, dh_chunk.data() + (i + 1) * d,
                    outputs.dh + rows_of[r0 + i] * d);
    }
  }

  double total = 0.0;  // token order: independent of the thread count
  for (int64_t t = 0; t < N; ++t) total += row_loss[t];
  result.loss = loss_scale * total;
  if (outputs.per_token_loss)
    for (int64_t t = 0; t < N; ++t) outputs.per_token_loss[t] = static_cast<T>(row_loss[t]);
  return result;
}

template int64_t lm_loss_count_targets<int32_t>(const int32_t*, int64_t, int64_t);
template int64_t lm_loss_count_targets<int64_t>(const int64_t*, int64_t, int64_t);
template LmLossResult lm_head_cross_entropy<float, int32_t>(const LmLossDims&, const float*,
                                                            const float*, const int32_t*, double,
                                                            const LmLossOutputs<float>&);
template LmLossResult lm_head_cross_entropy<float, int64_t>(const LmLossDims&, const float*,
                                                            const float*, const int64_t*, double,
                                                            const LmLossOutputs<float>&);
template LmLossResult lm_head_cross_entropy<double, int32_t>(const LmLossDims&, const double*,
                                                             const double*, const int32_t*, double,
                                                             const LmLossOutputs<double>&);
template LmLossResult lm_head_cross_entropy<double, int64_t>(const LmLossDims&, const double*,
                                                             const double*, const int64_t*, double,
                                                             const LmLossOutputs<double>&);

}  // namespace trex::model
