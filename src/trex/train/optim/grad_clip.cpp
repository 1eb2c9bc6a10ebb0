#include "trex/train/optim/grad_clip.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "trex/kernels/cpu/elementwise.hpp"

namespace trex::train {

namespace {

template <class Fn>
void for_each_trained(const model::ParamStore<float>& params, Fn&& fn) {
  int64_t offset = 0;
  for (const model::ParamSpec& spec : params.specs()) {
    const int64_t n = spec.numel();
    if (spec.group != model::OptimizerGroup::kNotTrained) fn(offset, n);
    offset += n;
  }
}

}  // namespace

double global_grad_norm(const model::ParamStore<float>& params) {
  // Fixed-size chunks summed in parallel, then the partials in chunk order: the
  // result does not depend on the thread count.
  constexpr int64_t kChunk = int64_t{1} << 16;
  struct Range {
    int64_t begin, end;
  };
  std::vector<Range> chunks;
  for_each_trained(params, [&](int64_t offset, int64_t n) {
    for (int64_t b = offset; b < offset + n; b += kChunk)
      chunks.push_back({b, std::min(offset + n, b + kChunk)});
  });
  const float* g = params.grads().data();
  std::vector<double> partial(chunks.size(), 0.0);
  const int64_t count = static_cast<int64_t>(chunks.size());
#pragma omp parallel for schedule(static) if (count > 4)
  for (int64_t c = 0; c < count; ++c) {
    partial[c] = kernels::sum_squares(g + chunks[c].begin, chunks[c].end - chunks[c].begin);
  }
  double sum = 0.0;
  for (double x : partial) sum += x;
  return std::sqrt(sum);
}

double clip_grad_norm(model::ParamStore<float>& params, double max_norm) {
  const double norm = global_grad_norm(params);
  if (!std::isfinite(norm) || max_norm <= 0.0 || norm <= max_norm) return norm;
  const float scale = static_cast<float>(max_norm / norm);
  float* g = params.grads().data();
  constexpr int64_t kBlock = int64_t{1} << 16;
  for_each_trained(params, [&](int64_t offset, int64_t n) {
    const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 4)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t begin = offset + b * kBlock;
      kernels::scale_array(g + begin, std::min(kBlock, offset + n - begin), scale);
    }
  });
  return norm;
}

}  // namespace trex::train
