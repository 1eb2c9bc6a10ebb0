#include "trex/core/dtypes.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "trex/core/error.hpp"

namespace trex {
namespace {

float pow2(int e) {
  return std::ldexp(1.0f, e);
}

TEST(DTypes, SafetensorsNamesRoundTripAndSizes) {
  const DType all[] = {DType::kF32,    DType::kF64,    DType::kBF16, DType::kF16,
                       DType::kF8E4M3, DType::kF8E8M0, DType::kI8,   DType::kU8,
                       DType::kI32,    DType::kI64,    DType::kBool};
  const size_t sizes[] = {4, 8, 2, 2, 1, 1, 1, 1, 4, 8, 1};
  for (size_t i = 0; i < std::size(all); ++i) {
    EXPECT_EQ(dtype_from_safetensors(safetensors_name(all[i])), all[i]);
    EXPECT_EQ(dtype_size(all[i]), sizes[i]) << safetensors_name(all[i]);
  }
  EXPECT_STREQ(safetensors_name(DType::kF8E4M3), "F8_E4M3");
  EXPECT_STREQ(safetensors_name(DType::kF8E8M0), "F8_E8M0");
  EXPECT_STREQ(safetensors_name(DType::kBool), "BOOL");
}

TEST(DTypes, UnknownDTypeErrorNamesIt) {
  try {
    dtype_from_safetensors("F8_E5M2");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("F8_E5M2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dtype_from_safetensors("f32"), Error);  // names are case-sensitive
}

// Spot checks hand-computed from the E4M3FN layout S.EEEE.MMM (bias 7).
TEST(DTypes, Fp8E4M3SpotValues) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_FALSE(std::signbit(fp8_e4m3_to_f32(0x00)));
  EXPECT_EQ(fp8_e4m3_to_f32(0x80), 0.0f);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_f32(0x80)));  // -0
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 0.001953125f);    // 1/8 * 2^-6 = 2^-9
  EXPECT_EQ(fp8_e4m3_to_f32(0x04), 0.0078125f);      // 4/8 * 2^-6
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 0.013671875f);    // 7/8 * 2^-6
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), 0.015625f);       // smallest normal 2^-6
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);            // e=7, m=0
  EXPECT_EQ(fp8_e4m3_to_f32(0x3C), 1.5f);            // e=7, m=4
  EXPECT_EQ(fp8_e4m3_to_f32(0x40), 2.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xB8), -1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x78), 256.0f);  // e=15, m=0 is finite
  EXPECT_EQ(fp8_e4m3_to_f32(0x7E), 448.0f);  // max: 1.75 * 2^8
  EXPECT_EQ(fp8_e4m3_to_f32(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xFF)));
}

// All 256 codes against an integer formulation: |v| = (e == 0 ? m : 8 + m) * 2^(max(e,1) - 10).
TEST(DTypes, Fp8E4M3AllCodes) {
  int nan_count = 0;
  for (int code = 0; code < 256; ++code) {
    const float v = fp8_e4m3_to_f32(static_cast<uint8_t>(code));
    const int e = (code >> 3) & 15, m = code & 7;
    if (e == 15 && m == 7) {
      EXPECT_TRUE(std::isnan(v)) << code;
      ++nan_count;
      continue;
    }
    const int significand = e == 0 ? m : 8 + m;
    const float magnitude = static_cast<float>(significand) * pow2(std::max(e, 1) - 10);
    EXPECT_EQ(v, (code & 0x80) ? -magnitude : magnitude) << "code " << code;
    EXPECT_EQ(std::signbit(v), (code & 0x80) != 0) << code;
    if ((code & 0x7F) > 0 && (code & 0x7F) < 0x7F) {
      // Positive codes increase strictly with their bit pattern.
      EXPECT_LT(std::abs(fp8_e4m3_to_f32(static_cast<uint8_t>(code - 1))), std::abs(v)) << code;
    }
  }
  EXPECT_EQ(nan_count, 2);
}

