#include "trex/kernels/cpu/indices.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "trex/core/error.hpp"

namespace trex::kernels {

void sequence_positions(int64_t* out, int64_t n, int64_t period, int64_t stride) {
  for (int64_t i = 0; i < n; ++i) out[i] = (i % period) * stride;
}

template <class Index>
IndexScan scan_indices(const Index* index, int64_t n, int64_t lo, int64_t hi) {
  IndexScan scan;
  for (int64_t i = 0; i < n; ++i) {
    const auto v = static_cast<int64_t>(index[i]);
    if (v < lo || v >= hi) {
      if (scan.first_bad < 0) {
        scan.first_bad = i;
        scan.bad_value = v;
      }
    } else if (v >= 0) {
      ++scan.counted;
    }
  }
  return scan;
}

void count_indices(const int32_t* index, int64_t n, int64_t E, int64_t* counts) {
  std::fill_n(counts, E, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = index[i];
    if (v < 0 || v >= E)
      throw Error("count_indices: entry " + std::to_string(i) + " is " + std::to_string(v) +
                  ", outside [0, " + std::to_string(E) + ")")
          .field("index");
    ++counts[v];
  }
}

void counting_sort(const int32_t* keys, int64_t n, int64_t E, int64_t* offsets, int64_t* order,
                   int64_t* rank) {
  count_indices(keys, n, E, offsets + 1);
  offsets[0] = 0;
  for (int64_t e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
  std::vector<int64_t> cursor(offsets, offsets + E);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t place = cursor[keys[i]]++;
    order[place] = i;
    rank[i] = place;
  }
}

int64_t first_invisible_selection(const AttentionKeySetDims& dims, const int64_t* selected,
                                  int64_t N, int64_t k) {
  for (int64_t r = 0; r < N; ++r) {
    const int64_t visible = dims.visible(r);
    for (int64_t j = 0; j < k; ++j)
      if (selected[r * k + j] >= visible) return r;
  }
  return -1;
}

namespace {

// Compressed keys of query row r.
int64_t compressed_count(const AttentionKeySetDims& dims, const int64_t* selected, int64_t k,
                         int64_t r) {
  if (!selected) return dims.visible(r);
  int64_t count = 0;
  for (int64_t j = 0; j < k; ++j) count += selected[r * k + j] >= 0;
  return count;
}

}  // namespace

AttentionKeySetSizes attention_key_offsets(const AttentionKeySetDims& dims, const int64_t* selected,
                                           int64_t N, int64_t k, int64_t* comp_offsets,
                                           int64_t* prob_offsets) {
  comp_offsets[0] = 0;
  prob_offsets[0] = 0;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t compressed = compressed_count(dims, selected, k, r);
    comp_offsets[r + 1] = comp_offsets[r] + compressed;
    prob_offsets[r + 1] = prob_offsets[r] + dims.heads * (dims.core.window_keys(r) + compressed);
  }
  return {comp_offsets[N], prob_offsets[N]};
}

void attention_compressed_keys(const AttentionKeySetDims& dims, const int64_t* selected, int64_t N,
                               int64_t k, const int64_t* comp_offsets, int64_t* comp_list) {
  for (int64_t r = 0; r < N; ++r) {
    const int64_t first = (r / dims.core.seq) * dims.blocks;
    int64_t* entry = comp_list + comp_offsets[r];
    if (selected) {
      for (int64_t j = 0; j < k; ++j)
        if (selected[r * k + j] >= 0) *entry++ = first + selected[r * k + j];
    } else {
      for (int64_t i = 0; i < comp_offsets[r + 1] - comp_offsets[r]; ++i) *entry++ = first + i;
    }
  }
}

template IndexScan scan_indices<int64_t>(const int64_t*, int64_t, int64_t, int64_t);
template IndexScan scan_indices<int32_t>(const int32_t*, int64_t, int64_t, int64_t);

}  // namespace trex::kernels
