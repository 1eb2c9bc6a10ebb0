#include "trex/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <numeric>
#include <string>

#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"
#include "trex/core/rng.hpp"
#include "trex/kernels/array.hpp"
#include "trex/kernels/backend.hpp"
#include "trex/model/attention.hpp"
#include "trex/model/lm_loss.hpp"
#include "trex/model/mhc.hpp"
#include "trex/model/moe.hpp"
#include "trex/model/token_dispatcher.hpp"

namespace trex::model {
namespace {

using kernels::Tensor;

// x [rows, d] -> y, inv_rms (the norm's weight [d]).
template <class T>
void rmsnorm_forward(const kernels::OpContext& ctx, const T* x, const T* weight, T* y, T* inv_rms,
                     int64_t rows, int64_t d, double eps) {
  ctx.ops().rmsnorm_forward(Tensor::of(x, {rows, d}), Tensor::of(weight, {d}),
                            Tensor::of(y, {rows, d}), Tensor::of(inv_rms, {rows}), eps);
}

// dy [rows, d] -> dx (written), dweight (+=, nullable).
template <class T>
void rmsnorm_backward(const kernels::OpContext& ctx, const T* x, const T* weight, const T* inv_rms,
                      const T* dy, T* dx, T* dweight, int64_t rows, int64_t d) {
  ctx.ops().rmsnorm_backward(Tensor::of(x, {rows, d}), Tensor::of(weight, {d}),
                             Tensor::of(inv_rms, {rows}), Tensor::of(dy, {rows, d}),
                             Tensor::of(dx, {rows, d}), Tensor::optional(dweight, {d}));
}

std::string block_prefix(const ModelConfig& c, int64_t layer) {
  if (layer < c.num_hidden_layers) return "layers." + std::to_string(layer) + ".";
  return "mtp." + std::to_string(layer - c.num_hidden_layers) + ".";
}

// A maximal run of one document inside a row of a packed batch: flattened token
// rows [row, row + len), at positions 0..len−1.
struct Segment {
  int64_t row = 0;
  int64_t len = 0;
  bool operator==(const Segment&) const = default;
};

template <class T>
struct BlockCache {
  SeqShape shape;
  kernels::Array<T> x_in;  // [N, n, d] block input streams
  MhcCache<T> attn_mhc;
  kernels::Array<T> u_attn, inv_attn, a;  // collapsed input, its norm stats, normed input
  AttentionCache<T> attn;                 // unpacked batch: one call over all B rows
  // Packed batch: attention (with its compressor and indexer) runs per segment,
  // each with its own cache; token-local parts of the block stay batched.
  std::vector<Segment> segments;
  std::vector<AttentionCache<T>> segment_attn;
  // Sequences of the balance loss: the documents of a packed batch (empty: rows).
  std::vector<Segment> balance_segments;
  kernels::Array<T> y_attn;  // [N, d]
  kernels::Array<T> x_mid;   // [N, n, d]
  MhcCache<T> ffn_mhc;
  kernels::Array<T> u_ffn, inv_ffn, x_ffn;
  MoeCache<T> moe;
  kernels::Array<T> y_ffn;
  double gradient_weight = 1.0;  // seed of the balance / indexer loss gradients
};

template <class T>
struct MtpCache {
  int64_t M = 0;                       // tokens B·(S−1)
  kernels::Array<int64_t> next_ids;    // [M]
  kernels::Array<int64_t> rows;        // the row of X^L each MTP position reads [M]
  kernels::Array<T> e, e_inv, e_norm;  // embedding of the next token, enorm
  kernels::Array<T> h, h_inv, h_norm;  // X^L rows [M·n, d], hnorm per stream
  kernels::Array<T> e_proj;            // [M, d]
  BlockCache<T> block;
  kernels::Array<T> x_out;  // [M, n, d]
  HcHeadCache<T> head;
  kernels::Array<T> hc_out, inv_final, final_normed;
  kernels::Array<int64_t> targets;
};

}  // namespace

template <class T>
struct Model<T>::State {
  StageCache<T> whole;  // forward_backward's activations (kept for fixed_selection)
};

template <class T>
struct StageCache<T>::Impl {
  StageSpec stage;
  LossOptions loss;
  StepOptions step;       // of the forward (its hooks serve the backward too)
  bool backward = false;  // the forward prepared a backward
  double gradient_weight = 1.0;
  int64_t B = 0, S = 0;
  std::vector<BlockCache<T>> blocks;  // layers first_layer .. last_layer−1
  // ActivationRecompute::kFull: `blocks` hold only their x_in; each block's
  // forward runs again into `recomputed` at the start of its backward.
  bool recompute = false;
  BlockCache<T> recomputed;
  // ActivationRecompute::kSelective: `blocks` lack what drop_recomputable
  // frees; rematerialize_block refills a block before its backward.
  bool selective = false;
  kernels::Array<int64_t> ids;    // the batch's token ids [N]
  std::vector<Segment> segments;  // empty: unpacked batch
  // Head stage.
  kernels::Buffer x_final;  // X^L [N, n, d]
  HcHeadCache<T> head;
  kernels::Array<T> hc_out, inv_final, final_normed;
  kernels::Array<int64_t> targets;
  kernels::Array<T> d_final;  // dLoss/d(final_normed) [N, d], seeded by the forward
  std::vector<MtpCache<T>> mtp;
  kernels::Array<T> d_mfinal;  // the MTP head's, [M, d] (when mtp_backward)
  bool mtp_backward = false;
};

template <class T>
StageCache<T>::StageCache() = default;
template <class T>
StageCache<T>::~StageCache() = default;
template <class T>
StageCache<T>::StageCache(StageCache&&) noexcept = default;
template <class T>
StageCache<T>& StageCache<T>::operator=(StageCache&&) noexcept = default;
template <class T>
void StageCache<T>::clear() {
  impl_.reset();
}
template <class T>
bool StageCache<T>::empty() const {
  return !impl_;
}

namespace {

MoeDims block_moe_dims(const ModelConfig& c, int64_t layer, const SeqShape& shape,
                       const LossOptions& loss, bool packed,
                       const std::vector<Segment>& balance_segments) {
  MoeDims d = moe_dims(c, layer, shape.B, shape.S, loss.balance_loss_weight);
  d.balance_loss_on_hash_layers = loss.balance_loss_on_hash_layers;
  for (const Segment& seg : balance_segments) d.balance_sequences.push_back({seg.row, seg.len});
  // A packed MTP block whose documents all have one token has no sequence to balance.
  if (packed && balance_segments.empty()) d.balance_loss_weight = 0.0;
  return d;
}

template <class T>
struct BlockBinding {
  MhcWeights<T> attn_hc, ffn_hc;
  MhcGrads<T> attn_hc_g, ffn_hc_g;
  const T* attn_norm;
  const T* ffn_norm;
  T* attn_norm_g;
  T* ffn_norm_g;
  AttentionWeights<T> attn;
  AttentionGrads<T> attn_g;
  MoeWeights<T> moe;
  MoeGrads<T> moe_g;
};

// Weights and grads structs share field names: one list of tensor names fills
// both (`get` returns null for tensors this layer does not have).
template <class Attn, class Get>
void bind_attention(Attn& w, const Get& get) {
  w.wq_a = get("attn.wq_a.weight");
  w.q_norm = get("attn.q_norm.weight");
  w.wq_b = get("attn.wq_b.weight");
  w.wkv = get("attn.wkv.weight");
  w.kv_norm = get("attn.kv_norm.weight");
  w.wo_a = get("attn.wo_a.weight");
  w.wo_b = get("attn.wo_b.weight");
  w.attn_sink = get("attn.attn_sink");
  w.compressor = {get("attn.compressor.wkv.weight"), get("attn.compressor.wgate.weight"),
                  get("attn.compressor.ape"), get("attn.compressor.norm.weight")};
  w.indexer.wq_b = get("attn.indexer.wq_b.weight");
  w.indexer.weights_proj = get("attn.indexer.weights_proj.weight");
  w.indexer.compressor = {
      get("attn.indexer.compressor.wkv.weight"), get("attn.indexer.compressor.wgate.weight"),
      get("attn.indexer.compressor.ape"), get("attn.indexer.compressor.norm.weight")};
}

// The compute values of a tensor the model must have (ParamStore::weight).
template <class T>
const T* required_weight(const ParamStore<T>& p, const std::string& name) {
  const T* w = p.weight(name);
  if (!w) throw Error("no parameter named '" + name + "'");
  return w;
}

// Decoded weights of a bf16 store live for one forward or backward pass.
template <class T>
struct DecodedWeightsScope {
  const ParamStore<T>& params;
  ~DecodedWeightsScope() { params.release_decoded(); }
};

template <class T>
BlockBinding<T> bind_block(const ModelConfig& c, ParamStore<T>& p, const HashTables& hash,
                           int64_t layer) {
  const std::string b = block_prefix(c, layer);
  // A bf16 store decodes this block's weights and forgets the other blocks'.
  auto v = [&](const std::string& n) -> const T* { return required_weight(p, b + n); };
  auto g = [&](const std::string& n) -> T* { return p.grad(b + n); };
  auto vo = [&](const std::string& n) -> const T* { return p.weight(b + n); };
  auto go = [&](const std::string& n) -> T* { return p.grad_or_null(b + n); };
  BlockBinding<T> r{};
  r.attn_hc = {v("hc_attn_fn"), v("hc_attn_base"), v("hc_attn_scale")};
  r.attn_hc_g = {g("hc_attn_fn"), g("hc_attn_base"), g("hc_attn_scale")};
  r.ffn_hc = {v("hc_ffn_fn"), v("hc_ffn_base"), v("hc_ffn_scale")};
  r.ffn_hc_g = {g("hc_ffn_fn"), g("hc_ffn_base"), g("hc_ffn_scale")};
  r.attn_norm = v("attn_norm.weight");
  r.ffn_norm = v("ffn_norm.weight");
  r.attn_norm_g = g("attn_norm.weight");
  r.ffn_norm_g = g("ffn_norm.weight");
  bind_attention(r.attn, vo);
  bind_attention(r.attn_g, go);
  MoeWeights<T>& mw = r.moe;
  MoeGrads<T>& mg = r.moe_g;
  mw.gate = v("ffn.gate.weight");
  mg.gate = g("ffn.gate.weight");
  mw.gate_bias = vo("ffn.gate.bias");
  if (c.is_hash_layer(layer)) mw.tid2eid = hash.at(static_cast<size_t>(layer)).data();
  mw.shared_w1 = v("ffn.shared_experts.w1.weight");
  mw.shared_w2 = v("ffn.shared_experts.w2.weight");
  mw.shared_w3 = v("ffn.shared_experts.w3.weight");
  mg.shared_w1 = g("ffn.shared_experts.w1.weight");
  mg.shared_w2 = g("ffn.shared_experts.w2.weight");
  mg.shared_w3 = g("ffn.shared_experts.w3.weight");
  // Experts another EP rank stores (expert_shard.hpp) bind null; the MoE block
  // checks that only the expert-parallel path runs with them missing.
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    const std::string ep = "ffn.experts." + std::to_string(e) + ".";
    mw.w1.push_back(vo(ep + "w1.weight"));
    mw.w2.push_back(vo(ep + "w2.weight"));
    mw.w3.push_back(vo(ep + "w3.weight"));
    mg.w1.push_back(go(ep + "w1.weight"));
    mg.w2.push_back(go(ep + "w2.weight"));
    mg.w3.push_back(go(ep + "w3.weight"));
  }
  return r;
}

// The profile category of a layer's attention (its core, see core/profile.hpp).
profile::Op attention_op(const AttentionDims& dims) {
  switch (dims.kind()) {
    case AttentionKind::kSliding:
      return profile::Op::kAttnSwa;
    case AttentionKind::kCompressedSparse:
      return profile::Op::kAttnCsa;
    default:
      return profile::Op::kAttnHca;
  }
}

// A sublayer's input: mHC pre collapses the streams [N, n, d] into u [N, d],
// then RMSNorm. The forward and the selective refill share it, so the refill
// is bitwise the forward.
template <class T>
void sublayer_input(const ModelConfig& c, const MhcDims& md, const MhcWeights<T>& hc,
                    const T* norm_weight, const T* streams, MhcCache<T>& mhc, T* u, T* normed,
                    T* inv, const kernels::OpContext& ctx) {
  {
    TREX_PROFILE(profile::Op::kMhcPre);
    mhc_pre_forward(md, hc, streams, u, mhc, ctx);
  }
  rmsnorm_forward(ctx, u, norm_weight, normed, inv, md.tokens, c.hidden_size, c.rms_norm_eps);
}

// One block forward: X_in [N, n, d] → x_out.
// Attention over every segment of a packed batch (each as a sequence of its own).
// Segments are independent, so they run in parallel; each writes only its own
// cache and rows, and the indexer losses are summed in segment order, so the
// result does not depend on the thread count.
template <class T>
double segmented_attention_forward(const AttentionDims& dims, const AttentionWeights<T>& w,
                                   const std::vector<Segment>& segments, const T* a,
                                   std::vector<AttentionCache<T>>& caches, T* out,
                                   const AttentionOptions& options, const kernels::OpContext& ctx) {
  const int64_t count = static_cast<int64_t>(segments.size()), d = dims.hidden;
  caches.resize(segments.size());
  std::vector<double> losses(segments.size(), 0.0);
  ctx.ops().run_independent(count, [&](int64_t i) {
    const Segment& seg = segments[static_cast<size_t>(i)];
    losses[i] = attention_forward(dims, w, SeqShape{1, seg.len}, a + seg.row * d, caches[i],
                                  out + seg.row * d, options, ctx);
  });
  return std::accumulate(losses.begin(), losses.end(), 0.0);
}

// One block forward: X_in [N, n, d] → x_out. `segments` empty: every row is one
// sequence; otherwise attention runs per segment and the balance loss runs over
// `balance_segments`.
template <class T>
double block_forward(const ModelConfig& c, const BlockBinding<T>& w, int64_t layer,
                     const SeqShape& shape, const std::vector<Segment>& segments,
                     const std::vector<Segment>& balance_segments, const T* x_in,
                     const int64_t* token_ids, const LossOptions& loss, const StepOptions& step,
                     double gradient_weight, BlockCache<T>& bc, T* x_out,
                     const kernels::OpContext& ctx, TokenDispatchers<T>* dispatchers = nullptr) {
  const int64_t N = shape.tokens(), d = c.hidden_size, n = c.hc_mult;
  const MhcDims md = mhc_dims(c, N);
  const kernels::Backend& ops = ctx.ops();
  bc.shape = shape;
  bc.x_in.resize(N * n * d, ops);
  ops.copy(Tensor::of(x_in, {N, n, d}), bc.x_in.view({N, n, d}));
  bc.u_attn.resize(N * d, ops);
  bc.inv_attn.resize(N, ops);
  bc.a.resize(N * d, ops);
  bc.y_attn.resize(N * d, ops);
  bc.x_mid.resize(N * n * d, ops);
  sublayer_input(c, md, w.attn_hc, w.attn_norm, x_in, bc.attn_mhc, bc.u_attn.data(), bc.a.data(),
                 bc.inv_attn.data(), ctx);
  AttentionOptions ao;
  ao.fixed_selection = step.fixed_selection;
  ao.compute_indexer_loss = loss.indexer_loss && c.ratio(layer) == 4;
  ao.indexer_loss_weight = loss.indexer_loss_weight * gradient_weight;  // its gradient seed
  bc.gradient_weight = gradient_weight;
  const AttentionDims attn_dims = AttentionDims::from_config(c, layer);
  bc.segments = segments;
  // A reused cache keeps only the attention caches this batch's form uses: a
  // packed batch after an unpacked one (or the reverse) would otherwise hold
  // the other form's arrays, a whole attention cache, until the next call.
  if (segments.empty())
    bc.segment_attn.clear();
  else
    bc.attn = AttentionCache<T>{};
  bc.balance_segments = balance_segments;
  double indexer_loss = 0.0;
  {
    // What the nested scopes (GEMMs, norms, RoPE, compressor, indexer) leave is the core.
    TREX_PROFILE(attention_op(attn_dims));
    if (segments.empty()) {
      indexer_loss = attention_forward(attn_dims, w.attn, shape, bc.a.data(), bc.attn,
                                       bc.y_attn.data(), ao, ctx);
    } else {
      indexer_loss = segmented_attention_forward(attn_dims, w.attn, segments, bc.a.data(),
                                                 bc.segment_attn, bc.y_attn.data(), ao, ctx);
    }
  }
  {
    TREX_PROFILE(profile::Op::kMhcPost);
    mhc_post_forward(md, bc.attn_mhc, x_in, bc.y_attn.data(), bc.x_mid.data(), ctx);
  }

  bc.u_ffn.resize(N * d, ops);
  bc.inv_ffn.resize(N, ops);
  bc.x_ffn.resize(N * d, ops);
  bc.y_ffn.resize(N * d, ops);
  sublayer_input(c, md, w.ffn_hc, w.ffn_norm, bc.x_mid.data(), bc.ffn_mhc, bc.u_ffn.data(),
                 bc.x_ffn.data(), bc.inv_ffn.data(), ctx);
  {
    TREX_PROFILE(profile::Op::kMoeOther);
    const std::unique_ptr<TokenDispatcher<T>> dispatcher =
        dispatchers ? dispatchers->for_block(layer, c.n_routed_experts) : nullptr;
    moe_forward(block_moe_dims(c, layer, shape, loss, !bc.segments.empty(), bc.balance_segments),
                w.moe, bc.x_ffn.data(), token_ids, bc.moe, bc.y_ffn.data(), step.fixed_selection,
                dispatcher.get(), ctx);
  }
  TREX_PROFILE(profile::Op::kMhcPost);
  mhc_post_forward(md, bc.ffn_mhc, bc.x_mid.data(), bc.y_ffn.data(), x_out, ctx);
  return indexer_loss;
}

// dx_out [N, n, d] → dx_in [N, n, d] (written). Parameter gradients accumulate.
template <class T>
void block_backward(const ModelConfig& c, BlockBinding<T>& w, int64_t layer,
                    const LossOptions& loss, const BlockCache<T>& bc, const T* dx_out, T* dx_in,
                    const kernels::OpContext& ctx, TokenDispatchers<T>* dispatchers = nullptr) {
  const SeqShape& shape = bc.shape;
  const int64_t N = shape.tokens(), d = c.hidden_size, n = c.hc_mult;
  const MhcDims md = mhc_dims(c, N);
  const kernels::Backend& ops = ctx.ops();
  kernels::Array<T> dx_mid(N * n * d, ops), dy(N * d, ops), dnormed(N * d, ops), du(N * d, ops);
  MhcCoefGrads<T> coef;
  {
    TREX_PROFILE(profile::Op::kMhcPost);
    mhc_post_backward(md, bc.ffn_mhc, bc.x_mid.data(), bc.y_ffn.data(), dx_out, dx_mid.data(),
                      dy.data(), coef, ctx);
  }
  {
    TREX_PROFILE(profile::Op::kMoeOther);
    const std::unique_ptr<TokenDispatcher<T>> dispatcher =
        dispatchers ? dispatchers->for_block(layer, c.n_routed_experts) : nullptr;
    moe_backward(block_moe_dims(c, layer, shape, loss, !bc.segments.empty(), bc.balance_segments),
                 w.moe, bc.moe, dy.data(), static_cast<T>(bc.gradient_weight), w.moe_g,
                 dnormed.data(), dispatcher.get(), ctx);
  }
  rmsnorm_backward(ctx, bc.u_ffn.data(), w.ffn_norm, bc.inv_ffn.data(), dnormed.data(), du.data(),
                   w.ffn_norm_g, N, d);
  {
    TREX_PROFILE(profile::Op::kMhcPre);
    mhc_pre_backward(md, w.ffn_hc, bc.ffn_mhc, bc.x_mid.data(), du.data(), coef, w.ffn_hc_g,
                     dx_mid.data(), ctx);
  }
  {
    TREX_PROFILE(profile::Op::kMhcPost);
    mhc_post_backward(md, bc.attn_mhc, bc.x_in.data(), bc.y_attn.data(), dx_mid.data(), dx_in,
                      dy.data(), coef, ctx);
  }
  const AttentionDims attn_dims = AttentionDims::from_config(c, layer);
  {
    TREX_PROFILE(attention_op(attn_dims));
    if (bc.segments.empty()) {
      attention_backward(attn_dims, w.attn, bc.attn, dy.data(), w.attn_g, dnormed.data(), ctx);
    } else {
      // Serial over segments: they all accumulate into the same parameter gradients
      // (in segment order); the kernels inside parallelise.
      for (size_t i = 0; i < bc.segments.size(); ++i) {
        const int64_t row = bc.segments[i].row;
        attention_backward(attn_dims, w.attn, bc.segment_attn[i], dy.data() + row * d, w.attn_g,
                           dnormed.data() + row * d, ctx);
      }
    }
  }
  rmsnorm_backward(ctx, bc.u_attn.data(), w.attn_norm, bc.inv_attn.data(), dnormed.data(),
                   du.data(), w.attn_norm_g, N, d);
  TREX_PROFILE(profile::Op::kMhcPre);
  mhc_pre_backward(md, w.attn_hc, bc.attn_mhc, bc.x_in.data(), du.data(), coef, w.attn_hc_g, dx_in,
                   ctx);
}

// Selective recompute: frees the block's mHC pre / RMSNorm outputs (the MoE
// keeps no copy of its input either) and attention's recomputable arrays.
template <class T>
void drop_recomputable(BlockCache<T>& bc) {
  for (kernels::Array<T>* array : {&bc.u_attn, &bc.a, &bc.u_ffn, &bc.x_ffn, &bc.moe.x})
    *array = kernels::Array<T>{};
  attention_drop_recomputable(bc.attn);
  for (AttentionCache<T>& segment : bc.segment_attn) attention_drop_recomputable(segment);
}

// Refills what drop_recomputable freed with the forward's ops in its order
// (bitwise its values): mHC pre and RMSNorm again from the kept streams, then
// attention's norms, rotations and core, then the MoE's input.
template <class T>
void rematerialize_block(const ModelConfig& c, const BlockBinding<T>& w, int64_t layer,
                         BlockCache<T>& bc, const kernels::OpContext& ctx) {
  const int64_t N = bc.shape.tokens(), d = c.hidden_size;
  const MhcDims md = mhc_dims(c, N);
  const kernels::Backend& ops = ctx.ops();
  bc.u_attn.resize(N * d, ops);
  bc.a.resize(N * d, ops);
  sublayer_input(c, md, w.attn_hc, w.attn_norm, bc.x_in.data(), bc.attn_mhc, bc.u_attn.data(),
                 bc.a.data(), bc.inv_attn.data(), ctx);
  const AttentionDims attn_dims = AttentionDims::from_config(c, layer);
  {
    TREX_PROFILE(attention_op(attn_dims));
    if (bc.segments.empty()) {
      attention_rematerialize(attn_dims, w.attn, bc.a.data(), bc.attn, ctx);
    } else {
      for (size_t i = 0; i < bc.segments.size(); ++i)
        attention_rematerialize(attn_dims, w.attn, bc.a.data() + bc.segments[i].row * d,
                                bc.segment_attn[i], ctx);
    }
  }
  bc.a = kernels::Array<T>{};  // attention holds its copy
  bc.u_ffn.resize(N * d, ops);
  bc.moe.x.resize(N * d, ops);
  sublayer_input(c, md, w.ffn_hc, w.ffn_norm, bc.x_mid.data(), bc.ffn_mhc, bc.u_ffn.data(),
                 bc.moe.x.data(), bc.inv_ffn.data(), ctx);
}

// Frees everything of a block's cache but its input streams (full recompute).
template <class T>
void keep_only_block_input(BlockCache<T>& bc) {
  kernels::Array<T> x_in = std::move(bc.x_in);
  bc = BlockCache<T>{};
  bc.x_in = std::move(x_in);
}

void check_batch(const ModelConfig& c, const Batch& b) {
  require(b.B > 0 && b.S > 0, "batch: B and S must be positive");
  if (static_cast<int64_t>(b.input_ids.size()) != b.B * b.S)
    throw Error("batch: input_ids has " + std::to_string(b.input_ids.size()) +
                " entries, expected B·S = " + std::to_string(b.B * b.S))
        .field("input_ids");
  if (!b.labels.empty() && static_cast<int64_t>(b.labels.size()) != b.B * b.S)
    throw Error("batch: labels has " + std::to_string(b.labels.size()) + " entries, expected B·S")
        .field("labels");
  for (int64_t id : b.input_ids)
    if (id < 0 || id >= c.vocab_size)
      throw Error("batch: token id " + std::to_string(id) + " outside the vocabulary [0, " +
                  std::to_string(c.vocab_size) + ")")
          .field("input_ids");
  for (int64_t id : b.labels)
    if (id >= c.vocab_size)
      throw Error("batch: label " + std::to_string(id) + " outside the vocabulary").field("labels");
  if (!b.loss_weights.empty() && static_cast<int64_t>(b.loss_weights.size()) != b.B * b.S)
    throw Error("batch: loss_weights has " + std::to_string(b.loss_weights.size()) +
                " entries, expected B·S = " + std::to_string(b.B * b.S) + " or none")
        .field("loss_weights");
  for (float w : b.loss_weights)
    if (!std::isfinite(w)) throw Error("batch: a loss weight is not finite").field("loss_weights");
}

std::string token_at(int64_t b, int64_t t) {
  return " (row " + std::to_string(b) + ", token " + std::to_string(t) + ")";
}

// Segments of a packed batch, validated; empty when every row is one document at
// positions 0..S−1 (the unpacked path). With document_ids, a segment is a maximal
// run of equal ids; with position_ids only, a segment starts wherever the
// position is 0. Either way position_ids must count 0, 1, 2 … inside a segment.
std::vector<Segment> packed_segments(const Batch& b) {
  const int64_t B = b.B, S = b.S;
  const bool has_pos = !b.position_ids.empty(), has_doc = !b.document_ids.empty();
  if (has_pos && static_cast<int64_t>(b.position_ids.size()) != B * S)
    throw Error("batch: position_ids has " + std::to_string(b.position_ids.size()) +
                " entries, expected B·S = " + std::to_string(B * S) + " or none")
        .field("position_ids");
  if (has_doc && static_cast<int64_t>(b.document_ids.size()) != B * S)
    throw Error("batch: document_ids has " + std::to_string(b.document_ids.size()) +
                " entries, expected B·S = " + std::to_string(B * S) + " or none")
        .field("document_ids");
  if (!has_pos && !has_doc) return {};
  std::vector<Segment> segments;
  bool packed = false;
  for (int64_t row = 0; row < B; ++row) {
    int64_t start = 0;
    for (int64_t t = 0; t < S; ++t) {
      const int64_t r = row * S + t;
      bool starts = t == 0;
      if (has_doc && t > 0) {
        if (b.document_ids[r] < b.document_ids[r - 1])
          throw Error("batch: document_ids decrease from " + std::to_string(b.document_ids[r - 1]) +
                      " to " + std::to_string(b.document_ids[r]) + token_at(row, t) +
                      "; they must be non-decreasing along a row")
              .field("document_ids");
        starts = b.document_ids[r] != b.document_ids[r - 1];
      } else if (!has_doc && t > 0) {
        starts = b.position_ids[r] == 0;
      }
      if (starts) start = t;
      if (has_pos && b.position_ids[r] != t - start)
        throw Error("batch: position_ids is " + std::to_string(b.position_ids[r]) +
                    token_at(row, t) + ", expected " + std::to_string(t - start) +
                    ": positions must count 0, 1, 2 … from the start of every segment")
            .field("position_ids");
      if (t + 1 == S ||
          (has_doc ? b.document_ids[r + 1] != b.document_ids[r] : b.position_ids[r + 1] == 0)) {
        segments.push_back({row * S + start, t - start + 1});
        if (t + 1 < S) packed = true;
      }
    }
  }
  if (!packed) return {};  // one document per row: the batched path, bit for bit
  return segments;
}

// Segments of the MTP sequence (row b holds positions t = 0..S−2 at b·(S−1)+t;
// position t reads h_t and token t+1). A document at positions [s, s+len) of its
// row owns MTP positions s..s+len−2 — exactly the len−1 positions it has as a
// sequence of its own, at MTP positions 0..len−2 (`documents`). The position
// s+len−1 mixes the last token of one document with the first of the next: it
// becomes an attention segment of its own (attends only to itself), has no target
// and takes no part in the balance loss, so it reaches no document.
struct MtpSegments {
  std::vector<Segment> attention;  // covers every MTP position
  std::vector<Segment> documents;  // the document-owned ones
};

MtpSegments mtp_segments(const std::vector<Segment>& segments, int64_t S) {
  MtpSegments out;
  const int64_t S1 = S - 1;
  for (const Segment& seg : segments) {
    const int64_t b = seg.row / S, s = seg.row % S;
    if (seg.len >= 2) {
      out.attention.push_back({b * S1 + s, seg.len - 1});
      out.documents.push_back(out.attention.back());
    }
    if (s + seg.len - 1 <= S - 2) out.attention.push_back({b * S1 + s + seg.len - 1, 1});
  }
  return out;
}

// Segment of every token (unpacked: its row).
std::vector<int64_t> segment_index(const std::vector<Segment>& segments, int64_t B, int64_t S) {
  std::vector<int64_t> segment_of(static_cast<size_t>(B * S));
  if (segments.empty()) {
    for (int64_t r = 0; r < B * S; ++r) segment_of[r] = r / S;
  } else {
    for (size_t i = 0; i < segments.size(); ++i)
      std::fill_n(segment_of.begin() + segments[i].row, segments[i].len, static_cast<int64_t>(i));
  }
  return segment_of;
}

// What the losses read, built on the host from the batch and uploaded: the LM
// target of every token (−1: none), and for the MTP block (B·(S−1) positions)
// its input token ids, the rows of X^L it reads and its targets.
struct LossTargets {
  std::vector<int64_t> lm;
  std::vector<int64_t> mtp_next_ids, mtp_rows, mtp;
};

// Targets that count (>= 0; check_batch has ruled out any >= vocab).
int64_t counted_targets(const std::vector<int64_t>& targets) {
  return std::count_if(targets.begin(), targets.end(), [](int64_t t) { return t >= 0; });
}

LossTargets loss_targets(const Batch& batch, const std::vector<Segment>& segments, bool mtp) {
  const int64_t B = batch.B, S = batch.S, S1 = S - 1;
  const std::vector<int64_t>& labels = batch.labels.empty() ? batch.input_ids : batch.labels;
  const std::vector<int64_t> segment_of = segment_index(segments, B, S);
  LossTargets out;
  out.lm.assign(static_cast<size_t>(B * S), -1);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t + 1 < S; ++t) {
      const int64_t r = b * S + t;
      if (labels[r + 1] >= 0 && segment_of[r] == segment_of[r + 1]) out.lm[r] = labels[r + 1];
    }
  if (!mtp) return out;
  out.mtp_next_ids.resize(static_cast<size_t>(B * S1));
  out.mtp_rows.resize(static_cast<size_t>(B * S1));
  // MTP position t predicts token t+2 from h_t and token t+1: all three must be
  // in one segment (a boundary row has no target; see mtp_segments).
  out.mtp.assign(static_cast<size_t>(B * S1), -1);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S1; ++t) {
      const int64_t r = b * S + t;
      out.mtp_next_ids[b * S1 + t] = batch.input_ids[r + 1];
      out.mtp_rows[b * S1 + t] = r;
      if (t + 2 < S && labels[r + 2] >= 0 && segment_of[r] == segment_of[r + 2])
        out.mtp[b * S1 + t] = labels[r + 2];
    }
  return out;
}

}  // namespace

