// Single-process pieces of distributed training: the `parallel` run-config
// section, the world-size check, the ZeRO partition and sharded optimizer, the
// gradient reducer's bucketing and the model's gradients-ready hook.
// (Multi-rank runs are in tests/mpi/dp_test.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "model/expert_maps.hpp"
#include "test_paths.hpp"
#include "trainer_fixtures.hpp"
#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"
#include "trex/model/activation_memory.hpp"
#include "trex/model/model.hpp"
#include "trex/model/page_buffer.hpp"
#include "trex/parallel/expert_shard.hpp"
#include "trex/parallel/grad_reducer.hpp"
#include "trex/parallel/pending.hpp"
#include "trex/parallel/pipeline.hpp"
#include "trex/train/optim/optimizer.hpp"
#include "trex/train/state_accounting.hpp"
#include "trex/train/trainer.hpp"

namespace {

using trex::parallel::OptimizerShard;
using trex::test::TempDir;
using trex::train::DataMode;
using trex::train::Optimizer;
using trex::train::RunConfig;

nlohmann::json minimal_config() {
  return nlohmann::json::parse(R"({
    "model": {"config": "tiny.json"}, "tokenizer": "tokenizer.json",
    "data": {"train": "train.jsonl"}, "micro_batch": 1, "global_batch": 8, "steps": 2
  })");
}

std::string error_of(const nlohmann::json& j) {
  try {
    RunConfig::from_json(j, "run.json", "/base");
  } catch (const trex::Error& e) {
    return e.what();
  }
  return "";
}

trex::model::ModelConfig tiny_model_config() {
  return trex::model::ModelConfig::load(trex::test::source_dir() + "/configs/models/tiny-v4.json");
}

TEST(TrainParallelConfig, ParsesRoundTripsAndDefaults) {
  nlohmann::json j = minimal_config();
  const RunConfig defaults = RunConfig::from_json(j, "run.json", "/base");
  EXPECT_EQ(defaults.parallel.dp, 1);
  EXPECT_EQ(defaults.parallel.zero, 0);
  EXPECT_TRUE(defaults.parallel.overlap_grad_reduce);
  j["parallel"] = {{"dp", 2},
                   {"ep", 2},
                   {"pp", 2},
                   {"pipeline_schedule", "dualpipev"},
                   {"pipeline_layers", {1, 1, 2, 0}},
                   {"zero", 2},
                   {"bucket_mb", 0.5},
                   {"overlap_grad_reduce", false},
                   {"ep_overlap", false},
                   {"expert_placement", "map.json"}};
  j["global_batch"] = 16;  // DualPipeV: 2 x pp micro-batches per pipeline
  const RunConfig c = RunConfig::from_json(j, "run.json", "/base");
  EXPECT_EQ(c.parallel.dp, 2);
  EXPECT_EQ(c.parallel.ep, 2);
  EXPECT_EQ(c.parallel.pp, 2);
  EXPECT_EQ(c.parallel.world_size(), 8);
  EXPECT_EQ(c.parallel.data_size(), 4);
  EXPECT_EQ(c.parallel.pipeline_schedule, trex::parallel::PipelineSchedule::kDualPipeV);
  EXPECT_EQ(c.parallel.pipeline_layers, (std::vector<int64_t>{1, 1, 2, 0}));
  EXPECT_EQ(c.parallel.zero, 2);
  EXPECT_DOUBLE_EQ(c.parallel.bucket_mb, 0.5);
  EXPECT_FALSE(c.parallel.overlap_grad_reduce);
  EXPECT_FALSE(c.parallel.ep_overlap);
  EXPECT_EQ(c.parallel.expert_placement, "/base/map.json");
  EXPECT_EQ(RunConfig::from_json(c.to_json(), "again.json").to_json(), c.to_json());
  j["global_batch"] = 8;  // 2 micro-batches per pipeline
  try {
    RunConfig::from_json(j, "run.json", "/base");
    FAIL() << "expected an error";
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.field_name(), "parallel.pipeline_schedule");
  }
}

