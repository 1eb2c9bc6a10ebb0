#pragma once
// DeepSeek-V4 attention block (spec §2.3–2.6, §2.8, §3.1, §3.5): low-rank query
// with per-head RMS normalisation, one shared K=V latent (MQA), sliding window
// plus compressed entries (HCA: all visible, CSA: the lightning indexer's top-k),
// attention sink, inverse RoPE of the output, grouped low-rank output projection.
//
// Input a [B·S, d] is already attn_norm'ed; token (b, t) is row b·S + t at
// position t. No S×S mask is ever built: every query gathers its window
// W(t) = {max(0, t−n_win+1)..t} and its compressed set.
#include <cstdint>
#include <optional>
#include <vector>

#include "trex/kernels/array.hpp"
#include "trex/kernels/backend.hpp"
#include "trex/kernels/cpu/rope.hpp"
#include "trex/model/compressor.hpp"
#include "trex/model/config.hpp"
#include "trex/model/indexer.hpp"

namespace trex::model {

struct AttentionDims {
  int64_t hidden = 0;       // d
  int64_t heads = 0;        // n_h
  int64_t head_dim = 0;     // c (query head dim = KV entry dim)
  int64_t rope_dim = 0;     // r_d (last dims of every head / entry)
  int64_t q_lora = 0;       // d_c
  int64_t o_groups = 0;     // g
  int64_t o_lora = 0;       // d_g
  int64_t window = 0;       // n_win
  int64_t ratio = 0;        // m: 0 = SWA, 4 = CSA, other = HCA
  int64_t index_heads = 0;  // n_I (CSA only)
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  double eps = 1e-6;
  double rope_base = 10000.0;                // rope_theta, or compress_rope_theta if m > 0
  std::optional<kernels::YarnScaling> yarn;  // only for m > 0 layers

  // Layer `layer` of `config` (MTP layers included: index n_layers + j).
  static AttentionDims from_config(const ModelConfig& config, int64_t layer);
  AttentionKind kind() const;
  bool has_compressor() const { return ratio > 0; }
  bool has_indexer() const { return ratio == 4; }
  CompressorDims compressor() const;
  IndexerDims indexer() const;
  void validate() const;  // trex::Error naming the config key
};

template <class T>
struct AttentionWeights {
  const T* wq_a = nullptr;          // [d_c, d]
  const T* q_norm = nullptr;        // [d_c]
  const T* wq_b = nullptr;          // [n_h·c, d_c]
  const T* wkv = nullptr;           // [c, d]
  const T* kv_norm = nullptr;       // [c]
  const T* wo_a = nullptr;          // [g·d_g, c·n_h/g]
  const T* wo_b = nullptr;          // [d, g·d_g]
  const T* attn_sink = nullptr;     // [n_h]
  CompressorWeights<T> compressor;  // m > 0 (c_x = c, overlap iff m == 4)
  IndexerWeights<T> indexer;        // m == 4
};

template <class T>
struct AttentionGrads {  // accumulated (+=); null = frozen / not computed
  T* wq_a = nullptr;
  T* q_norm = nullptr;
  T* wq_b = nullptr;
  T* wkv = nullptr;
  T* kv_norm = nullptr;
  T* wo_a = nullptr;
  T* wo_b = nullptr;
  T* attn_sink = nullptr;
  CompressorGrads<T> compressor;
  IndexerGrads<T> indexer;  // receives only the indexer loss gradient (if computed)
};

struct AttentionOptions {
  // CSA: reuse cache.indexer.selected from a previous forward of the same shape
  // (finite-difference checks; spec §3.1 treats the selection as constant).
  bool fixed_selection = false;
  // CSA: compute the indexer KL loss (spec §3.2, sparse stage); attention_backward
  // then adds indexer_loss_weight · dL_I into grads.indexer.
  bool compute_indexer_loss = false;
  double indexer_loss_weight = 1.0;
};

template <class T>
struct AttentionCache {
  SeqShape shape;
  AttentionOptions options;
  kernels::RopeTable rope;                    // positions 0..S−1 with this layer's base/YaRN
  kernels::Array<int64_t> positions;          // t of every row [B·S]
  kernels::Array<T> a;                        // input copy [B·S, d]
  kernels::Array<T> q_lora, q_lora_inv, c_q;  // [B·S, d_c], [B·S], [B·S, d_c]
  kernels::Array<T> q_raw, q_inv, q;          // [B·S, n_h·c], [B·S·n_h], q after norm+RoPE
  kernels::Array<T> kv_raw, kv_inv, kv;       // [B·S, c], [B·S], kv after norm+RoPE
  kernels::Array<T> compressed;               // C^Comp after norm+RoPE [B·N, c]
  CompressorCache<T> compressor;
  IndexerCache<T> indexer;  // selection: indexer.selected [B·S, k_I]
  // Compressed keys of every query: rows of `compressed`, token r owns
  // comp_list[comp_offsets[r] .. comp_offsets[r+1]).
  kernels::Array<int64_t> comp_offsets, comp_list;
  // Attention probabilities: token r, head h, key k at prob[prob_offsets[r] + h·n_k(r) + k],
  // keys = window (oldest first) then compressed in comp_list order.
  kernels::Array<int64_t> prob_offsets;
  kernels::Array<T> prob;
  kernels::Array<T> sink_prob;  // exp(sink)/Z [B·S·n_h]
  kernels::Array<T> o;          // Σ p·v before inverse RoPE [B·S, n_h·c]
  kernels::Array<T> o_rot;      // after inverse RoPE
  kernels::Array<T> z;          // grouped low-rank output [B·S, g·d_g]
  int64_t prob_count = 0;       // entries of prob (kept when prob is dropped)
  double indexer_loss = 0.0;

