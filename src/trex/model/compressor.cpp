#include "trex/model/compressor.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"
#include "trex/kernels/cpu/gemm.hpp"
#include "trex/kernels/cpu/norms.hpp"

namespace trex::model {

// Below this many multiply-adds a loop runs serially: an OpenMP region costs more.
constexpr int64_t kParallelWork = int64_t{1} << 18;

void CompressorDims::validate() const {
  if (hidden <= 0) throw Error("compressor input width must be positive").field("hidden_size");
  if (ratio <= 0) throw Error("compressor ratio must be positive").field("compress_ratios");
  if (out_dim <= 0) throw Error("compressor width must be positive").field("head_dim");
  if (rope_dim <= 0 || rope_dim % 2 != 0 || rope_dim > out_dim)
    throw Error("compressor rope dims must be even and <= entry width").field("qk_rope_head_dim");
}

namespace {

template <class T>
void require_weights(const CompressorWeights<T>& w) {
  if (!w.wkv) throw Error("missing compressor weight").field("compressor.wkv.weight");
  if (!w.wgate) throw Error("missing compressor weight").field("compressor.wgate.weight");
  if (!w.ape) throw Error("missing compressor weight").field("compressor.ape");
  if (!w.norm) throw Error("missing compressor weight").field("compressor.norm.weight");
}

// Slot layout of entry (b, i), channel e. Slot s < m of an overlapping compressor is
// the previous block's token (i−1)·m+s, first-half feature e; slot m+s (or s without
// overlap) is the current block's token i·m+s, second-half feature c_x+e (or e).
// Returns false for the previous-block slots of entry 0 (score −∞, weight 0).
struct Slot {
  int64_t row;      // token row in [B·S]
  int64_t column;   // feature column in [coff·c_x]
  int64_t ape_row;  // position inside the block
};

inline bool slot_of(const CompressorDims& d, int64_t S, int64_t b, int64_t i, int64_t slot,
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
void compressor_forward(const CompressorDims& dims, const CompressorWeights<T>& w,
                        const SeqShape& shape, const T* a, const kernels::RopeTable& rope,
                        CompressorCache<T>& cache, T* out) {
  TREX_PROFILE(profile::Op::kCompressor);
  dims.validate();
  require_weights(w);
  const int64_t tokens = shape.tokens();
  const int64_t width = dims.proj_dim();
  const int64_t cx = dims.out_dim;
  const int64_t m = dims.ratio;
  const int64_t slots = dims.coff() * m;
  const int64_t N = dims.blocks(shape.S);
  cache.blocks = N;
  cache.proj.assign(static_cast<size_t>(tokens * width), T(0));
  std::vector<T> gate(cache.proj.size());
  if (tokens > 0) {
    TREX_PROFILE(profile::Op::kGemmCompressor,
                 2 * profile::linear_flops(tokens, width, dims.hidden));
    kernels::linear_forward(a, w.wkv, cache.proj.data(), tokens, width, dims.hidden);
    kernels::linear_forward(a, w.wgate, gate.data(), tokens, width, dims.hidden);
  }
  const int64_t entries = shape.B * N;
  cache.prob.assign(static_cast<size_t>(entries * slots * cx), T(0));
  cache.pooled.assign(static_cast<size_t>(entries * cx), T(0));
  cache.inv_rms.assign(static_cast<size_t>(entries), T(0));
  cache.positions.resize(static_cast<size_t>(entries));
#pragma omp parallel for schedule(static) if (entries * slots * cx > kParallelWork)
  for (int64_t entry = 0; entry < entries; ++entry) {
    const int64_t b = entry / std::max<int64_t>(N, 1);
    const int64_t i = entry % std::max<int64_t>(N, 1);
    cache.positions[entry] = i * m;
    T* prob = cache.prob.data() + entry * slots * cx;
    for (int64_t e = 0; e < cx; ++e) {
      T max_score = -std::numeric_limits<T>::infinity();
      Slot s;
      for (int64_t k = 0; k < slots; ++k) {
        if (!slot_of(dims, shape.S, b, i, k, e, &s)) continue;
        const T score = gate[s.row * width + s.column] + w.ape[s.ape_row * width + s.column];
        prob[k * cx + e] = score;
        max_score = std::max(max_score, score);
      }
      T sum = 0;
      for (int64_t k = 0; k < slots; ++k) {
        if (!slot_of(dims, shape.S, b, i, k, e, &s)) continue;
        const T p = std::exp(prob[k * cx + e] - max_score);
        prob[k * cx + e] = p;
        sum += p;
      }
      T pooled = 0;
      for (int64_t k = 0; k < slots; ++k) {
        if (!slot_of(dims, shape.S, b, i, k, e, &s)) continue;
        prob[k * cx + e] /= sum;
        pooled += prob[k * cx + e] * cache.proj[s.row * width + s.column];
      }
      cache.pooled[entry * cx + e] = pooled;
    }
  }
  if (entries == 0) return;
  kernels::rmsnorm_forward(cache.pooled.data(), w.norm, out, cache.inv_rms.data(), entries, cx,
                           dims.eps);
  kernels::rope_apply(rope, out, entries, 1, cx, cache.positions.data(), /*inverse=*/false);
}

template <class T>
void compressor_backward(const CompressorDims& dims, const CompressorWeights<T>& w,
                         const SeqShape& shape, const T* a, const kernels::RopeTable& rope,
                         const CompressorCache<T>& cache, const T* dout, CompressorGrads<T>& grads,
                         T* da) {
  const int64_t tokens = shape.tokens();
  const int64_t width = dims.proj_dim();
  const int64_t cx = dims.out_dim;
  const int64_t m = dims.ratio;
  const int64_t slots = dims.coff() * m;
  const int64_t N = cache.blocks;
  const int64_t entries = shape.B * N;
  if (entries == 0) return;
  TREX_PROFILE(profile::Op::kCompressor);  // no complete block: nothing depends on the weights
  // Undo the rope (orthogonal), then the norm.
  std::vector<T> dpooled(dout, dout + entries * cx);
  kernels::rope_apply(rope, dpooled.data(), entries, 1, cx, cache.positions.data(), true);
  kernels::rmsnorm_backward(cache.pooled.data(), w.norm, cache.inv_rms.data(), dpooled.data(),
                            dpooled.data(), grads.norm, entries, cx);
  // Softmax pooling backward. Every (token, column) is read by exactly one slot of
  // one entry, so the per-entry loop writes disjoint elements of dproj/dgate.
  std::vector<T> dproj(static_cast<size_t>(tokens * width), T(0));
  std::vector<T> dgate(dproj.size(), T(0));
#pragma omp parallel for schedule(static) if (entries * slots * cx > kParallelWork)
  for (int64_t entry = 0; entry < entries; ++entry) {
    const int64_t b = entry / N;
    const int64_t i = entry % N;
    const T* prob = cache.prob.data() + entry * slots * cx;
    for (int64_t e = 0; e < cx; ++e) {
      const T g = dpooled[entry * cx + e];
      const T pooled = cache.pooled[entry * cx + e];
      Slot s;
      for (int64_t k = 0; k < slots; ++k) {
        if (!slot_of(dims, shape.S, b, i, k, e, &s)) continue;
        const T p = prob[k * cx + e];
        dproj[s.row * width + s.column] = p * g;
        dgate[s.row * width + s.column] = p * g * (cache.proj[s.row * width + s.column] - pooled);
      }
    }
  }
  // ape[r, col] collects the score gradient of every token at block offset r
  // (fixed sequential order: thread-count independent).
  if (grads.ape)
    for (int64_t b = 0; b < shape.B; ++b)
      for (int64_t t = 0; t < N * m; ++t) {
        const T* dg = dgate.data() + (b * shape.S + t) * width;
        T* dape = grads.ape + (t % m) * width;
        for (int64_t col = 0; col < width; ++col) dape[col] += dg[col];
      }
  TREX_PROFILE(profile::Op::kGemmCompressor,
               (da ? 4 : 2) * profile::linear_flops(tokens, width, dims.hidden));
  kernels::linear_backward(a, w.wkv, dproj.data(), da, grads.wkv, tokens, width, dims.hidden,
                           /*accumulate_dx=*/true);
  kernels::linear_backward(a, w.wgate, dgate.data(), da, grads.wgate, tokens, width, dims.hidden,
                           /*accumulate_dx=*/true);
}

template void compressor_forward<float>(const CompressorDims&, const CompressorWeights<float>&,
                                        const SeqShape&, const float*, const kernels::RopeTable&,
                                        CompressorCache<float>&, float*);
template void compressor_forward<double>(const CompressorDims&, const CompressorWeights<double>&,
                                         const SeqShape&, const double*, const kernels::RopeTable&,
                                         CompressorCache<double>&, double*);
template void compressor_backward<float>(const CompressorDims&, const CompressorWeights<float>&,
                                         const SeqShape&, const float*, const kernels::RopeTable&,
                                         const CompressorCache<float>&, const float*,
                                         CompressorGrads<float>&, float*);
template void compressor_backward<double>(const CompressorDims&, const CompressorWeights<double>&,
                                          const SeqShape&, const double*, const kernels::RopeTable&,
                                          const CompressorCache<double>&, const double*,
                                          CompressorGrads<double>&, double*);

}  // namespace trex::model
