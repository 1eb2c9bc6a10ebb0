#pragma once
// The op layer: every computation of the model goes through a Backend.
//
// Model code (src/trex/model) decides which op runs on which tensors; a
// Backend decides how. The CPU backend (kernels/cpu/cpu_backend.hpp) is the
// engine's kernels and the oracle every other backend is tested against
// (tests/kernels/backend_test.cpp: each op through the interface equals the
// CPU kernel bit for bit; the model-level parity tests run on top).
//
// Conventions:
// - Tensors are contiguous, row-major, F32 (training) or F64 (finite-difference
//   checks); indices are I64, the router's expert indices I32. All float
//   operands of one call share one dtype (except the balance-loss frequencies,
//   always F64).
// - Each op is a public non-virtual function that checks its operands' dtypes
//   and shapes (a trex::Error naming the op and operand) and then calls the
//   backend's private virtual. A backend implements only the virtuals.
// - Shapes are given in the comments with the names of the op's arguments.
// - An undefined Tensor (Tensor()) is an absent optional operand (marked "?").
// - "written" outputs are overwritten; "+=" outputs accumulate.
// - Ops run in the order they are called on the backend's stream.
#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "trex/kernels/cpu/rope.hpp"
#include "trex/kernels/op_params.hpp"
#include "trex/kernels/tensor.hpp"

namespace trex::kernels {

struct LinearOptions {
  Precision precision = Precision::kF32;  // of float operands
  bool accumulate = false;                // forward: y +=; backward: dx +=
};

// One mHC site's parameters [rows, n·d], [rows], [3] (rows = mix; the HC
// head: [n, n·d], [n], [1]), or their gradients (each optional, +=).
struct MhcSiteTensors {
  Tensor fn, base, scale;
};
// What an mHC forward keeps: inv_rms [N], mix [N, rows], pre [N, n],
// post [N, n], comb [N, n, n] (the HC head has no post and comb).
struct MhcStateTensors {
  Tensor inv_rms, mix, pre, post, comb;
};

// Outputs of the fused LM head + cross-entropy, each optional.
struct LmHeadOutputs {
  Tensor dh;              // [N, d] written (0 rows for ignored tokens)
  Tensor dhead;           // [V, d] +=
  Tensor per_token_loss;  // [N] written: unscaled CE_t, 0 for ignored tokens
  Tensor logits;          // [N, V] written
};

// The keys of N attention queries (AttentionCoreDims): kv [N, c] (the window
// keys = values), compressed [E, c], and I64 comp_offsets [N+1], comp_list
// [comp_offsets[N]], prob_offsets [N+1].
struct AttentionKeyTensors {
  Tensor kv, compressed, comp_offsets, comp_list, prob_offsets;
};

// The lightning indexer's scoring inputs: q [T, n_I, c_I] (after RoPE),
// head_weights [T, n_I] (scale included), keys [B·blocks, c_I].
struct IndexerScoreTensors {
  Tensor q, head_weights, keys;
};

// The sequence-wise balance loss's part of the router backward (spec §3.3):
// sequences I64 [B, 2] (first row, length), freq F64 [B, E]
// (router_balance_frequencies), sequence_of I64 [N] (each token's sequence,
// −1: in none), weight α and d_loss = dLoss/dL_bal. Tensors undefined: the
// backward has no balance-loss term.
struct RouterBalanceGrad {
  Tensor sequences, freq, sequence_of;
  double weight = 0.0;
  double d_loss = 0.0;
};

// One matrix of a batched Muon update: weights and momentum (updated) from
// grads, all [rows, cols] F32.
struct MuonMatrix {
  Tensor weights, grads, momentum;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const char* name() const = 0;
  virtual Device device() const = 0;

  // ---- Memory ---------------------------------------------------------------
  // numel zero-filled elements of dtype in this backend's memory.
  Buffer allocate(DType dtype, int64_t numel) const;
  // Bytes of this backend's buffers alive now, and the most alive at once since
  // the last reset_peak_buffer_bytes(): the engine's own count of what its
  // activations and work buffers occupy (model weights live in ParamStore).
  int64_t live_buffer_bytes() const { return live_bytes_.load(std::memory_order_relaxed); }
  int64_t peak_buffer_bytes() const { return peak_bytes_.load(std::memory_order_relaxed); }
  void reset_peak_buffer_bytes() const {
    peak_bytes_.store(live_buffer_bytes(), std::memory_order_relaxed);
  }
  // The most memory the backend keeps of freed buffers for reuse (a cache of
  // allocations, outside live_buffer_bytes): for the memory accounting.
  virtual int64_t retained_bytes_limit() const { return 0; }
  // Every element of x (F32, F64, I64 or I32) = value (converted to x's dtype).
  void fill(const Tensor& x, double value) const;
  // dst (this backend's memory) = dst.numel() elements of dst's dtype read from
  // host memory src; copy_to_host the other way. The only way model code moves
  // data between the host and a backend's memory (batch metadata in, loss
  // bookkeeping and diagnostics out).
  void copy_from_host(const void* src, const Tensor& dst) const;
  void copy_to_host(const Tensor& src, void* dst) const;

