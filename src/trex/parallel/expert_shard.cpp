#include "trex/parallel/expert_shard.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "trex/core/error.hpp"
#include "trex/io/safetensors.hpp"

namespace trex::parallel {

using model::detect_naming_scheme;
using model::load_checkpoint;
using model::LoadedCheckpoint;
using model::ModelConfig;
using model::NamingScheme;
using model::ParamRole;
using model::ParamSpec;
using model::ParamStore;

bool ExpertOwnership::owns(int64_t block, int64_t expert) const {
  if (block < 0 || block >= static_cast<int64_t>(owned.size()))
    throw Error("no expert map for MoE block " + std::to_string(block))
        .field("expert_parallel.owner");
  const std::vector<bool>& experts = owned[static_cast<size_t>(block)];
  if (expert < 0 || expert >= static_cast<int64_t>(experts.size()))
    throw Error("expert " + std::to_string(expert) + " outside the map of MoE block " +
                std::to_string(block))
        .field("expert_parallel.owner");
  return experts[static_cast<size_t>(expert)];
}

bool ExpertOwnership::keeps(const ParamSpec& spec) const {
  return spec.role != ParamRole::kExpert || owns(spec.layer, spec.expert);
}

ExpertOwnership ExpertOwnership::of_rank(const std::vector<std::vector<int>>& owner, int rank) {
  ExpertOwnership o;
  for (const std::vector<int>& block : owner) {
    std::vector<bool>& mine = o.owned.emplace_back(block.size(), false);
    for (size_t e = 0; e < block.size(); ++e) mine[e] = block[e] == rank;
  }
  return o;
}

std::vector<ParamSpec> filter_specs(const std::vector<ParamSpec>& specs,
                                    const ExpertOwnership& ownership) {
  std::vector<ParamSpec> kept;
  for (const ParamSpec& spec : specs)
    if (ownership.keeps(spec)) kept.push_back(spec);
  return kept;
}

bool RankOwnership::keeps(const ModelConfig& config, const ParamSpec& spec) const {
  if (experts && !experts->keeps(spec)) return false;
  return stages.empty() || model::stages_hold(config, stages, spec);
}

std::vector<ParamSpec> filter_specs(const std::vector<ParamSpec>& specs, const ModelConfig& config,
                                    const RankOwnership& ownership) {
  std::vector<ParamSpec> kept;
  for (const ParamSpec& spec : specs)
    if (ownership.keeps(config, spec)) kept.push_back(spec);
  return kept;
}

template <class T>
void shard_expert_params(ParamStore<T>& params, const ExpertOwnership& ownership) {
  const std::vector<ParamSpec> kept = filter_specs(params.specs(), ownership);
  std::vector<T> values = relayout_by_name<T>(params.specs(), params.values(), kept);
  ParamStore<T> sharded(kept);
  sharded.values() = std::move(values);
  params = std::move(sharded);
}

template <class T>
std::vector<T> relayout_by_name(const std::vector<ParamSpec>& from, std::span<const T> values,
                                const std::vector<ParamSpec>& to) {
  std::map<std::string, std::pair<int64_t, const ParamSpec*>> where;
  int64_t offset = 0;
  for (const ParamSpec& spec : from) {
    where.emplace(spec.name, std::make_pair(offset, &spec));
    offset += spec.numel();
  }
  if (offset != static_cast<int64_t>(values.size()))
    throw Error("relayout: buffer of " + std::to_string(values.size()) +
                " values for a layout of " + std::to_string(offset));
  std::vector<T> out;
  out.reserve(static_cast<size_t>(total_numel(to)));
  for (const ParamSpec& spec : to) {
    auto it = where.find(spec.name);
    if (it == where.end())
      throw Error("relayout: the source layout has no tensor '" + spec.name + "'").field(spec.name);
    if (it->second.second->shape != spec.shape)
      throw Error("relayout: tensor '" + spec.name + "' has another shape in the source layout")
          .field(spec.name);
    const T* src = values.data() + it->second.first;
    out.insert(out.end(), src, src + spec.numel());
  }
  return out;
}

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

template <class T>
LoadedCheckpoint<T> load_checkpoint_shard(const std::string& dir, const RankOwnership& ownership) {
  const std::filesystem::path config_path = std::filesystem::path(dir) / "config.json";
  if (!std::filesystem::exists(config_path))
    throw Error("checkpoint directory has no config.json").file(config_path.string());
  LoadedCheckpoint<T> out;
  out.config = ModelConfig::load(config_path.string());
  const CheckpointReader reader = CheckpointReader::open(dir);
  const std::vector<ParamSpec> whole = model::parameter_specs(out.config);
  const NamingScheme scheme = detect_naming_scheme(reader.names());
  out.scheme = scheme;
  out.params = ParamStore<T>(filter_specs(whole, out.config, ownership));
  // Every tensor is located and checked (names, shapes, scales); only this
  // rank's are read, so FP8/FP4 experts of other ranks are never dequantised.
  std::set<std::string> expected;
  std::vector<float> buffer;
  for (const ParamSpec& spec : whole) {
    std::string name = spec.name;
    if (scheme == NamingScheme::kTransformersHybrid) name = model::hybrid_name(spec.name);
    if (scheme == NamingScheme::kTransformers) {
      const model::TransformersLocation loc = model::transformers_location(out.config, spec.name);
      name = loc.name;
      if (loc.expert >= 0) {
        // Each layer's experts are one fused [E, rows, cols] tensor: this
        // rank's expert is a contiguous slice of it, read alone.
        const int64_t rows = spec.shape[0], cols = spec.shape[1];
        if (expected.insert(loc.name).second) {
          const TensorView* view = reader.find(loc.name);
          const std::vector<int64_t> fused = {out.config.n_routed_experts, loc.rows_total, cols};
          if (!view)
            throw Error("checkpoint " + reader.source() + " has no tensor '" + loc.name +
                        "' (expected shape " + shape_text(fused) + ")")
                .field(loc.name);
          if (view->shape != fused)
            throw Error("tensor '" + loc.name + "' in " + view->file + " has shape " +
                        shape_text(view->shape) + ", expected " + shape_text(fused))
                .field(loc.name);
        }
        if (!out.params.contains(spec.name)) continue;  // another rank's
        buffer.resize(static_cast<size_t>(rows * cols));
        reader.read_f32_range(loc.name, (loc.expert * loc.rows_total + loc.row_offset) * cols,
                              rows * cols, buffer.data());
        out.values_read += rows * cols;
        std::copy(buffer.begin(), buffer.end(), out.params.value(spec.name));
        continue;
      }
    }
    const model::LocatedTensor tensor = model::locate_tensor(reader, name, spec.shape);
    expected.insert(name);
    if (tensor.scale) expected.insert(tensor.scale->name);
    if (!out.params.contains(spec.name)) continue;  // another rank's
    buffer.resize(static_cast<size_t>(spec.numel()));
    model::read_located_tensor(reader, tensor, buffer.data());
    out.values_read += spec.numel();
    std::copy(buffer.begin(), buffer.end(), out.params.value(spec.name));
  }
  const int64_t V = out.config.vocab_size, K = out.config.num_experts_per_tok;
  for (const std::string& released : hash_table_names(out.config)) {
    const std::string name = scheme == NamingScheme::kReleased ? released
                             : scheme == NamingScheme::kTransformers
                                 ? model::transformers_name(released)
                                 : model::hybrid_name(released);
    const TensorView* view = reader.find(name);
    if (!view)
      throw Error("checkpoint " + reader.source() + " has no hash-routing table '" + name + "'")
          .field(name);
    if (view->shape != std::vector<int64_t>{V, K})
      throw Error("hash-routing table '" + name + "' has shape " + shape_text(view->shape) +
                  ", expected " + shape_text({V, K}))
          .field(name);
    expected.insert(name);
    std::vector<int64_t> table = reader.read_i64(name);
    for (int64_t i = 0; i < V * K; ++i)
      if (table[i] < 0 || table[i] >= out.config.n_routed_experts)
        throw Error("hash-routing table '" + name + "' maps token " + std::to_string(i / K) +
                    " to expert " + std::to_string(table[i]) + ", outside [0, " +
                    std::to_string(out.config.n_routed_experts) + ")")
            .field(name);
    out.hash_tables.push_back(std::move(table));
  }
  for (const std::string& name : reader.names())
    if (!expected.count(name))
      throw Error("checkpoint " + reader.source() +
                  " has a tensor this model configuration does not use: " + name)
          .field(name);
  return out;
}

int64_t total_numel(const std::vector<ParamSpec>& specs) {
  int64_t n = 0;
  for (const ParamSpec& spec : specs) n += spec.numel();
  return n;
}

int64_t role_numel(const std::vector<ParamSpec>& specs, ParamRole role) {
  int64_t n = 0;
  for (const ParamSpec& spec : specs)
    if (spec.role == role) n += spec.numel();
  return n;
}

template LoadedCheckpoint<float> load_checkpoint_shard<float>(const std::string&,
                                                              const RankOwnership&);
template LoadedCheckpoint<double> load_checkpoint_shard<double>(const std::string&,
                                                                const RankOwnership&);
template void shard_expert_params<float>(ParamStore<float>&, const ExpertOwnership&);
template void shard_expert_params<double>(ParamStore<double>&, const ExpertOwnership&);
template std::vector<float> relayout_by_name<float>(const std::vector<ParamSpec>&,
                                                    std::span<const float>,
                                                    const std::vector<ParamSpec>&);
template std::vector<double> relayout_by_name<double>(const std::vector<ParamSpec>&,
                                                      std::span<const double>,
                                                      const std::vector<ParamSpec>&);

}  // namespace trex::parallel
