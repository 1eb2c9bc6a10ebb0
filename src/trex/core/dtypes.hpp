#pragma once
// Element types of checkpoint tensors and the scalar conversions between them
// (spec §4.3): BF16/F16 widening, BF16 narrowing with round-to-nearest-even,
// FP8 E4M3FN, E8M0 power-of-two scales, FP4 E2M1 nibbles, and the two block
// dequantisations used by DeepSeek-V4 checkpoints (128x128 FP8 blocks, 1x32
// MXFP4 blocks). Everything assumes a little-endian host, as safetensors does.
#include <cstddef>
#include <cstdint>
#include <string>

namespace trex {

enum class DType { kF32, kF64, kBF16, kF16, kF8E4M3, kF8E8M0, kI8, kU8, kI32, kI64, kBool };

// "F32", "BF16", "F8_E4M3", ... -> DType. Throws trex::Error naming the dtype
// for anything else (e.g. F8_E5M2, U16, F4).
DType dtype_from_safetensors(const std::string& name);
const char* safetensors_name(DType dtype);
// Bytes per element.
size_t dtype_size(DType dtype);
bool dtype_is_float(DType dtype);    // F32, F64, BF16, F16 (plain values, no scale needed)
bool dtype_is_integer(DType dtype);  // I8, U8, I32, I64, Bool

// BF16 is the top half of an IEEE float.
float bf16_to_f32(uint16_t bits);
// Round-to-nearest-even; infinities stay infinities, NaN stays NaN (quiet,
// sign kept), finite values past the largest bf16 round to infinity.
uint16_t f32_to_bf16(float value);
// IEEE half, including subnormals, infinities and NaN.
float f16_to_f32(uint16_t bits);
// FP8 E4M3FN: bias 7, no infinities, S.1111.111 = NaN, max 448,
// subnormals (m/8)*2^-6.
float fp8_e4m3_to_f32(uint8_t bits);
// E8M0 (UE8M0) scale: 2^(u-127); 255 = NaN. u = 0 gives 2^-127, a float
// subnormal (flushed to zero if the caller runs with FTZ/DAZ set).
float e8m0_to_f32(uint8_t bits);
// FP4 E2M1, low 4 bits used: 0..7 -> {0, 0.5, 1, 1.5, 2, 3, 4, 6}, 8..15 the negatives (8 = -0).
float fp4_e2m1_to_f32(uint8_t nibble);

// Array conversions (OpenMP-parallel for large n).
void bf16_to_f32(const uint16_t* in, float* out, int64_t n);
void f32_to_bf16(const float* in, uint16_t* out, int64_t n);
void f16_to_f32(const uint16_t* in, float* out, int64_t n);
// out[i] = the bf16 rounding of in[i], as fp32 (in may be out).
void round_to_bf16(const float* in, float* out, int64_t n);

// FP8 E4M3 weight [rows, cols] with block scales [ceil(rows/block), ceil(cols/block)]:
// out[i,j] = fp8(w[i,j]) * scale[i/block, j/block]. The last block row/column may be partial.
void dequant_fp8_blocks(const uint8_t* w, const uint8_t* scale_e8m0, int64_t rows, int64_t cols,
                        int64_t block, float* out);
// Same with F32 scales (DeepSeek-V3-style `weight_scale_inv` tensors).
void dequant_fp8_blocks(const uint8_t* w, const float* scale_f32, int64_t rows, int64_t cols,
                        int64_t block, float* out);
// MXFP4: packed [rows, cols/2] bytes (low nibble = element 2k, high nibble = 2k+1),
// E8M0 scales [rows, cols/32] -> out [rows, cols]: out[i,j] = fp4(nibble) * scale[i, j/32].
// cols must be a multiple of 32.
void dequant_mxfp4(const uint8_t* packed, const uint8_t* scale_e8m0, int64_t rows, int64_t cols,
                   float* out);

}  // namespace trex
