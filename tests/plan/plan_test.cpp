// The planner: model shapes from the shipped configs, the memory model on
// hand-computed cases, the time model's monotonic behaviour, the search on a
// small synthetic cluster, calibration, validation and the CLI.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "cli_run.hpp"
#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/model/config.hpp"
#include "trex/model/flops.hpp"
#include "trex/model/param_counts.hpp"
#include "trex/plan/calibrate.hpp"
#include "trex/plan/cluster.hpp"
#include "trex/plan/model_shape.hpp"
#include "trex/plan/planner.hpp"
#include "trex/plan/report.hpp"
#include "trex/plan/validation.hpp"

namespace trex::plan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string model_path(const std::string& name) {
  return test::source_dir() + "/configs/models/" + name + ".json";
}
std::string cluster_path(const std::string& name) {
  return test::source_dir() + "/configs/clusters/" + name + ".json";
}

// A cluster with round numbers: 8 devices per node, 1000 TFLOP/s, 1000 GB/s HBM.
ClusterSpec synthetic_cluster(double hbm_gib) {
  ClusterSpec c;
  c.name = "synthetic";
  c.device.name = "dev";
  c.device.bf16_tflops = 1000;
  c.device.hbm_gib = hbm_gib;
  c.device.hbm_gbps = 1000;
  c.device.reserved_gib = 1;
  c.topology.devices_per_node = 8;
  c.topology.scale_up_domain = 8;
  c.topology.scale_up_gbps = 100;
  c.topology.scale_out_gbps = 5;
  c.topology.host_gbps = 10;
  return c;
}

// Two MoE layers with round numbers; every quantity per token.
ModelShape synthetic_model() {
  ModelShape m;
  m.name = "synthetic";
  m.family = "test";
  m.seq_len = 1024;
  m.hidden = 1024;
  m.residual_width = 1024;
  m.vocab = 1000;
  m.n_experts = 16;
  m.top_k = 2;
  m.expert_ffn = 512;
  m.min_matrix_dim = 512;
  for (int i = 0; i < 2; ++i) {
    LayerShape l;
    l.kind = LayerKind::kMoE;
    l.has_experts = true;
    l.dense_params = 10e6;
    l.expert_params = 160e6;  // 16 experts × 10M
    l.gemm_flops = 60e6;
    l.expert_flops = 120e6;
    l.attention_flops = 20e6;
    l.selective_recompute_flops = 5e6;
    l.act_bytes_none = 40000;
    l.act_bytes_selective = 20000;
    l.act_bytes_full = 2048;
    l.vector_bytes = 80000;
    l.gemm_input_elements = 8192;
    l.gemm_calls = 8;
    l.vector_calls = 16;
    m.layers.push_back(l);
  }
  m.embed_params = 1e6;
  m.head_params = 1e6;
  m.head_flops = 6e6;
  m.total_params = m.all_params();
  m.activated_params = 2 * (10e6 + 20e6) + 1e6;
  m.model_flops_per_token = 2 * (60e6 + 120e6 + 20e6) + 6e6;
  return m;
}

Job job(int64_t devices, int64_t batch, int64_t seq) {
  Job j;
  j.devices = devices;
  j.global_batch = batch;
  j.seq_len = seq;
  j.expert_imbalance = 1.0;
  return j;
}

// ---- model shapes ----

TEST(PlanModelShape, DeepSeekV3MatchesPublishedFlopsAndParams) {
  ModelShape m = load_model_shape(model_path("deepseek-v3"), 4096);
  // Anchors §2.1: 260 GFLOP/token at 4K with MTP (Bridge: 338 TF / 1297 tok/s = 260.6).
  EXPECT_NEAR(m.model_flops_per_token / 1e9, 260.0, 1.0);
  EXPECT_NEAR(m.total_params / 1e9, 671.0, 3.0);     // model card: 671B
  EXPECT_NEAR(m.activated_params / 1e9, 37.0, 0.6);  // model card: 37B
  ASSERT_EQ(m.layers.size(), 62u);
  EXPECT_EQ(m.layers[0].kind, LayerKind::kDense);
  EXPECT_EQ(m.layers[3].kind, LayerKind::kMoE);
  EXPECT_EQ(m.layers[61].kind, LayerKind::kMtp);
  EXPECT_EQ(m.routed_group_limit, 4);
  // 32K: the causal attention term grows (anchors: 478 GFLOP).
  EXPECT_NEAR(load_model_shape(model_path("deepseek-v3"), 32768).model_flops_per_token / 1e9, 478.0,
              3.0);
}

TEST(PlanModelShape, Qwen3MoeMatchesPublishedFlopsAndParams) {
  // Megatron-Bridge's model TFLOP/s over tokens/s (docs/results/planner-published-points.md):
  // Qwen3-235B-A22B 1300.44 TF / 8784.492 tok/s = 148.0 GFLOP/token; Qwen3-30B-A3B
  // 1030.07 TF / 44773.361 tok/s = 23.0 GFLOP/token. Model cards: 235B / 22B and 30.5B.
  ModelShape big = load_model_shape(model_path("qwen3-235b-a22b"), 4096);
  EXPECT_EQ(big.family, "qwen3_moe");
  EXPECT_NEAR(big.model_flops_per_token / 1e9, 1300.44e3 / 8784.492, 0.3);
  EXPECT_NEAR(big.total_params / 1e9, 235.0, 1.0);
  EXPECT_NEAR(big.activated_params / 1e9, 22.0, 0.5);
  ASSERT_EQ(big.layers.size(), 94u);
  EXPECT_TRUE(big.layers[0].has_experts);
  ModelShape small = load_model_shape(model_path("qwen3-30b-a3b"), 4096);
  EXPECT_NEAR(small.model_flops_per_token / 1e9, 1030.07e3 / 44773.361, 0.1);
  EXPECT_NEAR(small.total_params / 1e9, 30.5, 0.3);
  // mlp_only_layers makes a layer dense (no experts, the dense FFN's FLOPs).
  nlohmann::json j = nlohmann::json::parse(read_file(model_path("qwen3-30b-a3b")));
  j["mlp_only_layers"] = {0};
  ModelShape dense_first = model_shape_from_json(j, "q.json", 4096);
  EXPECT_FALSE(dense_first.layers[0].has_experts);
  EXPECT_TRUE(dense_first.layers[1].has_experts);
  EXPECT_NEAR(dense_first.layers[0].gemm_flops - small.layers[0].gemm_flops, 6.0 * 3 * 2048 * 6144,
              1.0);
  j["num_key_value_heads"] = 5;  // 32 heads: not a divisor
  EXPECT_THROW(model_shape_from_json(j, "q.json", 4096), Error);
}

