#include "trex/kernels/cpu/rope.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstdio>
#include <numbers>
#include <vector>

#include "gradcheck.hpp"
#include "trex/core/error.hpp"

namespace trex::kernels {
namespace {

TEST(RopeTest, YarnCorrectionRangeMatchesSpec) {
  int64_t lo = -1, hi = -1;
  yarn_correction_range(64, 160000.0, {16.0, 65536, 32.0, 1.0}, &lo, &hi);
  EXPECT_EQ(lo, 15);
  EXPECT_EQ(hi, 25);
  yarn_correction_range(32, 160000.0, {4.0, 32, 32.0, 1.0}, &lo, &hi);
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 3);
}

TEST(RopeTest, YarnTableFrequencies) {
  const RopeTable table(64, 160000.0, 10, YarnScaling{16.0, 65536, 32.0, 1.0});
  EXPECT_EQ(table.yarn_lo, 15);
  EXPECT_EQ(table.yarn_hi, 25);
  for (int p = 0; p < 32; ++p) {
    const double theta = std::pow(160000.0, -2.0 * p / 64.0);
    const double ramp = std::clamp((p - 15.0) / 10.0, 0.0, 1.0);
    const double expected = theta / 16.0 * ramp + theta * (1.0 - ramp);
    EXPECT_NEAR(table.inv_freq[p], expected, 1e-15 * theta) << p;
    if (p <= 15) {
      EXPECT_DOUBLE_EQ(table.inv_freq[p], theta);
    }  // high freq untouched
    if (p >= 25) {
      EXPECT_NEAR(table.inv_freq[p], theta / 16.0, 1e-18);
    }  // fully interpolated
    for (int t = 0; t < 10; ++t) {
      EXPECT_NEAR(table.cos[t * 32 + p], std::cos(t * expected), 1e-15);
      EXPECT_NEAR(table.sin[t * 32 + p], std::sin(t * expected), 1e-15);
    }
  }
  // Tiny config: lo = 0, hi = 3, factor 4.
  const RopeTable tiny(32, 160000.0, 4, YarnScaling{4.0, 32, 32.0, 1.0});
  const double theta2 = std::pow(160000.0, -4.0 / 32.0);
  EXPECT_NEAR(tiny.inv_freq[2], theta2 / 4.0 * (2.0 / 3.0) + theta2 / 3.0, 1e-16);
  EXPECT_DOUBLE_EQ(tiny.inv_freq[0], 1.0);
  // No YaRN: plain base^(−2p/r).
  const RopeTable plain(32, 10000.0, 4);
  EXPECT_EQ(plain.yarn_lo, 0);
  EXPECT_EQ(plain.yarn_hi, 0);
  EXPECT_DOUBLE_EQ(plain.inv_freq[5], std::pow(10000.0, -10.0 / 32.0));
}

TEST(RopeTest, InterleavedRotationOfLastDims) {
  const int64_t heads = 3, dim = 10, rope = 4, rows = 5;
  const RopeTable table(rope, 10000.0, 20);
  std::vector<double> x = trex::testing::random_vector(rows * heads * dim, 7);
  const std::vector<double> original = x;
  const std::vector<int64_t> positions = {0, 3, 19, 7, 1};
  rope_apply(table, x.data(), rows, heads, dim, positions.data(), false);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      const double* in = original.data() + (r * heads + h) * dim;
      const double* out = x.data() + (r * heads + h) * dim;
      for (int64_t e = 0; e < dim - rope; ++e) EXPECT_EQ(out[e], in[e]);  // nope dims untouched
      for (int64_t p = 0; p < rope / 2; ++p) {
        const std::complex<double> z(in[dim - rope + 2 * p], in[dim - rope + 2 * p + 1]);
        const std::complex<double> rot =
            z * std::polar(1.0, positions[r] * std::pow(10000.0, -2.0 * p / rope));
        EXPECT_NEAR(out[dim - rope + 2 * p], rot.real(), 1e-14);
        EXPECT_NEAR(out[dim - rope + 2 * p + 1], rot.imag(), 1e-14);
      }
    }
  rope_apply(table, x.data(), rows, heads, dim, positions.data(), true);
  double max_err = 0;
  for (size_t i = 0; i < x.size(); ++i) max_err = std::max(max_err, std::abs(x[i] - original[i]));
  std::printf("[rope] inverse(forward(x)) max |err| = %.3g\n", max_err);
  EXPECT_LT(max_err, 1e-14);
}

TEST(RopeTest, FloatInverseOfForwardIsIdentity) {
  const RopeTable table(32, 160000.0, 64, YarnScaling{4.0, 32, 32.0, 1.0});
  std::vector<float> x(64 * 96);
  const auto v = trex::testing::random_vector(x.size(), 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(v[i]);
  std::vector<int64_t> positions(64);
  for (int64_t i = 0; i < 64; ++i) positions[i] = 63 - i;
  rope_apply(table, x.data(), 64, 1, 96, positions.data(), false);
  rope_apply(table, x.data(), 64, 1, 96, positions.data(), true);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], v[i], 1e-6);
}

TEST(RopeTest, BadInputThrows) {
  EXPECT_THROW(RopeTable(31, 10000.0, 4), trex::Error);
  EXPECT_THROW(RopeTable(32, 1.0, 4), trex::Error);
  EXPECT_THROW(RopeTable(32, 10000.0, 4, YarnScaling{4.0, 0, 32.0, 1.0}), trex::Error);
  const RopeTable table(4, 10000.0, 4);
  std::vector<double> x(8, 1.0);
  const int64_t bad_position = 4;
  EXPECT_THROW(rope_apply(table, x.data(), 1, 1, 8, &bad_position, false), trex::Error);
  EXPECT_THROW(rope_apply(table, x.data(), 1, 1, 2, &bad_position, false), trex::Error);
}

}  // namespace
}  // namespace trex::kernels
