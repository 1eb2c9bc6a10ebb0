#include "trex/model/lm_loss.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "trex/core/error.hpp"
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
  LmLossResult result;
  result.counted = lm_loss_count_targets(targets, N, V);
  if (N == 0) return result;
  if (h == nullptr) throw Error("lm loss: null hidden states").field("h");
  if (head == nullptr) throw Error("lm loss: null head weight").field("head.weight");

  const bool backward = outputs.dh != nullptr || outputs.dhead != nullptr;
  const int64_t chunk = std::min(
      N, dims.chunk_rows > 0 ? dims.chunk_rows : std::max<int64_t>(1, kAutoChunkLogits / V));
  std::vector<T> own_logits(outputs.logits ? 0 : static_cast<size_t>(chunk * V));
  std::vector<double> row_loss(static_cast<size_t>(N), 0.0);
  const T scale = static_cast<T>(loss_scale);

  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t rows = std::min(chunk, N - r0);
    T* logits = outputs.logits ? outputs.logits + r0 * V : own_logits.data();
    kernels::linear_forward(h + r0 * d, head, logits, rows, V, d);
    // Per row: loss, and (for backward) logits turned in place into
    // dlogits = scale·(softmax − onehot); zero for ignored rows. When the caller
    // keeps the logits, the gradient goes into a separate buffer.
    T* grad = logits;
    std::vector<T> grad_buffer;
    if (backward && outputs.logits) {
      grad_buffer.resize(static_cast<size_t>(rows * V));
      grad = grad_buffer.data();
    }
#pragma omp parallel for schedule(static) if (rows * V > (1 << 15))
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t t = r0 + i;
      const int64_t target = static_cast<int64_t>(targets[t]);
      const T* z = logits + i * V;
      T* g = grad + i * V;
      if (target < 0) {
        if (backward) std::fill(g, g + V, T(0));
        continue;
      }
      T mx = z[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, z[v]);
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(z[v] - mx));
      const double lse = static_cast<double>(mx) + std::log(sum);
      row_loss[t] = lse - static_cast<double>(z[target]);
      if (backward) {
        const T shift = static_cast<T>(lse);
        for (int64_t v = 0; v < V; ++v) g[v] = scale * std::exp(z[v] - shift);
        g[target] -= scale;
      }
    }
    if (backward) {
      T* dh = outputs.dh ? outputs.dh + r0 * d : nullptr;
      kernels::linear_backward(h + r0 * d, head, grad, dh, outputs.dhead, rows, V, d);
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
