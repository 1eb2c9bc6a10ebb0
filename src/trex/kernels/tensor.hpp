#pragma once
// The values the op layer (backend.hpp) computes on.
//
// Tensor: a non-owning view — data pointer, element type, shape (contiguous,
// row-major, at most kMaxRank axes) and the device the data lives on (with the
// stream the backend orders its work on). Typed access checks the dtype, and
// every op checks the dtypes and shapes of its operands (expect_tensor), so a
// wrong operand is a trex::Error naming the op and the operand, not a wrong
// answer.
//
// Buffer: owning storage allocated (zero-filled) by a Backend and returned to
// it on destruction, so a device backend owns the memory of what it computes.
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "trex/core/dtypes.hpp"
#include "trex/core/error.hpp"
#include "trex/kernels/precision.hpp"

namespace trex::kernels {

enum class DeviceKind { kHost, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kHost;
  int index = 0;
  void* stream = nullptr;  // the backend's stream handle (cudaStream_t); null on the host
  bool operator==(const Device&) const = default;
};

std::string device_name(const Device& device);

// The DType of a C++ element type.
template <class T>
constexpr DType dtype_of() {
  using U = std::remove_const_t<T>;
  if constexpr (std::is_same_v<U, float>) return DType::kF32;
  if constexpr (std::is_same_v<U, double>) return DType::kF64;
  if constexpr (std::is_same_v<U, int64_t>) return DType::kI64;
  if constexpr (std::is_same_v<U, int32_t>) return DType::kI32;
  static_assert(std::is_same_v<U, float> || std::is_same_v<U, double> ||
                    std::is_same_v<U, int64_t> || std::is_same_v<U, int32_t>,
                "no DType for this element type");
  return DType::kF32;
}

class Tensor {
 public:
  static constexpr int kMaxRank = 4;

  Tensor() = default;  // undefined: an absent optional operand
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = {});

  // A view of typed memory (const is dropped: ops document which operands they
  // write). data may be null only when the shape has no elements.
  template <class T>
  static Tensor of(T* data, std::initializer_list<int64_t> shape, Device device = {}) {
    return Tensor(const_cast<std::remove_const_t<T>*>(data), dtype_of<T>(), shape, device);
  }
  // The same, or an undefined tensor (an absent operand) when data is null.
  template <class T>
  static Tensor optional(T* data, std::initializer_list<int64_t> shape, Device device = {}) {
    return data ? of(data, shape, device) : Tensor();
  }

  bool defined() const { return defined_; }
  DType dtype() const { return dtype_; }
  int rank() const { return rank_; }
  int64_t size(int axis) const;  // throws on an axis outside [0, rank)
  int64_t numel() const;
  const Device& device() const { return device_; }
  std::string shape_string() const;  // "[2, 3]"
  bool same_shape(std::initializer_list<int64_t> shape) const;

  // The data as T* (null when undefined); throws trex::Error when T is not the
  // tensor's dtype.
  template <class T>
  T* data() const {
    if (!defined_) return nullptr;
    if (dtype_of<T>() != dtype_)
      throw Error(std::string("tensor of dtype ") + safetensors_name(dtype_) + " read as " +
                  safetensors_name(dtype_of<T>()))
          .field("dtype");
    return static_cast<T*>(data_);
  }
  void* raw() const { return data_; }

 private:
  void* data_ = nullptr;
  bool defined_ = false;
  DType dtype_ = DType::kF32;
  std::array<int64_t, kMaxRank> shape_{};
  int rank_ = 0;
  Device device_;
};

// The checks every op runs on its operands; the error names the op and operand:
// "rmsnorm_forward: x is F64 [4, 8], expected F32 [4, 8]" (field "x").
// A shape entry of -1 matches any extent.
void expect_tensor(const Tensor& t, const char* op, const char* name, DType dtype,
                   std::initializer_list<int64_t> shape);
// The same for an operand that may be undefined (absent).
void expect_optional(const Tensor& t, const char* op, const char* name, DType dtype,
                     std::initializer_list<int64_t> shape);
// A floating-point dtype the backend computes in (F32 or F64), or a trex::Error.
void expect_float(const Tensor& t, const char* op, const char* name);

class Backend;

// Owning memory from a Backend (zero-filled), freed by it on destruction.
class Buffer {
 public:
  Buffer() = default;
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  DType dtype() const { return dtype_; }
  int64_t numel() const { return numel_; }
  size_t bytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  const Device& device() const { return device_; }
  const Backend* backend() const { return backend_; }  // null: nothing allocated
  template <class T>
  T* data() const {
    return view({numel_}).data<T>();
  }
  // A view of the first product(shape) elements.
  Tensor view(std::initializer_list<int64_t> shape) const;

 private:
  friend class Backend;
  void release();
  const Backend* backend_ = nullptr;
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  int64_t numel_ = 0;
  Device device_;
};

}  // namespace trex::kernels
