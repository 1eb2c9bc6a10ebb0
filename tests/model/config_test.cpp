// ModelConfig: both key schemes, validation (every error names its key and the
// file), JSON round trips, and the shipped configs' values.
#include "trex/model/config.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"

namespace trex::model {
namespace {

using json = nlohmann::json;

std::string config_path(const std::string& name) {
  return test::source_dir() + "/configs/models/" + name + ".json";
}
json config_json(const std::string& name) {
  return json::parse(read_file(config_path(name)));
}

// tiny-v4.json in the transformers port's key scheme.
json tiny_transformers_json() {
  json j = config_json("tiny-v4");
  for (const char* key : {"compress_ratios", "num_hash_layers", "rope_scaling", "qk_rope_head_dim",
                          "rope_theta", "compress_rope_theta"}) {
    j.erase(key);
  }
  j["layer_types"] = {"sliding_attention", "compressed_sparse_attention",
                      "heavily_compressed_attention", "compressed_sparse_attention"};
  j["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 16}};
  j["mlp_layer_types"] = {"hash_moe", "hash_moe", "moe", "moe"};
  j["partial_rotary_factor"] = 32.0 / 96.0;
  j["rope_parameters"] = {
      {"main",
       {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 32.0 / 96.0}}},
      {"compress",
       {{"rope_type", "yarn"},
        {"rope_theta", 160000.0},
        {"factor", 4.0},
        {"original_max_position_embeddings", 32},
        {"beta_fast", 32.0},
        {"beta_slow", 1.0},
        {"attention_factor", 1.0},
        {"partial_rotary_factor", 32.0 / 96.0}}}};
  return j;
}

// Same config modulo the scheme flag.
void expect_same_config(ModelConfig a, ModelConfig b) {
  a.transformers_scheme = b.transformers_scheme = false;
  EXPECT_EQ(a.to_json().dump(1), b.to_json().dump(1));
}

TEST(ModelConfig, TinyV4MatchesTheSharedSpec) {
  ModelConfig c = ModelConfig::load(config_path("tiny-v4"));
  EXPECT_FALSE(c.transformers_scheme);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.compress_ratios, (std::vector<int64_t>{0, 4, 16, 4, 0}));
  EXPECT_EQ(c.num_hash_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.head_dim, 96);
  EXPECT_EQ(c.qk_rope_head_dim, 32);
  EXPECT_EQ(c.nope_head_dim(), 64);
  EXPECT_EQ(c.q_lora_rank, 32);
  EXPECT_EQ(c.o_groups, 2);
  EXPECT_EQ(c.o_lora_rank, 16);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.index_n_heads, 4);
  EXPECT_EQ(c.index_head_dim, 32);
  EXPECT_EQ(c.index_topk, 4);
  EXPECT_EQ(c.n_routed_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.5);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 10.0);
  EXPECT_TRUE(c.rope_scaling.yarn);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.compress_rope_theta, 160000.0);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_EQ(c.torch_dtype, "float32");
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_mix_dim(), 24);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_EQ(c.attention_kind(0), AttentionKind::kSliding);
  EXPECT_EQ(c.attention_kind(1), AttentionKind::kCompressedSparse);
  EXPECT_EQ(c.attention_kind(2), AttentionKind::kHeavilyCompressed);
  EXPECT_EQ(c.attention_kind(4), AttentionKind::kSliding);  // MTP
  EXPECT_TRUE(c.is_hash_layer(1));
  EXPECT_FALSE(c.is_hash_layer(2));
  EXPECT_FALSE(c.is_hash_layer(4));
}

TEST(ModelConfig, TinyClampMatchesTheSharedSpec) {
  ModelConfig c = ModelConfig::load(config_path("tiny-v4-clamp"));
  EXPECT_EQ(c.compress_ratios, (std::vector<int64_t>{8, 4, 8, 0}));
  EXPECT_EQ(c.num_hidden_layers, 3);
  EXPECT_EQ(c.num_hash_layers, 1);
  EXPECT_EQ(c.num_attention_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.qk_rope_head_dim, 16);
  EXPECT_EQ(c.o_groups, 1);
  EXPECT_EQ(c.heads_per_group(), 2);
  EXPECT_EQ(c.sliding_window, 4);
  EXPECT_EQ(c.index_n_heads, 2);
  EXPECT_EQ(c.index_head_dim, 16);
  EXPECT_EQ(c.index_topk, 3);
  EXPECT_EQ(c.n_routed_experts, 4);
  EXPECT_EQ(c.moe_intermediate_size, 16);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 0.5);
  EXPECT_FALSE(c.rope_scaling.yarn);
  EXPECT_EQ(c.attention_kind(0), AttentionKind::kHeavilyCompressed);
  EXPECT_EQ(c.ratio(0), 8);
}

