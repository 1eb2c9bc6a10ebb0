#pragma once
// What the trainer builds before step 1 to run on its DP × EP × PP grid
// (docs/distributed.md): the process grid over the world's ranks, the
// expert-parallel context (contiguous map, or the placement file of `trex plan
// experts`) with its token dispatchers, the routed experts and the pipeline
// chunks this rank stores, and this rank's model (only those tensors). The ZeRO partition, the
// gradient reducer and the pipeline runner are built over it by ParallelGradients
// (train/parallel_gradients.hpp).
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "trex/model/model.hpp"
#include "trex/parallel/communicator.hpp"
#include "trex/parallel/ep_token_dispatcher.hpp"
#include "trex/parallel/expert_parallel.hpp"
#include "trex/parallel/expert_shard.hpp"
#include "trex/parallel/pipeline.hpp"
#include "trex/parallel/process_grid.hpp"
#include "trex/parallel/zero_partition.hpp"
#include "trex/train/optim/optimizer.hpp"
#include "trex/train/run_config.hpp"

namespace trex::train {

struct ParallelSetup {
  std::unique_ptr<parallel::ProcessGrid> grid;
  // EP (ep > 1): the context the model's MoE blocks dispatch through, and its dispatchers.
  std::unique_ptr<parallel::ExpertParallel> expert_parallel;
  std::unique_ptr<parallel::EpTokenDispatchers<float>> expert_dispatchers;
  // EP: the routed experts this rank stores (the others live on their owners).
  std::optional<parallel::ExpertOwnership> ownership;
  // PP: the chunks this rank runs, whose tensors are the only ones it stores
  // (empty without pipeline stages), and whether it holds the MTP block's tied
  // copy of the embedding (model::holds_tied_embedding).
  std::vector<model::StageSpec> stages;
  bool tied_embedding = false;
  ParallelConfig parallel_config;  // the run's [parallel] section
  // Everything this rank stores: its experts of its stages' layers.
  parallel::RankOwnership rank_ownership() const { return {ownership, stages}; }

  // The grid over `world` (null: parallel::world()), which must have
  // parallel.dp·ep·pp ranks, and with ep > 1 the expert-parallel context.
  static ParallelSetup build(const RunConfig& config,
                             std::shared_ptr<parallel::Communicator> world);

  bool is_root() const { return grid->world().rank() == 0; }
  // The ranks that hold the same routed experts: with expert weights sharded
  // over EP the `dp` group, else every data rank. ZeRO partitions the dense
  // tensors over `data` and the experts over this group.
  parallel::Communicator& expert_comm() const { return ownership ? grid->dp() : grid->data(); }
  // The ZeRO partition of a store with layout `specs` (dense over `data`,
  // experts over expert_comm()).
  parallel::ZeroPartition zero_partition(const std::vector<model::ParamSpec>& specs) const;
  // The parameter layout of data rank `r` for a model `config` whose rank-local
  // store is `own` (with expert weights sharded over EP: the dense tensors and
  // the experts of its EP rank r mod ep).
  std::vector<model::ParamSpec> layout_of_data_rank(int r, const model::ModelConfig& config,
                                                    const std::vector<model::ParamSpec>& own) const;
  // The same for data rank `r` of pipeline stage `pp_rank` (its chunks' tensors).
  std::vector<model::ParamSpec> layout_of_rank(int pp_rank, int r, const model::ModelConfig& config,
                                               const std::vector<model::ParamSpec>& own) const;
  // The chunks pp rank `pp_rank` runs (empty without pipeline stages).
  std::vector<model::StageSpec> stages_of(int pp_rank, const model::ModelConfig& config) const;
  // Exposed communication of every communicator of the grid (seconds blocked in wait).
  double exposed_seconds() const;
  // EP: bytes of token rows this rank has sent to other EP ranks so far
  // (dispatch + combine, both passes).
  int64_t ep_bytes_sent() const;
};

// The model config of the run: the init checkpoint's, else model_config.
model::ModelConfig run_model_config(const RunConfig& config);

// What world rank (pipeline stage pp_rank, EP rank ep_rank) of the grid of
// `layout` stores: the chunks of its stage (with pp > 1) and the experts
// `owner` (run_expert_owners) gives its EP rank (with ep > 1). The one rule
// build_model, the checkpoint layouts and the dry-run accounting share.
std::vector<model::StageSpec> stages_of_rank(const ParallelConfig& layout,
                                             const model::ModelConfig& model, int pp_rank);
parallel::RankOwnership ownership_of_rank(const ParallelConfig& layout,
                                          const model::ModelConfig& model,
                                          const std::vector<std::vector<int>>& owner, int pp_rank,
                                          int ep_rank);

// The owner EP rank of every routed expert of every MoE block (main layers,
// then MTP): contiguous, or parallel.expert_placement's map (checked against
// the model and the EP size; errors name the file).
std::vector<std::vector<int>> run_expert_owners(const RunConfig& config,
                                                const model::ModelConfig& model);

// This rank's model: random init or the init checkpoint (verified first). With
// EP or PP it holds only its own routed experts of its own stages' layers from
// the start: a random init fills just them (the whole model's values), a
// checkpoint is read for just them.
model::Model<float> build_model(const RunConfig& config, const ParallelSetup& setup);

// The optimizer over `params`; under ZeRO with state for `zero_ranges` only.
Optimizer make_optimizer(const RunConfig& config, const model::ParamStore<float>& params,
                         const std::vector<parallel::OptimizerShard>& zero_ranges);

// The start-up log lines of a multi-rank run: micro-batches per data rank,
// ZeRO, gradient buckets; this rank's parameter, gradient-buffer and
// optimizer-state bytes against the whole model's parameters, the largest sum
// of the three on any rank (state_bytes_on_largest_rank), what this rank's
// pipeline stage holds. Not collective (rank 0 alone may log).
void log_parallel_layout(const ParallelSetup& setup, const RunConfig& config,
                         const model::Model<float>& model, int64_t optimizer_state_bytes,
                         int64_t largest_state_bytes, int64_t gradient_buckets);
// Parameters + gradient buffer + optimizer state of the rank holding the most
// (pipeline stages and EP ranks differ). Collective over the world.
int64_t state_bytes_on_largest_rank(const ParallelSetup& setup, const model::Model<float>& model,
                                    int64_t optimizer_state_bytes);

}  // namespace trex::train
