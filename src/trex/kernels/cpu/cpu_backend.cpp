#include "trex/kernels/cpu/cpu_backend.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "trex/kernels/cpu/attention.hpp"
#include "trex/kernels/cpu/compressor.hpp"
#include "trex/kernels/cpu/decode.hpp"
#include "trex/kernels/cpu/gemm.hpp"
#include "trex/kernels/cpu/indexer.hpp"
#include "trex/kernels/cpu/indices.hpp"
#include "trex/kernels/cpu/lm_loss.hpp"
#include "trex/kernels/cpu/mhc.hpp"
#include "trex/kernels/cpu/moe.hpp"
#include "trex/kernels/cpu/norms.hpp"
#include "trex/kernels/cpu/optimizer.hpp"
#include "trex/kernels/cpu/rope.hpp"
#include "trex/kernels/cpu/rows.hpp"
#include "trex/kernels/op_checks.hpp"

namespace trex::kernels {
namespace {

// Calls f(T{}) with T the C++ type of a float dtype (the checks have ruled out others).
template <class F>
void with_float_type(DType dtype, F&& f) {
  if (dtype == DType::kF64)
    f(double{});
  else
    f(float{});
}

template <class T>
MhcSite<const T> site(const MhcSiteTensors& t) {
  return {t.fn.data<T>(), t.base.data<T>(), t.scale.data<T>()};
}
template <class T>
MhcSite<T> site_grads(const MhcSiteTensors& t) {
  return {t.fn.data<T>(), t.base.data<T>(), t.scale.data<T>()};
}
template <class T>
MhcState<T> state(const MhcStateTensors& t) {
  return {t.inv_rms.data<T>(), t.mix.data<T>(), t.pre.data<T>(), t.post.data<T>(),
          t.comb.data<T>()};
}

template <class T>
AttentionKeySets<T> key_sets(const AttentionKeyTensors& t) {
  return {t.kv.data<T>(),
          t.compressed.data<T>(),
          t.compressed.size(0),
          t.comp_offsets.data<int64_t>(),
          t.comp_list.data<int64_t>(),
          t.prob_offsets.data<int64_t>()};
}

template <class T>
IndexerScoring<T> scoring(const IndexerScoreTensors& t) {
  return {t.q.data<T>(), t.head_weights.data<T>(), t.keys.data<T>(), t.q.size(1), t.q.size(2)};
}

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  Device device() const override { return Device{}; }
  int64_t retained_bytes_limit() const override { return kMapBuffers ? kCacheBytes : 0; }
  ~CpuBackend() override {
    for (auto& [bytes, mappings] : cached_)
      for (void* data : mappings) munmap(data, bytes);
  }

 protected:
  // Buffers of kMapBytes and more are mapped pages of their own. Through
  // malloc, glibc raises its mmap threshold after large frees and then keeps
  // freed work arrays in its heap, between allocations still alive: the
  // process held 100–200 MiB (bench-cpu) that the live-buffer count no longer
  // showed. A freed mapping under kCachedBelow goes to a cache of at most
  // kCacheBytes (each op allocates the same shapes layer after layer, so most
  // are taken again at once, without a system call or page faults); larger
  // ones go back to the system. Fresh mappings read zero: no memset.
  // Under AddressSanitizer every buffer goes through malloc, which it guards.
#if defined(__SANITIZE_ADDRESS__)
  static constexpr bool kMapBuffers = false;
#else
  static constexpr bool kMapBuffers = true;
#endif
  static constexpr size_t kMapBytes = size_t{1} << 16;
  static constexpr size_t kCachedBelow = size_t{1} << 20;
  static constexpr int64_t kCacheBytes = int64_t{32} << 20;

