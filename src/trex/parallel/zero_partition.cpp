#include "trex/parallel/zero_partition.hpp"

#include <string>

#include "trex/core/error.hpp"

namespace trex::parallel {

std::vector<OptimizerShard> without_tensor(const std::vector<OptimizerShard>& parts,
                                           const std::vector<model::ParamSpec>& specs,
                                           const std::string& name) {
  std::vector<OptimizerShard> out;
  for (const OptimizerShard& part : parts) {
    int64_t offset = part.begin;
    size_t at = part.end_spec;
    for (size_t i = part.first_spec; i < part.end_spec; ++i) {
      if (specs[i].name == name) {
        at = i;
        break;
      }
      offset += specs[i].numel();
    }
    if (at == part.end_spec) {
      out.push_back(part);
      continue;
    }
    const int64_t after = offset + specs[at].numel();
    if (at > part.first_spec) out.push_back({part.first_spec, at, part.begin, offset});
    if (at + 1 < part.end_spec) out.push_back({at + 1, part.end_spec, after, part.end});
  }
  return out;
}

OptimizerShard whole_shard(const std::vector<model::ParamSpec>& specs) {
  OptimizerShard shard;
  shard.end_spec = specs.size();
  for (const model::ParamSpec& spec : specs) shard.end += spec.numel();
  return shard;
}

OptimizerShard role_range(const std::vector<model::ParamSpec>& specs, model::ParamRole role) {
  OptimizerShard r;
  r.first_spec = specs.size();
  int64_t offset = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const int64_t n = specs[i].numel();
    if (specs[i].role == role) {
      if (r.first_spec == specs.size()) {
        r.first_spec = i;
        r.begin = offset;
      } else if (r.end_spec != i) {
        throw Error("internal: the " +
                    std::string(role == model::ParamRole::kExpert ? "expert" : "dense") +
                    " tensors are not contiguous in the parameter layout");
      }
      r.end_spec = i + 1;
      r.end = offset + n;
    }
    offset += n;
  }
  if (r.first_spec == specs.size()) r = {specs.size(), specs.size(), offset, offset};
  return r;
}

std::vector<OptimizerShard> partition_for_zero(const std::vector<model::ParamSpec>& specs,
                                               int64_t parts) {
  return partition_for_zero(specs, parts, whole_shard(specs));
}

std::vector<OptimizerShard> partition_for_zero(const std::vector<model::ParamSpec>& specs,
                                               int64_t parts, const OptimizerShard& range) {
  if (parts < 1) throw Error("ZeRO partition: parts must be >= 1").field("parallel.zero");
  if (range.first_spec > range.end_spec || range.end_spec > specs.size())
    throw Error("internal: ZeRO partition of a range outside the parameter layout");
  // offset[i] = start of spec first_spec + i (flat, in the whole layout)
  const size_t count = range.end_spec - range.first_spec;
  std::vector<int64_t> offset(count + 1, range.begin);
  for (size_t i = 0; i < count; ++i)
    offset[i + 1] = offset[i] + specs[range.first_spec + i].numel();
  if (offset.back() != range.end)
    throw Error("internal: ZeRO partition of a range that does not match its tensors");
  const int64_t total = range.end - range.begin;
  // Boundary k is the spec boundary nearest to k·total/parts (never behind the previous one).
  std::vector<size_t> boundary(static_cast<size_t>(parts) + 1, 0);
  boundary.back() = count;
  for (int64_t k = 1; k < parts; ++k) {
    const double target = static_cast<double>(range.begin) + static_cast<double>(total) *
                                                                 static_cast<double>(k) /
                                                                 static_cast<double>(parts);
    size_t j = static_cast<size_t>(
        std::lower_bound(offset.begin(), offset.end(), static_cast<int64_t>(std::ceil(target))) -
        offset.begin());
    if (j > 0 && j <= count &&
        target - static_cast<double>(offset[j - 1]) < static_cast<double>(offset[j]) - target)
      j -= 1;
    j = std::min(j, count);
    boundary[static_cast<size_t>(k)] = std::max(j, boundary[static_cast<size_t>(k) - 1]);
  }
  std::vector<OptimizerShard> shards(static_cast<size_t>(parts));
  for (size_t k = 0; k < shards.size(); ++k) {
    const size_t first = boundary[k], end = std::max(boundary[k], boundary[k + 1]);
    shards[k].first_spec = range.first_spec + first;
    shards[k].end_spec = range.first_spec + end;
    shards[k].begin = offset[first];
    shards[k].end = offset[end];
  }
  return shards;
}

std::vector<OptimizerShard> ZeroPartition::ranges(int dense_rank, int expert_rank) const {
  return {dense.at(static_cast<size_t>(dense_rank)), expert.at(static_cast<size_t>(expert_rank))};
}

ZeroPartition partition_for_zero_by_role(const std::vector<model::ParamSpec>& specs,
                                         int64_t dense_parts, int64_t expert_parts) {
  const OptimizerShard dense = role_range(specs, model::ParamRole::kDense);
  const OptimizerShard expert = role_range(specs, model::ParamRole::kExpert);
  if (dense.end > expert.begin && expert.size() > 0)
    throw Error("internal: routed experts before dense tensors in the parameter layout");
  return {partition_for_zero(specs, dense_parts, dense),
          partition_for_zero(specs, expert_parts, expert)};
}

}  // namespace trex::parallel
