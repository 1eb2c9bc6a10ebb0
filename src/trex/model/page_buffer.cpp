#include "trex/model/page_buffer.hpp"

#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#define TREX_PAGE_MAPPING 1
#else
#define TREX_PAGE_MAPPING 0
#endif

namespace trex::model::page_memory {

size_t page_size() {
#if TREX_PAGE_MAPPING
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
#else
  return 4096;
#endif
}

bool mapped(size_t bytes) {
  return TREX_PAGE_MAPPING && bytes >= kMappedThreshold;
}

void* allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
#if TREX_PAGE_MAPPING
  if (mapped(bytes)) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return p;  // anonymous mappings start zero-filled
  }
#endif
  void* p = std::calloc(bytes, 1);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void deallocate(void* p, size_t bytes) {
  if (p == nullptr) return;
#if TREX_PAGE_MAPPING
  if (mapped(bytes)) {
    munmap(p, bytes);
    return;
  }
#endif
  std::free(p);
}

namespace {
// The whole pages inside [begin, begin + bytes) of a mapping at `base`.
std::pair<size_t, size_t> whole_pages(const void* base, size_t begin, size_t bytes) {
  const size_t page = page_size();
  const auto start = reinterpret_cast<uintptr_t>(base) + begin;
  const uintptr_t first = (start + page - 1) / page * page;
  const uintptr_t last = (start + bytes) / page * page;
  if (last <= first) return {0, 0};
  return {first - reinterpret_cast<uintptr_t>(base), last - first};
}
}  // namespace

size_t release(void* base, size_t capacity_bytes, size_t begin, size_t bytes) {
#if TREX_PAGE_MAPPING
  if (!mapped(capacity_bytes) || bytes == 0) return 0;
  const auto [offset, length] = whole_pages(base, begin, bytes);
  if (length == 0) return 0;
  // Private anonymous mapping: the pages are dropped and read zero on next access.
  if (madvise(static_cast<char*>(base) + offset, length, MADV_DONTNEED) != 0) {
    std::memset(static_cast<char*>(base) + offset, 0, length);  // still correct, not released
    return 0;
  }
  return length;
#else
  (void)base, (void)capacity_bytes, (void)begin, (void)bytes;
  return 0;
#endif
}

void zero(void* base, size_t capacity_bytes, size_t begin, size_t bytes) {
  char* p = static_cast<char*>(base);
  if (bytes == 0) return;
  if (!mapped(capacity_bytes)) {
    std::memset(p + begin, 0, bytes);
    return;
  }
  const auto [offset, length] = whole_pages(base, begin, bytes);
  if (length == 0) {
    std::memset(p + begin, 0, bytes);
    return;
  }
  std::memset(p + begin, 0, offset - begin);
  std::memset(p + offset + length, 0, begin + bytes - offset - length);
#if TREX_PAGE_MAPPING
  // Resident pages are written (releasing them would make the next backward
  // fault every page in again, ~10x the cost of memset); the others are
  // released, which makes them read zero without committing them (and also
  // drops a swapped-out page's stale contents).
  const size_t page = page_size();
  const size_t pages = length / page;
  std::vector<unsigned char> in_core(pages);
  if (mincore(p + offset, length, in_core.data()) != 0) {
    release(base, capacity_bytes, offset, length);
    return;
  }
  for (size_t i = 0; i < pages;) {
    size_t j = i;
    const bool resident = (in_core[i] & 1) != 0;
    while (j < pages && ((in_core[j] & 1) != 0) == resident) ++j;
    if (resident)
      std::memset(p + offset + i * page, 0, (j - i) * page);
    else
      release(base, capacity_bytes, offset + i * page, (j - i) * page);
    i = j;
  }
#else
  std::memset(p + offset, 0, length);
#endif
}

int64_t resident_bytes(const void* p, size_t bytes) {
#if TREX_PAGE_MAPPING
  if (bytes == 0) return 0;
  const size_t page = page_size();
  const auto start = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  const size_t pages = (end - start + page - 1) / page;
  std::vector<unsigned char> in_core(pages);
  if (mincore(reinterpret_cast<void*>(start), end - start, in_core.data()) != 0) return -1;
  int64_t resident = 0;
  for (unsigned char c : in_core) resident += (c & 1) ? static_cast<int64_t>(page) : 0;
  return resident;
#else
  (void)p, (void)bytes;
  return -1;
#endif
}

}  // namespace trex::model::page_memory
