// GCC contracts a·b + c into fused multiply-adds in C++ even in ISO mode, and
// only the AVX2 / AVX-512 clones have them: contraction off, so that every
// clone rounds like the baseline one and the AdamW update stays bitwise the
// scalar double formula.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "trex/kernels/cpu/elementwise.hpp"

#include <bit>
#include <cmath>

#if defined(__x86_64__) || defined(__SSE2__)
#include <immintrin.h>
#endif

namespace trex::kernels {
namespace {

// Sums go through this many independent lanes, combined in lane order: enough
// to fill an AVX-512 register of floats, and the same order on every clone.
constexpr int kLanes = 16;

// exp(x) for one float; see exp_array for the accuracy. Branch-free so that a
// loop around it vectorises; NaN passes through the clamps (comparisons false).
[[gnu::always_inline]] inline float exp_core(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  // ln2 split so that k·kLn2Hi is exact for |k| < 2^9 (kLn2Hi has 16 bits).
  constexpr float kLn2Hi = 0.693145751953125f;
  constexpr float kLn2Lo = 1.42860676533018704e-6f;
  constexpr float kRoundShift = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer
  constexpr float kMax = 88.8f;               // above ln(FLT_MAX) = 88.72: overflows to inf
  constexpr float kMin = -105.0f;             // below ln(2^-150): rounds to 0
  float xc = x > kMax ? kMax : x;
  xc = xc < kMin ? kMin : xc;
  const float shifted = xc * kLog2e + kRoundShift;
  const float k = shifted - kRoundShift;  // round(x / ln2), |k| <= 152
  const int32_t k_int = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRoundShift);
  const float r = (xc - k * kLn2Hi) - k * kLn2Lo;  // |r| <= ln2/2
  // Degree-7 Taylor polynomial of exp(r): truncation < 5e-9 relative on |r| <= 0.35.
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^k as two normal powers of two (k in [-152, 128] does not fit one float
  // exponent): the first product is exact, the second rounds once, also into
  // the subnormal range or to inf.
  const int32_t k_low = k_int >> 1;
  const int32_t k_high = k_int - k_low;
  const float scale_low = std::bit_cast<float>((k_low + 127) << 23);
  const float scale_high = std::bit_cast<float>((k_high + 127) << 23);
  return (p * scale_low) * scale_high;
}

// Same branches as the scalar sigmoid of model/moe.cpp: 1/(1+e^−x) for x ≥ 0,
// e^x/(1+e^x) below, so the exponent never overflows.
[[gnu::always_inline]] inline float sigmoid_core(float x) {
  const bool positive = x >= 0.0f;
  const float e = exp_core(positive ? -x : x);
  const float numerator = positive ? 1.0f : e;
  return numerator / (1.0f + e);
}

double combine_lanes(const double* lanes) {
  double sum = 0.0;
  for (int l = 0; l < kLanes; ++l) sum += lanes[l];
  return sum;
}

// lanes[i % kLanes] += x[i] for i < n, in index order per lane.
[[gnu::always_inline]] inline void add_to_lanes(double* lanes, const float* x, int64_t n) {
  int64_t i0 = 0;
  for (; i0 + kLanes <= n; i0 += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) lanes[l] += static_cast<double>(x[i0 + l]);
  }
  for (int l = 0; i0 + l < n; ++l) lanes[l] += static_cast<double>(x[i0 + l]);
}

// lanes[i % kLanes] += x[i]² (in double) for i < n, in index order per lane.
[[gnu::always_inline]] inline void add_squares_to_lanes(double* lanes, const float* x, int64_t n) {
  int64_t i0 = 0;
  for (; i0 + kLanes <= n; i0 += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) {
      const double value = x[i0 + l];
      lanes[l] += value * value;
    }
  }
  for (int l = 0; i0 + l < n; ++l) {
    const double value = x[i0 + l];
    lanes[l] += value * value;
  }
}

template <bool kClamp>
[[gnu::always_inline]] inline float swiglu_backward_impl(const float* gate, const float* up,
                                                         const float* dh, int64_t n, float scale,
                                                         float limit, float* dg, float* dv) {
  double lanes[kLanes] = {};
  for (int64_t i0 = 0; i0 < n; i0 += kLanes) {
    const int64_t count = n - i0 < kLanes ? n - i0 : kLanes;
#pragma omp simd
    for (int64_t l = 0; l < count; ++l) {
      const int64_t i = i0 + l;
      const float g_raw = gate[i];
      const float v_raw = up[i];
      const bool g_pass = !kClamp || g_raw <= limit;
      const bool v_pass = !kClamp || ((v_raw >= -limit) & (v_raw <= limit));
      const float g = g_pass ? g_raw : limit;
      const float v = kClamp ? (v_raw < -limit ? -limit : (limit < v_raw ? limit : v_raw)) : v_raw;
      const float sg = sigmoid_core(g);
      const float act = g * sg;
      const float grad_h_scaled = dh[i];
      lanes[l] += static_cast<double>(grad_h_scaled * act * v);
      const float grad_h = grad_h_scaled * scale;
      dg[i] = g_pass ? grad_h * v * sg * (1.0f + g * (1.0f - sg)) : 0.0f;
      dv[i] = v_pass ? grad_h * act : 0.0f;
    }
  }
  return static_cast<float>(combine_lanes(lanes));
}