  void* allocate_bytes(size_t bytes) const override {
    if (kMapBuffers && bytes >= kMapBytes) {
      const size_t mapped = page_rounded(bytes);
      if (mapped < kCachedBelow) {
        std::lock_guard<std::mutex> lock(cache_mutex_);
        auto it = cached_.find(mapped);
        if (it != cached_.end() && !it->second.empty()) {
          void* data = it->second.back();
          it->second.pop_back();
          cache_bytes_ -= static_cast<int64_t>(mapped);
          std::memset(data, 0, bytes);
          return data;
        }
      }
      void* data =
          mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (data == MAP_FAILED) throw std::bad_alloc();
      return data;
    }
    constexpr size_t kAlign = 64;
    void* data = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    if (!data) throw std::bad_alloc();
    std::memset(data, 0, bytes);
    return data;
  }
  void free_bytes(void* data, size_t bytes) const override {
    if (kMapBuffers && bytes >= kMapBytes) {
      const size_t mapped = page_rounded(bytes);
      if (mapped < kCachedBelow) {
        std::lock_guard<std::mutex> lock(cache_mutex_);
        if (cache_bytes_ + static_cast<int64_t>(mapped) <= kCacheBytes) {
          cached_[mapped].push_back(data);
          cache_bytes_ += static_cast<int64_t>(mapped);
          return;
        }
      }
      munmap(data, mapped);
      return;
    }
    std::free(data);
  }

 private:
  static size_t page_rounded(size_t bytes) {
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
  }
  mutable std::mutex cache_mutex_;
  mutable std::map<size_t, std::vector<void*>> cached_;  // freed mappings by size
  mutable int64_t cache_bytes_ = 0;

  void do_fill(const Tensor& x, double value) const override {
    const auto fill_as = [&](auto* data) {
      using T = std::remove_pointer_t<decltype(data)>;
      std::fill_n(data, x.numel(), static_cast<T>(value));
    };
    switch (x.dtype()) {
      case DType::kF64:
        fill_as(x.data<double>());
        break;
      case DType::kI64:
        fill_as(x.data<int64_t>());
        break;
      case DType::kI32:
        fill_as(x.data<int32_t>());
        break;
      default:
        fill_as(x.data<float>());
        break;
    }
  }