template <class T>
Model<T>::Model(ModelConfig config)
    : config_(std::move(config)),
      params_(parameter_specs(config_)),
      state_(std::make_unique<State>()) {
  config_.validate("model config");
  for (size_t i = 0; i < hash_table_names(config_).size(); ++i)
    hash_tables_.emplace_back(static_cast<size_t>(config_.vocab_size * config_.num_experts_per_tok),
                              0);
}

template <class T>
Model<T>::Model(ModelConfig config, ParamStore<T> params, HashTables hash_tables)
    : config_(std::move(config)),
      params_(std::move(params)),
      hash_tables_(std::move(hash_tables)),
      state_(std::make_unique<State>()) {}

template <class T>
Model<T>::~Model() = default;
template <class T>
Model<T>::Model(Model&&) noexcept = default;
template <class T>
Model<T>& Model<T>::operator=(Model&&) noexcept = default;

template <class T>
Model<T> Model<T>::from_checkpoint(const std::string& dir, NamingScheme* scheme) {
  LoadedCheckpoint<T> loaded = load_checkpoint<T>(dir);
  if (scheme) *scheme = loaded.scheme;
  return Model(std::move(loaded.config), std::move(loaded.params), std::move(loaded.hash_tables));
}

template <class T>
void Model<T>::init_random(uint64_t seed) {
  const double sigma = config_.initializer_range;
  // Seeds follow the whole model's tensor order, so a store holding only some
  // routed experts (expert_shard.hpp) gets the same values for them.
  int64_t tensor_index = -1;
  for (const ParamSpec& spec : parameter_specs(config_)) {
    ++tensor_index;
    T* v = params_.value_or_null(spec.name);
    if (!v) continue;
    const int64_t n = spec.numel();
    const std::string& name = spec.name;
    auto ends_with = [&](const std::string& s) {
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    Rng rng(seed, {0x1417, static_cast<uint64_t>(tensor_index)});
    if (ends_with("norm.weight")) {
      std::fill(v, v + n, T(1));
    } else if (ends_with("_scale")) {
      std::fill(v, v + n, T(1));
    } else if (ends_with("_base") || ends_with("attn_sink") || ends_with(".ape") ||
               ends_with("gate.bias")) {
      std::fill(v, v + n, T(0));
    } else {
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(sigma * rng.normal());
    }
  }
  // Balanced hash table: token t gets K distinct experts, spread round-robin
  // over a seeded permutation so every expert serves ~V·K/E tokens.
  const int64_t V = config_.vocab_size, K = config_.num_experts_per_tok,
                E = config_.n_routed_experts;
  for (size_t l = 0; l < hash_tables_.size(); ++l) {
    Rng rng(seed, {0x7a5b, static_cast<uint64_t>(l)});
    std::vector<int64_t> perm(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) perm[e] = e;
    auto& table = hash_tables_[l];
    for (int64_t t = 0; t < V; ++t) {
      if (t % E == 0)
        for (int64_t i = E - 1; i > 0; --i)
          std::swap(perm[i], perm[rng.uniform_int(int64_t{0}, i)]);
      for (int64_t k = 0; k < K; ++k) table[t * K + k] = perm[(t + k) % E];
    }
  }
}

StageSpec whole_model_stage(const ModelConfig& config) {
  return StageSpec{0, config.num_hidden_layers, true, true};
}

bool stages_hold(const ModelConfig& config, std::span<const StageSpec> stages,
                 const ParamSpec& spec) {
  const bool mtp = config.num_nextn_predict_layers > 0;
  for (const StageSpec& s : stages) {
    if (spec.layer >= 0 && spec.layer < config.num_hidden_layers) {
      if (spec.layer >= s.first_layer && spec.layer < s.last_layer) return true;
    } else if (spec.name == "embed.weight") {
      if (s.has_embedding || (s.has_head && mtp)) return true;
    } else if (s.has_head) {
      return true;  // the head's globals and the MTP blocks
    }
  }
  return false;
}

bool holds_tied_embedding(const ModelConfig& config, std::span<const StageSpec> stages) {
  bool embedding = false, head = false;
  for (const StageSpec& s : stages) {
    embedding = embedding || s.has_embedding;
    head = head || s.has_head;
  }
  return head && !embedding && config.num_nextn_predict_layers > 0;
}

template <class T>
void Model<T>::check_stage(const StageSpec& stage) const {
  if (stage.first_layer < 0 || stage.last_layer < stage.first_layer ||
      stage.last_layer > config_.num_hidden_layers)
    throw Error("stage: layers [" + std::to_string(stage.first_layer) + ", " +
                std::to_string(stage.last_layer) + ") are not a range inside [0, " +
                std::to_string(config_.num_hidden_layers) + ")")
        .field("stage");
}

template <class T>
int64_t Model<T>::count_lm_targets(const Batch& batch) const {
  check_batch(config_, batch);
  const std::vector<Segment> segments = packed_segments(batch);
  return counted_targets(loss_targets(batch, segments, false).lm);
}

template <class T>
int64_t Model<T>::stage_activation_size(const Batch& batch) const {
  return batch.B * batch.S * config_.hc_mult * config_.hidden_size;
}

template <class T>
LossBreakdown Model<T>::forward_backward(const Batch& batch, const LossOptions& loss,
                                         const StepOptions& step, T* logits, T* mtp_logits) {
  StageCache<T>& cache = state_->whole;
  const LossBreakdown out =
      forward_stage(whole_model_stage(config_), batch, loss, step, step.gradient_weight, nullptr,
                    nullptr, cache, logits, mtp_logits);
  if (step.backward) backward_stage(cache, nullptr, nullptr);
  return out;
}

template <class T>
std::vector<double> Model<T>::label_log_probs(const Batch& batch, double temperature) {
  LossOptions loss;
  loss.mtp_weight = 0;
  loss.balance_loss_weight = 0;
  loss.logit_temperature = temperature;
  StepOptions step;
  step.backward = false;
  std::vector<double> out;
  step.label_log_probs = &out;
  forward_backward(batch, loss, step);
  return out;
}

template <class T>
LossBreakdown Model<T>::forward_stage(const StageSpec& stage, const Batch& batch,
                                      const LossOptions& loss, const StepOptions& step,
                                      double gradient_weight, const T* x_in, T* x_out,
                                      StageCache<T>& cache, T* logits, T* mtp_logits) {
  const DecodedWeightsScope<T> decoded{params_};
  const ModelConfig& c = config_;
  const profile::PhaseScope forward_phase(profile::Phase::kForward);
  check_stage(stage);
  check_batch(c, batch);
  require(stage.has_embedding || x_in, "forward_stage: a stage without the embedding needs x_in");
  require(stage.has_head || x_out, "forward_stage: a stage without the head needs x_out");
  const std::vector<Segment> segments = packed_segments(batch);
  const int64_t B = batch.B, S = batch.S, N = B * S, d = c.hidden_size, n = c.hc_mult,
                V = c.vocab_size;
  const int64_t L = c.num_hidden_layers, first = stage.first_layer,
                layers = stage.last_layer - stage.first_layer;
  const bool run_mtp = stage.has_head && c.num_nextn_predict_layers > 0 &&
                       (loss.mtp_weight != 0.0 || mtp_logits) && S >= 2;
  if (step.fixed_selection) {
    require(recompute_ != ActivationRecompute::kFull && (!cache.impl_ || !cache.impl_->recompute),
            "fixed_selection needs activation recompute none or selective (full recomputation "
            "keeps no selections)");
    require(cache.impl_ && cache.impl_->stage == stage &&
                cache.impl_->blocks.size() == static_cast<size_t>(layers) && cache.impl_->B == B &&
                cache.impl_->S == S && cache.impl_->segments == segments,
            "fixed_selection needs a previous forward of the same stage, batch shape and segments");
  }
  if (!cache.impl_) cache.impl_ = std::make_unique<typename StageCache<T>::Impl>();
  typename StageCache<T>::Impl& st = *cache.impl_;
  st.stage = stage;
  st.loss = loss;
  st.step = step;
  st.backward = step.backward;
  st.gradient_weight = gradient_weight;
  st.B = B;
  st.S = S;
  st.blocks.resize(static_cast<size_t>(layers));
  st.recompute = recompute_ == ActivationRecompute::kFull && step.backward;
  st.selective = recompute_ == ActivationRecompute::kSelective && step.backward;
  const kernels::Backend& ops = ops_.ops();
  st.ids.assign_from_host(batch.input_ids.data(), N, ops);
  st.segments = segments;
  LossBreakdown out;
  out.expert_load.resize(static_cast<size_t>(L));

  // Null on a pipeline stage that has neither the embedding nor the MTP block.
  // A bf16 store's embedding is gathered from its 16 bits (never decoded whole).
  const uint16_t* embed_bf16 = params_.bf16_weight("embed.weight");
  const Tensor embed = embed_bf16 ? Tensor(const_cast<uint16_t*>(embed_bf16), DType::kBF16, {V, d})
                                  : Tensor::optional(params_.weight("embed.weight"), {V, d});
  // The residual streams between blocks [N, n, d].
  kernels::Buffer x = ops.allocate(kernels::dtype_of<T>(), N * n * d);
  kernels::Buffer x_next = ops.allocate(kernels::dtype_of<T>(), N * n * d);
  if (stage.has_embedding) {
    // Embedding and stream expansion.
    TREX_PROFILE(profile::Op::kEmbedding);
    ops.gather_rows(embed, st.ids.view({N}), x.view({N, n, d}));
  } else {
    ops.copy(Tensor::of(x_in, {N, n, d}), x.view({N, n, d}));
  }
  const SeqShape shape{B, S};
  for (int64_t l = first; l < stage.last_layer; ++l) {
    const BlockBinding<T> binding = bind_block(c, params_, hash_tables_, l);
    BlockCache<T>& bc = st.blocks[static_cast<size_t>(l - first)];
    out.indexer +=
        block_forward(c, binding, l, shape, segments, segments, x.data<T>(), st.ids.data(), loss,
                      step, gradient_weight, bc, x_next.data<T>(), ops_, token_dispatchers_);
    std::swap(x, x_next);
    out.expert_load[l] = bc.moe.expert_load;
    if (bc.moe.balance_loss_active) out.balance += bc.moe.balance_loss;
    if (st.recompute) keep_only_block_input(bc);
    if (st.selective) drop_recomputable(bc);
  }
  if (!stage.has_head) {
    ops.copy(x.view({N, n, d}), Tensor::of(x_out, {N, n, d}));
    st.mtp.clear();
    return out;
  }
  st.x_final = std::move(x);
  // The targets of the LM and MTP losses, from the host batch (no target crosses
  // a segment boundary).
  const LossTargets targets = loss_targets(batch, segments, run_mtp);

  // Main head. The LM loss gradient is seeded here (fused with the loss).
  const MhcDims md = mhc_dims(c, N);
  const HcHeadWeights<T> head_w{required_weight(params_, "hc_head_fn"),
                                required_weight(params_, "hc_head_base"),
                                required_weight(params_, "hc_head_scale")};
  st.hc_out.resize(N * d, ops);
  st.inv_final.resize(N, ops);
  st.final_normed.resize(N * d, ops);
  {
    TREX_PROFILE(profile::Op::kMhcHead);
    hc_head_forward(md, head_w, st.x_final.template data<T>(), st.hc_out.data(), st.head, ops_);
  }
  rmsnorm_forward(ops_, st.hc_out.data(), required_weight(params_, "norm.weight"),
                  st.final_normed.data(), st.inv_final.data(), N, d, c.rms_norm_eps);
  st.targets.assign_from_host(targets.lm.data(), N, ops);
  const LmLossDims ld{N, d, V, 0};
  out.lm_tokens = counted_targets(targets.lm);
  // A zero weight contributes no gradient: the loss is then computed as a plain mean.
  const bool weighted = step.backward && gradient_weight != 0.0;
  const double weight = weighted ? gradient_weight : 1.0;
  st.d_final.assign(step.backward ? N * d : 0, T(0), ops);
  {
    LmLossOutputs<T> o;
    o.logits = logits;
    if (weighted) {
      o.dh = st.d_final.data();
      o.dhead = params_.grad("head.weight");
    }
    // LM row r predicts labels[r + 1]: its weight is that label's.
    std::vector<T> row_weights;
    if (!batch.loss_weights.empty()) {
      if (run_mtp)
        throw Error("batch: loss_weights need mtp_weight = 0 (the MTP loss is not weighted)")
            .field("loss_weights");
      row_weights.assign(static_cast<size_t>(N), T(0));
      for (int64_t r = 0; r < N; ++r)
        if (targets.lm[r] >= 0) row_weights[r] = static_cast<T>(batch.loss_weights[r + 1]);
    }
    std::vector<T> row_losses(step.label_log_probs ? static_cast<size_t>(N) : 0);
    o.per_token_loss = step.label_log_probs ? row_losses.data() : nullptr;
    const double scale = out.lm_tokens > 0 ? weight / static_cast<double>(out.lm_tokens) : 0.0;
    // logits / τ = (h / τ)·headᵀ: the head sees h / τ, and dh comes back scaled by 1 / τ.
    const double tau = loss.logit_temperature;
    if (!(tau > 0) || !std::isfinite(tau))
      throw Error("logit temperature must be > 0").field("logit_temperature");
    kernels::Array<T> tempered;
    const T* head_input = st.final_normed.data();
    if (tau != 1.0) {
      if (run_mtp)
        throw Error("a logit temperature needs mtp_weight = 0").field("logit_temperature");
      tempered.resize(N * d, ops);
      ops.copy(st.final_normed.view({N, d}), tempered.view({N, d}));
      ops.scale(tempered.view({N, d}), 1.0 / tau);
      head_input = tempered.data();
    }
    out.lm = lm_head_cross_entropy(
                 ld, head_input, required_weight(params_, "head.weight"), st.targets.data(),
                 row_weights.empty() ? nullptr : row_weights.data(), scale, o, ops_)
                 .loss /
             weight;
    if (tau != 1.0 && weighted) ops.scale(st.d_final.view({N, d}), 1.0 / tau);
    if (step.label_log_probs) {
      std::vector<double>& lp = *step.label_log_probs;
      lp.assign(static_cast<size_t>(N), 0.0);
      for (int64_t r = 0; r < N; ++r)
        if (targets.lm[r] >= 0) lp[r + 1] = -static_cast<double>(row_losses[r]);
    }
  }

  // MTP block(s) (depth 1 in V4; each further depth would chain on the previous one).
  // Its forward and loss (with the seeded gradient) run here, its backward in
  // backward_stage.
  st.mtp.resize(run_mtp ? 1 : 0);
  st.mtp_backward = false;
  if (run_mtp) {
    MtpCache<T>& mc = st.mtp[0];
    const int64_t layer = L, S1 = S - 1, M = B * S1;
    const std::string p = block_prefix(c, layer);
    TREX_PROFILE(profile::Op::kMtpOther);
    mc.M = M;
    mc.next_ids.assign_from_host(targets.mtp_next_ids.data(), M, ops);
    mc.rows.assign_from_host(targets.mtp_rows.data(), M, ops);
    mc.e.resize(M * d, ops);
    mc.h.resize(M * n * d, ops);
    ops.gather_rows(embed, mc.next_ids.view({M}), mc.e.view({M, d}));
    ops.gather_rows(st.x_final.view({N, n * d}), mc.rows.view({M}), mc.h.view({M, n * d}));
    mc.e_inv.resize(M, ops);
    mc.e_norm.resize(M * d, ops);
    mc.h_inv.resize(M * n, ops);
    mc.h_norm.resize(M * n * d, ops);
    rmsnorm_forward(ops_, mc.e.data(), required_weight(params_, p + "enorm.weight"),
                    mc.e_norm.data(), mc.e_inv.data(), M, d, c.rms_norm_eps);
    rmsnorm_forward(ops_, mc.h.data(), required_weight(params_, p + "hnorm.weight"),
                    mc.h_norm.data(), mc.h_inv.data(), M * n, d, c.rms_norm_eps);
    mc.e_proj.resize(M * d, ops);
    kernels::Array<T> xm(M * n * d, ops);
    {
      TREX_PROFILE(profile::Op::kGemmMtpProj, profile::linear_flops(M * (n + 1), d, d));
      ops.linear_forward(mc.e_norm.view({M, d}),
                         Tensor::of(required_weight(params_, p + "e_proj.weight"), {d, d}),
                         mc.e_proj.view({M, d}), {ops_.precision});
      ops.linear_forward(mc.h_norm.view({M * n, d}),
                         Tensor::of(required_weight(params_, p + "h_proj.weight"), {d, d}),
                         xm.view({M * n, d}), {ops_.precision});
    }
    ops.broadcast_add(mc.e_proj.view({M, d}), xm.view({M, n, d}));
    const BlockBinding<T> bw = bind_block(c, params_, hash_tables_, layer);
    mc.x_out.resize(M * n * d, ops);
    const SeqShape mshape{B, S1};
    const MtpSegments mseg = mtp_segments(segments, S);
    out.indexer += block_forward(c, bw, layer, mshape, mseg.attention, mseg.documents, xm.data(),
                                 mc.next_ids.data(), loss, step, gradient_weight, mc.block,
                                 mc.x_out.data(), ops_, token_dispatchers_);
    out.expert_load.push_back(mc.block.moe.expert_load);
    if (mc.block.moe.balance_loss_active) out.balance += mc.block.moe.balance_loss;
    if (st.recompute) keep_only_block_input(mc.block);
    if (st.selective) drop_recomputable(mc.block);
    const MhcDims mmd = mhc_dims(c, M);
    const HcHeadWeights<T> mhw{required_weight(params_, p + "hc_head_fn"),
                               required_weight(params_, p + "hc_head_base"),
                               required_weight(params_, p + "hc_head_scale")};
    mc.hc_out.resize(M * d, ops);
    mc.inv_final.resize(M, ops);
    mc.final_normed.resize(M * d, ops);
    {
      TREX_PROFILE(profile::Op::kMhcHead);
      hc_head_forward(mmd, mhw, mc.x_out.data(), mc.hc_out.data(), mc.head, ops_);
    }
    rmsnorm_forward(ops_, mc.hc_out.data(), required_weight(params_, p + "norm.weight"),
                    mc.final_normed.data(), mc.inv_final.data(), M, d, c.rms_norm_eps);
    mc.targets.assign_from_host(targets.mtp.data(), M, ops);
    out.mtp_tokens = counted_targets(targets.mtp);
    // λ goes into the loss scale so that dhead and dh carry it; λ = 0 (logits
    // only) skips the MTP backward.
    st.mtp_backward = weighted && loss.mtp_weight != 0.0;
    const double lambda = loss.mtp_weight != 0.0 ? loss.mtp_weight : 1.0;
    st.d_mfinal.assign(st.mtp_backward ? M * d : 0, T(0), ops);
    LmLossOutputs<T> o;
    o.logits = mtp_logits;
    if (st.mtp_backward) {
      o.dh = st.d_mfinal.data();
      o.dhead = params_.grad("head.weight");
    }
    const double mtp_weight = st.mtp_backward ? lambda * weight : lambda;
    const double scale =
        out.mtp_tokens > 0 ? mtp_weight / static_cast<double>(out.mtp_tokens) : 0.0;
    const LmLossDims mld{M, d, V, 0};
    out.mtp =
        lm_head_cross_entropy(mld, mc.final_normed.data(), required_weight(params_, "head.weight"),
                              mc.targets.data(), scale, o, ops_)
            .loss /
        mtp_weight;
  }
  out.total =
      out.lm + loss.mtp_weight * out.mtp + out.balance + loss.indexer_loss_weight * out.indexer;
  return out;
}

template <class T>
void Model<T>::backward_stage(StageCache<T>& cache, const T* d_out, T* d_in) {
  require(cache.impl_ && cache.impl_->backward,
          "backward_stage needs a forward_stage with backward into the same cache");
  typename StageCache<T>::Impl& st = *cache.impl_;
  const StageSpec& stage = st.stage;
  require(stage.has_head || d_out, "backward_stage: a stage without the head needs d_out");
  require(stage.has_embedding || d_in, "backward_stage: a stage without the embedding needs d_in");
  const DecodedWeightsScope<T> decoded{params_};
  const ModelConfig& c = config_;
  const profile::PhaseScope backward_phase(profile::Phase::kBackward);
  const int64_t B = st.B, S = st.S, N = B * S, d = c.hidden_size, n = c.hc_mult;
  const int64_t L = c.num_hidden_layers;
  const kernels::Backend& ops = ops_.ops();
  // Full recompute: a block's forward again from its kept input with the
  // forward's arguments, into the scratch cache the backward then reads (the
  // block's output is not needed; `out` receives it).
  auto cache_for_backward = [&](const BlockBinding<T>& w, int64_t layer, const SeqShape& shape,
                                const std::vector<Segment>& attention_segments,
                                const std::vector<Segment>& balance_segments, BlockCache<T>& kept,
                                const int64_t* ids, T* out) -> const BlockCache<T>& {
    if (st.selective) {
      const profile::PhaseScope recompute_phase(profile::Phase::kRecompute);
      rematerialize_block(c, w, layer, kept, ops_);
    }
    if (!st.recompute) return kept;
    const profile::PhaseScope recompute_phase(profile::Phase::kRecompute);
    block_forward(c, w, layer, shape, attention_segments, balance_segments, kept.x_in.data(), ids,
                  st.loss, st.step, st.gradient_weight, st.recomputed, out, ops_,
                  token_dispatchers_);
    return st.recomputed;
  };
  // dLoss/d(streams) between blocks [N, n, d].
  kernels::Buffer dx = ops.allocate(kernels::dtype_of<T>(), N * n * d);
  if (!stage.has_head) {
    ops.copy(Tensor::of(d_out, {N, n, d}), dx.view({N, n, d}));
  } else {
    if (st.mtp_backward) {
      // MTP block backward, from the gradient its loss seeded in the forward.
      MtpCache<T>& mc = st.mtp[0];
      const int64_t layer = L, M = mc.M;
      const std::string p = block_prefix(c, layer);
      TREX_PROFILE(profile::Op::kMtpOther);
      const MhcDims mmd = mhc_dims(c, M);
      const HcHeadWeights<T> mhw{required_weight(params_, p + "hc_head_fn"),
                                 required_weight(params_, p + "hc_head_base"),
                                 required_weight(params_, p + "hc_head_scale")};
      BlockBinding<T> bw = bind_block(c, params_, hash_tables_, layer);
      kernels::Array<T> dhc(M * d, ops), dxo(M * n * d, ops), dxm(M * n * d, ops);
      rmsnorm_backward(ops_, mc.hc_out.data(), required_weight(params_, p + "norm.weight"),
                       mc.inv_final.data(), st.d_mfinal.data(), dhc.data(),
                       params_.grad(p + "norm.weight"), M, d);
      HcHeadGrads<T> mhg{params_.grad(p + "hc_head_fn"), params_.grad(p + "hc_head_base"),
                         params_.grad(p + "hc_head_scale")};
      {
        TREX_PROFILE(profile::Op::kMhcHead);
        hc_head_backward(mmd, mhw, mc.head, mc.x_out.data(), dhc.data(), mhg, dxo.data(), ops_);
      }
      const MtpSegments mseg = mtp_segments(st.segments, S);
      // dxm takes the recomputed output; block_backward then overwrites it.
      const BlockCache<T>& mbc =
          cache_for_backward(bw, layer, SeqShape{B, S - 1}, mseg.attention, mseg.documents,
                             mc.block, mc.next_ids.data(), dxm.data());
      block_backward(c, bw, layer, st.loss, mbc, dxo.data(), dxm.data(), ops_, token_dispatchers_);
      if (st.selective) drop_recomputable(mc.block);
      // xm = e_proj(enorm(e)) broadcast + h_proj(hnorm(h)).
      kernels::Array<T> de_proj(M * d, ops), dh_norm(M * n * d, ops), dh(M * n * d, ops),
          de_norm(M * d, ops), de(M * d, ops);
      ops.sum_copies_add(dxm.view({M, n, d}), de_proj.view({M, d}));
      {
        TREX_PROFILE(profile::Op::kGemmMtpProj, profile::linear_backward_flops(M * (n + 1), d, d));
        ops.linear_backward(mc.h_norm.view({M * n, d}),
                            Tensor::of(required_weight(params_, p + "h_proj.weight"), {d, d}),
                            dxm.view({M * n, d}), dh_norm.view({M * n, d}),
                            Tensor::optional(params_.grad(p + "h_proj.weight"), {d, d}),
                            {ops_.precision});
        ops.linear_backward(mc.e_norm.view({M, d}),
                            Tensor::of(required_weight(params_, p + "e_proj.weight"), {d, d}),
                            de_proj.view({M, d}), de_norm.view({M, d}),
                            Tensor::optional(params_.grad(p + "e_proj.weight"), {d, d}),
                            {ops_.precision});
      }
      rmsnorm_backward(ops_, mc.h.data(), required_weight(params_, p + "hnorm.weight"),
                       mc.h_inv.data(), dh_norm.data(), dh.data(), params_.grad(p + "hnorm.weight"),
                       M * n, d);
      rmsnorm_backward(ops_, mc.e.data(), required_weight(params_, p + "enorm.weight"),
                       mc.e_inv.data(), de_norm.data(), de.data(), params_.grad(p + "enorm.weight"),
                       M, d);
      // The MTP block's use of the embedding (shared with the first stage's) and of X^L.
      ops.scatter_add_rows(de.view({M, d}), mc.next_ids.view({M}),
                           Tensor::of(params_.grad("embed.weight"), {c.vocab_size, d}));
      ops.scatter_add_rows(dh.view({M, n * d}), mc.rows.view({M}), dx.view({N, n * d}));
      if (st.step.on_gradients_ready) st.step.on_gradients_ready(layer);
    }
    // Main head backward.
    const MhcDims md = mhc_dims(c, N);
    const HcHeadWeights<T> head_w{required_weight(params_, "hc_head_fn"),
                                  required_weight(params_, "hc_head_base"),
                                  required_weight(params_, "hc_head_scale")};
    kernels::Array<T> dhc(N * d, ops), dxh(N * n * d, ops);
    rmsnorm_backward(ops_, st.hc_out.data(), required_weight(params_, "norm.weight"),
                     st.inv_final.data(), st.d_final.data(), dhc.data(),
                     params_.grad("norm.weight"), N, d);
    HcHeadGrads<T> hg{params_.grad("hc_head_fn"), params_.grad("hc_head_base"),
                      params_.grad("hc_head_scale")};
    TREX_PROFILE(profile::Op::kMhcHead);
    hc_head_backward(md, head_w, st.head, st.x_final.template data<T>(), dhc.data(), hg, dxh.data(),
                     ops_);
    ops.add(dxh.view({N, n, d}), dx.view({N, n, d}));
  }
  kernels::Buffer dx_prev = ops.allocate(kernels::dtype_of<T>(), N * n * d);
  kernels::Buffer recomputed_out;  // full recompute: the (unused) output of a re-run block
  if (st.recompute) recomputed_out = ops.allocate(kernels::dtype_of<T>(), N * n * d);
  for (int64_t l = stage.last_layer - 1; l >= stage.first_layer; --l) {
    BlockBinding<T> binding = bind_block(c, params_, hash_tables_, l);
    const BlockCache<T>& bc =
        cache_for_backward(binding, l, SeqShape{B, S}, st.segments, st.segments,
                           st.blocks[static_cast<size_t>(l - stage.first_layer)], st.ids.data(),
                           st.recompute ? recomputed_out.data<T>() : nullptr);
    block_backward(c, binding, l, st.loss, bc, dx.data<T>(), dx_prev.data<T>(), ops_,
                   token_dispatchers_);
    // Selective: the refilled arrays go again (one block's worth at a time).
    if (st.selective) drop_recomputable(st.blocks[static_cast<size_t>(l - stage.first_layer)]);
    std::swap(dx, dx_prev);
    if (st.step.on_gradients_ready) st.step.on_gradients_ready(l);
  }
  st.recomputed = BlockCache<T>{};
  if (!stage.has_embedding) {
    ops.copy(dx.view({N, n, d}), Tensor::of(d_in, {N, n, d}));
    return;
  }
  // Embedding: the four streams are copies of the same row.
  TREX_PROFILE(profile::Op::kEmbedding);
  ops.scatter_add_rows(dx.view({N, n, d}), st.ids.view({N}),
                       Tensor::of(params_.grad("embed.weight"), {c.vocab_size, d}));
  if (st.step.on_gradients_ready) st.step.on_gradients_ready(-1);
}

template <class T>
void Model<T>::update_router_biases(const LossBreakdown& last, double speed) {
  for (size_t l = 0; l < last.expert_load.size(); ++l) {
    const std::string name = block_prefix(config_, static_cast<int64_t>(l)) + "ffn.gate.bias";
    T* bias = params_.value_or_null(name);
    if (!bias) continue;  // hash-routed layer
    update_router_bias(bias, last.expert_load[l].data(), config_.n_routed_experts, speed, ops_);
  }
}

template class StageCache<float>;
template class StageCache<double>;
template class Model<float>;
template class Model<double>;

}  // namespace trex::model