TEST(ModelConfig, ReleasedFlashAndProSchedules) {
  ModelConfig flash = ModelConfig::load(config_path("deepseek-v4-flash"));
  ASSERT_EQ(flash.total_layers(), 44);
  int swa = 0, csa = 0, hca = 0;
  for (int64_t l = 0; l < flash.num_hidden_layers; ++l) {
    AttentionKind k = flash.attention_kind(l);
    swa += k == AttentionKind::kSliding;
    csa += k == AttentionKind::kCompressedSparse;
    hca += k == AttentionKind::kHeavilyCompressed;
  }
  EXPECT_EQ(swa, 2);
  EXPECT_EQ(csa, 21);
  EXPECT_EQ(hca, 20);
  EXPECT_EQ(flash.attention_kind(2), AttentionKind::kCompressedSparse);
  EXPECT_EQ(flash.attention_kind(3), AttentionKind::kHeavilyCompressed);
  EXPECT_EQ(flash.attention_kind(43), AttentionKind::kSliding);  // MTP
  EXPECT_EQ(flash.num_hash_layers, 3);
  EXPECT_EQ(flash.expert_dtype, "fp4");
  EXPECT_EQ(flash.rope_scaling.original_max_position_embeddings, 65536);
  EXPECT_DOUBLE_EQ(flash.rope_scaling.factor, 16.0);

  ModelConfig pro = ModelConfig::load(config_path("deepseek-v4-pro"));
  ASSERT_EQ(pro.total_layers(), 62);
  EXPECT_EQ(pro.attention_kind(0), AttentionKind::kHeavilyCompressed);
  EXPECT_EQ(pro.attention_kind(60), AttentionKind::kCompressedSparse);
  EXPECT_EQ(pro.attention_kind(61), AttentionKind::kSliding);
  EXPECT_EQ(pro.index_topk, 1024);
  EXPECT_DOUBLE_EQ(pro.compress_rope_theta, 160000.0);
  EXPECT_DOUBLE_EQ(pro.routed_scaling_factor, 2.5);

  ModelConfig bench = ModelConfig::load(config_path("bench-cpu"));
  EXPECT_EQ(bench.hidden_size, 1024);
  EXPECT_EQ(bench.num_hidden_layers, 8);
  EXPECT_TRUE(bench.has_csa_layer());
  EXPECT_EQ(bench.attention_kind(2), AttentionKind::kHeavilyCompressed);
  EXPECT_EQ(bench.attention_kind(0), AttentionKind::kSliding);
}

