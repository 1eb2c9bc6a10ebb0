#include "trex/model/moe_router.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "trex/core/profile.hpp"

namespace trex::model {
namespace {

using kernels::Tensor;

// The sequences of the balance loss as [B, 2] (first row, length): the listed
// ones, or the B rows of S tokens. Host bookkeeping from the dims, uploaded.
kernels::Array<int64_t> balance_ranges(const MoeDims& dims, const kernels::Backend& ops) {
  std::vector<int64_t> ranges;
  if (!dims.balance_sequences.empty()) {
    for (const MoeSequence& s : dims.balance_sequences) ranges.insert(ranges.end(), {s.row, s.len});
  } else {
    for (int64_t b = 0; b < dims.batch; ++b) ranges.insert(ranges.end(), {b * dims.seq, dims.seq});
  }
  kernels::Array<int64_t> out;
  out.assign_from_host(ranges.data(), static_cast<int64_t>(ranges.size()), ops);
  return out;
}

// Each token's balance sequence (−1: in none), uploaded.
kernels::Array<int64_t> balance_sequence_of(const MoeDims& dims, const kernels::Backend& ops) {
  std::vector<int64_t> sequence_of(static_cast<size_t>(dims.tokens()), -1);
  if (!dims.balance_sequences.empty()) {
    for (size_t b = 0; b < dims.balance_sequences.size(); ++b)
      std::fill_n(sequence_of.begin() + dims.balance_sequences[b].row,
                  dims.balance_sequences[b].len, static_cast<int64_t>(b));
  } else {
    for (int64_t b = 0; b < dims.batch; ++b)
      std::fill_n(sequence_of.begin() + b * dims.seq, dims.seq, b);
  }
  kernels::Array<int64_t> out;
  out.assign_from_host(sequence_of.data(), dims.tokens(), ops);
  return out;
}

Tensor sequence_tensor(const kernels::Array<int64_t>& ranges) {
  return ranges.view({ranges.size() / 2, 2});
}

kernels::RouterCombineParams combine_params(const MoeDims& dims) {
  return {dims.routed_scaling, dims.norm_topk_prob};
}

// The hash layer's token ids must name rows of tid2eid.
void check_token_ids(const MoeDims& dims, const int64_t* token_ids, const kernels::Backend& ops) {
  if (!token_ids) throw moe_error("hash-routed layer needs token ids", "moe.token_ids");
  const kernels::IndexScan ids =
      ops.scan_indices(Tensor::of(token_ids, {dims.tokens()}), 0, dims.vocab);
  if (ids.first_bad >= 0)
    throw moe_error("token id " + std::to_string(ids.bad_value) +
                        " outside the tid2eid table (vocab " + std::to_string(dims.vocab) + ")",
                    "moe.token_ids");
}

// The rows of tid2eid the tokens used (now in expert_index) must name real
// experts: checked on the N·K selected entries, not the whole table; the error
// path copies the offending id and entry to the host for the message.
void check_hash_rows(const MoeDims& dims, const int64_t* tid2eid, const int64_t* token_ids,
                     const int32_t* expert_index, const kernels::Backend& ops) {
  const int64_t N = dims.tokens(), E = dims.n_experts, K = dims.top_k;
  const kernels::IndexScan rows = ops.scan_indices(Tensor::of(expert_index, {N * K}), 0, E);
  if (rows.first_bad < 0) return;
  int64_t id = 0, entry = 0;
  ops.copy_to_host(Tensor::of(token_ids + rows.first_bad / K, {1}), &id);
  ops.copy_to_host(Tensor::of(tid2eid + id * K + rows.first_bad % K, {1}), &entry);
  throw moe_error("tid2eid[" + std::to_string(id) + "] names expert " + std::to_string(entry) +
                      " outside [0, " + std::to_string(E) + ")",
                  "moe.tid2eid");
}

}  // namespace

template <class T>
void router_scores_forward(const MoeDims& dims, const T* gate, const T* x, T* logits, T* scores,
                           const kernels::OpContext& ctx) {
  const int64_t N = dims.tokens(), d = dims.hidden, E = dims.n_experts;
  const kernels::Backend& ops = ctx.ops();
  {
    TREX_PROFILE(profile::Op::kGemmRouter, profile::linear_flops(N, E, d));
    ops.linear_forward(Tensor::of(x, {N, d}), Tensor::of(gate, {E, d}), Tensor::of(logits, {N, E}),
                       {kernels::Precision::kF32});
  }
  ops.router_scores(Tensor::of(logits, {N, E}), Tensor::of(scores, {N, E}));
}

template <class T>
void router_scores_backward(const MoeDims& dims, const T* gate, const T* x, const T* dlogits, T* dx,
                            T* dgate, const kernels::OpContext& ctx) {
  const int64_t N = dims.tokens(), d = dims.hidden, E = dims.n_experts;
  TREX_PROFILE(profile::Op::kGemmRouter, profile::linear_backward_flops(N, E, d));
  ctx.ops().linear_backward(Tensor::of(x, {N, d}), Tensor::of(gate, {E, d}),
                            Tensor::of(dlogits, {N, E}), Tensor::optional(dx, {N, d}),
                            Tensor::optional(dgate, {E, d}),
                            {kernels::Precision::kF32, /*accumulate=*/true});
}

template <class T>
void select_experts(const MoeDims& dims, const MoeWeights<T>& weights, const T* scores,
                    const int64_t* token_ids, int32_t* expert_index,
                    const kernels::OpContext& ctx) {
  const int64_t N = dims.tokens(), E = dims.n_experts, K = dims.top_k;
  if (dims.hash_routed) {
    check_token_ids(dims, token_ids, ctx.ops());
    ctx.ops().router_select(Tensor::of(scores, {N, E}), Tensor(), Tensor::of(token_ids, {N}),
                            Tensor::of(weights.tid2eid, {dims.vocab, K}),
                            Tensor::of(expert_index, {N, K}));
    check_hash_rows(dims, weights.tid2eid, token_ids, expert_index, ctx.ops());
    return;
  }
  ctx.ops().router_select(Tensor::of(scores, {N, E}), Tensor::optional(weights.gate_bias, {E}),
                          Tensor(), Tensor(), Tensor::of(expert_index, {N, K}));
}

void check_expert_index(const MoeDims& dims, const kernels::Array<int32_t>& expert_index,
                        const kernels::Backend& ops) {
  const int64_t P = dims.tokens() * dims.top_k, E = dims.n_experts;
  if (expert_index.size() != P)
    throw moe_error("fixed_selection needs cache.expert_index of size tokens*top_k",
                    "moe.expert_index");
  if (ops.scan_indices(expert_index.view({P}), 0, E).first_bad >= 0)
    throw moe_error("cached expert index out of range", "moe.expert_index");
}

template <class T>
void combine_weights_forward(const MoeDims& dims, const T* scores, const int32_t* expert_index,
                             T* combine, const kernels::OpContext& ctx) {
  const int64_t N = dims.tokens(), E = dims.n_experts, K = dims.top_k;
  ctx.ops().router_combine(combine_params(dims), Tensor::of(scores, {N, E}),
                           Tensor::of(expert_index, {N, K}), Tensor::of(combine, {N, K}));
}

bool balance_loss_active(const MoeDims& dims) {
  return dims.balance_loss_weight > 0.0 && (!dims.hash_routed || dims.balance_loss_on_hash_layers);
}

template <class T>
double balance_loss_forward(const MoeDims& dims, const T* scores, const int32_t* expert_index,
                            const kernels::OpContext& ctx) {
  const int64_t N = dims.tokens(), E = dims.n_experts, K = dims.top_k;
  const kernels::Backend& ops = ctx.ops();
  const kernels::Array<int64_t> sequences = balance_ranges(dims, ops);
  const int64_t B = sequences.size() / 2;
  kernels::Array<double> freq(B * E, ops);
  ops.router_balance_frequencies(Tensor::of(expert_index, {N, K}), sequence_tensor(sequences),
                                 freq.view({B, E}));
  return ops.router_balance_loss(dims.balance_loss_weight, Tensor::of(scores, {N, E}),
                                 freq.view({B, E}), sequence_tensor(sequences));
}

BalanceLossBackward balance_loss_backward_inputs(const MoeDims& dims, const int32_t* expert_index,
                                                 bool active, double d_loss,
                                                 const kernels::OpContext& ctx) {
  BalanceLossBackward balance;
  balance.active = active;
  balance.d_loss = d_loss;
  if (!active) return balance;
  const int64_t N = dims.tokens(), E = dims.n_experts, K = dims.top_k;
  balance.sequences = balance_ranges(dims, ctx.ops());
  const int64_t B = balance.sequences.size() / 2;
  balance.sequence_of = balance_sequence_of(dims, ctx.ops());
  balance.freq.assign(B * E, 0.0, ctx.ops());
  ctx.ops().router_balance_frequencies(Tensor::of(expert_index, {N, K}),
                                       sequence_tensor(balance.sequences),
                                       balance.freq.view({B, E}));
  return balance;
}

template <class T>
void router_tokens_backward(const MoeDims& dims, const BalanceLossBackward& balance,
                            const T* logits, const T* scores, const int32_t* expert_index,
                            const T* combine, const T* d_combine, int64_t begin, int64_t end,
                            T* dlogits, const kernels::OpContext& ctx) {
  const int64_t N = dims.tokens(), E = dims.n_experts, K = dims.top_k;
  kernels::RouterBalanceGrad balance_grad;
  if (balance.active) {
    const int64_t B = balance.sequences.size() / 2;
    balance_grad = {sequence_tensor(balance.sequences), balance.freq.view({B, E}),
                    balance.sequence_of.view({N}), dims.balance_loss_weight, balance.d_loss};
  }
  ctx.ops().router_backward(combine_params(dims), balance_grad, Tensor::of(logits, {N, E}),
                            Tensor::of(scores, {N, E}), Tensor::of(expert_index, {N, K}),
                            Tensor::of(combine, {N, K}), Tensor::of(d_combine, {N, K}), begin, end,
                            Tensor::of(dlogits, {N, E}));
}

template <class T>
void update_router_bias(T* bias, const int64_t* load, int64_t n_experts, double speed,
                        const kernels::OpContext& ctx) {
  if (n_experts <= 0) return;
  if (!bias || !load) throw moe_error("null bias or load", "moe.gate_bias");
  // The load is the trainer's host tally (summed over micro-batches and ranks).
  kernels::Array<int64_t> device_load;
  device_load.assign_from_host(load, n_experts, ctx.ops());
  ctx.ops().router_bias_update(Tensor::of(bias, {n_experts}), device_load.view({n_experts}), speed);
}

#define TREX_MOE_ROUTER_INSTANTIATE(T)                                                            \
  template void router_scores_forward<T>(const MoeDims&, const T*, const T*, T*, T*,              \
                                         const kernels::OpContext&);                              \
  template void router_scores_backward<T>(const MoeDims&, const T*, const T*, const T*, T*, T*,   \
                                          const kernels::OpContext&);                             \
  template void select_experts<T>(const MoeDims&, const MoeWeights<T>&, const T*, const int64_t*, \
                                  int32_t*, const kernels::OpContext&);                           \
  template void combine_weights_forward<T>(const MoeDims&, const T*, const int32_t*, T*,          \
                                           const kernels::OpContext&);                            \
  template double balance_loss_forward<T>(const MoeDims&, const T*, const int32_t*,               \
                                          const kernels::OpContext&);                             \
  template void router_tokens_backward<T>(const MoeDims&, const BalanceLossBackward&, const T*,   \
                                          const T*, const int32_t*, const T*, const T*, int64_t,  \
                                          int64_t, T*, const kernels::OpContext&);                \
  template void update_router_bias<T>(T*, const int64_t*, int64_t, double,                        \
                                      const kernels::OpContext&);

TREX_MOE_ROUTER_INSTANTIATE(float)
TREX_MOE_ROUTER_INSTANTIATE(double)
#undef TREX_MOE_ROUTER_INSTANTIATE

}  // namespace trex::model
