#pragma once
// Deterministic, counter-based random numbers.
//
// Output n of a stream is a pure function mix(key + n·γ) (SplitMix64), and the
// key is a hash of (seed, stream ids...). Any shard of work can therefore build
// the exact stream of item i without replaying items 0..i-1, and results do not
// depend on the platform's <random> distributions (which are unspecified).
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

namespace trex {

inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

inline uint64_t hash_combine(uint64_t h, uint64_t v) {
  return mix64(h ^ (v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2)));
}

inline uint64_t hash_string(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ULL;  // FNV-1a, then a final mix
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ULL;
  return mix64(h);
}

class Rng {
 public:
  explicit Rng(uint64_t seed, std::initializer_list<uint64_t> stream = {}) {
    key_ = mix64(seed ^ 0x6A09E667F3BCC909ULL);
    for (uint64_t s : stream) key_ = hash_combine(key_, s);
  }

  // An independent child stream; does not advance this one.
  Rng child(uint64_t id) const {
    Rng r(0);
    r.key_ = hash_combine(key_, id ^ 0xA54FF53A5F1D36F1ULL);
    return r;
  }

  uint64_t next_u64() {
    counter_ += 1;
    return mix64(key_ + counter_ * 0x9E3779B97F4A7C15ULL);
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

  // Uniform integer in [lo, hi] (inclusive), unbiased by rejection.
  int64_t uniform_int(int64_t lo, int64_t hi) {
    if (hi < lo) throw std::invalid_argument("Rng::uniform_int: hi < lo");
    uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    if (span == 0) return static_cast<int64_t>(next_u64());
    uint64_t limit = UINT64_MAX - UINT64_MAX % span;
    uint64_t x;
    do x = next_u64();
    while (x >= limit);
    return lo + static_cast<int64_t>(x % span);
  }
  int uniform_int(int lo, int hi) {
    return static_cast<int>(uniform_int(static_cast<int64_t>(lo), static_cast<int64_t>(hi)));
  }
  size_t index(size_t n) {
    return static_cast<size_t>(uniform_int(int64_t{0}, static_cast<int64_t>(n) - 1));
  }

  bool bernoulli(double p) { return uniform() < p; }

  double normal() {  // Box-Muller, one value per call (keeps the stream position simple)
    double u1 = uniform();
    double u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  template <typename T>
  const T& pick(const std::vector<T>& items) {
    if (items.empty()) throw std::invalid_argument("Rng::pick: empty list");
    return items[index(items.size())];
  }

  template <typename T>
  void shuffle(std::vector<T>& items) {
    for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[index(i)]);
  }

  // k distinct indices from [0, n), in random order.
  std::vector<size_t> sample(size_t n, size_t k) {
    if (k > n) throw std::invalid_argument("Rng::sample: k > n");
    std::vector<size_t> all(n);
    for (size_t i = 0; i < n; ++i) all[i] = i;
    for (size_t i = 0; i < k; ++i) std::swap(all[i], all[i + index(n - i)]);
    all.resize(k);
    return all;
  }

 private:
  uint64_t key_ = 0;
  uint64_t counter_ = 0;
};

}  // namespace trex
