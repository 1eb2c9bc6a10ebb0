#pragma once
// Whether this test program runs under AddressSanitizer + UBSan (make test-asan).
// Code runs 2-10x slower there, and `make test` runs both suites on CI's 2
// cores within its time budget: the longest end-to-end tests run a smaller
// sample under the sanitizers (the same code paths, fewer repetitions) and in
// full in the Release suite.
#include <algorithm>
#include <cstddef>

namespace trex::test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif
#else
inline constexpr bool kSanitizedBuild = false;
#endif

// `full` repetitions in the Release suite, at most `sanitized` under the sanitizers.
inline size_t sanitizer_sample(size_t full, size_t sanitized) {
  return kSanitizedBuild ? std::min(full, sanitized) : full;
}

}  // namespace trex::test
