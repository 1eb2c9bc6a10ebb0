#include "trex/train/optim/grad_clip.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "trex/kernels/backend.hpp"

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
  std::vector<int64_t> bounds;  // [begin, end) of every chunk
  for_each_trained(params, [&](int64_t offset, int64_t n) {
    for (int64_t b = offset; b < offset + n; b += kChunk) {
      bounds.push_back(b);
      bounds.push_back(std::min(offset + n, b + kChunk));
    }
  });
  using kernels::Tensor;
  const double sum = kernels::default_backend().sum_squares(
      Tensor::of(params.grads().data(), {params.size()}),
      Tensor::of(bounds.data(), {static_cast<int64_t>(bounds.size()) / 2, 2}));
  return std::sqrt(sum);
}

double clip_grad_norm(model::ParamStore<float>& params, double max_norm) {
  const double norm = global_grad_norm(params);
  if (!std::isfinite(norm) || max_norm <= 0.0 || norm <= max_norm) return norm;
  const float scale = static_cast<float>(max_norm / norm);
  float* g = params.grads().data();
  for_each_trained(params, [&](int64_t offset, int64_t n) {
    kernels::default_backend().scale(kernels::Tensor::of(g + offset, {n}), scale);
  });
  return norm;
}

}  // namespace trex::train
