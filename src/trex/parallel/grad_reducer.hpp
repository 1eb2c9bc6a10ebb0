#pragma once
// Data-parallel gradient reduction in buckets (docs/distributed.md).
//
// The parameters of one layer (its dense tensors and its routed experts, two
// ranges of the flat buffer) form a group; groups are cut into buckets of at
// most bucket_bytes. With overlap, the model's on_gradients_ready hook
// (model::StepOptions) hands a group over as soon as backward has finished it
// and its buckets start reducing on the communication progress thread while
// backward continues; finish_micro_batch() starts whatever is left (all of it
// without overlap) in a fixed order and waits.
//
// A step: begin_step, then for each micro-batch whose gradients are reduced
// begin_micro_batch / backward (hook) / finish_micro_batch, then finish.
// ZeRO-0/1 reduce once per step (the trainer accumulates its micro-batches in
// the buffer and arms only the last one); ZeRO-2 (scatter) reduce-scatters every
// micro-batch and accumulates into this rank's shard, so no rank holds a
// second full-size gradient buffer.
//
// Sum over the `data` communicator (all-reduce, or reduce-scatter onto this
// rank's ZeRO ranges), routed experts sharded over EP over the expert group
// instead; then, with pipeline stages, over `pp` (the stages' gradients have
// disjoint supports); then a scale (1/N trained tokens of the step).
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "trex/model/params.hpp"
#include "trex/parallel/communicator.hpp"
#include "trex/parallel/padded_collectives.hpp"
#include "trex/parallel/zero_partition.hpp"

namespace trex::parallel {

struct GradReducerOptions {
  int64_t bucket_bytes = int64_t{25} << 20;
  // ZeRO-2: reduce-scatter, each rank receives only its ZeRO ranges.
  bool scatter = false;
  // Expert weights sharded over EP (model/expert_shard.hpp): the routed experts'
  // ranges are summed over this group (the ranks holding the same experts, the
  // grid's `dp`) instead of `data`; null: every range over `data`.
  Communicator* experts = nullptr;
  // Reductions running at once: starting one more first waits for the oldest
  // (and, under scatter, gives its pages back). Bounds the collectives'
  // staging and, under ZeRO-2, the gradient pages already handed over to
  // max_in_flight buckets. 0: no bound.
  int64_t max_in_flight = 4;
};

class GradReducer {
 public:
  // A contiguous piece of the flat gradient buffer [begin, end).
  struct Range {
    int64_t begin = 0, end = 0;
    bool expert = false;  // routed-expert tensors
  };
  using RangeFn = std::function<void(int64_t begin, int64_t end)>;

  // `data` / `pp`: null or single-rank when there is nothing to reduce over.
  // `zero`: the ZeRO partition by role (needed when scatter): dense parts over
  // `data`, expert parts over options.experts (else `data`).
  GradReducer(const std::vector<model::ParamSpec>& specs, Communicator* data, Communicator* pp,
              ZeroPartition zero, GradReducerOptions options);

  // Starts a step on `grads` (the flat gradient buffer, alive until finish()
  // returns). `released(begin, end)`, if set, is called under scatter once a
  // bucket's reduce-scatter has completed: this micro-batch no longer needs
  // those gradient values (the trainer returns their pages to the system).
  void begin_step(float* grads, RangeFn released = {});
  // Arms the reduction of the micro-batch whose backward runs next: the buffer
  // must hold its gradients (and nothing the reducer already took) when a
  // group is handed over. `prepare(begin, end)` runs on each bucket just before
  // it is reduced (a caller may add values kept elsewhere; tests count ranges).
  void begin_micro_batch(RangeFn prepare = {});
  // The model's hook: layer's gradients are final (-1 = globals).
  void on_gradients_ready(int64_t layer);
  // Starts the groups not handed over yet and waits for this micro-batch's
  // reductions; the buffer may then be reused for the next micro-batch.
  void finish_micro_batch();
  // Ends the micro-batch in flight if any, writes the reduced ranges into the
  // buffer, reduces over pp and multiplies by `scale`. Afterwards
  // reduced_ranges() of the buffer hold the step's gradient (the rest is stale
  // under scatter).
  void finish(float scale);

  // The parts of the buffer that hold reduced gradients after finish()
  // (everything, or under scatter this rank's dense and expert ZeRO ranges).
  const std::vector<Range>& reduced_ranges() const { return reduced_; }
  int64_t bucket_count() const;
  // Of the last step, summed over its reduced micro-batches.
  int64_t groups_started_early() const { return started_early_; }
  // Of the last step: buckets whose reduction had already completed when
  // finish_micro_batch() was called (communication fully hidden behind backward).
  int64_t buckets_done_before_finish() const { return done_before_finish_; }
  int64_t micro_batches_reduced() const { return micro_batches_; }  // of the last step
  // Resident bytes of the ZeRO-2 shard accumulator (0 otherwise; its pages
  // are given back as finish() moves the sum into the buffer).
  int64_t shard_bytes() const;

 private:
  struct Group {
    int64_t layer = -1;
    std::vector<Range> buckets;
    bool started = false;
  };
  struct Pending {
    Request request;
    Range bucket;
    std::vector<int64_t> counts;  // reduce-scatter counts, alive until completion
    bool completed = false;       // waited for (and released under scatter)
    // Equal-count communicators: the padded staging, copied out on completion.
    std::shared_ptr<PaddedReduceScatter> padded = nullptr;
  };
  void start(Group& group);
  // Waits for the oldest running reductions until fewer than max_in_flight run.
  void limit_in_flight();
  // Ends a reduction: copies a padded reduce-scatter out and hands its bucket
  // to `released_`; waits first.
  void complete(Pending& p);
  // Completes the reductions that are done (all: waits for every one).
  void release_completed(bool wait);
  Communicator* active(Communicator* comm) const;
  Communicator* comm_of(const Range& bucket) const;
  const std::vector<OptimizerShard>& parts_of(const Range& bucket) const;
  int64_t shard_offset_of(const Range& bucket) const;  // into shard_grads_
  void move_out_of_shard(int64_t from, int64_t count, float* out);

  std::vector<Group> groups_;  // launch order without overlap: MTP, L−1..0, globals
  Communicator* data_ = nullptr;
  Communicator* pp_ = nullptr;
  ZeroPartition zero_;
  GradReducerOptions options_;
  std::vector<Range> reduced_;
  OptimizerShard my_dense_, my_expert_;
  float* grads_ = nullptr;
  bool armed_ = false;
  RangeFn prepare_, released_;
  // ZeRO-2: Σ over micro-batches of this rank's ranges (dense, then expert).
  model::PageVector<float> shard_grads_;
  std::vector<Pending> pending_;
  int64_t running_ = 0;  // pending_ not completed yet
  size_t oldest_ = 0;    // pending_ before this index are all completed
  int64_t started_early_ = 0;
  int64_t done_before_finish_ = 0;
  int64_t micro_batches_ = 0;
};

// Σ g² over the trained tensors of `shard` (in double, in buffer order): the
// shards' sums add up to the squared global norm.
double shard_grad_norm_squared(const std::vector<model::ParamSpec>& specs,
                               const OptimizerShard& shard, const float* grads);
// Multiplies the trained gradients of `shard` by `scale`.
void scale_shard_grads(const std::vector<model::ParamSpec>& specs, const OptimizerShard& shard,
                       float* grads, float scale);

}  // namespace trex::parallel
