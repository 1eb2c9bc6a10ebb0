#pragma once
// Shared set-up of the trainer-level multi-rank tests (tests/mpi/*_test.cpp):
// a directory every rank sees, the tiny run, the 1-rank reference computed
// in-process on parallel::make_self_communicator(), and the comparisons.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "test_paths.hpp"
#include "train/trainer_fixtures.hpp"
#include "trex/parallel/communicator.hpp"
#include "trex/train/trainer.hpp"

namespace trex::test::mpi {

using trex::parallel::Communicator;
using trex::train::DataMode;
using trex::train::RunConfig;
using trex::train::Trainer;

constexpr double kRelativeTolerance = 1e-5;

// A directory every rank sees (made by rank 0, removed by it at exit), with
// the tiny tokenizer and corpus in it.
class SharedDir {
 public:
  SharedDir() {
    Communicator& world = *trex::parallel::world();
    std::vector<char> path(1024, '\0');
    if (world.rank() == 0) {
      dir_ = std::make_unique<trex::test::TempDir>();
      trex::test::write_tiny_training_data(dir_->path());
      std::strncpy(path.data(), dir_->path().c_str(), path.size() - 1);
    }
    world.broadcast(path.data(), static_cast<int64_t>(path.size()), trex::parallel::DType::kU8, 0);
    path_ = path.data();
  }
  const std::string& path() const { return path_; }

 private:
  std::unique_ptr<trex::test::TempDir> dir_;
  std::string path_;
};

inline const std::string& shared_dir() {
  static SharedDir dir;  // first use is collective: every rank runs the tests in one order
  return dir.path();
}

// The tiny run of the acceptance: tiny-v4, fp32, 4 micro-batches of 1 x 32 per step.
inline RunConfig base_config(int64_t steps) {
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
inline std::vector<double> train_losses(const RunConfig& c, std::shared_ptr<Communicator> world,
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

// The 1-rank run of `c` (same data, seeds and batch geometry; no activation
// recompute), computed once per process and configuration.
inline const OneRankRun& one_rank_run(RunConfig c) {
  static std::map<std::string, OneRankRun> cache;
  c.parallel = {};
  c.recompute = trex::model::ActivationRecompute::kNone;
  c.out_dir = shared_dir() + "/reference-" + std::to_string(trex::parallel::world()->rank());
  const std::string key = c.to_json().dump();
  auto it = cache.find(key);
  if (it == cache.end()) {
    OneRankRun run;
    std::unique_ptr<Trainer> trainer;
    run.losses = train_losses(c, trex::parallel::make_self_communicator(), &trainer);
    run.final_validation_loss = trainer->validation_loss();
    it = cache.emplace(key, std::move(run)).first;
  }
  return it->second;
}

inline const std::vector<double>& one_rank_losses(const RunConfig& c) {
  return one_rank_run(c).losses;
}

// The validation loss (micro-batches split over the data ranks) equals 1 rank's.
inline void expect_validation_matches(Trainer& trainer, const RunConfig& c) {
  const double reference = one_rank_run(c).final_validation_loss;
  const double got = trainer.validation_loss();
  EXPECT_GT(reference, 0.0);
  EXPECT_LE(std::abs(got - reference), kRelativeTolerance * reference)
      << got << " vs 1-rank " << reference;
}

// `tolerance`: relative, per step (fp32 runs: kRelativeTolerance).
inline void expect_losses_match(const std::vector<double>& got, const std::vector<double>& want,
                                size_t first_step, const std::string& what,
                                double tolerance = kRelativeTolerance) {
  ASSERT_EQ(got.size() + first_step, want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double reference = want[first_step + i];
    worst = std::max(worst, std::abs(got[i] - reference) / std::abs(reference));
    ASSERT_TRUE(std::isfinite(got[i])) << what << " step " << first_step + i + 1;
    EXPECT_LE(std::abs(got[i] - reference), tolerance * std::abs(reference))
        << what << " step " << first_step + i + 1 << ": " << got[i] << " vs 1-rank " << reference;
  }
  if (trex::parallel::world()->rank() == 0)
    std::printf("[ mpi ] %s: steps %zu..%zu, max relative loss difference to 1 rank %.2e\n",
                what.c_str(), first_step + 1, first_step + got.size(), worst);
}

// World rank 0 trains `c` alone (a 1-rank run) and stops after `save_at`
// steps, leaving its checkpoint in c.out_dir; every rank returns once it exists.
inline void save_one_rank_checkpoint(const RunConfig& c, int64_t save_at) {
  Communicator& world = *trex::parallel::world();
  if (world.rank() == 0) {
    Trainer t(c, {.quiet = true,
                  .stop_after_step = save_at,
                  .write_metrics = false,
                  .world = trex::parallel::make_self_communicator()});
    t.run();
  }
  world.barrier();
}

// Every rank holds the same parameters, bit for bit, as world rank 0 (with EP
// the whole model assembled from the experts' owners: collective).
inline void expect_replicas_identical(Trainer& trainer) {
  Communicator& world = *trex::parallel::world();
  const std::vector<float> mine = trainer.full_parameters();
  std::vector<float> root = mine;
  world.broadcast(root.data(), static_cast<int64_t>(root.size()), trex::parallel::DType::kF32, 0);
  EXPECT_EQ(std::memcmp(root.data(), mine.data(), mine.size() * sizeof(float)), 0)
      << "rank " << world.rank() << " diverged from rank 0";
}

}  // namespace trex::test::mpi