TEST(ModelConfig, TransformersSchemeParsesToTheSameConfig) {
  ModelConfig released = ModelConfig::load(config_path("tiny-v4"));
  ModelConfig port = ModelConfig::from_json(tiny_transformers_json(), "port.json");
  EXPECT_TRUE(port.transformers_scheme);
  EXPECT_EQ(port.compress_ratios, released.compress_ratios);  // MTP entry defaults to SWA
  EXPECT_EQ(port.num_hash_layers, 2);
  EXPECT_EQ(port.qk_rope_head_dim, 32);
  expect_same_config(port, released);

  // Variants the port also accepts: short compress_rates keys, legacy
  // compress_rate_hca, a flat rope_parameters dict with "type", qk_rope_head_dim
  // instead of partial_rotary_factor, num_hash_layers instead of mlp_layer_types.
  json flat = tiny_transformers_json();
  flat["compress_rates"] = {{"csa", 4}, {"hca", 128}};
  flat["compress_rate_hca"] = 16;
  flat["rope_parameters"] = {
      {"type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 32}};
  flat["rope_theta"] = 10000;
  flat["compress_rope_theta"] = 160000;
  flat.erase("partial_rotary_factor");
  flat["qk_rope_head_dim"] = 32;
  flat.erase("mlp_layer_types");
  flat["num_hash_layers"] = 2;
  expect_same_config(ModelConfig::from_json(flat, "flat.json"), released);

  // Without any rope-dims key the port's default factor 64/512 applies.
  json defaults = tiny_transformers_json();
  defaults.erase("partial_rotary_factor");
  defaults["rope_parameters"]["main"].erase("partial_rotary_factor");
  defaults["rope_parameters"]["compress"].erase("partial_rotary_factor");
  defaults["head_dim"] = 256;
  EXPECT_EQ(ModelConfig::from_json(defaults, "d.json").qk_rope_head_dim, 32);
  // Without mlp_layer_types or num_hash_layers: the port's 3 hash layers.
  defaults.erase("mlp_layer_types");
  EXPECT_EQ(ModelConfig::from_json(defaults, "d.json").num_hash_layers, 3);
}

TEST(ModelConfig, RoundTripsInBothSchemes) {
  for (const char* name :
       {"tiny-v4", "tiny-v4-clamp", "bench-cpu", "deepseek-v4-flash", "deepseek-v4-pro"}) {
    ModelConfig c = ModelConfig::load(config_path(name));
    json written = c.to_json();
    EXPECT_TRUE(written.contains("compress_ratios")) << name;
    expect_same_config(ModelConfig::from_json(written, name), c);
    EXPECT_EQ(ModelConfig::from_json(written, name).to_json(), written) << name;

    ModelConfig port = c;
    port.transformers_scheme = true;
    json port_json = port.to_json();
    EXPECT_TRUE(port_json.contains("layer_types")) << name;
    EXPECT_FALSE(port_json.contains("compress_ratios"))
        << name;  // MTP is SWA in all shipped configs
    EXPECT_FALSE(port_json.contains("num_hash_layers")) << name;
    ModelConfig back = ModelConfig::from_json(port_json, name);
    EXPECT_TRUE(back.transformers_scheme) << name;
    expect_same_config(back, c);
  }
  // A non-SWA MTP block travels in the legacy compress_ratios the port ignores.
  ModelConfig tiny = ModelConfig::load(config_path("tiny-v4"));
  tiny.compress_ratios.back() = 4;
  tiny.transformers_scheme = true;
  json j = tiny.to_json();
  ASSERT_TRUE(j.contains("compress_ratios"));
  EXPECT_EQ(ModelConfig::from_json(j, "x").compress_ratios.back(), 4);
  // Two HCA ratios cannot be written as compress_rates.
  tiny.compress_ratios = {0, 8, 16, 4, 0};
  EXPECT_THROW(tiny.to_json(), Error);
}

TEST(ModelConfig, ToleratesUnknownAndQuantizationKeys) {
  json j = config_json("tiny-v4");
  j["some_future_key"] = {{"x", 1}};
  j["quantization_config"] = {{"quant_method", "fp8"}};
  j["expert_dtype"] = "fp8";
  j["transformers_version"] = "4.57.1";
  j["eos_token_id"] = {1, 2};
  ModelConfig c = ModelConfig::from_json(j, "x.json");
  EXPECT_EQ(c.expert_dtype, "fp8");
  EXPECT_EQ(c.eos_token_id, 1);
  j["hc_mult"] = 2;  // allowed: mix width (2 + h)·h
  EXPECT_EQ(ModelConfig::from_json(j, "x.json").hc_mix_dim(), 8);
  j["bos_token_id"] = nullptr;
  EXPECT_EQ(ModelConfig::from_json(j, "x.json").bos_token_id, -1);
  // Without a CSA layer the indexer keys are optional.
  json no_csa = config_json("tiny-v4");
  no_csa["compress_ratios"] = {0, 8, 16, 0, 0};
  for (const char* key : {"index_n_heads", "index_head_dim", "index_topk"}) no_csa.erase(key);
  EXPECT_FALSE(ModelConfig::from_json(no_csa, "x.json").has_csa_layer());
}

struct BadCase {
  std::string what;
  std::function<void(json&)> mutate;
  std::string key;  // the field the error must name
};

void expect_rejected(const json& base, const BadCase& bad) {
  json j = base;
  bad.mutate(j);
  try {
    ModelConfig::from_json(j, "bad-config.json");
    ADD_FAILURE() << bad.what << ": accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), bad.key) << bad.what << ": " << e.what();
    EXPECT_EQ(e.file_name(), "bad-config.json") << bad.what;
    EXPECT_NE(std::string(e.what()).find("field '" + bad.key + "'"), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, RejectsInconsistentReleasedConfigs) {
  const json base = config_json("tiny-v4");
  const std::vector<BadCase> cases = {
      {"ratios without the MTP entry",
       [](json& j) {
         j["compress_ratios"] = {0, 4, 16, 4};
       },
       "compress_ratios"},
      {"ratio 1", [](json& j) { j["compress_ratios"][2] = 1; }, "compress_ratios"},
      {"negative ratio", [](json& j) { j["compress_ratios"][2] = -16; }, "compress_ratios"},
      {"head_dim <= rope dims", [](json& j) { j["head_dim"] = 32; }, "head_dim"},
      {"odd rope dims", [](json& j) { j["qk_rope_head_dim"] = 31; }, "qk_rope_head_dim"},
      {"heads % o_groups", [](json& j) { j["num_attention_heads"] = 3; }, "o_groups"},
      {"top-k > experts", [](json& j) { j["num_experts_per_tok"] = 9; }, "num_experts_per_tok"},
      {"hash layers > layers", [](json& j) { j["num_hash_layers"] = 5; }, "num_hash_layers"},
      {"indexer narrower than rope", [](json& j) { j["index_head_dim"] = 16; }, "index_head_dim"},
      {"CSA without indexer heads", [](json& j) { j.erase("index_n_heads"); }, "index_n_heads"},
      {"two shared experts", [](json& j) { j["n_shared_experts"] = 2; }, "n_shared_experts"},
      {"other model_type", [](json& j) { j["model_type"] = "deepseek_v3"; }, "model_type"},
      {"unknown scoring_func", [](json& j) { j["scoring_func"] = "relu"; }, "scoring_func"},
      {"other topk_method", [](json& j) { j["topk_method"] = "group_limited_greedy"; },
       "topk_method"},
      {"missing hidden_size", [](json& j) { j.erase("hidden_size"); }, "hidden_size"},
      {"missing model_type", [](json& j) { j.erase("model_type"); }, "model_type"},
      {"missing compress_ratios", [](json& j) { j.erase("compress_ratios"); }, "compress_ratios"},
      {"missing qk_rope_head_dim", [](json& j) { j.erase("qk_rope_head_dim"); },
       "qk_rope_head_dim"},
      {"string size", [](json& j) { j["hidden_size"] = "64"; }, "hidden_size"},
      {"fractional size", [](json& j) { j["vocab_size"] = 512.5; }, "vocab_size"},
      {"ratios not a list", [](json& j) { j["compress_ratios"] = "0,4"; }, "compress_ratios"},
      {"ratio entry type", [](json& j) { j["compress_ratios"][2] = "16"; }, "compress_ratios[2]"},
      {"bool as int", [](json& j) { j["norm_topk_prob"] = 1; }, "norm_topk_prob"},
      {"string number", [](json& j) { j["rope_scaling"]["factor"] = "4"; }, "rope_scaling.factor"},
      {"rope_scaling not object", [](json& j) { j["rope_scaling"] = 4; }, "rope_scaling"},
      {"unknown rope type", [](json& j) { j["rope_scaling"]["type"] = "linear"; },
       "rope_scaling.type"},
      {"yarn without factor", [](json& j) { j["rope_scaling"].erase("factor"); },
       "rope_scaling.factor"},
      {"yarn attention factor", [](json& j) { j["rope_scaling"]["attention_factor"] = 1.2; },
       "rope_scaling.attention_factor"},
      {"negative vocab", [](json& j) { j["vocab_size"] = -1; }, "vocab_size"},
      {"zero expert width", [](json& j) { j["moe_intermediate_size"] = 0; },
       "moe_intermediate_size"},
      {"negative window", [](json& j) { j["sliding_window"] = -8; }, "sliding_window"},
      {"negative hash layers", [](json& j) { j["num_hash_layers"] = -1; }, "num_hash_layers"},
      {"negative topk", [](json& j) { j["index_topk"] = -4; }, "index_topk"},
      {"two KV heads", [](json& j) { j["num_key_value_heads"] = 2; }, "num_key_value_heads"},
      {"gelu", [](json& j) { j["hidden_act"] = "gelu"; }, "hidden_act"},
      {"attention bias", [](json& j) { j["attention_bias"] = true; }, "attention_bias"},
      {"eos beyond vocab", [](json& j) { j["eos_token_id"] = 512; }, "eos_token_id"},
      {"zero hc_mult", [](json& j) { j["hc_mult"] = 0; }, "hc_mult"},
      {"zero rms eps", [](json& j) { j["rms_norm_eps"] = 0.0; }, "rms_norm_eps"},
  };
  for (const BadCase& bad : cases) expect_rejected(base, bad);
}

TEST(ModelConfig, RejectsInconsistentTransformersConfigs) {
  const json base = tiny_transformers_json();
  const std::vector<BadCase> cases = {
      {"layer_types too short", [](json& j) { j["layer_types"].erase(3); }, "layer_types"},
      {"unknown layer type", [](json& j) { j["layer_types"][1] = "full_attention"; },
       "layer_types[1]"},
      {"HCA rate 4", [](json& j) { j["compress_rates"]["heavily_compressed_attention"] = 4; },
       "compress_rates"},
      {"CSA rate 8", [](json& j) { j["compress_rates"]["compressed_sparse_attention"] = 8; },
       "compress_rates"},
      {"hash after moe",
       [](json& j) {
         j["mlp_layer_types"] = {"hash_moe", "moe", "hash_moe", "moe"};
       },
       "mlp_layer_types[2]"},
      {"unknown mlp type", [](json& j) { j["mlp_layer_types"][0] = "dense"; },
       "mlp_layer_types[0]"},
      {"mlp_layer_types length", [](json& j) { j["mlp_layer_types"].erase(0); }, "mlp_layer_types"},
      {"yarn temperature",
       [](json& j) { j["rope_parameters"]["compress"]["attention_factor"] = 1.277; },
       "rope_parameters.compress.attention_factor"},
      {"yarn on SWA layers", [](json& j) { j["rope_parameters"]["main"]["rope_type"] = "yarn"; },
       "rope_parameters.main.rope_type"},
      {"theta disagreement", [](json& j) { j["compress_rope_theta"] = 40000; },
       "rope_parameters.compress.rope_theta"},
      {"fractional rope dims", [](json& j) { j["partial_rotary_factor"] = 0.3; },
       "partial_rotary_factor"},
      {"rope dims disagree", [](json& j) { j["qk_rope_head_dim"] = 16; }, "qk_rope_head_dim"},
      {"legacy ratios disagree",
       [](json& j) {
         j["compress_ratios"] = {0, 4, 128, 4, 0};
       },
       "compress_ratios"},
      {"odd rope dims",
       [](json& j) {
         j["partial_rotary_factor"] = 33.0 / 96.0;
         j["rope_parameters"]["main"].erase("partial_rotary_factor");
         j["rope_parameters"]["compress"].erase("partial_rotary_factor");
       },
       "qk_rope_head_dim"},
  };
  for (const BadCase& bad : cases) expect_rejected(base, bad);
}

TEST(ModelConfig, LoadNamesTheFile) {
  test::TempDir dir;
  write_file_atomic(dir.file("broken.json"), "{\"model_type\": \"deepseek_v4\",");
  try {
    ModelConfig::load(dir.file("broken.json"));
    ADD_FAILURE() << "accepted broken JSON";
  } catch (const Error& e) {
    EXPECT_EQ(e.file_name(), dir.file("broken.json"));
  }
  EXPECT_THROW(ModelConfig::load(dir.file("missing.json")), Error);
  write_file_atomic(dir.file("list.json"), "[1, 2]");
  EXPECT_THROW(ModelConfig::load(dir.file("list.json")), Error);
}

// The 1-based line of the first occurrence of `needle` in `text`.
long line_of(const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  return 1 + static_cast<long>(std::count(text.begin(), text.begin() + at, '\n'));
}

TEST(ModelConfig, LoadedFileErrorsNameTheLine) {
  test::TempDir dir;
  json j = config_json("tiny-v4");
  j["compress_ratios"][2] = "sixteen";
  const std::string text = j.dump(2);
  write_file_atomic(dir.file("config.json"), text);
  try {
    ModelConfig::load(dir.file("config.json"));
    ADD_FAILURE() << "accepted a string ratio";
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "compress_ratios[2]");
    EXPECT_EQ(e.line_number(), line_of(text, "\"sixteen\""));
    EXPECT_NE(std::string(e.what()).find("expected an integer, got string"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace trex::model
