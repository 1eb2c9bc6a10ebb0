// Data parallelism under mpirun (registered in tests/mpi/mpi_tests.cmake):
// fp32 losses of DP runs (ZeRO 0/1/2, overlapped or not) equal the 1-rank run
// within 1e-5 relative, ranks stay bitwise identical, and checkpoints resume
// across layouts (DP=2 ZeRO-1 -> 1 rank and back). The 1-rank reference runs
// inside each rank on dist::make_self_communicator().
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <tuple>

#include "test_paths.hpp"
#include "train/trainer_fixtures.hpp"
#include "trex/dist/communicator.hpp"
#include "trex/train/checkpoint.hpp"
#include "trex/train/trainer.hpp"

namespace {

using trex::dist::Communicator;
using trex::train::DataMode;
using trex::train::RunConfig;
using trex::train::Trainer;

constexpr double kRelativeTolerance = 1e-5;

// A directory every rank sees (made by rank 0, removed by it at exit), with
// the tiny tokenizer and corpus in it.
class SharedDir {
 public:
  SharedDir() {
    Communicator& world = *trex::dist::world();
    std::vector<char> path(1024, '\0');
    if (world.rank() == 0) {
      dir_ = std::make_unique<trex::test::TempDir>();
      trex::test::write_tiny_training_data(dir_->path());
      std::strncpy(path.data(), dir_->path().c_str(), path.size() - 1);
    }
    world.broadcast(path.data(), static_cast<int64_t>(path.size()), trex::dist::DType::kU8, 0);
    path_ = path.data();
  }
  const std::string& path() const { return path_; }

 private:
  std::unique_ptr<trex::test::TempDir> dir_;
  std::string path_;
};

const std::string& shared_dir() {
  static SharedDir dir;  // first use is collective: every rank runs the tests in one order
  return dir.path();
}

// The tiny run of the acceptance: tiny-v4, fp32, 4 micro-batches of 1 x 32 per step.
RunConfig base_config(int64_t steps) {
  RunConfig c = trex::test::tiny_run_config(shared_dir(), DataMode::kCpt);
  c.seq_len = 32;
  c.micro_batch = 1;
  c.global_batch = 4;
  c.steps = steps;
  c.warmup_steps = 2;
  c.validation_file = shared_dir() + "/cpt.jsonl";
  c.eval_batches = 4;
  return c;
}

// Losses of every step of `c` on `world`; the trainer is handed back in `owner`.
std::vector<double> train_losses(const RunConfig& c, std::shared_ptr<Communicator> world,
                                 std::unique_ptr<Trainer>* owner = nullptr) {
  auto trainer = std::make_unique<Trainer>(
      c, trex::train::TrainerOptions{.quiet = true, .write_metrics = false, .world = world});
  std::vector<double> losses;
  while (trainer->step() < trainer->total_steps()) {
    const trex::train::MetricsRecord rec = trainer->train_step();
    losses.push_back(rec.get("loss"));
    if (world->size() > 1) {
      EXPECT_GE(rec.get("comm_exposed_s"), 0.0);
    }
  }
  if (owner) *owner = std::move(trainer);
  return losses;
}

struct OneRankRun {
  std::vector<double> losses;
  double final_validation_loss = 0;
};

// The 1-rank run of `c` (same data, seeds and batch geometry), computed once
// per process and configuration.
const OneRankRun& one_rank_run(RunConfig c) {
  static std::map<std::string, OneRankRun> cache;
  c.parallel = {};
  c.out_dir = shared_dir() + "/reference-" + std::to_string(trex::dist::world()->rank());
  const std::string key = c.to_json().dump();
  auto it = cache.find(key);
  if (it == cache.end()) {
    OneRankRun run;
    std::unique_ptr<Trainer> trainer;
    run.losses = train_losses(c, trex::dist::make_self_communicator(), &trainer);
    run.final_validation_loss = trainer->validation_loss();
    it = cache.emplace(key, std::move(run)).first;
  }
  return it->second;
}

const std::vector<double>& one_rank_losses(const RunConfig& c) {
  return one_rank_run(c).losses;
}

// The validation loss (micro-batches split over the data ranks) equals 1 rank's.
void expect_validation_matches(Trainer& trainer, const RunConfig& c) {
  const double reference = one_rank_run(c).final_validation_loss;
  const double got = trainer.validation_loss();
  EXPECT_GT(reference, 0.0);
  EXPECT_LE(std::abs(got - reference), kRelativeTolerance * reference)
      << got << " vs 1-rank " << reference;
}

void expect_losses_match(const std::vector<double>& got, const std::vector<double>& want,
                         size_t first_step, const std::string& what) {
  ASSERT_EQ(got.size() + first_step, want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double reference = want[first_step + i];
    worst = std::max(worst, std::abs(got[i] - reference) / std::abs(reference));
    ASSERT_TRUE(std::isfinite(got[i])) << what << " step " << first_step + i + 1;
    EXPECT_LE(std::abs(got[i] - reference), kRelativeTolerance * std::abs(reference))
        << what << " step " << first_step + i + 1 << ": " << got[i] << " vs 1-rank " << reference;
  }
  if (trex::dist::world()->rank() == 0)
    std::printf("[ dp ] %s: steps %zu..%zu, max relative loss difference to 1 rank %.2e\n",
                what.c_str(), first_step + 1, first_step + got.size(), worst);
}

// Every rank holds the same parameters, bit for bit, as world rank 0.
void expect_replicas_identical(Trainer& trainer) {
  Communicator& world = *trex::dist::world();
  const std::vector<float>& mine = trainer.model().params().values();
  std::vector<float> root = mine;
  world.broadcast(root.data(), static_cast<int64_t>(root.size()), trex::dist::DType::kF32, 0);
  EXPECT_EQ(std::memcmp(root.data(), mine.data(), mine.size() * sizeof(float)), 0)
      << "rank " << world.rank() << " diverged from rank 0";
}

class DataParallel2 : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(DataParallel2, TwentyStepsMatchOneRank) {
  if (trex::dist::world()->size() != 2) GTEST_SKIP() << "needs mpirun -np 2";
  const auto [zero, overlap] = GetParam();
  RunConfig c = base_config(20);
  c.parallel.dp = 2;
  c.parallel.zero = zero;
  c.parallel.overlap_grad_reduce = overlap;
  c.parallel.bucket_mb = 0.25;  // several buckets per layer on the tiny model
  c.out_dir = shared_dir() + "/dp2";
  std::unique_ptr<Trainer> trainer;
  const std::vector<double> losses = train_losses(c, trex::dist::world(), &trainer);
  expect_losses_match(losses, one_rank_losses(c), 0,
                      "DP=2 zero " + std::to_string(zero) + (overlap ? " overlap" : ""));
  expect_replicas_identical(*trainer);
  expect_validation_matches(*trainer, c);
  // ZeRO: this rank holds the optimizer state of about half the model.
  const double state_share = static_cast<double>(trainer->optimizer().first_moment().size()) /
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
  if (trex::dist::world()->size() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  RunConfig c = base_config(20);
  c.parallel.dp = 4;
  c.parallel.zero = 1;
  c.out_dir = shared_dir() + "/dp4";
  std::unique_ptr<Trainer> trainer;
  const std::vector<double> losses = train_losses(c, trex::dist::world(), &trainer);
  expect_losses_match(losses, one_rank_losses(c), 0, "DP=4 zero 1");
  expect_replicas_identical(*trainer);
  expect_validation_matches(*trainer, c);
}

// Max |a − b| over max |b| of two optimizer-state files.
double relative_state_difference(const std::string& a_dir, const std::string& b_dir,
                                 const trex::train::OptimizerOptions& options) {
  const auto model = trex::model::Model<float>::from_checkpoint(b_dir);
  trex::train::Optimizer a(model.params(), options), b(model.params(), options);
  a.load_state(a_dir + "/optimizer.safetensors");
  b.load_state(b_dir + "/optimizer.safetensors");
  EXPECT_EQ(a.step_count(), b.step_count());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.first_moment().size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(a.first_moment()[i] - b.first_moment()[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b.first_moment()[i])));
  }
  return scale > 0 ? diff / scale : 1.0;
}

