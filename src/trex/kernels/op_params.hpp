#pragma once
// The shape parameters of the op layer's compound ops (backend.hpp): what a
// backend needs to know besides its tensors' extents.
#include <cstdint>
#include <limits>

#include "trex/kernels/precision.hpp"

namespace trex::kernels {

// One mHC site or HC head (spec §2.2): tokens N, hidden d, streams n = hc_mult,
// mix = (2+n)·n coefficients per token.
struct MhcDims {
  int64_t tokens = 0;
  int64_t hidden = 0;
  int64_t hc_mult = 4;
  int64_t sinkhorn_iters = 20;  // t_max (>= 1); unused by the HC head
  double hc_eps = 1e-6;
  double norm_eps = 1e-6;

  int64_t streams_width() const { return hc_mult * hidden; }  // n·d
  int64_t mix() const { return (2 + hc_mult) * hc_mult; }     // coefficients per token
};

// Throws trex::Error naming the offending field when dims are unusable.
void validate(const MhcDims& dims);

// The key sets of the attention core (spec §2.3–2.6): token rows r = b·S + t;
// query r attends to its window rows b·S + max(0, t−window+1) .. r (oldest
// first), then to the compressed entries comp_list[comp_offsets[r] ..
// comp_offsets[r+1]). Its probabilities are prob[prob_offsets[r] + h·keys + k].
struct AttentionCoreDims {
  int64_t seq = 0;     // S
  int64_t window = 0;  // n_win
  // The window keys' score, output and gradient products (kBF16: bf16
  // operands, fp32 accumulation, as the linear layers); softmax and the
  // compressed keys stay fp32.
  Precision precision = Precision::kF32;
  int64_t window_start(int64_t row) const {
    const int64_t t = row % seq;
    return t - window + 1 > 0 ? t - window + 1 : 0;
  }
  int64_t window_keys(int64_t row) const { return row % seq - window_start(row) + 1; }
};

// How the key sets of N = B·S attention queries are built
// (Backend::attention_key_offsets): the window of AttentionCoreDims, then the
// compressed entries of the query's sequence b (entry rows b·blocks + i) —
// with the indexer's selection (I64 [N, k], −1 pads) the selected ones in
// selection order, otherwise (compressed) every visible one, i = 0, 1, …;
// without either, none. Entry i is visible to token t when (i+1)·ratio ≤ t+1.
struct AttentionKeySetDims {
  AttentionCoreDims core;
  int64_t heads = 0;   // H: probabilities per key
  int64_t ratio = 0;   // m (> 0 when compressed)
  int64_t blocks = 0;  // compressed entries per sequence
  bool compressed = false;
  int64_t visible(int64_t row) const {
    if (!compressed) return 0;
    const int64_t complete = (row % core.seq + 1) / ratio;
    return complete < blocks ? complete : blocks;
  }
};
// The totals of Backend::attention_key_offsets: comp_offsets[N], prob_offsets[N].
struct AttentionKeySetSizes {
  int64_t compressed_keys = 0;
  int64_t probabilities = 0;
};

// What Backend::scan_indices found: how many entries lie in [0, hi), and the
// first entry outside [lo, hi) (position −1: none).
struct IndexScan {
  int64_t counted = 0;
  int64_t first_bad = -1;
  int64_t bad_value = 0;
};

// Softmax-gated pooling of a KV compressor (spec §2.4): B sequences of S token
// rows, entries (b, i) for i < S / ratio (row b·blocks + i). Entry i pools the
// tokens of block i (and, overlapping, of block i−1: 2·ratio slots) per channel
// e < out_dim; proj and gate are [B·S, coff·out_dim] with coff = 2 when overlapping.
struct CompressorPoolDims {
  int64_t batch = 0;    // B
  int64_t seq = 0;      // S
  int64_t ratio = 0;    // m
  int64_t out_dim = 0;  // c_x
  bool overlap = false;
  int64_t coff() const { return overlap ? 2 : 1; }
  int64_t width() const { return coff() * out_dim; }  // columns of proj / gate / ape
  int64_t slots() const { return coff() * ratio; }
  int64_t blocks() const { return seq / ratio; }
  int64_t entries() const { return batch * blocks(); }
};

// Lightning-indexer scoring (spec §2.5): token rows r = b·S + t score the
// compressed blocks i < blocks of their sequence that are complete by t
// ((i+1)·ratio ≤ t+1): I_{t,i} = Σ_h w_{t,h}·ReLU(q_{t,h}·K_i).
struct IndexerScoreDims {
  int64_t seq = 0;     // S
  int64_t ratio = 0;   // m
  int64_t blocks = 0;  // per sequence
  int64_t topk = 0;    // k_I
  int64_t visible(int64_t row) const {
    const int64_t complete = (row % seq + 1) / ratio;
    return complete < blocks ? complete : blocks;
  }
};

// Boundary statistics of one row's top-k decision (diagnostics: a row decides
// when more blocks are visible than k; its margin is (k-th − (k+1)-th score) /
// max |visible score|; zero_relu: over blocks scoring exactly 0, the smallest
// −max_h(q_h·k) / max |q·k|).
struct SelectionBoundary {
  bool decides = false, tie = false, zero_tie = false;
  double margin = std::numeric_limits<double>::infinity();
  double zero_relu = std::numeric_limits<double>::infinity();
};

// The router's combine weights (spec §2.7): w_k = γ·s_{idx_k} / Σ_j s_{idx_j}
// with norm_topk_prob, else γ·s_{idx_k} (γ = routed_scaling).
struct RouterCombineParams {
  double routed_scaling = 1.0;
  bool norm_topk_prob = true;
};

// Per-step constants of the AdamW update (train/adamw.cpp computes them).
struct AdamWCoefficients {
  double beta1, beta2;
  double correction1, correction2;  // 1 − β^step
  double decay;                     // 1 − lr·λ
  double lr, eps;
};

// Hybrid Newton–Schulz (spec §6): `iterations` steps, the last
// `tail_iterations` with (2, −1.5, 0.5), the rest with (3.4445, −4.7750,
// 2.0315); its matmuls multiply in `precision`.
struct NewtonSchulzParams {
  int iterations = 10;
  int tail_iterations = 2;
  Precision precision = Precision::kF32;
};

// Per-matrix constants of one Muon update (train/muon.cpp computes them).
struct MuonStep {
  double momentum = 0.95;  // μ
  bool nesterov = true;
  NewtonSchulzParams newton_schulz;
  double scale = 0.0;  // lr · √max(rows, cols) · γ
  double decay = 1.0;  // 1 − lr·λ
};

}  // namespace trex::kernels
