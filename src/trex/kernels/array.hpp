#pragma once
// Array<T>: a typed, resizable Buffer, for the activations model code keeps
// between ops (block caches, forward/backward work buffers).
//
// Its memory comes from the Backend that computes on it, so a device backend
// owns the activations as well as the ops. resize() at an unchanged size and
// backend keeps the memory and its contents, so a cache reused step after step
// allocates once (as std::vector::resize at an equal size); any other size
// allocates afresh, zero-filled, and does not keep the old contents.
//
// Element access (operator[], begin/end) is host access: valid while the
// memory is host memory (the CPU backend's); ops take view().
#include <cstdint>
#include <initializer_list>
#include <string>

#include "trex/kernels/backend.hpp"
#include "trex/kernels/tensor.hpp"

namespace trex::kernels {

template <class T>
class Array {
 public:
  Array() = default;
  // n zero-filled elements from backend.
  Array(int64_t n, const Backend& backend) { resize(n, backend); }

  // n elements from backend: kept as they are when the array already holds n
  // elements from backend, otherwise freshly allocated and zero-filled.
  void resize(int64_t n, const Backend& backend) {
    if (buffer_.backend() == &backend && buffer_.numel() == n) return;
    buffer_ = Buffer();  // free the old memory before allocating the new
    buffer_ = backend.allocate(dtype_of<T>(), n);
  }
  // resize(n, backend), then every element = value (the backend's fill op).
  void assign(int64_t n, T value, const Backend& backend) {
    resize(n, backend);
    backend.fill(view({n}), static_cast<double>(value));
  }

  // n elements from backend, copied from host memory src (Backend::copy_from_host).
  void assign_from_host(const T* src, int64_t n, const Backend& backend) {
    resize(n, backend);
    backend.copy_from_host(src, view({n}));
  }

  int64_t size() const { return buffer_.numel(); }
  bool empty() const { return size() == 0; }
  T* data() const { return empty() ? nullptr : buffer_.data<T>(); }
  const Device& device() const { return buffer_.device(); }
  const Backend* backend() const { return buffer_.backend(); }  // null: nothing allocated
  // The first product(shape) elements as a tensor of this dtype and shape.
  Tensor view(std::initializer_list<int64_t> shape) const {
    Tensor t(data(), dtype_of<T>(), shape, buffer_.device());
    if (t.numel() > size())
      throw Error("a view of " + std::to_string(t.numel()) + " elements of an array of " +
                  std::to_string(size()))
          .field("shape");
    return t;
  }

  // Host access (see above).
  T& operator[](int64_t i) const { return data()[i]; }
  T* begin() const { return data(); }
  T* end() const { return data() + size(); }

 private:
  Buffer buffer_;
};

}  // namespace trex::kernels
