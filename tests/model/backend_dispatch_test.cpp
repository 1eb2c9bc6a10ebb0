// The model computes through its Backend: a recording backend that forwards
// every op to the CPU backend gives bitwise the same losses and gradients as
// the default, and sees every op of a training step (MoE router, experts and
// token dispatch included).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "test_paths.hpp"
#include "trex/core/rng.hpp"
#include "trex/kernels/backend.hpp"
#include "trex/kernels/cpu/cpu_backend.hpp"
#include "trex/model/model.hpp"

namespace {

using trex::kernels::AttentionCoreDims;
using trex::kernels::AttentionKeyTensors;
using trex::kernels::Backend;
using trex::kernels::CompressorPoolDims;
using trex::kernels::Device;
using trex::kernels::IndexerScoreDims;
using trex::kernels::IndexerScoreTensors;
using trex::kernels::LinearOptions;
using trex::kernels::LmHeadOutputs;
using trex::kernels::MhcDims;
using trex::kernels::MhcSiteTensors;
using trex::kernels::MhcStateTensors;
using trex::kernels::Precision;
using trex::kernels::RopeTable;
using trex::kernels::RouterBalanceGrad;
using trex::kernels::RouterCombineParams;
using trex::kernels::SelectionBoundary;
using trex::kernels::Tensor;

// Forwards every op to the CPU backend and counts the calls by op name.
class RecordingBackend final : public Backend {
 public:
  const char* name() const override { return "recording"; }
  Device device() const override { return Device{}; }
  std::map<std::string, int> calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

 protected:
  void* allocate_bytes(size_t bytes) const override {
    record("allocate");
    void* data = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!data) throw std::bad_alloc();
    std::memset(data, 0, bytes);
    return data;
  }
  void free_bytes(void* data, size_t) const override { std::free(data); }

 private:
  void record(const char* op) const {
    std::lock_guard<std::mutex> lock(mutex_);  // segments run attention in parallel
    ++calls_[op];
  }
  const Backend& cpu() const { return trex::kernels::cpu_backend(); }