  void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                         const LinearOptions& options) const override {
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::linear_forward(x.data<T>(), w.data<T>(), y.data<T>(), x.size(0), w.size(0),
                              x.size(1), options.precision, options.accumulate);
    });
  }

  void do_linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                          const Tensor& dw, const LinearOptions& options) const override {
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::linear_backward(x.data<T>(), w.data<T>(), dy.data<T>(), dx.data<T>(), dw.data<T>(),
                               x.size(0), w.size(0), x.size(1), options.precision,
                               options.accumulate);
    });
  }

  // One GEMM per group on strided column slices.
  void do_grouped_linear_forward(int64_t groups, const Tensor& x, const Tensor& w, const Tensor& y,
                                 Precision precision) const override {
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const int64_t M = x.size(0), K = x.size(1) / groups, N = w.size(0) / groups;
      const T* X = x.data<T>();
      const T* W = w.data<T>();
      T* Y = y.data<T>();
      for (int64_t j = 0; j < groups; ++j)
        gemm<T>(precision, false, true, M, N, K, T(1), X + j * K, groups * K, W + j * N * K, K,
                T(0), Y + j * N, groups * N);
    });
  }

  void do_grouped_linear_backward(int64_t groups, const Tensor& x, const Tensor& w,
                                  const Tensor& dy, const Tensor& dx, const Tensor& dw,
                                  Precision precision) const override {
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const int64_t M = x.size(0), K = x.size(1) / groups, N = w.size(0) / groups;
      const T* X = x.data<T>();
      const T* W = w.data<T>();
      const T* dY = dy.data<T>();
      T* dX = dx.data<T>();
      T* dW = dw.data<T>();
      for (int64_t j = 0; j < groups; ++j) {
        if (dW)
          gemm<T>(precision, true, false, N, K, M, T(1), dY + j * N, groups * N, X + j * K,
                  groups * K, T(1), dW + j * N * K, K);
        gemm<T>(precision, false, false, M, K, N, T(1), dY + j * N, groups * N, W + j * N * K, K,
                T(0), dX + j * K, groups * K);
      }
    });
  }

  void do_rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& y,
                          const Tensor& inv_rms, double eps) const override {
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::rmsnorm_forward(x.data<T>(), weight.data<T>(), y.data<T>(), inv_rms.data<T>(),
                               x.size(0), x.size(1), eps);
    });
  }

  void do_rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& inv_rms,
                           const Tensor& dy, const Tensor& dx,
                           const Tensor& dweight) const override {
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::rmsnorm_backward(x.data<T>(), weight.data<T>(), inv_rms.data<T>(), dy.data<T>(),
                                dx.data<T>(), dweight.data<T>(), x.size(0), x.size(1));
    });
  }

  void do_rope(const RopeTable& table, const Tensor& x, const Tensor& positions,
               bool inverse) const override {
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      rope_apply(table, x.data<T>(), x.size(0), x.size(1), x.size(2), positions.data<int64_t>(),
                 inverse);
    });
  }

  void do_mhc_pre_forward(const MhcDims& dims, const MhcSiteTensors& weights, const Tensor& X,
                          const Tensor& u, const MhcStateTensors& st) const override {
    with_float_type(X.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::mhc_pre_forward(dims, site<T>(weights), X.data<T>(), u.data<T>(), state<T>(st));
    });
  }

  void do_mhc_post_forward(const MhcDims& dims, const Tensor& post, const Tensor& comb,
                           const Tensor& X, const Tensor& y, const Tensor& Xout) const override {
    with_float_type(X.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::mhc_post_forward(dims, post.data<T>(), comb.data<T>(), X.data<T>(), y.data<T>(),
                                Xout.data<T>());
    });
  }

  void do_mhc_post_backward(const MhcDims& dims, const Tensor& post, const Tensor& comb,
                            const Tensor& X, const Tensor& y, const Tensor& dXout, const Tensor& dX,
                            const Tensor& dy, const Tensor& dpost,
                            const Tensor& dcomb) const override {
    with_float_type(X.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::mhc_post_backward(dims, post.data<T>(), comb.data<T>(), X.data<T>(), y.data<T>(),
                                 dXout.data<T>(), dX.data<T>(), dy.data<T>(), dpost.data<T>(),
                                 dcomb.data<T>());
    });
  }

  void do_mhc_pre_backward(const MhcDims& dims, const MhcSiteTensors& weights,
                           const MhcStateTensors& st, const Tensor& X, const Tensor& du,
                           const Tensor& dpost, const Tensor& dcomb, const MhcSiteTensors& grads,
                           const Tensor& dX) const override {
    with_float_type(X.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::mhc_pre_backward(dims, site<T>(weights), state<const T>(st), X.data<T>(),
                                du.data<T>(), dpost.data<T>(), dcomb.data<T>(),
                                site_grads<T>(grads), dX.data<T>());
    });
  }

  void do_hc_head_forward(const MhcDims& dims, const MhcSiteTensors& weights, const Tensor& X,
                          const Tensor& h, const MhcStateTensors& st) const override {
    with_float_type(X.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::hc_head_forward(dims, site<T>(weights), X.data<T>(), h.data<T>(), state<T>(st));
    });
  }

  void do_hc_head_backward(const MhcDims& dims, const MhcSiteTensors& weights,
                           const MhcStateTensors& st, const Tensor& X, const Tensor& dh,
                           const MhcSiteTensors& grads, const Tensor& dX) const override {
    with_float_type(X.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::hc_head_backward(dims, site<T>(weights), state<const T>(st), X.data<T>(),
                                dh.data<T>(), site_grads<T>(grads), dX.data<T>());
    });
  }

  void do_scale(const Tensor& x, double factor) const override {
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T f = static_cast<T>(factor);
      T* data = x.data<T>();
      // Fixed blocks: elementwise, so the split does not change results.
      constexpr int64_t kBlock = int64_t{1} << 16;
      const int64_t n = x.numel(), blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 4)
      for (int64_t b = 0; b < blocks; ++b)
        for (int64_t i = b * kBlock, end = std::min(n, i + kBlock); i < end; ++i) data[i] *= f;
    });
  }

  void do_add(const Tensor& x, const Tensor& y) const override {
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::add(x.data<T>(), y.data<T>(), x.numel());
    });
  }

  void do_copy(const Tensor& src, const Tensor& dst) const override {
    if (src.numel() > 0)
      std::memcpy(dst.raw(), src.raw(), static_cast<size_t>(src.numel()) * dtype_size(src.dtype()));
  }

  void do_gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst) const override {
    if (src.dtype() == DType::kBF16) {  // bf16 table, fp32 rows (widening is exact)
      const auto* table = static_cast<const uint16_t*>(src.raw());
      const int64_t* rows = index.data<int64_t>();
      const int64_t M = dst.size(0), k = dst.rank() == 3 ? dst.size(1) : 1, w = src.size(1);
      float* out = dst.data<float>();
      for (int64_t m = 0; m < M; ++m)
        for (int64_t j = 0; j < k; ++j)
          for (int64_t i = 0; i < w; ++i)
            out[(m * k + j) * w + i] = bf16_to_f32(table[rows[m] * w + i]);
      return;
    }
    with_float_type(src.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const int64_t k = dst.rank() == 3 ? dst.size(1) : 1;
      kernels::gather_rows(src.data<T>(), index.data<int64_t>(), dst.size(0), k, src.size(1),
                           dst.data<T>());
    });
  }

  void do_scatter_add_rows(const Tensor& src, const Tensor& index,
                           const Tensor& dst) const override {
    with_float_type(src.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const int64_t k = src.rank() == 3 ? src.size(1) : 1;
      kernels::scatter_add_rows(src.data<T>(), index.data<int64_t>(), src.size(0), k, dst.size(1),
                                dst.data<T>());
    });
  }

  void do_broadcast_add(const Tensor& y, const Tensor& x) const override {
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::broadcast_add(y.data<T>(), x.size(0), x.size(1), x.size(2), x.data<T>());
    });
  }

  void do_sum_copies_add(const Tensor& x, const Tensor& y) const override {
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::sum_copies_add(x.data<T>(), x.size(0), x.size(1), x.size(2), y.data<T>());
    });
  }

  void do_attention_core_forward(const AttentionCoreDims& dims, const Tensor& q,
                                 const AttentionKeyTensors& keys, const Tensor& sink,
                                 const Tensor& prob, const Tensor& sink_prob,
                                 const Tensor& o) const override {
    check_attention_probabilities(keys, prob, "attention_core_forward");
    with_float_type(q.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::attention_core_forward(dims, q.size(0), q.size(1), q.size(2), q.data<T>(),
                                      key_sets<T>(keys), sink.data<T>(), prob.data<T>(),
                                      sink_prob.data<T>(), o.data<T>());
    });
  }

  void do_attention_core_backward(const AttentionCoreDims& dims, const Tensor& q,
                                  const AttentionKeyTensors& keys, const Tensor& prob,
                                  const Tensor& sink_prob, const Tensor& o, const Tensor& d_o,
                                  const Tensor& dq, const Tensor& dkv, const Tensor& dcompressed,
                                  const Tensor& dsink) const override {
    check_attention_probabilities(keys, prob, "attention_core_backward");
    with_float_type(q.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::attention_core_backward(dims, q.size(0), q.size(1), q.size(2), q.data<T>(),
                                       key_sets<T>(keys), prob.data<T>(), sink_prob.data<T>(),
                                       o.data<T>(), d_o.data<T>(), dq.data<T>(), dkv.data<T>(),
                                       dcompressed.data<T>(), dsink.data<T>());
    });
  }

  void do_attention_selected_mass(const AttentionCoreDims& dims, int64_t heads, const Tensor& prob,
                                  const Tensor& prob_offsets, const Tensor& comp_offsets,
                                  const Tensor& selected, const Tensor& target) const override {
    with_float_type(prob.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::attention_selected_mass(dims, selected.size(0), heads, selected.size(1),
                                       prob.data<T>(), prob_offsets.data<int64_t>(),
                                       comp_offsets.data<int64_t>(), selected.data<int64_t>(),
                                       target.data<T>());
    });
  }

  void do_compressor_pool_forward(const CompressorPoolDims& dims, const Tensor& gate,
                                  const Tensor& proj, const Tensor& ape, const Tensor& prob,
                                  const Tensor& pooled) const override {
    with_float_type(gate.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::compressor_pool_forward(dims, gate.data<T>(), proj.data<T>(), ape.data<T>(),
                                       prob.data<T>(), pooled.data<T>());
    });
  }

  void do_compressor_pool_backward(const CompressorPoolDims& dims, const Tensor& prob,
                                   const Tensor& proj, const Tensor& pooled, const Tensor& dpooled,
                                   const Tensor& dproj, const Tensor& dgate,
                                   const Tensor& dape) const override {
    with_float_type(prob.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::compressor_pool_backward(dims, prob.data<T>(), proj.data<T>(), pooled.data<T>(),
                                        dpooled.data<T>(), dproj.data<T>(), dgate.data<T>(),
                                        dape.data<T>());
    });
  }

  void do_indexer_select(const IndexerScoreDims& dims, const IndexerScoreTensors& in,
                         const Tensor& selected,
                         std::vector<SelectionBoundary>* boundaries) const override {
    with_float_type(in.q.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::indexer_select(dims, scoring<T>(in), in.q.size(0), selected.data<int64_t>(),
                              boundaries);
    });
  }

  void do_indexer_selected_scores(const IndexerScoreDims& dims, const IndexerScoreTensors& in,
                                  const Tensor& selected, const Tensor& scores) const override {
    with_float_type(in.q.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::indexer_selected_scores(dims, scoring<T>(in), in.q.size(0), selected.data<int64_t>(),
                                       scores.data<T>());
    });
  }

  double do_indexer_kl_loss(const Tensor& selected, const Tensor& scores, const Tensor& target,
                            const Tensor& dscores) const override {
    double loss = 0.0;
    with_float_type(scores.dtype(), [&](auto tag) {
      using T = decltype(tag);
      loss = kernels::indexer_kl_loss(selected.size(0), selected.size(1), selected.data<int64_t>(),
                                      scores.data<T>(), target.data<T>(), dscores.data<T>());
    });
    return loss;
  }

  void do_indexer_score_backward(const IndexerScoreDims& dims, const IndexerScoreTensors& in,
                                 const Tensor& selected, const Tensor& dscores, double scale,
                                 const Tensor& dq, const Tensor& dweights,
                                 const Tensor& dkeys) const override {
    with_float_type(in.q.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::indexer_score_backward(dims, scoring<T>(in), in.q.size(0), selected.data<int64_t>(),
                                      dscores.data<T>(), static_cast<T>(scale), dq.data<T>(),
                                      dweights.data<T>(), dkeys.data<T>());
    });
  }

  void do_router_scores(const Tensor& logits, const Tensor& scores) const override {
    with_float_type(logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::router_scores(logits.data<T>(), logits.numel(), scores.data<T>());
    });
  }

  void do_router_select(const Tensor& scores, const Tensor& bias, const Tensor& token_ids,
                        const Tensor& tid2eid, const Tensor& expert_index) const override {
    const int64_t N = scores.size(0), E = scores.size(1), K = expert_index.size(1);
    if (tid2eid.defined()) {
      kernels::router_hash(token_ids.data<int64_t>(), tid2eid.data<int64_t>(), N, K,
                           expert_index.data<int32_t>());
      return;
    }
    with_float_type(scores.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::router_top_k(scores.data<T>(), bias.data<T>(), N, E, K,
                            expert_index.data<int32_t>());
    });
  }

  void do_router_combine(const RouterCombineParams& params, const Tensor& scores,
                         const Tensor& expert_index, const Tensor& combine) const override {
    with_float_type(scores.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::router_combine(params, scores.data<T>(), expert_index.data<int32_t>(),
                              scores.size(0), scores.size(1), expert_index.size(1),
                              combine.data<T>());
    });
  }

  void do_router_balance_frequencies(const Tensor& expert_index, const Tensor& sequences,
                                     const Tensor& freq) const override {
    check_balance_sequences(sequences, expert_index.size(0), "router_balance_frequencies");
    kernels::router_balance_frequencies(expert_index.data<int32_t>(), expert_index.size(1),
                                        freq.size(1), sequences.data<int64_t>(), sequences.size(0),
                                        freq.data<double>());
  }

  double do_router_balance_loss(double weight, const Tensor& scores, const Tensor& freq,
                                const Tensor& sequences) const override {
    check_balance_sequences(sequences, scores.size(0), "router_balance_loss");
    double loss = 0.0;
    with_float_type(scores.dtype(), [&](auto tag) {
      using T = decltype(tag);
      loss = kernels::router_balance_loss(weight, scores.data<T>(), scores.size(0), scores.size(1),
                                          freq.data<double>(), sequences.data<int64_t>(),
                                          sequences.size(0));
    });
    return loss;
  }

  void do_router_backward(const RouterCombineParams& params, const RouterBalanceGrad& balance,
                          const Tensor& logits, const Tensor& scores, const Tensor& expert_index,
                          const Tensor& combine, const Tensor& d_combine, int64_t begin,
                          int64_t end, const Tensor& dlogits) const override {
    RouterBalance cpu_balance;
    if (balance.sequences.defined()) {
      check_balance_sequences(balance.sequences, scores.size(0), "router_backward");
      cpu_balance = {balance.sequences.data<int64_t>(),
                     balance.sequences.size(0),
                     balance.freq.data<double>(),
                     balance.sequence_of.data<int64_t>(),
                     balance.weight,
                     balance.d_loss};
    }
    with_float_type(scores.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::router_backward(params, cpu_balance, logits.data<T>(), scores.data<T>(),
                               expert_index.data<int32_t>(), combine.data<T>(), d_combine.data<T>(),
                               scores.size(1), expert_index.size(1), begin, end, dlogits.data<T>());
    });
  }

  void do_router_bias_update(const Tensor& bias, const Tensor& load, double speed) const override {
    with_float_type(bias.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::router_bias_update(bias.data<T>(), load.data<int64_t>(), bias.size(0), speed);
    });
  }

  void do_swiglu_forward(const Tensor& gate_pre, const Tensor& up_pre, const Tensor& row_scale,
                         double limit, const Tensor& h) const override {
    with_float_type(gate_pre.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::swiglu_forward(gate_pre.data<T>(), up_pre.data<T>(), row_scale.data<T>(),
                              gate_pre.size(0), gate_pre.size(1), limit, h.data<T>());
    });
  }

  void do_swiglu_backward(const Tensor& gate_pre, const Tensor& up_pre, const Tensor& row_scale,
                          const Tensor& dh, double limit, const Tensor& dg, const Tensor& dv,
                          const Tensor& d_row_scale) const override {
    with_float_type(gate_pre.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::swiglu_backward(gate_pre.data<T>(), up_pre.data<T>(), row_scale.data<T>(),
                               dh.data<T>(), gate_pre.size(0), gate_pre.size(1), limit,
                               dg.data<T>(), dv.data<T>(), d_row_scale.data<T>());
    });
  }

  // One GEMM per group of rows: the weights' pointers in one array, as a
  // grouped GEMM takes them.
  void do_grouped_rows_linear_forward(const Tensor& offsets, const Tensor& x,
                                      std::span<const Tensor> w, const Tensor& y,
                                      Precision precision) const override {
    check_row_groups(offsets, x.size(0), w, "grouped_linear_forward");
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      std::vector<const T*> weights(w.size());
      for (size_t g = 0; g < w.size(); ++g) weights[g] = w[g].data<T>();
      kernels::grouped_rows_linear_forward(offsets.data<int64_t>(), offsets.size(0) - 1,
                                           x.data<T>(), weights.data(), y.size(1), x.size(1),
                                           y.data<T>(), precision);
    });
  }

  void do_grouped_rows_linear_backward(const Tensor& offsets, const Tensor& x,
                                       std::span<const Tensor> w, const Tensor& dy,
                                       const Tensor& dx, std::span<const Tensor> dw,
                                       const LinearOptions& options) const override {
    check_row_groups(offsets, x.size(0), w, "grouped_linear_backward");
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      std::vector<const T*> weights(w.size());
      for (size_t g = 0; g < w.size(); ++g) weights[g] = w[g].data<T>();
      std::vector<T*> grads(dw.size());
      for (size_t g = 0; g < dw.size(); ++g) grads[g] = dw[g].data<T>();
      kernels::grouped_rows_linear_backward(offsets.data<int64_t>(), offsets.size(0) - 1,
                                            x.data<T>(), weights.data(), dy.data<T>(), dx.data<T>(),
                                            grads.empty() ? nullptr : grads.data(), dy.size(1),
                                            x.size(1), options.precision, options.accumulate);
    });
  }

  void do_moe_permute(int64_t top_k, const Tensor& x, const Tensor& pair_order,
                      const Tensor& combine, const Tensor& rows,
                      const Tensor& row_combine) const override {
    with_float_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::moe_permute(x.data<T>(), x.size(1), top_k, pair_order.data<int64_t>(),
                           pair_order.size(0), combine.data<T>(), rows.size(1), rows.data<T>(),
                           row_combine.data<T>());
    });
  }

  void do_moe_unpermute(const Tensor& rows, const Tensor& pair_row,
                        const Tensor& y) const override {
    with_float_type(rows.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::moe_unpermute(rows.data<T>(), rows.size(1), pair_row.data<int64_t>(),
                             pair_row.size(0), pair_row.size(1), y.data<T>());
    });
  }

  void do_pack_rows(const Tensor& rows, const Tensor& weights, const Tensor& index,
                    const Tensor& packed) const override {
    with_float_type(rows.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::pack_rows(rows.data<T>(), weights.data<T>(), rows.size(1), index.data<int64_t>(),
                         index.size(0), packed.size(1), packed.data<T>());
    });
  }

  void do_unpack_rows(const Tensor& packed, const Tensor& index, const Tensor& rows,
                      const Tensor& weights) const override {
    with_float_type(rows.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::unpack_rows(packed.data<T>(), packed.size(1), index.data<int64_t>(), packed.size(0),
                           rows.size(1), rows.data<T>(), weights.data<T>());
    });
  }

  void do_decode_indexer_select(const Tensor& q, const Tensor& head_weights, const Tensor& keys,
                                const Tensor& selected) const override {
    with_float_type(q.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::decode_indexer_select(q.data<T>(), head_weights.data<T>(), q.size(0), q.size(1),
                                     keys.data<T>(), keys.size(0), selected.size(0),
                                     selected.data<int64_t>());
    });
  }

  void do_decode_attention(const Tensor& q, const Tensor& keys, const Tensor& sink,
                           const Tensor& o) const override {
    with_float_type(q.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::decode_attention(q.data<T>(), q.size(0), q.size(1), keys.data<T>(), keys.size(0),
                                sink.data<T>(), o.data<T>());
    });
  }

  void do_adamw_update(const Tensor& weights, const Tensor& grads, const Tensor& exp_avg,
                       const Tensor& exp_avg_sq, const AdamWCoefficients& c) const override {
    kernels::adamw_update(weights.data<float>(), grads.data<float>(), exp_avg.data<float>(),
                          exp_avg_sq.data<float>(), weights.numel(), c);
  }

  void do_newton_schulz(const Tensor& X, const Tensor& out,
                        const NewtonSchulzParams& params) const override {
    with_float_type(X.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::newton_schulz(X.data<T>(), out.data<T>(), X.size(0), X.size(1), params);
    });
  }

  void do_muon_update(std::span<const MuonMatrix> matrices, const Tensor& workspace,
                      const MuonStep& step) const override {
    std::vector<MuonMatrixData> data;
    data.reserve(matrices.size());
    for (const MuonMatrix& m : matrices)
      data.push_back({m.weights.data<float>(), m.grads.data<float>(), m.momentum.data<float>()});
    const Tensor& first = matrices[0].weights;
    kernels::muon_update_batch(data.data(), static_cast<int64_t>(data.size()),
                               workspace.data<float>(), first.size(0), first.size(1), step);
  }

  void do_copy_from_host(const void* src, const Tensor& dst) const override {
    std::memcpy(dst.raw(), src, static_cast<size_t>(dst.numel()) * dtype_size(dst.dtype()));
  }
  void do_copy_to_host(const Tensor& src, void* dst) const override {
    std::memcpy(dst, src.raw(), static_cast<size_t>(src.numel()) * dtype_size(src.dtype()));
  }
  void do_run_independent(int64_t count, const std::function<void(int64_t)>& task) const override {
    // Tasks of unequal length (packed documents): one at a time per thread.
#pragma omp parallel for schedule(dynamic, 1) if (count > 1)
    for (int64_t i = 0; i < count; ++i) task(i);
  }

  void do_sequence_positions(const Tensor& positions, int64_t period,
                             int64_t stride) const override {
    kernels::sequence_positions(positions.data<int64_t>(), positions.numel(), period, stride);
  }
  IndexScan do_scan_indices(const Tensor& index, int64_t lo, int64_t hi) const override {
    if (index.dtype() == DType::kI32)
      return kernels::scan_indices(index.data<int32_t>(), index.numel(), lo, hi);
    return kernels::scan_indices(index.data<int64_t>(), index.numel(), lo, hi);
  }
  void do_count_indices(const Tensor& index, const Tensor& counts) const override {
    kernels::count_indices(index.data<int32_t>(), index.numel(), counts.numel(),
                           counts.data<int64_t>());
  }
  void do_counting_sort(const Tensor& keys, const Tensor& offsets, const Tensor& order,
                        const Tensor& rank) const override {
    kernels::counting_sort(keys.data<int32_t>(), keys.numel(), offsets.numel() - 1,
                           offsets.data<int64_t>(), order.data<int64_t>(), rank.data<int64_t>());
  }
  int64_t do_first_invisible_selection(const AttentionKeySetDims& dims,
                                       const Tensor& selected) const override {
    return kernels::first_invisible_selection(dims, selected.data<int64_t>(), selected.size(0),
                                              selected.size(1));
  }
  AttentionKeySetSizes do_attention_key_offsets(const AttentionKeySetDims& dims,
                                                const Tensor& selected, const Tensor& comp_offsets,
                                                const Tensor& prob_offsets) const override {
    return kernels::attention_key_offsets(dims, selected.data<int64_t>(), comp_offsets.numel() - 1,
                                          selected.defined() ? selected.size(1) : 0,
                                          comp_offsets.data<int64_t>(),
                                          prob_offsets.data<int64_t>());
  }
  void do_attention_compressed_keys(const AttentionKeySetDims& dims, const Tensor& selected,
                                    const Tensor& comp_offsets,
                                    const Tensor& comp_list) const override {
    check_compressed_keys_length(comp_offsets, comp_list);
    kernels::attention_compressed_keys(dims, selected.data<int64_t>(), comp_offsets.numel() - 1,
                                       selected.defined() ? selected.size(1) : 0,
                                       comp_offsets.data<int64_t>(), comp_list.data<int64_t>());
  }

  double do_sum_squares(const Tensor& x, const Tensor& bounds) const override {
    check_sum_ranges(x, bounds);
    return sum_squares_ranges(x.data<float>(), bounds.data<int64_t>(), bounds.size(0));
  }

  double do_lm_head_cross_entropy(const Tensor& h, const Tensor& head, const Tensor& targets,
                                  const Tensor& token_weights, double loss_scale,
                                  const LmHeadOutputs& out, int64_t chunk_rows,
                                  Precision precision) const override {
    double loss = 0.0;
    with_float_type(h.dtype(), [&](auto tag) {
      using T = decltype(tag);
      auto run = [&](const auto* ids) {
        loss = kernels::lm_head_cross_entropy(
            h.data<T>(), head.data<T>(), ids, token_weights.data<T>(), h.size(0), h.size(1),
            head.size(0), chunk_rows, loss_scale, precision, out.dh.data<T>(), out.dhead.data<T>(),
            out.per_token_loss.data<T>(), out.logits.data<T>());
      };
      if (targets.dtype() == DType::kI32)
        run(targets.data<int32_t>());
      else
        run(targets.data<int64_t>());
    });
    return loss;
  }

  void do_sinkhorn_forward(const Tensor& logits, int64_t iters, double eps,
                           const Tensor& comb) const override {
    with_float_type(logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::sinkhorn_forward(logits.data<T>(), logits.size(0), iters, eps, comb.data<T>());
    });
  }

  void do_sinkhorn_backward(const Tensor& logits, int64_t iters, double eps, const Tensor& dcomb,
                            const Tensor& dlogits) const override {
    with_float_type(logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::sinkhorn_backward(logits.data<T>(), logits.size(0), iters, eps, dcomb.data<T>(),
                                 dlogits.data<T>());
    });
  }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

const Backend& default_backend() {
  return cpu_backend();
}

}  // namespace trex::kernels
