#include "trex/parallel/expert_parallel.hpp"

#include <algorithm>

#include "trex/model/config.hpp"
#include "trex/parallel/communicator.hpp"

namespace trex::parallel {

Error expert_parallel_error(const std::string& message, const std::string& field) {
  Error error("expert parallel: " + message);
  error.field(field);
  return error;
}

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
  if (!comm) throw expert_parallel_error("no EP communicator", "expert_parallel.comm");
  if (block < 0 || block >= static_cast<int64_t>(owner.size()))
    throw expert_parallel_error("no expert map for MoE block " + std::to_string(block) + " (" +
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
    throw expert_parallel_error("need experts and ranks (got " + std::to_string(n_experts) +
                                    " experts, " + std::to_string(ranks) + " ranks)",
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
    throw expert_parallel_error("expert map has " + std::to_string(owner.size()) +
                                    " entries, expected " + std::to_string(n_experts),
                                field);
  for (size_t e = 0; e < owner.size(); ++e)
    if (owner[e] < 0 || owner[e] >= ranks)
      throw expert_parallel_error("expert " + std::to_string(e) + " mapped to rank " +
                                      std::to_string(owner[e]) + " outside [0, " +
                                      std::to_string(ranks) + ")",
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

ExpertParallel make_expert_parallel(const model::ModelConfig& config, Communicator& comm,
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

}  // namespace trex::parallel
