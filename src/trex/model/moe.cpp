#include "trex/model/moe.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"
#include "trex/model/config.hpp"
#include "trex/model/local_token_dispatcher.hpp"

namespace trex::model {

Error moe_error(const std::string& message, const std::string& field) {
  Error error("moe: " + message);
  error.field(field);
  return error;
}

namespace {

void validate_dims(const MoeDims& dims) {
  if (dims.batch <= 0) throw moe_error("batch must be positive", "moe.batch");
  if (dims.seq <= 0) throw moe_error("seq must be positive", "moe.seq");
  if (dims.hidden <= 0) throw moe_error("hidden must be positive", "moe.hidden");
  if (dims.n_experts <= 0) throw moe_error("n_experts must be positive", "moe.n_experts");
  if (dims.inter <= 0) throw moe_error("inter must be positive", "moe.inter");
  if (dims.top_k <= 0) throw moe_error("top_k must be positive", "moe.top_k");
  if (!dims.hash_routed && dims.top_k > dims.n_experts)
    throw moe_error("top_k " + std::to_string(dims.top_k) + " exceeds n_experts " +
                        std::to_string(dims.n_experts),
                    "moe.top_k");
  if (dims.n_experts > INT32_MAX) throw moe_error("too many experts", "moe.n_experts");
  if (dims.balance_loss_weight < 0.0)
    throw moe_error("balance_loss_weight must be >= 0", "moe.balance_loss_weight");
  int64_t end = 0;  // sequences ascend and do not overlap
  for (const MoeSequence& s : dims.balance_sequences) {
    if (s.len <= 0 || s.row < end || s.row + s.len > dims.tokens())
      throw moe_error("balance sequence [" + std::to_string(s.row) + ", +" + std::to_string(s.len) +
                          ") overlaps another or lies outside the " +
                          std::to_string(dims.tokens()) + " tokens",
                      "moe.balance_sequences");
    end = s.row + s.len;
  }
}

template <class T>
void validate_weights(const MoeDims& dims, const MoeWeights<T>& w,
                      const TokenDispatcher<T>& dispatcher) {
  if (!w.gate) throw moe_error("router weight is null", "moe.gate");
  const auto E = static_cast<int64_t>(dims.n_experts);
  if (static_cast<int64_t>(w.w1.size()) != E || static_cast<int64_t>(w.w2.size()) != E ||
      static_cast<int64_t>(w.w3.size()) != E)
    throw moe_error("expected " + std::to_string(E) + " routed expert weights", "moe.w1");
  // An expert-parallel dispatcher needs only the experts this rank runs (the
  // others may be stored elsewhere: expert_shard.hpp); a local one every expert.
  bool runs_every_expert = true;
  for (int64_t e = 0; e < E; ++e)
    runs_every_expert = runs_every_expert && dispatcher.runs_expert(e);
  for (int64_t e = 0; e < E; ++e) {
    if (!dispatcher.runs_expert(e)) continue;
    if (!w.w1[e] || !w.w2[e] || !w.w3[e])
      throw moe_error(
          "routed expert " + std::to_string(e) +
              (runs_every_expert ? " is not stored here (expert weights sharded over EP ranks?): "
                                   "this MoE path runs every expert here"
                                 : " has a null weight on its owner"),
          "moe.experts." + std::to_string(e));
  }
  has_shared_expert(w);
  if (dims.hash_routed) {
    if (!w.tid2eid) throw moe_error("hash-routed layer without tid2eid", "moe.tid2eid");
    if (dims.vocab <= 0) throw moe_error("hash-routed layer needs vocab > 0", "moe.vocab");
  }
}

template <class T>
RoutedTokens<T> routed_tokens(const MoeDims& dims, const MoeCache<T>& cache,
                              const kernels::OpContext& ctx) {
  RoutedTokens<T> tokens;
  tokens.backend = &ctx.ops();
  tokens.tokens = dims.tokens();
  tokens.hidden = dims.hidden;
  tokens.n_experts = dims.n_experts;
  tokens.top_k = dims.top_k;
  tokens.x = cache.x.data();
  tokens.expert_index = cache.expert_index.data();
  tokens.combine = cache.combine.data();
  return tokens;
}

// The layer's side of a dispatcher's forward: the routed experts keep their
// activations per group in cache.routed; the shared expert writes y.
template <class T>
class LayerForward final : public ExpertForwardCompute<T> {
 public:
  LayerForward(const MoeDims& dims, const MoeWeights<T>& weights, MoeCache<T>& cache, T* y,
               const kernels::OpContext& ctx)
      : dims_(dims), weights_(weights), cache_(cache), y_(y), ctx_(ctx) {}
  void experts(int64_t group, const GroupedRows<T>& rows, T* out) override {
    groups_ = std::max(groups_, group + 1);
    if (static_cast<int64_t>(cache_.routed.size()) < groups_)
      cache_.routed.resize(static_cast<size_t>(groups_));
    grouped_experts_forward(dims_, weights_, rows, cache_.routed[static_cast<size_t>(group)], out,
                            ctx_);
  }
  void local() override {
    shared_expert_forward(dims_, weights_, cache_.x.data(), cache_.shared_gate_pre,
                          cache_.shared_up_pre, y_, ctx_);
  }
  int64_t groups() const { return groups_; }