  void do_fill(const Tensor& x, double value) const override {
    record("fill");
    cpu().fill(x, value);
  }
  void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                         const LinearOptions& o) const override {
    record("linear_forward");
    cpu().linear_forward(x, w, y, o);
  }
  void do_linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                          const Tensor& dw, const LinearOptions& o) const override {
    record("linear_backward");
    cpu().linear_backward(x, w, dy, dx, dw, o);
  }
  void do_grouped_linear_forward(int64_t g, const Tensor& x, const Tensor& w, const Tensor& y,
                                 Precision p) const override {
    record("grouped_linear_forward");
    cpu().grouped_linear_forward(g, x, w, y, p);
  }
  void do_grouped_linear_backward(int64_t g, const Tensor& x, const Tensor& w, const Tensor& dy,
                                  const Tensor& dx, const Tensor& dw, Precision p) const override {
    record("grouped_linear_backward");
    cpu().grouped_linear_backward(g, x, w, dy, dx, dw, p);
  }
  void do_rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& inv,
                          double eps) const override {
    record("rmsnorm_forward");
    cpu().rmsnorm_forward(x, w, y, inv, eps);
  }
  void do_rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& inv, const Tensor& dy,
                           const Tensor& dx, const Tensor& dw) const override {
    record("rmsnorm_backward");
    cpu().rmsnorm_backward(x, w, inv, dy, dx, dw);
  }
  void do_rope(const RopeTable& table, const Tensor& x, const Tensor& positions,
               bool inverse) const override {
    record("rope");
    cpu().rope(table, x, positions, inverse);
  }
  void do_mhc_pre_forward(const MhcDims& d, const MhcSiteTensors& w, const Tensor& X,
                          const Tensor& u, const MhcStateTensors& s) const override {
    record("mhc_pre_forward");
    cpu().mhc_pre_forward(d, w, X, u, s);
  }
  void do_mhc_post_forward(const MhcDims& d, const Tensor& post, const Tensor& comb,
                           const Tensor& X, const Tensor& y, const Tensor& Xout) const override {
    record("mhc_post_forward");
    cpu().mhc_post_forward(d, post, comb, X, y, Xout);
  }
  void do_mhc_post_backward(const MhcDims& d, const Tensor& post, const Tensor& comb,
                            const Tensor& X, const Tensor& y, const Tensor& dXout, const Tensor& dX,
                            const Tensor& dy, const Tensor& dpost,
                            const Tensor& dcomb) const override {
    record("mhc_post_backward");
    cpu().mhc_post_backward(d, post, comb, X, y, dXout, dX, dy, dpost, dcomb);
  }
  void do_mhc_pre_backward(const MhcDims& d, const MhcSiteTensors& w, const MhcStateTensors& s,
                           const Tensor& X, const Tensor& du, const Tensor& dpost,
                           const Tensor& dcomb, const MhcSiteTensors& g,
                           const Tensor& dX) const override {
    record("mhc_pre_backward");
    cpu().mhc_pre_backward(d, w, s, X, du, dpost, dcomb, g, dX);
  }
  void do_hc_head_forward(const MhcDims& d, const MhcSiteTensors& w, const Tensor& X,
                          const Tensor& h, const MhcStateTensors& s) const override {
    record("hc_head_forward");
    cpu().hc_head_forward(d, w, X, h, s);
  }
  void do_hc_head_backward(const MhcDims& d, const MhcSiteTensors& w, const MhcStateTensors& s,
                           const Tensor& X, const Tensor& dh, const MhcSiteTensors& g,
                           const Tensor& dX) const override {
    record("hc_head_backward");
    cpu().hc_head_backward(d, w, s, X, dh, g, dX);
  }
  void do_sinkhorn_forward(const Tensor& logits, int64_t iters, double eps,
                           const Tensor& comb) const override {
    record("sinkhorn_forward");
    cpu().sinkhorn_forward(logits, iters, eps, comb);
  }
  void do_sinkhorn_backward(const Tensor& logits, int64_t iters, double eps, const Tensor& dcomb,
                            const Tensor& dlogits) const override {
    record("sinkhorn_backward");
    cpu().sinkhorn_backward(logits, iters, eps, dcomb, dlogits);
  }
  void do_scale(const Tensor& x, double factor) const override {
    record("scale");
    cpu().scale(x, factor);
  }
  void do_add(const Tensor& x, const Tensor& y) const override {
    record("add");
    cpu().add(x, y);
  }
  void do_copy(const Tensor& src, const Tensor& dst) const override {
    record("copy");
    cpu().copy(src, dst);
  }
  void do_gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst) const override {
    record("gather_rows");
    cpu().gather_rows(src, index, dst);
  }
  void do_scatter_add_rows(const Tensor& src, const Tensor& index,
                           const Tensor& dst) const override {
    record("scatter_add_rows");
    cpu().scatter_add_rows(src, index, dst);
  }
  void do_broadcast_add(const Tensor& y, const Tensor& x) const override {
    record("broadcast_add");
    cpu().broadcast_add(y, x);
  }
  void do_sum_copies_add(const Tensor& x, const Tensor& y) const override {
    record("sum_copies_add");
    cpu().sum_copies_add(x, y);
  }
  void do_attention_core_forward(const AttentionCoreDims& d, const Tensor& q,
                                 const AttentionKeyTensors& k, const Tensor& sink,
                                 const Tensor& prob, const Tensor& sink_prob,
                                 const Tensor& o) const override {
    record("attention_core_forward");
    cpu().attention_core_forward(d, q, k, sink, prob, sink_prob, o);
  }
  void do_attention_core_backward(const AttentionCoreDims& d, const Tensor& q,
                                  const AttentionKeyTensors& k, const Tensor& prob,
                                  const Tensor& sink_prob, const Tensor& o, const Tensor& d_o,
                                  const Tensor& dq, const Tensor& dkv, const Tensor& dcomp,
                                  const Tensor& dsink) const override {
    record("attention_core_backward");
    cpu().attention_core_backward(d, q, k, prob, sink_prob, o, d_o, dq, dkv, dcomp, dsink);
  }
  void do_attention_selected_mass(const AttentionCoreDims& d, int64_t heads, const Tensor& prob,
                                  const Tensor& prob_offsets, const Tensor& comp_offsets,
                                  const Tensor& selected, const Tensor& target) const override {
    record("attention_selected_mass");
    cpu().attention_selected_mass(d, heads, prob, prob_offsets, comp_offsets, selected, target);
  }
  void do_compressor_pool_forward(const CompressorPoolDims& d, const Tensor& gate,
                                  const Tensor& proj, const Tensor& ape, const Tensor& prob,
                                  const Tensor& pooled) const override {
    record("compressor_pool_forward");
    cpu().compressor_pool_forward(d, gate, proj, ape, prob, pooled);
  }
  void do_compressor_pool_backward(const CompressorPoolDims& d, const Tensor& prob,
                                   const Tensor& proj, const Tensor& pooled, const Tensor& dpooled,
                                   const Tensor& dproj, const Tensor& dgate,
                                   const Tensor& dape) const override {
    record("compressor_pool_backward");
    cpu().compressor_pool_backward(d, prob, proj, pooled, dpooled, dproj, dgate, dape);
  }
  void do_indexer_select(const IndexerScoreDims& d, const IndexerScoreTensors& in,
                         const Tensor& selected,
                         std::vector<SelectionBoundary>* boundaries) const override {
    record("indexer_select");
    cpu().indexer_select(d, in, selected, boundaries);
  }
  void do_indexer_selected_scores(const IndexerScoreDims& d, const IndexerScoreTensors& in,
                                  const Tensor& selected, const Tensor& scores) const override {
    record("indexer_selected_scores");
    cpu().indexer_selected_scores(d, in, selected, scores);
  }
  double do_indexer_kl_loss(const Tensor& selected, const Tensor& scores, const Tensor& target,
                            const Tensor& dscores) const override {
    record("indexer_kl_loss");
    return cpu().indexer_kl_loss(selected, scores, target, dscores);
  }
  void do_indexer_score_backward(const IndexerScoreDims& d, const IndexerScoreTensors& in,
                                 const Tensor& selected, const Tensor& dscores, double scale,
                                 const Tensor& dq, const Tensor& dweights,
                                 const Tensor& dkeys) const override {
    record("indexer_score_backward");
    cpu().indexer_score_backward(d, in, selected, dscores, scale, dq, dweights, dkeys);
  }
  void do_adamw_update(const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& v,
                       const trex::kernels::AdamWCoefficients& c) const override {
    record("adamw_update");
    cpu().adamw_update(w, g, m, v, c);
  }
  void do_newton_schulz(const Tensor& X, const Tensor& out,
                        const trex::kernels::NewtonSchulzParams& p) const override {
    record("newton_schulz");
    cpu().newton_schulz(X, out, p);
  }
  void do_muon_update(const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& ws,
                      const trex::kernels::MuonStep& step) const override {
    record("muon_update");
    cpu().muon_update(w, g, m, ws, step);
  }
  double do_sum_squares(const Tensor& x, const Tensor& bounds) const override {
    record("sum_squares");
    return cpu().sum_squares(x, bounds);
  }
  void do_router_scores(const Tensor& logits, const Tensor& scores) const override {
    record("router_scores");
    cpu().router_scores(logits, scores);
  }
  void do_router_select(const Tensor& scores, const Tensor& bias, const Tensor& token_ids,
                        const Tensor& tid2eid, const Tensor& expert_index) const override {
    record("router_select");
    cpu().router_select(scores, bias, token_ids, tid2eid, expert_index);
  }
  void do_router_combine(const RouterCombineParams& p, const Tensor& scores,
                         const Tensor& expert_index, const Tensor& combine) const override {
    record("router_combine");
    cpu().router_combine(p, scores, expert_index, combine);
  }
  void do_router_balance_frequencies(const Tensor& expert_index, const Tensor& sequences,
                                     const Tensor& freq) const override {
    record("router_balance_frequencies");
    cpu().router_balance_frequencies(expert_index, sequences, freq);
  }
  double do_router_balance_loss(double weight, const Tensor& scores, const Tensor& freq,
                                const Tensor& sequences) const override {
    record("router_balance_loss");
    return cpu().router_balance_loss(weight, scores, freq, sequences);
  }
  void do_router_backward(const RouterCombineParams& p, const RouterBalanceGrad& balance,
                          const Tensor& logits, const Tensor& scores, const Tensor& expert_index,
                          const Tensor& combine, const Tensor& d_combine, int64_t begin,
                          int64_t end, const Tensor& dlogits) const override {
    record("router_backward");
    cpu().router_backward(p, balance, logits, scores, expert_index, combine, d_combine, begin, end,
                          dlogits);
  }
  void do_router_bias_update(const Tensor& bias, const Tensor& load, double speed) const override {
    record("router_bias_update");
    cpu().router_bias_update(bias, load, speed);
  }
  void do_swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& scale, double limit,
                         const Tensor& h) const override {
    record("swiglu_forward");
    cpu().swiglu_forward(gate, up, scale, limit, h);
  }
  void do_swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& scale,
                          const Tensor& dh, double limit, const Tensor& dg, const Tensor& dv,
                          const Tensor& dscale) const override {
    record("swiglu_backward");
    cpu().swiglu_backward(gate, up, scale, dh, limit, dg, dv, dscale);
  }
  void do_grouped_rows_linear_forward(const Tensor& offsets, const Tensor& x,
                                      std::span<const Tensor> w, const Tensor& y,
                                      Precision p) const override {
    record("grouped_rows_linear_forward");
    cpu().grouped_linear_forward(offsets, x, w, y, p);
  }
  void do_grouped_rows_linear_backward(const Tensor& offsets, const Tensor& x,
                                       std::span<const Tensor> w, const Tensor& dy,
                                       const Tensor& dx, std::span<const Tensor> dw,
                                       const LinearOptions& o) const override {
    record("grouped_rows_linear_backward");
    cpu().grouped_linear_backward(offsets, x, w, dy, dx, dw, o);
  }
  void do_moe_permute(int64_t top_k, const Tensor& x, const Tensor& order, const Tensor& combine,
                      const Tensor& rows, const Tensor& row_combine) const override {
    record("moe_permute");
    cpu().moe_permute(top_k, x, order, combine, rows, row_combine);
  }
  void do_moe_unpermute(const Tensor& rows, const Tensor& pair_row,
                        const Tensor& y) const override {
    record("moe_unpermute");
    cpu().moe_unpermute(rows, pair_row, y);
  }
  void do_pack_rows(const Tensor& rows, const Tensor& weights, const Tensor& index,
                    const Tensor& packed) const override {
    record("pack_rows");
    cpu().pack_rows(rows, weights, index, packed);
  }
  void do_unpack_rows(const Tensor& packed, const Tensor& index, const Tensor& rows,
                      const Tensor& weights) const override {
    record("unpack_rows");
    cpu().unpack_rows(packed, index, rows, weights);
  }
  void do_decode_indexer_select(const Tensor& q, const Tensor& w, const Tensor& keys,
                                const Tensor& selected) const override {
    record("decode_indexer_select");
    cpu().decode_indexer_select(q, w, keys, selected);
  }
  void do_decode_attention(const Tensor& q, const Tensor& keys, const Tensor& sink,
                           const Tensor& o) const override {
    record("decode_attention");
    cpu().decode_attention(q, keys, sink, o);
  }
  double do_lm_head_cross_entropy(const Tensor& h, const Tensor& head, const Tensor& targets,
                                  double loss_scale, const LmHeadOutputs& outputs,
                                  int64_t chunk_rows, Precision p) const override {
    record("lm_head_cross_entropy");
    return cpu().lm_head_cross_entropy(h, head, targets, loss_scale, outputs, chunk_rows, p);
  }

  mutable std::mutex mutex_;
  mutable std::map<std::string, int> calls_;
};