TEST(TrainParallelConfig, ErrorsNameTheParallelKey) {
  auto with = [](nlohmann::json parallel) {
    nlohmann::json j = minimal_config();
    j["parallel"] = std::move(parallel);
    return error_of(j);
  };
  EXPECT_NE(with({{"zero", 3}}).find("parallel.zero"), std::string::npos);
  EXPECT_NE(with({{"dp", 0}}).find("parallel.dp"), std::string::npos);
  EXPECT_NE(with({{"pp", -1}}).find("parallel.pp"), std::string::npos);
  EXPECT_NE(with({{"bucket_mb", 0}}).find("parallel.bucket_mb"), std::string::npos);
  EXPECT_NE(with({{"pipeline_schedule", "gpipe"}}).find("parallel.pipeline_schedule"),
            std::string::npos);
  EXPECT_NE(with({{"overlap", true}}).find("parallel.overlap"), std::string::npos);
  // 1F1B with pp = 2 has 2 chunks; a negative count is out of range.
  const std::string chunks = with({{"pp", 2}, {"pipeline_layers", {1, 1, 2}}});
  EXPECT_NE(chunks.find("parallel.pipeline_layers"), std::string::npos) << chunks;
  EXPECT_NE(chunks.find("the pipeline has 2"), std::string::npos) << chunks;
  EXPECT_NE(with({{"pp", 2}, {"pipeline_layers", {3, -1}}}).find("pipeline_layers"),
            std::string::npos);
  // Whole checkpoints gather the model on one rank: not with pipeline stages.
  nlohmann::json whole = minimal_config();
  whole["parallel"] = {{"pp", 2}};
  whole["checkpoint_format"] = "whole";
  EXPECT_NE(error_of(whole).find("checkpoint_format"), std::string::npos) << error_of(whole);
  // 8 micro-batches cannot be split evenly over dp·ep = 3 ranks.
  const std::string uneven = with({{"dp", 3}});
  EXPECT_NE(uneven.find("parallel.dp"), std::string::npos) << uneven;
  EXPECT_NE(uneven.find("multiple of parallel.dp x parallel.ep = 3"), std::string::npos) << uneven;
  EXPECT_EQ(with({{"dp", 2}, {"ep", 2}}), "");
}

