#pragma once
// The engine's top-k rule (indexer selection; the router's select_top_k in
// model/moe.cpp follows the same order): a strict total order on (score, index).
// Higher score first; among exactly equal scores (+0 == −0) the lower index
// first; NaN after every number, NaNs by index. The selected set and its order
// are therefore a pure function of the scores: independent of the OpenMP thread
// count, of how rows are split between threads and of std::partial_sort's
// internals. torch.topk leaves the order among equal scores unspecified; the
// parity oracle (reference/oracle_port.py) uses this rule (a stable descending
// sort). Exact ties are common at random init: a block whose q·k are all ≤ 0
// scores exactly 0 (ReLU).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace trex::kernels {

template <class T>
inline bool ranks_before(T score_x, int64_t x, T score_y, int64_t y) {
  if (score_x > score_y) return true;
  if (score_x == score_y) return x < y;
  return std::isnan(score_y) && (!std::isnan(score_x) || x < y);
}

// out[0..take) = the take = min(k, n) first of the indices 0..n−1 in
// ranks_before order of scores[0..n); returns take. `order` is scratch.
template <class T>
int64_t select_top_indices(const T* scores, int64_t n, int64_t k, int64_t* out,
                           std::vector<int64_t>& order) {
  const int64_t take = std::max<int64_t>(0, std::min(k, n));
  order.resize(static_cast<size_t>(std::max<int64_t>(n, 0)));
  std::iota(order.begin(), order.end(), int64_t{0});
  // ranks_before is a strict total order, so the first `take` are unique
  // whatever partial_sort does internally.
  std::partial_sort(order.begin(), order.begin() + take, order.end(),
                    [&](int64_t x, int64_t y) { return ranks_before(scores[x], x, scores[y], y); });
  std::copy(order.begin(), order.begin() + take, out);
  return take;
}

}  // namespace trex::kernels
