#pragma once
// Model FLOPs per token in the Megatron-Bridge convention for DeepSeek-V4
// (flop_utils.py, `dsv4_hybrid`): 2 FLOPs per multiply-add, training = 3 ×
// forward (forward + dgrad + wgrad), recomputation not counted, router GEMM,
// mHC, hash gate and embedding lookup not counted, LM head counted once per
// output (1 + MTP depths). Attention is counted over the keys each query
// actually uses (window + selected/visible compressed entries); the CSA
// indexer's scoring is counted dense. Every term and formula is in
// docs/deepseek-v4.md.
#include <cstdint>
#include <span>

#include "trex/model/config.hpp"

namespace trex::model {

// The documents of a (packed) batch: Σ Lᵢ and Σ Lᵢ² over documents i.
// Attention terms use L_eff = Σ Lᵢ² / Σ Lᵢ (Bridge's core_attn_seq_factor);
// linear terms are per token.
struct SequenceStats {
  double tokens = 0.0;          // Σ Lᵢ
  double squared_tokens = 0.0;  // Σ Lᵢ²

  static SequenceStats uniform(int64_t seq_len, int64_t sequences = 1);
  static SequenceStats from_lengths(std::span<const int64_t> lengths);
  double attention_length() const { return squared_tokens / tokens; }
};

// Training FLOPs per token (forward + backward).
struct FlopsBreakdown {
  double projections =
      0.0;  // Q-LoRA down/up + q norm, KV proj + norm, grouped output (main layers)
  double attention_swa = 0.0;   // core attention (QKᵀ and PV) of ratio-0 layers
  double attention_csa = 0.0;   // ratio-4 layers: window + selected compressed entries
  double attention_hca = 0.0;   // other ratios: window + all visible compressed entries
  double compressor = 0.0;      // main KV compressors' projections
  double indexer = 0.0;         // indexer projections + dense scoring of every compressed key
  double routed_experts = 0.0;  // top-k routed SwiGLU experts (main layers)
  double shared_experts = 0.0;  // (main layers)
  double mtp = 0.0;      // the counted MTP layers: their block (all terms above), e/h proj, norms
  double lm_head = 0.0;  // d·V GEMM for the main output and each counted MTP output
  double total() const {
    return projections + attention_swa + attention_csa + attention_hca + compressor + indexer +
           routed_experts + shared_experts + mtp + lm_head;
  }
  double six_n_active = 0.0;  // 6 × activated parameters without MTP, for comparison
};

// `mtp_layers_counted` in [0, num_nextn_predict_layers]: MTP depths run in
// training (Bridge counts them; 0 = main model only).
FlopsBreakdown flops_per_token(const ModelConfig& config, const SequenceStats& sequences,
                               int64_t mtp_layers_counted);
FlopsBreakdown flops_per_token(const ModelConfig& config, int64_t seq_len,
                               int64_t mtp_layers_counted);
// FLOPs of one training step over the batch: flops_per_token(...).total() × Σ Lᵢ.
double training_step_flops(const ModelConfig& config, const SequenceStats& sequences,
                           int64_t mtp_layers_counted);

}  // namespace trex::model
