#include "trex/model/compressor.hpp"

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
  cache.proj.assign(static_cast<size_t>(tokens * width), T(0));
  std::vector<T> gate(cache.proj.size());
  if (tokens > 0) {
    TREX_PROFILE(profile::Op::kGemmCompressor,
                 2 * profile::linear_flops(tokens, width, dims.hidden));
    ops.linear_forward(Tensor::of(a, {tokens, d}), Tensor::of(w.wkv, {width, d}),
                       Tensor::of(cache.proj.data(), {tokens, width}), {ctx.precision});
    ops.linear_forward(Tensor::of(a, {tokens, d}), Tensor::of(w.wgate, {width, d}),
                       Tensor::of(gate.data(), {tokens, width}), {ctx.precision});
  }
  const int64_t entries = shape.B * N;
  cache.prob.assign(static_cast<size_t>(entries * slots * cx), T(0));
  cache.pooled.assign(static_cast<size_t>(entries * cx), T(0));
  cache.inv_rms.assign(static_cast<size_t>(entries), T(0));
  cache.positions.resize(static_cast<size_t>(entries));
  for (int64_t entry = 0; entry < entries; ++entry) cache.positions[entry] = (entry % N) * m;
  ops.compressor_pool_forward(pool_dims(dims, shape), Tensor::of(gate.data(), {tokens, width}),
                              Tensor::of(cache.proj.data(), {tokens, width}),
                              Tensor::of(w.ape, {m, width}),
                              Tensor::of(cache.prob.data(), {entries, slots, cx}),
                              Tensor::of(cache.pooled.data(), {entries, cx}));
  if (entries == 0) return;
  ops.rmsnorm_forward(Tensor::of(cache.pooled.data(), {entries, cx}), Tensor::of(w.norm, {cx}),
                      Tensor::of(out, {entries, cx}), Tensor::of(cache.inv_rms.data(), {entries}),
                      dims.eps);
  ops.rope(rope, Tensor::of(out, {entries, 1, cx}), Tensor::of(cache.positions.data(), {entries}),
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
  std::vector<T> dpooled(dout, dout + entries * cx);
  ops.rope(rope, Tensor::of(dpooled.data(), {entries, 1, cx}),
           Tensor::of(cache.positions.data(), {entries}), true);
  ops.rmsnorm_backward(
      Tensor::of(cache.pooled.data(), {entries, cx}), Tensor::of(w.norm, {cx}),
      Tensor::of(cache.inv_rms.data(), {entries}), Tensor::of(dpooled.data(), {entries, cx}),
      Tensor::of(dpooled.data(), {entries, cx}), Tensor::optional(grads.norm, {cx}));
  // Softmax pooling backward (dproj, dgate written; the ape gradient summed in token order).
  std::vector<T> dproj(static_cast<size_t>(tokens * width), T(0));
  std::vector<T> dgate(dproj.size(), T(0));
  ops.compressor_pool_backward(
      pool_dims(dims, shape), Tensor::of(cache.prob.data(), {entries, slots, cx}),
      Tensor::of(cache.proj.data(), {tokens, width}),
      Tensor::of(cache.pooled.data(), {entries, cx}), Tensor::of(dpooled.data(), {entries, cx}),
      Tensor::of(dproj.data(), {tokens, width}), Tensor::of(dgate.data(), {tokens, width}),
      Tensor::optional(grads.ape, {m, width}));
  TREX_PROFILE(profile::Op::kGemmCompressor,
               (da ? 4 : 2) * profile::linear_flops(tokens, width, dims.hidden));
  const kernels::LinearOptions accumulate{ctx.precision, true};
  ops.linear_backward(Tensor::of(a, {tokens, d}), Tensor::of(w.wkv, {width, d}),
                      Tensor::of(dproj.data(), {tokens, width}), Tensor::optional(da, {tokens, d}),
                      Tensor::optional(grads.wkv, {width, d}), accumulate);
  ops.linear_backward(Tensor::of(a, {tokens, d}), Tensor::of(w.wgate, {width, d}),
                      Tensor::of(dgate.data(), {tokens, width}), Tensor::optional(da, {tokens, d}),
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
