#include "trex/train/optim/muon.hpp"

#include <algorithm>
#include <cmath>

#include "trex/core/error.hpp"
#include "trex/kernels/backend.hpp"

namespace trex::train {

namespace {

kernels::NewtonSchulzParams newton_schulz_params(const MuonOptions& options) {
  return {options.ns_iterations, options.ns_tail_iterations, options.precision};
}

void check(int64_t rows, int64_t cols, const MuonOptions& options) {
  if (rows <= 0 || cols <= 0) throw Error("Newton-Schulz needs a non-empty matrix");
  if (options.ns_iterations < 0 || options.ns_tail_iterations < 0 ||
      options.ns_tail_iterations > options.ns_iterations)
    throw Error("Newton-Schulz needs 0 <= ns_tail_iterations <= ns_iterations");
}

}  // namespace

template <class T>
void hybrid_newton_schulz(const T* X, T* out, int64_t rows, int64_t cols,
                          const MuonOptions& options) {
  check(rows, cols, options);
  using kernels::Tensor;
  kernels::default_backend().newton_schulz(
      Tensor::of(X, {rows, cols}), Tensor::of(out, {rows, cols}), newton_schulz_params(options));
}

void muon_update(std::span<const MuonMatrixRef> matrices, int64_t rows, int64_t cols, double lr,
                 const MuonOptions& options, std::vector<float>& workspace) {
  check(rows, cols, options);
  const int64_t numel = rows * cols;
  workspace.resize(matrices.size() * static_cast<size_t>(numel));
  kernels::MuonStep step;
  step.momentum = options.momentum;
  step.nesterov = options.nesterov;
  step.newton_schulz = newton_schulz_params(options);
  step.scale = std::sqrt(static_cast<double>(std::max(rows, cols))) * options.rms_scale * lr;
  step.decay = 1.0 - lr * options.weight_decay;
  using kernels::Tensor;
  std::vector<kernels::MuonMatrix> tensors;
  tensors.reserve(matrices.size());
  for (const MuonMatrixRef& m : matrices)
    tensors.push_back({Tensor::of(m.weights, {rows, cols}), Tensor::of(m.grads, {rows, cols}),
                       Tensor::of(m.momentum, {rows, cols})});
  kernels::default_backend().muon_update(
      tensors, Tensor::of(workspace.data(), {static_cast<int64_t>(workspace.size())}), step);
}

template void hybrid_newton_schulz<float>(const float*, float*, int64_t, int64_t,
                                          const MuonOptions&);
template void hybrid_newton_schulz<double>(const double*, double*, int64_t, int64_t,
                                           const MuonOptions&);

}  // namespace trex::train