TEST(DTypes, E8M0Scales) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(128), 2.0f);
  EXPECT_EQ(e8m0_to_f32(126), 0.5f);
  EXPECT_EQ(e8m0_to_f32(120), 1.0f / 128.0f);
  EXPECT_EQ(e8m0_to_f32(254), pow2(127));
  EXPECT_EQ(e8m0_to_f32(1), pow2(-126));  // smallest normal float
  // 2^-127 is a float subnormal: exactly half the smallest normal, not zero.
  EXPECT_GT(e8m0_to_f32(0), 0.0f);
  EXPECT_EQ(e8m0_to_f32(0) * 2.0f, std::numeric_limits<float>::min());
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
  for (int u = 0; u < 255; ++u)
    EXPECT_EQ(static_cast<double>(e8m0_to_f32(static_cast<uint8_t>(u))), std::ldexp(1.0, u - 127));
}

TEST(DTypes, Fp4E2M1AllNibbles) {
  const float expected[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                              -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (int n = 0; n < 16; ++n) {
    EXPECT_EQ(fp4_e2m1_to_f32(static_cast<uint8_t>(n)), expected[n]) << n;
    EXPECT_EQ(std::signbit(fp4_e2m1_to_f32(static_cast<uint8_t>(n))), n >= 8) << n;
    // Only the low nibble matters.
    EXPECT_EQ(fp4_e2m1_to_f32(static_cast<uint8_t>(0xA0 | n)), expected[n]) << n;
  }
}

TEST(DTypes, Bf16RoundToNearestEven) {
  auto to_bf16 = [](uint32_t bits) { return f32_to_bf16(std::bit_cast<float>(bits)); };
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xC040), -3.0f);
  EXPECT_EQ(to_bf16(0x3F800000u), 0x3F80);  // 1.0 exact
  EXPECT_EQ(to_bf16(0x3F808000u), 0x3F80);  // 1 + 2^-8: tie, even stays
  EXPECT_EQ(to_bf16(0x3F818000u), 0x3F82);  // 1 + 3*2^-8: tie, odd rounds up to even
  EXPECT_EQ(to_bf16(0x3F808001u), 0x3F81);  // just above the tie
  EXPECT_EQ(to_bf16(0x3F807FFFu), 0x3F80);  // just below the tie
  EXPECT_EQ(to_bf16(0xBF818000u), 0xBF82);  // sign-symmetric
  EXPECT_EQ(to_bf16(0x3FFF8000u), 0x4000);  // carry into the exponent
  // Infinities, overflow, NaN.
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(to_bf16(0x7F7F0000u), 0x7F7F);  // largest finite bf16 is exact
  EXPECT_EQ(to_bf16(0x7F7F7FFFu), 0x7F7F);
  EXPECT_EQ(to_bf16(0x7F7F8000u), 0x7F80);  // tie above the largest odd bf16: to infinity
  for (uint32_t nan_bits : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu}) {
    const uint16_t b = to_bf16(nan_bits);
    EXPECT_TRUE(std::isnan(bf16_to_f32(b))) << std::hex << nan_bits;
    EXPECT_EQ(static_cast<uint32_t>(b >> 15), nan_bits >> 31) << "sign kept";
  }
  // Subnormals round like any other value.
  EXPECT_EQ(to_bf16(0x00008000u), 0x0000);
  EXPECT_EQ(to_bf16(0x00018000u), 0x0002);
  // Every non-NaN bf16 survives widening and narrowing.
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_f32(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), static_cast<uint16_t>(b));
  }
}

TEST(DTypes, Bf16ArrayConversionMatchesScalar) {
  std::vector<float> in = {1.0f, -2.5f, 3.14159f, 1e-40f, 65504.0f, -0.0f};
  std::vector<uint16_t> mid(in.size());
  std::vector<float> out(in.size());
  f32_to_bf16(in.data(), mid.data(), static_cast<int64_t>(in.size()));
  bf16_to_f32(mid.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(mid[i], f32_to_bf16(in[i]));
    EXPECT_EQ(out[i], bf16_to_f32(f32_to_bf16(in[i])));
  }
  EXPECT_EQ(mid[2], 0x4049);  // pi -> 3.140625
}

TEST(DTypes, F16Values) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0400), pow2(-14));  // smallest normal
  EXPECT_EQ(f16_to_f32(0x0001), pow2(-24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03FF), 1023.0f * pow2(-24));
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f16_to_f32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7C01)));
}

