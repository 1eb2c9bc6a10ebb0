#pragma once
// DeepSeek-V4 model configuration: the HF `config.json` (model_type
// "deepseek_v4"), in either the released key scheme (`compress_ratios`,
// `num_hash_layers`, `rope_scaling`, ...) or the transformers port's scheme
// (`layer_types` + `compress_rates`, `mlp_layer_types`, `rope_parameters`).
// See docs/deepseek-v4.md and ../shared/docs/deepseek-v4-spec.md §1.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trex::model {

struct RopeScaling {
  bool yarn = false;  // false: no scaling on compressed layers either
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

enum class AttentionKind { kSliding, kCompressedSparse, kHeavilyCompressed };  // SWA, CSA, HCA

struct ModelConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 1;
  int64_t head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t q_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t o_lora_rank = 0;
  int64_t sliding_window = 0;
  // One entry per layer plus one per MTP layer (the last entries). 0 = SWA,
  // 4 = CSA (overlapping compressor + indexer), any other m > 0 = HCA.
  std::vector<int64_t> compress_ratios;
  double rope_theta = 10000.0;
  double compress_rope_theta = 160000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 0;
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 1;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_hash_layers = 0;
  std::string scoring_func = "sqrtsoftplus";
  std::string topk_method = "noaux_tc";
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  double swiglu_limit = 0.0;  // <= 0 disables the clamp
  int64_t hc_mult = 4;
  int64_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double rms_norm_eps = 1e-6;
  int64_t num_nextn_predict_layers = 0;
  bool tie_word_embeddings = false;
  int64_t bos_token_id = 0;  // -1: null in the file
  int64_t eos_token_id = 1;  // -1: null; a list in the file keeps its first entry
  double initializer_range = 0.02;
  std::string torch_dtype = "bfloat16";
  std::string expert_dtype;  // "fp4", "fp8" or empty

  // Which key scheme the file used; to_json writes the same one back.
  bool transformers_scheme = false;

  // ---- derived ----
  // Layer index l in [0, num_hidden_layers + num_nextn_predict_layers); MTP
  // layer j has index num_hidden_layers + j.
  int64_t ratio(int64_t layer) const { return compress_ratios.at(static_cast<size_t>(layer)); }
  AttentionKind attention_kind(int64_t layer) const;
  bool is_hash_layer(int64_t layer) const { return layer < num_hash_layers; }  // MTP never
  int64_t nope_head_dim() const { return head_dim - qk_rope_head_dim; }
  int64_t hc_mix_dim() const { return (2 + hc_mult) * hc_mult; }  // 24 for hc_mult 4
  int64_t heads_per_group() const { return num_attention_heads / o_groups; }
  // Main layers plus MTP layers: the length compress_ratios must have.
  int64_t total_layers() const { return num_hidden_layers + num_nextn_predict_layers; }
  bool has_csa_layer() const;  // any layer (main or MTP) with ratio 4

  // Parses and validates. `source` names the file in error messages; every
  // error names the offending key.
  static ModelConfig from_json(const nlohmann::json& json, const std::string& source);
  static ModelConfig load(const std::string& path);
  nlohmann::json to_json() const;
  void validate(const std::string& source) const;
};

}  // namespace trex::model
