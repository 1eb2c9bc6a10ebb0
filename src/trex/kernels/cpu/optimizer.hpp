#pragma once
// CPU kernels of the optimizer ops (backend.hpp; the update rules are in
// train/adamw.hpp and train/muon.hpp). Elementwise updates split into fixed
// blocks over OpenMP; reductions run over fixed ranges summed in order, so
// results never depend on the thread count.
#include <cstdint>

#include "trex/kernels/op_params.hpp"

namespace trex::kernels {

// AdamW on n values (fixed 16K blocks over OpenMP).
void adamw_update(float* weights, const float* grads, float* exp_avg, float* exp_avg_sq, int64_t n,
                  const AdamWCoefficients& c);

// Hybrid Newton–Schulz of X [rows, cols] into out (may alias X); a zero
// matrix gives zero. rows, cols > 0.
template <class T>
void newton_schulz(const T* X, T* out, int64_t rows, int64_t cols, const NewtonSchulzParams& p);

// One Muon update of weights, grads, momentum [rows, cols]; workspace holds
// rows·cols floats of scratch.
void muon_update(float* weights, const float* grads, float* momentum, float* workspace,
                 int64_t rows, int64_t cols, const MuonStep& step);

// One same-shaped matrix of a batched Muon update.
struct MuonMatrixData {
  float* weights;
  const float* grads;
  float* momentum;
};

// Muon on `count` matrices of shape [rows, cols]; workspace holds count·rows·cols
// floats. The Newton–Schulz iterations of the matrices run as run_gemm_tasks
// (a thread each when there are enough), so each matrix gets the bits of
// muon_update on it alone.
void muon_update_batch(const MuonMatrixData* matrices, int64_t count, float* workspace,
                       int64_t rows, int64_t cols, const MuonStep& step);

// Σ x² over `count` ranges [bounds[2i], bounds[2i+1]) of x: each range in
// double over fixed lanes (ranges in parallel), the ranges summed in order.
double sum_squares_ranges(const float* x, const int64_t* bounds, int64_t count);

}  // namespace trex::kernels
