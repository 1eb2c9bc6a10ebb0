#pragma once
// The training optimizer over a model::ParamStore<float>: the spec §6 split
// (Muon for OptimizerGroup::kMuon matrices, one logical matrix per ParamSpec —
// every routed expert's w1/w2/w3 is its own spec; AdamW for kAdamW; kNotTrained
// such as the router bias is never touched). The first moment is a flat buffer
// aligned with the parameter ranges the optimizer owns (AdamW's m, Muon's
// momentum); the second moment (AdamW's v) is stored only for the tensors
// AdamW updates — Muon keeps momentum only. Moments are fp32 or bf16
// (OptimizerOptions::moment_dtype); updates compute in fp32.
// With OptimizerOptions::master_weights (run config param_dtype = "bf16") the
// optimizer also holds the fp32 master weights of its ranges, laid out like
// the first moment: an update reads and writes the master, then stores it
// rounded to bf16 in the parameter buffer, which therefore holds bf16 values
// only (Megatron's distributed optimizer; DeepSeek-V3 keeps master weights in
// fp32 in the same way).
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "trex/io/safetensors.hpp"
#include "trex/model/params.hpp"
#include "trex/parallel/zero_partition.hpp"
#include "trex/train/optim/adamw.hpp"
#include "trex/train/optim/moment_buffer.hpp"
#include "trex/train/optim/muon.hpp"

namespace trex::train {

struct OptimizerOptions {
  AdamWOptions adamw;
  MuonOptions muon;
  // false: the kMuon group is updated by AdamW as well (plain-AdamW baseline).
  bool use_muon = true;
  // Storage of both moments; kBF16 halves the optimizer state (updates still
  // compute in fp32, so an fp32 run is unchanged by this option's existence).
  MomentDType moment_dtype = MomentDType::kF32;
  // fp32 master weights of the optimizer's ranges; the parameters are their
  // bf16 rounding (see above). Off: the parameters are the fp32 weights.
  bool master_weights = false;
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
  // the optimizer was built for. With master weights the ranges' parameters
  // are then the master rounded to bf16 (the caller's ZeRO gather spreads them).
  void step(model::ParamStore<float>& params, double lr);

  // Master weights only (a no-op otherwise): the master of this optimizer's
  // ranges takes the store's values unless the state loaded since the last
  // call brought a master, then every trained tensor of the store (all of
  // it, not only the ranges: every rank rounds the same values the same way)
  // is rounded to bf16. Call after building the optimizer over freshly
  // initialised or loaded parameters and after every checkpoint load.
  void round_working_params(model::ParamStore<float>& params);
  bool has_master() const { return options_.master_weights; }
  // The master weights of the ranges, concatenated like first_moment() (empty
  // without master weights).
  const std::vector<float>& master() const { return master_; }

  int64_t step_count() const { return step_; }
  const OptimizerOptions& options() const { return options_; }

  // State of the ranges as fp32, concatenated in range order (unsharded:
  // indexed exactly like values()): first_moment holds AdamW's m and Muon's
  // momentum buffer; second_moment holds AdamW's v and zero where AdamW does
  // not update (that zero is not stored). Both are copies (bf16 decoded).
  std::vector<float> first_moment() const { return first_moment_.to_f32(); }
  std::vector<float> second_moment() const;
  const std::vector<parallel::OptimizerShard>& ranges() const { return ranges_; }
  int64_t state_size() const { return first_moment_.size(); }
  bool sharded() const { return state_size() != size_; }
  int64_t param_count() const { return size_; }
  // Elements of the second moment actually stored (AdamW-updated elements of
  // the ranges) and the bytes both moments occupy.
  int64_t second_moment_size() const { return second_moment_.size(); }
  int64_t state_bytes() const { return first_moment_.bytes() + second_moment_.bytes(); }
  // The fp32 master weights' bytes (0 without master weights).
  int64_t master_bytes() const { return static_cast<int64_t>(master_.size() * sizeof(float)); }

