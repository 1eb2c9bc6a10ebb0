#pragma once
// The training optimizer over a model::ParamStore<float>: the spec §6 split
// (Muon for OptimizerGroup::kMuon matrices, one logical matrix per ParamSpec —
// every routed expert's w1/w2/w3 is its own spec; AdamW for kAdamW; kNotTrained
// such as the router bias is never touched), with flat state buffers aligned
// with the parameter buffer so a checkpoint saves them as two tensors.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "trex/model/params.hpp"
#include "trex/parallel/zero_partition.hpp"
#include "trex/train/optim/adamw.hpp"
#include "trex/train/optim/muon.hpp"

namespace trex::train {

struct OptimizerOptions {
  AdamWOptions adamw;
  MuonOptions muon;
  // false: the kMuon group is updated by AdamW as well (plain-AdamW baseline).
  bool use_muon = true;
};

class Optimizer {
 public:
  // Unsharded: state for every parameter.
  Optimizer(const model::ParamStore<float>& params, OptimizerOptions options);
  // ZeRO: state only for `shard` (the buffers are shard.size() long); step()
  // updates only the shard's parameters.
  Optimizer(const model::ParamStore<float>& params, OptimizerOptions options,
            parallel::OptimizerShard shard);
  // ZeRO with several disjoint, ascending ranges (ZeroPartition::ranges): the
  // state buffers hold the ranges one after the other.
  Optimizer(const model::ParamStore<float>& params, OptimizerOptions options,
            std::vector<parallel::OptimizerShard> ranges);

  // One update from params.grads() at learning rate `lr` (the caller clips and
  // zeroes gradients). Increments step_count() first, so the first update uses
  // bias-correction step 1. Throws when the store's layout differs from the one
  // the optimizer was built for.
  void step(model::ParamStore<float>& params, double lr);

  int64_t step_count() const { return step_; }
  const OptimizerOptions& options() const { return options_; }

  // State of the ranges, concatenated in range order (unsharded: indexed
  // exactly like values()): first_moment holds AdamW's m and Muon's momentum
  // buffer; second_moment holds AdamW's v (zero elsewhere).
  const std::vector<float>& first_moment() const { return first_moment_; }
  const std::vector<float>& second_moment() const { return second_moment_; }
  const std::vector<parallel::OptimizerShard>& ranges() const { return ranges_; }
  int64_t state_size() const { return static_cast<int64_t>(first_moment_.size()); }
  bool sharded() const { return state_size() != size_; }
  int64_t param_count() const { return size_; }

  // safetensors file with tensors "first_moment" and "second_moment" (F32, [N])
  // and metadata {"trex_optimizer": "adamw+muon"|"adamw", "step", "param_count",
  // "layout_hash"} (written atomically). The file always holds the whole
  // model's state (layout-free): a sharded optimizer saves through the
  // second form with the state gathered from every shard. load_state checks
  // that the file matches this optimizer's layout and options (throws
  // trex::Error naming the file) and keeps this optimizer's shard of it.
  void save_state(const std::string& path) const;
  void save_state(const std::string& path, std::span<const float> whole_first_moment,
                  std::span<const float> whole_second_moment) const;
  void load_state(const std::string& path);
  // The same state in memory (for tests / in-process resume): buffers of the
  // whole model (a sharded optimizer keeps its ranges) or of the ranges.
  void set_state(int64_t step, std::vector<float> first_moment, std::vector<float> second_moment);

 private:
  // This optimizer's ranges of a whole-model buffer, concatenated.
  std::vector<float> gather_ranges(const void* whole) const;  // F32 values

  OptimizerOptions options_;
  std::vector<model::ParamSpec> specs_;
  uint64_t layout_hash_ = 0;
  int64_t size_ = 0;
  std::vector<parallel::OptimizerShard> ranges_;
  int64_t step_ = 0;
  std::vector<float> first_moment_;
  std::vector<float> second_moment_;
  std::vector<float> workspace_;
};

}  // namespace trex::train
