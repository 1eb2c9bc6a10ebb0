#include "trex/kernels/cpu/attention_core.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "trex/core/rng.hpp"

namespace trex::kernels {
namespace {

template <class T>
std::vector<T> uniform(uint64_t seed, int64_t n) {
  Rng rng(seed, {0});
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<T>(rng.uniform() * 2.0 - 1.0);
  return v;
}

// Odd sizes exercise the four-row / four-key blocks and their tails; keys are
// scattered rows of a pool (as compressed entries are), outputs strided.
template <class T>
void check_dots_and_combine(double tol) {
  const int64_t m = 7, n = 9, k = 37, pool_rows = 13;
  const int64_t lda = k + 3, ldo = n + 2, ldy = k + 5;
  const auto a = uniform<T>(1, m * lda);
  const auto pool = uniform<T>(2, pool_rows * k);
  const int64_t picks[n] = {12, 0, 5, 5, 3, 11, 7, 1, 9};
  std::vector<const T*> rows;
  for (int64_t p : picks) rows.push_back(pool.data() + p * k);

  std::vector<T> out(static_cast<size_t>(m * ldo), T(-7));
  attention_dots(m, n, k, a.data(), lda, rows.data(), T(0.5), out.data(), ldo);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (int64_t e = 0; e < k; ++e) ref += double(a[i * lda + e]) * double(rows[j][e]);
      EXPECT_NEAR(out[i * ldo + j], 0.5 * ref, tol) << i << "," << j;
    }
    for (int64_t j = n; j < ldo; ++j) EXPECT_EQ(out[i * ldo + j], T(-7));  // padding untouched
  }

  const int64_t ldc = n + 1;
  const auto coef = uniform<T>(3, m * ldc);
  auto y = uniform<T>(4, m * ldy);
  const auto y0 = y;
  attention_combine(m, n, k, coef.data(), ldc, rows.data(), y.data(), ldy);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t e = 0; e < k; ++e) {
      double ref = y0[i * ldy + e];
      for (int64_t j = 0; j < n; ++j) ref += double(coef[i * ldc + j]) * double(rows[j][e]);
      EXPECT_NEAR(y[i * ldy + e], ref, tol) << i << "," << e;
    }
    for (int64_t e = k; e < ldy; ++e) EXPECT_EQ(y[i * ldy + e], y0[i * ldy + e]);
  }
}

TEST(AttentionCoreKernel, DotsAndCombineMatchReferenceFloat) {
  check_dots_and_combine<float>(1e-5);
}

TEST(AttentionCoreKernel, DotsAndCombineMatchReferenceDouble) {
  check_dots_and_combine<double>(1e-13);
}

TEST(AttentionCoreKernel, EmptyShapesWriteNothing) {
  std::vector<float> out(4, 3.0f);
  const float* none = nullptr;
  attention_dots(2, 0, 5, out.data(), 5, &none, 1.0f, out.data(), 2);
  attention_combine(0, 3, 5, out.data(), 3, &none, out.data(), 5);
  for (float v : out) EXPECT_EQ(v, 3.0f);
}

}  // namespace
}  // namespace trex::kernels