  // safetensors file with tensors "first_moment" and "second_moment" (F32, [N])
  // and metadata {"trex_optimizer": "adamw+muon"|"adamw", "step", "param_count",
  // "layout_hash"} (written atomically). The file always holds the whole
  // model's state (layout-free): a sharded optimizer saves through the
  // second form with the state gathered from every shard. load_state checks
  // that the file matches this optimizer's layout and options (throws
  // trex::Error naming the file) and keeps this optimizer's shard of it.
  void save_state(const std::string& path) const;
  // With master weights the file adds "master" (F32 [N]); `whole_master` is
  // then the whole model's master gathered from every shard.
  void save_state(const std::string& path, std::span<const float> whole_first_moment,
                  std::span<const float> whole_second_moment,
                  std::span<const float> whole_master = {}) const;
  void load_state(const std::string& path);
  // Sharded checkpoints (train/checkpoint.hpp), written without gathering: the
  // state of the tensors in `ranges` (ranges of this optimizer's layout, each
  // inside its own ranges) as fp32 tensors "first_moment.<name>" (every
  // trained tensor) and "second_moment.<name>" (those AdamW updates), with
  // metadata naming the optimizer, its step, its moment dtype and the whole
  // model's layout `whole_layout` (what a rank of another layout checks).
  void save_state_shard(const std::string& path,
                        const std::vector<parallel::OptimizerShard>& ranges,
                        const std::vector<model::ParamSpec>& whole_layout) const;
  // This optimizer's ranges read tensor by tensor from such shards (a reader
  // over their index, whose metadata holds the same keys); only the tensors
  // of its ranges are read. Errors name the index and the tensor or key.
  void load_state_shards(const CheckpointReader& shards,
                         const std::vector<model::ParamSpec>& whole_layout);
  // The tensor names save_state_shard gives `spec`'s state under `options`
  // ("master.<name>" for every trained tensor with master weights; a state
  // without them loads into a run with master weights, which then takes the
  // master from the parameters).
  static std::vector<std::string> state_tensor_names(const model::ParamSpec& spec,
                                                     const OptimizerOptions& options);
  // Moment elements an optimizer over `ranges` of a store laid out by `specs`
  // keeps: the first moment over every value of the ranges, the second only
  // where AdamW updates (Muon keeps momentum only). What the constructor
  // allocates; the memory accounting (train/state_accounting.hpp) uses it too.
  struct StateElements {
    int64_t first = 0, second = 0;
  };
  static StateElements state_elements(const std::vector<model::ParamSpec>& specs,
                                      const std::vector<parallel::OptimizerShard>& ranges,
                                      const OptimizerOptions& options);
  // fp32 values of the scratch an update over those ranges keeps between
  // steps (the batched Muon workspace; with bf16 moments also the fp32 copies
  // of the moments it updates): for the memory accounting.
  static int64_t work_elements(const std::vector<model::ParamSpec>& specs,
                               const std::vector<parallel::OptimizerShard>& ranges,
                               const OptimizerOptions& options);

  // The same state in memory (for tests / in-process resume): buffers of the
  // whole model (a sharded optimizer keeps its ranges) or of the ranges.
  // `master` (whole or ranges; empty: none) is kept only with master weights.
  void set_state(int64_t step, std::vector<float> first_moment, std::vector<float> second_moment,
                 std::vector<float> master = {});

 private:
  enum class Update { kAdamW, kMuon, kNone };
  // One parameter tensor inside the ranges: where its values, its first
  // moment and (AdamW only) its stored second moment start.
  struct Slot {
    size_t spec = 0;
    Update update = Update::kNone;
    int64_t param_offset = 0, state_offset = 0, second_offset = -1;
  };

  // The metadata of a whole-state file (save_state).
  std::map<std::string, std::string> state_metadata() const;
  // This optimizer's ranges of a whole-model buffer, concatenated.
  std::vector<float> gather_ranges(const void* whole) const;  // F32 values
  // The master of the ranges := those ranges of the store's values.
  void take_master_from(const model::ParamStore<float>& params);
  // Where a slot's update reads and writes its weights: the master or the store.
  float* weights_of(const Slot& slot, float* params);
  void adamw_step(const Slot& slot, float* weights, const float* grads, double lr);
  void muon_step(std::span<const Slot* const> slots, float* params, const float* grads, double lr);

  OptimizerOptions options_;
  std::vector<model::ParamSpec> specs_;
  uint64_t layout_hash_ = 0;
  int64_t size_ = 0;
  std::vector<parallel::OptimizerShard> ranges_;
  std::vector<Slot> slots_;
  int64_t step_ = 0;
  MomentBuffer first_moment_;
  MomentBuffer second_moment_;
  std::vector<float> workspace_;
  // fp32 master weights of the ranges (state_offset-indexed; empty without
  // master weights) and whether they hold values yet (set by a load that
  // brought a master or by round_working_params).
  std::vector<float> master_;
  bool master_set_ = false;
  // fp32 scratch of bf16 moments during an update.
  std::vector<float> first_scratch_, second_scratch_;
};

}  // namespace trex::train
