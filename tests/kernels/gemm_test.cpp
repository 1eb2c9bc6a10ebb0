#include "trex/kernels/cpu/gemm.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "trex/core/rng.hpp"

namespace trex::kernels {
namespace {

std::vector<float> uniform(uint64_t seed, int64_t n) {
  Rng rng(seed, {0});
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(2.0 * rng.uniform() - 1.0);
  return v;
}

// Round to nearest even bf16, written independently of the kernel.
float to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  float y;
  std::memcpy(&y, &bits, sizeof y);
  return y;
}

// Tiled fp32 GEMMs: bitwise the same on 1 and 2 threads (a weight-gradient
// shape, small M·N and long K, where oneDNN's own threading splits K), equal
// to a double reference within fp32 rounding, with alpha/beta and every
// transpose, and with tiles that do not divide M or N.
TEST(Gemm, Fp32TilesIndependentOfThreadCountAndCorrect) {
  const int64_t M = 100, N = 300, K = 4096;
  for (int trans = 0; trans < 4; ++trans) {
    const bool ta = trans & 1, tb = trans & 2;
    const std::vector<float> A = uniform(31 + trans, M * K), B = uniform(41 + trans, K * N);
    const int64_t lda = ta ? M : K, ldb = tb ? K : N;
    const std::vector<float> C0 = uniform(51, M * N);
    std::vector<float> one(C0), two(C0);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    gemm<float>(Precision::kF32, ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f,
                one.data(), N);
    omp_set_num_threads(std::max(2, saved));
    gemm<float>(Precision::kF32, ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f,
                two.data(), N);
    omp_set_num_threads(saved);
    EXPECT_EQ(one, two) << "trans " << trans;
    double max_err = 0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < K; ++k)
          sum += double(ta ? A[k * lda + i] : A[i * lda + k]) *
                 double(tb ? B[j * ldb + k] : B[k * ldb + j]);
        max_err = std::max(max_err, std::fabs(0.5 * sum + 0.25 * C0[i * N + j] - one[i * N + j]));
      }
    EXPECT_LT(max_err, 1e-3) << "trans " << trans;
  }
}

// Precision::kBF16 means bf16-rounded operands with fp32 accumulation, whether
// oneDNN has a native bf16 matmul on this CPU or the fp32 fallback runs
// (AVX2-only CPUs): both must equal an fp32 GEMM of pre-rounded operands.
TEST(Gemm, Bf16EqualsFp32OfRoundedOperandsOnEveryPath) {
  const int64_t M = 37, N = 53, K = 96;  // M·N·K above the small-GEMM loop's cut-off
  for (int trans = 0; trans < 4; ++trans) {
    const bool ta = trans & 1, tb = trans & 2;
    const std::vector<float> A = uniform(1 + trans, M * K), B = uniform(11 + trans, K * N);
    std::vector<float> A16(A), B16(B);
    for (auto& x : A16) x = to_bf16(x);
    for (auto& x : B16) x = to_bf16(x);
    const int64_t lda = ta ? M : K, ldb = tb ? K : N;
    const std::vector<float> C0 = uniform(21, M * N);
    std::vector<float> bf16_result(C0), reference(C0), unrounded(C0);
    gemm<float>(Precision::kBF16, ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f,
                bf16_result.data(), N);
    gemm<float>(Precision::kF32, ta, tb, M, N, K, 0.5f, A16.data(), lda, B16.data(), ldb, 0.25f,
                reference.data(), N);
    gemm<float>(Precision::kF32, ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f,
                unrounded.data(), N);
    double max_vs_reference = 0, max_vs_unrounded = 0;
    for (size_t i = 0; i < reference.size(); ++i) {
      max_vs_reference =
          std::max(max_vs_reference, std::fabs(double(bf16_result[i]) - reference[i]));
      max_vs_unrounded =
          std::max(max_vs_unrounded, std::fabs(double(bf16_result[i]) - unrounded[i]));
    }
    // fp32 accumulation of 96 products of magnitude <= 1: order effects ~1e-6.
    EXPECT_LT(max_vs_reference, 2e-5) << "ta " << ta << " tb " << tb;
    // bf16 rounding (relative 2^-9 per operand) moves results by ~1e-3.
    EXPECT_GT(max_vs_unrounded, 1e-4) << "ta " << ta << " tb " << tb;
  }
}

}  // namespace
}  // namespace trex::kernels