TEST(PlanModelShape, DeepSeekV4LayersSumToTheEngineCounters) {
  for (const char* name : {"deepseek-v4-flash", "deepseek-v4-pro"}) {
    SCOPED_TRACE(name);
    ModelShape m = load_model_shape(model_path(name), 4096);
    model::ModelConfig c = model::ModelConfig::load(model_path(name));
    const double engine = model::flops_per_token(c, 4096, c.num_nextn_predict_layers).total();
    EXPECT_DOUBLE_EQ(m.model_flops_per_token, engine);
    double sum = m.head_flops;
    for (const LayerShape& l : m.layers) sum += l.gemm_flops + l.expert_flops + l.attention_flops;
    EXPECT_NEAR(sum / engine, 1.0, 1e-9);
    model::ParamCounts p = model::count_parameters(c);
    // Everything the run holds: main model + MTP layers (embedding/head shared).
    EXPECT_NEAR(m.all_params() / static_cast<double>(p.total() + p.mtp_total()), 1.0, 1e-3);
    for (const LayerShape& l : m.layers) {
      EXPECT_GT(l.act_bytes_none, l.act_bytes_selective);
      EXPECT_GT(l.act_bytes_selective, l.act_bytes_full);
    }
  }
  // Anchors: V4-Flash 90.8 GFLOP/token at 4K with MTP.
  EXPECT_NEAR(load_model_shape(model_path("deepseek-v4-flash"), 4096).model_flops_per_token / 1e9,
              90.8, 0.5);
}

TEST(PlanModelShape, BadConfigsNameTheField) {
  nlohmann::json j = {{"model_type", "deepseek_v3"}, {"hidden_size", 64}};
  try {
    model_shape_from_json(j, "x.json", 128);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.file_name(), "x.json");
    EXPECT_FALSE(e.field_name().empty());
  }
  EXPECT_THROW(model_shape_from_json({{"model_type", "llama"}}, "y.json", 128), Error);
}

// ---- cluster specs ----

