#include "trex/model/param_counts.hpp"

namespace trex::model {

namespace {

// One compressor of width c_x: wkv and wgate [coff·c_x, d], ape [m, coff·c_x],
// norm [c_x]; coff = 2 with overlap (ratio 4).
int64_t one_compressor(const ModelConfig& config, int64_t ratio, int64_t width) {
  const int64_t coff = ratio == 4 ? 2 : 1;
  return 2 * coff * width * config.hidden_size + ratio * coff * width + width;
}

// Adds layer `layer` (main or MTP) to `all` and `activated`.
void add_layer(const ModelConfig& config, int64_t layer, ParamBreakdown& all,
               ParamBreakdown& activated) {
  const int64_t d = config.hidden_size;
  const int64_t attention = attention_base_params(config);
  const int64_t compressors = compressor_params(config, config.ratio(layer));
  const int64_t expert = routed_expert_params(config);
  const int64_t shared = config.n_shared_experts * expert;
  const int64_t router =
      config.n_routed_experts * d + (config.is_hash_layer(layer) ? 0 : config.n_routed_experts);
  const int64_t mhc = 2 * mhc_site_params(config);
  const int64_t norms = 2 * d;  // attn_norm, ffn_norm
  for (ParamBreakdown* p : {&all, &activated}) {
    p->attention += attention;
    p->compressors += compressors;
    p->shared_experts += shared;
    p->router += router;
    p->mhc += mhc;
    p->norms += norms;
  }
  all.routed_experts += config.n_routed_experts * expert;
  activated.routed_experts += config.num_experts_per_tok * expert;
}

}  // namespace

int64_t attention_base_params(const ModelConfig& c) {
  const int64_t d = c.hidden_size;
  const int64_t wq_a = c.q_lora_rank * d + c.q_lora_rank;  // + q_norm
  const int64_t wq_b = c.num_attention_heads * c.head_dim * c.q_lora_rank;
  const int64_t wkv = c.head_dim * d + c.head_dim;  // + kv_norm
  const int64_t wo_a = c.o_groups * c.o_lora_rank * c.heads_per_group() * c.head_dim;
  const int64_t wo_b = d * c.o_groups * c.o_lora_rank;
  const int64_t sink = c.num_attention_heads;
  return wq_a + wq_b + wkv + wo_a + wo_b + sink;
}

int64_t compressor_params(const ModelConfig& c, int64_t ratio) {
  if (ratio == 0) return 0;
  int64_t total = one_compressor(c, ratio, c.head_dim);
  if (ratio == 4) {
    total += c.index_n_heads * c.index_head_dim * c.q_lora_rank;  // indexer wq_b
    total += c.index_n_heads * c.hidden_size;                     // weights_proj
    total += one_compressor(c, 4, c.index_head_dim);
  }
  return total;
}

int64_t routed_expert_params(const ModelConfig& c) {
  return 3 * c.hidden_size * c.moe_intermediate_size;
}

int64_t mhc_site_params(const ModelConfig& c) {
  return c.hc_mix_dim() * c.hc_mult * c.hidden_size + c.hc_mix_dim() + 3;
}

int64_t hc_head_params(const ModelConfig& c) {
  return c.hc_mult * c.hc_mult * c.hidden_size + c.hc_mult + 1;
}

ParamCounts count_parameters(const ModelConfig& c) {
  ParamCounts counts;
  const int64_t d = c.hidden_size;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    add_layer(c, l, counts.main, counts.main_activated);
  for (ParamBreakdown* p : {&counts.main, &counts.main_activated}) {
    p->mhc += hc_head_params(c);
    p->norms += d;  // final norm
    p->head = c.tie_word_embeddings ? 0 : c.vocab_size * d;
  }
  counts.main.embed = c.vocab_size * d;
  // A tied head is the embedding table used as a GEMM: activated through the head.
  if (c.tie_word_embeddings) counts.main_activated.head = c.vocab_size * d;

  for (int64_t l = c.num_hidden_layers; l < c.total_layers(); ++l) {
    add_layer(c, l, counts.mtp, counts.mtp_activated);
    for (ParamBreakdown* p : {&counts.mtp, &counts.mtp_activated}) {
      p->mtp_projections += 2 * d * d;  // e_proj, h_proj
      p->norms += 3 * d;                // enorm, hnorm, norm
      p->mhc += hc_head_params(c);
    }
  }
  return counts;
}

}  // namespace trex::model
