// Data parallelism under mpirun (registered in tests/mpi/mpi_tests.cmake):
// fp32 losses of DP runs (ZeRO 0/1/2, overlapped or not) equal the 1-rank run
// within 1e-5 relative, ranks stay bitwise identical, and checkpoints resume
// across layouts (DP=2 ZeRO-1 -> 1 rank and back). The 1-rank reference runs
// inside each rank on parallel::make_self_communicator().
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <tuple>

#include "mpi/train_harness.hpp"
#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/dtypes.hpp"
#include "trex/core/error.hpp"
#include "trex/model/checkpoint_export.hpp"
#include "trex/parallel/communicator.hpp"
#include "trex/train/checkpoint.hpp"
#include "trex/train/state_accounting.hpp"
#include "trex/train/trainer.hpp"

namespace {

using namespace trex::test::mpi;

class DataParallel2 : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(DataParallel2, TwentyStepsMatchOneRank) {
  if (trex::parallel::world()->size() != 2) GTEST_SKIP() << "needs mpirun -np 2";
  const auto [zero, overlap] = GetParam();
  RunConfig c = base_config(20);
  c.parallel.dp = 2;
  c.parallel.zero = zero;
  c.parallel.overlap_grad_reduce = overlap;
  c.parallel.bucket_mb = 0.25;  // several buckets per layer on the tiny model
  c.out_dir = shared_dir() + "/dp2";
  std::unique_ptr<Trainer> trainer;
  const std::vector<double> losses = train_losses(c, trex::parallel::world(), &trainer);
  expect_losses_match(losses, one_rank_losses(c), 0,
                      "DP=2 zero " + std::to_string(zero) + (overlap ? " overlap" : ""));
  expect_replicas_identical(*trainer);
  expect_validation_matches(*trainer, c);
  // ZeRO: this rank holds the optimizer state of about half the model.
  const double state_share = static_cast<double>(trainer->optimizer().state_size()) /
                             static_cast<double>(trainer->model().params().size());
  if (zero > 0) {
    EXPECT_GT(state_share, 0.3);
    EXPECT_LT(state_share, 0.7);
  } else {
    EXPECT_EQ(state_share, 1.0);
  }
  // The 20 steps actually trained (not a flat curve).
  EXPECT_LT(losses.back(), losses.front() - 0.1);
}

INSTANTIATE_TEST_SUITE_P(ZeroAndOverlap, DataParallel2,
                         ::testing::Combine(::testing::Values(0, 1, 2), ::testing::Bool()));

TEST(DataParallel4, TwentyStepsZero1MatchOneRank) {
  if (trex::parallel::world()->size() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  RunConfig c = base_config(20);
  c.parallel.dp = 4;
  c.parallel.zero = 1;
  c.out_dir = shared_dir() + "/dp4";
  std::unique_ptr<Trainer> trainer;
  const std::vector<double> losses = train_losses(c, trex::parallel::world(), &trainer);
  expect_losses_match(losses, one_rank_losses(c), 0, "DP=4 zero 1");
  expect_replicas_identical(*trainer);
  expect_validation_matches(*trainer, c);
}

// Max |a − b| over max |b| of two optimizer-state files.
double relative_state_difference(const std::string& a_dir, const std::string& b_dir,
                                 const trex::train::OptimizerOptions& options) {
  const auto model = trex::model::Model<float>::from_checkpoint(b_dir);
  trex::train::Optimizer a(model.params(), options), b(model.params(), options);
  // Either format (a multi-rank run writes sharded files by default).
  trex::train::load_checkpoint_optimizer_state(a_dir, model.params(), model.config(), a);
  trex::train::load_checkpoint_optimizer_state(b_dir, model.params(), model.config(), b);
  EXPECT_EQ(a.step_count(), b.step_count());
  double diff = 0, scale = 0;
  const std::vector<float> a_first = a.first_moment(), b_first = b.first_moment();
  for (size_t i = 0; i < b_first.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(a_first[i] - b_first[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b_first[i])));
  }
  return scale > 0 ? diff / scale : 1.0;
}

// `c` resumed alone (this rank only) from OUT `from_dir`'s latest checkpoint.
std::unique_ptr<Trainer> resume_on_one_rank(RunConfig c, const std::string& from_dir) {
  c.out_dir = from_dir;
  return std::make_unique<Trainer>(
      c, trex::train::TrainerOptions{.resume = true,
                                     .quiet = true,
                                     .write_metrics = false,
                                     .world = trex::parallel::make_self_communicator()});
}

// The losses of the steps `t` has left to run.
std::vector<double> remaining_losses(Trainer& t) {
  std::vector<double> losses;
  while (t.step() < t.total_steps()) losses.push_back(t.train_step().get("loss"));
  return losses;
}

// Save with DP=2 ZeRO-1, resume with 1 rank; save with 1 rank, resume with
// DP=2 ZeRO-1: steps k+1..n equal the uninterrupted 1-rank run.
TEST(DataParallelResume, LayoutChangeResumeMatchesUninterruptedRun) {
  Communicator& world = *trex::parallel::world();
  if (world.size() != 2) GTEST_SKIP() << "needs mpirun -np 2";
  constexpr int64_t kSteps = 6, kSaveAt = 3;
  RunConfig c = base_config(kSteps);
  const std::vector<double>& reference = one_rank_losses(c);
  RunConfig dp2 = c;
  dp2.parallel.dp = 2;
  dp2.parallel.zero = 1;
  RunConfig one = c;

  // DP=2 ZeRO-1 for k steps (its checkpoint), then 1 rank from it.
  dp2.out_dir = shared_dir() + "/resume-from-dp2";
  {
    Trainer t(dp2, {.quiet = true, .stop_after_step = kSaveAt, .write_metrics = false});
    const trex::train::TrainSummary s = t.run();
    EXPECT_TRUE(s.interrupted);
    EXPECT_EQ(s.steps, kSaveAt);
  }
  // The same k steps saved in the whole format (rank 0 gathers).
  RunConfig dp2_whole = dp2;
  dp2_whole.checkpoint_format = trex::train::CheckpointFormat::kWhole;
  dp2_whole.out_dir = shared_dir() + "/resume-from-dp2-whole";
  {
    Trainer t(dp2_whole, {.quiet = true, .stop_after_step = kSaveAt, .write_metrics = false});
    EXPECT_EQ(t.run().steps, kSaveAt);
  }
  // 1 rank for k steps, then DP=2 ZeRO-1 from its checkpoint.
  one.out_dir = shared_dir() + "/resume-from-one";
  save_one_rank_checkpoint(one, kSaveAt);

  // Layout-free files: the gathered ZeRO state is the 1-rank state.
  const std::string saved_dp2 =
      dp2.out_dir + "/checkpoints/" + trex::train::checkpoint_name(kSaveAt);
  const std::string saved_one =
      one.out_dir + "/checkpoints/" + trex::train::checkpoint_name(kSaveAt);
  EXPECT_LT(relative_state_difference(saved_dp2, saved_one, c.optimizer), 1e-4);
  // Sharded (each rank its files) and whole (gathered on rank 0) hold the
  // same bits: weights and both moments.
  const std::string saved_whole =
      dp2_whole.out_dir + "/checkpoints/" + trex::train::checkpoint_name(kSaveAt);
  if (world.rank() == 0) {
    EXPECT_TRUE(trex::train::is_sharded_checkpoint(saved_dp2));
    EXPECT_FALSE(trex::train::is_sharded_checkpoint(saved_whole));
    for (const char* file :
         {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
          "optimizer-00001-of-00002.safetensors", "optimizer-00002-of-00002.safetensors"})
      EXPECT_TRUE(std::filesystem::exists(saved_dp2 + "/" + file)) << file;
    const auto sharded = trex::model::Model<float>::from_checkpoint(saved_dp2);
    const auto whole = trex::model::Model<float>::from_checkpoint(saved_whole);
    EXPECT_EQ(sharded.params().values(), whole.params().values());
    trex::train::Optimizer a(sharded.params(), c.optimizer), b(whole.params(), c.optimizer);
    trex::train::load_checkpoint_optimizer_state(saved_dp2, sharded.params(), sharded.config(), a);
    trex::train::load_checkpoint_optimizer_state(saved_whole, whole.params(), whole.config(), b);
    EXPECT_EQ(a.step_count(), b.step_count());
    EXPECT_EQ(a.first_moment(), b.first_moment());
    EXPECT_EQ(a.second_moment(), b.second_moment());
  }

  if (world.rank() == 0) {
    const std::unique_ptr<Trainer> t = resume_on_one_rank(one, dp2.out_dir);
    ASSERT_EQ(t->step(), kSaveAt);
    expect_losses_match(remaining_losses(*t), reference, kSaveAt, "DP=2 ZeRO-1 -> 1 rank");
  }
  world.barrier();
  {
    RunConfig resume = dp2;
    resume.out_dir = one.out_dir;
    Trainer t(resume, {.resume = true, .quiet = true, .write_metrics = false});
    ASSERT_EQ(t.step(), kSaveAt);
    std::vector<double> losses;
    while (t.step() < t.total_steps()) losses.push_back(t.train_step().get("loss"));
    expect_losses_match(losses, reference, kSaveAt, "1 rank -> DP=2 ZeRO-1");
    expect_replicas_identical(t);
    // Its final checkpoint, each rank writing its part, loads on 1 rank.
    const std::string final_dir = t.save_checkpoint();
    EXPECT_TRUE(trex::train::is_sharded_checkpoint(final_dir));
    EXPECT_FALSE(std::filesystem::exists(final_dir + "/optimizer.safetensors"));
    EXPECT_EQ(trex::model::Model<float>::from_checkpoint(final_dir).params().values(),
              t.model().params().copy_values());
    // `trex export` streams it into one HF (transformers-scheme) checkpoint.
    if (world.rank() == 0) {
      const std::string exported = shared_dir() + "/resume-exported";
      const trex::model::ExportSummary summary = trex::model::export_checkpoint(
          final_dir, exported, trex::model::NamingScheme::kTransformers, trex::DType::kF32);
      EXPECT_EQ(summary.values, t.model().params().size());
      EXPECT_EQ(trex::model::Model<float>::from_checkpoint(exported).params().values(),
                t.model().params().copy_values());
    }
  }
  world.barrier();
}

// param_dtype = "bf16" on DP=2 ZeRO-1: each rank holds the fp32 master of its
// ZeRO ranges only; both checkpoint formats (sharded, and whole gathered on
// rank 0) hold the same weights (bf16 values) and the same master, which
// rounds to them; the run resumes on 1 rank like the uninterrupted 1-rank
// bf16-parameter run (within bf16's tolerance).
TEST(DataParallelResume, Bf16ParametersSaveTheMasterInBothFormats) {
  Communicator& world = *trex::parallel::world();
  if (world.size() != 2) GTEST_SKIP() << "needs mpirun -np 2";
  constexpr int64_t kSteps = 5, kSaveAt = 2;
  RunConfig c = base_config(kSteps);
  c.optimizer.master_weights = true;
  const std::vector<double>& reference = one_rank_losses(c);
  RunConfig dp2 = c;
  dp2.parallel.dp = 2;
  dp2.parallel.zero = 1;
  dp2.out_dir = shared_dir() + "/bf16-params-sharded";
  int64_t master_values = 0;
  {
    Trainer t(dp2, {.quiet = true, .stop_after_step = kSaveAt, .write_metrics = false});
    EXPECT_TRUE(t.run().interrupted);
    expect_replicas_identical(t);
    master_values = static_cast<int64_t>(t.optimizer().master().size());
    EXPECT_EQ(master_values, t.optimizer().state_size());
    EXPECT_LT(master_values, t.model().params().size());  // only this rank's ranges
    // The working weights are stored in 2 bytes (the ZeRO gather moved bf16),
    // as the dry-run accounting says.
    EXPECT_EQ(t.model().params().storage(), trex::model::ParamStorage::kBF16);
    EXPECT_EQ(t.model().params().value_bytes(),
              trex::train::state_of_rank(dp2, t.model().config(), world.rank()).params);
  }
  RunConfig dp2_whole = dp2;
  dp2_whole.checkpoint_format = trex::train::CheckpointFormat::kWhole;
  dp2_whole.out_dir = shared_dir() + "/bf16-params-whole";
  {
    Trainer t(dp2_whole, {.quiet = true, .stop_after_step = kSaveAt, .write_metrics = false});
    EXPECT_EQ(t.run().steps, kSaveAt);
  }
  const std::string sharded_dir =
      dp2.out_dir + "/checkpoints/" + trex::train::checkpoint_name(kSaveAt);
  const std::string whole_dir =
      dp2_whole.out_dir + "/checkpoints/" + trex::train::checkpoint_name(kSaveAt);
  // Rank 0 checks and resumes; an ASSERT leaves the lambda, not the barrier below.
  if (world.rank() == 0)
    [&] {
      const auto sharded = trex::model::Model<float>::from_checkpoint(sharded_dir);
      const auto whole = trex::model::Model<float>::from_checkpoint(whole_dir);
      EXPECT_EQ(sharded.params().values(), whole.params().values());
      trex::train::Optimizer a(sharded.params(), c.optimizer), b(whole.params(), c.optimizer);
      trex::train::load_checkpoint_optimizer_state(sharded_dir, sharded.params(), sharded.config(),
                                                   a);
      trex::train::load_checkpoint_optimizer_state(whole_dir, whole.params(), whole.config(), b);
      ASSERT_EQ(a.master().size(), static_cast<size_t>(sharded.params().size()));
      EXPECT_EQ(a.master(), b.master());
      // The weights are the master rounded to bf16, and the master is more.
      int64_t differs = 0;
      for (const trex::model::ParamSpec& spec : sharded.params().specs()) {
        if (spec.group == trex::model::OptimizerGroup::kNotTrained) continue;
        const int64_t at = sharded.params().offset(spec.name);
        for (int64_t i = at; i < at + spec.numel(); ++i) {
          const float w = sharded.params().values()[static_cast<size_t>(i)];
          const float m = a.master()[static_cast<size_t>(i)];
          ASSERT_EQ(w, trex::bf16_to_f32(trex::f32_to_bf16(m))) << spec.name;
          differs += w != m;
        }
      }
      EXPECT_GT(differs, sharded.params().size() / 2);
      const std::unique_ptr<Trainer> t = resume_on_one_rank(c, dp2.out_dir);
      ASSERT_EQ(t->step(), kSaveAt);
      EXPECT_EQ(t->optimizer().master(), a.master());
      const std::vector<double> losses = remaining_losses(*t);
      // bf16's tolerance, not fp32's: the 2-rank reduction sums the gradients in
      // another order, and an ulp of difference in the master can flip a
      // weight's bf16 rounding (measured: 6e-5 relative at step 5).
      ASSERT_EQ(losses.size() + kSaveAt, reference.size());
      for (size_t i = 0; i < losses.size(); ++i)
        EXPECT_NEAR(losses[i], reference[kSaveAt + i], 1e-3 * reference[kSaveAt + i])
            << "step " << kSaveAt + i + 1;
    }();
  world.barrier();
}

}  // namespace

