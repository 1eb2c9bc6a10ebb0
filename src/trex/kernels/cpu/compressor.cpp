#include "trex/kernels/cpu/compressor.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace trex::kernels {
namespace {

// Below this many multiply-adds a loop runs serially: an OpenMP region costs more.
constexpr int64_t kParallelWork = int64_t{1} << 18;

// Slot layout of entry (b, i), channel e. Slot s < m of an overlapping compressor is
// the previous block's token (i−1)·m+s, first-half feature e; slot m+s (or s without
// overlap) is the current block's token i·m+s, second-half feature c_x+e (or e).
// Returns false for the previous-block slots of entry 0 (score −∞, weight 0).
struct Slot {
  int64_t row;      // token row in [B·S]
  int64_t column;   // feature column in [coff·c_x]
  int64_t ape_row;  // position inside the block
};

inline bool slot_of(const CompressorPoolDims& d, int64_t S, int64_t b, int64_t i, int64_t slot,
                    int64_t e, Slot* out) {
  const int64_t m = d.ratio;
  if (d.overlap && slot < m) {
    if (i == 0) return false;
    *out = {b * S + (i - 1) * m + slot, e, slot};
    return true;
  }
  const int64_t r = d.overlap ? slot - m : slot;
  *out = {b * S + i * m + r, d.overlap ? d.out_dim + e : e, r};
  return true;
}

}  // namespace

template <class T>
void compressor_pool_forward(const CompressorPoolDims& dims, const T* gate, const T* proj,
                             const T* ape, T* prob_out, T* pooled_out) {
  const int64_t width = dims.width();
  const int64_t cx = dims.out_dim;
  const int64_t slots = dims.slots();
  const int64_t N = dims.blocks();
  const int64_t entries = dims.entries();
  std::fill(prob_out, prob_out + entries * slots * cx, T(0));
#pragma omp parallel for schedule(static) if (entries * slots * cx > kParallelWork)
  for (int64_t entry = 0; entry < entries; ++entry) {
    const int64_t b = entry / std::max<int64_t>(N, 1);
    const int64_t i = entry % std::max<int64_t>(N, 1);
    T* prob = prob_out + entry * slots * cx;
    for (int64_t e = 0; e < cx; ++e) {
      T max_score = -std::numeric_limits<T>::infinity();
      Slot s;
      for (int64_t k = 0; k < slots; ++k) {
        if (!slot_of(dims, dims.seq, b, i, k, e, &s)) continue;
        const T score = gate[s.row * width + s.column] + ape[s.ape_row * width + s.column];
        prob[k * cx + e] = score;
        max_score = std::max(max_score, score);
      }
      T sum = 0;
      for (int64_t k = 0; k < slots; ++k) {
        if (!slot_of(dims, dims.seq, b, i, k, e, &s)) continue;
        const T p = std::exp(prob[k * cx + e] - max_score);
        prob[k * cx + e] = p;
        sum += p;
      }
      T pooled = 0;
      for (int64_t k = 0; k < slots; ++k) {
        if (!slot_of(dims, dims.seq, b, i, k, e, &s)) continue;
        prob[k * cx + e] /= sum;
        pooled += prob[k * cx + e] * proj[s.row * width + s.column];
      }
      pooled_out[entry * cx + e] = pooled;
    }
  }
}

template <class T>
void compressor_pool_backward(const CompressorPoolDims& dims, const T* prob_in, const T* proj,
                              const T* pooled_in, const T* dpooled, T* dproj, T* dgate, T* dape) {
  const int64_t width = dims.width();
  const int64_t cx = dims.out_dim;
  const int64_t m = dims.ratio;
  const int64_t slots = dims.slots();
  const int64_t N = dims.blocks();
  const int64_t entries = dims.entries();
  const int64_t tokens = dims.batch * dims.seq;
  std::fill(dproj, dproj + tokens * width, T(0));
  std::fill(dgate, dgate + tokens * width, T(0));
  if (entries == 0) return;
    // Softmax pooling backward. Every (token, column) is read by exactly one slot of
    // one entry, so the per-entry loop writes disjoint elements of dproj/dgate.
#pragma omp parallel for schedule(static) if (entries * slots * cx > kParallelWork)
  for (int64_t entry = 0; entry < entries; ++entry) {
    const int64_t b = entry / N;
    const int64_t i = entry % N;
    const T* prob = prob_in + entry * slots * cx;
    for (int64_t e = 0; e < cx; ++e) {
      const T g = dpooled[entry * cx + e];
      const T pooled = pooled_in[entry * cx + e];
      Slot s;
      for (int64_t k = 0; k < slots; ++k) {
        if (!slot_of(dims, dims.seq, b, i, k, e, &s)) continue;
        const T p = prob[k * cx + e];
        dproj[s.row * width + s.column] = p * g;
        dgate[s.row * width + s.column] = p * g * (proj[s.row * width + s.column] - pooled);
      }
    }
  }
  // ape[r, col] collects the score gradient of every token at block offset r
  // (fixed sequential order: thread-count independent).
  if (dape)
    for (int64_t b = 0; b < dims.batch; ++b)
      for (int64_t t = 0; t < N * m; ++t) {
        const T* dg = dgate + (b * dims.seq + t) * width;
        T* row = dape + (t % m) * width;
        for (int64_t col = 0; col < width; ++col) row[col] += dg[col];
      }
}

#define TREX_COMPRESSOR_INSTANTIATE(T)                                                     \
  template void compressor_pool_forward<T>(const CompressorPoolDims&, const T*, const T*,  \
                                           const T*, T*, T*);                              \
  template void compressor_pool_backward<T>(const CompressorPoolDims&, const T*, const T*, \
                                            const T*, const T*, T*, T*, T*);
TREX_COMPRESSOR_INSTANTIATE(float)
TREX_COMPRESSOR_INSTANTIATE(double)
#undef TREX_COMPRESSOR_INSTANTIATE

}  // namespace trex::kernels
