#include "trex/model/config.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "trex/core/config_reader.hpp"
#include "trex/core/error.hpp"

namespace trex::model {

using json = nlohmann::json;
using config::Reader;

namespace {

// transformers' names for the attention kinds and the compress_rates keys.
constexpr const char* kSlidingName = "sliding_attention";
constexpr const char* kCsaName = "compressed_sparse_attention";
constexpr const char* kHcaName = "heavily_compressed_attention";
constexpr int64_t kCsaRatio = 4;  // the reference: overlap + indexer iff ratio == 4

[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& msg) {
  throw Error(msg).file(source).field(key);
}

// Hugging Face writes unset keys as null and may write 64.0 for 64.
constexpr config::Conventions kHuggingFace{.null_is_absent = true,
                                           .whole_floats_are_integers = true};

// A token id: integer, null (-1) or, for eos_token_id, a list (first entry).
int64_t read_token_id(const config::Reader& r, const std::string& key, int64_t fallback) {
  if (!r.contains(key)) return fallback;
  const config::Reader value = r.at(key);
  if (value.is_null()) return -1;
  if (value.is_array()) return value.size() == 0 ? -1 : value[0].as_integer();
  return value.as_integer();
}

// A RoPE scaling object: {"type" or "rope_type": "yarn", factor,
// original_max_position_embeddings, beta_fast, beta_slow}. "default"/"none"
// mean no scaling. YaRN here is frequency interpolation only (spec §2.8): an
// attention_factor other than 1 would scale the logits and the reference never
// applies one, so it is rejected rather than ignored.
RopeScaling read_rope_scaling(const Reader& r) {
  RopeScaling scaling;
  std::string type = "default";
  if (r.has("rope_type")) type = r.string("rope_type");
  if (r.has("type")) {
    std::string legacy = r.string("type");
    if (r.has("rope_type") && legacy != type) {
      r.fail("type", "disagrees with rope_type ('" + legacy + "' vs '" + type + "')");
    }
    type = legacy;
  }
  if (type == "default" || type == "none") return scaling;
  if (type != "yarn") {
    r.fail(r.has("rope_type") ? "rope_type" : "type",
           "unsupported RoPE scaling type '" + type + "' (DeepSeek-V4 uses 'yarn' or none)");
  }
  scaling.yarn = true;
  scaling.factor = r.number("factor");
  scaling.original_max_position_embeddings = r.integer("original_max_position_embeddings");
  scaling.beta_fast = r.number("beta_fast", 32.0);
  scaling.beta_slow = r.number("beta_slow", 1.0);
  if (r.has("attention_factor") && r.number("attention_factor") != 1.0) {
    r.fail("attention_factor",
           "must be 1 (DeepSeek-V4 applies no YaRN attention-temperature correction)");
  }
  return scaling;
}

json rope_scaling_json(const RopeScaling& scaling, bool transformers_names) {
  json out;
  out[transformers_names ? "rope_type" : "type"] = "yarn";
  out["factor"] = scaling.factor;
  out["original_max_position_embeddings"] = scaling.original_max_position_embeddings;
  out["beta_fast"] = scaling.beta_fast;
  out["beta_slow"] = scaling.beta_slow;
  return out;
}

void read_common(const Reader& r, ModelConfig& c) {
  std::string model_type = r.string("model_type");
  if (model_type != "deepseek_v4") {
    r.fail("model_type", "expected 'deepseek_v4', got '" + model_type + "'");
  }
  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.num_hidden_layers = r.integer("num_hidden_layers");
  c.num_attention_heads = r.integer("num_attention_heads");
  c.num_key_value_heads = r.integer("num_key_value_heads", 1);
  c.head_dim = r.integer("head_dim");
  c.q_lora_rank = r.integer("q_lora_rank");
  c.o_groups = r.integer("o_groups");
  c.o_lora_rank = r.integer("o_lora_rank");
  c.sliding_window = r.integer("sliding_window");
  c.max_position_embeddings = r.integer("max_position_embeddings", 1048576);
  // The indexer keys are only needed when some layer is CSA; validate() checks.
  c.index_n_heads = r.integer("index_n_heads", 0);
  c.index_head_dim = r.integer("index_head_dim", 0);
  c.index_topk = r.integer("index_topk", 0);
  c.n_routed_experts = r.integer("n_routed_experts");
  c.n_shared_experts = r.integer("n_shared_experts", 1);
  c.num_experts_per_tok = r.integer("num_experts_per_tok");
  c.moe_intermediate_size = r.integer("moe_intermediate_size");
  c.scoring_func = r.string("scoring_func", "sqrtsoftplus");
  c.topk_method = r.string("topk_method", "noaux_tc");
  c.norm_topk_prob = r.boolean("norm_topk_prob", true);
  // Missing optional keys take the transformers port's defaults (the V4-Flash values).
  c.routed_scaling_factor = r.number("routed_scaling_factor", 1.5);
  c.swiglu_limit = r.number("swiglu_limit", 10.0);
  c.hc_mult = r.integer("hc_mult", 4);
  c.hc_sinkhorn_iters = r.integer("hc_sinkhorn_iters", 20);
  c.hc_eps = r.number("hc_eps", 1e-6);
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
  c.num_nextn_predict_layers = r.integer("num_nextn_predict_layers", 0);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.bos_token_id = read_token_id(r, "bos_token_id", 0);
  c.eos_token_id = read_token_id(r, "eos_token_id", 1);
  c.initializer_range = r.number("initializer_range", 0.02);
  c.torch_dtype = r.string("torch_dtype", "bfloat16");
  c.expert_dtype = r.string("expert_dtype", "");
  c.rope_theta = r.number("rope_theta", 10000.0);
  c.compress_rope_theta = r.number("compress_rope_theta", 160000.0);

  // Keys whose only supported value is fixed by the architecture.
  std::string act = r.string("hidden_act", "silu");
  if (act != "silu")
    r.fail("hidden_act", "DeepSeek-V4 experts use SwiGLU: expected 'silu', got '" + act + "'");
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (r.boolean(key, false)) r.fail(key, "DeepSeek-V4 has no biases in its linear layers");
  }
  if (r.has("quantization_config")) r.object("quantization_config");  // tolerated, not stored
}

void read_released_scheme(const Reader& r, ModelConfig& c) {
  c.qk_rope_head_dim = r.integer("qk_rope_head_dim");
  c.compress_ratios = r.array("compress_ratios").integers();
  c.num_hash_layers = r.integer("num_hash_layers", 3);
  if (r.has("rope_scaling")) {
    c.rope_scaling = read_rope_scaling(r.object("rope_scaling"));
  }
}

// The transformers port (configuration_deepseek_v4.py): `layer_types` has one
// entry per main layer only (the port does not instantiate MTP), the ratio of
// each kind comes from `compress_rates`, hash layers from `mlp_layer_types`,
// the rope dims from `partial_rotary_factor`, RoPE from `rope_parameters`
// ({"main": {...}, "compress": {...}} or one flat dict that applies to the
// compressed layers).
void read_transformers_scheme(const Reader& r, ModelConfig& c) {
  c.transformers_scheme = true;
  const int64_t n = c.num_hidden_layers;

  int64_t csa_rate = kCsaRatio;
  int64_t hca_rate = 128;
  if (r.has("compress_rates")) {
    const Reader rates = r.object("compress_rates");
    for (const char* key : {"csa", kCsaName}) csa_rate = rates.integer(key, csa_rate);
    for (const char* key : {"hca", kHcaName}) hca_rate = rates.integer(key, hca_rate);
  }
  csa_rate = r.integer("compress_rate_csa", csa_rate);  // the port's legacy top-level keys
  hca_rate = r.integer("compress_rate_hca", hca_rate);
  if (csa_rate != kCsaRatio) {
    r.fail("compress_rates",
           "the CSA rate must be 4 (the reference uses overlapping compression and "
           "the indexer exactly when ratio == 4), got " +
               std::to_string(csa_rate));
  }
  if (hca_rate < 2 || hca_rate == kCsaRatio) {
    r.fail("compress_rates", "the HCA rate must be >= 2 and != 4 (ratio 4 always means CSA), got " +
                                 std::to_string(hca_rate));
  }

  const Reader types = r.array("layer_types");
  if (static_cast<int64_t>(types.size()) != n) {
    r.fail("layer_types", "has " + std::to_string(types.size()) +
                              " entries, num_hidden_layers is " + std::to_string(n));
  }
  c.compress_ratios.clear();
  for (size_t i = 0; i < types.size(); ++i) {
    const std::string type = types[i].as_string();
    if (type == kSlidingName) {
      c.compress_ratios.push_back(0);
    } else if (type == kCsaName) {
      c.compress_ratios.push_back(csa_rate);
    } else if (type == kHcaName) {
      c.compress_ratios.push_back(hca_rate);
    } else {
      types[i].fail("unknown layer type '" + type +
                    "' (expected sliding_attention, "
                    "compressed_sparse_attention or heavily_compressed_attention)");
    }
  }
  // The MTP block is SWA in both releases; a legacy full-length compress_ratios
  // (which the port accepts and ignores when layer_types is given) can say otherwise.
  const int64_t mtp = c.num_nextn_predict_layers;
  if (r.has("compress_ratios")) {
    std::vector<int64_t> legacy = r.array("compress_ratios").integers();
    if (static_cast<int64_t>(legacy.size()) != n + std::max<int64_t>(mtp, 0)) {
      r.fail("compress_ratios", "has " + std::to_string(legacy.size()) +
                                    " entries, expected "
                                    "num_hidden_layers + num_nextn_predict_layers = " +
                                    std::to_string(n + mtp));
    }
    for (int64_t l = 0; l < n; ++l) {
      if (legacy[static_cast<size_t>(l)] != c.compress_ratios[static_cast<size_t>(l)]) {
        r.fail("compress_ratios", "entry " + std::to_string(l) + " disagrees with layer_types");
      }
    }
    c.compress_ratios = legacy;
  } else {
    for (int64_t j = 0; j < mtp; ++j) c.compress_ratios.push_back(0);
  }

  if (r.has("mlp_layer_types")) {
    const Reader mlp = r.array("mlp_layer_types");
    if (static_cast<int64_t>(mlp.size()) != n) {
      r.fail("mlp_layer_types", "has " + std::to_string(mlp.size()) +
                                    " entries, num_hidden_layers is " + std::to_string(n));
    }
    int64_t hash = 0;
    bool seen_moe = false;
    for (size_t i = 0; i < mlp.size(); ++i) {
      const std::string type = mlp[i].as_string();
      if (type == "hash_moe") {
        if (seen_moe) mlp[i].fail("hash_moe layers must come first (layers 0..k-1)");
        ++hash;
      } else if (type == "moe") {
        seen_moe = true;
      } else {
        mlp[i].fail("unknown MLP layer type '" + type + "' (expected hash_moe or moe)");
      }
    }
    c.num_hash_layers = hash;
  } else {
    c.num_hash_layers = std::min(n, r.integer("num_hash_layers", 3));
  }

  // RoPE.
  std::vector<std::pair<Reader, double>> rotary_factors;  // where each was found
  if (r.has("partial_rotary_factor")) {
    rotary_factors.emplace_back(r.at("partial_rotary_factor"), r.number("partial_rotary_factor"));
  }
  if (r.has("rope_parameters")) {
    const Reader params = r.object("rope_parameters");
    bool nested = params.has("main") && params.at("main").is_object() && params.has("compress") &&
                  params.at("compress").is_object();
    if (nested) {
      const Reader main = params.object("main");
      const Reader compress = params.object("compress");
      if (main.has("rope_theta")) {
        double theta = main.number("rope_theta");
        if (r.has("rope_theta") && r.number("rope_theta") != theta) {
          main.fail("rope_theta", "disagrees with the top-level rope_theta");
        }
        c.rope_theta = theta;
      }
      for (const char* key : {"rope_type", "type"}) {
        std::string type = main.string(key, "default");
        if (type != "default" && type != "none") {
          main.fail(key, "sliding-window layers use plain RoPE in DeepSeek-V4 (no scaling), got '" +
                             type + "'");
        }
      }
      if (compress.has("rope_theta")) {
        double theta = compress.number("rope_theta");
        if (r.has("compress_rope_theta") && r.number("compress_rope_theta") != theta) {
          compress.fail("rope_theta", "disagrees with the top-level compress_rope_theta");
        }
        c.compress_rope_theta = theta;
      }
      c.rope_scaling = read_rope_scaling(compress);
      for (const Reader* sub : {&main, &compress}) {
        if (sub->has("partial_rotary_factor")) {
          rotary_factors.emplace_back(sub->at("partial_rotary_factor"),
                                      sub->number("partial_rotary_factor"));
        }
      }
    } else {
      c.rope_scaling = read_rope_scaling(params);
    }
  } else if (r.has("rope_scaling")) {
    c.rope_scaling = read_rope_scaling(r.object("rope_scaling"));
  }

  // qk_rope_head_dim = int(head_dim * partial_rotary_factor), default factor 64/512.
  int64_t rope_dims = -1;
  for (const auto& [where, factor] : rotary_factors) {
    double dims = static_cast<double>(c.head_dim) * factor;
    int64_t rounded = std::llround(dims);
    if (!(factor > 0.0) || std::fabs(dims - static_cast<double>(rounded)) > 1e-6) {
      where.fail("head_dim * partial_rotary_factor must be a whole number of dims");
    }
    if (rope_dims >= 0 && rope_dims != rounded)
      where.fail("disagrees with another partial_rotary_factor");
    rope_dims = rounded;
  }
  if (r.has("qk_rope_head_dim")) {
    int64_t explicit_dims = r.integer("qk_rope_head_dim");
    if (rope_dims >= 0 && explicit_dims != rope_dims) {
      r.fail("qk_rope_head_dim",
             "disagrees with partial_rotary_factor (" + std::to_string(rope_dims) + " dims)");
    }
    rope_dims = explicit_dims;
  }
  if (rope_dims < 0) rope_dims = c.head_dim / 8;  // the port's default factor 64 / 512
  c.qk_rope_head_dim = rope_dims;
}

ModelConfig read_config(const Reader& r, const std::string& source) {
  ModelConfig c;
  read_common(r, c);
  if (r.has("layer_types")) {
    read_transformers_scheme(r, c);
  } else if (r.has("compress_ratios")) {
    read_released_scheme(r, c);
  } else {
    r.fail("compress_ratios",
           "required key is missing (or give the transformers scheme's layer_types)");
  }
  c.validate(source);
  return c;
}

}  // namespace

