// `trex bench step` on the tiny model (correctness of the report, not speed) and
// the profiler it uses (core/profile.hpp).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cli_run.hpp"
#include "test_paths.hpp"
#include "trex/core/profile.hpp"
#include "trex/model/config.hpp"
#include "trex/model/params.hpp"

namespace {

using trex::profile::Op;
using trex::profile::Phase;

// Enables the profiler for one test and leaves it off and empty afterwards.
struct ProfilerOn {
  ProfilerOn() {
    trex::profile::reset();
    trex::profile::set_enabled(true);
  }
  ~ProfilerOn() {
    trex::profile::set_enabled(false);
    trex::profile::reset();
  }
};

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

std::map<std::pair<Op, Phase>, trex::profile::Record> by_key() {
  std::map<std::pair<Op, Phase>, trex::profile::Record> out;
  for (const auto& r : trex::profile::records()) out[{r.op, r.phase}] = r;
  return out;
}

TEST(Profiler, DisabledRecordsNothing) {
  trex::profile::reset();
  trex::profile::set_enabled(false);
  {
    TREX_PROFILE(Op::kNorm, 1e6);
    TREX_PROFILE(Op::kRope);
    sleep_ms(1);
  }
  EXPECT_TRUE(trex::profile::records().empty());
}

TEST(Profiler, NestedScopesCountExclusiveTime) {
  ProfilerOn on;
  const auto start = std::chrono::steady_clock::now();
  {
    TREX_PROFILE(Op::kAttnSwa);
    sleep_ms(20);
    {
      TREX_PROFILE(Op::kGemmAttnProj, 5e9);
      sleep_ms(30);
    }
    {
      const trex::profile::PhaseScope backward(Phase::kBackward);
      TREX_PROFILE(Op::kNorm);
      sleep_ms(10);
    }
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto r = by_key();
  ASSERT_EQ(r.size(), 3u);
  const auto& outer = r.at({Op::kAttnSwa, Phase::kForward});
  const auto& gemm = r.at({Op::kGemmAttnProj, Phase::kForward});
  const auto& norm = r.at({Op::kNorm, Phase::kBackward});  // the phase scope applies
  EXPECT_EQ(outer.calls, 1);
  EXPECT_EQ(gemm.calls, 1);
  EXPECT_DOUBLE_EQ(gemm.flops, 5e9);
  EXPECT_EQ(outer.flops, 0.0);
  // Exclusive: the outer scope keeps only its own 20 ms, not the 40 ms nested.
  EXPECT_GE(outer.seconds, 0.019);
  EXPECT_GE(gemm.seconds, 0.029);
  EXPECT_GE(norm.seconds, 0.009);
  // No double counting (inclusive outer time would be >= 60 ms): the parts add up to at most
  // the wall time.
  EXPECT_LE(outer.seconds + gemm.seconds + norm.seconds, wall + 1e-6);
}

TEST(Profiler, ExplicitPhaseAccumulatesAndResetClears) {
  ProfilerOn on;
  for (int i = 0; i < 3; ++i) {
    TREX_PROFILE(Op::kGemmLmHead, Phase::kBackward, 2.0);
  }
  auto r = by_key();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r.at({Op::kGemmLmHead, Phase::kBackward}).calls, 3);
  EXPECT_DOUBLE_EQ(r.at({Op::kGemmLmHead, Phase::kBackward}).flops, 6.0);
  EXPECT_STREQ(trex::profile::op_name(Op::kGemmLmHead), "gemm.lm_head");
  EXPECT_STREQ(trex::profile::phase_name(Phase::kBackward), "bwd");
  EXPECT_TRUE(trex::profile::is_gemm(Op::kGemmExpert));
  EXPECT_FALSE(trex::profile::is_gemm(Op::kSinkhorn));
  trex::profile::reset();
  EXPECT_TRUE(trex::profile::records().empty());
}

TEST(Profiler, EveryOpHasADistinctName) {
  std::map<std::string, int> seen;
  for (int i = 0; i < static_cast<int>(Op::kCount); ++i)
    ++seen[trex::profile::op_name(static_cast<Op>(i))];
  EXPECT_EQ(seen.size(), static_cast<size_t>(Op::kCount));
}

nlohmann::json run_json(const std::string& args) {
  const auto r = trex::test::run_trex(args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t brace = r.output.find('{');
  if (brace == std::string::npos) return {};
  return nlohmann::json::parse(r.output.substr(brace));
}

const std::string kTiny = "bench step --config " + trex::test::source_dir() +
                          "/configs/models/tiny-v4.json --seq 16 --batch 2 --steps 2 --warmup 1 ";

TEST(BenchStepCli, ReportsThroughputMemoryAndACoveringProfile) {
  const nlohmann::json j = run_json(kTiny + "--peak-gflops 50 --profile --json");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["seq"], 16);
  EXPECT_EQ(j["batch"], 2);
  EXPECT_EQ(j["dtype"], "fp32");
  EXPECT_EQ(j["peak_source"], "given");
  const auto& t = j["step_seconds"];
  ASSERT_EQ(t["all"].size(), 2u);
  const double median = t["median"], mean = t["mean"];
  EXPECT_GT(median, 0.0);
  EXPECT_NEAR(mean, (t["all"][0].get<double>() + t["all"][1].get<double>()) / 2, 1e-12);
  EXPECT_NEAR(j["tokens_per_second"].get<double>(), 32.0 / median, 1e-6 * 32.0 / median);
  const double flops = j["flops_per_step"];
  EXPECT_GT(flops, 0.0);
  EXPECT_NEAR(j["model_tflops"].get<double>(), flops / median / 1e12, 1e-9);
  EXPECT_NEAR(j["mfu"].get<double>(), flops / median / 50e9, 1e-9);
  EXPECT_TRUE(std::isfinite(j["final_loss"].get<double>()));
  // forward_backward is part of each step.
  const auto& fb = j["forward_backward_seconds"]["all"];
  ASSERT_EQ(fb.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_GT(fb[i].get<double>(), 0.0);
    EXPECT_LE(fb[i].get<double>(), t["all"][i].get<double>());
  }
  const auto& mem = j["memory"];
  EXPECT_GT(mem["peak_rss_bytes"].get<int64_t>(), mem["baseline_rss_bytes"].get<int64_t>());
  EXPECT_EQ(mem["delta_rss_bytes"].get<int64_t>(),
            mem["peak_rss_bytes"].get<int64_t>() - mem["baseline_rss_bytes"].get<int64_t>());
  EXPECT_GT(mem["param_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(mem["grad_bytes"], mem["param_bytes"]);
  // fp32 moments: a first moment for every parameter, a second only for AdamW's tensors.
  int64_t adamw_values = 0;
  for (const trex::model::ParamSpec& spec :
       trex::model::parameter_specs(trex::model::ModelConfig::load(trex::test::source_dir() +
                                                                   "/configs/models/tiny-v4.json")))
    if (spec.group == trex::model::OptimizerGroup::kAdamW) adamw_values += spec.numel();
  EXPECT_GT(adamw_values, 0);
  EXPECT_EQ(mem["optimizer_state_bytes"].get<int64_t>(),
            mem["param_bytes"].get<int64_t>() + 4 * adamw_values);

  // Profile: the categories sum to at most the step and cover at least 80% of it.
  const auto& p = j["profile"];
  const double step_ms = p["step_ms"];
  EXPECT_NEAR(step_ms, mean * 1e3, 1e-6 * step_ms);
  double sum = 0.0;
  std::map<std::string, int> seen;
  for (const auto& e : p["ops"]) {
    EXPECT_GE(e["ms_per_step"].get<double>(), 0.0);
    sum += e["ms_per_step"].get<double>();
    ++seen[e["op"].get<std::string>() + "/" + e["phase"].get<std::string>()];
    if (e["op"].get<std::string>().rfind("gemm.", 0) == 0) {
      EXPECT_TRUE(e.contains("gflops")) << e;
    }
  }
  EXPECT_NEAR(sum, p["profiled_ms_per_step"].get<double>(), 1e-6 * step_ms);
  EXPECT_LE(sum, step_ms * (1 + 1e-9));
  EXPECT_GE(p["coverage"].get<double>(), 0.8);
  EXPECT_NEAR(sum + p["unattributed_ms_per_step"].get<double>(), step_ms, 1e-6 * step_ms);
  double phases = 0.0;
  for (const char* phase : {"fwd", "bwd", "optim"})
    phases += p["phase_ms_per_step"][phase].get<double>();
  EXPECT_NEAR(phases, sum, 1e-6 * step_ms);
  EXPECT_EQ(p["phase_ms_per_step"].size(), 3u);
  // The categories of every part of the V4 step appear, forward and backward.
  for (const char* key : {"gemm.attn_proj/fwd", "gemm.attn_proj/bwd", "gemm.experts/fwd",
                          "gemm.experts/bwd",   "gemm.shared/fwd",    "gemm.lm_head/fwd",
                          "gemm.lm_head/bwd",   "gemm.mtp_proj/fwd",  "gemm.router/fwd",
                          "attn.swa/fwd",       "attn.csa/bwd",       "attn.hca/fwd",
                          "compressor/fwd",     "indexer/fwd",        "mhc.pre/fwd",
                          "mhc.post/bwd",       "mhc.head/fwd",       "mhc.sinkhorn/fwd",
                          "moe.router/fwd",     "moe.dispatch/fwd",   "moe.combine/bwd",
                          "norm/fwd",           "norm/bwd",           "rope/fwd",
                          "loss.ce/fwd",        "optim.adamw/optim",  "optim.muon_ns/optim",
                          "embedding/fwd",      "embedding/bwd"})
    EXPECT_EQ(seen.count(key), 1u) << key;
}

TEST(BenchStepCli, TextReportAndMtpOff) {
  const auto r = trex::test::run_trex(kTiny + "--peak-gflops 50 --mtp 0 --dtype bf16 --profile");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* field : {"median", "mean", "tokens/s", "TFLOP/s", "MFU", "peak RSS",
                            "optimizer state", "ms/step", "other/unattributed", "bf16"})
    EXPECT_NE(r.output.find(field), std::string::npos) << field << "\n" << r.output;
  // MTP off: no MTP projections were run.
  EXPECT_EQ(r.output.find("gemm.mtp_proj"), std::string::npos) << r.output;
  // No profile unless asked for.
  const nlohmann::json j = run_json(kTiny + "--peak-gflops 50 --json");
  EXPECT_FALSE(j.contains("profile"));
}

// --optimizer adamw (the transformers baseline's optimizer): no Newton-Schulz at all.
TEST(BenchStepCli, AdamwOnlyRunsNoNewtonSchulz) {
  const nlohmann::json j = run_json(kTiny + "--peak-gflops 50 --optimizer adamw --profile --json");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["optimizer"], "adamw");
  bool adamw = false;
  for (const auto& e : j["profile"]["ops"]) {
    EXPECT_NE(e["op"].get<std::string>(), "optim.muon_ns") << e;
    if (e["op"].get<std::string>() == "optim.adamw") adamw = true;
  }
  EXPECT_TRUE(adamw);
  EXPECT_EQ(run_json(kTiny + "--peak-gflops 50 --json")["optimizer"], "muon");
}

// --recompute full: the same losses with fewer activation bytes alive at the peak.
TEST(BenchStepCli, FullRecomputeKeepsTheLossAndLowersPeakBuffers) {
  const std::string args = "bench step --config " + trex::test::source_dir() +
                           "/configs/models/tiny-v4.json --seq 64 --batch 2 --steps 1 --warmup 1 "
                           "--peak-gflops 50 --json ";
  const nlohmann::json none = run_json(args);
  const nlohmann::json full = run_json(args + "--recompute full");
  ASSERT_TRUE(none.is_object() && full.is_object());
  EXPECT_EQ(full["recompute"], "full");
  EXPECT_EQ(full["final_loss"], none["final_loss"]);
  const int64_t none_peak = none["memory"]["peak_buffer_bytes"];
  const int64_t full_peak = full["memory"]["peak_buffer_bytes"];
  EXPECT_GT(full_peak, 0);
  EXPECT_LT(full_peak, none_peak);
  EXPECT_DOUBLE_EQ(none["memory"]["peak_buffer_bytes_per_token"].get<double>(),
                   static_cast<double>(none_peak) / 128.0);
  // Selective: between the two.
  const nlohmann::json selective = run_json(args + "--recompute selective");
  ASSERT_TRUE(selective.is_object());
  EXPECT_EQ(selective["recompute"], "selective");
  EXPECT_EQ(selective["final_loss"], none["final_loss"]);
  const int64_t selective_peak = selective["memory"]["peak_buffer_bytes"];
  EXPECT_LT(selective_peak, none_peak);
  EXPECT_GT(selective_peak, full_peak);
}

// --moment-dtype bf16 halves the optimizer state and nothing else.
TEST(BenchStepCli, Bf16MomentsHalveTheOptimizerState) {
  const nlohmann::json f32 = run_json(kTiny + "--peak-gflops 50 --json");
  const nlohmann::json bf16 = run_json(kTiny + "--peak-gflops 50 --moment-dtype bf16 --json");
  ASSERT_TRUE(f32.is_object() && bf16.is_object());
  EXPECT_EQ(bf16["moment_dtype"], "bf16");
  EXPECT_EQ(2 * bf16["memory"]["optimizer_state_bytes"].get<int64_t>(),
            f32["memory"]["optimizer_state_bytes"].get<int64_t>());
  EXPECT_EQ(bf16["memory"]["param_bytes"], f32["memory"]["param_bytes"]);
}

TEST(BenchStepCli, BadOptionsAreNamed) {
  const std::string base = "bench step --config " + trex::test::source_dir() +
                           "/configs/models/tiny-v4.json --peak-gflops 1 ";
  for (const char* bad : {"--dtype fp8", "--seq 1", "--mtp 2", "--steps 0", "--batch 0",
                          "--optimizer sgd", "--moment-dtype fp8"}) {
    const auto r = trex::test::run_trex(base + bad);
    EXPECT_NE(r.exit_code, 0) << bad;
    const std::string field = std::string(bad).substr(2, std::string(bad).find(' ') - 2);
    EXPECT_NE(r.output.find(field), std::string::npos) << bad << "\n" << r.output;
  }
  const auto r = trex::test::run_trex("bench step --config /nonexistent/model.json");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("/nonexistent/model.json"), std::string::npos) << r.output;
}

}  // namespace
