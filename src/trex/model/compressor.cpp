#include "trex/model/compressor.hpp"

#include <algorithm>
#include <string>

#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"

namespace trex::model {

using kernels::Tensor;

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

kernels::CompressorPoolDims pool_dims(const CompressorDims& dims, const SeqShape& shape) {
  return {shape.B, shape.S, dims.ratio, dims.out_dim, dims.overlap};
}

}  // namespace

template <class T>
void compressor_forward(const CompressorDims& dims, const CompressorWeights<T>& w,
                        const SeqShape& shape, const T* a, const kernels::RopeTable& rope,
                        CompressorCache<T>& cache, T* out, const kernels::OpContext& ctx) {
  TREX_PROFILE(profile::Op::kCompressor);
  dims.validate();
  require_weights(w);
  const int64_t tokens = shape.tokens();
  const int64_t width = dims.proj_dim();
  const int64_t cx = dims.out_dim;
  const int64_t m = dims.ratio;
  const int64_t slots = dims.coff() * m;
  const int64_t N = dims.blocks(shape.S);
  const kernels::Backend& ops = ctx.ops();
  const int64_t d = dims.hidden;
  cache.blocks = N;
  cache.proj.assign(tokens * width, T(0), ops);
  kernels::Array<T> gate(tokens * width, ops);
  if (tokens > 0) {
    TREX_PROFILE(profile::Op::kGemmCompressor,
                 2 * profile::linear_flops(tokens, width, dims.hidden));
    ops.linear_forward(Tensor::of(a, {tokens, d}), Tensor::of(w.wkv, {width, d}),
                       cache.proj.view({tokens, width}), {ctx.precision});
    ops.linear_forward(Tensor::of(a, {tokens, d}), Tensor::of(w.wgate, {width, d}),
                       gate.view({tokens, width}), {ctx.precision});
  }
  const int64_t entries = shape.B * N;
  cache.prob.assign(entries * slots * cx, T(0), ops);
  cache.pooled.assign(entries * cx, T(0), ops);
  cache.inv_rms.assign(entries, T(0), ops);
  cache.positions.resize(entries, ops);
  ops.sequence_positions(cache.positions.view({entries}), std::max<int64_t>(N, 1), m);
  ops.compressor_pool_forward(pool_dims(dims, shape), gate.view({tokens, width}),
                              cache.proj.view({tokens, width}), Tensor::of(w.ape, {m, width}),
                              cache.prob.view({entries, slots, cx}),
                              cache.pooled.view({entries, cx}));
  if (entries == 0) return;
  ops.rmsnorm_forward(cache.pooled.view({entries, cx}), Tensor::of(w.norm, {cx}),
                      Tensor::of(out, {entries, cx}), cache.inv_rms.view({entries}), dims.eps);
  ops.rope(rope, Tensor::of(out, {entries, 1, cx}), cache.positions.view({entries}),
           /*inverse=*/false);
}

template <class T>
void compressor_backward(const CompressorDims& dims, const CompressorWeights<T>& w,
                         const SeqShape& shape, const T* a, const kernels::RopeTable& rope,
                         const CompressorCache<T>& cache, const T* dout, CompressorGrads<T>& grads,
                         T* da, const kernels::OpContext& ctx) {
  const int64_t tokens = shape.tokens();
  const int64_t width = dims.proj_dim();
  const int64_t cx = dims.out_dim;
  const int64_t m = dims.ratio;
  const int64_t slots = dims.coff() * m;
  const int64_t N = cache.blocks;
  const int64_t entries = shape.B * N;
  if (entries == 0) return;
  TREX_PROFILE(profile::Op::kCompressor);  // no complete block: nothing depends on the weights
  const kernels::Backend& ops = ctx.ops();
  const int64_t d = dims.hidden;
  // Undo the rope (orthogonal), then the norm.
  kernels::Array<T> dpooled(entries * cx, ops);
  ops.copy(Tensor::of(dout, {entries, cx}), dpooled.view({entries, cx}));
  ops.rope(rope, dpooled.view({entries, 1, cx}), cache.positions.view({entries}), true);
  ops.rmsnorm_backward(cache.pooled.view({entries, cx}), Tensor::of(w.norm, {cx}),
                       cache.inv_rms.view({entries}), dpooled.view({entries, cx}),
                       dpooled.view({entries, cx}), Tensor::optional(grads.norm, {cx}));
  // Softmax pooling backward (dproj, dgate written; the ape gradient summed in token order).
  kernels::Array<T> dproj(tokens * width, ops);
  kernels::Array<T> dgate(tokens * width, ops);
  ops.compressor_pool_backward(pool_dims(dims, shape), cache.prob.view({entries, slots, cx}),
                               cache.proj.view({tokens, width}), cache.pooled.view({entries, cx}),
                               dpooled.view({entries, cx}), dproj.view({tokens, width}),
                               dgate.view({tokens, width}),
                               Tensor::optional(grads.ape, {m, width}));
  TREX_PROFILE(profile::Op::kGemmCompressor,
               (da ? 4 : 2) * profile::linear_flops(tokens, width, dims.hidden));
  const kernels::LinearOptions accumulate{ctx.precision, true};
  ops.linear_backward(Tensor::of(a, {tokens, d}), Tensor::of(w.wkv, {width, d}),
                      dproj.view({tokens, width}), Tensor::optional(da, {tokens, d}),
                      Tensor::optional(grads.wkv, {width, d}), accumulate);
  ops.linear_backward(Tensor::of(a, {tokens, d}), Tensor::of(w.wgate, {width, d}),
                      dgate.view({tokens, width}), Tensor::optional(da, {tokens, d}),
                      Tensor::optional(grads.wgate, {width, d}), accumulate);
}

template void compressor_forward<float>(const CompressorDims&, const CompressorWeights<float>&,
                                        const SeqShape&, const float*, const kernels::RopeTable&,
                                        CompressorCache<float>&, float*, const kernels::OpContext&);
template void compressor_forward<double>(const CompressorDims&, const CompressorWeights<double>&,
                                         const SeqShape&, const double*, const kernels::RopeTable&,
                                         CompressorCache<double>&, double*,
                                         const kernels::OpContext&);
template void compressor_backward<float>(const CompressorDims&, const CompressorWeights<float>&,
                                         const SeqShape&, const float*, const kernels::RopeTable&,
                                         const CompressorCache<float>&, const float*,
                                         CompressorGrads<float>&, float*,
                                         const kernels::OpContext&);
template void compressor_backward<double>(const CompressorDims&, const CompressorWeights<double>&,
                                          const SeqShape&, const double*, const kernels::RopeTable&,
                                          const CompressorCache<double>&, const double*,
                                          CompressorGrads<double>&, double*,
                                          const kernels::OpContext&);

}  // namespace trex::model
