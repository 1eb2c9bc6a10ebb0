#pragma once
// How parameter state is split over ranks (ZeRO, docs/distributed.md): shards of
// whole ParamSpecs (Muon needs whole matrices), by parallel role.
#include <cstdint>
#include <string>
#include <vector>

#include "trex/model/params.hpp"

namespace trex::parallel {

// A contiguous range of whole ParamSpecs, [first_spec, end_spec) = flat
// values [begin, end): the part of the model one rank updates under ZeRO.
struct OptimizerShard {
  size_t first_spec = 0, end_spec = 0;
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const OptimizerShard&) const = default;
};

// `parts` (ranges of the store laid out by `specs`) without tensor `name`:
// a range holding it is cut around it (unchanged when no range holds it).
std::vector<OptimizerShard> without_tensor(const std::vector<OptimizerShard>& parts,
                                           const std::vector<model::ParamSpec>& specs,
                                           const std::string& name);

// The whole store as one shard.
OptimizerShard whole_shard(const std::vector<model::ParamSpec>& specs);
// The tensors of `role` as one range (the layouts hold dense tensors first,
// then routed experts; throws if they are not contiguous). Empty: at the end.
OptimizerShard role_range(const std::vector<model::ParamSpec>& specs, model::ParamRole role);

// Splits the specs of `range` (default: all of them) into `parts` contiguous
// shards of whole specs (Muon needs whole matrices) whose sizes are as close
// to size/parts as spec boundaries allow; shard r goes to rank r.
// Deterministic; shards may be empty when parts exceeds the number of specs.
std::vector<OptimizerShard> partition_for_zero(const std::vector<model::ParamSpec>& specs,
                                               int64_t parts);
std::vector<OptimizerShard> partition_for_zero(const std::vector<model::ParamSpec>& specs,
                                               int64_t parts, const OptimizerShard& range);

// The ZeRO partition by parallel role (docs/distributed.md): dense tensors are
// identical on every `data` rank and split over them; routed experts are
// identical only on the ranks holding the same experts (with expert weights
// sharded over EP the grid's `dp` group, else `data` too) and split over those.
// A rank updates two ranges: dense[its data rank] and expert[its rank in the
// expert group].
struct ZeroPartition {
  std::vector<OptimizerShard> dense;   // one per `data` rank
  std::vector<OptimizerShard> expert;  // one per expert-group rank
  // A rank's ranges, ascending (dense first); either may be empty.
  std::vector<OptimizerShard> ranges(int dense_rank, int expert_rank) const;
};
ZeroPartition partition_for_zero_by_role(const std::vector<model::ParamSpec>& specs,
                                         int64_t dense_parts, int64_t expert_parts);

}  // namespace trex::parallel