TEST(PlanCluster, ShippedSpecsLoadAndErrorsNameTheField) {
  for (const char* name : {"ascend-910c-cloudmatrix384", "h800-ib", "h100-ib", "h200-nvlink",
                           "b200-hgx", "gb200-nvl72", "gb300-nvl72"}) {
    ClusterSpec c = ClusterSpec::load(cluster_path(name));
    EXPECT_GT(c.device.bf16_tflops, 0) << name;
    // Round trip.
    ClusterSpec again = ClusterSpec::from_json(c.to_json(), name);
    EXPECT_EQ(again.to_json(), c.to_json());
  }
  ClusterSpec ascend = ClusterSpec::load(cluster_path("ascend-910c-cloudmatrix384"));
  EXPECT_DOUBLE_EQ(ascend.device.bf16_tflops, 353.9);
  EXPECT_EQ(ascend.topology.scale_up_domain, 768);
  EXPECT_EQ(ascend.topology.dies_per_package, 2);
  EXPECT_DOUBLE_EQ(ascend.topology.die_to_die_gbps, 224);
  nlohmann::json bad = ascend.to_json();
  bad["topology"].erase("scale_out_gbps");
  try {
    ClusterSpec::from_json(bad, "c.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "topology.scale_out_gbps");
  }
  bad = ascend.to_json();
  bad["efficiency"]["gemm"]["max"] = 1.5;
  try {
    ClusterSpec::from_json(bad, "c.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "efficiency.gemm.max");
  }
  // Loaded from a file, the error also gives the line.
  test::TempDir dir;
  const std::string text = bad.dump(2);
  write_file_atomic(dir.file("c.json"), text);
  try {
    ClusterSpec::load(dir.file("c.json"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "efficiency.gemm.max");
    const size_t at = text.find("\"max\": 1.5");
    ASSERT_NE(at, std::string::npos);
    EXPECT_EQ(e.line_number(), 1 + std::count(text.begin(), text.begin() + at, '\n'));
    EXPECT_NE(std::string(e.what()).find("must be in [0.001, 1], got 1.5"), std::string::npos)
        << e.what();
  }
}

TEST(PlanCluster, GemmEfficiencyRisesWithSizeTowardsMax) {
  ClusterSpec c = synthetic_cluster(80);
  c.efficiency.gemm = {0.8, 0, 0.5, 5};
  double previous = 0;
  for (double m : {16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0}) {
    double e = gemm_efficiency(c, m, 4096, 4096, false);
    EXPECT_GT(e, previous);
    EXPECT_LT(e, 0.8);
    previous = e;
  }
  EXPECT_GT(previous, 0.78);
  // Hand-computed: M=N=K=1024 -> 2.147 GFLOP / 800 TF = 2.68 us; bytes 6 MiB /
  // 500 GB/s = 12.6 us (memory bound) + 5 us launch.
  const double bytes = 2.0 * (1024 * 1024 * 2) + 2.0 * 1024 * 1024;
  EXPECT_NEAR(gemm_seconds(c, 1024, 1024, 1024, false), bytes / 500e9 + 5e-6, 1e-12);
  EXPECT_NEAR(collective_efficiency(c, c.efficiency.collective_half_bytes),
              c.efficiency.collective_max / 2, 1e-12);
}

// ---- memory model, hand-computed ----

TEST(PlanMemory, HandComputedSingleDevice) {
  ModelShape m = synthetic_model();
  ClusterSpec c = synthetic_cluster(1000);
  Layout l;  // TP1 PP1 EP1 CP1 mbs1, ZeRO-1 over DP 1
  l.recompute = Recompute::kNone;
  Estimate e = evaluate(m, c, job(1, 4, 1024), l);
  ASSERT_TRUE(e.valid) << e.invalid_reason;
  const double params = 2 * (10e6 + 160e6) + 2e6;  // 342M
  EXPECT_DOUBLE_EQ(e.memory.weights, 2 * params);
  EXPECT_DOUBLE_EQ(e.memory.gradients, 4 * params);
  EXPECT_DOUBLE_EQ(e.memory.optimizer, 12 * params);
  // PP1: one micro-batch in flight, 1024 tokens × 2 layers × 40000 B.
  EXPECT_DOUBLE_EQ(e.memory.activations, 1024.0 * 2 * 40000);
  EXPECT_DOUBLE_EQ(e.memory.logits, 1024.0 * 1000 * 4);
  EXPECT_DOUBLE_EQ(e.memory.reserved, 1 * kGiB);
  EXPECT_EQ(e.micro_batches, 4);

  l.recompute = Recompute::kSelective;
  EXPECT_DOUBLE_EQ(evaluate(m, c, job(1, 4, 1024), l).memory.activations, 1024.0 * 2 * 20000);
  l.recompute = Recompute::kFull;
  EXPECT_DOUBLE_EQ(evaluate(m, c, job(1, 4, 1024), l).memory.activations, 1024.0 * 2 * 2048);
  l.offload_optimizer = true;
  EXPECT_DOUBLE_EQ(evaluate(m, c, job(1, 4, 1024), l).memory.optimizer, 0);
  Job muon = job(1, 4, 1024);
  muon.optimizer = Optimizer::kMuon;
  l.offload_optimizer = false;
  EXPECT_DOUBLE_EQ(evaluate(m, c, muon, l).memory.optimizer, 8 * params);
}

TEST(PlanMemory, HandComputedShardingOverDpEpTp) {
  ModelShape m = synthetic_model();
  ClusterSpec c = synthetic_cluster(1000);
  Layout l;
  l.recompute = Recompute::kNone;
  l.ep = 4;  // 8 devices: DP 8, EP 4 -> expert-DP 2
  const double dense = 2 * 10e6 + 2e6, expert = 2 * 160e6 / 4;
  for (int zero : {0, 1, 2, 3}) {
    SCOPED_TRACE(zero);
    l.zero = zero;
    Estimate e = evaluate(m, c, job(8, 8, 1024), l);
    ASSERT_TRUE(e.valid) << e.invalid_reason;
    const double shard = dense / 8 + expert / 2;
    const double full = dense + expert;
    EXPECT_NEAR(e.memory.weights, 2 * (zero >= 3 ? shard : full), 1);
    EXPECT_NEAR(e.memory.gradients, 4 * (zero >= 2 ? shard : full), 1);
    EXPECT_NEAR(e.memory.optimizer, 12 * (zero >= 1 ? shard : full), 1);
  }
  // TP2 (with SP) halves dense weights and the tokens a device stores.
  l.zero = 0;
  l.ep = 1;
  l.tp = 2;
  Estimate e = evaluate(m, c, job(2, 2, 1024), l);
  ASSERT_TRUE(e.valid) << e.invalid_reason;
  EXPECT_NEAR(e.memory.weights, 2 * (dense / 2 + 2 * 160e6), 1);
  EXPECT_DOUBLE_EQ(e.memory.activations, 512.0 * 2 * 40000);
}

// bf16 moments shrink the optimizer state to master + 2-byte moments; FP8 /
// MXFP4 expert weights shrink the routed experts' weight bytes only (scales
// included), also on the ZeRO-3 shard.
TEST(PlanMemory, HandComputedBf16MomentsAndQuantisedExperts) {
  ModelShape m = synthetic_model();
  ClusterSpec c = synthetic_cluster(1000);
  Layout l;
  l.recompute = Recompute::kNone;
  l.ep = 4;  // 8 devices: DP 8, EP 4 -> expert-DP 2
  l.zero = 1;
  const double dense = 2 * 10e6 + 2e6, expert = 2 * 160e6 / 4;
  const double shard = dense / 8 + expert / 2;
  Job j = job(8, 8, 1024);
  j.moment_bytes = 2;
  Estimate e = evaluate(m, c, j, l);
  ASSERT_TRUE(e.valid) << e.invalid_reason;
  EXPECT_NEAR(e.memory.optimizer, (4 + 2 * 2) * shard, 1);  // AdamW: master + m + v
  j.optimizer = Optimizer::kMuon;
  EXPECT_NEAR(evaluate(m, c, j, l).memory.optimizer, (4 + 2) * shard, 1);  // + momentum
  EXPECT_NEAR(evaluate(m, c, j, l).memory.weights, 2 * (dense + expert), 1);
  // bf16 weights updated in place (no fp32 master), bf16 gradients.
  j.optimizer = Optimizer::kAdamW;
  j.master_bytes = 0;
  j.grad_bytes = 2;
  e = evaluate(m, c, j, l);
  EXPECT_NEAR(e.memory.optimizer, 2 * 2 * shard, 1);
  EXPECT_NEAR(e.memory.gradients, 2 * (dense + expert), 1);
  j.master_bytes = -1;
  EXPECT_THROW(evaluate(m, c, j, l), Error);
  j.master_bytes = 4;
  j.grad_bytes = 4;
  j.optimizer = Optimizer::kMuon;

  EXPECT_DOUBLE_EQ(expert_weight_bytes("fp8"), 1 + 1.0 / 16384);
  EXPECT_DOUBLE_EQ(expert_weight_bytes("mxfp4"), 0.53125);
  EXPECT_THROW(expert_weight_bytes("int4"), Error);
  j.expert_weight_bytes = expert_weight_bytes("mxfp8");  // 1.03125
  e = evaluate(m, c, j, l);
  EXPECT_NEAR(e.memory.weights, 2 * dense + 1.03125 * expert, 1);
  EXPECT_NEAR(e.memory.gradients, 4 * (dense + expert), 1);  // gradients stay bf16/fp32
  j.expert_weight_bytes = expert_weight_bytes("mxfp4");
  l.zero = 3;
  e = evaluate(m, c, j, l);
  ASSERT_TRUE(e.valid) << e.invalid_reason;
  EXPECT_NEAR(e.memory.weights, 2 * dense / 8 + 0.53125 * expert / 2, 1);
}

TEST(PlanMemory, PipelineInFlightMicroBatches) {
  ModelShape m = synthetic_model();
  m.layers.push_back(m.layers[0]);
  m.layers.push_back(m.layers[0]);  // 4 layers
  ClusterSpec c = synthetic_cluster(1000);
  Layout l;
  l.recompute = Recompute::kNone;
  l.pp = 2;
  // 1F1B: rank 0 holds PP = 2 micro-batches of its two layers.
  Estimate e = evaluate(m, c, job(2, 8, 1024), l);
  ASSERT_TRUE(e.valid) << e.invalid_reason;
  EXPECT_DOUBLE_EQ(e.memory.activations, 2 * 2 * 1024.0 * 40000);
  // Interleaved VPP2: (2(P-1) + (V-1)P + 1) / V = 2.5 stage-equivalents.
  l.schedule = Schedule::kInterleaved;
  l.vpp = 2;
  e = evaluate(m, c, job(2, 8, 1024), l);
  ASSERT_TRUE(e.valid) << e.invalid_reason;
  EXPECT_DOUBLE_EQ(e.memory.activations, 2.5 * 2 * 1024.0 * 40000);
  // DualPipeV: rank 0 holds stages 0 and 3 (one layer each); P+1 = 3 copies.
  l.schedule = Schedule::kDualPipeV;
  l.vpp = 1;
  e = evaluate(m, c, job(2, 8, 1024), l);
  ASSERT_TRUE(e.valid) << e.invalid_reason;
  EXPECT_DOUBLE_EQ(e.memory.activations, 3 * 2 * 1024.0 * 40000);
  // Too few micro-batches for DualPipeV (needs 2·PP).
  EXPECT_FALSE(evaluate(m, c, job(2, 2, 1024), l).valid);
}

TEST(PlanMemory, FitsCheckUsesCapacity) {
  ModelShape m = synthetic_model();
  Layout l;
  Estimate small = evaluate(m, synthetic_cluster(4), job(1, 4, 1024), l);
  Estimate big = evaluate(m, synthetic_cluster(80), job(1, 4, 1024), l);
  EXPECT_FALSE(small.memory.fits());
  EXPECT_TRUE(big.memory.fits());
  EXPECT_DOUBLE_EQ(small.memory.total(), big.memory.total());
}

// ---- time model ----

TEST(PlanTime, MoreDevicesLessComputePerDevice) {
  ModelShape m = load_model_shape(model_path("deepseek-v4-flash"), 4096);
  ClusterSpec c = ClusterSpec::load(cluster_path("h200-nvlink"));
  Layout l;
  l.ep = 8;
  double previous_compute = 1e30, previous_step = 1e30;
  for (int64_t devices : {8, 16, 32, 64}) {
    Estimate e = evaluate(m, c, job(devices, 256, 4096), l);
    ASSERT_TRUE(e.valid) << e.invalid_reason;
    EXPECT_LT(e.time.compute(), previous_compute) << devices;
    EXPECT_LT(e.time.step, previous_step) << devices;
    previous_compute = e.time.compute();
    previous_step = e.time.step;
  }
}

TEST(PlanTime, CalibratedFiguresAndRecipeSwitchesScaleTheirTermsOnly) {
  ModelShape m = synthetic_model();
  ClusterSpec c = synthetic_cluster(1000);
  c.device.fp8_tflops = 2000;
  c.efficiency.gemm.fp8_max = 0.5;
  c.efficiency.fp8_attention_speedup = 1.5;
  c.efficiency.gemm.launch_us = 5;
  c.device.hbm_gbps = 1e5;  // compute-bound GEMMs
  const Job j = job(8, 128, 1024);
  Layout l;
  l.recompute = Recompute::kNone;
  l.ep = 8;
  l.mbs = 16;
  l.overlap = l.ep_overlap = false;
  const Estimate base = evaluate(m, c, j, l);
  ASSERT_TRUE(base.valid) << base.invalid_reason;
  // The sustained share divides GEMM and attention time, nothing else.
  ClusterSpec slow = c;
  slow.device.sustained_share = 0.5;
  const Estimate half = evaluate(m, slow, j, l);
  EXPECT_NEAR(half.time.attention, 2 * base.time.attention, 1e-12);
  EXPECT_GT(half.time.gemm, 1.5 * base.time.gemm);  // compute-bound part doubles
  EXPECT_DOUBLE_EQ(half.time.vector, base.time.vector);
  EXPECT_DOUBLE_EQ(half.time.a2a_total, base.time.a2a_total);
  // FP8 attention runs at the speed-up; CUDA graphs remove the launches.
  Layout fp8_attention = l;
  fp8_attention.fp8_attention = true;
  EXPECT_NEAR(evaluate(m, c, j, fp8_attention).time.attention, base.time.attention / 1.5, 1e-12);
  Layout graphs = l;
  graphs.cuda_graphs = true;
  EXPECT_GT(base.time.launch, 0);
  EXPECT_EQ(evaluate(m, c, j, graphs).time.launch, 0);
  // ... and the GEMMs' own launch cost (their efficiency has none inside a graph).
  EXPECT_LT(evaluate(m, c, j, graphs).time.gemm, base.time.gemm);
  EXPECT_NEAR(
      evaluate(m, c, j, graphs).time.step,
      base.time.step - base.time.launch - (base.time.gemm - evaluate(m, c, j, graphs).time.gemm),
      1e-9);
  EXPECT_EQ(parse_layout("ep8,fp8-attention,cuda-graphs").fp8_attention, true);
  EXPECT_EQ(parse_layout("ep8,fp8-attention,cuda-graphs").cuda_graphs, true);
  EXPECT_FALSE(parse_layout("ep8,fp8,bf16-dispatch").fp8_dispatch);
  EXPECT_FALSE(parse_layout("ep8,no-edge-overlap").edge_self_overlap);
  // BF16 dispatch with FP8 GEMMs sends 2 bytes per element instead of 1.
  Layout fp8_l = l, bf16_dispatch = l;
  fp8_l.fp8 = bf16_dispatch.fp8 = true;
  bf16_dispatch.fp8_dispatch = false;
  EXPECT_GT(evaluate(m, c, j, bf16_dispatch).time.a2a_total,
            1.2 * evaluate(m, c, j, fp8_l).time.a2a_total);
  // The V4 factor scales DeepSeek-V4 layers' compute only.
  ClusterSpec v4 = c;
  v4.efficiency.v4_compute_factor = 2;
  EXPECT_DOUBLE_EQ(evaluate(m, v4, j, l).time.step, base.time.step);  // family "test"
  ModelShape v4_model = m;
  v4_model.family = "deepseek_v4";
  const Estimate v4_base = evaluate(v4_model, c, j, l), v4_slow = evaluate(v4_model, v4, j, l);
  EXPECT_NEAR(v4_slow.time.attention, 2 * v4_base.time.attention, 1e-12);
  EXPECT_NEAR(v4_slow.time.vector, 2 * v4_base.time.vector, 1e-12);
  EXPECT_NEAR(v4_slow.time.launch, 2 * v4_base.time.launch, 1e-12);
  // GEMMs: the layers' scale, the LM head's not.
  EXPECT_GT(v4_slow.time.gemm, 1.5 * v4_base.time.gemm);
  EXPECT_LT(v4_slow.time.gemm, 2 * v4_base.time.gemm);
  EXPECT_DOUBLE_EQ(v4_slow.time.a2a_total, v4_base.time.a2a_total);
  // An FP8 attention layout on a device without FP8 is refused.
  ClusterSpec no_fp8 = synthetic_cluster(1000);
  EXPECT_FALSE(evaluate(m, no_fp8, j, fp8_attention).valid);
}

TEST(PlanTime, TheExpertGroupFoldsOverTensorParallelRanks) {
  // Expert TP is 1: an EP16 group takes 16 consecutive devices whatever the
  // TP, so on 8-device nodes it spans two nodes with TP1 and with TP2. A step
  // moves the same A2A bytes (TP2 has half the tokens per micro-batch and
  // twice the micro-batches); the domain split must not depend on TP.
  ModelShape m = synthetic_model();
  ClusterSpec c = synthetic_cluster(1000);
  c.efficiency.collective_half_bytes = 0;  // no message-size effect
  const Job j = job(32, 64, 1024);
  Layout tp1, tp2;
  tp1.recompute = tp2.recompute = Recompute::kNone;
  tp1.ep = tp2.ep = 16;
  tp2.tp = 2;
  tp1.overlap = tp2.overlap = false;
  const Estimate a = evaluate(m, c, j, tp1), b = evaluate(m, c, j, tp2);
  ASSERT_TRUE(a.valid && b.valid) << a.invalid_reason << b.invalid_reason;
  EXPECT_NEAR(b.time.a2a_total / a.time.a2a_total, 1.0, 0.05);
}

TEST(PlanTime, PartialOverlapCostsTheCollectivesShareOfTheSms) {
  ModelShape m = synthetic_model();
  ClusterSpec c = synthetic_cluster(1000);
  c.topology.scale_up_domain = 16;  // EP inside the scale-up domain
  c.topology.devices_per_node = 8;
  const Job j = job(16, 128, 1024);  // 8 micro-batches per pipeline
  Layout l;
  l.recompute = Recompute::kNone;
  l.ep = 16;
  l.pp = 1;
  l.overlap = l.ep_overlap = true;
  c.efficiency.overlap_compute_penalty = 0;
  const Estimate free = evaluate(m, c, j, l);
  c.efficiency.overlap_compute_penalty = 0.2;
  const Estimate stolen = evaluate(m, c, j, l);
  ASSERT_TRUE(free.valid && stolen.valid);
  const double md = static_cast<double>(free.micro_batches);
  const double a = free.time.a2a_total / md, compute = free.time.compute() / md;
  const double edge = std::min(1.0, 1.0 / md);
  // Steady state: the pair takes max(a, c + s·a); warm-up/cool-down: s·a/2.
  const double expected =
      (1 - edge) * std::max(0.0, compute + 0.2 * a - std::max(a, compute)) + edge * 0.2 * 0.5 * a;
  EXPECT_NEAR(stolen.time.overlap_penalty / md, expected, 1e-12);
  EXPECT_DOUBLE_EQ(free.time.overlap_penalty, 0);
  EXPECT_GT(stolen.time.step, free.time.step);
  ASSERT_LT(a, compute);  // the branch where compute covers the A2A
  // The other branch: an A2A much longer than the compute (a slow fabric)
  // costs itself in steady state, with no compute slow-down beyond it.
  ClusterSpec slow = c;
  slow.topology.scale_up_gbps = 0.05;
  const Estimate long_a2a = evaluate(m, slow, j, l);
  const double a2 = long_a2a.time.a2a_total / md, c2 = long_a2a.time.compute() / md;
  ASSERT_GT(a2, c2 * 1.5);
  const double exposed2 = (1 - edge) * (a2 - c2) + edge * 0.5 * a2;
  EXPECT_NEAR(long_a2a.time.a2a_exposed / md, exposed2, 1e-9 * a2);
  EXPECT_NEAR(long_a2a.time.overlap_penalty / md, edge * 0.2 * 0.5 * a2, 1e-9 * a2);
  // Only half of the A2A can run beside compute: the other half is exposed.
  c.efficiency.overlap_compute_penalty = 0;
  c.efficiency.ep_overlap_hidden = 0.5;
  const Estimate half = evaluate(m, c, j, l);
  const double steady_exposed = std::max(0.0, 0.5 * a - compute) + 0.5 * a;
  EXPECT_NEAR(half.time.a2a_exposed / md, (1 - edge) * steady_exposed + edge * 0.5 * a, 1e-12);
  EXPECT_GT(half.time.step, free.time.step);
}

TEST(PlanTime, SwitchesNeverMakeItSlowerWhenTheyShould) {
  ModelShape m = load_model_shape(model_path("deepseek-v4-pro"), 4096);
  ClusterSpec c = ClusterSpec::load(cluster_path("ascend-910c-cloudmatrix384"));
  Job j = job(256, 512, 4096);
  Layout base;
  base.pp = 8;
  base.ep = 32;
  base.schedule = Schedule::k1F1B;
  auto step = [&](const Layout& l) {
    Estimate e = evaluate(m, c, j, l);
    EXPECT_TRUE(e.valid) << e.invalid_reason;
    return e;
  };
  Layout no_overlap = base;
  no_overlap.overlap = no_overlap.ep_overlap = false;
  EXPECT_LE(step(base).time.step, step(no_overlap).time.step);
  EXPECT_LT(step(base).time.a2a_exposed, step(no_overlap).time.a2a_exposed);
  Layout unfused = base;
  unfused.fused_kernels = false;
  EXPECT_LT(step(base).time.step, step(unfused).time.step);
  // Recompute: less memory, more time.
  Layout none = base, sel = base, full = base;
  none.recompute = Recompute::kNone;
  sel.recompute = Recompute::kSelective;
  full.recompute = Recompute::kFull;
  EXPECT_LT(step(none).time.step, step(sel).time.step);
  EXPECT_LT(step(sel).time.step, step(full).time.step);
  EXPECT_GT(step(none).memory.activations, step(sel).memory.activations);
  EXPECT_GT(step(sel).memory.activations, step(full).memory.activations);
  // Offload: no optimizer states on the device, more time.
  Layout off = base;
  off.offload_optimizer = true;
  EXPECT_GT(step(off).time.step, step(base).time.step);
  EXPECT_LT(step(off).memory.total(), step(base).memory.total());
  // Schedules: interleaving and DualPipeV shrink the bubble.
  Layout inter = base, dpv = base;
  inter.schedule = Schedule::kInterleaved;
  inter.vpp = 2;
  dpv.schedule = Schedule::kDualPipeV;
  EXPECT_LT(step(inter).time.bubble, step(base).time.bubble);
  EXPECT_LT(step(dpv).time.bubble, step(base).time.bubble);
  // Naive placement sends EP traffic over RoCE.
  Layout naive = base;
  naive.topology_aware = false;
  EXPECT_GT(step(naive).time.a2a_total, step(base).time.a2a_total);
  // More micro-batches: the bubble is a smaller share of the step.
  Job bigger = j;
  bigger.global_batch = 2048;
  Estimate e_big = evaluate(m, c, bigger, base);
  EXPECT_LT(e_big.time.bubble / e_big.time.step, step(base).time.bubble / step(base).time.step);
  // Imbalanced routing is slower; rebalancing recovers most of it.
  Job skewed = j;
  skewed.expert_imbalance = 1.4;
  Layout rebalanced = base;
  rebalanced.expert_rebalancing = true;
  const double skew_step = evaluate(m, c, skewed, base).time.step;
  EXPECT_GT(skew_step, step(base).time.step);
  EXPECT_LT(evaluate(m, c, skewed, rebalanced).time.step, skew_step);
}

TEST(PlanTime, BubblesFollowTheScheduleFormulas) {
  ModelShape m = synthetic_model();
  for (int i = 0; i < 6; ++i) m.layers.push_back(m.layers[0]);  // 8 layers
  m.head_flops = 0;                                             // equal stages
  ClusterSpec c = synthetic_cluster(1000);
  Layout l;
  l.recompute = Recompute::kNone;
  l.pp = 4;
  const Job j = job(4, 8, 1024);  // DP 1, 8 micro-batches
  auto per_micro_batch = [&](const Estimate& e) {
    return (e.time.step - e.time.bubble - e.time.dp_exposed - e.time.optimizer -
            e.time.offload_exposed) /
           static_cast<double>(e.micro_batches);
  };
  Estimate f1b = evaluate(m, c, j, l);
  ASSERT_TRUE(f1b.valid) << f1b.invalid_reason;
  EXPECT_EQ(f1b.micro_batches, 8);
  EXPECT_NEAR(f1b.time.bubble, 3 * per_micro_batch(f1b), 1e-12);  // (PP-1)(F+B)
  l.schedule = Schedule::kInterleaved;
  l.vpp = 2;
  Estimate inter = evaluate(m, c, j, l);
  ASSERT_TRUE(inter.valid) << inter.invalid_reason;
  EXPECT_NEAR(inter.time.bubble, 3 * per_micro_batch(inter) / 2, 1e-12);  // (PP-1)(F+B)/V
  l.schedule = Schedule::kDualPipeV;
  l.vpp = 1;
  Estimate dpv = evaluate(m, c, j, l);
  ASSERT_TRUE(dpv.valid) << dpv.invalid_reason;
  // (P-1)(F/2 + 3B/4) - F/2 with B = 2F: F = per_mb / 3 -> (3 · 2F) - F/2 = 5.5 F.
  EXPECT_NEAR(dpv.time.bubble, 5.5 * per_micro_batch(dpv) / 3, 1e-9);
  EXPECT_LT(dpv.time.bubble, f1b.time.bubble);
  // Muon: Newton–Schulz costs optimizer time, its state is 8 bytes, not 12.
  Job muon = j;
  muon.optimizer = Optimizer::kMuon;
  l.schedule = Schedule::k1F1B;
  EXPECT_GT(evaluate(m, c, muon, l).time.optimizer, evaluate(m, c, j, l).time.optimizer);
}

TEST(PlanTime, MfuIsModelFlopsOverPeak) {
  ModelShape m = load_model_shape(model_path("deepseek-v4-flash"), 4096);
  ClusterSpec c = ClusterSpec::load(cluster_path("h200-nvlink"));
  Layout l;
  l.ep = 8;
  Estimate e = evaluate(m, c, job(8, 64, 4096), l);
  ASSERT_TRUE(e.valid);
  const double tokens = 64.0 * 4096;
  EXPECT_NEAR(e.tokens_per_s_per_device, tokens / e.time.step / 8, 1e-9);
  EXPECT_NEAR(e.mfu, m.model_flops_per_token * tokens / e.time.step / 8 / 989e12, 1e-12);
  EXPECT_GT(e.mfu, 0.05);
  EXPECT_LT(e.mfu, 0.75);
}

TEST(PlanTime, InvalidLayoutsSayWhy) {
  ModelShape m = synthetic_model();
  ClusterSpec c = synthetic_cluster(80);
  Layout l;
  l.ep = 3;
  EXPECT_FALSE(evaluate(m, c, job(8, 8, 1024), l).valid);
  l.ep = 1;
  l.pp = 3;
  Estimate e = evaluate(m, c, job(8, 8, 1024), l);
  EXPECT_FALSE(e.valid);
  EXPECT_FALSE(e.invalid_reason.empty());
  l.pp = 1;
  l.fp8 = true;  // synthetic device has no FP8
  EXPECT_FALSE(evaluate(m, c, job(8, 8, 1024), l).valid);
}

TEST(PlanPartition, NearEvenContiguousChunks) {
  std::vector<double> w(8, 1.0);
  EXPECT_EQ(balanced_partition(w, 4), (std::vector<size_t>{0, 2, 4, 6}));
  // A heavy last item (the LM head) gets a chunk of its own.
  std::vector<double> head = {1, 1, 1, 1, 1, 1, 3};
  EXPECT_EQ(balanced_partition(head, 3), (std::vector<size_t>{0, 3, 6}));
  // More parts than items: trailing empty chunks.
  EXPECT_EQ(balanced_partition({1, 1}, 3), (std::vector<size_t>{0, 1, 2}));
}

// ---- search ----

TEST(PlanSearch, FindsTheKnownBestLayoutOnASmallCluster) {
  // One node of 8 devices, 12 GiB each; 3.2B expert parameters. Below EP4 the
  // experts do not fit (ZeRO-1); EP8 holds fewer experts than EP4 and needs no
  // expert-gradient sync, so the best layout is EP8 with no pipeline, TP, CP,
  // recompute or offload, and with overlap.
  ModelShape m = synthetic_model();
  for (LayerShape& l : m.layers) l.expert_params = 1.6e9;
  ClusterSpec c = synthetic_cluster(12);
  SearchOptions o;
  o.top_k = 3;
  SearchResult r = search(m, c, job(8, 64, 1024), o);
  ASSERT_FALSE(r.best.empty());
  const Estimate& best = r.best.front();
  EXPECT_EQ(best.layout.ep, 8) << best.layout.describe();
  EXPECT_EQ(best.layout.pp, 1) << best.layout.describe();
  EXPECT_EQ(best.layout.tp, 1);
  EXPECT_EQ(best.layout.cp, 1);
  EXPECT_EQ(best.layout.recompute, Recompute::kNone);
  EXPECT_FALSE(best.layout.offload_optimizer);
  EXPECT_TRUE(best.layout.overlap);
  EXPECT_LE(r.best.size(), 3u);
  // It is the fastest fitting candidate.
  for (const Estimate& e : r.candidates) {
    if (e.memory.fits()) {
      EXPECT_GE(e.time.step, best.time.step * (1 - 1e-9));
    }
  }
  bool saw_ep4 = false;
  for (const Estimate& e : r.candidates) {
    const Layout& l = e.layout;
    if (l.tp != 1 || l.pp != 1 || l.cp != 1 || l.offload_optimizer || l.zero != 1) continue;
    if (l.ep < 4) {
      EXPECT_FALSE(e.memory.fits()) << l.describe();
    }
    if (l.ep == 4 && e.memory.fits()) saw_ep4 = true;
  }
  EXPECT_TRUE(saw_ep4);

  // Two such nodes behind a slow link: EP16 sends most tokens across it.
  c.topology.scale_out_gbps = 1;
  Layout l8 = best.layout, l16 = best.layout;
  l16.ep = 16;
  Estimate e8 = evaluate(m, c, job(16, 128, 1024), l8);
  Estimate e16 = evaluate(m, c, job(16, 128, 1024), l16);
  ASSERT_TRUE(e8.valid && e16.valid);
  EXPECT_GT(e16.time.a2a_total, 5 * e8.time.a2a_total);
}

// ---- calibration ----

TEST(PlanCalibrate, RecoversAKnownCurve) {
  GemmFit truth;
  truth.flops_per_s = 2e12;
  truth.bytes_per_s = 50e9;
  truth.launch_s = 3e-6;
  std::vector<GemmMeasurement> ms;
  for (double m : {4.0, 16.0, 64.0, 256.0, 1024.0})
    for (double nk : {256.0, 1024.0, 4096.0}) {
      GemmMeasurement s{m, nk, nk, 0, 2};
      s.seconds = truth.predict(s);
      ms.push_back(s);
    }
  GemmFit fit = fit_gemm_curve(ms);
  EXPECT_NEAR(fit.flops_per_s / truth.flops_per_s, 1, 0.02);
  EXPECT_NEAR(fit.bytes_per_s / truth.bytes_per_s, 1, 0.02);
  EXPECT_NEAR(fit.launch_s / truth.launch_s, 1, 0.05);
  EXPECT_LT(fit.rms_log_error, 0.01);
}

TEST(PlanCalibrate, MeasuresRealGemmsAndReadsFiles) {
  std::vector<GemmMeasurement> ms =
      measure_gemms({{8, 64, 64}, {64, 128, 128}, {128, 256, 256}}, false, 2);
  ASSERT_EQ(ms.size(), 3u);
  for (const GemmMeasurement& s : ms) EXPECT_GT(s.seconds, 0);
  EXPECT_LT(ms[0].seconds, ms[2].seconds);  // 16x fewer FLOPs... and smaller operands
  GemmFit fit = fit_gemm_curve(ms);
  EXPECT_GT(fit.flops_per_s, 0);
  test::TempDir dir;
  write_file_atomic(dir.file("m.json"), measurements_json(ms).dump());
  EXPECT_EQ(read_measurements(dir.file("m.json")).size(), 3u);
  write_file_atomic(dir.file("bad.json"), R"({"measurements": [{"m": 1, "n": 2}]})");
  try {
    read_measurements(dir.file("bad.json"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "measurements[0].k");
  }
}

TEST(PlanCluster, CurrentNvidiaSpecsGiveASourceForEveryDeviceFigure) {
  for (const char* name : {"h200-nvlink", "b200-hgx", "gb200-nvl72", "gb300-nvl72"}) {
    const ClusterSpec c = ClusterSpec::load(cluster_path(name));
    for (const std::string& field : ClusterSpec::field_paths()) {
      if (field.rfind("device.", 0) != 0 || field == "device.name" ||
          field == "device.vector_tflops")
        continue;
      EXPECT_NE(c.source_of(field), "no source given") << name << " " << field;
    }
    EXPECT_NE(c.source_of("efficiency.gemm.fp8_max"), "no source given") << name;
  }
  const ClusterSpec gb300 = ClusterSpec::load(cluster_path("gb300-nvl72"));
  EXPECT_DOUBLE_EQ(gb300.device.bf16_tflops, 2500);  // dense, not the sparse 5,000
  EXPECT_EQ(gb300.topology.scale_up_domain, 72);
  EXPECT_EQ(gb300.topology.devices_per_node, 4);
  EXPECT_DOUBLE_EQ(gb300.topology.scale_out_gbps, 100);  // ConnectX-8, 800 Gb/s
  EXPECT_NE(ClusterSpec::load(cluster_path("h100-ib")).source_of("device.bf16_tflops"),
            "no source given");
}

TEST(PlanCluster, UnknownKeysAndSourcesOfNoFieldAreErrors) {
  nlohmann::json j = ClusterSpec::load(cluster_path("h200-nvlink")).to_json();
  j["device"]["hbm_gb"] = 141;  // a typo of hbm_gib
  try {
    ClusterSpec::from_json(j, "c.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "device.hbm_gb");
    EXPECT_NE(std::string(e.what()).find("hbm_gib"), std::string::npos) << e.what();
  }
  j = ClusterSpec::load(cluster_path("h200-nvlink")).to_json();
  j["sources"]["device.bf16_tflop"] = "a datasheet";
  try {
    ClusterSpec::from_json(j, "c.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "sources.device.bf16_tflop");
  }
}

// ---- validation against published points ----

TEST(PlanValidation, ErrorSummaryIsTheMedianAndWorstOfOneRole) {
  std::vector<ValidationRow> rows(5);
  const double ratios[] = {1.1, 0.8, 1.05, 3.0, 0.97};
  const PointRole roles[] = {PointRole::kValidation, PointRole::kValidation, PointRole::kValidation,
                             PointRole::kCalibration, PointRole::kValidation};
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].ratio = ratios[i];
    rows[i].point.role = roles[i];
    rows[i].point.name = "p" + std::to_string(i);
  }
  const ErrorSummary v = summarize_errors(rows, PointRole::kValidation);
  EXPECT_EQ(v.points, 4u);
  EXPECT_NEAR(v.median, 0.075, 1e-12);  // errors 0.03, 0.05, 0.1, 0.2
  EXPECT_NEAR(v.worst, 0.2, 1e-12);
  EXPECT_EQ(v.worst_point, "p1");
  const ErrorSummary c = summarize_errors(rows, PointRole::kCalibration);
  EXPECT_EQ(c.points, 1u);
  EXPECT_NEAR(c.worst, 2.0, 1e-12);
}

TEST(PlanValidation, ALayoutOverMemoryIsNeverReportedAsAgreeing) {
  // The DeepSeek-V3 / H800 layout: within 20% of its figure, but the memory
  // model puts it over the H800's HBM (an error of the memory model).
  const std::vector<ValidationPoint> points = validation_points();
  const ValidationRow r = evaluate_point(points.front(), test::source_dir());
  EXPECT_TRUE(r.estimate.valid);
  EXPECT_LT(std::abs(r.ratio - 1), 0.2);
  EXPECT_FALSE(r.fits_memory);
  EXPECT_GT(r.estimate.memory.total(), r.estimate.memory.capacity);
  EXPECT_FALSE(r.within_20_percent);
  EXPECT_NE(format_validation({r}).find("DOES NOT FIT"), std::string::npos);
}

TEST(PlanValidation, CalibrationAndValidationPointsAreKeptApart) {
  const std::vector<ValidationPoint> points = validation_points();
  size_t calibration = 0, validation = 0;
  for (const ValidationPoint& p : points) {
    if (p.role == PointRole::kCalibration) {
      ++calibration;
      EXPECT_FALSE(p.sets.empty()) << p.name;  // states which knob it set
    } else {
      ++validation;
      EXPECT_TRUE(p.sets.empty()) << p.name;
    }
    EXPECT_FALSE(p.source.empty()) << p.name;
  }
  EXPECT_EQ(calibration, 9u);
  EXPECT_GE(validation, 11u);
  const std::string text = format_validation(run_validation(test::source_dir()));
  EXPECT_LT(text.find("Calibration points"), text.find("Validation points"));
  // Every varied assumption has its default among the values.
  std::map<std::string, int> defaults;
  for (const SensitivityRow& r : run_sensitivity(test::source_dir()))
    if (!r.value.empty() && r.value[0] == '*') ++defaults[r.knob];
  for (const char* knob :
       {"V4-Pro routing imbalance", "V4-Pro global batch", "end-to-end goodput",
        "FP8 attention speedup", "910C V4 compute factor", "H100 ep_overlap_hidden"})
    EXPECT_GT(defaults[knob], 0) << knob;
  // Every cluster-file assumption gets a sensitivity row; at scale 1 each
  // reproduces the validation summary exactly.
  const ErrorSummary base =
      summarize_errors(run_validation(test::source_dir()), PointRole::kValidation);
  const std::vector<AssumptionRow> same = run_assumption_sensitivity(test::source_dir(), {1.0});
  ASSERT_FALSE(same.empty());
  bool fp8_max_varied = false;
  const std::vector<AblationRow> ablation = run_ablation(test::source_dir());
  const double speedup = ablation.back().estimate.mfu / ablation.front().estimate.mfu;
  for (const AssumptionRow& r : same) {
    ASSERT_EQ(r.validation.size(), 1u);
    ASSERT_EQ(r.ablation_speedup.size(), 1u);
    EXPECT_NEAR(r.ablation_speedup[0], speedup, 1e-12) << r.field;
    EXPECT_DOUBLE_EQ(r.validation[0].median, base.median) << r.field;
    EXPECT_DOUBLE_EQ(r.validation[0].worst, base.worst) << r.field;
    fp8_max_varied |= r.field == "efficiency.gemm.fp8_max";
  }
  EXPECT_TRUE(fp8_max_varied);
  // A scale that leaves a field's range is not tried, and says so.
  bool share_out_of_range = false;
  for (const AssumptionRow& r : run_assumption_sensitivity(test::source_dir(), {5.0}))
    if (r.field == "efficiency.ep_overlap_hidden") share_out_of_range = !r.in_range[0];
  EXPECT_TRUE(share_out_of_range);
  // No figure of a shipped cluster file is left without a source.
  for (const char* name : {"ascend-910c-cloudmatrix384", "h800-ib", "h100-ib", "h200-nvlink",
                           "b200-hgx", "gb200-nvl72", "gb300-nvl72"}) {
    const ClusterSpec c = ClusterSpec::load(cluster_path(name));
    for (const std::string& field : ClusterSpec::field_paths()) {
      if (field == "name" || field == "device.name") continue;
      EXPECT_NE(c.source_of(field), "no source given") << name << " " << field;
    }
  }
}

TEST(PlanValidation, PublishedPointsAndAblation) {
  std::vector<ValidationRow> all = run_validation(test::source_dir());
  // The calibration points, in order (the validation points are reported, with
  // their errors, by `trex plan validate`; docs/planner.md).
  std::vector<ValidationRow> rows;
  for (const ValidationRow& r : all)
    if (r.point.role == PointRole::kCalibration) rows.push_back(r);
  ASSERT_EQ(rows.size(), 9u);
  for (const ValidationRow& r : all) EXPECT_TRUE(r.estimate.valid) << r.point.name;
  // The calibrated knobs in the cluster files (sustained_share, v4_compute_factor)
  // still reproduce the points that set them: recalibrate when a cost changes.
  for (size_t i = 5; i < 8; ++i) EXPECT_NEAR(rows[i].ratio, 1.0, 0.01) << rows[i].point.name;
  // DeepSeek-V3 / H800: the published figure is wall-clock GPU-hours per
  // trillion tokens, evaluated at the end-to-end goodput; the others are
  // per-iteration logs, evaluated at steady state (docs/planner.md).
  EXPECT_TRUE(rows[0].point.end_to_end);
  EXPECT_DOUBLE_EQ(rows[0].estimate.goodput, kEndToEndGoodput);
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_FALSE(rows[i].point.end_to_end) << rows[i].point.name;
    EXPECT_DOUBLE_EQ(rows[i].estimate.goodput, 1.0) << rows[i].point.name;
  }
  // Within 20% by construction (they set knobs); the H800 point's layout is
  // over memory in the model, so it never counts as agreeing.
  EXPECT_FALSE(rows[0].within_20_percent);
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_TRUE(rows[i].within_20_percent) << rows[i].point.name << ": " << rows[i].ratio;
  }
  // The planner's measured accuracy on the points never used to set anything
  // (issue target: median within 10%, worst within 20%): a cost change that
  // breaks it must be re-validated, not waved through.
  const ErrorSummary validation = summarize_errors(all, PointRole::kValidation);
  EXPECT_GE(validation.points, 11u);
  EXPECT_LE(validation.median, 0.10);
  EXPECT_LE(validation.worst, 0.20) << validation.worst_point;
  std::vector<AblationRow> ab = run_ablation(test::source_dir());
  ASSERT_EQ(ab.size(), 4u);
  EXPECT_DOUBLE_EQ(ab.front().estimate.mfu, rows[3].estimate.mfu);
  EXPECT_DOUBLE_EQ(ab.back().estimate.mfu, rows[4].estimate.mfu);
  const double total = ab.back().estimate.mfu / ab.front().estimate.mfu;
  EXPECT_GT(total, 2.93 * 0.8);
  EXPECT_LT(total, 2.93 * 1.2);
  double shares = 0;
  for (size_t i = 1; i < ab.size(); ++i) {
    EXPECT_GT(ab[i].speedup_vs_previous, 1.0) << ab[i].step;
    shares += ab[i].share_of_gain;
  }
  EXPECT_NEAR(shares, 1.0, 1e-12);
  // Both V4 layouts fit in a 64 GiB die.
  EXPECT_TRUE(rows[3].estimate.memory.fits());
  EXPECT_TRUE(rows[4].estimate.memory.fits());
}

TEST(PlanTime, GoodputScalesThroughputButNotTheStep) {
  // Whole-run accounting: the same steps, a `goodput` share of the wall clock.
  const ModelShape model = load_model_shape(model_path("deepseek-v3"), 4096);
  const ClusterSpec cluster = ClusterSpec::load(cluster_path("h800-ib"));
  Job job = Job::of(2048, 15360, 4096);
  Layout l;
  l.pp = 16, l.ep = 64, l.schedule = Schedule::kDualPipe, l.fp8 = true;
  const Estimate steady = evaluate(model, cluster, job, l);
  job.goodput = 0.8;
  const Estimate wall = evaluate(model, cluster, job, l);
  ASSERT_TRUE(steady.valid && wall.valid);
  EXPECT_DOUBLE_EQ(wall.time.step, steady.time.step);
  EXPECT_DOUBLE_EQ(wall.memory.total(), steady.memory.total());
  EXPECT_NEAR(wall.mfu, 0.8 * steady.mfu, 1e-12);
  EXPECT_NEAR(wall.tokens_per_s_per_device, 0.8 * steady.tokens_per_s_per_device, 1e-9);
  EXPECT_NEAR(wall.model_tflops_per_device, 0.8 * steady.model_tflops_per_device, 1e-9);
  job.goodput = 0;
  EXPECT_THROW(evaluate(model, cluster, job, l), Error);
  job.goodput = 1.5;
  EXPECT_THROW(evaluate(model, cluster, job, l), Error);
}

// ---- CLI ----

using test::CliRun;
using test::run_trex;

TEST(PlanCli, SearchExplainSvgAndErrors) {
  test::TempDir dir;
  CliRun r = run_trex("plan --model " + model_path("deepseek-v4-flash") + " --cluster " +
                      cluster_path("h200-nvlink") +
                      " --devices 64 --global-batch 256 --seq 4096 --top 3 --explain --svg " +
                      dir.file("c.svg") + " --json " + dir.file("best.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("MFU"), std::string::npos);
  EXPECT_NE(r.output.find("pipeline bubble"), std::string::npos);
  std::string svg = read_file(dir.file("c.svg"));
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  auto best = nlohmann::json::parse(read_file(dir.file("best.json")));
  ASSERT_EQ(best.size(), 3u);
  EXPECT_GE(best[0]["mfu"].get<double>(), best[1]["mfu"].get<double>());

  r = run_trex("plan --model " + model_path("deepseek-v3") + " --cluster " +
               cluster_path("h800-ib") +
               " --devices 2048 --global-batch 15360 --seq 4096 --layout "
               "tp1,pp16,ep64,dualpipe,selective,zero1,fp8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dualpipe"), std::string::npos);

  r = run_trex("plan --model " + model_path("deepseek-v3") + " --cluster " +
               cluster_path("h800-ib") + " --devices 16 --global-batch 16 --seq 4096 --layout pp3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--layout"), std::string::npos);
  r = run_trex("plan --model " + model_path("deepseek-v3") +
               " --cluster /nonexistent.json "
               "--devices 16 --global-batch 16 --seq 4096");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/nonexistent.json"), std::string::npos);

  r = run_trex("plan --model " + model_path("deepseek-v3") + " --cluster " +
               cluster_path("h800-ib") +
               " --devices 2048 --global-batch 15360 --seq 4096 --goodput 0 --layout pp16");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--goodput"), std::string::npos);

  // bf16 moments and MXFP4 experts: the same layout needs less memory; bad names are refused.
  const std::string v4 = "plan --model " + model_path("deepseek-v4-flash") + " --cluster " +
                         cluster_path("h200-nvlink") +
                         " --devices 64 --global-batch 256 --seq 4096 --layout pp4,ep16,zero1 ";
  auto total_gib = [](const std::string& out) {  // layout #1's row: memory, time, MFU
    const size_t at = out.find("\n1 ");
    EXPECT_NE(at, std::string::npos) << out;
    return out.substr(at, 100);
  };
  const CliRun plain = run_trex(v4);
  const CliRun lean = run_trex(v4 + "--moment-dtype bf16 --expert-weights mxfp4");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(lean.exit_code, 0) << lean.output;
  EXPECT_NE(lean.output.find("routed-expert weights mxfp4"), std::string::npos) << lean.output;
  EXPECT_NE(total_gib(plain.output), total_gib(lean.output));
  r = run_trex(v4 + "--expert-weights int4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("expert-weights"), std::string::npos) << r.output;
  r = run_trex(v4 + "--moment-dtype fp8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--moment-dtype"), std::string::npos) << r.output;

  r = run_trex("plan validate --root " + test::source_dir());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kernels/memory"), std::string::npos);

  r = run_trex("plan calibrate --repeats 1 --cluster " + cluster_path("h200-nvlink") + " --out " +
               dir.file("cal.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ClusterSpec calibrated = ClusterSpec::load(dir.file("cal.json"));
  EXPECT_GT(calibrated.efficiency.gemm.max, 0);
}

}  // namespace
}  // namespace trex::plan
