#include "trex/train/state_accounting.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "trex/core/error.hpp"
#include "trex/model/params.hpp"
#include "trex/parallel/expert_shard.hpp"
#include "trex/parallel/zero_partition.hpp"
#include "trex/train/optim/optimizer.hpp"
#include "trex/train/parallel_setup.hpp"

namespace trex::train {
namespace {

// The tensors of one (pipeline stage, EP rank): what build_model gives it.
std::vector<model::ParamSpec> layout_of(const RunConfig& c, const model::ModelConfig& m,
                                        const std::vector<std::vector<int>>& owner, int pp_rank,
                                        int ep_rank) {
  const parallel::RankOwnership ownership =
      ownership_of_rank(c.parallel, m, owner, pp_rank, ep_rank);
  if (ownership.keeps_everything()) return model::parameter_specs(m);
  return parallel::filter_specs(model::parameter_specs(m), m, ownership);
}

// Optimizer bytes of each data rank of a layout (ParallelGradients' ZeRO
// ranges, make_optimizer's rule), indexed by data rank.
std::vector<int64_t> moments_by_data_rank(const RunConfig& c,
                                          const std::vector<model::ParamSpec>& layout,
                                          int ep_rank) {
  const int ep = static_cast<int>(c.parallel.ep), dp = static_cast<int>(c.parallel.dp);
  const int data = ep * dp;
  const int64_t bytes = moment_dtype_bytes(c.optimizer.moment_dtype);
  std::optional<parallel::ZeroPartition> zero;
  if (c.parallel.zero > 0)  // experts over the ranks holding the same ones (dp), else `data`
    zero = parallel::partition_for_zero_by_role(layout, data, ep > 1 ? dp : data);
  std::vector<int64_t> out(static_cast<size_t>(data), 0);
  for (int d = ep_rank; d < data; d += ep) {
    const std::vector<parallel::OptimizerShard> ranges =
        zero ? zero->ranges(d, ep > 1 ? d / ep : d)
             : std::vector<parallel::OptimizerShard>{parallel::whole_shard(layout)};
    const Optimizer::StateElements e = Optimizer::state_elements(layout, ranges, c.optimizer);
    out[static_cast<size_t>(d)] = (e.first + e.second) * bytes;
  }
  return out;
}

// The EP map, as ParallelSetup::build reads it (only with EP).
std::vector<std::vector<int>> expert_owners(const RunConfig& c, const model::ModelConfig& m) {
  return c.parallel.ep > 1 ? run_expert_owners(c, m) : std::vector<std::vector<int>>{};
}

double mib(int64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

}  // namespace

const StateRole& StateAccount::largest() const {
  if (roles.empty()) throw Error("internal: an empty state account");
  return *std::max_element(roles.begin(), roles.end(), [](const StateRole& a, const StateRole& b) {
    return a.total_max() < b.total_max();
  });
}

StateAccount account_state(const RunConfig& config, const model::ModelConfig& model) {
  const std::vector<std::vector<int>> owner = expert_owners(config, model);
  StateAccount out;
  out.total_parameters = parallel::total_numel(model::parameter_specs(model));
  for (int p = 0; p < static_cast<int>(config.parallel.pp); ++p)
    for (int e = 0; e < static_cast<int>(config.parallel.ep); ++e) {
      const std::vector<model::ParamSpec> layout = layout_of(config, model, owner, p, e);
      StateRole role;
      role.pp_rank = p;
      role.ep_rank = e;
      role.ranks = config.parallel.dp;
      role.params = parallel::total_numel(layout) * static_cast<int64_t>(sizeof(float));
      role.grads = role.params;
      const std::vector<int64_t> moments = moments_by_data_rank(config, layout, e);
      role.moments_min = INT64_MAX;
      for (int d = e; d < static_cast<int>(moments.size());
           d += static_cast<int>(config.parallel.ep)) {
        role.moments_max = std::max(role.moments_max, moments[static_cast<size_t>(d)]);
        role.moments_min = std::min(role.moments_min, moments[static_cast<size_t>(d)]);
      }
      out.roles.push_back(role);
    }
  return out;
}

RankState state_of_rank(const RunConfig& config, const model::ModelConfig& model, int world_rank) {
  const int ep = static_cast<int>(config.parallel.ep), dp = static_cast<int>(config.parallel.dp);
  if (world_rank < 0 || world_rank >= static_cast<int>(config.parallel.world_size()))
    throw Error("rank " + std::to_string(world_rank) + " outside the run's " +
                std::to_string(config.parallel.world_size()) + " ranks")
        .field("parallel");
  // The grid's coordinates (parallel/process_grid.cpp): EP innermost, then DP, then PP.
  const int ep_rank = world_rank % ep, dp_rank = (world_rank / ep) % dp,
            pp_rank = world_rank / (ep * dp);
  const std::vector<model::ParamSpec> layout =
      layout_of(config, model, expert_owners(config, model), pp_rank, ep_rank);
  RankState s;
  s.params = parallel::total_numel(layout) * static_cast<int64_t>(sizeof(float));
  s.grads = s.params;
  s.moments =
      moments_by_data_rank(config, layout, ep_rank)[static_cast<size_t>(dp_rank * ep + ep_rank)];
  return s;
}

std::string format_state_account(const StateAccount& account, const RunConfig& config) {
  std::string out;
  char line[256];
  std::snprintf(
      line, sizeof line,
      "state per rank, DP=%lld x EP=%lld x PP=%lld, ZeRO-%lld, fp32 parameters and "
      "gradients, %s moments (MiB)\n",
      static_cast<long long>(config.parallel.dp), static_cast<long long>(config.parallel.ep),
      static_cast<long long>(config.parallel.pp), static_cast<long long>(config.parallel.zero),
      config.optimizer.moment_dtype == MomentDType::kBF16 ? "bf16" : "fp32");
  out += line;
  std::snprintf(line, sizeof line, "%-6s %-6s %6s %12s %12s %18s %12s\n", "stage", "EP", "ranks",
                "parameters", "gradients", "moments min-max", "total max");
  out += line;
  for (const StateRole& r : account.roles) {
    std::snprintf(line, sizeof line, "%-6d %-6d %6lld %12.1f %12.1f %8.1f-%-9.1f %12.1f\n",
                  r.pp_rank, r.ep_rank, static_cast<long long>(r.ranks), mib(r.params),
                  mib(r.grads), mib(r.moments_min), mib(r.moments_max), mib(r.total_max()));
    out += line;
  }
  const StateRole& big = account.largest();
  std::snprintf(line, sizeof line,
                "largest rank: stage %d, EP rank %d: %.1f MiB; whole model %lld parameters "
                "(%.1f MiB in fp32)\n",
                big.pp_rank, big.ep_rank, mib(big.total_max()),
                static_cast<long long>(account.total_parameters),
                mib(account.total_parameters * static_cast<int64_t>(sizeof(float))));
  out += line;
  out += "not included yet: activations and communication buffers\n";
  return out;
}

}  // namespace trex::train
