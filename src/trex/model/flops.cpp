#include "trex/model/flops.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "trex/core/error.hpp"
#include "trex/model/param_counts.hpp"

namespace trex::model {

namespace {

// Forward multiply-adds per token of one layer, split like FlopsBreakdown.
// Bridge's per-layer terms, generalised from ratios {0, 4, 128} to any HCA ratio.
struct LayerMacs {
  double projections = 0, swa = 0, csa = 0, hca = 0, compressor = 0, indexer = 0, routed = 0,
         shared = 0;
  double sum() const {
    return projections + swa + csa + hca + compressor + indexer + routed + shared;
  }
};

LayerMacs layer_macs(const ModelConfig& c, int64_t layer, double attention_length) {
  const double d = static_cast<double>(c.hidden_size);
  const double heads = static_cast<double>(c.num_attention_heads);
  const double head_dim = static_cast<double>(c.head_dim);  // c: query/key/value width
  const double q_lora = static_cast<double>(c.q_lora_rank);
  const double window = static_cast<double>(c.sliding_window);
  LayerMacs m;
  // Q: down d→d_c, (q norm), up d_c→H·c; KV: d→c (+ norm); O: H·c→g·d_g (block diagonal), g·d_g→d.
  m.projections = q_lora * (d + heads * head_dim + 1) + (d * head_dim + head_dim) +
                  (heads * head_dim * static_cast<double>(c.o_lora_rank) +
                   static_cast<double>(c.o_groups * c.o_lora_rank) * d);
  // Core attention: QKᵀ and PV, c each, per key.
  const int64_t ratio = c.ratio(layer);
  const double per_key = heads * head_dim * 2;
  switch (c.attention_kind(layer)) {
    case AttentionKind::kSliding:
      m.swa = per_key * window;
      break;
    case AttentionKind::kHeavilyCompressed: {
      // All visible compressed entries: on average half of ⌊L/m⌋.
      double visible = std::floor(attention_length / static_cast<double>(ratio)) / 2;
      m.hca = per_key * (window + visible);
      m.compressor = d * head_dim * 2;  // wkv + wgate, d→c each
      break;
    }
    case AttentionKind::kCompressedSparse: {
      // k = min(top-k, ⌊L/4⌋) selected, minus the early queries that see fewer
      // than k blocks: average k·(1 − 4k/(2L)).
      double blocks = std::floor(attention_length / 4);
      double k = std::min(static_cast<double>(c.index_topk), blocks);
      double selected = k > 0 ? k * (1 - k * 4 / (2 * attention_length)) : 0;
      m.csa = per_key * (window + selected);
      m.compressor = d * 2 * head_dim * 2;  // wkv + wgate, d→2c each (overlap)
      const double idx_heads = static_cast<double>(c.index_n_heads);
      const double idx_dim = static_cast<double>(c.index_head_dim);
      m.indexer = d * 2 * idx_dim * 2              // indexer compressor wkv + wgate
                  + q_lora * idx_heads * idx_dim   // indexer wq_b
                  + d * idx_heads                  // weights_proj
                  + idx_heads * idx_dim * blocks;  // dense scoring of every compressed key
      break;
    }
  }
  const double inter = static_cast<double>(c.moe_intermediate_size);
  m.routed = d * inter * 3 * static_cast<double>(c.num_experts_per_tok);
  m.shared = d * inter * 3 * static_cast<double>(c.n_shared_experts);
  return m;
}

}  // namespace

SequenceStats SequenceStats::uniform(int64_t seq_len, int64_t sequences) {
  require(seq_len > 0, "sequence length must be > 0, got " + std::to_string(seq_len));
  require(sequences > 0, "sequence count must be > 0, got " + std::to_string(sequences));
  const double l = static_cast<double>(seq_len), n = static_cast<double>(sequences);
  return {n * l, n * l * l};
}

SequenceStats SequenceStats::from_lengths(std::span<const int64_t> lengths) {
  SequenceStats s;
  for (int64_t len : lengths) {
    require(len > 0, "document length must be > 0, got " + std::to_string(len));
    s.tokens += static_cast<double>(len);
    s.squared_tokens += static_cast<double>(len) * static_cast<double>(len);
  }
  require(s.tokens > 0, "no documents given");
  return s;
}

FlopsBreakdown flops_per_token(const ModelConfig& c, const SequenceStats& sequences,
                               int64_t mtp_layers_counted) {
  require(sequences.tokens > 0 && sequences.squared_tokens > 0,
          "sequence statistics must be positive");
  require(mtp_layers_counted >= 0 && mtp_layers_counted <= c.num_nextn_predict_layers,
          "mtp_layers_counted must be in [0, num_nextn_predict_layers = " +
              std::to_string(c.num_nextn_predict_layers) + "], got " +
              std::to_string(mtp_layers_counted));
  const double length = sequences.attention_length();
  constexpr double kTrain = 6;  // 2 FLOPs per MAC × (forward + dgrad + wgrad)
  FlopsBreakdown f;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LayerMacs m = layer_macs(c, l, length);
    f.projections += kTrain * m.projections;
    f.attention_swa += kTrain * m.swa;
    f.attention_csa += kTrain * m.csa;
    f.attention_hca += kTrain * m.hca;
    f.compressor += kTrain * m.compressor;
    f.indexer += kTrain * m.indexer;
    f.routed_experts += kTrain * m.routed;
    f.shared_experts += kTrain * m.shared;
  }
  const double d = static_cast<double>(c.hidden_size);
  for (int64_t j = 0; j < mtp_layers_counted; ++j) {
    LayerMacs m = layer_macs(c, c.num_hidden_layers + j, length);
    // + e/h projections (Bridge's eh-proj 2·d² per token) and the norms (3·d).
    f.mtp += kTrain * (m.sum() + 2 * d * d + 3 * d);
  }
  f.lm_head =
      kTrain * d * static_cast<double>(c.vocab_size) * static_cast<double>(1 + mtp_layers_counted);
  f.six_n_active = 6.0 * static_cast<double>(count_parameters(c).activated());
  return f;
}

FlopsBreakdown flops_per_token(const ModelConfig& c, int64_t seq_len, int64_t mtp_layers_counted) {
  return flops_per_token(c, SequenceStats::uniform(seq_len), mtp_layers_counted);
}

double training_step_flops(const ModelConfig& c, const SequenceStats& sequences,
                           int64_t mtp_layers_counted) {
  return flops_per_token(c, sequences, mtp_layers_counted).total() * sequences.tokens;
}

}  // namespace trex::model
