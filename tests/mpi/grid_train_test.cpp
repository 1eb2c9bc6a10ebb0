// The trainer on expert- and pipeline-parallel grids under mpirun (registered
// in tests/mpi/mpi_tests.cmake): fp32 losses of 20 steps equal the 1-rank run
// within 1e-5 relative for EP=2, EP=4, PP=2 and PP=4 (1F1B and DualPipeV) and
// DP x EP x PP combinations up to 8 ranks (one with full activation recompute); every rank ends
// with identical parameters; a checkpoint saved on one layout resumes on another.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <span>
#include <string>

#include "mpi/train_harness.hpp"
#include "sanitized_build.hpp"
#include "test_paths.hpp"
#include "trex/parallel/communicator.hpp"
#include "trex/parallel/expert_shard.hpp"
#include "trex/parallel/pipeline.hpp"
#include "trex/train/checkpoint.hpp"
#include "trex/train/state_accounting.hpp"
#include "trex/train/trainer.hpp"

namespace {

using namespace trex::test::mpi;
using trex::parallel::PipelineSchedule;

struct Layout {
  int dp = 1, ep = 1, pp = 1;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int64_t global_batch = 4;   // micro-batches of 1 x 32 per step
  bool eight_layers = false;  // DualPipeV with pp = 4 needs 2 x 4 chunks
  int zero = 0;
  bool full_recompute = false;       // recompute = "full": EP all-to-alls run again in backward
  bool selective_recompute = false;  // recompute = "selective"
  bool bf16_moments = false;         // optimizer.moment_dtype = "bf16"
  bool bf16_params = false;          // param_dtype = "bf16" (fp32 master in the optimizer)
  std::vector<int64_t> pipeline_layers = {};  // parallel.pipeline_layers (empty: balanced)

