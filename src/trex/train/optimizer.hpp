#pragma once
// The training optimizer over a model::ParamStore<float>: the spec §6 split
// (Muon for OptimizerGroup::kMuon matrices, one logical matrix per ParamSpec —
// every routed expert's w1/w2/w3 is its own spec; AdamW for kAdamW; kNotTrained
// such as the router bias is never touched), with flat state buffers aligned
// with the parameter buffer so a checkpoint saves them as two tensors.
#include <cstdint>
#include <string>
#include <vector>

#include "trex/model/params.hpp"
#include "trex/train/adamw.hpp"
#include "trex/train/muon.hpp"

namespace trex::train {

struct OptimizerOptions {
  AdamWOptions adamw;
  MuonOptions muon;
  // false: the kMuon group is updated by AdamW as well (plain-AdamW baseline).
  bool use_muon = true;
};

class Optimizer {
 public:
  Optimizer(const model::ParamStore<float>& params, OptimizerOptions options);

  // One update from params.grads() at learning rate `lr` (the caller clips and
  // zeroes gradients). Increments step_count() first, so the first update uses
  // bias-correction step 1. Throws when the store's layout differs from the one
  // the optimizer was built for.
  void step(model::ParamStore<float>& params, double lr);

  int64_t step_count() const { return step_; }
  const OptimizerOptions& options() const { return options_; }

  // State, indexed like ParamStore::values(): first_moment holds AdamW's m and
  // Muon's momentum buffer; second_moment holds AdamW's v (zero elsewhere).
  const std::vector<float>& first_moment() const { return first_moment_; }
  const std::vector<float>& second_moment() const { return second_moment_; }

  // safetensors file with tensors "first_moment" and "second_moment" (F32, [N])
  // and metadata {"trex_optimizer": "adamw+muon"|"adamw", "step", "param_count",
  // "layout_hash"} (written atomically). load_state checks that the file matches
  // this optimizer's layout and options and throws trex::Error naming the file.
  void save_state(const std::string& path) const;
  void load_state(const std::string& path);
  // The same state in memory (for tests / in-process resume).
  void set_state(int64_t step, std::vector<float> first_moment, std::vector<float> second_moment);

 private:
  OptimizerOptions options_;
  std::vector<model::ParamSpec> specs_;
  uint64_t layout_hash_ = 0;
  int64_t size_ = 0;
  int64_t step_ = 0;
  std::vector<float> first_moment_;
  std::vector<float> second_moment_;
  std::vector<float> workspace_;
};

}  // namespace trex::train
