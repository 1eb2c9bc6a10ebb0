#include "trex/model/mhc.hpp"

#include <string>

#include "trex/core/error.hpp"

namespace trex::model {
namespace {

using kernels::Tensor;

void require_pointer(const void* p, const char* field) {
  if (p == nullptr) throw Error("mhc: null pointer").field(field);
}

void require_sinkhorn(int64_t n, int64_t iters) {
  if (n <= 0) throw Error("sinkhorn: n must be > 0").field("hc_mult");
  if (iters < 1) throw Error("sinkhorn: iterations must be >= 1").field("hc_sinkhorn_iters");
}

template <class P>
kernels::MhcSiteTensors site(const P& p, const MhcDims& dims, int64_t rows, int64_t scales) {
  return {Tensor::optional(p.fn, {rows, dims.streams_width()}), Tensor::optional(p.base, {rows}),
          Tensor::optional(p.scale, {scales})};
}

template <class T>
kernels::MhcStateTensors site_state(const MhcDims& dims, const MhcCache<T>& cache) {
  const int64_t N = dims.tokens, n = dims.hc_mult;
  return {cache.inv_rms.view({N}), cache.mix.view({N, dims.mix()}), cache.pre.view({N, n}),
          cache.post.view({N, n}), cache.comb.view({N, n, n})};
}

template <class T>
kernels::MhcStateTensors head_state(const MhcDims& dims, const HcHeadCache<T>& cache) {
  const int64_t N = dims.tokens, n = dims.hc_mult;
  return {cache.inv_rms.view({N}), cache.mix.view({N, n}), cache.pre.view({N, n}), Tensor(),
          Tensor()};
}

template <class T>
Tensor streams_of(const MhcDims& dims, T* X) {
  return Tensor::of(X, {dims.tokens, dims.hc_mult, dims.hidden});
}

template <class T>
Tensor rows_of(const MhcDims& dims, T* y) {
  return Tensor::of(y, {dims.tokens, dims.hidden});
}

}  // namespace

template <class T>
void sinkhorn_forward(const T* logits, int64_t n, int64_t iters, double eps, T* comb) {
  require_sinkhorn(n, iters);
  kernels::default_backend().sinkhorn_forward(Tensor::of(logits, {n, n}), iters, eps,
                                              Tensor::of(comb, {n, n}));
}

template <class T>
void sinkhorn_backward(const T* logits, int64_t n, int64_t iters, double eps, const T* dcomb,
                       T* dlogits) {
  require_sinkhorn(n, iters);
  kernels::default_backend().sinkhorn_backward(Tensor::of(logits, {n, n}), iters, eps,
                                               Tensor::of(dcomb, {n, n}),
                                               Tensor::of(dlogits, {n, n}));
}

template <class T>
void mhc_pre_forward(const MhcDims& dims, const MhcWeights<T>& weights, const T* X, T* u,
                     MhcCache<T>& cache, const kernels::OpContext& ctx) {
  validate(dims);
  const int64_t N = dims.tokens, n = dims.hc_mult, mixc = dims.mix();
  if (N > 0) {
    require_pointer(weights.fn, "hc_fn");
    require_pointer(weights.base, "hc_base");
    require_pointer(weights.scale, "hc_scale");
    require_pointer(X, "X");
    require_pointer(u, "u");
  }
  cache.inv_rms.assign(N, T(0), ctx.ops());
  cache.mix.assign(N * mixc, T(0), ctx.ops());
  cache.pre.assign(N * n, T(0), ctx.ops());
  cache.post.assign(N * n, T(0), ctx.ops());
  cache.comb.assign(N * n * n, T(0), ctx.ops());
  if (N == 0) return;
  ctx.ops().mhc_pre_forward(dims, site(weights, dims, mixc, 3), streams_of(dims, X),
                            rows_of(dims, u), site_state(dims, cache));
}

template <class T>
void mhc_post_forward(const MhcDims& dims, const MhcCache<T>& cache, const T* X, const T* y,
                      T* Xout, const kernels::OpContext& ctx) {
  validate(dims);
  const int64_t N = dims.tokens, n = dims.hc_mult;
  if (N == 0) return;
  if (static_cast<int64_t>(cache.comb.size()) != N * n * n)
    throw Error("mhc_post_forward: cache does not match dims (run mhc_pre_forward first)")
        .field("cache");
  require_pointer(X, "X");
  require_pointer(y, "y");
  require_pointer(Xout, "Xout");
  if (Xout == X) throw Error("mhc_post_forward: Xout must not alias X").field("Xout");
  ctx.ops().mhc_post_forward(dims, cache.post.view({N, n}), cache.comb.view({N, n, n}),
                             streams_of(dims, X), rows_of(dims, y), streams_of(dims, Xout));
}

template <class T>
void mhc_post_backward(const MhcDims& dims, const MhcCache<T>& cache, const T* X, const T* y,
                       const T* dXout, T* dX, T* dy, MhcCoefGrads<T>& coef,
                       const kernels::OpContext& ctx) {
  validate(dims);
  const int64_t N = dims.tokens, n = dims.hc_mult;
  if (N > 0 && static_cast<int64_t>(cache.comb.size()) != N * n * n)
    throw Error("mhc_post_backward: cache does not match dims").field("cache");
  if (N > 0) {
    require_pointer(X, "X");
    require_pointer(y, "y");
    require_pointer(dXout, "dXout");
    if (dX == dXout) throw Error("mhc_post_backward: dX must not alias dXout").field("dX");
  }
  coef.post.assign(N * n, T(0), ctx.ops());
  coef.comb.assign(N * n * n, T(0), ctx.ops());
  if (N == 0) return;
  ctx.ops().mhc_post_backward(
      dims, cache.post.view({N, n}), cache.comb.view({N, n, n}), streams_of(dims, X),
      rows_of(dims, y), streams_of(dims, dXout), dX ? streams_of(dims, dX) : Tensor(),
      dy ? rows_of(dims, dy) : Tensor(), coef.post.view({N, n}), coef.comb.view({N, n, n}));
}

template <class T>
void mhc_pre_backward(const MhcDims& dims, const MhcWeights<T>& weights, const MhcCache<T>& cache,
                      const T* X, const T* du, const MhcCoefGrads<T>& coef, MhcGrads<T>& grads,
                      T* dX, const kernels::OpContext& ctx) {
  validate(dims);
  const int64_t N = dims.tokens, n = dims.hc_mult, mixc = dims.mix();
  if (N == 0) return;
  if (static_cast<int64_t>(cache.mix.size()) != N * mixc)
    throw Error("mhc_pre_backward: cache does not match dims").field("cache");
  if (static_cast<int64_t>(coef.post.size()) != N * n ||
      static_cast<int64_t>(coef.comb.size()) != N * n * n)
    throw Error("mhc_pre_backward: coefficient grads do not match dims (run mhc_post_backward)")
        .field("coef");
  require_pointer(weights.fn, "hc_fn");
  require_pointer(weights.base, "hc_base");
  require_pointer(weights.scale, "hc_scale");
  require_pointer(X, "X");
  require_pointer(du, "du");
  ctx.ops().mhc_pre_backward(dims, site(weights, dims, mixc, 3), site_state(dims, cache),
                             streams_of(dims, X), rows_of(dims, du), coef.post.view({N, n}),
                             coef.comb.view({N, n, n}), site(grads, dims, mixc, 3),
                             dX ? streams_of(dims, dX) : Tensor());
}

template <class T>
void hc_head_forward(const MhcDims& dims, const HcHeadWeights<T>& weights, const T* X, T* h,
                     HcHeadCache<T>& cache, const kernels::OpContext& ctx) {
  validate(dims);
  const int64_t N = dims.tokens, n = dims.hc_mult;
  if (N > 0) {
    require_pointer(weights.fn, "hc_head_fn");
    require_pointer(weights.base, "hc_head_base");
    require_pointer(weights.scale, "hc_head_scale");
    require_pointer(X, "X");
    require_pointer(h, "h");
  }
  cache.inv_rms.assign(N, T(0), ctx.ops());
  cache.mix.assign(N * n, T(0), ctx.ops());
  cache.pre.assign(N * n, T(0), ctx.ops());
  if (N == 0) return;
  ctx.ops().hc_head_forward(dims, site(weights, dims, n, 1), streams_of(dims, X), rows_of(dims, h),
                            head_state(dims, cache));
}

template <class T>
void hc_head_backward(const MhcDims& dims, const HcHeadWeights<T>& weights,
                      const HcHeadCache<T>& cache, const T* X, const T* dh, HcHeadGrads<T>& grads,
                      T* dX, const kernels::OpContext& ctx) {
  validate(dims);
  const int64_t N = dims.tokens, n = dims.hc_mult;
  if (N == 0) return;
  if (static_cast<int64_t>(cache.mix.size()) != N * n)
    throw Error("hc_head_backward: cache does not match dims").field("cache");
  require_pointer(weights.fn, "hc_head_fn");
  require_pointer(weights.base, "hc_head_base");
  require_pointer(weights.scale, "hc_head_scale");
  require_pointer(X, "X");
  require_pointer(dh, "dh");
  ctx.ops().hc_head_backward(dims, site(weights, dims, n, 1), head_state(dims, cache),
                             streams_of(dims, X), rows_of(dims, dh), site(grads, dims, n, 1),
                             dX ? streams_of(dims, dX) : Tensor());
}

#define TREX_MHC_INSTANTIATE(T)                                                                   \
  template void sinkhorn_forward<T>(const T*, int64_t, int64_t, double, T*);                      \
  template void sinkhorn_backward<T>(const T*, int64_t, int64_t, double, const T*, T*);           \
  template void mhc_pre_forward<T>(const MhcDims&, const MhcWeights<T>&, const T*, T*,            \
                                   MhcCache<T>&, const kernels::OpContext&);                      \
  template void mhc_post_forward<T>(const MhcDims&, const MhcCache<T>&, const T*, const T*, T*,   \
                                    const kernels::OpContext&);                                   \
  template void mhc_post_backward<T>(const MhcDims&, const MhcCache<T>&, const T*, const T*,      \
                                     const T*, T*, T*, MhcCoefGrads<T>&,                          \
                                     const kernels::OpContext&);                                  \
  template void mhc_pre_backward<T>(const MhcDims&, const MhcWeights<T>&, const MhcCache<T>&,     \
                                    const T*, const T*, const MhcCoefGrads<T>&, MhcGrads<T>&, T*, \
                                    const kernels::OpContext&);                                   \
  template void hc_head_forward<T>(const MhcDims&, const HcHeadWeights<T>&, const T*, T*,         \
                                   HcHeadCache<T>&, const kernels::OpContext&);                   \
  template void hc_head_backward<T>(const MhcDims&, const HcHeadWeights<T>&,                      \
                                    const HcHeadCache<T>&, const T*, const T*, HcHeadGrads<T>&,   \
                                    T*, const kernels::OpContext&);

TREX_MHC_INSTANTIATE(float)
TREX_MHC_INSTANTIATE(double)
#undef TREX_MHC_INSTANTIATE

}  // namespace trex::model