// 130 x 260 with 128 x 128 blocks: scale [2, 3], the last block row has 2 rows
// and the last block column 4 columns.
TEST(DTypes, DequantFp8BlocksPartialBlocks) {
  const int64_t rows = 130, cols = 260, block = 128;
  std::vector<uint8_t> w(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      uint8_t code = static_cast<uint8_t>((i * 7 + j * 13) % 256);
      if ((code & 0x7F) == 0x7F) code = 0x38;  // keep NaN codes out of the bulk check
      w[static_cast<size_t>(i * cols + j)] = code;
    }
  // Hand-placed values: 1.0 at (0,0), 1.5 at (129,259), -2 at (127,128), 448 at (128,127).
  w[0] = 0x38;
  w[129 * cols + 259] = 0x3C;
  w[127 * cols + 128] = 0xC0;
  w[128 * cols + 127] = 0x7E;
  const std::vector<uint8_t> scale = {126, 127, 128,   // block row 0: 0.5, 1, 2
                                      129, 130, 131};  // block row 1: 4, 8, 16
  std::vector<float> out(w.size());
  dequant_fp8_blocks(w.data(), scale.data(), rows, cols, block, out.data());
  EXPECT_EQ(out[0], 0.5f);                    // 1.0 * 0.5
  EXPECT_EQ(out[129 * cols + 259], 24.0f);    // 1.5 * 16
  EXPECT_EQ(out[127 * cols + 128], -2.0f);    // -2 * 1
  EXPECT_EQ(out[128 * cols + 127], 1792.0f);  // 448 * 4
  const float block_scale[2][3] = {{0.5f, 1.0f, 2.0f}, {4.0f, 8.0f, 16.0f}};
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const size_t k = static_cast<size_t>(i * cols + j);
      ASSERT_EQ(out[k], fp8_e4m3_to_f32(w[k]) * block_scale[i / 128][j / 128]) << i << "," << j;
    }
  // The F32-scale overload gives the same result.
  const std::vector<float> scale_f32 = {0.5f, 1.0f, 2.0f, 4.0f, 8.0f, 16.0f};
  std::vector<float> out_f32(w.size());
  dequant_fp8_blocks(w.data(), scale_f32.data(), rows, cols, block, out_f32.data());
  EXPECT_EQ(out, out_f32);
  EXPECT_THROW(dequant_fp8_blocks(w.data(), scale.data(), rows, cols, 0, out.data()), Error);
}

TEST(DTypes, DequantMxfp4NibbleOrder) {
  const int64_t rows = 2, cols = 64;  // packed [2, 32], scales [2, 2]
  std::vector<uint8_t> packed(static_cast<size_t>(rows * cols / 2), 0x00);
  packed[0] = 0x71;        // row 0: element 0 = nibble 1 (0.5), element 1 = nibble 7 (6)
  packed[15] = 0x2A;       // row 0: element 30 = nibble A (-1), element 31 = nibble 2 (1)
  packed[32 + 16] = 0x9F;  // row 1: element 32 = nibble F (-6), element 33 = nibble 9 (-0.5)
  packed[32 + 31] = 0x08;  // row 1: element 62 = nibble 8 (-0), element 63 = 0
  const std::vector<uint8_t> scale = {127, 125,   // row 0: 1, 0.25
                                      126, 129};  // row 1: 0.5, 4
  std::vector<float> out(static_cast<size_t>(rows * cols), 99.0f);
  dequant_mxfp4(packed.data(), scale.data(), rows, cols, out.data());
  EXPECT_EQ(out[0], 0.5f);
  EXPECT_EQ(out[1], 6.0f);
  EXPECT_EQ(out[30], -1.0f);
  EXPECT_EQ(out[31], 1.0f);
  EXPECT_EQ(out[64 + 32], -24.0f);  // -6 * 4
  EXPECT_EQ(out[64 + 33], -2.0f);   // -0.5 * 4
  EXPECT_EQ(out[64 + 62], 0.0f);
  EXPECT_TRUE(std::signbit(out[64 + 62]));
  int nonzero = 0;
  for (float v : out) nonzero += v != 0.0f;
  EXPECT_EQ(nonzero, 6);
  // A second block in row 0 uses its own scale: element 40 = nibble 6 (4) * 0.25.
  packed[20] = 0x06;
  dequant_mxfp4(packed.data(), scale.data(), rows, cols, out.data());
  EXPECT_EQ(out[40], 1.0f);
  EXPECT_EQ(out[41], 0.0f);
  EXPECT_THROW(dequant_mxfp4(packed.data(), scale.data(), 1, 48, out.data()), Error);
}

}  // namespace
}  // namespace trex
