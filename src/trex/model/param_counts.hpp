#pragma once
// Parameter counts of a DeepSeek-V4 config, from the tensor shapes of spec §4.
// Conventions (the model card's, same as DeepSeek-V3): the headline total
// excludes the MTP module; "activated per token" counts everything a token
// touches except the routed experts it is not sent to and the input-embedding
// table (a lookup), and includes the LM head. The hash layers' tid2eid table is
// a fixed buffer, not a parameter. See docs/deepseek-v4.md.
#include <cstdint>

#include "trex/model/config.hpp"

namespace trex::model {

struct ParamBreakdown {
  int64_t attention = 0;       // wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b, attn_sink
  int64_t compressors = 0;     // KV compressors (CSA, HCA) + CSA lightning indexers
  int64_t routed_experts = 0;  // w1, w2, w3 of every (or, activated: every selected) routed expert
  int64_t shared_experts = 0;
  int64_t router = 0;  // ffn.gate.weight, + ffn.gate.bias on score-routed layers
  int64_t mhc = 0;     // hc_attn_*, hc_ffn_*, hc_head_*
  int64_t embed = 0;
  int64_t head = 0;
  int64_t norms = 0;            // attn_norm, ffn_norm, final norm; MTP: + enorm, hnorm
  int64_t mtp_projections = 0;  // MTP e_proj + h_proj
  int64_t total() const {
    return attention + compressors + routed_experts + shared_experts + router + mhc + embed + head +
           norms + mtp_projections;
  }
};

struct ParamCounts {
  ParamBreakdown main;            // the model without MTP
  ParamBreakdown main_activated;  // per token, without MTP
  ParamBreakdown mtp;             // all MTP layers (embed and head are shared, not counted again)
  ParamBreakdown mtp_activated;   // per token in the MTP layers
  int64_t total() const { return main.total(); }
  int64_t activated() const { return main_activated.total(); }
  int64_t mtp_total() const { return mtp.total(); }
};

// One layer's pieces.
int64_t attention_base_params(const ModelConfig& config);  // same for every layer
// Main KV compressor for ratio m (0 for SWA) plus, for CSA (m == 4), the indexer
// with its own 4-overlap compressor.
int64_t compressor_params(const ModelConfig& config, int64_t ratio);
int64_t routed_expert_params(const ModelConfig& config);  // one expert: 3·d·I
int64_t mhc_site_params(const ModelConfig& config);       // one mHC site: fn + base + scale
int64_t hc_head_params(const ModelConfig& config);

ParamCounts count_parameters(const ModelConfig& config);

}  // namespace trex::model
