#pragma once
// Page-backed buffers whose physical memory can be given back while the
// buffer lives (docs/distributed.md, ZeRO-2 memory). Large allocations are
// anonymous private mappings (Linux mmap): after madvise(MADV_DONTNEED) their
// pages read zero again and cost no memory until written. That lets ZeRO-2
// release gradient buckets once they are reduced, and zeroing leaves the
// released pages uncommitted.
// Elsewhere, or for small buffers, plain zeroed heap memory with the same
// interface (release then does nothing and zeroing writes every value).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

namespace trex::model {

namespace page_memory {
// Allocations of at least this many bytes are page mappings.
inline constexpr size_t kMappedThreshold = size_t{1} << 16;
size_t page_size();
bool mapped(size_t bytes);  // would an allocation of `bytes` be a mapping
// Zero-filled memory for `bytes` (a mapping when mapped(bytes)).
void* allocate(size_t bytes);
void deallocate(void* p, size_t bytes);
// [begin, begin + bytes) of an allocation of `capacity_bytes` at `base`: the
// whole pages inside give their memory back and read zero afterwards; the
// values on the partial pages at the edges are unspecified (left as they are).
// Returns the bytes released (0 when not a mapping).
size_t release(void* base, size_t capacity_bytes, size_t begin, size_t bytes);
// Sets [begin, begin + bytes) to zero without committing memory: whole pages
// that are resident are written (cheaper than releasing them just before
// backward writes them again), the others are released; edges are written.
void zero(void* base, size_t capacity_bytes, size_t begin, size_t bytes);
// Bytes of [p, p + bytes) backed by physical memory (mincore; page
// granularity; -1 when unsupported).
int64_t resident_bytes(const void* p, size_t bytes);
}  // namespace page_memory

// Allocator for std::vector: zeroed page-backed memory; value-less
// construction leaves the (zero) memory untouched so a new buffer commits no
// pages.
template <class T>
struct PageAllocator {
  using value_type = T;
  PageAllocator() = default;
  template <class U>
  PageAllocator(const PageAllocator<U>&) {}  // NOLINT: rebinding is implicit
  T* allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(page_memory::allocate(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) { page_memory::deallocate(p, n * sizeof(T)); }
  template <class U>
  void construct(U* p) {
    ::new (static_cast<void*>(p)) U;  // default-init: the memory is already zero
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <class U>
  bool operator==(const PageAllocator<U>&) const {
    return true;
  }
};

// The gradient buffer of a ParamStore: a std::vector over PageAllocator that
// also converts to, compares with and is assigned from a plain std::vector
// (copies; for tests and callers that snapshot gradients).
template <class T>
class PageVector : public std::vector<T, PageAllocator<T>> {
  using Base = std::vector<T, PageAllocator<T>>;

 public:
  using Base::Base;
  using Base::operator=;
  PageVector() = default;
  PageVector& operator=(const std::vector<T>& values) {
    this->assign(values.begin(), values.end());
    return *this;
  }
  operator std::vector<T>() const {  // NOLINT: a copy on purpose
    return std::vector<T>(this->begin(), this->end());
  }
  friend bool operator==(const PageVector& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator==(const PageVector& a, const PageVector& b) {
    return static_cast<const Base&>(a) == static_cast<const Base&>(b);
  }
};

// Gives back the whole pages of v[begin, end) (they read zero afterwards; the
// edge values are unspecified). Returns the bytes released.
template <class T>
size_t release_pages(PageVector<T>& v, int64_t begin, int64_t end) {
  if (end <= begin) return 0;
  return page_memory::release(v.data(), v.capacity() * sizeof(T),
                              static_cast<size_t>(begin) * sizeof(T),
                              static_cast<size_t>(end - begin) * sizeof(T));
}
// Zeroes every value; pages not resident stay uncommitted (page_memory::zero).
template <class T>
void zero_pages(PageVector<T>& v) {
  page_memory::zero(v.data(), v.capacity() * sizeof(T), 0, v.size() * sizeof(T));
}
template <class T>
int64_t resident_bytes(const PageVector<T>& v) {
  return page_memory::resident_bytes(v.data(), v.size() * sizeof(T));
}

}  // namespace trex::model
