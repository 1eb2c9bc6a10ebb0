// The planner's answers for a person planning a job: token budget -> steps,
// hours, device-hours, cost; checkpoint size and time; goodput from failures
// (Young/Daly); the MFU band; the validated region; what `trex train` runs;
// the side-by-side breakdown. Values worked out by hand.
#include "trex/plan/job_answers.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/plan/cluster.hpp"
#include "trex/plan/report.hpp"

namespace trex::plan {
namespace {

std::string repo(const std::string& path) {
  return test::source_dir() + "/" + path;
}

TEST(PlanJob, TokenBudgetGivesStepsHoursDeviceHoursAndCost) {
  const ModelShape model = load_model_shape(repo("configs/models/deepseek-v3.json"), 1000);
  Estimate e;
  e.time.step = 10;
  Job job = Job::of(64, 100, 1000);
  JobQuestions q;
  q.tokens = 1e9;  // 10,000 steps of 100 x 1000 tokens
  q.price_per_device_hour = 2;
  const JobAnswers a = answer_job(e, model, job, q);
  EXPECT_DOUBLE_EQ(a.steps, 10000);
  EXPECT_NEAR(a.steady_hours, 10000 * 10 / 3600.0, 1e-9);
  EXPECT_DOUBLE_EQ(a.goodput, 1);
  EXPECT_NEAR(a.wall_hours, a.steady_hours, 1e-12);
  EXPECT_NEAR(a.device_hours, 64 * a.wall_hours, 1e-9);
  EXPECT_NEAR(a.cost, 2 * a.device_hours, 1e-9);
  // A partial last step still costs a step; --goodput stretches the wall clock.
  q.tokens = 1e9 + 1;
  job.goodput = 0.8;
  const JobAnswers b = answer_job(e, model, job, q);
  EXPECT_DOUBLE_EQ(b.steps, 10001);
  EXPECT_NEAR(b.wall_hours, b.steady_hours / 0.8, 1e-9);
  q.tokens = -1;
  EXPECT_THROW(answer_job(e, model, job, q), Error);
}

TEST(PlanJob, PackedSftRowsCountOnlySampleTokens) {
  const ModelShape model = load_model_shape(repo("configs/models/deepseek-v3.json"), 1000);
  Estimate e;
  e.time.step = 10;
  const Job job = Job::of(64, 100, 1000);
  JobQuestions q;
  q.tokens = 1e9;
  q.packing_efficiency = 0.8;  // 80,000 sample tokens per step
  const JobAnswers a = answer_job(e, model, job, q);
  EXPECT_DOUBLE_EQ(a.real_tokens_per_step, 80000);
  EXPECT_DOUBLE_EQ(a.steps, 12500);
  q.packing_efficiency = 1.5;
  EXPECT_THROW(answer_job(e, model, job, q), Error);
}

TEST(PlanJob, CliMeasuresSftPackingWithTheTrainersPacker) {
  test::TempDir dir;
  // Rows of 10 tokens: four 6-token samples fill 60% of four rows whatever the
  // order; four 5-token samples pack two to a row against one per row, and a
  // 20-token sample is cut to a full row as the SFT loader cuts it: 30 tokens
  // in 3 rows packed (100%), in 5 rows one per row (60%).
  write_file_atomic(dir.file("sixes.txt"), "# tokens per sample\n6\n6\n6\n6\n");
  write_file_atomic(dir.file("fives.txt"), "5\r\n5 # a comment\n\n5\n5\n20\n");
  write_file_atomic(dir.file("bad.txt"), "5\nfive\n");
  const std::string base = "plan --model " + repo("configs/models/deepseek-v3.json") +
                           " --cluster " + repo("configs/clusters/h100-ib.json") +
                           " --devices 8 --global-batch 8 --seq 10 --layout tp1,pp1,ep8"
                           " --no-engine-memory --tokens 1000 --root " +
                           test::source_dir();
  test::CliRun r = test::run_trex(base + " --sft-lengths " + dir.file("sixes.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("60.0% sample tokens with whole samples packed"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("1000 sample tokens = 21 steps"), std::string::npos) << r.output;
  r = test::run_trex(base + " --sft-lengths " + dir.file("fives.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("100.0% sample tokens with whole samples packed"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("1 longer ones cut to the row), 60.0% with one sample per row"),
            std::string::npos)
      << r.output;
  write_file_atomic(dir.file("huge.txt"), "99999999999999999999999\n");  // beyond int64
  r = test::run_trex(base + " --sft-lengths " + dir.file("huge.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("100.0% sample tokens with whole samples packed"), std::string::npos)
      << r.output;
  r = test::run_trex(base + " --sft-lengths " + dir.file("bad.txt"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("bad.txt:2"), std::string::npos) << r.output;
}

TEST(PlanJob, CheckpointHoldsMasterWeightsAndOptimizerState) {
  const ModelShape model = load_model_shape(repo("configs/models/deepseek-v3.json"), 4096);
  const double params = model.all_params();
  EXPECT_DOUBLE_EQ(checkpoint_bytes(model, Optimizer::kAdamW), 12 * params);    // 4 + 2 x 4
  EXPECT_DOUBLE_EQ(checkpoint_bytes(model, Optimizer::kMuon), 8 * params);      // 4 + 4
  EXPECT_DOUBLE_EQ(checkpoint_bytes(model, Optimizer::kAdamW, 2), 8 * params);  // bf16 moments
  EXPECT_DOUBLE_EQ(checkpoint_bytes(model, Optimizer::kMuon, 2), 6 * params);
  Estimate e;
  e.time.step = 1;
  JobQuestions q;
  q.storage_gbps = 100;
  const JobAnswers a = answer_job(e, model, Job::of(8, 8, 4096), q);
  EXPECT_NEAR(a.checkpoint_save_s, 12 * params / 100e9, 1e-6);
}

TEST(PlanJob, FailureGoodputIsYoungDaly) {
  // save 60 s, MTBF 10 h, restart 600 s: tau = sqrt(2 * 60 * 36000) = 2078.46 s,
  // lost = 60 / tau + (tau / 2 + 600) / 36000 = 0.074402.
  double interval = 0;
  const double best = failure_goodput(60, 36000, 600, interval);
  EXPECT_NEAR(interval, std::sqrt(2.0 * 60 * 36000), 1e-9);
  EXPECT_NEAR(best, 1 - (60 / interval + (interval / 2 + 600) / 36000), 1e-12);
  EXPECT_NEAR(best, 0.925598, 1e-6);
  // Any other interval loses more: every hour -> 60/3600 + 2400/36000 = 0.083333.
  double hourly = 3600;
  EXPECT_NEAR(failure_goodput(60, 36000, 600, hourly), 1 - 0.0833333333, 1e-9);
  EXPECT_LT(failure_goodput(60, 36000, 600, hourly), best);
  double rare = 1e9;
  EXPECT_EQ(failure_goodput(60, 36000, 600, rare), 0.0);  // clamped
  double any = 0;
  EXPECT_THROW(failure_goodput(60, 0, 600, any), Error);
}

TEST(PlanJob, MfuBandDividesByOnePlusAndMinusTheErrors) {
  ErrorSummary errors;
  errors.median = 0.25;
  errors.worst = 0.5;
  const MfuBand b = mfu_band(0.4, errors);
  EXPECT_NEAR(b.median_low, 0.32, 1e-12);
  EXPECT_NEAR(b.median_high, 0.4 / 0.75, 1e-12);
  EXPECT_NEAR(b.worst_low, 0.4 / 1.5, 1e-12);
  EXPECT_NEAR(b.worst_high, 0.8, 1e-12);
}

TEST(PlanJob, PlannerOnlyFeaturesAreNamedAndTheEnginesLayoutsPass) {
  Layout engine;  // DP + EP + PP 1F1B / DualPipeV, ZeRO <= 2, recompute none or full
  engine.recompute = Recompute::kNone;
  engine.pp = 2;
  engine.ep = 8;
  engine.zero = 2;
  engine.schedule = Schedule::kDualPipeV;
  EXPECT_TRUE(planner_only_features(engine).empty());
  engine.recompute = Recompute::kFull;  // recompute = "full" in the run config
  EXPECT_TRUE(planner_only_features(engine).empty());
  Layout l = engine;
  l.tp = 2, l.cp = 2, l.zero = 3, l.offload_optimizer = true, l.fp8 = true;
  l.recompute = Recompute::kSelective, l.schedule = Schedule::kInterleaved, l.vpp = 2;
  const std::vector<std::string> only = planner_only_features(l);
  const std::vector<std::string> expected = {"TP2",
                                             "CP2",
                                             "ZeRO-3",
                                             "optimizer offload",
                                             "FP8 GEMMs",
                                             "selective recompute",
                                             "interleaved schedule"};
  EXPECT_EQ(only, expected);
}

TEST(PlanJob, TheValidatedRegionIsWhatAgreeingPointsCover) {
  std::vector<ValidationRow> rows(4);
  rows[0].within_20_percent = true;
  rows[0].point.layout.tp = 2, rows[0].point.layout.pp = 8, rows[0].point.layout.ep = 64;
  rows[0].point.layout.zero = 1, rows[0].point.layout.schedule = Schedule::kInterleaved;
  rows[1].within_20_percent = true;
  rows[1].point.layout.pp = 16, rows[1].point.layout.schedule = Schedule::kDualPipe;
  rows[2].within_20_percent = false;  // a miss does not widen the region
  rows[2].point.layout.cp = 4, rows[2].point.layout.zero = 3;
  rows[3].within_20_percent = true;  // a calibration point is no evidence either
  rows[3].point.role = PointRole::kCalibration;
  rows[3].point.layout.tp = 8, rows[3].point.layout.offload_optimizer = true;
  const ValidatedRegion r = validated_region(rows);
  EXPECT_EQ(r.points, 2u);
  EXPECT_EQ(r.max_tp, 2);
  EXPECT_EQ(r.max_pp, 16);
  EXPECT_EQ(r.max_ep, 64);
  EXPECT_EQ(r.max_cp, 1);
  EXPECT_EQ(r.max_zero, 1);
  Layout inside;
  inside.tp = 2, inside.pp = 8, inside.schedule = Schedule::kInterleaved;
  EXPECT_TRUE(outside_region(inside, r).empty());
  Layout outside = inside;
  outside.cp = 4, outside.zero = 3, outside.schedule = Schedule::kDualPipeV;
  const std::vector<std::string> warn = outside_region(outside, r);
  ASSERT_EQ(warn.size(), 3u);
  EXPECT_EQ(warn[0], "CP4 (validated: CP <= 1)");
  EXPECT_EQ(warn[1], "ZeRO-3 (validated: ZeRO <= 1)");
  EXPECT_EQ(warn[2], "dualpipev schedule (no validated point)");
}

TEST(PlanJob, StepTimeIsMonotonicInWorkAndEfficiency) {
  const ModelShape model = load_model_shape(repo("configs/models/deepseek-v3.json"), 4096);
  ClusterSpec cluster = ClusterSpec::load(repo("configs/clusters/h100-ib.json"));
  Layout l;
  l.pp = 8, l.ep = 64, l.schedule = Schedule::k1F1B;
  double previous = 0;
  for (int64_t batch : {1024, 2048, 4096, 8192}) {  // more sequences: a longer step
    const Estimate e = evaluate(model, cluster, Job::of(1024, batch, 4096), l);
    ASSERT_TRUE(e.valid);
    EXPECT_GT(e.time.step, previous) << batch;
    previous = e.time.step;
  }
  previous = 0;
  for (double max : {0.9, 0.75, 0.6, 0.45}) {  // slower GEMMs: a longer step
    cluster.efficiency.gemm.max = max;
    const Estimate e = evaluate(model, cluster, Job::of(1024, 4096, 4096), l);
    EXPECT_GT(e.time.step, previous) << max;
    previous = e.time.step;
  }
}

TEST(PlanJob, SideBySideListsEveryCategoryForEveryLayout) {
  std::vector<Estimate> estimates(2);
  estimates[0].memory.weights = 2 * 1024.0 * 1024.0 * 1024.0;
  estimates[1].time.bubble = 1.5;
  estimates[1].time.step = 4.25;
  const std::string text = format_side_by_side(estimates);
  EXPECT_NE(text.find("weights                        2.00       0.00"), std::string::npos) << text;
  EXPECT_NE(text.find("pipeline bubble                0.00       1.50"), std::string::npos) << text;
  EXPECT_NE(text.find("step                           0.00       4.25"), std::string::npos) << text;
  const std::string svg = side_by_side_svg(estimates, 80, "a <title>");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("a &lt;title&gt;"), std::string::npos);
  EXPECT_NE(svg.find("HBM"), std::string::npos);
  EXPECT_EQ(format_side_by_side({}), "");
}

TEST(PlanJob, CliAnswersTheJobAndWarnsOutsideTheValidatedRegion) {
  const test::CliRun r = test::run_trex(
      "plan --model " + repo("configs/models/deepseek-v3.json") + " --cluster " +
      repo("configs/clusters/h100-ib.json") +
      " --devices 1024 --global-batch 8192 --seq 4096 --layout tp1,pp8,ep64,cp2,1f1b,zero3"
      " --tokens 1e12 --price 2 --storage-gbps 50 --mtbf-hours 12 --root " +
      test::source_dir());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("planner only: CP2, ZeRO-3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("WARNING outside the validated region"), std::string::npos);
  EXPECT_NE(r.output.find("Young/Daly optimum"), std::string::npos);
  EXPECT_NE(r.output.find("device-hours, cost"), std::string::npos);
  EXPECT_NE(r.output.find("at the validation's median error"), std::string::npos);
}

}  // namespace
}  // namespace trex::plan
