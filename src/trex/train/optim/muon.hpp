#pragma once
// Muon (spec §6): Nesterov momentum, hybrid Newton–Schulz orthogonalisation,
// RMS-matching scale and decoupled weight decay, for one logical matrix.
#include <cstdint>
#include <span>
#include <vector>

#include "trex/kernels/precision.hpp"

namespace trex::train {

struct MuonOptions {
  double momentum = 0.95;  // μ
  bool nesterov = true;    // orthogonalise μ M_t + G_t (else M_t)
  int ns_iterations = 10;  // total Newton–Schulz iterations
  int ns_tail_iterations =
      2;  // the last ones use (2, −1.5, 0.5); the rest (3.4445, −4.7750, 2.0315)
  double rms_scale = 0.18;    // γ: O = O' · √max(n, m) · γ
  double weight_decay = 0.1;  // λ
  // Of the Newton–Schulz matmuls (the trainer passes its compute precision).
  kernels::Precision precision = kernels::Precision::kF32;
};

// Hybrid Newton–Schulz of X [rows, cols] (row-major) into `out` (may alias X):
//   M₀ = X / ‖X‖_F;  M_k = a M + b (M Mᵀ) M + c (M Mᵀ)² M.
// A zero matrix gives zero. When rows > cols the iteration runs on the
// transpose (the same polynomial: (M Mᵀ)ᵏ M = M (MᵀM)ᵏ) so the Gram matrix is
// the smaller one. Matmuls go through kernels::gemm in options.precision
// (double is exact).
template <class T>
void hybrid_newton_schulz(const T* X, T* out, int64_t rows, int64_t cols,
                          const MuonOptions& options);

// One matrix W [rows, cols] of a Muon update, its gradient G and momentum M.
struct MuonMatrixRef {
  float* weights;
  const float* grads;
  float* momentum;
};

// One Muon update of each matrix, all of shape [rows, cols]:
//   M ← μ M + G;  O' = HybridNS(μ M + G) (Nesterov) or HybridNS(M);
//   W ← W (1 − lr·λ) − lr · O' · √max(rows, cols) · γ.
// The matrices are independent; they go to the backend as one op so that it
// can batch their GEMMs. `workspace` is resized to count·rows·cols (reuse it).
void muon_update(std::span<const MuonMatrixRef> matrices, int64_t rows, int64_t cols, double lr,
                 const MuonOptions& options, std::vector<float>& workspace);

}  // namespace trex::train