// Save with DP=2 ZeRO-1, resume with 1 rank; save with 1 rank, resume with
// DP=2 ZeRO-1: steps k+1..n equal the uninterrupted 1-rank run.
TEST(DataParallelResume, LayoutChangeResumeMatchesUninterruptedRun) {
  Communicator& world = *trex::dist::world();
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
  // 1 rank for k steps, then DP=2 ZeRO-1 from its checkpoint.
  one.out_dir = shared_dir() + "/resume-from-one";
  if (world.rank() == 0) {
    Trainer t(one, {.quiet = true,
                    .stop_after_step = kSaveAt,
                    .write_metrics = false,
                    .world = trex::dist::make_self_communicator()});
    t.run();
  }
  world.barrier();

  // Layout-free files: the gathered ZeRO state is the 1-rank state.
  const std::string saved_dp2 =
      dp2.out_dir + "/checkpoints/" + trex::train::checkpoint_name(kSaveAt);
  const std::string saved_one =
      one.out_dir + "/checkpoints/" + trex::train::checkpoint_name(kSaveAt);
  EXPECT_LT(relative_state_difference(saved_dp2, saved_one, c.optimizer), 1e-4);

  if (world.rank() == 0) {
    RunConfig resume = one;
    resume.out_dir = dp2.out_dir;
    Trainer t(resume, {.resume = true,
                       .quiet = true,
                       .write_metrics = false,
                       .world = trex::dist::make_self_communicator()});
    ASSERT_EQ(t.step(), kSaveAt);
    std::vector<double> losses;
    while (t.step() < t.total_steps()) losses.push_back(t.train_step().get("loss"));
    expect_losses_match(losses, reference, kSaveAt, "DP=2 ZeRO-1 -> 1 rank");
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
    // Its final checkpoint, written by rank 0 with the gathered state, loads on 1 rank.
    const std::string final_dir = t.save_checkpoint();
    EXPECT_TRUE(std::filesystem::exists(final_dir + "/optimizer.safetensors"));
  }
  world.barrier();
}

}  // namespace
