// Routed experts' weights sharded over the EP ranks (model/expert_shard.hpp)
// under mpirun: a model that stores only its own experts computes, through the
// expert-parallel MoE path, bit for bit the losses and gradients of one that
// stores every expert (scattered map, overlap on); the trainer on EP stores
// ~1/ep of the experts per rank, matches 1 rank, and writes the same
// (layout-free) checkpoint files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "mpi/model_fixtures.hpp"
#include "mpi/train_harness.hpp"
#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"
#include "trex/io/safetensors.hpp"
#include "trex/model/model.hpp"
#include "trex/parallel/communicator.hpp"
#include "trex/parallel/ep_token_dispatcher.hpp"
#include "trex/parallel/expert_shard.hpp"
#include "trex/parallel/process_grid.hpp"
#include "trex/train/checkpoint.hpp"

namespace {

using namespace trex;
using namespace trex::model;
using namespace trex::parallel;

using trex::test::mpi::tiny_config;

Batch micro_batch(const ModelConfig& config, int index) {
  return trex::test::mpi::micro_batch(config, index, 4321);
}

TEST(ExpertShardMpi, ShardedWeightsComputeTheSameAsReplicated) {
  auto world = parallel::world();
  parallel::ProcessGrid grid(world, {1, world->size(), 1});
  const int R = grid.ep().size(), rank = grid.ep().rank();
  const ModelConfig config = tiny_config();
  parallel::ExpertParallel ep = parallel::make_expert_parallel(config, grid.ep(), true);
  for (std::vector<int>& map : ep.owner)  // scattered: e -> (3e + 1) mod E mod R
    for (size_t e = 0; e < map.size(); ++e)
      map[e] = static_cast<int>(((3 * e + 1) % map.size()) % static_cast<size_t>(R));
  LossOptions loss;
  loss.balance_loss_weight = 0.01;

  Model<float> replicated(config);
  replicated.init_random(9);
  parallel::EpTokenDispatchers<float> dispatchers(ep);
  replicated.set_token_dispatchers(&dispatchers);
  Model<float> sharded(config);
  sharded.init_random(9);
  shard_expert_params(sharded.params(), ExpertOwnership::of_rank(ep.owner, rank));
  sharded.set_token_dispatchers(&dispatchers);
  ASSERT_LT(sharded.params().size(), replicated.params().size());

  for (int step = 0; step < 2; ++step) {
    const Batch b = micro_batch(config, 10 * step + rank);
    const LossBreakdown a = replicated.forward_backward(b, loss);
    const LossBreakdown s = sharded.forward_backward(b, loss);
    EXPECT_EQ(a.total, s.total) << "step " << step;
  }
  // Every tensor the shard stores has the replicated model's gradient, bit for bit;
  // the replicated model's gradients of experts owned elsewhere are zero here.
  int64_t compared = 0;
  for (const ParamSpec& spec : replicated.params().specs()) {
    const float* want = replicated.params().grads().data() + replicated.params().offset(spec.name);
    if (!sharded.params().contains(spec.name)) {
      for (int64_t i = 0; i < spec.numel(); ++i) ASSERT_EQ(want[i], 0.0f) << spec.name;
      continue;
    }
    const float* got = sharded.params().grads().data() + sharded.params().offset(spec.name);
    ASSERT_EQ(std::memcmp(got, want, static_cast<size_t>(spec.numel()) * sizeof(float)), 0)
        << spec.name;
    compared += 1;
  }
  EXPECT_GT(compared, 100);
  // Expert memory: the shards of the EP group add up to the experts once.
  const int64_t mine = role_numel(sharded.params().specs(), ParamRole::kExpert);
  const int64_t all = role_numel(replicated.params().specs(), ParamRole::kExpert);
  EXPECT_EQ(grid.ep().all_reduce_value(mine), all);
  if (rank == 0)
    std::printf("[expert-shard] EP=%d: parameters per rank %lld of %lld (experts %lld of %lld)\n",
                R, static_cast<long long>(sharded.params().size()),
                static_cast<long long>(replicated.params().size()), static_cast<long long>(mine),
                static_cast<long long>(all));
}

// The trainer on EP=world: each rank stores its experts only, the run and its
// validation (3 batches over 2 or 4 ranks) match 1 rank, and the checkpoint
// holds every tensor of the whole model with its owner's values.
TEST(ExpertShardMpi, TrainerStoresOwnExpertsAndWritesWholeCheckpoint) {
  using namespace trex::test::mpi;
  Communicator& world = *parallel::world();
  RunConfig c = base_config(4);
  c.parallel.ep = world.size();
  // Not a multiple of the data ranks: some rank runs a stand-in validation round.
  c.eval_batches = 3;
  c.out_dir = shared_dir() + "/expert-shard-" + std::to_string(world.size());
  std::unique_ptr<Trainer> trainer;
  const std::vector<double> losses = train_losses(c, parallel::world(), &trainer);
  expect_losses_match(losses, one_rank_losses(c), 0, "EP=" + std::to_string(world.size()));
  const std::vector<ParamSpec> whole = parameter_specs(trainer->model().config());
  const int64_t dense = role_numel(whole, ParamRole::kDense);
  const int64_t experts = role_numel(whole, ParamRole::kExpert);
  EXPECT_EQ(trainer->model().params().size(), dense + experts / world.size());
  expect_replicas_identical(*trainer);
  expect_validation_matches(*trainer, c);

  const std::vector<float> full = trainer->full_parameters();  // collective over EP
  ASSERT_EQ(static_cast<int64_t>(full.size()), total_numel(whole));
  const std::string dir = trainer->save_checkpoint();
  if (world.rank() == 0) {
    // Every tensor of the whole model, each expert with its owner's values.
    // Sharded: every rank wrote its part; the index maps each tensor to a file.
    EXPECT_TRUE(trex::train::is_sharded_checkpoint(dir));
    const trex::CheckpointReader file = trex::CheckpointReader::open(dir);
    int64_t offset = 0;
    for (const ParamSpec& spec : whole) {
      const TensorView* view = file.find(spec.name);
      ASSERT_NE(view, nullptr) << spec.name;
      ASSERT_EQ(view->shape, spec.shape) << spec.name;
      ASSERT_EQ(view->dtype, trex::DType::kF32) << spec.name;
      EXPECT_EQ(std::memcmp(view->data, full.data() + offset,
                            static_cast<size_t>(spec.numel()) * sizeof(float)),
                0)
          << spec.name;
      offset += spec.numel();
    }
    // The optimizer state covers the whole model too: every trained tensor
    // has its first moment, found through the optimizer index.
    const trex::CheckpointReader state =
        trex::CheckpointReader::open(dir + "/optimizer.safetensors.index.json");
    for (const ParamSpec& spec : whole)
      for (const std::string& name : trex::train::Optimizer::state_tensor_names(spec, c.optimizer))
        EXPECT_NE(state.find(name), nullptr) << name;
  }
  world.barrier();
}

}  // namespace