 private:
  const MoeDims& dims_;
  const MoeWeights<T>& weights_;
  MoeCache<T>& cache_;
  T* y_;
  const kernels::OpContext& ctx_;
  int64_t groups_ = 0;
};

// The layer's side of a dispatcher's backward: expert weight gradients, the
// shared expert writing dx, and the router of every finished token range.
template <class T>
class LayerBackward final : public ExpertBackwardCompute<T> {
 public:
  LayerBackward(const MoeDims& dims, const MoeWeights<T>& weights, const MoeGrads<T>& grads,
                const MoeCache<T>& cache, const BalanceLossBackward& balance, const T* dy, T* dx,
                const T* d_combine, T* dlogits, const kernels::OpContext& ctx)
      : dims_(dims),
        weights_(weights),
        grads_(grads),
        cache_(cache),
        balance_(balance),
        dy_(dy),
        dx_(dx),
        d_combine_(d_combine),
        dlogits_(dlogits),
        ctx_(ctx) {}
  void experts(int64_t group, const GroupedRows<T>& rows, const T* dout, T* dx,
               T* dscale) override {
    if (group < 0 || group >= static_cast<int64_t>(cache_.routed.size()) ||
        cache_.routed[static_cast<size_t>(group)].gate_pre.size() != rows.rows() * dims_.inter)
      throw moe_error("cache does not match the dispatcher's rows (run moe_forward first)",
                      "moe.cache");
    grouped_experts_backward(dims_, weights_, grads_, rows,
                             cache_.routed[static_cast<size_t>(group)], dout, dx, dscale, ctx_);
  }
  void local() override {
    shared_expert_backward(dims_, weights_, grads_, cache_.x.data(), cache_.shared_gate_pre,
                           cache_.shared_up_pre, dy_, dx_, ctx_);
  }
  void tokens_done(int64_t begin, int64_t end) override {
    router_tokens_backward(dims_, balance_, cache_.logits.data(), cache_.scores.data(),
                           cache_.expert_index.data(), cache_.combine.data(), d_combine_, begin,
                           end, dlogits_, ctx_);
  }