namespace {

// Resuming from a sharded checkpoint with a corrupt shard: the ranks split the
// checksum reading (rank 0 checks model-00002 here: the manifest's third file),
// and every rank refuses to start with the error that names the file.
TEST(DataParallelResume, CorruptShardIsRefusedOnEveryRankNamingTheFile) {
  Communicator& world = *trex::parallel::world();
  if (world.size() != 2) GTEST_SKIP() << "needs mpirun -np 2";
  RunConfig dp2 = base_config(3);
  dp2.parallel.dp = 2;
  dp2.parallel.zero = 1;
  dp2.out_dir = shared_dir() + "/resume-corrupt-shard";
  {
    Trainer t(dp2, {.quiet = true, .stop_after_step = 1, .write_metrics = false});
    EXPECT_TRUE(t.run().interrupted);
  }
  const std::string shard = dp2.out_dir + "/checkpoints/" + trex::train::checkpoint_name(1) +
                            "/model-00002-of-00002.safetensors";
  world.barrier();
  if (world.rank() == 0) {
    std::string bytes = trex::read_file(shard);
    bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x10);
    std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes;
  }
  world.barrier();
  try {
    Trainer t(dp2, {.resume = true, .quiet = true, .write_metrics = false});
    ADD_FAILURE() << "rank " << world.rank() << " resumed from a corrupt shard";
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.file_name(), shard) << "rank " << world.rank() << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("CRC-32C"), std::string::npos) << e.what();
  }
  world.barrier();
}

}  // namespace