  int ranks() const { return dp * ep * pp; }
  std::string name() const {
    std::string n =
        "DP=" + std::to_string(dp) + " EP=" + std::to_string(ep) + " PP=" + std::to_string(pp);
    if (pp > 1) n += schedule == PipelineSchedule::k1F1B ? " 1F1B" : " DualPipeV";
    if (zero > 0) n += " ZeRO-" + std::to_string(zero);
    if (full_recompute) n += " recompute=full";
    if (selective_recompute) n += " recompute=selective";
    if (bf16_moments) n += " bf16 moments";
    if (bf16_params) n += " bf16 params";
    if (!pipeline_layers.empty()) n += " layers " + layers_text("/");
    return n;
  }
  std::string layers_text(const char* separator) const {
    std::string t;
    for (size_t i = 0; i < pipeline_layers.size(); ++i)
      t += (i ? separator : "") + std::to_string(pipeline_layers[i]);
    return t;
  }
};

RunConfig layout_config(const Layout& l, int64_t steps) {
  RunConfig c = base_config(steps);
  c.global_batch = l.global_batch;
  if (l.eight_layers)
    c.model_config = trex::test::source_dir() + "/tests/fixtures/pipeline/tiny-v4-8layers.json";
  c.parallel.dp = l.dp;
  c.parallel.ep = l.ep;
  c.parallel.pp = l.pp;
  c.parallel.pipeline_schedule = l.schedule;
  c.parallel.pipeline_layers = l.pipeline_layers;
  c.parallel.zero = l.zero;
  if (l.full_recompute) c.recompute = trex::model::ActivationRecompute::kFull;
  if (l.selective_recompute) c.recompute = trex::model::ActivationRecompute::kSelective;
  if (l.bf16_moments) c.optimizer.moment_dtype = trex::train::MomentDType::kBF16;
  c.optimizer.master_weights = l.bf16_params;
  c.out_dir = shared_dir() + "/grid-" + std::to_string(l.dp) + "-" + std::to_string(l.ep) + "-" +
              std::to_string(l.pp) + "-" + trex::parallel::pipeline_schedule_name(l.schedule) +
              "-zero" + std::to_string(l.zero) + (l.full_recompute ? "-recompute" : "") +
              (l.selective_recompute ? "-selective" : "") +
              (l.pipeline_layers.empty() ? "" : "-layers" + l.layers_text("-"));
  return c;
}

// Pipeline stages own only their layers: a rank's store is its chunks'
// tensors (plus, on the head's rank of a 1F1B pipeline, the MTP block's tied
// copy of the embedding, which stays bitwise the embedding stage's), and the
// stores of one pipeline add up to the whole model once.
void expect_stage_owns_its_layers(Trainer& trainer, const Layout& l) {
  namespace model = trex::model;
  Communicator& world = *trex::parallel::world();
  const model::ParamStore<float>& params = trainer.model().params();
  const model::ModelConfig& config = trainer.model().config();
  const std::vector<model::ParamSpec> whole = model::parameter_specs(config);
  const int pp_rank = world.rank() / (l.dp * l.ep);
  const std::vector<model::StageSpec> chunks = trex::parallel::chunks_of_rank(
      l.schedule, l.pp, config.num_hidden_layers, pp_rank, l.pipeline_layers);
  for (const model::ParamSpec& spec : whole) {
    if (spec.role != model::ParamRole::kDense) continue;
    EXPECT_EQ(params.contains(spec.name), model::stages_hold(config, chunks, spec))
        << spec.name << " on pp rank " << pp_rank;
  }
  const bool tied = model::holds_tied_embedding(config, chunks);
  EXPECT_EQ(tied, l.schedule == PipelineSchedule::k1F1B && pp_rank == l.pp - 1);
  // Dense elements of this pipeline's stages, the tied copy left out: the model's once.
  int64_t dense = 0;
  for (const model::ParamSpec& spec : params.specs())
    if (spec.role == model::ParamRole::kDense && !(tied && spec.name == "embed.weight"))
      dense += spec.numel();
  const int64_t whole_dense = trex::parallel::role_numel(whole, model::ParamRole::kDense);
  EXPECT_LT(dense, whole_dense);
  // World rank = pp rank · (dp·ep) + data rank: one slot per data rank, summed
  // over the stages, is each pipeline's dense total.
  std::vector<int64_t> per_pipeline(static_cast<size_t>(l.dp * l.ep), 0);
  per_pipeline[static_cast<size_t>(world.rank() % (l.dp * l.ep))] = dense;
  world.all_reduce(std::span<int64_t>(per_pipeline));
  for (int64_t total : per_pipeline) EXPECT_EQ(total, whole_dense);
  if (l.schedule == PipelineSchedule::k1F1B) {
    // The tied copy on the last stage equals the embedding stage's, bit for bit.
    const int64_t n = config.vocab_size * config.hidden_size;
    std::vector<float> embed(static_cast<size_t>(n), 0.0f);
    if (pp_rank == 0 || tied) std::copy_n(params.value("embed.weight"), n, embed.begin());
    std::vector<float> first = embed;
    world.broadcast(first.data(), n, trex::parallel::DType::kF32, 0);
    if (tied) {
      EXPECT_EQ(std::memcmp(first.data(), embed.data(), embed.size() * sizeof(float)), 0)
          << "the tied embedding copy diverged";
    }
  }
}

void expect_twenty_steps_match(const Layout& l) {
  RunConfig c = layout_config(l, 20);
  std::unique_ptr<Trainer> trainer;
  const std::vector<double> losses = train_losses(c, trex::parallel::world(), &trainer);
  expect_losses_match(losses, one_rank_losses(c), 0, l.name());
  expect_replicas_identical(*trainer);
  expect_validation_matches(*trainer, c);
  EXPECT_LT(losses.back(), losses.front() - 0.1);  // it trained
  if (l.pp > 1) expect_stage_owns_its_layers(*trainer, l);
  // The dry-run accounting (trex train --dry-run) is this rank's allocation, byte for byte.
  const trex::train::RankState want =
      trex::train::state_of_rank(c, trainer->model().config(), trex::parallel::world()->rank());
  EXPECT_EQ(trainer->model().params().value_bytes(), want.params) << l.name();
  EXPECT_EQ(static_cast<int64_t>(trainer->model().params().grads().size() * 4), want.grads);
  EXPECT_EQ(trainer->optimizer().state_bytes(), want.moments) << l.name();
  if (l.zero > 0 && l.ep > 1) {
    // ZeRO with experts sharded over EP: this rank's state is its quarter of
    // the dense tensors (over dp x ep) plus half of its experts (over dp).
    const auto& t = *trainer;
    const auto& specs = t.model().params().specs();
    const auto dense = trex::parallel::role_range(specs, trex::model::ParamRole::kDense);
    const auto experts = trex::parallel::role_range(specs, trex::model::ParamRole::kExpert);
    const auto& ranges = trainer->optimizer().ranges();
    ASSERT_EQ(ranges.size(), 2u);
    EXPECT_LT(ranges[0].size(), dense.size() * 2 / (l.dp * l.ep));
    EXPECT_GT(ranges[0].size(), dense.size() / (2 * l.dp * l.ep));
    EXPECT_LT(ranges[1].size(), experts.size() * 2 / l.dp);
    EXPECT_GT(ranges[1].size(), experts.size() / (2 * l.dp));
    // Before the split by role, ZeRO partitioned this rank's whole layout over dp only.
    const auto dp_only = trex::parallel::partition_for_zero(specs, l.dp);
    const int dp_rank = trex::parallel::world()->rank() / l.ep % l.dp;
    std::printf(
        "[zero] %s rank %d: optimizer state %lld values (dense %lld + experts %lld); "
        "partitioned over dp only: %lld\n",
        l.name().c_str(), trex::parallel::world()->rank(),
        static_cast<long long>(trainer->optimizer().state_size()),
        static_cast<long long>(ranges[0].size()), static_cast<long long>(ranges[1].size()),
        static_cast<long long>(dp_only[static_cast<size_t>(dp_rank)].size()));
  }
}

class GridTrain2 : public ::testing::TestWithParam<Layout> {};
TEST_P(GridTrain2, TwentyStepsMatchOneRank) {
  if (trex::parallel::world()->size() != GetParam().ranks()) GTEST_SKIP() << "needs 2 ranks";
  expect_twenty_steps_match(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Layouts, GridTrain2,
                         ::testing::Values(Layout{.ep = 2}, Layout{.pp = 2},
                                           Layout{.pp = 2,
                                                  .schedule = PipelineSchedule::kDualPipeV}));

class GridTrain4 : public ::testing::TestWithParam<Layout> {};
TEST_P(GridTrain4, TwentyStepsMatchOneRank) {
  if (trex::parallel::world()->size() != GetParam().ranks()) GTEST_SKIP() << "needs 4 ranks";
  if (trex::test::kSanitizedBuild && GetParam().global_batch > 4)
    GTEST_SKIP() << "8 micro-batches take 45-77 s under the sanitizers: the Release suite runs "
                    "this layout; GridTrain2 and GridResume run DualPipeV here";
  expect_twenty_steps_match(GetParam());
}
INSTANTIATE_TEST_SUITE_P(
    Layouts, GridTrain4,
    ::testing::Values(Layout{.ep = 4}, Layout{.pp = 4},
                      Layout{.pp = 4, .pipeline_layers = {2, 1, 1, 0}},
                      Layout{.pp = 4,
                             .schedule = PipelineSchedule::kDualPipeV,
                             .global_batch = 8,
                             .eight_layers = true},
                      Layout{.dp = 2, .ep = 2, .zero = 1},
                      // (2 micro-batches per rank: GridResume.Zero2*)
                      Layout{.dp = 2, .ep = 2, .zero = 2}, Layout{.ep = 2, .pp = 2},
                      Layout{.ep = 2, .pp = 2, .full_recompute = true},
                      Layout{.dp = 2, .ep = 2, .zero = 1, .selective_recompute = true},
                      Layout{.dp = 2,
                             .pp = 2,
                             .schedule = PipelineSchedule::kDualPipeV,
                             .global_batch = 8,
                             .zero = 2}));

// NCCL's collective model (one count per rank) on MPI: ZeRO-2's bucketed
// reduce-scatters and the post-update all-gathers travel padded to equal
// counts; the 20 steps still match 1 rank and the unpadded run bit for bit.
TEST(GridTrainEqualCounts, Zero2ExpertShardedMatchesTheVariableCountRun) {
  if (trex::parallel::world()->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const Layout l{.dp = 2, .ep = 2, .zero = 2};
  RunConfig c = layout_config(l, 20);
  const std::vector<double> variable = train_losses(c, trex::parallel::world());
  struct EqualCounts {
    EqualCounts() { trex::parallel::set_mpi_equal_counts_only(true); }
    ~EqualCounts() { trex::parallel::set_mpi_equal_counts_only(false); }
  } equal_counts;
  c.out_dir += "-equal-counts";
  std::unique_ptr<Trainer> trainer;
  const std::vector<double> padded = train_losses(c, trex::parallel::world(), &trainer);
  EXPECT_EQ(padded, variable);
  expect_losses_match(padded, one_rank_losses(c), 0, l.name() + " equal counts");
  expect_replicas_identical(*trainer);
}

class GridTrain8 : public ::testing::TestWithParam<Layout> {};
TEST_P(GridTrain8, TwentyStepsMatchOneRank) {
  if (trex::parallel::world()->size() != GetParam().ranks()) GTEST_SKIP() << "needs 8 ranks";
  expect_twenty_steps_match(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Layouts, GridTrain8,
                         ::testing::Values(Layout{.dp = 2, .ep = 2, .pp = 2, .zero = 1},
                                           Layout{.ep = 2,
                                                  .pp = 4,
                                                  .schedule = PipelineSchedule::kDualPipeV,
                                                  .global_batch = 16,
                                                  .eight_layers = true}));

// Saves at step `save_at` on `saved`, then resumes that checkpoint on 1 rank
// and on `other`; saves at `save_at` on 1 rank and resumes it on `saved`.
// Every resumed run's steps save_at+1..steps equal the uninterrupted 1-rank run.
void check_layout_change_resume(const Layout& saved_layout, const Layout& other, int64_t steps,
                                int64_t save_at, const std::string& dir_suffix,
                                double tolerance = kRelativeTolerance) {
  Communicator& world = *trex::parallel::world();
  RunConfig saved = layout_config(saved_layout, steps);
  saved.out_dir += dir_suffix;
  const std::vector<double>& reference = one_rank_losses(saved);
  {
    Trainer t(saved, {.quiet = true, .stop_after_step = save_at, .write_metrics = false});
    EXPECT_TRUE(t.run().interrupted);
  }
  auto resume_and_compare = [&](RunConfig c, const std::string& from_dir, bool one_rank,
                                const std::string& what) {
    c.out_dir = from_dir;
    std::shared_ptr<Communicator> on =
        one_rank ? std::shared_ptr<Communicator>(trex::parallel::make_self_communicator())
                 : trex::parallel::world();
    Trainer t(c, {.resume = true, .quiet = true, .write_metrics = false, .world = on});
    ASSERT_EQ(t.step(), save_at);
    std::vector<double> losses;
    while (t.step() < t.total_steps()) losses.push_back(t.train_step().get("loss"));
    expect_losses_match(losses, reference, save_at, what, tolerance);
  };
  RunConfig one = saved;
  one.parallel = {};
  world.barrier();
  if (world.rank() == 0)
    resume_and_compare(one, saved.out_dir, true, saved_layout.name() + " -> 1 rank");
  world.barrier();
  resume_and_compare(layout_config(other, steps), saved.out_dir, false,
                     saved_layout.name() + " -> " + other.name());
  world.barrier();
  // The other way: a 1-rank checkpoint continued on the saved layout.
  one.out_dir = shared_dir() + "/grid-resume-one" + dir_suffix;
  save_one_rank_checkpoint(one, save_at);
  resume_and_compare(saved, one.out_dir, false, "1 rank -> " + saved_layout.name());
  world.barrier();
}

// Save on EP=2 x PP=2 DualPipeV, resume on 1 rank and on DP=2 x EP=2 ZeRO-1;
// save on 1 rank, resume on EP=2 x PP=2.
TEST(GridResume, LayoutChangeResumeMatchesUninterruptedRun) {
  if (trex::parallel::world()->size() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  check_layout_change_resume(
      Layout{.ep = 2, .pp = 2, .schedule = PipelineSchedule::kDualPipeV, .global_batch = 8},
      Layout{.dp = 2, .ep = 2, .global_batch = 8, .zero = 1}, 6, 3, "");
}

// Pipeline stages write their own shards: save on DP=2 x PP=2 1F1B (the
// head's stage holds the tied embedding copy, which it does not write),
// resume on 1 rank and on PP=4 with layers 2/1/1/0 (the head's stage has no
// block); save on 1 rank, resume on DP=2 x PP=2.
TEST(GridResume, PipelineStageShardsResumeAcrossLayouts) {
  if (trex::parallel::world()->size() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  check_layout_change_resume(Layout{.dp = 2, .pp = 2, .global_batch = 8, .zero = 1},
                             Layout{.pp = 4, .global_batch = 8, .pipeline_layers = {2, 1, 1, 0}}, 5,
                             2, "-resume-pp");
}

// ZeRO-2 with experts sharded over EP: save on DP=2 x EP=2 ZeRO-2 (dense
// state over 4 ranks, expert state over 2, gathered point to point on rank 0),
// resume on 1 rank and on DP=2 x EP=2 ZeRO-1; save on 1 rank, resume on
// DP=2 x EP=2 ZeRO-2 (2 micro-batches per rank, each reduce-scattered into the shard).
TEST(GridResume, Zero2ExpertShardedResumesAcrossLayouts) {
  if (trex::parallel::world()->size() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  check_layout_change_resume(Layout{.dp = 2, .ep = 2, .global_batch = 8, .zero = 2},
                             Layout{.dp = 2, .ep = 2, .global_batch = 8, .zero = 1}, 5, 2,
                             "-resume-zero2");
}

// bf16 optimizer moments, ZeRO-sharded over DP=2 x EP=2: the shards are
// gathered widened to fp32 and rounded back on load, so the run resumes on
// 1 rank and on EP=2 x PP=2 like the uninterrupted 1-rank bf16-moment run.
TEST(GridResume, Bf16MomentShardsResumeAcrossLayouts) {
  if (trex::parallel::world()->size() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  check_layout_change_resume(
      Layout{.dp = 2, .ep = 2, .global_batch = 8, .zero = 1, .bf16_moments = true},
      Layout{.ep = 2, .pp = 2, .global_batch = 8, .bf16_moments = true}, 5, 2, "-resume-bf16");
}

// param_dtype = "bf16": the fp32 master weights of each rank's ZeRO ranges
// are written to its shard and read back by name on any layout, and a
// 1-rank (whole-format) checkpoint's master is read per expert on DP=2 x EP=2.
// bf16's tolerance (1e-3): another reduction order can flip a weight's bf16
// rounding (DataParallelResume.Bf16ParametersSaveTheMasterInBothFormats).
TEST(GridResume, Bf16ParameterMasterResumesAcrossLayouts) {
  if (trex::parallel::world()->size() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  check_layout_change_resume(
      Layout{.dp = 2, .ep = 2, .global_batch = 8, .zero = 1, .bf16_params = true},
      Layout{.ep = 2, .pp = 2, .global_batch = 8, .bf16_params = true}, 5, 2, "-resume-bf16-params",
      1e-3);
}

}  // namespace
