#include "trex/model/moe_parallel.hpp"

#include <algorithm>

#include "trex/core/error.hpp"
#include "trex/parallel_communicator.hpp"  // the MoE layer's last wrong-way include
#include "trex/model/config.hpp"

namespace trex::model {
namespace {

Error ep_error(const std::string& message, const std::string& field) {
  Error error("expert parallel: " + message);
  error.field(field);
  return error;
}

}  // namespace

void ExpertTraffic::reset(size_t blocks, int ranks) {
  const std::vector<int64_t> zeros(static_cast<size_t>(std::max(ranks, 0)), 0);
  pairs.assign(blocks, zeros);
  dispatch_bytes.assign(blocks, zeros);
  total_bytes.assign(blocks, zeros);
  count_exchange_seconds = 0.0;
  row_exchange_seconds = 0.0;
}

MoeParallel ExpertParallel::block(int64_t block, int64_t n_experts) {
  const std::string field = "expert_parallel.owner";
  if (!comm) throw ep_error("no EP communicator", "expert_parallel.comm");
  if (block < 0 || block >= static_cast<int64_t>(owner.size()))
    throw ep_error("no expert map for MoE block " + std::to_string(block) + " (" +
                       std::to_string(owner.size()) + " maps)",
                   field);
  const std::vector<int>& map = owner[static_cast<size_t>(block)];
  validate_expert_owner(map, n_experts, comm->size(), field + "[" + std::to_string(block) + "]");
  const auto ranks = static_cast<size_t>(comm->size());
  if (traffic.pairs.size() != owner.size() ||
      (!traffic.pairs.empty() && traffic.pairs[0].size() != ranks))
    traffic.reset(owner.size(), comm->size());
  MoeParallel view;
  view.comm = comm;
  view.owner = map.data();
  view.overlap = overlap;
  view.pairs = traffic.pairs[static_cast<size_t>(block)].data();
  view.dispatch_bytes = traffic.dispatch_bytes[static_cast<size_t>(block)].data();
  view.total_bytes = traffic.total_bytes[static_cast<size_t>(block)].data();
  view.count_exchange_seconds = &traffic.count_exchange_seconds;
  view.row_exchange_seconds = &traffic.row_exchange_seconds;
  return view;
}

std::vector<int> contiguous_expert_owner(int64_t n_experts, int ranks) {
  if (n_experts <= 0 || ranks <= 0)
    throw ep_error("need experts and ranks (got " + std::to_string(n_experts) + " experts, " +
                       std::to_string(ranks) + " ranks)",
                   "expert_parallel.ep");
  std::vector<int> owner(static_cast<size_t>(n_experts));
  const int64_t base = n_experts / ranks, extra = n_experts % ranks;
  int64_t e = 0;
  for (int r = 0; r < ranks; ++r) {
    const int64_t share = base + (r < extra ? 1 : 0);
    for (int64_t i = 0; i < share; ++i) owner[static_cast<size_t>(e++)] = r;
  }
  return owner;
}

void validate_expert_owner(std::span<const int> owner, int64_t n_experts, int ranks,
                           const std::string& field) {
  if (static_cast<int64_t>(owner.size()) != n_experts)
    throw ep_error("expert map has " + std::to_string(owner.size()) + " entries, expected " +
                       std::to_string(n_experts),
                   field);
  for (size_t e = 0; e < owner.size(); ++e)
    if (owner[e] < 0 || owner[e] >= ranks)
      throw ep_error("expert " + std::to_string(e) + " mapped to rank " + std::to_string(owner[e]) +
                         " outside [0, " + std::to_string(ranks) + ")",
                     field);
}

uint64_t expert_map_fingerprint(std::span<const int> owner) {
  uint64_t hash = 0xcbf29ce484222325ull;
  const auto mix = [&](uint64_t v) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (v >> (8 * byte)) & 0xffu;
      hash *= 0x100000001b3ull;
    }
  };
  mix(owner.size());
  for (int rank : owner) mix(static_cast<uint64_t>(static_cast<uint32_t>(rank)));
  return hash;
}

ExpertParallel make_expert_parallel(const ModelConfig& config, parallel::Communicator& comm,
                                    bool overlap) {
  ExpertParallel ep;
  ep.comm = &comm;
  ep.overlap = overlap;
  const int64_t blocks = config.num_hidden_layers + config.num_nextn_predict_layers;
  ep.owner.assign(static_cast<size_t>(blocks),
                  contiguous_expert_owner(config.n_routed_experts, comm.size()));
  ep.traffic.reset(static_cast<size_t>(blocks), comm.size());
  return ep;
}

std::vector<int64_t> chunk_bounds(int64_t tokens, bool overlap) {
  if (!overlap) return {0, tokens};
  return {0, tokens / 2, tokens};
}

