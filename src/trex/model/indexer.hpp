#pragma once
// Lightning indexer of CSA layers (spec §2.5) and its optional training loss
// (spec §3.2). The indexer only selects: the LM loss sends it no gradient; it
// learns from the KL loss between the main attention's distribution over the
// selected compressed entries and softmax of its own scores, with its inputs
// (a, c_Q) detached.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "trex/kernels/array.hpp"
#include "trex/kernels/cpu/rope.hpp"
#include "trex/kernels/top_k.hpp"
#include "trex/model/compressor.hpp"

namespace trex::model {

struct IndexerDims {
  int64_t hidden = 0;    // d
  int64_t q_lora = 0;    // d_c (width of c_Q)
  int64_t heads = 0;     // n_I
  int64_t head_dim = 0;  // c_I
  int64_t rope_dim = 0;  // r_d
  int64_t ratio = 4;     // m of the CSA layer (the indexer's compressor always overlaps)
  int64_t topk = 0;      // k_I
  double eps = 1e-6;
  CompressorDims compressor() const { return {hidden, ratio, head_dim, rope_dim, true, eps}; }
  void validate() const;
};

template <class T>
struct IndexerWeights {
  const T* wq_b = nullptr;          // [n_I·c_I, d_c]
  const T* weights_proj = nullptr;  // [n_I, d]
  CompressorWeights<T> compressor;  // c_x = c_I, overlapping
};

template <class T>
struct IndexerGrads {  // accumulated (+=); null = frozen
  T* wq_b = nullptr;
  T* weights_proj = nullptr;
  CompressorGrads<T> compressor;
};

template <class T>
struct IndexerCache {
  int64_t blocks = 0;              // N = floor(S/m) per sequence
  kernels::Array<T> q;             // q^I after RoPE [B·S, n_I·c_I]
  kernels::Array<T> head_weights;  // w_t incl. c_I^-1/2·n_I^-1/2 [B·S, n_I]
  kernels::Array<T> keys;          // K^I [B·N, c_I]
  CompressorCache<T> compressor;
  // Per token, top-min(k_I, visible) block indices i (within the sequence) in
  // ranks_before order (descending score, ties: lower i first), padded with −1:
  // [B·S, k_I].
  kernels::Array<int64_t> selected;
  kernels::Array<T> selected_scores;  // I_{t, selected[k]} (0 for −1 pads) [B·S, k_I]
  kernels::Array<T> dscores;          // filled by indexer_loss: dL_I/dI [B·S, k_I]
};

// Entry i is visible to query t iff (i+1)·m ≤ t+1 (and i < N).
inline int64_t visible_blocks(int64_t t, int64_t ratio, int64_t blocks) {
  const int64_t complete = (t + 1) / ratio;
  return complete < blocks ? complete : blocks;
}

// The engine's top-k rule (kernels/top_k.hpp): higher score first, among
// exactly equal scores the lower index first, NaN after every number.
using kernels::ranks_before;
using kernels::select_top_indices;

// Boundary statistics of the indexer's top-k decisions (tests, diagnostics). A
// row decides when more blocks are visible than k_I; its margin is
// (k-th − (k+1)-th score) / max |visible score| (the definition of
// reference/make_v4_fixtures.py, whose fixtures record the same figures).
struct IndexerSelectionStats {
  int64_t decisions = 0;
  int64_t boundary_ties = 0;  // decisions whose k-th and (k+1)-th scores are equal
  int64_t zero_ties = 0;      // ... and both exactly 0 (blocks zeroed by the ReLU)
  double min_margin = std::numeric_limits<double>::infinity();  // over untied decisions
  // Over visible blocks scoring exactly 0: −max_h(q_h·k) / max |q·k| of the row's
  // visible blocks (how far the ReLU is from letting such a block score ≠ 0).
  double min_zero_block_relu_margin = std::numeric_limits<double>::infinity();
};

// While alive, every indexer_forward that selects (from any thread) adds its
// rows to `stats`. At most one probe at a time (a second one throws). Costs
// nothing when no probe is installed.
class IndexerSelectionProbe {
 public:
  explicit IndexerSelectionProbe(IndexerSelectionStats& stats);
  ~IndexerSelectionProbe();
  IndexerSelectionProbe(const IndexerSelectionProbe&) = delete;
  IndexerSelectionProbe& operator=(const IndexerSelectionProbe&) = delete;
};

// Computes q^I, w, K^I and the scores of the selected entries. Without
// fixed_selection it scores every visible entry and (re)selects the top-k by
// select_top_indices; with it, cache.selected must already hold a selection
// for this shape.
template <class T>
void indexer_forward(const IndexerDims& dims, const IndexerWeights<T>& w, const SeqShape& shape,
                     const T* a, const T* c_q, const kernels::RopeTable& rope,
                     IndexerCache<T>& cache, bool fixed_selection,
                     const kernels::OpContext& ctx = {});

// Score I_{t,i} = Σ_h w_{t,h}·ReLU(q^I_{t,h}·K^I_i) of one (token row, block) pair
// (a host helper for tests and diagnostics: the CPU kernel, as the forward scores).
template <class T>
T indexer_score(const IndexerDims& dims, const IndexerCache<T>& cache, const SeqShape& shape,
                int64_t row, int64_t block);

// L_I = Σ_t KL(p_t ‖ softmax(I_t)) over each token's selected entries; target
// [B·S, k_I] aligned with cache.selected (rows L1-normalised by the caller,
// entries for −1 pads ignored). Fills cache.dscores (= softmax(I) − p) and
// returns L_I. Tokens without a selection contribute 0.
template <class T>
double indexer_loss(const IndexerDims& dims, const SeqShape& shape, const T* target,
                    IndexerCache<T>& cache, const kernels::OpContext& ctx = {});

// Backward of `scale`·L_I into the indexer's parameters only (a and c_Q detached).
template <class T>
void indexer_backward(const IndexerDims& dims, const IndexerWeights<T>& w, const SeqShape& shape,
                      const T* a, const T* c_q, const kernels::RopeTable& rope,
                      const IndexerCache<T>& cache, T scale, IndexerGrads<T>& grads,
                      const kernels::OpContext& ctx = {});

}  // namespace trex::model
