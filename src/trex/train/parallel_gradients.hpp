#pragma once
// The trainer's GradientStrategy (train/step.hpp) on its DP × EP × PP grid
// (docs/distributed.md, "Data parallelism"): this rank's share of the step's
// micro-batches (micro-batch i on data rank i mod data_size), through the
// pipeline runner when pp > 1; the gradients reduced in buckets over the data
// group (ZeRO-0/1: once per step, ZeRO-2: reduce-scattered per micro-batch),
// the losses and expert loads summed over the ranks; clipping to the global
// norm over the rank's layout (summed over the pipeline's stages, each of
// which holds only its layers); after the update the ZeRO all-gather of the
// parameters. The MTP block's tied copy of the embedding on the head stage and
// the embedding stage's own add their gradients before the data reduction, so
// both copies take the same update.
#include <cstdint>
#include <memory>
#include <vector>

#include "trex/model/model.hpp"
#include "trex/parallel/grad_reducer.hpp"
#include "trex/parallel/pipeline.hpp"
#include "trex/parallel/zero_partition.hpp"
#include "trex/train/metrics.hpp"
#include "trex/train/parallel_setup.hpp"
#include "trex/train/run_config.hpp"
#include "trex/train/step.hpp"

namespace trex::train {

class ParallelGradients final : public GradientStrategy {
 public:
  // Over `model` (which may be replaced by assignment, e.g. on resume) and the
  // grid of `setup`; both must outlive this object.
  ParallelGradients(model::Model<float>& model, const ParallelSetup& setup,
                    const RunConfig& config);

  // Step gradient = Σᵢ nᵢ gᵢ / N (nᵢ the micro-batch's trained tokens, N their
  // sum): the mean over every trained token of the step. A step of one
  // micro-batch without a pipeline uses the engine's gradient as it is.
  StepTotals forward_backward(const std::vector<model::Batch>& micro_batches,
                              const model::LossOptions& loss) override;
  double clip_gradients(double max_norm) override;
  void after_update() override;
  void release_gradients() override;

  // This rank's ZeRO ranges: its dense part and its expert part.
  std::vector<parallel::OptimizerShard> zero_ranges() const;
  // ZeRO-2 reduce-scatters the gradients (each rank keeps its ranges).
  bool scatter() const;
  // The first gradient value this rank holds reduced after forward_backward.
  int64_t first_reduced_gradient() const { return scatter() ? zero_ranges().front().begin : 0; }
  bool pipelined() const { return pipeline_ != nullptr; }
  const parallel::GradReducer& reducer() const { return reducer_; }

  // Of the last step, for its metrics: the gradient reduction (with the
  // step's `exposed_seconds` of communication), the pipeline's worst bubble.
  StepMetrics::Communication communication(double exposed_seconds) const;
  double bubble_fraction() const { return bubble_fraction_; }

  // This rank's share of the step: micro-batch i goes to data rank i mod data_size.
  std::vector<size_t> my_micro_batches(size_t count) const;

 private:
  StepTotals local_gradients(const std::vector<model::Batch>& batches,
                             const std::vector<int64_t>& trained, const std::vector<size_t>& mine,
                             const std::vector<float>& weights, const model::LossOptions& loss);
  StepTotals pipeline_gradients(const std::vector<model::Batch>& batches,
                                const std::vector<size_t>& mine, const model::LossOptions& loss);
  void reduce_step_totals(StepTotals& totals);
  void note_gradient_memory();
  // Adds the other copy's embedding gradient to this one's (both stages).
  void sum_tied_embedding_gradients();
  // `parts` of the flat buffer without the tied embedding copy (counted once,
  // on the embedding stage, in the global norm).
  std::vector<parallel::OptimizerShard> counted_in_norm(
      std::vector<parallel::OptimizerShard> parts) const;

  model::Model<float>& model_;
  const ParallelSetup& setup_;
  int zero_ = 0;
  bool overlap_ = true;
  parallel::ZeroPartition zero_partition_;  // dense over `data`, experts over expert_comm()
  parallel::GradReducer reducer_;
  // PP: runs this rank's stage(s) of the micro-batches in schedule order (pp > 1).
  std::unique_ptr<parallel::PipelineRunner> pipeline_;
  // The pp rank holding the other copy of embed.weight (-1: no tied copy).
  int tied_embedding_peer_ = -1;
  double reduce_wait_seconds_ = 0.0;
  int64_t groups_started_early_ = 0;
  int64_t gradient_bytes_ = 0;    // the step's largest gradient memory sample
  double bubble_fraction_ = 0.0;  // worst stage
};

}  // namespace trex::train