trex::model::Batch random_batch(const trex::model::ModelConfig& c, int64_t B, int64_t S) {
  trex::Rng rng(17, {5});
  trex::model::Batch b;
  b.B = B;
  b.S = S;
  for (int64_t i = 0; i < B * S; ++i)
    b.input_ids.push_back(rng.uniform_int(int64_t{0}, c.vocab_size - 1));
  return b;
}

TEST(BackendDispatch, ModelStepOnARecordingBackendIsBitwiseTheCpuStepAndUsesEveryModelOp) {
  const auto config =
      trex::model::ModelConfig::load(trex::test::source_dir() + "/configs/models/tiny-v4.json");
  trex::model::LossOptions loss;
  loss.balance_loss_weight = 0.01;
  loss.indexer_loss = true;
  const auto batch = random_batch(config, 2, 24);

  trex::model::Model<float> reference(config);
  reference.init_random(3);
  const trex::model::LossBreakdown expected = reference.forward_backward(batch, loss);

  RecordingBackend recording;
  trex::model::Model<float> model(config);
  model.init_random(3);
  model.set_backend(recording);
  const trex::model::LossBreakdown got = model.forward_backward(batch, loss);
  EXPECT_EQ(got.total, expected.total);
  EXPECT_EQ(got.lm, expected.lm);
  EXPECT_EQ(got.mtp, expected.mtp);
  EXPECT_EQ(got.indexer, expected.indexer);
  EXPECT_EQ(model.params().grads(), reference.params().grads());

  const std::map<std::string, int> calls = recording.calls();
  for (const char* op : {"allocate",
                         "fill",
                         "linear_forward",
                         "linear_backward",
                         "grouped_linear_forward",
                         "grouped_linear_backward",
                         "rmsnorm_forward",
                         "rmsnorm_backward",
                         "rope",
                         "mhc_pre_forward",
                         "mhc_post_forward",
                         "mhc_post_backward",
                         "mhc_pre_backward",
                         "hc_head_forward",
                         "hc_head_backward",
                         "scale",
                         "add",
                         "gather_rows",
                         "scatter_add_rows",
                         "broadcast_add",
                         "sum_copies_add",
                         "attention_core_forward",
                         "attention_core_backward",
                         "attention_selected_mass",
                         "compressor_pool_forward",
                         "compressor_pool_backward",
                         "indexer_select",
                         "indexer_selected_scores",
                         "indexer_kl_loss",
                         "indexer_score_backward",
                         "lm_head_cross_entropy",
                         "router_scores",
                         "router_select",
                         "router_combine",
                         "router_balance_frequencies",
                         "router_balance_loss",
                         "router_backward",
                         "swiglu_forward",
                         "swiglu_backward",
                         "grouped_rows_linear_forward",
                         "grouped_rows_linear_backward",
                         "moe_permute",
                         "moe_unpermute"})
    EXPECT_GT(calls.count(op) ? calls.at(op) : 0, 0) << op;
}

}  // namespace
