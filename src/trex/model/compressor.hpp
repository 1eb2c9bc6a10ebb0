#pragma once
// KV compressor (spec §2.4): softmax-gated pooling of m consecutive tokens per
// channel into one compressed entry, then RMSNorm and RoPE at position i·m.
// Used by CSA (m = 4, overlapping: 2m slots per entry), HCA (m ≠ 4, m slots) and
// inside the lightning indexer (m = 4, overlapping, c_x = index_head_dim).
#include <cstdint>
#include <vector>

#include "trex/kernels/array.hpp"
#include "trex/kernels/backend.hpp"
#include "trex/kernels/cpu/rope.hpp"

namespace trex::model {

struct SeqShape {
  int64_t B = 0;  // sequences
  int64_t S = 0;  // tokens per sequence; token (b, t) is row b·S + t
  int64_t tokens() const { return B * S; }
};

struct CompressorDims {
  int64_t hidden = 0;    // d (input width)
  int64_t ratio = 0;     // m > 0
  int64_t out_dim = 0;   // c_x
  int64_t rope_dim = 0;  // rope applied to the last rope_dim dims of each entry
  bool overlap = false;  // true iff m == 4 in the released models
  double eps = 1e-6;
  int64_t coff() const { return overlap ? 2 : 1; }
  int64_t proj_dim() const { return coff() * out_dim; }
  int64_t blocks(int64_t S) const { return S / ratio; }  // N = floor(S/m); tail dropped
  void validate() const;
};

template <class T>
struct CompressorWeights {
  const T* wkv = nullptr;    // [coff·c_x, d]
  const T* wgate = nullptr;  // [coff·c_x, d]
  const T* ape = nullptr;    // [m, coff·c_x]
  const T* norm = nullptr;   // [c_x]
};

template <class T>
struct CompressorGrads {  // accumulated (+=); null = frozen
  T* wkv = nullptr;
  T* wgate = nullptr;
  T* ape = nullptr;
  T* norm = nullptr;
};

template <class T>
struct CompressorCache {
  int64_t blocks = 0;                 // N per sequence
  kernels::Array<T> proj;             // P = a·wkvᵀ  [B·S, coff·c_x]
  kernels::Array<T> prob;             // pooling weights [B·N, slots, c_x] (slots = coff·m)
  kernels::Array<T> pooled;           // C before the norm [B·N, c_x]
  kernels::Array<T> inv_rms;          // [B·N]
  kernels::Array<int64_t> positions;  // i·m per entry [B·N]
};

// out[B·N, c_x] (entry (b, i) is row b·N + i); a is [B·S, d]. The rope table must
// cover positions up to S−1.
template <class T>
void compressor_forward(const CompressorDims& dims, const CompressorWeights<T>& w,
                        const SeqShape& shape, const T* a, const kernels::RopeTable& rope,
                        CompressorCache<T>& cache, T* out, const kernels::OpContext& ctx = {});

// dout[B·N, c_x]. da (nullable) is ACCUMULATED (+=): the compressor is one of
// several consumers of the attention input.
template <class T>
void compressor_backward(const CompressorDims& dims, const CompressorWeights<T>& w,
                         const SeqShape& shape, const T* a, const kernels::RopeTable& rope,
                         const CompressorCache<T>& cache, const T* dout, CompressorGrads<T>& grads,
                         T* da, const kernels::OpContext& ctx = {});

}  // namespace trex::model
