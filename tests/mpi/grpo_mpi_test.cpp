// GRPO under mpirun (registered in tests/mpi/mpi_tests.cmake): with the prompts
// split over 2 data-parallel ranks, the rollouts are the 1-rank run's (seeded by
// their place in the step, not by the rank) and so are the step's loss and
// gradient norm, within the DP reduction's rounding; the ranks stay identical.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpi/train_harness.hpp"
#include "trex/rl/grpo.hpp"

namespace {

using namespace trex::test::mpi;

// The share of a completion's tokens in the lower half of the 300-token vocabulary.
double lower_half_share(const std::string&, const std::vector<int32_t>& completion) {
  if (completion.empty()) return 0.0;
  double n = 0;
  for (int32_t t : completion) n += t < 150 ? 1 : 0;
  return n / static_cast<double>(completion.size());
}

RunConfig grpo_config(const std::string& out_dir) {
  RunConfig c = trex::test::tiny_run_config(shared_dir(), DataMode::kGrpo);
  c.train_file = shared_dir() + "/grpo_prompts.jsonl";
  c.seq_len = 64;
  c.micro_batch = 2;
  c.steps = 3;
  c.mtp_weight = 0;
  c.warmup_steps = 0;
  c.grpo.prompts_per_step = 2;
  c.grpo.group_size = 4;
  c.global_batch = 8;
  c.grpo.max_new_tokens = 6;
  c.grpo.generation_batch = 8;
  c.grpo.prompt_template = "{question}";  // short prompts for the tiny tokenizer
  c.out_dir = out_dir;
  return c;
}

std::vector<trex::train::MetricsRecord> run(RunConfig c, std::shared_ptr<Communicator> world) {
  c.parallel.dp = world->size();
  c.validate("grpo mpi test");
  trex::rl::GrpoOptions o;
  o.trainer.quiet = true;
  o.trainer.world = world;
  o.reward_hook = lower_half_share;
  std::vector<trex::train::MetricsRecord> records;
  o.on_step = [&](int64_t, trex::train::MetricsRecord& r) { records.push_back(r); };
  trex::rl::run_grpo(c, o);
  return records;
}

TEST(GrpoMpi, TwoRanksMatchOneRank) {
  Communicator& world = *trex::parallel::world();
  if (world.size() != 2) GTEST_SKIP() << "needs mpirun -np 2";
  const std::string dir = shared_dir();  // collective on first use
  if (world.rank() == 0) {
    std::ofstream out(dir + "/grpo_prompts.jsonl");
    for (const char* q : {"what is x?", "minimize the cost of shipping goods", "maximize profit",
                          "report the objective"})
      out << nlohmann::json{{"id", q}, {"question", q}, {"answer", 3.0}}.dump() << "\n";
  }
  world.barrier();
  const auto two = run(grpo_config(shared_dir() + "/grpo2"), trex::parallel::world());
  const auto one = run(grpo_config(shared_dir() + "/grpo1-rank" + std::to_string(world.rank())),
                       trex::parallel::make_self_communicator());
  ASSERT_EQ(two.size(), 3u);
  ASSERT_EQ(one.size(), 3u);
  for (size_t i = 0; i < two.size(); ++i) {
    EXPECT_EQ(two[i].get("rollouts"), 8.0);
    EXPECT_EQ(two[i].get("reward_mean"), one[i].get("reward_mean")) << "step " << i + 1;
    // On-policy the surrogate is Σ A·r / N with r = 1 and zero-mean A: rounding-level.
    EXPECT_NEAR(two[i].get("loss"), one[i].get("loss"), 1e-6) << "step " << i + 1;
    EXPECT_NEAR(two[i].get("grad_norm"), one[i].get("grad_norm"),
                kRelativeTolerance * one[i].get("grad_norm"))
        << "step " << i + 1;
  }
  EXPECT_GT(two[0].get("trained_rollouts"), 0.0);  // the steps carried a signal
  // Both ranks hold the same metrics (all-reduced) and so took the same steps.
  double loss = two.back().get("loss");
  double max_loss = loss;
  world.all_reduce(&max_loss, 1, trex::parallel::DType::kF64, trex::parallel::ReduceOp::kMax);
  EXPECT_EQ(loss, max_loss);
}

}  // namespace