// The dry-run accounting from a config alone: the whole model on one rank;
// pipeline stages add up to it once (plus the 1F1B head's tied embedding
// copy); ZeRO-1 splits the moments of a layout over its data ranks exactly.
TEST(TrainStateAccounting, LayoutsAddUpToTheWholeModel) {
  TempDir dir;
  trex::test::write_tiny_training_data(dir.path());
  RunConfig c = trex::test::tiny_run_config(dir.path(), DataMode::kCpt);
  c.global_batch = 8;
  const trex::model::ModelConfig m = tiny_model_config();
  const int64_t whole = trex::parallel::total_numel(trex::model::parameter_specs(m)) * 4;
  const trex::train::StateAccount one = trex::train::account_state(c, m);
  ASSERT_EQ(one.roles.size(), 1u);
  EXPECT_EQ(one.roles[0].params, whole);
  EXPECT_EQ(one.total_parameters * 4, whole);
  const int64_t all_moments = one.roles[0].moments_max;
  EXPECT_EQ(one.roles[0].moments_min, all_moments);
  EXPECT_LT(all_moments, 2 * whole);  // Muon tensors keep one moment
  EXPECT_GT(all_moments, whole);      // AdamW tensors two

  c.parallel.pp = 2;
  const trex::train::StateAccount pp2 = trex::train::account_state(c, m);
  ASSERT_EQ(pp2.roles.size(), 2u);
  const int64_t embed = m.vocab_size * m.hidden_size * 4;
  EXPECT_EQ(pp2.roles[0].params + pp2.roles[1].params - embed, whole);
  EXPECT_EQ(pp2.largest().total_max(),
            std::max(pp2.roles[0].total_max(), pp2.roles[1].total_max()));

  c.parallel.pp = 1;
  c.parallel.dp = 2;
  c.parallel.zero = 1;
  const trex::train::RankState r0 = trex::train::state_of_rank(c, m, 0);
  const trex::train::RankState r1 = trex::train::state_of_rank(c, m, 1);
  EXPECT_EQ(r0.params, whole);
  EXPECT_EQ(r0.moments + r1.moments, all_moments);
  EXPECT_GT(r0.moments, 0);
  EXPECT_GT(r1.moments, 0);
  EXPECT_EQ(r0.master + r1.master, 0);
  // param_dtype = "bf16": each data rank adds the fp32 master of its ranges,
  // which together cover the whole model once.
  c.optimizer.master_weights = true;
  const trex::train::RankState m0 = trex::train::state_of_rank(c, m, 0);
  const trex::train::RankState m1 = trex::train::state_of_rank(c, m, 1);
  EXPECT_EQ(m0.master + m1.master, whole);
  EXPECT_GT(m0.master, 0);
  // ... and stores 2 bytes per trained value (the router biases 4), plus the
  // fp32 weights a pass decodes: the globals but the embedding (its rows are
  // gathered from bf16) and the largest block.
  int64_t not_trained = 0, globals = 0;
  std::map<int64_t, int64_t> per_block;
  for (const trex::model::ParamSpec& spec : trex::model::parameter_specs(m)) {
    if (spec.group == trex::model::OptimizerGroup::kNotTrained) {
      not_trained += spec.numel();
      continue;
    }
    if (spec.name != "embed.weight")
      (spec.layer < 0 ? globals : per_block[spec.layer]) += spec.numel();
  }
  int64_t largest_block = 0;
  for (const auto& [layer, numel] : per_block) largest_block = std::max(largest_block, numel);
  EXPECT_GT(not_trained, 0);
  EXPECT_EQ(m0.params, whole / 2 + not_trained * 2);
  EXPECT_EQ(m0.decoded, (globals + largest_block) * 4);
  EXPECT_EQ(r0.decoded, 0);
  EXPECT_EQ(m0.total(), r0.total() - r0.params + m0.params + m0.decoded + m0.master);
  const trex::train::StateAccount with_master = trex::train::account_state(c, m);
  EXPECT_EQ(with_master.roles[0].master, std::max(m0.master, m1.master));
  const nlohmann::json as_json =
      nlohmann::json::parse(trex::train::state_account_json(with_master, c));
  EXPECT_EQ(as_json["roles"][0]["master"].get<int64_t>(), with_master.roles[0].master);
  EXPECT_EQ(as_json["param_dtype"], "bf16");
  EXPECT_EQ(as_json["parameter_bytes"], 2);
  EXPECT_EQ(as_json["roles"][0]["decoded"].get<int64_t>(), m0.decoded);
  c.optimizer.master_weights = false;
  c.optimizer.moment_dtype = trex::train::MomentDType::kBF16;
  EXPECT_EQ(trex::train::state_of_rank(c, m, 0).moments * 2, r0.moments);
  EXPECT_THROW(trex::train::state_of_rank(c, m, 2), trex::Error);
  const std::string table = trex::train::format_state_account(trex::train::account_state(c, m), c);
  EXPECT_NE(table.find("DP=2 x EP=1 x PP=1, ZeRO-1"), std::string::npos) << table;
  EXPECT_NE(table.find("activations: the cached micro-batches"), std::string::npos) << table;

  // The reduction's staging is max_in_flight_buckets buckets (the whole
  // buffer without a bound); the micro-batches accumulate in the gradient
  // buffer itself, so several per rank cost no second buffer.
  c.parallel.bucket_mb = 0.01;
  const int64_t bucket = static_cast<int64_t>(0.01 * 1024 * 1024);
  ASSERT_GT(trex::train::account_state(c, m).micro_batches_per_rank, 1);
  EXPECT_EQ(trex::train::account_state(c, m).roles[0].comm, 4 * bucket);
  c.parallel.max_in_flight_buckets = 0;
  EXPECT_EQ(trex::train::account_state(c, m).roles[0].comm, whole);
  c.parallel.max_in_flight_buckets = 4;
  // ZeRO-2: the buffer keeps what backward wrote and has not handed over
  // (the globals, the largest layer) and the buckets in flight; the shard
  // accumulator and the staging are communication buffers. Of the
  // embedding's gradient only the pages of the rows a micro-batch can touch
  // (its tokens and the MTP blocks' next tokens, each row's pages plus one
  // it may straddle) count.
  c.parallel.zero = 2;
  const auto zero2_gradient_bytes = [&](const trex::model::ModelConfig& model) {
    std::map<int64_t, int64_t> by_layer;
    for (const auto& spec : trex::model::parameter_specs(model))
      by_layer[spec.layer] += spec.numel() * 4;
    int64_t largest_layer = 0;
    for (const auto& [layer, bytes] : by_layer)
      if (layer >= 0) largest_layer = std::max(largest_layer, bytes);
    const int64_t page = static_cast<int64_t>(trex::model::page_memory::page_size());
    const int64_t embedding = model.vocab_size * model.hidden_size * 4;
    const int64_t rows = c.micro_batch * c.seq_len * (1 + model.num_nextn_predict_layers);
    const int64_t touched =
        std::min(embedding, rows * ((model.hidden_size * 4 + page - 1) / page + 1) * page);
    return std::pair{by_layer[-1] - embedding + touched + largest_layer + 4 * bucket,
                     embedding - touched};
  };
  const trex::train::StateAccount zero2 = trex::train::account_state(c, m);
  EXPECT_EQ(zero2.roles[0].grads, zero2_gradient_bytes(m).first);
  // A vocabulary much larger than a micro-batch's tokens: most of the
  // embedding's gradient is never written, and not counted.
  trex::model::ModelConfig large_vocabulary = m;
  large_vocabulary.vocab_size = 1 << 16;
  const auto [expected, untouched] = zero2_gradient_bytes(large_vocabulary);
  EXPECT_GT(untouched, large_vocabulary.vocab_size * large_vocabulary.hidden_size * 4 * 9 / 10);
  EXPECT_EQ(trex::train::account_state(c, large_vocabulary).roles[0].grads, expected);
  EXPECT_LT(zero2.roles[0].grads, whole / 2);
  const auto partition =
      trex::parallel::partition_for_zero_by_role(trex::model::parameter_specs(m), 2, 2);
  int64_t larger_shard = 0;
  for (int d = 0; d < 2; ++d) {
    int64_t shard = 0;
    for (const OptimizerShard& r : partition.ranges(d, d)) shard += r.size() * 4;
    larger_shard = std::max(larger_shard, shard);
  }
  EXPECT_EQ(zero2.roles[0].comm, 4 * bucket + larger_shard);
  // With a pipeline the whole buffer stays resident.
  c.parallel.dp = 1;
  c.parallel.pp = 2;
  for (const auto& role : trex::train::account_state(c, m).roles)
    EXPECT_EQ(role.grads, role.params);
}

