#include "trex/model/indexer.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"
#include "trex/kernels/cpu/indexer.hpp"

namespace trex::model {

using kernels::Tensor;

void IndexerDims::validate() const {
  if (heads <= 0) throw Error("indexer needs at least one head").field("index_n_heads");
  if (head_dim <= 0 || head_dim < rope_dim)
    throw Error("indexer head dim must be >= rope dims").field("index_head_dim");
  if (topk <= 0) throw Error("indexer top-k must be positive").field("index_topk");
  if (q_lora <= 0) throw Error("q_lora_rank must be positive").field("q_lora_rank");
  compressor().validate();
}

namespace {

std::atomic<IndexerSelectionStats*> g_probe{nullptr};
std::mutex g_probe_mutex;  // serialises additions to *g_probe

}  // namespace

IndexerSelectionProbe::IndexerSelectionProbe(IndexerSelectionStats& stats) {
  IndexerSelectionStats* expected = nullptr;
  if (!g_probe.compare_exchange_strong(expected, &stats, std::memory_order_acq_rel))
    throw Error("an IndexerSelectionProbe is already installed");
}

IndexerSelectionProbe::~IndexerSelectionProbe() {
  std::lock_guard<std::mutex> lock(g_probe_mutex);
  g_probe.store(nullptr, std::memory_order_release);
}

namespace {

kernels::IndexerScoreDims score_dims(const IndexerDims& dims, const SeqShape& shape,
                                     int64_t blocks) {
  return {shape.S, dims.ratio, blocks, dims.topk};
}

template <class T>
kernels::IndexerScoreTensors score_tensors(const IndexerDims& dims, const IndexerCache<T>& cache,
                                           int64_t tokens) {
  return {cache.q.view({tokens, dims.heads, dims.head_dim}),
          cache.head_weights.view({tokens, dims.heads}),
          cache.keys.view({cache.keys.size() / dims.head_dim, dims.head_dim})};
}

}  // namespace

template <class T>
T indexer_score(const IndexerDims& dims, const IndexerCache<T>& cache, const SeqShape& shape,
                int64_t row, int64_t block) {
  return kernels::indexer_score(
      score_dims(dims, shape, cache.blocks),
      kernels::IndexerScoring<T>{cache.q.data(), cache.head_weights.data(), cache.keys.data(),
                                 dims.heads, dims.head_dim},
      row, block);
}

template <class T>
void indexer_forward(const IndexerDims& dims, const IndexerWeights<T>& w, const SeqShape& shape,
                     const T* a, const T* c_q, const kernels::RopeTable& rope,
                     IndexerCache<T>& cache, bool fixed_selection, const kernels::OpContext& ctx) {
  TREX_PROFILE(profile::Op::kIndexer);
  dims.validate();
  if (!w.wq_b) throw Error("missing indexer weight").field("indexer.wq_b.weight");
  if (!w.weights_proj) throw Error("missing indexer weight").field("indexer.weights_proj.weight");
  const int64_t tokens = shape.tokens();
  const int64_t qdim = dims.heads * dims.head_dim;
  const int64_t k_max = dims.topk;
  const kernels::Backend& ops = ctx.ops();
  const kernels::LinearOptions linear{ctx.precision};
  cache.q.assign(tokens * qdim, T(0), ops);
  cache.head_weights.assign(tokens * dims.heads, T(0), ops);
  if (tokens > 0) {
    {
      TREX_PROFILE(profile::Op::kGemmIndexer, profile::linear_flops(tokens, qdim, dims.q_lora));
      ops.linear_forward(Tensor::of(c_q, {tokens, dims.q_lora}),
                         Tensor::of(w.wq_b, {qdim, dims.q_lora}), cache.q.view({tokens, qdim}),
                         linear);
    }
    kernels::Array<int64_t> positions(tokens, ops);
    ops.sequence_positions(positions.view({tokens}), shape.S, 1);
    ops.rope(rope, cache.q.view({tokens, dims.heads, dims.head_dim}), positions.view({tokens}),
             false);
    {
      TREX_PROFILE(profile::Op::kGemmIndexer,
                   profile::linear_flops(tokens, dims.heads, dims.hidden));
      ops.linear_forward(Tensor::of(a, {tokens, dims.hidden}),
                         Tensor::of(w.weights_proj, {dims.heads, dims.hidden}),
                         cache.head_weights.view({tokens, dims.heads}), linear);
    }
    const T scale = static_cast<T>(
        1.0 / std::sqrt(static_cast<double>(dims.head_dim) * static_cast<double>(dims.heads)));
    ops.scale(cache.head_weights.view({tokens, dims.heads}), scale);
  }
  const CompressorDims cdims = dims.compressor();
  cache.blocks = cdims.blocks(shape.S);
  cache.keys.assign(shape.B * cache.blocks * dims.head_dim, T(0), ops);
  compressor_forward(cdims, w.compressor, shape, a, rope, cache.compressor, cache.keys.data(), ctx);

  if (fixed_selection) {
    if (cache.selected.size() != tokens * k_max)
      throw Error("fixed_selection without a stored selection for this shape")
          .field("indexer.selected");
    kernels::AttentionKeySetDims visibility;
    visibility.core = {shape.S, 1};
    visibility.compressed = true;
    visibility.ratio = dims.ratio;
    visibility.blocks = cache.blocks;
    if (tokens > 0 &&
        ops.first_invisible_selection(visibility, cache.selected.view({tokens, k_max})) >= 0)
      throw Error("stored selection is not visible").field("indexer.selected");
  } else {
    cache.selected.assign(tokens * k_max, -1, ops);
    IndexerSelectionStats* const probe = g_probe.load(std::memory_order_acquire);
    std::vector<kernels::SelectionBoundary> boundaries;
    ops.indexer_select(score_dims(dims, shape, cache.blocks), score_tensors(dims, cache, tokens),
                       cache.selected.view({tokens, k_max}), probe ? &boundaries : nullptr);
    if (probe) {
      std::lock_guard<std::mutex> lock(g_probe_mutex);
      // Re-checked under the lock: a probe removed meanwhile receives nothing.
      if (g_probe.load(std::memory_order_acquire) != probe) boundaries.clear();
      for (const kernels::SelectionBoundary& rb : boundaries) {
        probe->min_zero_block_relu_margin =
            std::min(probe->min_zero_block_relu_margin, rb.zero_relu);
        if (!rb.decides) continue;
        ++probe->decisions;
        probe->boundary_ties += rb.tie;
        probe->zero_ties += rb.zero_tie;
        probe->min_margin = std::min(probe->min_margin, rb.margin);
      }
    }
  }
  cache.selected_scores.assign(tokens * k_max, T(0), ops);
  ops.indexer_selected_scores(
      score_dims(dims, shape, cache.blocks), score_tensors(dims, cache, tokens),
      cache.selected.view({tokens, k_max}), cache.selected_scores.view({tokens, k_max}));
}

template <class T>
double indexer_loss(const IndexerDims& dims, const SeqShape& shape, const T* target,
                    IndexerCache<T>& cache, const kernels::OpContext& ctx) {
  const int64_t tokens = shape.tokens();
  const int64_t k_max = dims.topk;
  const kernels::Backend& ops = ctx.ops();
  cache.dscores.assign(tokens * k_max, T(0), ops);
  return ops.indexer_kl_loss(
      cache.selected.view({tokens, k_max}), cache.selected_scores.view({tokens, k_max}),
      Tensor::of(target, {tokens, k_max}), cache.dscores.view({tokens, k_max}));
}

template <class T>
void indexer_backward(const IndexerDims& dims, const IndexerWeights<T>& w, const SeqShape& shape,
                      const T* a, const T* c_q, const kernels::RopeTable& rope,
                      const IndexerCache<T>& cache, T scale, IndexerGrads<T>& grads,
                      const kernels::OpContext& ctx) {
  const int64_t tokens = shape.tokens();
  if (tokens == 0) return;
  TREX_PROFILE(profile::Op::kIndexer);
  const kernels::Backend& ops = ctx.ops();
  const kernels::LinearOptions linear{ctx.precision};
  const int64_t k_max = dims.topk;
  const int64_t nh = dims.heads;
  const int64_t hd = dims.head_dim;
  kernels::Array<T> dq(tokens * nh * hd, ops);
  kernels::Array<T> dweights(tokens * nh, ops);
  kernels::Array<T> dkeys(cache.keys.size(), ops);
  ops.indexer_score_backward(
      score_dims(dims, shape, cache.blocks), score_tensors(dims, cache, tokens),
      cache.selected.view({tokens, k_max}), cache.dscores.view({tokens, k_max}), scale,
      dq.view({tokens, nh, hd}), dweights.view({tokens, nh}), dkeys.view({dkeys.size() / hd, hd}));
  kernels::Array<int64_t> positions(tokens, ops);
  ops.sequence_positions(positions.view({tokens}), shape.S, 1);
  ops.rope(rope, dq.view({tokens, nh, hd}), positions.view({tokens}),
           /*inverse=*/true);
  if (grads.wq_b) {
    TREX_PROFILE(profile::Op::kGemmIndexer, profile::linear_flops(tokens, nh * hd, dims.q_lora));
    ops.linear_backward(Tensor::of(c_q, {tokens, dims.q_lora}),
                        Tensor::of(w.wq_b, {nh * hd, dims.q_lora}), dq.view({tokens, nh * hd}),
                        Tensor(), Tensor::of(grads.wq_b, {nh * hd, dims.q_lora}), linear);
  }
  if (grads.weights_proj) {
    const T head_scale =
        static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd) * static_cast<double>(nh)));
    ops.scale(dweights.view({tokens, nh}), head_scale);
    TREX_PROFILE(profile::Op::kGemmIndexer, profile::linear_flops(tokens, nh, dims.hidden));
    ops.linear_backward(Tensor::of(a, {tokens, dims.hidden}),
                        Tensor::of(w.weights_proj, {nh, dims.hidden}), dweights.view({tokens, nh}),
                        Tensor(), Tensor::of(grads.weights_proj, {nh, dims.hidden}), linear);
  }
  compressor_backward(dims.compressor(), w.compressor, shape, a, rope, cache.compressor,
                      dkeys.data(), grads.compressor, static_cast<T*>(nullptr), ctx);
}

#define TREX_INSTANTIATE_INDEXER(T)                                                                \
  template T indexer_score<T>(const IndexerDims&, const IndexerCache<T>&, const SeqShape&,         \
                              int64_t, int64_t);                                                   \
  template void indexer_forward<T>(const IndexerDims&, const IndexerWeights<T>&, const SeqShape&,  \
                                   const T*, const T*, const kernels::RopeTable&,                  \
                                   IndexerCache<T>&, bool, const kernels::OpContext&);             \
  template double indexer_loss<T>(const IndexerDims&, const SeqShape&, const T*, IndexerCache<T>&, \
                                  const kernels::OpContext&);                                      \
  template void indexer_backward<T>(const IndexerDims&, const IndexerWeights<T>&, const SeqShape&, \
                                    const T*, const T*, const kernels::RopeTable&,                 \
                                    const IndexerCache<T>&, T, IndexerGrads<T>&,                   \
                                    const kernels::OpContext&);
TREX_INSTANTIATE_INDEXER(float)
TREX_INSTANTIATE_INDEXER(double)
#undef TREX_INSTANTIATE_INDEXER

}  // namespace trex::model