  // ---- Scheduling -----------------------------------------------------------
  // task(0) … task(count−1), independent of one another (each touches only its
  // own outputs), possibly at the same time (the CPU: threads; a device: one
  // stream each). Returns when all have run; the first task's exception (in
  // task order) is rethrown after all have finished.
  void run_independent(int64_t count, const std::function<void(int64_t)>& task) const;

  // ---- Linear layers (weights [out, in], y = x·wᵀ) ----------------------------
  // x [M, K], w [N, K] -> y [M, N] (written, or += with options.accumulate).
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                      const LinearOptions& options) const;
  // dy [M, N] -> dx? [M, K] = dy·w (written, or += with options.accumulate),
  //              dw? [N, K] += dyᵀ·x.
  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                       const Tensor& dw, const LinearOptions& options) const;
  // G independent linears on column groups: x [M, G·K], w [G·N, K] ->
  // y [M, G·N] (written), y[:, g·N:(g+1)·N] = x[:, g·K:(g+1)·K] · w[g·N:(g+1)·N]ᵀ.
  void grouped_linear_forward(int64_t groups, const Tensor& x, const Tensor& w, const Tensor& y,
                              Precision precision) const;
  // dy [M, G·N] -> dx [M, G·K] (written), dw? [G·N, K] (+=).
  void grouped_linear_backward(int64_t groups, const Tensor& x, const Tensor& w, const Tensor& dy,
                               const Tensor& dx, const Tensor& dw, Precision precision) const;

  // ---- RMSNorm over the last axis (y = w ⊙ x / sqrt(mean(x²) + eps)) ----------
  // x [R, D], weight? [D] (absent: unweighted) -> y [R, D] (written, may be x),
  // inv_rms? [R] (written; what the backward needs).
  void rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& y,
                       const Tensor& inv_rms, double eps) const;
  // dy [R, D] -> dx [R, D] (written, may be dy), dweight? [D] (+=).
  void rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& inv_rms,
                        const Tensor& dy, const Tensor& dx, const Tensor& dweight) const;

  // ---- Rotary embedding (interleaved pairs on the last table.rope_dims dims) --
  // x [R, V, D] rotated in place (row r at position positions[r]; I64 [R]);
  // inverse rotates by −pos·θ (also the backward of the forward rotation).
  void rope(const RopeTable& table, const Tensor& x, const Tensor& positions, bool inverse) const;

  // ---- mHC (spec §2.2; model/mhc.hpp): N = dims.tokens, n streams, d hidden --
  // The φx̄ GEMMs always multiply in fp32.
  // X [N, n, d] -> u [N, d] = Σ_j pre_j X_j and the state (all written).
  void mhc_pre_forward(const MhcDims& dims, const MhcSiteTensors& weights, const Tensor& X,
                       const Tensor& u, const MhcStateTensors& state) const;
  // post [N, n], comb [N, n, n], X, y [N, d] -> Xout [N, n, d] (written, not X).
  void mhc_post_forward(const MhcDims& dims, const Tensor& post, const Tensor& comb,
                        const Tensor& X, const Tensor& y, const Tensor& Xout) const;
  // dXout [N, n, d] -> dpost [N, n], dcomb [N, n, n], dX? [N, n, d], dy? [N, d]
  // (all written).
  void mhc_post_backward(const MhcDims& dims, const Tensor& post, const Tensor& comb,
                         const Tensor& X, const Tensor& y, const Tensor& dXout, const Tensor& dX,
                         const Tensor& dy, const Tensor& dpost, const Tensor& dcomb) const;
  // du [N, d], dpost, dcomb -> grads (+=), dX? [N, n, d] (+=).
  void mhc_pre_backward(const MhcDims& dims, const MhcSiteTensors& weights,
                        const MhcStateTensors& state, const Tensor& X, const Tensor& du,
                        const Tensor& dpost, const Tensor& dcomb, const MhcSiteTensors& grads,
                        const Tensor& dX) const;
  // HC head: X [N, n, d] -> h [N, d], state.{inv_rms, mix [N, n], pre} (written).
  void hc_head_forward(const MhcDims& dims, const MhcSiteTensors& weights, const Tensor& X,
                       const Tensor& h, const MhcStateTensors& state) const;
  // dh [N, d] -> grads (+=), dX? [N, n, d] (written).
  void hc_head_backward(const MhcDims& dims, const MhcSiteTensors& weights,
                        const MhcStateTensors& state, const Tensor& X, const Tensor& dh,
                        const MhcSiteTensors& grads, const Tensor& dX) const;
  // Sinkhorn-Knopp of one logit matrix [n, n] -> comb [n, n] (written).
  void sinkhorn_forward(const Tensor& logits, int64_t iters, double eps, const Tensor& comb) const;
  // dcomb [n, n] -> dlogits [n, n] (written).
  void sinkhorn_backward(const Tensor& logits, int64_t iters, double eps, const Tensor& dcomb,
                         const Tensor& dlogits) const;

  // ---- Elementwise and rows (embeddings, residual streams) -------------------
  // x *= factor (in place; factor rounded to x's dtype).
  void scale(const Tensor& x, double factor) const;
  // y += x (same shape).
  void add(const Tensor& x, const Tensor& y) const;
  // dst = src (same shape).
  void copy(const Tensor& src, const Tensor& dst) const;
  // src [R, w], index I64 [M] (in [0, R)) -> dst [M, k, w] or [M, w] (k = 1):
  // each of the k copies of row m is src[index[m]] (written). src may also be
  // BF16 with dst F32 (an embedding stored in 2 bytes, rows widened exactly).
  void gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst) const;
  // src [M, k, w] or [M, w], index I64 [M] -> dst [R, w]: dst[index[m]] +=
  // src[m, j] for m, then j, in order.
  void scatter_add_rows(const Tensor& src, const Tensor& index, const Tensor& dst) const;
  // y [R, w] -> x [R, k, w] += y broadcast over the k copies.
  void broadcast_add(const Tensor& y, const Tensor& x) const;
  // x [R, k, w] -> y [R, w] += Σ_j x[:, j] (j in order).
  void sum_copies_add(const Tensor& x, const Tensor& y) const;

  // ---- Index bookkeeping (positions, key sets, routing plans) -----------------
  // positions I64 [n] (written): entry i = (i mod period)·stride (period > 0).
  void sequence_positions(const Tensor& positions, int64_t period, int64_t stride) const;
  // Scans index (I64 or I32 [n]): the entries in [0, hi) are counted; the
  // first outside [lo, hi) is reported (lo < 0 lets negative "ignore" entries
  // through uncounted).
  IndexScan scan_indices(const Tensor& index, int64_t lo, int64_t hi) const;
  // counts I64 [E] (written): how many entries of index (I32 [n], all in
  // [0, E)) equal each value.
  void count_indices(const Tensor& index, const Tensor& counts) const;
  // Stable counting sort of keys (I32 [n], all in [0, E)): offsets I64 [E+1]
  // (written) start each key's block, order I64 [n] (written) lists the
  // positions in sorted order, rank I64 [n] (written) = each position's
  // place in it (order's inverse).
  void counting_sort(const Tensor& keys, const Tensor& offsets, const Tensor& order,
                     const Tensor& rank) const;
  // The first query row whose selection (I64 [N, k], −1 pads) names an entry
  // it cannot see (dims.visible), or −1.
  int64_t first_invisible_selection(const AttentionKeySetDims& dims, const Tensor& selected) const;
  // The key-set offsets of N queries (AttentionKeyTensors): comp_offsets,
  // prob_offsets I64 [N+1] (written); selected? I64 [N, k] (every entry
  // visible). Returns the totals (a device backend copies them to the host:
  // the caller sizes comp_list and prob with them).
  AttentionKeySetSizes attention_key_offsets(const AttentionKeySetDims& dims,
                                             const Tensor& selected, const Tensor& comp_offsets,
                                             const Tensor& prob_offsets) const;
  // comp_list I64 [comp_offsets[N]] (written): each query's compressed entry rows.
  void attention_compressed_keys(const AttentionKeySetDims& dims, const Tensor& selected,
                                 const Tensor& comp_offsets, const Tensor& comp_list) const;

  // ---- Attention core (spec §2.3–2.6; model/attention.hpp) -------------------
  // q [N, H, c], sink [H] -> prob [prob_offsets[N]] (softmax over each query's
  // window + compressed keys with the head's sink), sink_prob [N, H],
  // o [N, H, c] = Σ_k p_k·key_k (all written).
  void attention_core_forward(const AttentionCoreDims& dims, const Tensor& q,
                              const AttentionKeyTensors& keys, const Tensor& sink,
                              const Tensor& prob, const Tensor& sink_prob, const Tensor& o) const;
  // d_o [N, H, c] -> dq [N, H, c], dkv [N, c], dcompressed [E, c] (written),
  // dsink? [H] (+=).
  void attention_core_backward(const AttentionCoreDims& dims, const Tensor& q,
                               const AttentionKeyTensors& keys, const Tensor& prob,
                               const Tensor& sink_prob, const Tensor& o, const Tensor& d_o,
                               const Tensor& dq, const Tensor& dkv, const Tensor& dcompressed,
                               const Tensor& dsink) const;
  // The indexer's target: per query, prob summed over its `heads` heads on the
  // selected compressed entries (selected I64 [N, k], −1 pads), L1-normalised:
  // target [N, k] (written).
  void attention_selected_mass(const AttentionCoreDims& dims, int64_t heads, const Tensor& prob,
                               const Tensor& prob_offsets, const Tensor& comp_offsets,
                               const Tensor& selected, const Tensor& target) const;

  // ---- Compressor pooling (spec §2.4; model/compressor.hpp) ------------------
  // gate, proj [B·S, width], ape [m, width] -> prob [E, slots, c_x],
  // pooled [E, c_x] (written).
  void compressor_pool_forward(const CompressorPoolDims& dims, const Tensor& gate,
                               const Tensor& proj, const Tensor& ape, const Tensor& prob,
                               const Tensor& pooled) const;
  // dpooled [E, c_x] -> dproj, dgate [B·S, width] (written), dape? [m, width] (+=).
  void compressor_pool_backward(const CompressorPoolDims& dims, const Tensor& prob,
                                const Tensor& proj, const Tensor& pooled, const Tensor& dpooled,
                                const Tensor& dproj, const Tensor& dgate, const Tensor& dape) const;

  // ---- Lightning indexer (spec §2.5, §3.2; model/indexer.hpp) ----------------
  // selected I64 [T, k] (written): per token the top-min(k, visible) visible
  // blocks by score (kernels/top_k.hpp order), −1 pads. boundaries (nullable,
  // host) receives each row's SelectionBoundary (diagnostics).
  void indexer_select(const IndexerScoreDims& dims, const IndexerScoreTensors& in,
                      const Tensor& selected, std::vector<SelectionBoundary>* boundaries) const;
  // scores [T, k] (written): the score of every selected block, 0 for pads.
  void indexer_selected_scores(const IndexerScoreDims& dims, const IndexerScoreTensors& in,
                               const Tensor& selected, const Tensor& scores) const;
  // Returns L_I = Σ_t KL(target_t ‖ softmax(scores_t)) over the selected
  // entries; dscores [T, k] (written) = softmax − target.
  double indexer_kl_loss(const Tensor& selected, const Tensor& scores, const Tensor& target,
                         const Tensor& dscores) const;
  // scale·dscores -> dq [T, n_I, c_I], dweights [T, n_I], dkeys [B·blocks, c_I]
  // (written).
  void indexer_score_backward(const IndexerScoreDims& dims, const IndexerScoreTensors& in,
                              const Tensor& selected, const Tensor& dscores, double scale,
                              const Tensor& dq, const Tensor& dweights, const Tensor& dkeys) const;

  // ---- Fused LM head + cross-entropy (spec §2.9; model/lm_loss.hpp) ---------
  // h [N, d], head [V, d], targets [N] (I64 or I32; < 0: ignored; all < V),
  // token_weights [N] (optional, h's dtype; w_t, undefined = 1) -> returns
  // loss_scale · Σ_t w_t·CE_t of logits_t = h_t·headᵀ; backward into
  // outputs.dh / dhead when either is given. At most chunk_rows rows of logits
  // exist at a time (0: automatic), unless outputs.logits asks for all.
  double lm_head_cross_entropy(const Tensor& h, const Tensor& head, const Tensor& targets,
                               const Tensor& token_weights, double loss_scale,
                               const LmHeadOutputs& outputs, int64_t chunk_rows,
                               Precision precision) const;

  // ---- MoE router (spec §2.7, §3.3; model/moe_router.hpp) -------------------
  // The logits GEMM is linear_forward (in fp32). logits [N, E] -> scores
  // [N, E] = sqrt(softplus(logits)) (written; evaluated in double).
  void router_scores(const Tensor& logits, const Tensor& scores) const;
  // expert_index I32 [N, K] (written). Score layers: per token the top K of
  // scores [N, E] + bias? [E] (the bias steers the selection only),
  // descending, equal values to the lower expert (kernels/top_k.hpp). Hash
  // layers (tid2eid given): row token_ids[t] of tid2eid I64 [V, K] (token_ids
  // I64 [N]; the caller has checked the ids; an entry outside int32 is written as −1, so
  // a range check of expert_index finds every bad entry the tokens used).
  void router_select(const Tensor& scores, const Tensor& bias, const Tensor& token_ids,
                     const Tensor& tid2eid, const Tensor& expert_index) const;
  // combine [N, K] (written) from the unbiased scores [N, E] of the selected
  // experts expert_index I32 [N, K].
  void router_combine(const RouterCombineParams& params, const Tensor& scores,
                      const Tensor& expert_index, const Tensor& combine) const;
  // freq F64 [B, E] (written): f_{b,e} = E/(K·T_b)·#{t in sequence b : e ∈
  // idx_t} over the balance sequences I64 [B, 2] (first row, length).
  void router_balance_frequencies(const Tensor& expert_index, const Tensor& sequences,
                                  const Tensor& freq) const;
  // Returns L_bal = (1/B)·Σ_b weight·Σ_e f_{b,e}·P_{b,e} of scores [N, E].
  double router_balance_loss(double weight, const Tensor& scores, const Tensor& freq,
                             const Tensor& sequences) const;
  // Tokens [begin, end): d_combine [N, K] = dLoss/dcombine (and the balance
  // loss, when given) -> dlogits [N, E] (written where the score gradient is
  // non-zero; other entries untouched).
  void router_backward(const RouterCombineParams& params, const RouterBalanceGrad& balance,
                       const Tensor& logits, const Tensor& scores, const Tensor& expert_index,
                       const Tensor& combine, const Tensor& d_combine, int64_t begin, int64_t end,
                       const Tensor& dlogits) const;
  // Aux-loss-free bias update: bias [E] −= speed where load I64 [E] is above
  // the mean, += speed where below (compared exactly in integers).
  void router_bias_update(const Tensor& bias, const Tensor& load, double speed) const;

  // ---- MoE experts (spec §2.7, §3.6; model/moe_experts.hpp) -----------------
  // h [R, I] (written) = row_scale? [R] ⊙ SiLU(min(g, L))·clamp(v, −L, L) of
  // gate_pre, up_pre [R, I]; limit L <= 0: no clamp.
  void swiglu_forward(const Tensor& gate_pre, const Tensor& up_pre, const Tensor& row_scale,
                      double limit, const Tensor& h) const;
  // dh [R, I] (gradient of the scaled h) -> dg, dv [R, I] (written),
  // d_row_scale? [R] (written).
  void swiglu_backward(const Tensor& gate_pre, const Tensor& up_pre, const Tensor& row_scale,
                       const Tensor& dh, double limit, const Tensor& dg, const Tensor& dv,
                       const Tensor& d_row_scale) const;
  // Grouped expert GEMM, one call over G groups of rows (a device backend:
  // one grouped GEMM with device-side offsets): rows [offsets[g],
  // offsets[g+1]) of x [R, K] times w[g] [N, K]ᵀ into the same rows of y
  // [R, N] (written). offsets I64 [G+1] ascend from 0 to R; w has G entries,
  // undefined for groups without rows.
  void grouped_linear_forward(const Tensor& offsets, const Tensor& x, std::span<const Tensor> w,
                              const Tensor& y, Precision precision) const;
  // dy [R, N] -> dx? [R, K] (written, or += with options.accumulate), dw[g]
  // [N, K] += dyᵀ·x per group (dw empty, or G entries that may be undefined).
  void grouped_linear_backward(const Tensor& offsets, const Tensor& x, std::span<const Tensor> w,
                               const Tensor& dy, const Tensor& dx, std::span<const Tensor> dw,
                               const LinearOptions& options) const;

  // ---- MoE token dispatch (model/token_dispatcher.hpp) ----------------------
  // Permute: pair p = t·top_k + k. Row i of rows [P, d] or [P, d+1]
  // (P = N·top_k; written) is x [N, d] row pair_order[i] / top_k; with combine
  // [N, top_k], the pair's weight goes to row_combine [P] or, when rows has
  // d+1 columns, to the row's last column (a row and its weight sent together).
  void moe_permute(int64_t top_k, const Tensor& x, const Tensor& pair_order, const Tensor& combine,
                   const Tensor& rows, const Tensor& row_combine) const;
  // Unpermute: y [M, d] += rows [P, d] at pair_row I64 [M, K] per token,
  // k = 0..K−1 in slot order.
  void moe_unpermute(const Tensor& rows, const Tensor& pair_row, const Tensor& y) const;
  // packed [M, d] or [M, d+1] (written): row i = rows [R, d] row index[i]
  // (index I64 [M]), then weights [R] entry index[i] when packed has d+1
  // columns (weights given exactly then).
  void pack_rows(const Tensor& rows, const Tensor& weights, const Tensor& index,
                 const Tensor& packed) const;
  // The inverse: rows row index[i] (index? I64 [M]; absent: i) = packed row i
  // [:d], weights entry index[i] = packed[i, d] when packed has d+1 columns.
  void unpack_rows(const Tensor& packed, const Tensor& index, const Tensor& rows,
                   const Tensor& weights) const;

  // ---- Incremental decoding (infer/decoder.hpp): one query token -----------
  // The lightning indexer: score_i = Σ_h w_h·ReLU(q_h·key_i) of q [n_I, c_I],
  // head_weights [n_I] over keys [visible, c_I]; selected I64 [take] (written,
  // take <= visible) = the best in ranks_before order.
  void decode_indexer_select(const Tensor& q, const Tensor& head_weights, const Tensor& keys,
                             const Tensor& selected) const;
  // q [H, c], keys [n, c] (K = V: the window oldest first, then the compressed
  // entries), sink [H] -> o [H, c] (written): softmax over q_h·key / sqrt(c)
  // with the sink logit, then Σ p·key. The decoder's own order of operations
  // (scalar dot products), not attention_core_forward's.
  void decode_attention(const Tensor& q, const Tensor& keys, const Tensor& sink,
                        const Tensor& o) const;

  // ---- Optimizer (spec §6; train/adamw.hpp, train/muon.hpp) ------------------
  // AdamW on weights, grads, exp_avg, exp_avg_sq [n] (F32; all but grads updated).
  void adamw_update(const Tensor& weights, const Tensor& grads, const Tensor& exp_avg,
                    const Tensor& exp_avg_sq, const AdamWCoefficients& c) const;
  // Hybrid Newton–Schulz: X [rows, cols] -> out [rows, cols] (written, may be X).
  void newton_schulz(const Tensor& X, const Tensor& out, const NewtonSchulzParams& params) const;
  // One Muon update of each of `matrices`, all of one shape [rows, cols] (so
  // one step: the same scale and decay); workspace: at least
  // count·rows·cols F32 of scratch. One op for the batch so that a backend can
  // batch their GEMMs (CPU: a thread per matrix when there are enough).
  void muon_update(std::span<const MuonMatrix> matrices, const Tensor& workspace,
                   const MuonStep& step) const;
  // Σ x² over the ranges of x [n] (F32) given by bounds I64 [ranges, 2] as
  // [begin, end): each range summed in double, the ranges in order.
  double sum_squares(const Tensor& x, const Tensor& bounds) const;

 protected:
  friend class Buffer;
  virtual void* allocate_bytes(size_t bytes) const = 0;  // zero-filled
  virtual void free_bytes(void* data, size_t bytes) const = 0;

 private:
  void count_allocated(int64_t bytes) const;
  void count_freed(int64_t bytes) const { live_bytes_.fetch_sub(bytes, std::memory_order_relaxed); }
  mutable std::atomic<int64_t> live_bytes_{0}, peak_bytes_{0};

 private:
  // The ops, in the order above (checked operands).
  virtual void do_fill(const Tensor& x, double value) const = 0;
  virtual void do_copy_from_host(const void* src, const Tensor& dst) const = 0;
  virtual void do_copy_to_host(const Tensor& src, void* dst) const = 0;
  virtual void do_run_independent(int64_t count,
                                  const std::function<void(int64_t)>& task) const = 0;
  virtual void do_sequence_positions(const Tensor& positions, int64_t period,
                                     int64_t stride) const = 0;
  virtual IndexScan do_scan_indices(const Tensor& index, int64_t lo, int64_t hi) const = 0;
  virtual void do_count_indices(const Tensor& index, const Tensor& counts) const = 0;
  virtual void do_counting_sort(const Tensor& keys, const Tensor& offsets, const Tensor& order,
                                const Tensor& rank) const = 0;
  virtual int64_t do_first_invisible_selection(const AttentionKeySetDims& dims,
                                               const Tensor& selected) const = 0;
  virtual AttentionKeySetSizes do_attention_key_offsets(const AttentionKeySetDims& dims,
                                                        const Tensor& selected,
                                                        const Tensor& comp_offsets,
                                                        const Tensor& prob_offsets) const = 0;
  virtual void do_attention_compressed_keys(const AttentionKeySetDims& dims, const Tensor& selected,
                                            const Tensor& comp_offsets,
                                            const Tensor& comp_list) const = 0;
  virtual void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                                 const LinearOptions& options) const = 0;
  virtual void do_linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy,
                                  const Tensor& dx, const Tensor& dw,
                                  const LinearOptions& options) const = 0;
  virtual void do_grouped_linear_forward(int64_t groups, const Tensor& x, const Tensor& w,
                                         const Tensor& y, Precision precision) const = 0;
  virtual void do_grouped_linear_backward(int64_t groups, const Tensor& x, const Tensor& w,
                                          const Tensor& dy, const Tensor& dx, const Tensor& dw,
                                          Precision precision) const = 0;
  virtual void do_rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& y,
                                  const Tensor& inv_rms, double eps) const = 0;
  virtual void do_rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& inv_rms,
                                   const Tensor& dy, const Tensor& dx,
                                   const Tensor& dweight) const = 0;
  virtual void do_rope(const RopeTable& table, const Tensor& x, const Tensor& positions,
                       bool inverse) const = 0;
  virtual void do_mhc_pre_forward(const MhcDims& dims, const MhcSiteTensors& weights,
                                  const Tensor& X, const Tensor& u,
                                  const MhcStateTensors& state) const = 0;
  virtual void do_mhc_post_forward(const MhcDims& dims, const Tensor& post, const Tensor& comb,
                                   const Tensor& X, const Tensor& y, const Tensor& Xout) const = 0;
  virtual void do_mhc_post_backward(const MhcDims& dims, const Tensor& post, const Tensor& comb,
                                    const Tensor& X, const Tensor& y, const Tensor& dXout,
                                    const Tensor& dX, const Tensor& dy, const Tensor& dpost,
                                    const Tensor& dcomb) const = 0;
  virtual void do_mhc_pre_backward(const MhcDims& dims, const MhcSiteTensors& weights,
                                   const MhcStateTensors& state, const Tensor& X, const Tensor& du,
                                   const Tensor& dpost, const Tensor& dcomb,
                                   const MhcSiteTensors& grads, const Tensor& dX) const = 0;
  virtual void do_hc_head_forward(const MhcDims& dims, const MhcSiteTensors& weights,
                                  const Tensor& X, const Tensor& h,
                                  const MhcStateTensors& state) const = 0;
  virtual void do_hc_head_backward(const MhcDims& dims, const MhcSiteTensors& weights,
                                   const MhcStateTensors& state, const Tensor& X, const Tensor& dh,
                                   const MhcSiteTensors& grads, const Tensor& dX) const = 0;
  virtual void do_sinkhorn_forward(const Tensor& logits, int64_t iters, double eps,
                                   const Tensor& comb) const = 0;
  virtual void do_sinkhorn_backward(const Tensor& logits, int64_t iters, double eps,
                                    const Tensor& dcomb, const Tensor& dlogits) const = 0;
  virtual void do_scale(const Tensor& x, double factor) const = 0;
  virtual void do_add(const Tensor& x, const Tensor& y) const = 0;
  virtual void do_copy(const Tensor& src, const Tensor& dst) const = 0;
  virtual void do_gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst) const = 0;
  virtual void do_scatter_add_rows(const Tensor& src, const Tensor& index,
                                   const Tensor& dst) const = 0;
  virtual void do_broadcast_add(const Tensor& y, const Tensor& x) const = 0;
  virtual void do_sum_copies_add(const Tensor& x, const Tensor& y) const = 0;
  virtual void do_attention_core_forward(const AttentionCoreDims& dims, const Tensor& q,
                                         const AttentionKeyTensors& keys, const Tensor& sink,
                                         const Tensor& prob, const Tensor& sink_prob,
                                         const Tensor& o) const = 0;
  virtual void do_attention_core_backward(const AttentionCoreDims& dims, const Tensor& q,
                                          const AttentionKeyTensors& keys, const Tensor& prob,
                                          const Tensor& sink_prob, const Tensor& o,
                                          const Tensor& d_o, const Tensor& dq, const Tensor& dkv,
                                          const Tensor& dcompressed, const Tensor& dsink) const = 0;
  virtual void do_attention_selected_mass(const AttentionCoreDims& dims, int64_t heads,
                                          const Tensor& prob, const Tensor& prob_offsets,
                                          const Tensor& comp_offsets, const Tensor& selected,
                                          const Tensor& target) const = 0;
  virtual void do_compressor_pool_forward(const CompressorPoolDims& dims, const Tensor& gate,
                                          const Tensor& proj, const Tensor& ape, const Tensor& prob,
                                          const Tensor& pooled) const = 0;
  virtual void do_compressor_pool_backward(const CompressorPoolDims& dims, const Tensor& prob,
                                           const Tensor& proj, const Tensor& pooled,
                                           const Tensor& dpooled, const Tensor& dproj,
                                           const Tensor& dgate, const Tensor& dape) const = 0;
  virtual void do_indexer_select(const IndexerScoreDims& dims, const IndexerScoreTensors& in,
                                 const Tensor& selected,
                                 std::vector<SelectionBoundary>* boundaries) const = 0;
  virtual void do_indexer_selected_scores(const IndexerScoreDims& dims,
                                          const IndexerScoreTensors& in, const Tensor& selected,
                                          const Tensor& scores) const = 0;
  virtual double do_indexer_kl_loss(const Tensor& selected, const Tensor& scores,
                                    const Tensor& target, const Tensor& dscores) const = 0;
  virtual void do_indexer_score_backward(const IndexerScoreDims& dims,
                                         const IndexerScoreTensors& in, const Tensor& selected,
                                         const Tensor& dscores, double scale, const Tensor& dq,
                                         const Tensor& dweights, const Tensor& dkeys) const = 0;
  virtual double do_lm_head_cross_entropy(const Tensor& h, const Tensor& head,
                                          const Tensor& targets, const Tensor& token_weights,
                                          double loss_scale, const LmHeadOutputs& outputs,
                                          int64_t chunk_rows, Precision precision) const = 0;
  virtual void do_router_scores(const Tensor& logits, const Tensor& scores) const = 0;
  virtual void do_router_select(const Tensor& scores, const Tensor& bias, const Tensor& token_ids,
                                const Tensor& tid2eid, const Tensor& expert_index) const = 0;
  virtual void do_router_combine(const RouterCombineParams& params, const Tensor& scores,
                                 const Tensor& expert_index, const Tensor& combine) const = 0;
  virtual void do_router_balance_frequencies(const Tensor& expert_index, const Tensor& sequences,
                                             const Tensor& freq) const = 0;
  virtual double do_router_balance_loss(double weight, const Tensor& scores, const Tensor& freq,
                                        const Tensor& sequences) const = 0;
  virtual void do_router_backward(const RouterCombineParams& params,
                                  const RouterBalanceGrad& balance, const Tensor& logits,
                                  const Tensor& scores, const Tensor& expert_index,
                                  const Tensor& combine, const Tensor& d_combine, int64_t begin,
                                  int64_t end, const Tensor& dlogits) const = 0;
  virtual void do_router_bias_update(const Tensor& bias, const Tensor& load,
                                     double speed) const = 0;
  virtual void do_swiglu_forward(const Tensor& gate_pre, const Tensor& up_pre,
                                 const Tensor& row_scale, double limit, const Tensor& h) const = 0;
  virtual void do_swiglu_backward(const Tensor& gate_pre, const Tensor& up_pre,
                                  const Tensor& row_scale, const Tensor& dh, double limit,
                                  const Tensor& dg, const Tensor& dv,
                                  const Tensor& d_row_scale) const = 0;
  virtual void do_grouped_rows_linear_forward(const Tensor& offsets, const Tensor& x,
                                              std::span<const Tensor> w, const Tensor& y,
                                              Precision precision) const = 0;
  virtual void do_grouped_rows_linear_backward(const Tensor& offsets, const Tensor& x,
                                               std::span<const Tensor> w, const Tensor& dy,
                                               const Tensor& dx, std::span<const Tensor> dw,
                                               const LinearOptions& options) const = 0;
  virtual void do_moe_permute(int64_t top_k, const Tensor& x, const Tensor& pair_order,
                              const Tensor& combine, const Tensor& rows,
                              const Tensor& row_combine) const = 0;
  virtual void do_moe_unpermute(const Tensor& rows, const Tensor& pair_row,
                                const Tensor& y) const = 0;
  virtual void do_pack_rows(const Tensor& rows, const Tensor& weights, const Tensor& index,
                            const Tensor& packed) const = 0;
  virtual void do_unpack_rows(const Tensor& packed, const Tensor& index, const Tensor& rows,
                              const Tensor& weights) const = 0;
  virtual void do_decode_indexer_select(const Tensor& q, const Tensor& head_weights,
                                        const Tensor& keys, const Tensor& selected) const = 0;
  virtual void do_decode_attention(const Tensor& q, const Tensor& keys, const Tensor& sink,
                                   const Tensor& o) const = 0;
  virtual void do_adamw_update(const Tensor& weights, const Tensor& grads, const Tensor& exp_avg,
                               const Tensor& exp_avg_sq, const AdamWCoefficients& c) const = 0;
  virtual void do_newton_schulz(const Tensor& X, const Tensor& out,
                                const NewtonSchulzParams& params) const = 0;
  virtual void do_muon_update(std::span<const MuonMatrix> matrices, const Tensor& workspace,
                              const MuonStep& step) const = 0;
  virtual double do_sum_squares(const Tensor& x, const Tensor& bounds) const = 0;
};

// The backend model code uses unless it is given another: the CPU backend.
const Backend& default_backend();

// How a model block runs: on which backend, and in which precision the GEMMs
// that follow the model's compute precision multiply (mHC and the router
// always multiply in fp32, whatever it says).
struct OpContext {
  const Backend* backend = nullptr;  // null: default_backend()
  Precision precision = Precision::kF32;
  const Backend& ops() const { return backend ? *backend : default_backend(); }
};

}  // namespace trex::kernels