// Activations and buffers per role: one micro-batch at a time without a
// pipeline (its cache plus the work set); under 1F1B stage s keeps pp - s micro-batches
// in flight, and the accounting walks the schedule's own programs.
TEST(TrainStateAccounting, ActivationsFollowThePipelineSchedule) {
  TempDir dir;
  trex::test::write_tiny_training_data(dir.path());
  RunConfig c = trex::test::tiny_run_config(dir.path(), DataMode::kCpt);
  c.global_batch = 8;
  c.micro_batch = 1;
  c.seq_len = 32;
  const trex::model::ModelConfig m = tiny_model_config();
  trex::model::ActivationShape shape;
  shape.sequences = 1;
  shape.seq_len = 32;
  shape.mtp_loss = c.mtp_weight != 0.0;
  const trex::model::StageSpec whole = trex::model::whole_model_stage(m);
  const trex::train::StateAccount one = trex::train::account_state(c, m);
  ASSERT_EQ(one.roles.size(), 1u);
  EXPECT_EQ(one.micro_batches_per_rank, 8);
  EXPECT_EQ(one.roles[0].in_flight, 1);
  EXPECT_EQ(one.roles[0].activation_caches,
            trex::model::stage_cache_bytes(m, whole, shape).total());
  shape.local_experts = m.n_routed_experts;
  EXPECT_EQ(
      one.roles[0].activation_buffers,
      one.roles[0].activation_caches + trex::model::transient_activation_bytes(m, whole, shape));
  EXPECT_EQ(one.roles[0].activations, one.roles[0].activation_buffers +
                                          trex::model::kernel_work_bytes(m, whole, shape) +
                                          trex::kernels::default_backend().retained_bytes_limit());
  EXPECT_EQ(one.roles[0].comm, 0);  // one rank: nothing reduced, no second gradient buffer

  c.parallel.pp = 2;
  const trex::train::StateAccount pp2 = trex::train::account_state(c, m);
  ASSERT_EQ(pp2.roles.size(), 2u);
  EXPECT_EQ(pp2.roles[0].in_flight, 2);
  EXPECT_EQ(pp2.roles[1].in_flight, 1);
  const std::vector<trex::model::StageSpec> chunks =
      trex::parallel::chunks_of_rank(c.parallel.pipeline_schedule, 2, m.num_hidden_layers, 0);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(pp2.roles[0].activation_caches,
            2 * trex::model::stage_cache_bytes(m, chunks[0], shape).total());
  c.recompute = trex::model::ActivationRecompute::kFull;
  const trex::train::StateAccount full = trex::train::account_state(c, m);
  EXPECT_LT(full.roles[0].activation_caches, pp2.roles[0].activation_caches / 2);

  const nlohmann::json json = nlohmann::json::parse(trex::train::state_account_json(full, c));
  EXPECT_EQ(json["total_parameters"], full.total_parameters);
  ASSERT_EQ(json["roles"].size(), 2u);
  for (const auto& role : json["roles"]) {
    int64_t sum = 0;
    for (const char* key :
         {"params", "grads", "master", "moments", "comm", "activations", "optimizer_work"})
      sum += role[key].get<int64_t>();
    EXPECT_EQ(role["total"].get<int64_t>(), sum);
  }
  EXPECT_EQ(json["roles"][0]["name"], "stage 0 / EP rank 0");
  EXPECT_EQ(json["roles"][0]["activation_buffers"], full.roles[0].activation_buffers);
}

TEST(TrainParallel, WorldSizeMismatchSaysHowToLaunch) {
  TempDir dir;
  trex::test::write_tiny_training_data(dir.path());
  RunConfig c = trex::test::tiny_run_config(dir.path(), DataMode::kCpt);
  c.parallel.dp = 2;
  try {
    trex::train::Trainer t(
        c,
        {.quiet = true, .write_metrics = false, .world = trex::parallel::make_self_communicator()});
    FAIL() << "no error";
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.field_name(), "parallel");
    EXPECT_NE(std::string(e.what()).find("mpirun -np 2 trex train"), std::string::npos) << e.what();
  }
}

TEST(TrainZero, PartitionIsContiguousWholeSpecsAndBalanced) {
  const auto specs = trex::model::parameter_specs(tiny_model_config());
  int64_t total = 0, largest = 0;
  for (const auto& s : specs) {
    total += s.numel();
    largest = std::max(largest, s.numel());
  }
  for (int64_t parts : {1, 2, 3, 4, 7, 8}) {
    const auto shards = trex::parallel::partition_for_zero(specs, parts);
    ASSERT_EQ(static_cast<int64_t>(shards.size()), parts);
    EXPECT_EQ(shards.front().first_spec, 0u);
    EXPECT_EQ(shards.front().begin, 0);
    EXPECT_EQ(shards.back().end_spec, specs.size());
    EXPECT_EQ(shards.back().end, total);
    for (size_t r = 0; r < shards.size(); ++r) {
      if (r > 0) {
        EXPECT_EQ(shards[r].first_spec, shards[r - 1].end_spec);
        EXPECT_EQ(shards[r].begin, shards[r - 1].end);
      }
      // Within one tensor of the ideal split.
      EXPECT_LE(shards[r].size(), total / parts + 2 * largest) << parts << " parts, shard " << r;
    }
  }
  EXPECT_EQ(trex::parallel::partition_for_zero(specs, 1)[0], trex::parallel::whole_shard(specs));
  // More parts than tensors: some shards are empty, none overlap.
  const auto many =
      trex::parallel::partition_for_zero(specs, static_cast<int64_t>(specs.size()) + 5);
  EXPECT_EQ(many.back().end, total);
  EXPECT_THROW(trex::parallel::partition_for_zero(specs, 0), trex::Error);
}