DispatchPlan plan_dispatch(const int32_t* expert_index, int64_t tokens, int64_t top_k,
                           int64_t n_experts, const int* owner, int ranks,
                           std::span<const int64_t> chunk_begin) {
  const int64_t C = static_cast<int64_t>(chunk_begin.size()) - 1, E = n_experts, K = top_k;
  const int64_t P = tokens * K;
  if (C < 1 || chunk_begin.front() != 0 || chunk_begin.back() != tokens)
    throw ep_error("chunks must cover the tokens", "expert_parallel.chunks");
  for (int64_t c = 0; c < C; ++c)
    if (chunk_begin[c + 1] < chunk_begin[c])
      throw ep_error("chunk bounds must ascend", "expert_parallel.chunks");
  DispatchPlan plan;
  plan.ranks = ranks;
  plan.chunks = C;
  plan.n_experts = E;
  plan.counts.assign(static_cast<size_t>(ranks * C * E), 0);
  plan.rows.assign(static_cast<size_t>(C * ranks), 0);
  plan.chunk_row.assign(static_cast<size_t>(C + 1), 0);
  plan.pair_row.assign(static_cast<size_t>(P), 0);
  plan.sorted_pair.assign(static_cast<size_t>(P), 0);
  const auto count_at = [&](int r, int64_t c, int64_t e) -> int64_t& {
    return plan.counts[static_cast<size_t>((r * C + c) * E + e)];
  };
  for (int64_t c = 0; c < C; ++c)
    for (int64_t p = chunk_begin[c] * K; p < chunk_begin[c + 1] * K; ++p) {
      const int32_t e = expert_index[p];
      if (e < 0 || e >= E) throw ep_error("expert index out of range", "moe.expert_index");
      ++count_at(owner[e], c, e);
    }
  // Start row of every (chunk, rank, expert) block in the send buffer.
  std::vector<int64_t> cursor(static_cast<size_t>(C * ranks * E), 0);
  int64_t row = 0;
  for (int64_t c = 0; c < C; ++c) {
    plan.chunk_row[c] = row;
    for (int r = 0; r < ranks; ++r) {
      const int64_t first = row;
      for (int64_t e = 0; e < E; ++e) {
        cursor[static_cast<size_t>((c * ranks + r) * E + e)] = row;
        row += count_at(r, c, e);
      }
      plan.rows[static_cast<size_t>(c * ranks + r)] = row - first;
    }
  }
  plan.chunk_row[C] = row;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t p = chunk_begin[c] * K; p < chunk_begin[c + 1] * K; ++p) {
      const int32_t e = expert_index[p];
      const int64_t at = cursor[static_cast<size_t>((c * ranks + owner[e]) * E + e)]++;
      plan.pair_row[p] = at;
      plan.sorted_pair[at] = p;
    }
  return plan;
}

ReceivePlan plan_receive(std::span<const int64_t> recv_counts, int ranks, int64_t n_experts,
                         const int* owner, int self) {
  const int64_t E = n_experts;
  if (static_cast<int64_t>(recv_counts.size()) != ranks * E)
    throw ep_error("received counts have the wrong size", "expert_parallel.counts");
  ReceivePlan plan;
  plan.from_rank.assign(static_cast<size_t>(ranks), 0);
  plan.offsets.assign(static_cast<size_t>(E + 1), 0);
  for (int s = 0; s < ranks; ++s)
    for (int64_t e = 0; e < E; ++e) {
      const int64_t n = recv_counts[static_cast<size_t>(s * E + e)];
      if (n < 0) throw ep_error("negative row count", "expert_parallel.counts");
      if (n > 0 && owner[e] != self)
        throw ep_error("rank " + std::to_string(s) + " sent " + std::to_string(n) +
                           " rows of expert " + std::to_string(e) + " to rank " +
                           std::to_string(self) + ", which the map gives to rank " +
                           std::to_string(owner[e]) + " (the EP ranks' maps disagree)",
                       "expert_parallel.owner");
      plan.from_rank[s] += n;
      plan.offsets[e + 1] += n;
    }
  for (int64_t e = 0; e < E; ++e) plan.offsets[e + 1] += plan.offsets[e];
  const int64_t total = plan.offsets[E];
  plan.grouped_row.assign(static_cast<size_t>(total), 0);
  plan.expert.assign(static_cast<size_t>(total), 0);
  std::vector<int64_t> cursor(plan.offsets.begin(), plan.offsets.end() - 1);
  int64_t received = 0;
  for (int s = 0; s < ranks; ++s)
    for (int64_t e = 0; e < E; ++e)
      for (int64_t i = 0; i < recv_counts[static_cast<size_t>(s * E + e)]; ++i) {
        const int64_t g = cursor[e]++;
        plan.grouped_row[received++] = g;
        plan.expert[g] = static_cast<int32_t>(e);
      }
  return plan;
}

}  // namespace trex::model
