#include "trex/train/optim/moment_buffer.hpp"

#include <algorithm>

#include "trex/core/dtypes.hpp"
#include "trex/core/error.hpp"

namespace trex::train {

const char* moment_dtype_name(MomentDType dtype) {
  return dtype == MomentDType::kBF16 ? "bf16" : "f32";
}

int64_t moment_dtype_bytes(MomentDType dtype) {
  return dtype == MomentDType::kBF16 ? 2 : 4;
}

MomentBuffer::MomentBuffer(MomentDType dtype, int64_t size) : dtype_(dtype), size_(size) {
  if (size < 0) throw Error("moment buffer: negative size");
  if (dtype == MomentDType::kF32)
    f32_.assign(static_cast<size_t>(size), 0.0f);
  else
    bf16_.assign(static_cast<size_t>(size), uint16_t{0});  // bf16 +0
}

namespace {
void check_range(int64_t at, size_t n, int64_t size) {
  if (at < 0 || at + static_cast<int64_t>(n) > size)
    throw Error("moment buffer: range [" + std::to_string(at) + ", " +
                std::to_string(at + static_cast<int64_t>(n)) + ") outside " + std::to_string(size));
}
}  // namespace

void MomentBuffer::read(int64_t at, std::span<float> out) const {
  check_range(at, out.size(), size_);
  if (dtype_ == MomentDType::kF32)
    std::copy_n(f32_.begin() + at, out.size(), out.begin());
  else
    bf16_to_f32(bf16_.data() + at, out.data(), static_cast<int64_t>(out.size()));
}

void MomentBuffer::write(int64_t at, std::span<const float> values) {
  check_range(at, values.size(), size_);
  if (dtype_ == MomentDType::kF32)
    std::copy(values.begin(), values.end(), f32_.begin() + at);
  else
    f32_to_bf16(values.data(), bf16_.data() + at, static_cast<int64_t>(values.size()));
}

std::vector<float> MomentBuffer::to_f32() const {
  if (dtype_ == MomentDType::kF32) return f32_;
  std::vector<float> out(static_cast<size_t>(size_));
  read(0, out);
  return out;
}

void MomentBuffer::assign(std::span<const float> values) {
  if (static_cast<int64_t>(values.size()) != size_)
    throw Error("moment buffer: " + std::to_string(values.size()) + " values, expected " +
                std::to_string(size_));
  write(0, values);
}

}  // namespace trex::train
