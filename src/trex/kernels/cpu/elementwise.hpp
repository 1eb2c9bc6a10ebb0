#pragma once
// Elementwise fp32 kernels of the training step: exp, sigmoid, softmax cross-
// entropy of one logits row, SwiGLU rows, the AdamW update and the sums of
// squares of gradient clipping.
//
// The project builds without -march and with math-errno, so std::exp/std::sqrt
// in a loop stop the vectoriser. These loops use their own exp (below) and are
// cloned for AVX-512 / AVX2 / baseline x86-64, picked at load time. Every
// function works on one contiguous range and runs on the calling thread: the
// callers split the work (over rows or fixed blocks) so that results never
// depend on the thread count. Multiply-adds are not contracted here, and sums
// go through a fixed number of lanes, so every clone gives bitwise the same
// result.
#include <cstdint>

#include "trex/kernels/op_params.hpp"  // AdamWCoefficients

namespace trex::kernels {

// y[i] = exp(x[i]). Range reduction x = k·ln2 + r (|r| ≤ ln2/2, two-part ln2),
// degree-7 Taylor polynomial for exp(r), 2^k built from integer bit operations.
// Accuracy: ≤ 2 ulp (measured max 1.20 ulp over every 8th float) against std::exp
// over [-87, 88] (the normal range); exp(0) = 1 exactly; results below
// FLT_MIN are the correctly scaled subnormals and round to 0 below about
// -103.9; x > 88.72 gives +inf; NaN gives NaN. y may alias x.
void exp_array(const float* x, float* y, int64_t n);

// y[i] = 1 / (1 + exp(-x[i])) (computed as e/(1+e), e = exp(x), for x < 0,
// like the scalar form of model/moe.cpp). y may alias x.
void sigmoid_array(const float* x, float* y, int64_t n);

// Softmax cross-entropy of one row of V logits z:
//   lse = max(z) + log Σ_v exp(z_v − max(z)),  returns lse − z[target].
// Σexp is accumulated in double over 16 fixed lanes combined in lane order.
// With grad != nullptr also writes grad = grad_scale·(softmax(z) − onehot),
// the softmax as exp(z_v − max)·(1/Σ) (grad may alias z: the loss is taken
// first). target must be in [0, V).
double softmax_cross_entropy_row(const float* z, int64_t V, int64_t target, float grad_scale,
                                 float* grad);

// SwiGLU of one row of n values, with the clamp of model/moe.cpp when
// limit >= 0 (gate ≤ limit, up in [−limit, limit]); a negative limit (or NaN)
// means no clamp:
//   h = scale · (g·σ(g)·v)
void swiglu_forward_row(const float* gate, const float* up, int64_t n, float scale, float limit,
                        float* h);

// Backward of swiglu_forward_row given dh = ∂L/∂h:
//   dg = dh·scale·v·σ(g)·(1 + g·(1 − σ(g)))  (0 where the clamp cut g),
//   dv = dh·scale·g·σ(g)                     (0 where the clamp cut v),
// returns ∂L/∂scale = Σ dh·g·σ(g)·v (double over 16 fixed lanes).
float swiglu_backward_row(const float* gate, const float* up, const float* dh, int64_t n,
                          float scale, float limit, float* dg, float* dv);

// AdamW on n values, arithmetic in double exactly as the scalar formula of
// train/adamw.hpp (bitwise the same result, only vectorised):
//   m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²
//   w ← w·decay − lr · (m / c1) / (√(v / c2) + ε)
void adamw_update_range(float* weights, const float* grads, float* exp_avg, float* exp_avg_sq,
                        int64_t n, const AdamWCoefficients& c);

// Σ x[i]² in double over 16 fixed lanes combined in lane order.
double sum_squares(const float* x, int64_t n);

// Σ a[i]·b[i] in double over 16 fixed lanes combined in lane order.
double dot_double(const float* a, const float* b, int64_t n);

// Σ double(w[i]·a[i])·b[i] (the product w·a rounded to float first), in
// double over 16 fixed lanes combined in lane order.
double weighted_dot_double(const float* w, const float* a, const float* b, int64_t n);

// y[i] += a·x[i] (a product then a sum, no fused multiply-add).
void axpy(float* y, const float* x, float a, int64_t n);

// x[i] *= scale.
void scale_array(float* x, int64_t n, float scale);

}  // namespace trex::kernels