// x[i] = sqrt(x[i]) (hardware square roots are correctly rounded, as
// std::sqrt, so every variant gives the same bits). The widest unit the CPU
// has is picked once: a cloned caller cannot use 512-bit intrinsics itself.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("avx512f"))) void sqrt_in_place_avx512(double* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // The masked form with every lane set: the plain one trips GCC 12's
    // maybe-uninitialized warning inside avx512fintrin.h.
    const __m512d value = _mm512_loadu_pd(x + i);
    _mm512_storeu_pd(x + i, _mm512_mask_sqrt_pd(value, static_cast<__mmask8>(0xFF), value));
  }
  for (; i < n; ++i) _mm_store_sd(x + i, _mm_sqrt_sd(_mm_setzero_pd(), _mm_load_sd(x + i)));
}

__attribute__((target("avx"))) void sqrt_in_place_avx(double* x, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(x + i, _mm256_sqrt_pd(_mm256_loadu_pd(x + i)));
  for (; i < n; ++i) _mm_store_sd(x + i, _mm_sqrt_sd(_mm_setzero_pd(), _mm_load_sd(x + i)));
}
#endif

#if defined(__SSE2__)
void sqrt_in_place_sse2(double* x, int64_t n) {
  int64_t i = 0;
  for (; i + 2 <= n; i += 2) _mm_storeu_pd(x + i, _mm_sqrt_pd(_mm_loadu_pd(x + i)));
  if (i < n) _mm_store_sd(x + i, _mm_sqrt_sd(_mm_setzero_pd(), _mm_load_sd(x + i)));
}
#else
void sqrt_in_place_scalar(double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::sqrt(x[i]);
}
#endif

using SqrtInPlace = void (*)(double*, int64_t);

SqrtInPlace pick_sqrt_in_place() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(TREX_NO_TARGET_CLONES)
  if (__builtin_cpu_supports("avx512f")) return sqrt_in_place_avx512;
  if (__builtin_cpu_supports("avx")) return sqrt_in_place_avx;
#endif
#if defined(__SSE2__)
  return sqrt_in_place_sse2;
#else
  return sqrt_in_place_scalar;
#endif
}

void sqrt_in_place(double* x, int64_t n) {
  static const SqrtInPlace impl = pick_sqrt_in_place();
  impl(x, n);
}

}  // namespace

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(TREX_NO_TARGET_CLONES)
#define TREX_ELEMENTWISE_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TREX_ELEMENTWISE_CLONES
#endif

TREX_ELEMENTWISE_CLONES
void exp_array(const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = exp_core(x[i]);
}

TREX_ELEMENTWISE_CLONES
void sigmoid_array(const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = sigmoid_core(x[i]);
}

TREX_ELEMENTWISE_CLONES
double softmax_cross_entropy_row(const float* z, int64_t V, int64_t target, float grad_scale,
                                 float* grad) {
  float mx = z[0];
#pragma omp simd reduction(max : mx)
  for (int64_t v = 1; v < V; ++v) mx = z[v] > mx ? z[v] : mx;
  // exp of a block into a buffer (vectorised), then the block into the lanes:
  // blocks are a multiple of kLanes, so value v always lands in lane v % kLanes.
  constexpr int64_t kBlock = 256;
  alignas(64) float exps[kBlock];
  double lanes[kLanes] = {};
  for (int64_t v0 = 0; v0 < V; v0 += kBlock) {
    const int64_t count = V - v0 < kBlock ? V - v0 : kBlock;
    const float* zb = z + v0;
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) exps[i] = exp_core(zb[i] - mx);
    add_to_lanes(lanes, exps, count);
  }
  const double sum = combine_lanes(lanes);
  const double lse = static_cast<double>(mx) + std::log(sum);
  const double loss = lse - static_cast<double>(z[target]);
  if (grad != nullptr) {
    // exp(z − max)·(scale / Σ) rather than exp(z − lse): z − max is exact near
    // the top logits, where a float lse would cost |lse|·2^-24 of relative error.
    const float scale_over_sum = static_cast<float>(static_cast<double>(grad_scale) / sum);
#pragma omp simd
    for (int64_t v = 0; v < V; ++v) grad[v] = scale_over_sum * exp_core(z[v] - mx);
    grad[target] -= grad_scale;
  }
  return loss;
}