AttentionKind ModelConfig::attention_kind(int64_t layer) const {
  int64_t m = ratio(layer);
  if (m == 0) return AttentionKind::kSliding;
  if (m == kCsaRatio) return AttentionKind::kCompressedSparse;
  return AttentionKind::kHeavilyCompressed;
}

bool ModelConfig::has_csa_layer() const {
  return std::find(compress_ratios.begin(), compress_ratios.end(), kCsaRatio) !=
         compress_ratios.end();
}

ModelConfig ModelConfig::from_json(const json& json_value, const std::string& source) {
  return read_config(Reader(json_value, source, kHuggingFace), source);
}

ModelConfig ModelConfig::load(const std::string& path) {
  const config::Document document = config::Document::load(path, config::Format::kJson);
  return read_config(document.root(kHuggingFace), path);
}

void ModelConfig::validate(const std::string& source) const {
  auto check = [&](bool ok, const std::string& key, const std::string& msg) {
    if (!ok) fail(source, key, msg);
  };
  auto positive = [&](int64_t value, const std::string& key) {
    check(value > 0, key, "must be > 0, got " + std::to_string(value));
  };
  auto non_negative = [&](int64_t value, const std::string& key) {
    check(value >= 0, key, "must be >= 0, got " + std::to_string(value));
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(head_dim, "head_dim");
  positive(qk_rope_head_dim, "qk_rope_head_dim");
  positive(q_lora_rank, "q_lora_rank");
  positive(o_groups, "o_groups");
  positive(o_lora_rank, "o_lora_rank");
  positive(sliding_window, "sliding_window");
  positive(max_position_embeddings, "max_position_embeddings");
  non_negative(index_n_heads, "index_n_heads");
  non_negative(index_head_dim, "index_head_dim");
  non_negative(index_topk, "index_topk");
  positive(n_routed_experts, "n_routed_experts");
  positive(num_experts_per_tok, "num_experts_per_tok");
  positive(moe_intermediate_size, "moe_intermediate_size");
  non_negative(num_hash_layers, "num_hash_layers");
  positive(hc_mult, "hc_mult");
  positive(hc_sinkhorn_iters, "hc_sinkhorn_iters");
  non_negative(num_nextn_predict_layers, "num_nextn_predict_layers");

  check(num_key_value_heads == 1, "num_key_value_heads",
        "DeepSeek-V4 has one shared K=V latent (MQA): must be 1, got " +
            std::to_string(num_key_value_heads));
  check(head_dim > qk_rope_head_dim, "head_dim",
        "must exceed qk_rope_head_dim (" + std::to_string(qk_rope_head_dim) + "), got " +
            std::to_string(head_dim));
  check(qk_rope_head_dim % 2 == 0, "qk_rope_head_dim",
        "RoPE rotates pairs of dims: must be even, got " + std::to_string(qk_rope_head_dim));
  check(num_attention_heads % o_groups == 0, "o_groups",
        "num_attention_heads (" + std::to_string(num_attention_heads) +
            ") must be divisible by o_groups (" + std::to_string(o_groups) + ")");
  check(num_experts_per_tok <= n_routed_experts, "num_experts_per_tok",
        "selects " + std::to_string(num_experts_per_tok) + " experts but n_routed_experts is " +
            std::to_string(n_routed_experts));
  check(num_hash_layers <= num_hidden_layers, "num_hash_layers",
        std::to_string(num_hash_layers) + " hash layers but num_hidden_layers is " +
            std::to_string(num_hidden_layers));
  check(n_shared_experts == 1, "n_shared_experts",
        "the reference implementation asserts exactly one shared expert (its width is "
        "moe_intermediate_size); got " +
            std::to_string(n_shared_experts));

  check(static_cast<int64_t>(compress_ratios.size()) == total_layers(), "compress_ratios",
        "has " + std::to_string(compress_ratios.size()) +
            " entries, expected num_hidden_layers + num_nextn_predict_layers = " +
            std::to_string(total_layers()) + " (one per layer, then one per MTP layer)");
  for (size_t i = 0; i < compress_ratios.size(); ++i) {
    int64_t m = compress_ratios[i];
    check(m == 0 || m >= 2, "compress_ratios",
          "entry " + std::to_string(i) + " is " + std::to_string(m) +
              ": must be 0 (SWA), 4 (CSA) or another ratio >= 2 (HCA)");
  }
  if (has_csa_layer()) {
    positive(index_n_heads, "index_n_heads");
    positive(index_head_dim, "index_head_dim");
    positive(index_topk, "index_topk");
    check(index_head_dim >= qk_rope_head_dim, "index_head_dim",
          "the indexer applies RoPE to its last qk_rope_head_dim (" +
              std::to_string(qk_rope_head_dim) + ") dims: must be >= that, got " +
              std::to_string(index_head_dim));
  }

  static const std::set<std::string> kScoring = {"sqrtsoftplus", "softmax", "sigmoid"};
  check(kScoring.count(scoring_func) == 1, "scoring_func",
        "unknown scoring function '" + scoring_func +
            "' (expected sqrtsoftplus, softmax or sigmoid)");
  check(topk_method == "noaux_tc", "topk_method",
        "DeepSeek-V4 routes with bias-corrected top-k: expected 'noaux_tc', got '" + topk_method +
            "'");
  check(routed_scaling_factor > 0.0, "routed_scaling_factor", "must be > 0");
  check(hc_eps > 0.0, "hc_eps", "must be > 0");
  check(rms_norm_eps > 0.0, "rms_norm_eps", "must be > 0");
  check(rope_theta > 0.0, "rope_theta", "must be > 0");
  check(compress_rope_theta > 0.0, "compress_rope_theta", "must be > 0");
  check(initializer_range >= 0.0, "initializer_range", "must be >= 0");
  check(bos_token_id < vocab_size && bos_token_id >= -1, "bos_token_id",
        "must be a token id below vocab_size");
  check(eos_token_id < vocab_size && eos_token_id >= -1, "eos_token_id",
        "must be a token id below vocab_size");
  if (rope_scaling.yarn) {
    check(rope_scaling.factor > 0.0, "rope_scaling.factor", "must be > 0");
    check(rope_scaling.original_max_position_embeddings > 0,
          "rope_scaling.original_max_position_embeddings", "must be > 0");
    check(rope_scaling.beta_fast > 0.0, "rope_scaling.beta_fast", "must be > 0");
    check(rope_scaling.beta_slow > 0.0, "rope_scaling.beta_slow", "must be > 0");
  }
  if (transformers_scheme) {
    // layer_types + compress_rates can express one HCA ratio only.
    int64_t hca = 0;
    for (int64_t l = 0; l < num_hidden_layers; ++l) {
      int64_t m = compress_ratios[static_cast<size_t>(l)];
      if (m == 0 || m == kCsaRatio) continue;
      check(hca == 0 || hca == m, "compress_ratios",
            "the transformers scheme (compress_rates) allows one HCA ratio, got " +
                std::to_string(hca) + " and " + std::to_string(m));
      hca = m;
    }
  }
}

json ModelConfig::to_json() const {
  json j;
  j["model_type"] = "deepseek_v4";
  j["architectures"] = json::array({"DeepseekV4ForCausalLM"});
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["q_lora_rank"] = q_lora_rank;
  j["o_groups"] = o_groups;
  j["o_lora_rank"] = o_lora_rank;
  j["sliding_window"] = sliding_window;
  j["rope_theta"] = rope_theta;
  j["compress_rope_theta"] = compress_rope_theta;
  j["max_position_embeddings"] = max_position_embeddings;
  j["index_n_heads"] = index_n_heads;
  j["index_head_dim"] = index_head_dim;
  j["index_topk"] = index_topk;
  j["n_routed_experts"] = n_routed_experts;
  j["n_shared_experts"] = n_shared_experts;
  j["num_experts_per_tok"] = num_experts_per_tok;
  j["moe_intermediate_size"] = moe_intermediate_size;
  j["scoring_func"] = scoring_func;
  j["topk_method"] = topk_method;
  j["norm_topk_prob"] = norm_topk_prob;
  j["routed_scaling_factor"] = routed_scaling_factor;
  j["swiglu_limit"] = swiglu_limit;
  j["hidden_act"] = "silu";
  j["hc_mult"] = hc_mult;
  j["hc_sinkhorn_iters"] = hc_sinkhorn_iters;
  j["hc_eps"] = hc_eps;
  j["rms_norm_eps"] = rms_norm_eps;
  j["num_nextn_predict_layers"] = num_nextn_predict_layers;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["bos_token_id"] = bos_token_id >= 0 ? json(bos_token_id) : json(nullptr);
  j["eos_token_id"] = eos_token_id >= 0 ? json(eos_token_id) : json(nullptr);
  j["attention_bias"] = false;
  j["initializer_range"] = initializer_range;
  j["torch_dtype"] = torch_dtype;
  if (!expert_dtype.empty()) j["expert_dtype"] = expert_dtype;

  if (!transformers_scheme) {
    j["qk_rope_head_dim"] = qk_rope_head_dim;
    j["compress_ratios"] = compress_ratios;
    j["num_hash_layers"] = num_hash_layers;
    if (rope_scaling.yarn) j["rope_scaling"] = rope_scaling_json(rope_scaling, false);
    return j;
  }

  validate("ModelConfig::to_json");  // the scheme can express this config (one HCA ratio)
  int64_t hca_rate = 128;
  json layer_types = json::array();
  for (int64_t l = 0; l < num_hidden_layers; ++l) {
    switch (attention_kind(l)) {
      case AttentionKind::kSliding:
        layer_types.push_back(kSlidingName);
        break;
      case AttentionKind::kCompressedSparse:
        layer_types.push_back(kCsaName);
        break;
      case AttentionKind::kHeavilyCompressed:
        layer_types.push_back(kHcaName);
        hca_rate = ratio(l);
        break;
    }
  }
  j["layer_types"] = layer_types;
  j["compress_rates"] = {{kCsaName, kCsaRatio}, {kHcaName, hca_rate}};
  json mlp_types = json::array();
  for (int64_t l = 0; l < num_hidden_layers; ++l)
    mlp_types.push_back(is_hash_layer(l) ? "hash_moe" : "moe");
  j["mlp_layer_types"] = mlp_types;
  // The port has no place for the MTP layers' ratios; it reads (and then
  // ignores) the legacy full-length compress_ratios, so a non-SWA MTP block
  // travels there.
  for (int64_t l = num_hidden_layers; l < total_layers(); ++l) {
    if (ratio(l) != 0) {
      j["compress_ratios"] = compress_ratios;
      break;
    }
  }
  double rotary_factor = static_cast<double>(qk_rope_head_dim) / static_cast<double>(head_dim);
  j["partial_rotary_factor"] = rotary_factor;
  json main = {{"rope_type", "default"},
               {"rope_theta", rope_theta},
               {"partial_rotary_factor", rotary_factor}};
  json compress = {{"rope_type", "default"}};
  if (rope_scaling.yarn) {
    compress = rope_scaling_json(rope_scaling, true);
    compress["attention_factor"] = 1.0;
  }
  compress["rope_theta"] = compress_rope_theta;
  compress["partial_rotary_factor"] = rotary_factor;
  j["rope_parameters"] = {{"main", main}, {"compress", compress}};
  return j;
}

}  // namespace trex::model