  int64_t window_start(int64_t row, int64_t window) const {
    const int64_t t = row % shape.S;
    return t - window + 1 > 0 ? t - window + 1 : 0;
  }
};

// How the key sets of a layer's queries are built: the window, then the
// compressed entries a query sees (all visible ones, or the indexer's top k_I).
kernels::AttentionKeySetDims key_set_dims(const AttentionDims& dims, const SeqShape& shape);

// out [B·S, d] is written. Returns the indexer loss L_I (0 unless computed).
// The ops run on ctx's backend, the projections (and the compressor's and
// indexer's) in ctx.precision.
template <class T>
double attention_forward(const AttentionDims& dims, const AttentionWeights<T>& w,
                         const SeqShape& shape, const T* a, AttentionCache<T>& cache, T* out,
                         const AttentionOptions& options = {}, const kernels::OpContext& ctx = {});

// Selective recomputation (model.hpp, ActivationRecompute::kSelective): frees
// what attention_rematerialize recomputes — the input copy `a`, the normed and
// rotated c_Q, q and kv, and the core's probabilities and outputs (prob,
// sink_prob, o, o_rot) — keeping the projections before their norms, the
// compressed keys, the selections and every offset table.
template <class T>
void attention_drop_recomputable(AttentionCache<T>& cache);
// Refills what attention_drop_recomputable freed, from the block's normed input
// `a` [B·S, d], with the forward's own ops in its order (bitwise the forward's
// values, so attention_backward then gives the gradients of a stored run).
template <class T>
void attention_rematerialize(const AttentionDims& dims, const AttentionWeights<T>& w, const T* a,
                             AttentionCache<T>& cache, const kernels::OpContext& ctx = {});

// dout [B·S, d]; da [B·S, d] is written (= dL/da of the LM path; the indexer's
// inputs are detached). Parameter gradients accumulate into grads.
template <class T>
void attention_backward(const AttentionDims& dims, const AttentionWeights<T>& w,
                        const AttentionCache<T>& cache, const T* dout, AttentionGrads<T>& grads,
                        T* da, const kernels::OpContext& ctx = {});

// Compressed entries (sequence-local block indices) attended by token (b, t):
// CSA: the indexer picks, HCA: all visible, SWA: none.
template <class T>
std::vector<int64_t> attention_compressed_set(const AttentionDims& dims,
                                              const AttentionCache<T>& cache, int64_t b, int64_t t);

}  // namespace trex::model