// The tiny model with random weights (seed `model_seed`) and random
// gradients of scale 0.01 (seed `grad_seed`): an optimizer step's input.
trex::model::Model<float> tiny_model_with_random_grads(uint64_t model_seed, uint64_t grad_seed) {
  trex::model::Model<float> model(tiny_model_config());
  model.init_random(model_seed);
  trex::Rng rng(grad_seed);
  for (float& g : model.params().grads()) g = static_cast<float>(0.01 * rng.normal());
  return model;
}

// Every shard's update equals the unsharded update on its range, bit for bit,
// and the state written from the gathered shards loads back into any layout.
TEST(TrainZero, ShardedOptimizerEqualsWholeOptimizerOnItsRange) {
  trex::model::Model<float> model = tiny_model_with_random_grads(3, 11);
  auto& params = model.params();
  trex::train::OptimizerOptions options;
  const auto shards = trex::parallel::partition_for_zero(params.specs(), 3);

  trex::model::ParamStore<float> whole_params = params;
  Optimizer whole(whole_params, options);
  for (int step = 0; step < 2; ++step) whole.step(whole_params, 1e-2);

  std::vector<float> first(static_cast<size_t>(params.size())),
      second(static_cast<size_t>(params.size()));
  for (const OptimizerShard& shard : shards) {
    trex::model::ParamStore<float> mine = params;
    Optimizer sharded(mine, options, shard);
    EXPECT_TRUE(sharded.sharded());
    EXPECT_EQ(static_cast<int64_t>(sharded.first_moment().size()), shard.size());
    for (int step = 0; step < 2; ++step) sharded.step(mine, 1e-2);
    const size_t b = static_cast<size_t>(shard.begin), n = static_cast<size_t>(shard.size());
    EXPECT_EQ(
        std::memcmp(mine.values().data() + b, whole_params.values().data() + b, n * sizeof(float)),
        0);
    // Outside the shard nothing moved.
    EXPECT_EQ(std::memcmp(mine.values().data(), params.values().data(), b * sizeof(float)), 0);
    const std::vector<float> shard_first = sharded.first_moment();
    const std::vector<float> shard_second = sharded.second_moment();
    std::copy(shard_first.begin(), shard_first.end(), first.begin() + b);
    std::copy(shard_second.begin(), shard_second.end(), second.begin() + b);
    EXPECT_THROW(sharded.save_state("/nonexistent/x.safetensors"), trex::Error);
  }
  EXPECT_EQ(first, whole.first_moment());
  EXPECT_EQ(second, whole.second_moment());

  // Gathered state -> file -> another partition (2 shards) and the unsharded layout.
  TempDir dir;
  const std::string path = dir.file("optimizer.safetensors");
  Optimizer writer(params, options, shards[1]);
  writer.set_state(2, first, second);  // whole-model buffers: keeps its slice
  writer.save_state(path, first, second);
  for (const OptimizerShard& shard : trex::parallel::partition_for_zero(params.specs(), 2)) {
    Optimizer reader(params, options, shard);
    reader.load_state(path);
    EXPECT_EQ(reader.step_count(), 2);
    const std::vector<float> read_first = reader.first_moment();
    const std::vector<float> read_second = reader.second_moment();
    EXPECT_TRUE(std::equal(read_first.begin(), read_first.end(), first.begin() + shard.begin));
    EXPECT_TRUE(std::equal(read_second.begin(), read_second.end(), second.begin() + shard.begin));
  }
  Optimizer unsharded(params, options);
  unsharded.load_state(path);
  EXPECT_EQ(unsharded.first_moment(), whole.first_moment());
}

