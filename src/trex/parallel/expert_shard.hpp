#pragma once
// What one rank stores of the model (docs/distributed.md, "Expert weights
// sharded over EP"; docs/pipeline-parallel.md, "Design"). With expert
// parallelism a rank's ParamStore holds only the routed experts it owns under
// the EP map of each MoE block (which may be non-contiguous); with pipeline
// stages only the tensors of its chunks (model::stages_hold). Tensors keep the
// order of parameter_specs: dense first, then the kept experts. The model binds
// null for the others; only the expert-parallel MoE path may run a model
// without all its experts, only the pipeline a model without all its layers.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "trex/model/config.hpp"
#include "trex/model/model.hpp"
#include "trex/model/params.hpp"
#include "trex/model/weights.hpp"

namespace trex::parallel {

// Which routed experts one rank stores, per MoE block (main layers, then MTP
// blocks: ParamSpec::layer of an expert tensor).
struct ExpertOwnership {
  std::vector<std::vector<bool>> owned;  // [block][expert]

  bool owns(int64_t block, int64_t expert) const;
  // Keeps dense specs and the specs of owned experts; throws trex::Error (field
  // "expert_parallel.owner") for an expert tensor of a block the map lacks.
  bool keeps(const model::ParamSpec& spec) const;
  // The experts EP rank `rank` owns under `owner` ([block][expert] -> EP rank).
  static ExpertOwnership of_rank(const std::vector<std::vector<int>>& owner, int rank);
};

// `specs` without the experts `ownership` does not keep (order kept).
std::vector<model::ParamSpec> filter_specs(const std::vector<model::ParamSpec>& specs,
                                           const ExpertOwnership& ownership);

// The tensors one rank stores: its routed experts (nullopt: all) of the layers
// of its pipeline chunks (empty: all layers, embedding and head).
struct RankOwnership {
  std::optional<ExpertOwnership> experts;
  std::vector<model::StageSpec> stages;
  bool keeps(const model::ModelConfig& config, const model::ParamSpec& spec) const;
  bool keeps_everything() const { return !experts && stages.empty(); }
};
std::vector<model::ParamSpec> filter_specs(const std::vector<model::ParamSpec>& specs,
                                           const model::ModelConfig& config,
                                           const RankOwnership& ownership);

// Replaces `params` by a store of the kept specs holding the same values
// (gradients zero). Throws trex::Error when `params` misses a kept tensor.
template <class T>
void shard_expert_params(model::ParamStore<T>& params, const ExpertOwnership& ownership);

// A buffer laid out by `from` (flat, spec order) re-laid out by `to`: every
// tensor of `to` copied by name from `from`. Throws trex::Error naming a tensor
// of `to` that `from` lacks or that has another shape.
template <class T>
std::vector<T> relayout_by_name(const std::vector<model::ParamSpec>& from,
                                std::span<const T> values, const std::vector<model::ParamSpec>& to);

// Loads a checkpoint directory keeping only `ownership`'s tensors. A
// released-scheme checkpoint (what the trainer writes, and DeepSeek's FP8 /
// MXFP4 releases) is checked whole (every tensor present with its shape and
// scale, nothing unexpected, valid hash tables) but only the kept tensors are
// read and dequantised (`values_read` counts them). The transformers schemes
// are read the same way: the hybrid one by its names, the fused one (each
// layer's experts in one [E, rows, cols] tensor) by reading just the kept
// experts' slices of the mapped fused tensors.
template <class T>
model::LoadedCheckpoint<T> load_checkpoint_shard(const std::string& dir,
                                                 const RankOwnership& ownership);
template <class T>
model::LoadedCheckpoint<T> load_checkpoint_shard(const std::string& dir,
                                                 const ExpertOwnership& ownership) {
  return load_checkpoint_shard<T>(dir, RankOwnership{.experts = ownership, .stages = {}});
}

// Elements of the specs (Σ numel), of their dense tensors and of their experts.
int64_t total_numel(const std::vector<model::ParamSpec>& specs);
int64_t role_numel(const std::vector<model::ParamSpec>& specs, model::ParamRole role);

}  // namespace trex::parallel
