#include "trex/core/dtypes.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>

#include "trex/core/error.hpp"

namespace trex {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts are not supported");

namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr std::array<DTypeInfo, 11> kDTypes = {{
    {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},
    {DType::kBF16, "BF16", 2},
    {DType::kF16, "F16", 2},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kF8E8M0, "F8_E8M0", 1},
    {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},
    {DType::kI32, "I32", 4},
    {DType::kI64, "I64", 8},
    {DType::kBool, "BOOL", 1},
}};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kDTypes)
    if (entry.dtype == dtype) return entry;
  throw Error("invalid DType value " + std::to_string(static_cast<int>(dtype)));
}

// Decoding tables: every byte value decoded once, so the hot loops are lookups.
std::array<float, 256> make_fp8_e4m3_table() {
  std::array<float, 256> table{};
  for (int code = 0; code < 256; ++code) {
    const int sign = code >> 7;
    const int exponent = (code >> 3) & 0xF;
    const int mantissa = code & 0x7;
    float magnitude;
    if (exponent == 0xF && mantissa == 0x7) {
      magnitude = std::numeric_limits<float>::quiet_NaN();
    } else if (exponent == 0) {
      magnitude = std::ldexp(static_cast<float>(mantissa) / 8.0f, -6);
    } else {
      magnitude = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
    }
    table[static_cast<size_t>(code)] = sign ? -magnitude : magnitude;
  }
  return table;
}

std::array<float, 256> make_e8m0_table() {
  std::array<float, 256> table{};
  for (int code = 0; code < 255; ++code)
    table[static_cast<size_t>(code)] = std::ldexp(1.0f, code - 127);
  table[255] = std::numeric_limits<float>::quiet_NaN();
  return table;
}

const std::array<float, 256>& fp8_table() {
  static const std::array<float, 256> table = make_fp8_e4m3_table();
  return table;
}

const std::array<float, 256>& e8m0_table() {
  static const std::array<float, 256> table = make_e8m0_table();
  return table;
}

constexpr std::array<float, 16> kFp4Values = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                              4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                              -2.0f, -3.0f, -4.0f, -6.0f};

void check_matrix(const char* what, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0)
    throw Error(std::string(what) + ": negative shape [" + std::to_string(rows) + ", " +
                std::to_string(cols) + "]");
}

template <class ScaleAt>
void dequant_fp8_blocks_impl(const uint8_t* w, int64_t rows, int64_t cols, int64_t block,
                             float* out, ScaleAt scale_at) {
  check_matrix("dequant_fp8_blocks", rows, cols);
  if (block <= 0) throw Error("dequant_fp8_blocks: block size must be positive");
  const auto& table = fp8_table();
  const int64_t scale_cols = (cols + block - 1) / block;
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* w_row = w + i * cols;
    float* out_row = out + i * cols;
    const int64_t scale_row = (i / block) * scale_cols;
    for (int64_t jb = 0; jb < scale_cols; ++jb) {
      const float scale = scale_at(scale_row + jb);
      const int64_t end = std::min(cols, (jb + 1) * block);
      for (int64_t j = jb * block; j < end; ++j) out_row[j] = table[w_row[j]] * scale;
    }
  }
}

}  // namespace

DType dtype_from_safetensors(const std::string& name) {
  for (const auto& entry : kDTypes)
    if (name == entry.name) return entry.dtype;
  throw Error("unsupported safetensors dtype '" + name +
              "' (supported: F32 F64 BF16 F16 F8_E4M3 F8_E8M0 I8 U8 I32 I64 BOOL)");
}

const char* safetensors_name(DType dtype) {
  return info(dtype).name;
}
size_t dtype_size(DType dtype) {
  return info(dtype).size;
}

bool dtype_is_float(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kBF16 ||
         dtype == DType::kF16;
}

bool dtype_is_integer(DType dtype) {
  return dtype == DType::kI8 || dtype == DType::kU8 || dtype == DType::kI32 ||
         dtype == DType::kI64 || dtype == DType::kBool;
}

float bf16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t f32_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) {
    // Truncating could clear every remaining mantissa bit and turn NaN into
    // infinity; setting the quiet bit keeps it a NaN with the same sign.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Adding 0x7FFF plus the lowest kept bit rounds to nearest, ties to even;
  // the carry into the exponent turns the largest finite values into infinity.
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

float fp8_e4m3_to_f32(uint8_t bits) {
  return fp8_table()[bits];
}
float e8m0_to_f32(uint8_t bits) {
  return e8m0_table()[bits];
}
float fp4_e2m1_to_f32(uint8_t nibble) {
  return kFp4Values[nibble & 0xFu];
}

void bf16_to_f32(const uint16_t* in, float* out, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 18))
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
}

void f32_to_bf16(const float* in, uint16_t* out, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 18))
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

void round_to_bf16(const float* in, float* out, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 18))
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(in[i]));
}

void f16_to_f32(const uint16_t* in, float* out, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 18))
  for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(in[i]);
}

void dequant_fp8_blocks(const uint8_t* w, const uint8_t* scale_e8m0, int64_t rows, int64_t cols,
                        int64_t block, float* out) {
  const auto& scales = e8m0_table();
  dequant_fp8_blocks_impl(w, rows, cols, block, out,
                          [&](int64_t k) { return scales[scale_e8m0[k]]; });
}

void dequant_fp8_blocks(const uint8_t* w, const float* scale_f32, int64_t rows, int64_t cols,
                        int64_t block, float* out) {
  dequant_fp8_blocks_impl(w, rows, cols, block, out, [&](int64_t k) { return scale_f32[k]; });
}

void dequant_mxfp4(const uint8_t* packed, const uint8_t* scale_e8m0, int64_t rows, int64_t cols,
                   float* out) {
  check_matrix("dequant_mxfp4", rows, cols);
  if (cols % 32 != 0)
    throw Error("dequant_mxfp4: logical column count " + std::to_string(cols) +
                " is not a multiple of the 32-element MXFP4 block");
  const auto& scales = e8m0_table();
  const int64_t packed_cols = cols / 2;
  const int64_t scale_cols = cols / 32;
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* in_row = packed + i * packed_cols;
    const uint8_t* scale_row = scale_e8m0 + i * scale_cols;
    float* out_row = out + i * cols;
    for (int64_t b = 0; b < scale_cols; ++b) {
      const float scale = scales[scale_row[b]];
      for (int64_t k = b * 16; k < (b + 1) * 16; ++k) {
        const uint8_t byte = in_row[k];
        out_row[2 * k] = kFp4Values[byte & 0xFu] * scale;
        out_row[2 * k + 1] = kFp4Values[byte >> 4] * scale;
      }
    }
  }
}

}  // namespace trex