// Buckets cover the buffer exactly once, layer by layer, capped in size; a
// group handed over early is not prepared again; the scale applies at the end.
TEST(TrainGradReducer, SingleRankPreparesEveryRangeOnceAndScales) {
  const auto specs = trex::model::parameter_specs(tiny_model_config());
  int64_t total = 0;
  for (const auto& s : specs) total += s.numel();
  trex::parallel::GradReducer reducer(specs, nullptr, nullptr, {}, {.bucket_bytes = 4096});
  EXPECT_GT(reducer.bucket_count(), total * 4 / 4096);
  std::vector<float> grads(static_cast<size_t>(total), 0.0f);
  int64_t prepared = 0;
  int64_t largest = 0;
  reducer.begin_step(grads.data());
  reducer.begin_micro_batch([&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) grads[static_cast<size_t>(i)] += 1.0f;
    prepared += e - b;
    largest = std::max(largest, e - b);
  });
  const int64_t mtp_layer = tiny_model_config().num_hidden_layers;
  reducer.on_gradients_ready(mtp_layer);
  reducer.on_gradients_ready(mtp_layer);  // a second call does nothing
  reducer.on_gradients_ready(2);
  EXPECT_EQ(reducer.groups_started_early(), 2);
  reducer.finish(0.5f);
  EXPECT_EQ(prepared, total);
  EXPECT_LE(largest, 4096 / 4);
  for (float g : grads) ASSERT_EQ(g, 0.5f);
  ASSERT_EQ(reducer.reduced_ranges().size(), 1u);
  EXPECT_EQ(reducer.reduced_ranges()[0].begin, 0);
  EXPECT_EQ(reducer.reduced_ranges()[0].end, total);
  EXPECT_EQ(reducer.micro_batches_reduced(), 1);
  // Without ZeRO-2 a step reduces once: a second micro-batch is refused.
  reducer.begin_step(grads.data());
  reducer.begin_micro_batch();
  reducer.finish_micro_batch();
  EXPECT_THROW(reducer.begin_micro_batch(), trex::Error);
  reducer.finish(1.0f);
}

// A two-rank data group (this process is rank 0) whose reductions finish on
// a "network" thread ~1 ms after they start, oldest first; a reduce-scatter
// delivers rank 0's own block (the other rank contributes zeros). It records
// how many reductions were running when each one started.
class SlowDataGroup : public trex::parallel::Communicator {
 public:
  SlowDataGroup() : network_([this] { run(); }) {}
  ~SlowDataGroup() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    network_.join();
  }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const std::string& name() const override { return name_; }
  int64_t most_running() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return most_running_;
  }
  int64_t started() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(running_.size()) + finished_;
  }
  trex::parallel::Request iall_reduce(void*, int64_t, trex::parallel::DType,
                                      trex::parallel::ReduceOp) override {
    return begin();
  }
  trex::parallel::Request ireduce_scatter(const void* send, void* recv,
                                          std::span<const int64_t> counts,
                                          trex::parallel::DType type,
                                          trex::parallel::ReduceOp) override {
    EXPECT_EQ(type, trex::parallel::DType::kF32);
    std::memcpy(recv, send, static_cast<size_t>(counts[0]) * sizeof(float));
    return begin();
  }
  trex::parallel::Request iall_gather(const void*, void*, std::span<const int64_t>,
                                      trex::parallel::DType) override {
    throw trex::Error("not used");
  }
  trex::parallel::Request iall_to_all(const void*, std::span<const int64_t>, void*,
                                      std::span<const int64_t>, trex::parallel::DType) override {
    throw trex::Error("not used");
  }
  trex::parallel::Request ibroadcast(void*, int64_t, trex::parallel::DType, int) override {
    throw trex::Error("not used");
  }
  trex::parallel::Request isend(const void*, int64_t, trex::parallel::DType, int, int) override {
    throw trex::Error("not used");
  }
  trex::parallel::Request irecv(void*, int64_t, trex::parallel::DType, int, int) override {
    throw trex::Error("not used");
  }
  trex::parallel::Request ibarrier() override { throw trex::Error("not used"); }
  std::unique_ptr<Communicator> split(int, int, const std::string&) override {
    throw trex::Error("not used");
  }

 private:
  using Clock = std::chrono::steady_clock;
  trex::parallel::Request begin() {
    auto pending = std::make_shared<trex::parallel::detail::Pending>();
    std::lock_guard<std::mutex> lock(mutex_);
    running_.push_back({pending, Clock::now()});
    most_running_ = std::max(most_running_, static_cast<int64_t>(running_.size()));
    return trex::parallel::Request(pending);
  }
  void run() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;
      if (!running_.empty() &&
          Clock::now() - running_.front().second > std::chrono::milliseconds(1)) {
        running_.front().first->complete();
        running_.pop_front();
        ++finished_;
      }
    }
  }
  std::string name_ = "slow";
  mutable std::mutex mutex_;
  std::deque<std::pair<std::shared_ptr<trex::parallel::detail::Pending>, Clock::time_point>>
      running_;
  int64_t most_running_ = 0, finished_ = 0;
  bool stop_ = false;
  std::thread network_;
};

