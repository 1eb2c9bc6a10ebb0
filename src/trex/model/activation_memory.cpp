#include "trex/model/activation_memory.hpp"

#include <cmath>

#include "trex/model/attention.hpp"
#include "trex/model/mhc.hpp"

namespace trex::model {

namespace {

constexpr int64_t kIndexBytes = 8;   // int64 arrays (positions, offsets, ids, selections)
constexpr int64_t kExpertBytes = 4;  // int32 expert indices

// Elements of the three kinds of arrays a cache holds.
struct Count {
  int64_t values = 0;   // T
  int64_t indices = 0;  // int64
  int64_t experts = 0;  // int32
  int64_t host = 0;     // host bytes
  int64_t bytes(int64_t value_bytes) const {
    return values * value_bytes + indices * kIndexBytes + experts * kExpertBytes;
  }
};

int64_t mhc_site(const ModelConfig& c, int64_t N) {  // MhcCache: ρ, μ, pre, post, comb
  const MhcDims md = mhc_dims(c, N);
  const int64_t n = c.hc_mult;
  return N + N * md.mix() + 2 * N * n + N * n * n;
}

int64_t hc_head(const ModelConfig& c, int64_t N) {  // HcHeadCache: ρ, μ, pre
  return N + 2 * N * c.hc_mult;
}

// CompressorCache over `entries` = B·floor(S/m) entries of `tokens` rows.
void compressor(const CompressorDims& dims, int64_t tokens, int64_t entries, Count& out) {
  const int64_t slots = dims.coff() * dims.ratio;
  out.values +=
      tokens * dims.proj_dim() + entries * slots * dims.out_dim + entries * dims.out_dim + entries;
  out.indices += entries;
}

// AttentionCache of one layer over B sequences of S tokens.
void attention(const AttentionDims& dims, int64_t B, int64_t S, const ActivationShape& shape,
               bool selective, Count& out) {
  const int64_t N = B * S, H = dims.heads, c = dims.head_dim, hc = H * c, d = dims.hidden;
  const int64_t dc = dims.q_lora;
  const kernels::AttentionKeySetDims keys = key_set_dims(dims, SeqShape{B, S});
  int64_t compressed_keys = 0, probabilities = 0;
  for (int64_t t = 0; t < S; ++t) {
    const int64_t visible = keys.visible(t);
    const int64_t comp = dims.has_indexer() ? std::min(dims.index_topk, visible) : visible;
    compressed_keys += comp;
    probabilities += H * (keys.core.window_keys(t) + comp);
  }
  compressed_keys *= B;
  probabilities *= B;
  // Kept under selective recomputation: the projections before their norms
  // and the index structures; the rest is recomputed before the backward.
  out.values += N * dc + N + N * hc + N * H + N * c + N + N * dims.o_groups * dims.o_lora;
  if (!selective)
    out.values += N * d + N * dc + N * hc + N * c + probabilities + N * H + 2 * N * hc;
  out.indices += N + 2 * (N + 1) + compressed_keys;  // positions, offsets, compressed-key list
  const int64_t blocks = dims.has_compressor() ? dims.compressor().blocks(S) : 0;
  out.values += B * blocks * c;  // the compressed entries
  if (dims.has_compressor()) compressor(dims.compressor(), N, B * blocks, out);
  if (dims.has_indexer()) {
    const IndexerDims ix = dims.indexer();
    const int64_t ix_blocks = ix.compressor().blocks(S), k = ix.topk;
    out.values += N * ix.heads * ix.head_dim + N * ix.heads + B * ix_blocks * ix.head_dim;
    compressor(ix.compressor(), N, B * ix_blocks, out);
    out.indices += N * k;                                // the selection
    out.values += N * k * (shape.indexer_loss ? 2 : 1);  // its scores (and their gradient)
  }
  // The RoPE table of positions 0..S−1 (cos and sin, double) and its frequencies.
  const int64_t pairs = dims.rope_dim / 2;
  out.host += (2 * std::max<int64_t>(S, 1) * pairs + pairs) * 8;
}

// MoeCache of one layer over N tokens, with its local dispatcher's state.
void moe(const ModelConfig& c, int64_t N, const ActivationShape& shape, bool selective,
         Count& out) {
  const int64_t d = c.hidden_size, E = c.n_routed_experts, K = c.num_experts_per_tok;
  const int64_t I = c.moe_intermediate_size, P = N * K;
  const auto rows =
      static_cast<int64_t>(std::llround(static_cast<double>(P) * shape.routed_rows_share));
  if (!selective) out.values += N * d;  // the input copy
  out.values += 2 * N * E + P;          // router logits and scores, combine weights
  out.experts += P;                     // the selection
  out.values += 2 * rows * I;           // routed experts' gate and up pre-activations
  if (c.n_shared_experts > 0) out.values += 2 * N * I;
  out.indices += (E + 1) + 2 * P;  // dispatcher: expert offsets, pair <-> sorted row
}

// BlockCache of layer `layer` over B sequences of S tokens.
void block(const ModelConfig& c, int64_t layer, int64_t B, int64_t S, const ActivationShape& shape,
           Count& out) {
  const int64_t N = B * S, d = c.hidden_size, n = c.hc_mult;
  out.values += N * n * d;  // the block input: all that full recomputation keeps
  if (shape.recompute == ActivationRecompute::kFull) return;
  const bool selective = shape.recompute == ActivationRecompute::kSelective;
  // u_attn, a, u_ffn, x_ffn are recomputed under selective recomputation;
  // the norm statistics, sublayer outputs and the middle streams are kept.
  out.values += 2 * N + 2 * N * d + N * n * d + (selective ? 0 : 4 * N * d);
  out.values += 2 * mhc_site(c, N);
  attention(AttentionDims::from_config(c, layer), B, S, shape, selective, out);
  moe(c, N, shape, selective, out);
}

}  // namespace

ActivationBytes stage_cache_bytes(const ModelConfig& config, const StageSpec& stage,
                                  const ActivationShape& shape) {
  const ModelConfig& c = config;
  const int64_t B = shape.sequences, S = shape.seq_len, N = B * S;
  const int64_t d = c.hidden_size, n = c.hc_mult;
  Count count;
  count.indices += N;  // the batch's token ids
  for (int64_t l = stage.first_layer; l < stage.last_layer; ++l) block(c, l, B, S, shape, count);
  if (stage.has_head) {
    // X^L, the HC head, the final norm, the targets and the seeded dLoss/dh.
    count.values += N * n * d + hc_head(c, N) + 2 * N * d + N + N * d;
    count.indices += N;
    if (c.num_nextn_predict_layers > 0 && shape.mtp_loss && S >= 2) {
      const int64_t S1 = S - 1, M = B * S1;
      count.indices += 3 * M;  // next ids, rows of X^L, targets
      // e, e_inv, e_norm, h, h_inv, h_norm, e_proj, the block output, the head.
      count.values += M * d + M + M * d + M * n * d + M * n + M * n * d + M * d + M * n * d;
      block(c, c.num_hidden_layers, B, S1, shape, count);
      count.values += hc_head(c, M) + 2 * M * d + M + M * d;
    }
  }
  return {count.bytes(shape.value_bytes), count.host};
}

int64_t transient_activation_bytes(const ModelConfig& config, const StageSpec& stage,
                                   const ActivationShape& shape) {
  const ModelConfig& c = config;
  const int64_t vb = shape.value_bytes;
  const int64_t d = c.hidden_size, n = c.hc_mult, E = c.n_routed_experts;
  const int64_t K = c.num_experts_per_tok, I = c.moe_intermediate_size;
  const int64_t shared_I = c.n_shared_experts > 0 ? I : 0;
  // The work arrays of one block over B sequences of S tokens, forward or
  // backward, whichever is larger, plus what its backward rebuilds first.
  auto block_work = [&](int64_t layer, int64_t B, int64_t S) {
    const int64_t N = B * S, P = N * K, streams = N * n * d;
    const auto rows =
        static_cast<int64_t>(std::llround(static_cast<double>(P) * shape.routed_rows_share));
    const AttentionDims ad = AttentionDims::from_config(c, layer);
    const int64_t H = ad.heads, hc = H * ad.head_dim;
    int64_t attn_fwd = 0, attn_bwd = 0;
    auto compressor_work = [&](const CompressorDims& cd, int64_t entries, int64_t& fwd,
                               int64_t& bwd) {
      fwd += N * cd.proj_dim();                             // the gate projection
      bwd += entries * cd.out_dim + 2 * N * cd.proj_dim();  // d pooled, d proj, d gate
    };
    const int64_t blocks = ad.has_compressor() ? ad.compressor().blocks(S) : 0;
    attn_bwd += N * ad.o_groups * ad.o_lora + 2 * N * hc + N * ad.head_dim +
                B * blocks * ad.head_dim + N * ad.q_lora + N * d;
    if (ad.has_compressor()) compressor_work(ad.compressor(), B * blocks, attn_fwd, attn_bwd);
    if (ad.has_indexer()) {
      const IndexerDims ix = ad.indexer();
      const int64_t ix_blocks = ix.compressor().blocks(S);
      compressor_work(ix.compressor(), B * ix_blocks, attn_fwd, attn_bwd);
      attn_fwd += N * ix.topk;  // the indexer loss's target
      attn_bwd += N * ix.heads * ix.head_dim + N * ix.heads + B * ix_blocks * ix.head_dim +
                  N * 8 / vb;  // + its positions (int64)
    }
    // MoE: the dispatched rows (and their outputs or gradients), the experts'
    // hidden activations, the shared expert's, the router's gradients.
    const int64_t moe_fwd = 2 * P * d + P + rows * I + N * shared_I;
    const int64_t moe_bwd =
        3 * P * d + 2 * P + N * E + P + 4 * rows * I + 4 * N * shared_I + B * E * 8 / vb;
    const int64_t fwd = std::max(attn_fwd, moe_fwd);
    const int64_t bwd = streams + 3 * N * d + N * n + N * n * n + std::max(attn_bwd, moe_bwd);
    int64_t rebuilt = 0;
    if (shape.recompute != ActivationRecompute::kNone) {
      ActivationShape stored = shape;
      stored.recompute = ActivationRecompute::kNone;
      Count all, kept;
      block(c, layer, B, S, stored, all);
      block(c, layer, B, S, shape, kept);
      rebuilt = (all.bytes(vb) - kept.bytes(vb)) / vb;
    }
    return std::max(fwd, bwd + rebuilt);
  };
  const int64_t B = shape.sequences, S = shape.seq_len, N = B * S;
  int64_t work = 0;
  for (int64_t l = stage.first_layer; l < stage.last_layer; ++l)
    work = std::max(work, block_work(l, B, S));
  if (stage.has_head && c.num_nextn_predict_layers > 0 && shape.mtp_loss && S >= 2) {
    const int64_t M = B * (S - 1);
    // The MTP block's work and its input and output stream gradients.
    work = std::max(work, block_work(c.num_hidden_layers, B, S - 1) + 2 * M * n * d + M * d);
  }
  // The streams between blocks (forward: the input and the output; backward:
  // their gradients), and the head's gradient streams.
  int64_t streams = 2 * N * n * d;
  if (stage.has_head) streams += N * n * d + N * d;
  if (shape.recompute == ActivationRecompute::kFull) streams += N * n * d;  // a re-run's output
  return (streams + work) * vb;
}

int64_t kernel_work_bytes(const ModelConfig& config, const StageSpec& stage,
                          const ActivationShape& shape) {
  const ModelConfig& c = config;
  if (stage.first_layer == stage.last_layer && !stage.has_head) return 0;
  const int64_t d = c.hidden_size, I = c.moe_intermediate_size;
  const int64_t N = shape.sequences * shape.seq_len;
  // A bf16 GEMM converts both operands first, into per-thread buffers that
  // keep the largest size they have held (kernels/cpu/gemm.cpp; fp32 where
  // the CPU has no bf16 matmul): the stage's largest weight (one expert's
  // projection, an attention or MTP projection, the LM head) and its largest
  // activation operand.
  int64_t weight = 0, operand = 0;
  auto blocks = [&](int64_t layer) {
    const AttentionDims ad = AttentionDims::from_config(c, layer);
    const int64_t hc = ad.heads * ad.head_dim, gd = ad.o_groups * ad.o_lora;
    weight = std::max({weight, I * d, ad.q_lora * d, hc * ad.q_lora, ad.head_dim * d,
                       gd * (hc / ad.o_groups), d * gd});
    operand = std::max({operand, N * d, N * hc, N * gd});
  };
  for (int64_t l = stage.first_layer; l < stage.last_layer; ++l) blocks(l);
  int64_t logits = 0;
  if (stage.has_head) {
    const int64_t V = c.vocab_size;
    // The LM loss's chunk of at most 2^25 logits and its gradient (lm_loss.hpp).
    const int64_t chunk = std::min(N, std::max<int64_t>(1, (int64_t{1} << 25) / V));
    logits = 2 * chunk * V;
    weight = std::max(weight, V * d);
    operand = std::max(operand, chunk * V);  // the head's weight gradient reads the logits'
    if (c.num_nextn_predict_layers > 0 && shape.mtp_loss && shape.seq_len >= 2) {
      blocks(c.num_hidden_layers);
      weight = std::max(weight, d * d);
    }
  }
  return (weight + operand + logits) * shape.value_bytes;
}

}  // namespace trex::model
