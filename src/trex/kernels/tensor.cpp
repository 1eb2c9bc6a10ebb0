#include "trex/kernels/tensor.hpp"

#include <utility>

#include "trex/kernels/backend.hpp"

namespace trex::kernels {

std::string device_name(const Device& device) {
  if (device.kind == DeviceKind::kHost) return "host";
  return "cuda:" + std::to_string(device.index);
}

Tensor::Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device)
    : data_(data), defined_(true), dtype_(dtype), device_(device) {
  if (shape.size() > static_cast<size_t>(kMaxRank))
    throw Error("tensor rank " + std::to_string(shape.size()) + " exceeds " +
                std::to_string(kMaxRank))
        .field("shape");
  for (int64_t extent : shape) {
    if (extent < 0) throw Error("tensor extent " + std::to_string(extent) + " < 0").field("shape");
    shape_[static_cast<size_t>(rank_++)] = extent;
  }
  if (data_ == nullptr && numel() > 0)
    throw Error("tensor " + shape_string() + " without data").field("data");
}

int64_t Tensor::size(int axis) const {
  if (axis < 0 || axis >= rank_)
    throw Error("axis " + std::to_string(axis) + " outside a rank-" + std::to_string(rank_) +
                " tensor")
        .field("axis");
  return shape_[static_cast<size_t>(axis)];
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= shape_[static_cast<size_t>(i)];
  return n;
}

std::string Tensor::shape_string() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i)
    s += (i ? ", " : "") + std::to_string(shape_[static_cast<size_t>(i)]);
  return s + "]";
}

bool Tensor::same_shape(std::initializer_list<int64_t> shape) const {
  if (static_cast<int>(shape.size()) != rank_) return false;
  int i = 0;
  for (int64_t extent : shape) {
    if (extent >= 0 && extent != shape_[static_cast<size_t>(i)]) return false;
    ++i;
  }
  return true;
}

namespace {

std::string expected_shape(std::initializer_list<int64_t> shape) {
  std::string s = "[";
  bool first = true;
  for (int64_t extent : shape) {
    s += (first ? "" : ", ") + (extent < 0 ? std::string("*") : std::to_string(extent));
    first = false;
  }
  return s + "]";
}

}  // namespace

void expect_tensor(const Tensor& t, const char* op, const char* name, DType dtype,
                   std::initializer_list<int64_t> shape) {
  if (!t.defined()) throw Error(std::string(op) + ": " + name + " is missing").field(name);
  if (t.dtype() != dtype || !t.same_shape(shape))
    throw Error(std::string(op) + ": " + name + " is " + safetensors_name(t.dtype()) + " " +
                t.shape_string() + ", expected " + safetensors_name(dtype) + " " +
                expected_shape(shape))
        .field(name);
}

void expect_optional(const Tensor& t, const char* op, const char* name, DType dtype,
                     std::initializer_list<int64_t> shape) {
  if (t.defined()) expect_tensor(t, op, name, dtype, shape);
}

void expect_float(const Tensor& t, const char* op, const char* name) {
  if (!t.defined()) throw Error(std::string(op) + ": " + name + " is missing").field(name);
  if (t.dtype() != DType::kF32 && t.dtype() != DType::kF64)
    throw Error(std::string(op) + ": " + name + " is " + safetensors_name(t.dtype()) +
                ", expected F32 or F64")
        .field(name);
}

Buffer::~Buffer() {
  release();
}

Buffer::Buffer(Buffer&& other) noexcept
    : backend_(std::exchange(other.backend_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      dtype_(other.dtype_),
      numel_(std::exchange(other.numel_, 0)),
      device_(other.device_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    backend_ = std::exchange(other.backend_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    dtype_ = other.dtype_;
    numel_ = std::exchange(other.numel_, 0);
    device_ = other.device_;
  }
  return *this;
}

void Buffer::release() {
  if (backend_ && data_) {
    backend_->free_bytes(data_, bytes());
    backend_->count_freed(static_cast<int64_t>(bytes()));
  }
  backend_ = nullptr;
  data_ = nullptr;
  numel_ = 0;
}

Tensor Buffer::view(std::initializer_list<int64_t> shape) const {
  Tensor t(data_, dtype_, shape, device_);
  if (t.numel() > numel_)
    throw Error("a view of " + std::to_string(t.numel()) + " elements of a buffer of " +
                std::to_string(numel_))
        .field("shape");
  return t;
}

}  // namespace trex::kernels
