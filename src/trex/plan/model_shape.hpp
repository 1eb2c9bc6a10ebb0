#pragma once
// What the planner needs to know about a model, per layer: parameters (split
// into the part every EP rank replicates and the routed experts EP shards),
// training FLOPs per token in the Megatron-Bridge convention (split into
// dense GEMMs, routed-expert GEMMs and core attention), stored activation bytes
// under each recompute policy, and the HBM traffic of the non-GEMM ops.
//
// Two sources: a DeepSeek-V4 config (model_type "deepseek_v4", through
// model::ModelConfig, model::flops_per_token and model::count_parameters) and
// a DeepSeek-V3-shaped config (model_type "deepseek_v3": MLA + MoE, only the
// fields listed in docs/planner.md), needed for the published V3 validation
// points. Nothing else of the engine is read. See docs/planner.md.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trex::plan {

enum class LayerKind { kDense, kMoE, kMtp };

struct LayerShape {
  LayerKind kind = LayerKind::kMoE;
  bool has_experts = false;
  double dense_params = 0;   // attention, norms, router, shared expert, dense FFN, mHC
  double expert_params = 0;  // all routed experts of the layer (EP shards them)
  // Training FLOPs per token (forward + dgrad + wgrad), Megatron-Bridge convention.
  double gemm_flops = 0;       // non-expert GEMMs (projections, shared expert, dense FFN, ...)
  double expert_flops = 0;     // routed-expert GEMMs (top-k of them)
  double attention_flops = 0;  // core attention (QKᵀ, PV); V4: + the indexer's dense scoring
  // Forward FLOPs per token re-run by selective recompute (the up-projections).
  double selective_recompute_flops = 0;
  // Stored activation bytes per token (BF16) for the backward pass.
  double act_bytes_none = 0;       // no recompute
  double act_bytes_selective = 0;  // norms, mHC and up-projections recomputed
  double act_bytes_full = 0;       // only the layer input kept
  // Forward HBM traffic per token of the non-GEMM ops (norms, activations,
  // routing, permutation, mHC, softmax statistics), unfused kernels.
  double vector_bytes = 0;
  // Extra forward HBM traffic per token of unfused kernels only: V4's sparse
  // attention materialising the gathered window + selected KV entries.
  double unfused_extra_bytes = 0;
  // Stored bytes per token that FP8 training caches at 1 byte instead of 2
  // (routed-expert inputs, attention output-projection input; DeepSeek-V3 §3.3).
  double fp8_cacheable_bytes = 0;
  // Σ K over the layer's forward GEMMs per token (routed experts × top-k): the
  // elements FP8 training quantises (and transposes for the backward).
  double gemm_input_elements = 0;
  int64_t gemm_calls = 0;    // forward GEMM launches per layer
  int64_t vector_calls = 0;  // forward non-GEMM launches per layer, unfused kernels
};

struct ModelShape {
  std::string name;
  std::string family;   // "deepseek_v4" or "deepseek_v3"
  int64_t seq_len = 0;  // attention terms were evaluated at this length
  int64_t hidden = 0;
  int64_t residual_width = 0;  // what PP sends per token: hidden (V3) or hc_mult·hidden (V4)
  int64_t vocab = 0;
  int64_t n_experts = 0;
  int64_t top_k = 0;
  int64_t expert_ffn = 0;
  int64_t min_matrix_dim = 0;
  // Group-limited routing (DeepSeek-V3 n_group / topk_group): a token's experts
  // lie in at most `routed_group_limit` of `routed_groups` groups; 0 = none.
  int64_t routed_groups = 0;
  int64_t routed_group_limit = 0;  // typical smaller side of a dense weight (Muon cost)
  std::vector<LayerShape> layers;  // main layers, then MTP layers
  double embed_params = 0;
  double head_params = 0;
  double head_flops = 0;  // LM head training FLOPs per token, all outputs (1 + MTP)
  // Totals: the model's own counters (card conventions), for reports.
  double total_params = 0;           // without MTP
  double activated_params = 0;       // per token, without MTP
  double model_flops_per_token = 0;  // Megatron-Bridge convention incl. MTP; MFU numerator

  double all_params() const;  // everything a training run holds (incl. MTP)
};

// Reads model_type and dispatches. Errors name the file and field.
ModelShape load_model_shape(const std::string& path, int64_t seq_len);
ModelShape model_shape_from_json(const nlohmann::json& json, const std::string& source,
                                 int64_t seq_len);

}  // namespace trex::plan
