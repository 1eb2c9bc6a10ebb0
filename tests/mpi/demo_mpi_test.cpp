// `mpirun -np 2 trex demo` on the smoke preset: both training stages run data
// parallel, every split's prompts are generated in two blocks and joined on
// rank 0, which alone grades and writes the report; a rerun on the same
// directory resumes and reproduces the table.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "mpi/train_harness.hpp"
#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/demo/demo.hpp"
#include "trex/parallel/communicator.hpp"

namespace {

namespace fs = std::filesystem;
using trex::test::mpi::shared_dir;

TEST(DemoMpi, SmokePresetOnTwoRanks) {
  auto world = trex::parallel::world();
  ASSERT_EQ(world->size(), 2);
  trex::demo::DemoOptions o;
  o.out_dir = shared_dir() + "/demo";
  o.preset = "smoke";
  o.bench_dir = trex::test::shared_dir() + "/or_bench";
  o.quiet = true;
  o.peak_gflops = 100.0;
  o.jobs = 1;
  const trex::demo::DemoResult first = trex::demo::run_demo(o);
  EXPECT_EQ(first.root, world->rank() == 0);
  // Every rank returns the table rank 0 graded.
  for (const char* split : {"test", "heldout_template", "heldout_family", "public"}) {
    ASSERT_TRUE(first.sft_pass1.count(split)) << split;
    double mine = first.sft_pass1.at(split), maximum = mine;
    world->all_reduce(&maximum, 1, trex::parallel::DType::kF64, trex::parallel::ReduceOp::kMax);
    EXPECT_EQ(mine, maximum) << split;
  }
  if (world->rank() == 0) {
    const std::string report = trex::read_file(first.report_path);
    EXPECT_NE(report.find("| processes | 2 MPI ranks"), std::string::npos) << report;
    // The same tokens per step as one process: 3 CPT steps x 2 rows x 1024.
    EXPECT_NE(report.find("| CPT tokens | 6144 ("), std::string::npos) << report;
    for (const char* split : {"test", "heldout_template", "heldout_family", "public"}) {
      const std::string s = split;
      // The two blocks were joined, in the prompts' order, and removed.
      const auto prompts = trex::read_jsonl(o.out_dir + "/data/prompts/" + s + ".jsonl");
      const auto generated = trex::read_jsonl(o.out_dir + "/final/generations/" + s + ".jsonl");
      ASSERT_EQ(generated.size(), prompts.size()) << s;
      ASSERT_GT(prompts.size(), 1u) << s;
      for (size_t i = 0; i < prompts.size(); ++i)
        EXPECT_EQ(generated[i]["id"], prompts[i]["id"]) << s << " " << i;
      EXPECT_FALSE(fs::exists(o.out_dir + "/final/generations/" + s + ".jsonl.rank0")) << s;
      EXPECT_FALSE(fs::exists(o.out_dir + "/final/generations/" + s + ".jsonl.rank1")) << s;
      const auto items = trex::read_jsonl(o.out_dir + "/final/eval/" + s + "/items.jsonl");
      EXPECT_EQ(items.size(), prompts.size()) << s;
    }
    int with_pass1 = 0;
    trex::read_jsonl(o.out_dir + "/sft/metrics.jsonl", [&](const nlohmann::json& r, long) {
      if (r.contains("val_pass1")) ++with_pass1;
    });
    EXPECT_GE(with_pass1, 1);
  }
  // A rerun skips the finished stages on both ranks and gives the same table.
  const trex::demo::DemoResult second = trex::demo::run_demo(o);
  EXPECT_EQ(second.base_pass1, first.base_pass1);
  EXPECT_EQ(second.sft_pass1, first.sft_pass1);
}

}  // namespace
