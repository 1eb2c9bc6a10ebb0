#include "trex/plan/model_shape.hpp"

#include <algorithm>

#include "trex/core/config_reader.hpp"
#include "trex/core/error.hpp"
#include "trex/model/config.hpp"
#include "trex/model/flops.hpp"
#include "trex/model/param_counts.hpp"

namespace trex::plan {

namespace {

using json = nlohmann::json;
constexpr double kBf16 = 2;   // bytes per stored activation element
constexpr double kTrain = 6;  // 2 FLOPs per MAC × (forward + dgrad + wgrad)

// Non-GEMM ops read and write each stored activation about once more than the
// GEMMs do (norm in/out, activation function, permutation, residual adds):
// forward traffic ≈ 2 × the stored bytes. Documented in docs/planner.md.
double vector_traffic(double act_bytes) {
  return 2 * act_bytes;
}

constexpr auto kCount = config::Range<int64_t>::at_least(0);
constexpr auto kPositive = config::Range<int64_t>::at_least(1);

// ---- DeepSeek-V4 through the engine's config, FLOP and parameter counters ----

model::ModelConfig single_layer(const model::ModelConfig& c, int64_t ratio) {
  model::ModelConfig one = c;
  one.num_hidden_layers = 1;
  one.num_nextn_predict_layers = 0;
  one.num_hash_layers = 0;
  one.compress_ratios = {ratio};
  return one;
}

LayerShape v4_layer(const model::ModelConfig& c, int64_t ratio, int64_t seq_len, bool mtp) {
  const double d = static_cast<double>(c.hidden_size);
  const double heads = static_cast<double>(c.num_attention_heads);
  const double head_dim = static_cast<double>(c.head_dim);
  const double q_lora = static_cast<double>(c.q_lora_rank);
  const double inter = static_cast<double>(c.moe_intermediate_size);
  const double top_k = static_cast<double>(c.num_experts_per_tok);
  const double n_hc = static_cast<double>(c.hc_mult);
  const double experts = static_cast<double>(c.n_routed_experts);

  LayerShape s;
  s.kind = mtp ? LayerKind::kMtp : LayerKind::kMoE;
  s.has_experts = true;
  model::FlopsBreakdown f = model::flops_per_token(single_layer(c, ratio), seq_len, 0);
  s.attention_flops = f.attention_swa + f.attention_csa + f.attention_hca + f.indexer;
  s.expert_flops = f.routed_experts;
  s.gemm_flops = f.projections + f.compressor + f.shared_experts;
  if (mtp) s.gemm_flops += kTrain * (2 * d * d + 3 * d);        // e/h projections + norms
  s.selective_recompute_flops = 2 * q_lora * heads * head_dim;  // wq_b, forward only

  const double expert = static_cast<double>(model::routed_expert_params(c));
  s.expert_params = experts * expert;
  s.dense_params =
      static_cast<double>(model::attention_base_params(c) + model::compressor_params(c, ratio) +
                          2 * model::mhc_site_params(c)) +
      static_cast<double>(c.n_shared_experts) * expert + experts * (d + 1) + 2 * d;
  if (mtp) s.dense_params += 2 * d * d + 3 * d + static_cast<double>(model::hc_head_params(c));

  // Stored activations per token, in elements.
  const double mix = static_cast<double>(c.hc_mix_dim());
  const double mhc = 2 * (n_hc * d + d + 2 * mix);  // per site: streams in, branch input, mix
  const double norms = 2 * d;
  const double q_full = heads * head_dim;
  double attention = q_lora * 2 + q_full + 2 * head_dim + heads * head_dim +
                     static_cast<double>(c.o_groups * c.o_lora_rank) + 2 * heads;
  if (ratio == 4)
    attention += static_cast<double>(c.index_n_heads * c.index_head_dim) +
                 2 * static_cast<double>(c.index_topk);
  if (ratio > 0) attention += 2 * head_dim / static_cast<double>(ratio) * 2;
  // Routed experts: dispatched input, fc1 output (gate+up), activation, expert
  // output before the weighted combine; shared expert: fc1 output + activation.
  const double moe = 2 * experts + top_k * (d + 3 * inter + d) + 3 * inter;
  const double none = mhc + norms + attention + moe;
  // Selective: norms, mHC branch inputs, q up-projection, SwiGLU outputs and
  // expert outputs are recomputed.
  const double selective = none - norms - 2 * d - q_full - q_lora - top_k * (inter + d) - inter;
  s.act_bytes_none = kBf16 * none;
  s.act_bytes_selective = kBf16 * selective;
  s.act_bytes_full = kBf16 * n_hc * d;
  s.vector_bytes = vector_traffic(s.act_bytes_none) + kBf16 * 2 * (3 * n_hc + 2) * d;  // + mHC
  s.fp8_cacheable_bytes = kBf16 * (top_k * d + heads * head_dim);
  s.gemm_input_elements = d + q_lora + d + heads * head_dim +
                          static_cast<double>(c.o_groups * c.o_lora_rank) +
                          (top_k + static_cast<double>(c.n_shared_experts)) * (d + inter) +
                          (ratio > 0 ? d : 0) + (ratio == 4 ? d + q_lora : 0);
  // Unfused sparse attention gathers the window + used compressed entries per
  // query into a dense buffer (written, then read), forward; the backward
  // scatters the gradient the same way (counted by the 3x of the caller).
  double keys = static_cast<double>(c.sliding_window);
  if (ratio == 4) {
    keys +=
        std::min(static_cast<double>(c.index_topk), std::floor(static_cast<double>(seq_len) / 4));
  } else if (ratio > 0) {
    keys += std::floor(static_cast<double>(seq_len) / static_cast<double>(ratio)) / 2;
  }
  s.unfused_extra_bytes = ratio > 0 ? 2 * kBf16 * keys * head_dim : 0;
  s.gemm_calls = 12 + (ratio == 4 ? 5 : ratio > 0 ? 2 : 0);
  // Norms, RoPE, softmax/top-k, routing, permute, SwiGLU, combine, and per mHC
  // site the projections' epilogue plus two kernels per Sinkhorn iteration.
  s.vector_calls = 24 + 2 * (4 + 2 * c.hc_sinkhorn_iters);
  return s;
}

ModelShape v4_shape(const json& j, const std::string& source, int64_t seq_len) {
  model::ModelConfig c = model::ModelConfig::from_json(j, source);
  ModelShape m;
  m.family = "deepseek_v4";
  m.seq_len = seq_len;
  m.hidden = c.hidden_size;
  m.residual_width = c.hc_mult * c.hidden_size;
  m.vocab = c.vocab_size;
  m.n_experts = c.n_routed_experts;
  m.top_k = c.num_experts_per_tok;
  m.expert_ffn = c.moe_intermediate_size;
  m.min_matrix_dim = std::min(c.q_lora_rank, c.moe_intermediate_size);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    m.layers.push_back(v4_layer(c, c.ratio(l), seq_len, false));
  for (int64_t l = c.num_hidden_layers; l < c.total_layers(); ++l)
    m.layers.push_back(v4_layer(c, c.ratio(l), seq_len, true));
  model::ParamCounts p = model::count_parameters(c);
  m.embed_params = static_cast<double>(p.main.embed);
  m.head_params = static_cast<double>(p.main.head + model::hc_head_params(c) + c.hidden_size);
  model::FlopsBreakdown f = model::flops_per_token(c, seq_len, c.num_nextn_predict_layers);
  m.head_flops = f.lm_head;
  m.total_params = static_cast<double>(p.total());
  m.activated_params = static_cast<double>(p.activated());
  m.model_flops_per_token = f.total();
  return m;
}

// ---- What the Megatron-counted MoE families (DeepSeek-V3, Qwen3-MoE) share ----

ModelShape moe_model(const char* family, int64_t seq_len, double hidden, double vocab,
                     double experts, double top_k, double expert_ffn, double min_matrix_dim) {
  ModelShape m;
  m.family = family;
  m.seq_len = seq_len;
  m.hidden = static_cast<int64_t>(hidden);
  m.residual_width = m.hidden;
  m.vocab = static_cast<int64_t>(vocab);
  m.n_experts = static_cast<int64_t>(experts);
  m.top_k = static_cast<int64_t>(top_k);
  m.expert_ffn = static_cast<int64_t>(expert_ffn);
  m.min_matrix_dim = static_cast<int64_t>(min_matrix_dim);
  return m;
}

// Total and activated parameters of the main layers (MTP layers excluded, as
// the model cards count), plus embedding and head; model FLOPs per token.
void finish_totals(ModelShape& m) {
  double total = 0, activated = 0;
  const double share = static_cast<double>(m.top_k) / static_cast<double>(m.n_experts);
  for (const LayerShape& l : m.layers) {
    if (l.kind == LayerKind::kMtp) continue;
    total += l.dense_params + l.expert_params;
    activated += l.dense_params + (l.has_experts ? l.expert_params * share : 0);
  }
  m.total_params = total + m.embed_params + m.head_params;
  m.activated_params = activated + m.head_params;
  double flops = m.head_flops;
  for (const LayerShape& l : m.layers) flops += l.gemm_flops + l.expert_flops + l.attention_flops;
  m.model_flops_per_token = flops;
}

// ---- DeepSeek-V3 shape (MLA + MoE), Megatron's num_floating_point_operations ----

ModelShape v3_shape(const config::Reader& r, int64_t seq_len) {
  const int64_t layers = r.integer("num_hidden_layers", kPositive);
  const int64_t dense_layers = r.integer("first_k_dense_replace", kCount);
  const int64_t mtp_layers = r.integer("num_nextn_predict_layers", 0, kCount);
  if (dense_layers > layers) r.fail("first_k_dense_replace", "exceeds num_hidden_layers");
  const double d = static_cast<double>(r.integer("hidden_size", kPositive));
  const double vocab = static_cast<double>(r.integer("vocab_size", kPositive));
  const double ffn = static_cast<double>(r.integer("intermediate_size", kPositive));
  const double inter = static_cast<double>(r.integer("moe_intermediate_size", kPositive));
  const double experts = static_cast<double>(r.integer("n_routed_experts", kPositive));
  const double shared = static_cast<double>(r.integer("n_shared_experts", kCount));
  const double top_k = static_cast<double>(r.integer("num_experts_per_tok", kPositive));
  const double heads = static_cast<double>(r.integer("num_attention_heads", kPositive));
  const double q_lora = static_cast<double>(r.integer("q_lora_rank", kPositive));
  const double kv_lora = static_cast<double>(r.integer("kv_lora_rank", kPositive));
  const double nope = static_cast<double>(r.integer("qk_nope_head_dim", kPositive));
  const double rope = static_cast<double>(r.integer("qk_rope_head_dim", kPositive));
  const double v_dim = static_cast<double>(r.integer("v_head_dim", kPositive));
  if (top_k > experts) r.fail("num_experts_per_tok", "exceeds n_routed_experts");
  const double qk = nope + rope;
  const double s = static_cast<double>(seq_len);

  // Forward MACs per token (Megatron: MLA projections, causal core attention
  // halved, SwiGLU FFNs, router not counted).
  const double proj = q_lora * (d + heads * qk) + d * (kv_lora + rope) +
                      kv_lora * heads * (nope + v_dim) + heads * v_dim * d;
  const double core = heads * (qk + v_dim) * s / 2;
  const double proj_params = proj + q_lora + kv_lora;  // + q_a / kv_a norms
  auto layer = [&](bool moe, bool mtp) {
    LayerShape l;
    l.kind = mtp ? LayerKind::kMtp : moe ? LayerKind::kMoE : LayerKind::kDense;
    l.has_experts = moe;
    l.attention_flops = kTrain * core;
    l.gemm_flops = kTrain * (proj + (moe ? 3 * d * inter * shared : 3 * d * ffn));
    l.expert_flops = moe ? kTrain * 3 * d * inter * top_k : 0;
    if (mtp) l.gemm_flops += kTrain * 2 * d * d;  // eh-proj
    l.selective_recompute_flops = 2 * (q_lora * heads * qk + kv_lora * heads * (nope + v_dim));
    l.dense_params =
        proj_params + 2 * d + (moe ? 3 * d * inter * shared + experts * d : 3 * d * ffn);
    if (mtp) l.dense_params += 2 * d * d + 3 * d;
    l.expert_params = moe ? experts * 3 * d * inter : 0;
    const double up = heads * (qk + qk + v_dim);  // q, k, v after the up-projections
    const double attention =
        2 * q_lora + (kv_lora + rope) + kv_lora + up + heads * v_dim + 2 * heads;
    const double mlp =
        moe ? 2 * experts + top_k * (2 * d + 3 * inter) + 3 * inter * shared : 3 * ffn;
    const double none = d + 2 * d + attention + mlp;  // input, norm outputs, blocks
    // Selective: norms, MLA up-projections, SwiGLU outputs, expert outputs.
    const double swiglu = moe ? top_k * (inter + d) + inter * shared : ffn;
    l.act_bytes_none = kBf16 * none;
    l.act_bytes_selective = kBf16 * (none - 2 * d - up - swiglu);
    l.fp8_cacheable_bytes = kBf16 * ((moe ? top_k * d : 0) + heads * v_dim);
    l.gemm_input_elements =
        d + q_lora + d + kv_lora + heads * v_dim + (moe ? (top_k + shared) * (d + inter) : d + ffn);
    l.act_bytes_full = kBf16 * d;
    l.vector_bytes = vector_traffic(l.act_bytes_none);
    l.gemm_calls = moe ? 10 : 7;
    l.vector_calls = moe ? 24 : 14;
    return l;
  };
  ModelShape m =
      moe_model("deepseek_v3", seq_len, d, vocab, experts, top_k, inter, std::min(q_lora, inter));
  if (r.contains("n_group") || r.contains("topk_group")) {
    m.routed_groups = r.integer("n_group", kPositive);
    m.routed_group_limit = r.integer("topk_group", kPositive);
    if (m.routed_group_limit > m.routed_groups) r.fail("topk_group", "exceeds n_group");
    if (static_cast<int64_t>(experts) % m.routed_groups != 0)
      r.fail("n_group", "must divide n_routed_experts");
  }
  for (int64_t l = 0; l < layers; ++l) m.layers.push_back(layer(l >= dense_layers, false));
  for (int64_t l = 0; l < mtp_layers; ++l) m.layers.push_back(layer(true, true));
  m.embed_params = vocab * d;
  m.head_params = vocab * d + d;
  m.head_flops = kTrain * d * vocab * static_cast<double>(1 + mtp_layers);
  finish_totals(m);
  return m;
}

// ---- Qwen3-MoE shape (GQA attention + routed experts), Megatron's counting ----

ModelShape qwen3_moe_shape(const config::Reader& r, int64_t seq_len) {
  const int64_t layers = r.integer("num_hidden_layers", kPositive);
  const double d = static_cast<double>(r.integer("hidden_size", kPositive));
  const double vocab = static_cast<double>(r.integer("vocab_size", kPositive));
  const double heads = static_cast<double>(r.integer("num_attention_heads", kPositive));
  const double kv_heads = static_cast<double>(r.integer("num_key_value_heads", kPositive));
  const double head_dim = static_cast<double>(r.integer("head_dim", kPositive));
  const double ffn = static_cast<double>(r.integer("intermediate_size", kPositive));
  const double inter = static_cast<double>(r.integer("moe_intermediate_size", kPositive));
  const double experts = static_cast<double>(r.integer("num_experts", kPositive));
  const double top_k = static_cast<double>(r.integer("num_experts_per_tok", kPositive));
  const int64_t sparse_step = r.integer("decoder_sparse_step", 1, kPositive);
  const bool tied = r.boolean("tie_word_embeddings", false);
  if (top_k > experts) r.fail("num_experts_per_tok", "exceeds num_experts");
  if (static_cast<int64_t>(heads) % static_cast<int64_t>(kv_heads) != 0)
    r.fail("num_key_value_heads", "must divide num_attention_heads");
  std::vector<int64_t> dense_only;
  if (r.has("mlp_only_layers")) dense_only = r.array("mlp_only_layers").integers<int64_t>(kCount);
  const double s = static_cast<double>(seq_len);

  // Forward MACs per token: q, k, v and output projections, causal core
  // attention (QKᵀ and PV over half the keys on average), SwiGLU FFNs; the
  // router is not counted (Megatron's num_floating_point_operations).
  const double q = heads * head_dim, kv = kv_heads * head_dim;
  const double proj = d * (q + 2 * kv) + q * d;
  const double core = q * s;  // 2 products × q · s/2
  auto layer = [&](bool moe) {
    LayerShape l;
    l.kind = moe ? LayerKind::kMoE : LayerKind::kDense;
    l.has_experts = moe;
    l.attention_flops = kTrain * core;
    l.gemm_flops = kTrain * (proj + (moe ? 0 : 3 * d * ffn));
    l.expert_flops = moe ? kTrain * 3 * d * inter * top_k : 0;
    l.selective_recompute_flops = 0;  // no up-projection to recompute in GQA
    l.dense_params = proj + 2 * d + 2 * head_dim + (moe ? experts * d : 3 * d * ffn);
    l.expert_params = moe ? experts * 3 * d * inter : 0;
    // Stored per token: input, two norm outputs, q/k/v, attention output,
    // softmax statistics; MoE: router logits, dispatched input, fc1 output,
    // activation, expert output.
    const double attention = q + 2 * kv + q + 2 * heads;
    const double mlp = moe ? experts + top_k * (2 * d + 3 * inter) : 3 * ffn;
    const double none = d + 2 * d + attention + mlp;
    // Selective (no up-projection in GQA, and no GEMM re-run is costed):
    // the norm outputs and the SwiGLU activation only.
    const double activation = moe ? top_k * inter : ffn;
    l.act_bytes_none = kBf16 * none;
    l.act_bytes_selective = kBf16 * (none - 2 * d - activation);
    l.act_bytes_full = kBf16 * d;
    l.fp8_cacheable_bytes = kBf16 * ((moe ? top_k * d : 0) + q);
    l.gemm_input_elements = d + d + q + (moe ? top_k * (d + inter) : d + ffn);
    l.vector_bytes = vector_traffic(l.act_bytes_none);
    l.gemm_calls = moe ? 7 : 6;
    l.vector_calls = moe ? 20 : 12;
    return l;
  };
  ModelShape m =
      moe_model("qwen3_moe", seq_len, d, vocab, experts, top_k, inter, std::min(d, inter));
  for (int64_t i = 0; i < layers; ++i) {
    const bool dense = std::find(dense_only.begin(), dense_only.end(), i) != dense_only.end() ||
                       (i + 1) % sparse_step != 0;
    m.layers.push_back(layer(!dense));
  }
  m.embed_params = vocab * d;
  m.head_params = (tied ? 0 : vocab * d) + d;
  m.head_flops = kTrain * d * vocab;
  finish_totals(m);
  return m;
}

}  // namespace

double ModelShape::all_params() const {
  double p = embed_params + head_params;
  for (const LayerShape& l : layers) p += l.dense_params + l.expert_params;
  return p;
}

namespace {

ModelShape read_model_shape(const config::Reader& r, const std::string& source, int64_t seq_len) {
  if (seq_len <= 0) throw Error("sequence length must be > 0").field("seq");
  const std::string type = r.string("model_type");
  ModelShape m;
  if (type == "deepseek_v4") {
    m = v4_shape(r.value(), source, seq_len);
  } else if (type == "deepseek_v3") {
    m = v3_shape(r, seq_len);
  } else if (type == "qwen3_moe") {
    m = qwen3_moe_shape(r, seq_len);
  } else {
    r.fail("model_type",
           "unsupported model_type '" + type + "' (deepseek_v4, deepseek_v3 or qwen3_moe)");
  }
  m.name = r.string("name", source.substr(source.find_last_of('/') + 1));
  return m;
}

}  // namespace

ModelShape model_shape_from_json(const json& j, const std::string& source, int64_t seq_len) {
  return read_model_shape(config::Reader(j, source), source, seq_len);
}

ModelShape load_model_shape(const std::string& path, int64_t seq_len) {
  const config::Document document = config::Document::load(path, config::Format::kJson);
  return read_model_shape(document.root(), path, seq_len);
}

}  // namespace trex::plan
