// Routed experts' weights sharded over EP ranks (model/expert_shard.hpp): the
// sharded store keeps the dense tensors and the owned experts with their
// values, the random init of a shard equals the whole model's for its tensors,
// buffers re-lay out by name, and the local MoE path refuses a sharded model.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "model/expert_maps.hpp"
#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"
#include "trex/io/safetensors.hpp"
#include "trex/model/model.hpp"
#include "trex/model/weights.hpp"
#include "trex/parallel/expert_shard.hpp"
#include "trex/parallel/pipeline.hpp"
#include "trex/train/optim/optimizer.hpp"
#include "trex/train/optim/optimizer_relayout.hpp"

namespace {

using trex::model::Model;
using trex::model::ModelConfig;
using trex::model::ParamRole;
using trex::model::ParamSpec;
using trex::model::ParamStore;
using trex::parallel::ExpertOwnership;

ModelConfig tiny() {
  return ModelConfig::load(trex::test::source_dir() + "/configs/models/tiny-v4.json");
}

TEST(ExpertShard, StoreKeepsDenseAndOwnedExpertsWithTheirValues) {
  const ModelConfig c = tiny();
  Model<float> whole(c);
  whole.init_random(3);
  const auto owner = trex::test::rotating_expert_owner(c, 2);
  const int64_t dense = trex::parallel::role_numel(whole.params().specs(), ParamRole::kDense);
  const int64_t experts = trex::parallel::role_numel(whole.params().specs(), ParamRole::kExpert);
  ASSERT_GT(experts, 0);
  int64_t sizes = 0;
  for (int rank = 0; rank < 2; ++rank) {
    const ExpertOwnership mine = ExpertOwnership::of_rank(owner, rank);
    ParamStore<float> store = whole.params();
    trex::parallel::shard_expert_params(store, mine);
    // E is even, so each rank stores exactly half of every block's experts.
    EXPECT_EQ(store.size(), dense + experts / 2) << rank;
    EXPECT_EQ(store.range(ParamRole::kDense), std::make_pair(int64_t{0}, dense));
    sizes += store.size() - dense;
    for (const ParamSpec& spec : whole.params().specs()) {
      const bool kept =
          spec.role == ParamRole::kDense ||
          owner[static_cast<size_t>(spec.layer)][static_cast<size_t>(spec.expert)] == rank;
      ASSERT_EQ(store.contains(spec.name), kept) << spec.name;
      if (!kept) continue;
      const float* a = store.value(spec.name);
      const float* b = whole.params().value(spec.name);
      for (int64_t i = 0; i < spec.numel(); ++i) ASSERT_EQ(a[i], b[i]) << spec.name;
    }
    for (float g : store.grads()) ASSERT_EQ(g, 0.0f);
  }
  EXPECT_EQ(sizes, experts);  // every expert on exactly one rank
}

TEST(ExpertShard, RandomInitOfAShardEqualsTheWholeModels) {
  const ModelConfig c = tiny();
  Model<float> whole(c);
  whole.init_random(11);
  Model<float> shard(c);
  trex::parallel::shard_expert_params(
      shard.params(), ExpertOwnership::of_rank(trex::test::rotating_expert_owner(c, 4), 1));
  shard.init_random(11);
  for (const ParamSpec& spec : shard.params().specs()) {
    const float* a = shard.params().value(spec.name);
    const float* b = whole.params().value(spec.name);
    for (int64_t i = 0; i < spec.numel(); ++i) ASSERT_EQ(a[i], b[i]) << spec.name;
  }
  EXPECT_LT(shard.params().size(), whole.params().size());
}

TEST(ExpertShard, RelayoutByNameRoundTripsAndRejectsMissingTensors) {
  const ModelConfig c = tiny();
  const std::vector<ParamSpec> whole = trex::model::parameter_specs(c);
  const std::vector<ParamSpec> mine = trex::parallel::filter_specs(
      whole, ExpertOwnership::of_rank(trex::test::rotating_expert_owner(c, 2), 0));
  std::vector<double> values(static_cast<size_t>(trex::parallel::total_numel(whole)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
  const std::vector<double> local = trex::parallel::relayout_by_name<double>(whole, values, mine);
  ASSERT_EQ(static_cast<int64_t>(local.size()), trex::parallel::total_numel(mine));
  // Each local tensor holds the whole buffer's values of the same name.
  ParamStore<double> a(whole), b(mine);
  a.values() = values;
  b.values() = local;
  for (const ParamSpec& spec : mine) EXPECT_EQ(*b.value(spec.name), *a.value(spec.name));
  // Back to the whole layout: a tensor the shard lacks is an error naming it.
  try {
    trex::parallel::relayout_by_name<double>(mine, local, whole);
    FAIL() << "expected an error";
  } catch (const trex::Error& e) {
    EXPECT_NE(e.field_name().find("ffn.experts."), std::string::npos) << e.what();
  }
}

TEST(ExpertShard, LocalMoePathRejectsAShardedModel) {
  const ModelConfig c = tiny();
  Model<float> m(c);
  m.init_random(5);
  trex::parallel::shard_expert_params(
      m.params(), ExpertOwnership::of_rank(trex::test::rotating_expert_owner(c, 2), 0));
  trex::model::Batch batch;
  batch.B = 1;
  batch.S = 8;
  for (int64_t i = 0; i < 8; ++i) batch.input_ids.push_back(2 + i);
  try {
    m.forward_backward(batch, {});
    FAIL() << "expected an error";
  } catch (const trex::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not stored here"), std::string::npos) << e.what();
    EXPECT_NE(e.field_name().find("experts."), std::string::npos) << e.field_name();
  }
}

TEST(ExpertShard, OwnershipRejectsABlockWithoutAMap) {
  const ModelConfig c = tiny();
  auto owner = trex::test::rotating_expert_owner(c, 2);
  owner.pop_back();  // no map for the MTP block
  EXPECT_THROW(trex::parallel::filter_specs(trex::model::parameter_specs(c),
                                            ExpertOwnership::of_rank(owner, 0)),
               trex::Error);
}

// A whole-model checkpoint read into one rank's shard: only its experts, the
// same values, the same hash tables; a checkpoint missing another rank's expert
// is still refused (the file is checked whole).
TEST(ExpertShard, CheckpointLoadsOnlyTheOwnedExperts) {
  const ModelConfig c = tiny();
  Model<float> whole(c);
  whole.init_random(21);
  trex::test::TempDir dir;
  const std::string path = dir.path() + "/ckpt";
  trex::model::save_checkpoint(path, c, whole.params(), whole.hash_tables(),
                               trex::model::NamingScheme::kReleased, trex::DType::kF32);
  const ExpertOwnership mine = ExpertOwnership::of_rank(trex::test::rotating_expert_owner(c, 2), 1);
  const trex::model::LoadedCheckpoint<float> loaded =
      trex::parallel::load_checkpoint_shard<float>(path, mine);
  ParamStore<float> expected = whole.params();
  trex::parallel::shard_expert_params(expected, mine);
  EXPECT_EQ(loaded.params.size(), expected.size());
  EXPECT_EQ(loaded.params.values(), expected.values());
  EXPECT_EQ(loaded.hash_tables, whole.hash_tables());

  // The same checkpoint without an expert this rank does not own.
  ParamStore<float> fewer(trex::parallel::filter_specs(
      whole.params().specs(),
      ExpertOwnership::of_rank(trex::test::rotating_expert_owner(c, 2), 1)));
  const std::string partial = dir.path() + "/partial";
  trex::model::save_checkpoint(partial, c, fewer, whole.hash_tables(),
                               trex::model::NamingScheme::kReleased, trex::DType::kF32);
  try {
    trex::parallel::load_checkpoint_shard<float>(partial, mine);
    FAIL() << "expected an error";
  } catch (const trex::Error& e) {
    EXPECT_NE(e.field_name().find("ffn.experts."), std::string::npos) << e.what();
  }
}

// The transformers scheme (each layer's experts fused into one tensor) and the
// hybrid one, read per rank: only the kept experts' slices are read (BF16 here,
// converted on read), the same values as a whole load then sharded.
TEST(ExpertShard, TransformersCheckpointsReadOnlyTheOwnedExpertSlices) {
  const ModelConfig c = tiny();
  Model<float> whole(c);
  whole.init_random(23);
  const ExpertOwnership mine = ExpertOwnership::of_rank(trex::test::rotating_expert_owner(c, 2), 0);
  trex::test::TempDir dir;
  const std::string path = dir.path() + "/hf";
  trex::model::save_checkpoint(path, c, whole.params(), whole.hash_tables(),
                               trex::model::NamingScheme::kTransformers, trex::DType::kBF16);
  trex::model::LoadedCheckpoint<float> reference = trex::model::load_checkpoint<float>(path);
  trex::parallel::shard_expert_params(reference.params, mine);
  const trex::model::LoadedCheckpoint<float> loaded =
      trex::parallel::load_checkpoint_shard<float>(path, mine);
  EXPECT_EQ(loaded.scheme, trex::model::NamingScheme::kTransformers);
  EXPECT_EQ(loaded.params.values(), reference.params.values());
  EXPECT_EQ(loaded.hash_tables, whole.hash_tables());
  EXPECT_EQ(loaded.values_read, loaded.params.size());
  const int64_t experts =
      trex::parallel::role_numel(whole.params().specs(), trex::model::ParamRole::kExpert);
  EXPECT_EQ(loaded.values_read, whole.params().size() - experts / 2);
}

// A released checkpoint in DeepSeek's quantised form (every routed expert's w1
// MXFP4 with E8M0 row-block scales, a dense projection FP8 with a block scale)
// read per rank: the same values as loading it whole and sharding, but only
// this rank's tensors are dequantised; another rank's missing scale is still
// an error (the file is checked whole).
TEST(ExpertShard, QuantisedReleasedCheckpointDequantisesOnlyTheOwnedTensors) {
  const ModelConfig c = tiny();
  Model<float> whole(c);
  whole.init_random(8);
  const auto tensors = trex::model::export_tensors(
      c, whole.params(), false, trex::model::NamingScheme::kReleased, &whole.hash_tables());
  std::vector<std::vector<uint8_t>> payloads;  // alive until written
  payloads.reserve(2 * tensors.size());
  auto bytes = [&](std::vector<uint8_t> b) -> const std::vector<uint8_t>& {
    payloads.push_back(std::move(b));
    return payloads.back();
  };
  auto write = [&](const std::string& path, const std::string& drop_scale) {
    std::vector<trex::TensorToWrite> w;
    int quantised = 0;
    for (const auto& t : tensors) {
      const bool expert_w1 =
          t.name.find(".ffn.experts.") != std::string::npos && t.name.ends_with(".w1.weight");
      if (expert_w1) {
        const int64_t rows = t.shape[0], cols = t.shape[1];
        std::vector<uint8_t> fp4(static_cast<size_t>(rows * cols / 2));
        for (size_t i = 0; i < fp4.size(); ++i)
          fp4[i] = static_cast<uint8_t>((i * 7 + static_cast<size_t>(quantised) * 13) % 256);
        const auto& data = bytes(std::move(fp4));
        w.push_back({t.name, trex::DType::kI8, {rows, cols / 2}, data.data(), data.size()});
        const std::string scale = t.name.substr(0, t.name.size() - 7) + ".scale";
        const auto& scales = bytes(std::vector<uint8_t>(static_cast<size_t>(rows * cols / 32),
                                                        static_cast<uint8_t>(120 + quantised % 8)));
        if (scale != drop_scale)
          w.push_back(
              {scale, trex::DType::kF8E8M0, {rows, cols / 32}, scales.data(), scales.size()});
        ++quantised;
      } else if (t.name == "layers.0.attn.wq_a.weight") {
        std::vector<uint8_t> fp8(t.f32.size());
        for (size_t i = 0; i < fp8.size(); ++i) fp8[i] = static_cast<uint8_t>(0x30 + i % 16);
        const auto& data = bytes(std::move(fp8));
        w.push_back({t.name, trex::DType::kF8E4M3, t.shape, data.data(), data.size()});
        const auto& scale = bytes({126});
        w.push_back({"layers.0.attn.wq_a.scale", trex::DType::kF8E8M0, {1, 1}, scale.data(), 1});
      } else if (!t.i64.empty()) {
        w.push_back({t.name, trex::DType::kI64, t.shape, t.i64.data(), t.i64.size() * 8});
      } else {
        w.push_back({t.name, trex::DType::kF32, t.shape, t.f32.data(), t.f32.size() * 4});
      }
    }
    EXPECT_GT(quantised, 4);
    std::filesystem::create_directories(path);
    trex::write_checkpoint(path, w, {});
    trex::write_file_atomic(path + "/config.json", c.to_json().dump());
  };
  trex::test::TempDir dir;
  write(dir.path() + "/q", "");
  const trex::model::LoadedCheckpoint<float> all =
      trex::model::load_checkpoint<float>(dir.path() + "/q");
  EXPECT_EQ(all.values_read, all.params.size());
  const auto owner = trex::test::rotating_expert_owner(c, 2);
  for (int rank = 0; rank < 2; ++rank) {
    const ExpertOwnership mine = ExpertOwnership::of_rank(owner, rank);
    const auto loaded = trex::parallel::load_checkpoint_shard<float>(dir.path() + "/q", mine);
    ParamStore<float> expected = all.params;
    trex::parallel::shard_expert_params(expected, mine);
    EXPECT_EQ(loaded.params.specs().size(), expected.specs().size());
    EXPECT_EQ(loaded.params.values(), expected.values()) << "rank " << rank;
    EXPECT_EQ(loaded.hash_tables, all.hash_tables);
    EXPECT_EQ(loaded.values_read, expected.size());
    EXPECT_LT(loaded.values_read, all.values_read);
  }
  // A pipeline stage reads only its layers too: the head's stage of a 2-stage
  // 1F1B pipeline (its blocks, the head, the MTP block, the tied embedding)
  // with EP rank 1's experts; layer 0's FP8 tensor is never dequantised.
  const trex::parallel::RankOwnership head_stage{
      ExpertOwnership::of_rank(owner, 1),
      trex::parallel::chunks_of_rank(trex::parallel::PipelineSchedule::k1F1B, 2,
                                     c.num_hidden_layers, 1)};
  const auto staged = trex::parallel::load_checkpoint_shard<float>(dir.path() + "/q", head_stage);
  const std::vector<ParamSpec> stage_specs =
      trex::parallel::filter_specs(all.params.specs(), c, head_stage);
  EXPECT_EQ(staged.params.values(), trex::parallel::relayout_by_name<float>(
                                        all.params.specs(), all.params.values(), stage_specs));
  EXPECT_EQ(staged.values_read, staged.params.size());
  EXPECT_FALSE(staged.params.contains("layers.0.attn.wq_a.weight"));
  EXPECT_TRUE(staged.params.contains("embed.weight"));  // the MTP block's tied copy
  EXPECT_TRUE(staged.params.contains("head.weight"));
  // Fewer than EP rank 1 reads without stages (every layer's dense tensors).
  EXPECT_LT(staged.values_read, trex::parallel::total_numel(trex::parallel::filter_specs(
                                    all.params.specs(), ExpertOwnership::of_rank(owner, 1))));
  // A scale of an expert rank 0 does not own, missing: still refused on rank 0.
  std::string foreign;
  const ExpertOwnership rank0 = ExpertOwnership::of_rank(owner, 0);
  const std::vector<ParamSpec> kept = trex::parallel::filter_specs(whole.params().specs(), rank0);
  for (const ParamSpec& spec : whole.params().specs())
    if (spec.name.ends_with(".w1.weight") && spec.role == ParamRole::kExpert &&
        std::none_of(kept.begin(), kept.end(),
                     [&](const ParamSpec& k) { return k.name == spec.name; })) {
      foreign = spec.name.substr(0, spec.name.size() - 7) + ".scale";
      break;
    }
  ASSERT_FALSE(foreign.empty());
  write(dir.path() + "/missing", foreign);
  try {
    trex::parallel::load_checkpoint_shard<float>(dir.path() + "/missing", rank0);
    FAIL() << "expected an error";
  } catch (const trex::Error& e) {
    EXPECT_NE(std::string(e.what()).find(foreign), std::string::npos) << e.what();
  }
}

// Optimizer state written for the whole model, loaded into an optimizer over a
// shard's store (and into a ZeRO shard of it): each tensor's state by name.
TEST(ExpertShard, OptimizerStateLoadsIntoAShardByName) {
  const ModelConfig c = tiny();
  Model<float> whole(c);
  whole.init_random(2);
  trex::train::Optimizer full(whole.params(), {});
  std::vector<float> first(static_cast<size_t>(whole.params().size())), second(first.size());
  for (size_t i = 0; i < first.size(); ++i) {
    first[i] = static_cast<float>(i % 1000) * 0.5f;
    second[i] = static_cast<float>(i % 777);
  }
  // Only AdamW tensors have a second moment (Muon keeps momentum only).
  int64_t at = 0;
  for (const trex::model::ParamSpec& spec : whole.params().specs()) {
    if (spec.group != trex::model::OptimizerGroup::kAdamW)
      std::fill_n(second.begin() + at, spec.numel(), 0.0f);
    at += spec.numel();
  }
  full.set_state(4, first, second);
  trex::test::TempDir dir;
  const std::string path = dir.path() + "/optimizer.safetensors";
  full.save_state(path);

  ParamStore<float> mine = whole.params();
  trex::parallel::shard_expert_params(
      mine, ExpertOwnership::of_rank(trex::test::rotating_expert_owner(c, 2), 0));
  const std::vector<float> want_first =
      trex::parallel::relayout_by_name<float>(whole.params().specs(), first, mine.specs());
  trex::train::Optimizer shard(mine, {});
  EXPECT_THROW(shard.load_state(path), trex::Error);  // another layout
  trex::train::load_optimizer_state_by_name(shard, mine, path, whole.params().specs());
  EXPECT_EQ(shard.step_count(), 4);
  EXPECT_EQ(shard.first_moment(), want_first);
  EXPECT_EQ(shard.second_moment(),
            trex::parallel::relayout_by_name<float>(whole.params().specs(), second, mine.specs()));
  const std::vector<trex::parallel::OptimizerShard> parts =
      trex::parallel::partition_for_zero(mine.specs(), 2);
  trex::train::Optimizer zero(mine, {}, parts[1]);
  trex::train::load_optimizer_state_by_name(zero, mine, path, whole.params().specs());
  EXPECT_EQ(zero.first_moment(), std::vector<float>(want_first.begin() + parts[1].begin,
                                                    want_first.begin() + parts[1].end));

  // param_dtype = "bf16": the fp32 master travels by name the same way.
  trex::train::OptimizerOptions with_master;
  with_master.master_weights = true;
  std::vector<float> master(first.size());
  for (size_t i = 0; i < master.size(); ++i) master[i] = 0.001f * static_cast<float>(i % 4099);
  trex::train::Optimizer full_master(whole.params(), with_master);
  full_master.set_state(4, first, second, master);
  const std::string master_path = dir.path() + "/optimizer-master.safetensors";
  full_master.save_state(master_path);
  trex::train::Optimizer shard_master(mine, with_master, parts[1]);
  trex::train::load_optimizer_state_by_name(shard_master, mine, master_path,
                                            whole.params().specs());
  const std::vector<float> want_master =
      trex::parallel::relayout_by_name<float>(whole.params().specs(), master, mine.specs());
  EXPECT_EQ(shard_master.master(), std::vector<float>(want_master.begin() + parts[1].begin,
                                                      want_master.begin() + parts[1].end));
}

}  // namespace
