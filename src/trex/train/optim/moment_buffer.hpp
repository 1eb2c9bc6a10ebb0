#pragma once
// An optimizer moment buffer stored in fp32 or bf16. DeepSeek-V3 keeps AdamW's
// moments in bf16 without measurable loss; bf16 halves the optimizer's state.
// Updates always compute in fp32 (and AdamW in double per element): a bf16
// buffer is decoded into fp32 scratch for an update and rounded back
// (round-to-nearest-even) afterwards.
#include <cstdint>
#include <span>
#include <vector>

namespace trex::train {

enum class MomentDType { kF32, kBF16 };

const char* moment_dtype_name(MomentDType dtype);  // "f32", "bf16"
int64_t moment_dtype_bytes(MomentDType dtype);     // 4 or 2

class MomentBuffer {
 public:
  MomentBuffer() = default;
  MomentBuffer(MomentDType dtype, int64_t size);  // zeros

  MomentDType dtype() const { return dtype_; }
  int64_t size() const { return size_; }
  int64_t bytes() const { return size_ * moment_dtype_bytes(dtype_); }

  // The fp32 storage itself (updates run in place), or null for bf16.
  float* f32() { return dtype_ == MomentDType::kF32 ? f32_.data() : nullptr; }
  const float* f32() const { return dtype_ == MomentDType::kF32 ? f32_.data() : nullptr; }
  // Values [at, at + out.size()) as fp32 (exact for either dtype).
  void read(int64_t at, std::span<float> out) const;
  // Stores `values` at [at, at + values.size()) (rounded for bf16).
  void write(int64_t at, std::span<const float> values);
  // Every value as fp32 / replaced by `values` (size() of them).
  std::vector<float> to_f32() const;
  void assign(std::span<const float> values);

 private:
  MomentDType dtype_ = MomentDType::kF32;
  int64_t size_ = 0;
  std::vector<float> f32_;
  std::vector<uint16_t> bf16_;
};

}  // namespace trex::train
