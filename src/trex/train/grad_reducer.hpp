#pragma once
// Data-parallel gradient reduction in buckets (docs/distributed.md).
//
// The parameters of one layer (its dense tensors and its routed experts, two
// ranges of the flat buffer) form a group; groups are cut into buckets of at
// most bucket_bytes. With overlap, the model's on_gradients_ready hook
// (model::StepOptions) hands a group over as soon as backward has finished it
// and its buckets start reducing on the communication progress thread while
// backward continues; finish() starts whatever is left (all of it without
// overlap) in a fixed order and waits.
//
// Sum over the `data` communicator (all-reduce, or reduce-scatter onto this
// rank's ZeRO shard), then, with pipeline stages, over `pp` (the stages' gradients
// have disjoint supports), then a scale (1/N trained tokens of the step).
#include <cstdint>
#include <functional>
#include <vector>

#include "trex/dist/communicator.hpp"
#include "trex/model/params.hpp"
#include "trex/train/optimizer.hpp"

namespace trex::train {

struct GradReducerOptions {
  int64_t bucket_bytes = int64_t{25} << 20;
  // ZeRO-2: reduce-scatter, each data rank receives only its shard.
  bool scatter = false;
  // Expert weights sharded over EP (model/expert_shard.hpp): the routed experts'
  // ranges are summed over this group (the ranks holding the same experts, the
  // grid's `dp`) instead of `data`; null: every range over `data`. Not with scatter.
  dist::Communicator* experts = nullptr;
};

class GradReducer {
 public:
  // A contiguous piece of the flat gradient buffer [begin, end).
  struct Range {
    int64_t begin = 0, end = 0;
    bool expert = false;  // routed-expert tensors
  };

  // `data` / `pp`: null or single-rank when there is nothing to reduce over.
  // `shards`: the ZeRO partition over the data ranks (needed when scatter).
  GradReducer(const std::vector<model::ParamSpec>& specs, dist::Communicator* data,
              dist::Communicator* pp, std::vector<OptimizerShard> shards,
              GradReducerOptions options);

  // Starts a step on `grads` (the flat gradient buffer, alive and untouched
  // outside prepare until finish() returns). `prepare(begin, end)` runs on each
  // range just before it is reduced (the trainer folds the earlier
  // micro-batches into the last one there); it may be empty.
  void begin_step(float* grads, std::function<void(int64_t begin, int64_t end)> prepare);
  // The model's hook: layer's gradients are final (-1 = globals).
  void on_gradients_ready(int64_t layer);
  // Starts the groups not handed over yet, waits for everything, reduces over
  // pp and multiplies the result by `scale`. Afterwards reduced_range() of the
  // gradient buffer holds the step's gradient (the rest is stale under scatter).
  void finish(float scale);

  // The part of the buffer that holds reduced gradients after finish().
  Range reduced_range() const { return reduced_; }
  int64_t bucket_count() const;
  int64_t groups_started_early() const { return started_early_; }  // of the last step
  // Of the last step: buckets whose reduction had already completed when
  // finish() was called (communication fully hidden behind backward).
  int64_t buckets_done_before_finish() const { return done_before_finish_; }

 private:
  struct Group {
    int64_t layer = -1;
    std::vector<Range> buckets;
    bool started = false;
  };
  void start(Group& group);
  dist::Communicator* active(dist::Communicator* comm) const;

  std::vector<Group> groups_;  // launch order without overlap: MTP, L−1..0, globals
  dist::Communicator* data_ = nullptr;
  dist::Communicator* pp_ = nullptr;
  std::vector<OptimizerShard> shards_;
  GradReducerOptions options_;
  Range reduced_;
  int data_rank_ = 0;
  float* grads_ = nullptr;
  std::function<void(int64_t, int64_t)> prepare_;
  std::vector<float> shard_grads_;  // reduce-scatter destination (ZeRO-2)
  std::vector<dist::Request> pending_;
  std::vector<std::vector<int64_t>> pending_counts_;  // alive until the requests complete
  int64_t started_early_ = 0;
  int64_t done_before_finish_ = 0;
};

// Σ g² over the trained tensors of `shard` (in double, in buffer order): the
// shards' sums add up to the squared global norm.
double shard_grad_norm_squared(const std::vector<model::ParamSpec>& specs,
                               const OptimizerShard& shard, const float* grads);
// Multiplies the trained gradients of `shard` by `scale`.
void scale_shard_grads(const std::vector<model::ParamSpec>& specs, const OptimizerShard& shard,
                       float* grads, float scale);

}  // namespace trex::train