// The reducer runs at most max_in_flight reductions at once (the next one
// waits for the oldest), all-reduce and ZeRO-2 reduce-scatter alike; under
// ZeRO-2 every bucket's pages go back exactly once, the step's gradient lands
// in this rank's ranges, and the shard accumulator's pages go back as finish()
// moves the sum into the buffer.
TEST(TrainGradReducer, BoundsTheReductionsInFlight) {
  const auto specs = trex::model::parameter_specs(tiny_model_config());
  int64_t total = 0;
  for (const auto& s : specs) total += s.numel();
  const trex::parallel::ZeroPartition zero =
      trex::parallel::partition_for_zero_by_role(specs, 2, 2);
  for (const int64_t limit : {0, 3}) {
    SCOPED_TRACE("max_in_flight " + std::to_string(limit));
    SlowDataGroup all_reduce_group;
    trex::parallel::GradReducer all_reduce(specs, &all_reduce_group, nullptr, {},
                                           {.bucket_bytes = 4096, .max_in_flight = limit});
    std::vector<float> grads(static_cast<size_t>(total), 1.0f);
    all_reduce.begin_step(grads.data());
    all_reduce.begin_micro_batch();
    all_reduce.on_gradients_ready(tiny_model_config().num_hidden_layers);
    all_reduce.finish(1.0f);
    EXPECT_EQ(all_reduce_group.started(), all_reduce.bucket_count());
    if (limit > 0)
      EXPECT_EQ(all_reduce_group.most_running(), limit);
    else  // nothing waits: every bucket starts at once
      EXPECT_GT(all_reduce_group.most_running(), 3);

    SlowDataGroup scatter_group;
    trex::parallel::GradReducer scatter(
        specs, &scatter_group, nullptr, zero,
        {.bucket_bytes = 4096, .scatter = true, .max_in_flight = limit});
    trex::model::PageVector<float> buffer(static_cast<size_t>(total));
    std::vector<int> released(static_cast<size_t>(total), 0);
    scatter.begin_step(buffer.data(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) released[static_cast<size_t>(i)] += 1;
    });
    for (int micro_batch = 0; micro_batch < 2; ++micro_batch) {
      std::fill(buffer.begin(), buffer.end(), 1.0f);
      scatter.begin_micro_batch();
      scatter.on_gradients_ready(1);
      scatter.finish_micro_batch();
    }
    EXPECT_GT(scatter.shard_bytes(), 0);
    scatter.finish(0.5f);
    if (limit > 0) {
      EXPECT_EQ(scatter_group.most_running(), limit);
    }
    for (int64_t i = 0; i < total; ++i) ASSERT_EQ(released[static_cast<size_t>(i)], 2) << i;
    for (const auto& r : scatter.reduced_ranges())
      for (int64_t i = r.begin; i < r.end; ++i)
        ASSERT_EQ(buffer[static_cast<size_t>(i)], 1.0f) << i;  // 0.5 · (1 + 1)
    // What stays resident of the accumulator: at most the partial pages at
    // the edges of each 16 MiB piece (the tiny shard is one piece per role).
    const auto shard = static_cast<size_t>(zero.dense[0].size() + zero.expert[0].size());
    ASSERT_TRUE(trex::model::page_memory::mapped(shard * sizeof(float)));
    EXPECT_LE(scatter.shard_bytes(),
              4 * static_cast<int64_t>(trex::model::page_memory::page_size()));
  }
}

// The hook fires MTP, L−1..0, then -1, and each group's gradients are final
// when it fires (nothing later in backward changes them).
TEST(TrainGradReducer, ModelHookFiresWhenLayerGradientsAreFinal) {
  const auto config = tiny_model_config();
  trex::model::Model<float> model(config);
  model.init_random(5);
  auto& params = model.params();
  trex::model::Batch batch;
  batch.B = 2;
  batch.S = 16;
  for (int64_t i = 0; i < batch.B * batch.S; ++i)
    batch.input_ids.push_back((i * 37 + 11) % config.vocab_size);
  // Flat ranges of each layer.
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> ranges;
  int64_t offset = 0;
  for (const auto& s : params.specs()) {
    ranges[s.layer].push_back({offset, offset + s.numel()});
    offset += s.numel();
  }
  std::vector<int64_t> order;
  std::map<int64_t, std::vector<float>> at_hook;
  trex::model::StepOptions step;
  step.on_gradients_ready = [&](int64_t layer) {
    order.push_back(layer);
    for (const auto& [b, e] : ranges[layer])
      at_hook[layer].insert(at_hook[layer].end(), params.grads().begin() + b,
                            params.grads().begin() + e);
  };
  trex::model::LossOptions loss;
  loss.mtp_weight = 0.3;
  params.zero_grads();
  model.forward_backward(batch, loss, step);
  std::vector<int64_t> expected = {config.num_hidden_layers};
  for (int64_t l = config.num_hidden_layers - 1; l >= 0; --l) expected.push_back(l);
  expected.push_back(-1);
  EXPECT_EQ(order, expected);
  bool nonzero = false;
  for (const auto& [layer, snapshot] : at_hook) {
    std::vector<float> now;
    for (const auto& [b, e] : ranges[layer])
      now.insert(now.end(), params.grads().begin() + b, params.grads().begin() + e);
    EXPECT_EQ(snapshot, now) << "layer " << layer;
    for (float g : now) nonzero = nonzero || g != 0.0f;
  }
  EXPECT_TRUE(nonzero);
}

}  // namespace