TREX_ELEMENTWISE_CLONES
void swiglu_forward_row(const float* gate, const float* up, int64_t n, float scale, float limit,
                        float* h) {
  if (limit >= 0.0f) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float g = limit < gate[i] ? limit : gate[i];
      const float v = up[i] < -limit ? -limit : (limit < up[i] ? limit : up[i]);
      h[i] = scale * (g * sigmoid_core(g) * v);
    }
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float g = gate[i];
      h[i] = scale * (g * sigmoid_core(g) * up[i]);
    }
  }
}

TREX_ELEMENTWISE_CLONES
float swiglu_backward_row(const float* gate, const float* up, const float* dh, int64_t n,
                          float scale, float limit, float* dg, float* dv) {
  return limit >= 0.0f ? swiglu_backward_impl<true>(gate, up, dh, n, scale, limit, dg, dv)
                       : swiglu_backward_impl<false>(gate, up, dh, n, scale, limit, dg, dv);
}

TREX_ELEMENTWISE_CLONES
void adamw_update_range(float* weights, const float* grads, float* exp_avg, float* exp_avg_sq,
                        int64_t n, const AdamWCoefficients& c) {
  const double b1 = c.beta1, b2 = c.beta2, one_minus_b1 = 1.0 - c.beta1,
               one_minus_b2 = 1.0 - c.beta2;
  const double correction1 = c.correction1, correction2 = c.correction2;
  const double decay = c.decay, lr = c.lr, eps = c.eps;
  // With math-errno std::sqrt is a call the vectoriser cannot take, so the
  // square roots of a block run in their own pass (hardware sqrtpd: exact, as
  // std::sqrt) between two vectorised passes. m stays double throughout.
  constexpr int64_t kBlock = 256;
  alignas(64) double first[kBlock];
  alignas(64) double root[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t count = n - b < kBlock ? n - b : kBlock;
    const float* gb = grads + b;
    float* mb = exp_avg + b;
    float* vb = exp_avg_sq + b;
    float* wb = weights + b;
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) {
      const double g = gb[i];
      const double m = b1 * mb[i] + one_minus_b1 * g;
      const double v = b2 * vb[i] + one_minus_b2 * g * g;
      mb[i] = static_cast<float>(m);
      vb[i] = static_cast<float>(v);
      first[i] = m;
      root[i] = v / correction2;
    }
    sqrt_in_place(root, count);
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) {
      const double update = (first[i] / correction1) / (root[i] + eps);
      wb[i] = static_cast<float>(wb[i] * decay - lr * update);
    }
  }
}

TREX_ELEMENTWISE_CLONES
double sum_squares(const float* x, int64_t n) {
  constexpr int64_t kBlock = 256;
  double lanes[kLanes] = {};
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t count = n - b < kBlock ? n - b : kBlock;
    add_squares_to_lanes(lanes, x + b, count);
  }
  return combine_lanes(lanes);
}

TREX_ELEMENTWISE_CLONES
double dot_double(const float* a, const float* b, int64_t n) {
  double lanes[kLanes] = {};
  int64_t i0 = 0;
  for (; i0 + kLanes <= n; i0 += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l)
      lanes[l] += static_cast<double>(a[i0 + l]) * static_cast<double>(b[i0 + l]);
  }
  for (int l = 0; i0 + l < n; ++l)
    lanes[l] += static_cast<double>(a[i0 + l]) * static_cast<double>(b[i0 + l]);
  return combine_lanes(lanes);
}

TREX_ELEMENTWISE_CLONES
double weighted_dot_double(const float* w, const float* a, const float* b, int64_t n) {
  double lanes[kLanes] = {};
  int64_t i0 = 0;
  for (; i0 + kLanes <= n; i0 += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l)
      lanes[l] += static_cast<double>(w[i0 + l] * a[i0 + l]) * static_cast<double>(b[i0 + l]);
  }
  for (int l = 0; i0 + l < n; ++l)
    lanes[l] += static_cast<double>(w[i0 + l] * a[i0 + l]) * static_cast<double>(b[i0 + l]);
  return combine_lanes(lanes);
}

TREX_ELEMENTWISE_CLONES
void axpy(float* y, const float* x, float a, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

TREX_ELEMENTWISE_CLONES
void scale_array(float* x, int64_t n, float scale) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

#undef TREX_ELEMENTWISE_CLONES

}  // namespace trex::kernels
