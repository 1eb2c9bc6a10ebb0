#pragma once
// Random draws that several generators share when they place a side
// constraint between two items that the planted solution must still satisfy.
#include <algorithm>
#include <cstddef>
#include <optional>
#include <utility>

#include "trex/core/rng.hpp"

namespace trex::orlib {

// Draws up to `attempts` pairs (a, b) of indices in [0, n), a first, and
// returns the first pair of distinct indices that `allowed(a, b)` accepts;
// nullopt when no attempt succeeds.
template <typename Index, typename Allowed>
std::optional<std::pair<Index, Index>> draw_distinct_pair(Rng& rng, Index n, int attempts,
                                                          Allowed allowed) {
  for (int attempt = 0; attempt < attempts; ++attempt) {
    const auto a = static_cast<Index>(rng.index(static_cast<size_t>(n)));
    const auto b = static_cast<Index>(rng.index(static_cast<size_t>(n)));
    if (a != b && allowed(a, b)) return std::pair{a, b};
  }
  return std::nullopt;
}

// The pair with the smaller index first.
template <typename Index>
std::pair<Index, Index> in_order(const std::pair<Index, Index>& pair) {
  return {std::min(pair.first, pair.second), std::max(pair.first, pair.second)};
}

}  // namespace trex::orlib