namespace trex_zero_roles {

// DP=2 x EP=2 with routed experts sharded over EP: every data rank's two
// ranges (dense over the 4 data ranks, its experts over its 2-rank dp group)
// are whole tensors of their role, and over the 4 ranks every value of the
// whole model is covered exactly once (the clip-norm and checkpoint invariant).
TEST(TrainZero, RolePartitionCoversEveryValueOnceOverDataRanks) {
  const auto config = tiny_model_config();
  const auto whole = trex::model::parameter_specs(config);
  constexpr int kDp = 2, kEp = 2;
  const auto owner = trex::test::rotating_expert_owner(config, kEp);
  std::map<std::string, int64_t> covered;  // whole-model tensor -> values covered
  int64_t dense_state = 0, expert_state = 0;
  for (int r = 0; r < kDp * kEp; ++r) {
    const auto layout = trex::parallel::filter_specs(
        whole, trex::parallel::ExpertOwnership::of_rank(owner, r % kEp));
    const trex::parallel::ZeroPartition parts =
        trex::parallel::partition_for_zero_by_role(layout, kDp * kEp, kDp);
    ASSERT_EQ(parts.dense.size(), static_cast<size_t>(kDp * kEp));
    ASSERT_EQ(parts.expert.size(), static_cast<size_t>(kDp));
    const auto dense = trex::parallel::role_range(layout, trex::model::ParamRole::kDense);
    const auto experts = trex::parallel::role_range(layout, trex::model::ParamRole::kExpert);
    EXPECT_EQ(parts.dense.front().begin, dense.begin);
    EXPECT_EQ(parts.dense.back().end, dense.end);
    EXPECT_EQ(parts.expert.front().begin, experts.begin);
    EXPECT_EQ(parts.expert.back().end, experts.end);
    const auto mine = parts.ranges(r, r / kEp);
    ASSERT_EQ(mine.size(), 2u);
    for (size_t k = 0; k < mine.size(); ++k)
      for (size_t i = mine[k].first_spec; i < mine[k].end_spec; ++i) {
        EXPECT_EQ(layout[i].role,
                  k == 0 ? trex::model::ParamRole::kDense : trex::model::ParamRole::kExpert);
        covered[layout[i].name] += layout[i].numel();
      }
    dense_state += mine[0].size();
    expert_state += mine[1].size();
    // Roughly a quarter of the dense values and half of this EP rank's experts.
    EXPECT_LT(mine[0].size(), dense.size() / 2);
    EXPECT_LT(mine[1].size(), experts.size() * 3 / 4);
  }
  for (const auto& spec : whole) EXPECT_EQ(covered[spec.name], spec.numel()) << spec.name;
  int64_t whole_dense = 0;
  for (const auto& spec : whole)
    if (spec.role == trex::model::ParamRole::kDense) whole_dense += spec.numel();
  EXPECT_EQ(dense_state, whole_dense);
  EXPECT_EQ(dense_state + expert_state, trex::parallel::total_numel(whole));
}

// An optimizer over two disjoint ranges updates exactly them, bit for bit like
// the whole optimizer, and keeps their slices of a whole-model state file.
TEST(TrainZero, TwoRangeOptimizerEqualsWholeOptimizerOnItsRanges) {
  trex::model::Model<float> model = tiny_model_with_random_grads(5, 13);
  auto& params = model.params();
  const trex::train::OptimizerOptions options;
  const auto parts = trex::parallel::partition_for_zero_by_role(params.specs(), 3, 2);
  const auto ranges = parts.ranges(1, 0);
  ASSERT_GT(ranges[0].size(), 0);
  ASSERT_GT(ranges[1].size(), 0);

  trex::model::ParamStore<float> whole_params = params;
  Optimizer whole(whole_params, options);
  trex::model::ParamStore<float> mine = params;
  Optimizer two(mine, options, ranges);
  EXPECT_EQ(two.state_size(), ranges[0].size() + ranges[1].size());
  EXPECT_TRUE(two.sharded());
  for (int step = 0; step < 2; ++step) {
    whole.step(whole_params, 1e-2);
    two.step(mine, 1e-2);
  }
  int64_t at = 0;
  const std::vector<float> two_first = two.first_moment(), whole_first = whole.first_moment();
  std::vector<bool> inside(static_cast<size_t>(params.size()), false);
  for (const OptimizerShard& r : ranges) {
    for (int64_t i = r.begin; i < r.end; ++i) {
      inside[static_cast<size_t>(i)] = true;
      ASSERT_EQ(mine.values()[static_cast<size_t>(i)],
                whole_params.values()[static_cast<size_t>(i)]);
      ASSERT_EQ(two_first[static_cast<size_t>(at + i - r.begin)],
                whole_first[static_cast<size_t>(i)]);
    }
    at += r.size();
  }
  for (size_t i = 0; i < inside.size(); ++i) {
    if (inside[i]) continue;
    ASSERT_EQ(mine.values()[i], params.values()[i]) << i;  // untouched
  }

  TempDir dir;
  const std::string path = dir.file("optimizer.safetensors");
  whole.save_state(path);
  Optimizer reader(params, options, ranges);
  reader.load_state(path);
  EXPECT_EQ(reader.first_moment(), two.first_moment());
  EXPECT_EQ(reader.second_moment(), two.second_moment());
  // Overlapping or descending ranges are refused.
  EXPECT_THROW(Optimizer(params, options, std::vector<OptimizerShard>{ranges[1], ranges[0]}),
               trex::Error);
}

}  // namespace trex_zero_roles