 private:
  const MoeDims& dims_;
  const MoeWeights<T>& weights_;
  const MoeGrads<T>& grads_;
  const MoeCache<T>& cache_;
  const BalanceLossBackward& balance_;
  const T* dy_;
  T* dx_;
  const T* d_combine_;
  T* dlogits_;
  const kernels::OpContext& ctx_;
};

}  // namespace

MoeDims moe_dims(const ModelConfig& config, int64_t layer, int64_t batch, int64_t seq,
                 double balance_loss_weight) {
  if (config.scoring_func != "sqrtsoftplus")
    throw moe_error("unsupported scoring_func '" + config.scoring_func + "' (V4 uses sqrtsoftplus)",
                    "scoring_func");
  if (config.n_shared_experts != 0 && config.n_shared_experts != 1)
    throw moe_error("n_shared_experts must be 0 or 1", "n_shared_experts");
  if (layer < 0) throw moe_error("negative layer index", "layer");
  MoeDims dims;
  dims.batch = batch;
  dims.seq = seq;
  dims.hidden = config.hidden_size;
  dims.n_experts = config.n_routed_experts;
  dims.top_k = config.num_experts_per_tok;
  dims.inter = config.moe_intermediate_size;
  dims.routed_scaling = config.routed_scaling_factor;
  dims.swiglu_limit = config.swiglu_limit;
  dims.hash_routed = layer < config.num_hidden_layers && config.is_hash_layer(layer);
  dims.norm_topk_prob = config.norm_topk_prob;
  dims.balance_loss_weight = balance_loss_weight;
  dims.vocab = config.vocab_size;
  validate_dims(dims);
  return dims;
}

template <class T>
void moe_forward(const MoeDims& dims, const MoeWeights<T>& weights, const T* x,
                 const int64_t* token_ids, MoeCache<T>& cache, T* y, bool fixed_selection,
                 TokenDispatcher<T>* dispatcher, const kernels::OpContext& ctx) {
  LocalTokenDispatcher<T> local;
  TokenDispatcher<T>& dispatch = dispatcher ? *dispatcher : local;
  validate_dims(dims);
  validate_weights(dims, weights, dispatch);
  if (!x || !y) throw moe_error("null input or output", "moe.x");
  const int64_t N = dims.tokens(), d = dims.hidden, E = dims.n_experts, K = dims.top_k;
  const int64_t P = N * K;  // (token, slot) pairs

  const kernels::Backend& ops = ctx.ops();
  cache.x.resize(N * d, ops);
  ops.copy(kernels::Tensor::of(x, {N, d}), cache.x.view({N, d}));

  // Router: ℓ = x W_gᵀ in fp32 (spec §2.7), s = sqrt(softplus(ℓ)), the
  // selection and the combine weights from the unbiased scores.
  std::optional<profile::Scope> section(std::in_place, profile::Op::kRouter);
  cache.logits.assign(N * E, T(0), ops);
  cache.scores.assign(N * E, T(0), ops);
  router_scores_forward(dims, weights.gate, x, cache.logits.data(), cache.scores.data(), ctx);
  if (fixed_selection) {
    check_expert_index(dims, cache.expert_index, ops);
  } else {
    cache.expert_index.assign(P, 0, ops);
    select_experts(dims, weights, cache.scores.data(), token_ids, cache.expert_index.data(), ctx);
  }
  cache.combine.assign(P, T(0), ops);
  combine_weights_forward(dims, cache.scores.data(), cache.expert_index.data(),
                          cache.combine.data(), ctx);

  // Tokens routed to each expert by this call's routing (summed by the trainer).
  section.emplace(profile::Op::kDispatch);
  {
    kernels::Array<int64_t> load(E, ops);
    ops.count_indices(cache.expert_index.view({P}), load.view({E}));
    cache.expert_load.resize(static_cast<size_t>(E));
    ops.copy_to_host(load.view({E}), cache.expert_load.data());
  }
  section.reset();

  // y = Shared(x), then the routed outputs added per token in slot order.
  LayerForward<T> compute(dims, weights, cache, y, ctx);
  dispatch.forward(routed_tokens(dims, cache, ctx), compute, cache.dispatch, y);
  cache.routed.resize(static_cast<size_t>(compute.groups()));

  // Sequence-wise balance loss (mean over the B sequences).
  section.emplace(profile::Op::kRouter);
  cache.balance_loss_active = balance_loss_active(dims);
  cache.balance_loss =
      cache.balance_loss_active
          ? balance_loss_forward(dims, cache.scores.data(), cache.expert_index.data(), ctx)
          : 0.0;
}

template <class T>
void moe_backward(const MoeDims& dims, const MoeWeights<T>& weights, const MoeCache<T>& cache,
                  const T* dy, T d_balance_loss, MoeGrads<T>& grads, T* dx,
                  TokenDispatcher<T>* dispatcher, const kernels::OpContext& ctx) {
  LocalTokenDispatcher<T> local;
  TokenDispatcher<T>& dispatch = dispatcher ? *dispatcher : local;
  validate_dims(dims);
  validate_weights(dims, weights, dispatch);
  const int64_t N = dims.tokens(), d = dims.hidden, E = dims.n_experts, K = dims.top_k;
  const int64_t P = N * K;
  if (!dy) throw moe_error("null output gradient", "moe.dy");
  if (cache.expert_index.size() != P || cache.x.size() != N * d || !cache.dispatch)
    throw moe_error("cache does not match the dims (run moe_forward first)", "moe.cache");
  for (const std::vector<T*>* expert_grads : {&grads.w1, &grads.w2, &grads.w3})
    if (!expert_grads->empty() && static_cast<int64_t>(expert_grads->size()) != E)
      throw moe_error("expert gradient vector must be empty or have n_experts entries",
                      "moe.grads");

  // Router gradient inputs: the balance-loss frequencies and every token's sequence.
  const kernels::Backend& ops = ctx.ops();
  const BalanceLossBackward balance = balance_loss_backward_inputs(
      dims, cache.expert_index.data(), cache.balance_loss_active && d_balance_loss != T(0),
      static_cast<double>(d_balance_loss), ctx);
  kernels::Array<T> dlogits(N * E, ops);
  kernels::Array<T> d_combine(P, ops);  // dLoss/dw of each pair

  // dx = the shared expert's, then the routed rows per token in slot order;
  // the router backward of each token range once its rows are back.
  LayerBackward<T> compute(dims, weights, grads, cache, balance, dy, dx, d_combine.data(),
                           dlogits.data(), ctx);
  dispatch.backward(routed_tokens(dims, cache, ctx), *cache.dispatch, dy, compute, dx,
                    d_combine.data());
  router_scores_backward(dims, weights.gate, cache.x.data(), dlogits.data(), dx, grads.gate, ctx);
}

#define TREX_MOE_INSTANTIATE(T)                                                                \
  template void moe_forward<T>(const MoeDims&, const MoeWeights<T>&, const T*, const int64_t*, \
                               MoeCache<T>&, T*, bool, TokenDispatcher<T>*,                    \
                               const kernels::OpContext&);                                     \
  template void moe_backward<T>(const MoeDims&, const MoeWeights<T>&, const MoeCache<T>&,      \
                                const T*, T, MoeGrads<T>&, T*, TokenDispatcher<T>*,            \
                                const kernels::OpContext&);

TREX_MOE_INSTANTIATE(float)
TREX_MOE_INSTANTIATE(double)
#undef TREX_MOE_INSTANTIATE

}  // namespace trex::model
