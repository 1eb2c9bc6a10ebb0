#include "trex/kernels/cpu/lm_loss.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "trex/core/profile.hpp"
#include "trex/kernels/cpu/elementwise.hpp"
#include "trex/kernels/cpu/gemm.hpp"

namespace trex::kernels {
namespace {
constexpr int64_t kAutoChunkLogits = int64_t{1} << 25;  // ~128 MiB of fp32 logits per chunk
}

template <class T, class Index>
double lm_head_cross_entropy(const T* h, const T* head, const Index* targets, const T* weights,
                             int64_t N, int64_t d, int64_t V, int64_t chunk_rows, double loss_scale,
                             Precision precision, T* dh, T* dhead, T* per_token_loss, T* logits) {
  const bool backward = dh != nullptr || dhead != nullptr;
  // Without a logits output only the counted tokens are computed (an SFT batch
  // masks most prompt tokens): their rows of h are gathered into a chunk buffer
  // and the chunk's dh rows scattered back. With a logits output every row is
  // computed in place.
  const bool compact = logits == nullptr;
  std::vector<int64_t> rows_of;  // token index of each computed row
  rows_of.reserve(static_cast<size_t>(N));
  for (int64_t t = 0; t < N; ++t)
    if (!compact || static_cast<int64_t>(targets[t]) >= 0) rows_of.push_back(t);
  const int64_t total_rows = static_cast<int64_t>(rows_of.size());
  if (dh) std::fill(dh, dh + N * d, T(0));

  const int64_t chunk = std::max<int64_t>(
      1, std::min(total_rows,
                  chunk_rows > 0 ? chunk_rows : std::max<int64_t>(1, kAutoChunkLogits / V)));
  std::vector<T> own_logits(compact ? static_cast<size_t>(chunk * V) : 0);
  std::vector<T> grad_buffer(backward && !compact ? static_cast<size_t>(chunk * V) : 0);
  std::vector<T> h_chunk(compact ? static_cast<size_t>(chunk * d) : 0);
  std::vector<T> dh_chunk(compact && dh ? static_cast<size_t>(chunk * d) : 0);
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
    T* chunk_logits = compact ? own_logits.data() : logits + r0 * V;
    {
      TREX_PROFILE(profile::Op::kGemmLmHead, profile::Phase::kForward,
                   profile::linear_flops(rows, V, d));
      linear_forward(hc, head, chunk_logits, rows, V, d, precision);
    }
    // Per row: loss and, for backward, dlogits = scale·(softmax − onehot) (zero
    // for ignored rows). In compact mode the logits are overwritten in place.
    T* grad = compact ? chunk_logits : grad_buffer.data();
#pragma omp parallel for schedule(static) if (rows * V > (1 << 15))
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t t = rows_of[r0 + i];
      const int64_t target = static_cast<int64_t>(targets[t]);
      const T* z = chunk_logits + i * V;
      T* g = grad + i * V;
      if (target < 0) {
        if (backward) std::fill(g, g + V, T(0));
        continue;
      }
      const T row_scale = weights ? scale * weights[t] : scale;
      if constexpr (std::is_same_v<T, float>) {
        // Vectorised exp, Σexp in double over fixed lanes (kernels/cpu/elementwise).
        row_loss[t] = softmax_cross_entropy_row(z, V, target, row_scale, backward ? g : nullptr);
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
        for (int64_t v = 0; v < V; ++v) g[v] = row_scale * std::exp(z[v] - shift);
        g[target] -= row_scale;
      }
    }
    if (backward) {
      T* dh_rows = dh ? (compact ? dh_chunk.data() : dh + r0 * d) : nullptr;
      {
        TREX_PROFILE(profile::Op::kGemmLmHead, profile::Phase::kBackward,
                     profile::linear_backward_flops(rows, V, d));
        linear_backward(hc, head, grad, dh_rows, dhead, rows, V, d, precision);
      }
      if (compact && dh)
        for (int64_t i = 0; i < rows; ++i)
          std::copy(dh_chunk.data() + i * d, dh_chunk.data() + (i + 1) * d,
                    dh + rows_of[r0 + i] * d);
    }
  }

  double total = 0.0;  // token order: independent of the thread count
  for (int64_t t = 0; t < N; ++t)
    total += weights ? static_cast<double>(weights[t]) * row_loss[t] : row_loss[t];
  if (per_token_loss)
    for (int64_t t = 0; t < N; ++t) per_token_loss[t] = static_cast<T>(row_loss[t]);
  return loss_scale * total;
}

#define TREX_LM_LOSS_INSTANTIATE(T, Index)                                                    \
  template double lm_head_cross_entropy<T, Index>(const T*, const T*, const Index*, const T*, \
                                                  int64_t, int64_t, int64_t, int64_t, double, \
                                                  Precision, T*, T*, T*, T*);
TREX_LM_LOSS_INSTANTIATE(float, int32_t)
TREX_LM_LOSS_INSTANTIATE(float, int64_t)
TREX_LM_LOSS_INSTANTIATE(double, int32_t)
TREX_LM_LOSS_INSTANTIATE(double, int64_t)
#undef TREX_LM_LOSS_INSTANTIATE

}  // namespace trex::kernels
