// Multiply-add contraction is GCC's C++ default; it is stated here so that these
// loops keep it whatever the flags: they are sums of products whose rounding is
// free to change (results match a double reference to float rounding), and fused
// multiply-adds halve their cost. (elementwise.cpp turns it off on purpose.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

#include "trex/kernels/cpu/attention_core.hpp"

namespace trex::kernels {
namespace {

// Four rows of `a` against one key per pass: the key is loaded once for four
// independent accumulators (hides the add latency of a single reduction).
template <class T>
[[gnu::always_inline]] inline void dots_impl(int64_t m, int64_t n, int64_t k, const T* a,
                                             int64_t lda, const T* const* rows, T alpha, T* out,
                                             int64_t ldo) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    const T* a0 = a + i * lda;
    const T* a1 = a0 + lda;
    const T* a2 = a1 + lda;
    const T* a3 = a2 + lda;
    for (int64_t j = 0; j < n; ++j) {
      const T* r = rows[j];
      T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
      for (int64_t e = 0; e < k; ++e) {
        s0 += a0[e] * r[e];
        s1 += a1[e] * r[e];
        s2 += a2[e] * r[e];
        s3 += a3[e] * r[e];
      }
      out[i * ldo + j] = alpha * s0;
      out[(i + 1) * ldo + j] = alpha * s1;
      out[(i + 2) * ldo + j] = alpha * s2;
      out[(i + 3) * ldo + j] = alpha * s3;
    }
  }
  for (; i < m; ++i) {
    const T* ai = a + i * lda;
    for (int64_t j = 0; j < n; ++j) {
      const T* r = rows[j];
      T s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t e = 0; e < k; ++e) s += ai[e] * r[e];
      out[i * ldo + j] = alpha * s;
    }
  }
}

// Four rows per pass over y: one load/store of y per four multiply-adds.
template <class T>
[[gnu::always_inline]] inline void combine_impl(int64_t m, int64_t n, int64_t k, const T* coef,
                                                int64_t ldc, const T* const* rows, T* y,
                                                int64_t ldy) {
  for (int64_t i = 0; i < m; ++i) {
    const T* c = coef + i * ldc;
    T* __restrict yi = y + i * ldy;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      const T c0 = c[j], c1 = c[j + 1], c2 = c[j + 2], c3 = c[j + 3];
      const T* __restrict r0 = rows[j];
      const T* __restrict r1 = rows[j + 1];
      const T* __restrict r2 = rows[j + 2];
      const T* __restrict r3 = rows[j + 3];
#pragma omp simd
      for (int64_t e = 0; e < k; ++e) yi[e] += c0 * r0[e] + c1 * r1[e] + c2 * r2[e] + c3 * r3[e];
    }
    for (; j < n; ++j) {
      const T cj = c[j];
      const T* __restrict r = rows[j];
#pragma omp simd
      for (int64_t e = 0; e < k; ++e) yi[e] += cj * r[e];
    }
  }
}

}  // namespace

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TREX_ATTENTION_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TREX_ATTENTION_CLONES
#endif

TREX_ATTENTION_CLONES
void attention_dots(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                    const float* const* rows, float alpha, float* out, int64_t ldo) {
  dots_impl(m, n, k, a, lda, rows, alpha, out, ldo);
}

TREX_ATTENTION_CLONES
void attention_dots(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                    const double* const* rows, double alpha, double* out, int64_t ldo) {
  dots_impl(m, n, k, a, lda, rows, alpha, out, ldo);
}

TREX_ATTENTION_CLONES
void attention_combine(int64_t m, int64_t n, int64_t k, const float* coef, int64_t ldc,
                       const float* const* rows, float* y, int64_t ldy) {
  combine_impl(m, n, k, coef, ldc, rows, y, ldy);
}

TREX_ATTENTION_CLONES
void attention_combine(int64_t m, int64_t n, int64_t k, const double* coef, int64_t ldc,
                       const double* const* rows, double* y, int64_t ldy) {
  combine_impl(m, n, k, coef, ldc, rows, y, ldy);
}

#undef TREX_ATTENTION_CLONES

}  // namespace trex::kernels
