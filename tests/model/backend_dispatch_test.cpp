// The model computes through its Backend: a recording backend that forwards
// every op to the CPU backend gives bitwise the same losses and gradients as
// the default, and sees every op of a training step (MoE router, experts and
// token dispatch included).
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
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
using trex::kernels::AttentionKeySetDims;
using trex::kernels::AttentionKeySetSizes;
using trex::kernels::AttentionKeyTensors;
using trex::kernels::Backend;
using trex::kernels::CompressorPoolDims;
using trex::kernels::Device;
using trex::kernels::IndexerScoreDims;
using trex::kernels::IndexerScoreTensors;
using trex::kernels::IndexScan;
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
// With guard_memory, the memory it allocates can be read or written only while
// one of its ops runs (mprotect between ops), as a device's memory is out of
// the host's reach: model code that touched it outside an op would crash.
class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(bool guard_memory = false) : guard_(guard_memory) {}
  const char* name() const override { return "recording"; }
  Device device() const override { return Device{}; }
  std::map<std::string, int> calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

 protected:
  void* allocate_bytes(size_t bytes) const override {
    const OpScope scope(*this, "allocate");
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t size = std::max<size_t>((bytes + page - 1) / page * page, page);
    void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED) throw std::bad_alloc();  // mmap memory comes zero-filled
    std::lock_guard<std::mutex> lock(mutex_);
    live_[data] = size;
    return data;
  }
  void free_bytes(void* data, size_t) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = live_.find(data);
    munmap(data, it->second);
    live_.erase(it);
  }

 private:
  // One op (or allocation) in flight: while any is, all memory is accessible.
  class OpScope {
   public:
    OpScope(const RecordingBackend& backend, const char* op) : backend_(backend) {
      backend_.enter(op);
    }
    ~OpScope() { backend_.leave(); }
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;

   private:
    const RecordingBackend& backend_;
  };
  void enter(const char* op) const {
    std::lock_guard<std::mutex> lock(mutex_);  // segments may run attention in parallel
    ++calls_[op];
    if (guard_ && in_flight_++ == 0) protect(PROT_READ | PROT_WRITE);
  }
  void leave() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (guard_ && --in_flight_ == 0) protect(PROT_NONE);
  }
  void protect(int access) const {
    for (const auto& [data, size] : live_)
      if (mprotect(data, size, access) != 0) std::abort();
  }

  const Backend& cpu() const { return trex::kernels::cpu_backend(); }

  void do_fill(const Tensor& x, double value) const override {
    const OpScope scope(*this, "fill");
    cpu().fill(x, value);
  }
  void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                         const LinearOptions& o) const override {
    const OpScope scope(*this, "linear_forward");
    cpu().linear_forward(x, w, y, o);
  }
  void do_linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                          const Tensor& dw, const LinearOptions& o) const override {
    const OpScope scope(*this, "linear_backward");
    cpu().linear_backward(x, w, dy, dx, dw, o);
  }
  void do_grouped_linear_forward(int64_t g, const Tensor& x, const Tensor& w, const Tensor& y,
                                 Precision p) const override {
    const OpScope scope(*this, "grouped_linear_forward");
    cpu().grouped_linear_forward(g, x, w, y, p);
  }
  void do_grouped_linear_backward(int64_t g, const Tensor& x, const Tensor& w, const Tensor& dy,
                                  const Tensor& dx, const Tensor& dw, Precision p) const override {
    const OpScope scope(*this, "grouped_linear_backward");
    cpu().grouped_linear_backward(g, x, w, dy, dx, dw, p);
  }
  void do_rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& inv,
                          double eps) const override {
    const OpScope scope(*this, "rmsnorm_forward");
    cpu().rmsnorm_forward(x, w, y, inv, eps);
  }
  void do_rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& inv, const Tensor& dy,
                           const Tensor& dx, const Tensor& dw) const override {
    const OpScope scope(*this, "rmsnorm_backward");
    cpu().rmsnorm_backward(x, w, inv, dy, dx, dw);
  }
  void do_rope(const RopeTable& table, const Tensor& x, const Tensor& positions,
               bool inverse) const override {
    const OpScope scope(*this, "rope");
    cpu().rope(table, x, positions, inverse);
  }
  void do_mhc_pre_forward(const MhcDims& d, const MhcSiteTensors& w, const Tensor& X,
                          const Tensor& u, const MhcStateTensors& s) const override {
    const OpScope scope(*this, "mhc_pre_forward");
    cpu().mhc_pre_forward(d, w, X, u, s);
  }
  void do_mhc_post_forward(const MhcDims& d, const Tensor& post, const Tensor& comb,
                           const Tensor& X, const Tensor& y, const Tensor& Xout) const override {
    const OpScope scope(*this, "mhc_post_forward");
    cpu().mhc_post_forward(d, post, comb, X, y, Xout);
  }
  void do_mhc_post_backward(const MhcDims& d, const Tensor& post, const Tensor& comb,
                            const Tensor& X, const Tensor& y, const Tensor& dXout, const Tensor& dX,
                            const Tensor& dy, const Tensor& dpost,
                            const Tensor& dcomb) const override {
    const OpScope scope(*this, "mhc_post_backward");
    cpu().mhc_post_backward(d, post, comb, X, y, dXout, dX, dy, dpost, dcomb);
  }
  void do_mhc_pre_backward(const MhcDims& d, const MhcSiteTensors& w, const MhcStateTensors& s,
                           const Tensor& X, const Tensor& du, const Tensor& dpost,
                           const Tensor& dcomb, const MhcSiteTensors& g,
                           const Tensor& dX) const override {
    const OpScope scope(*this, "mhc_pre_backward");
    cpu().mhc_pre_backward(d, w, s, X, du, dpost, dcomb, g, dX);
  }
  void do_hc_head_forward(const MhcDims& d, const MhcSiteTensors& w, const Tensor& X,
                          const Tensor& h, const MhcStateTensors& s) const override {
    const OpScope scope(*this, "hc_head_forward");
    cpu().hc_head_forward(d, w, X, h, s);
  }
  void do_hc_head_backward(const MhcDims& d, const MhcSiteTensors& w, const MhcStateTensors& s,
                           const Tensor& X, const Tensor& dh, const MhcSiteTensors& g,
                           const Tensor& dX) const override {
    const OpScope scope(*this, "hc_head_backward");
    cpu().hc_head_backward(d, w, s, X, dh, g, dX);
  }
  void do_sinkhorn_forward(const Tensor& logits, int64_t iters, double eps,
                           const Tensor& comb) const override {
    const OpScope scope(*this, "sinkhorn_forward");
    cpu().sinkhorn_forward(logits, iters, eps, comb);
  }
  void do_sinkhorn_backward(const Tensor& logits, int64_t iters, double eps, const Tensor& dcomb,
                            const Tensor& dlogits) const override {
    const OpScope scope(*this, "sinkhorn_backward");
    cpu().sinkhorn_backward(logits, iters, eps, dcomb, dlogits);
  }
  void do_scale(const Tensor& x, double factor) const override {
    const OpScope scope(*this, "scale");
    cpu().scale(x, factor);
  }
  void do_add(const Tensor& x, const Tensor& y) const override {
    const OpScope scope(*this, "add");
    cpu().add(x, y);
  }
  void do_copy(const Tensor& src, const Tensor& dst) const override {
    const OpScope scope(*this, "copy");
    cpu().copy(src, dst);
  }
  void do_gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst) const override {
    const OpScope scope(*this, "gather_rows");
    cpu().gather_rows(src, index, dst);
  }
  void do_scatter_add_rows(const Tensor& src, const Tensor& index,
                           const Tensor& dst) const override {
    const OpScope scope(*this, "scatter_add_rows");
    cpu().scatter_add_rows(src, index, dst);
  }
  void do_broadcast_add(const Tensor& y, const Tensor& x) const override {
    const OpScope scope(*this, "broadcast_add");
    cpu().broadcast_add(y, x);
  }
  void do_sum_copies_add(const Tensor& x, const Tensor& y) const override {
    const OpScope scope(*this, "sum_copies_add");
    cpu().sum_copies_add(x, y);
  }
  void do_attention_core_forward(const AttentionCoreDims& d, const Tensor& q,
                                 const AttentionKeyTensors& k, const Tensor& sink,
                                 const Tensor& prob, const Tensor& sink_prob,
                                 const Tensor& o) const override {
    const OpScope scope(*this, "attention_core_forward");
    cpu().attention_core_forward(d, q, k, sink, prob, sink_prob, o);
  }
  void do_attention_core_backward(const AttentionCoreDims& d, const Tensor& q,
                                  const AttentionKeyTensors& k, const Tensor& prob,
                                  const Tensor& sink_prob, const Tensor& o, const Tensor& d_o,
                                  const Tensor& dq, const Tensor& dkv, const Tensor& dcomp,
                                  const Tensor& dsink) const override {
    const OpScope scope(*this, "attention_core_backward");
    cpu().attention_core_backward(d, q, k, prob, sink_prob, o, d_o, dq, dkv, dcomp, dsink);
  }
  void do_attention_selected_mass(const AttentionCoreDims& d, int64_t heads, const Tensor& prob,
                                  const Tensor& prob_offsets, const Tensor& comp_offsets,
                                  const Tensor& selected, const Tensor& target) const override {
    const OpScope scope(*this, "attention_selected_mass");
    cpu().attention_selected_mass(d, heads, prob, prob_offsets, comp_offsets, selected, target);
  }
  void do_compressor_pool_forward(const CompressorPoolDims& d, const Tensor& gate,
                                  const Tensor& proj, const Tensor& ape, const Tensor& prob,
                                  const Tensor& pooled) const override {
    const OpScope scope(*this, "compressor_pool_forward");
    cpu().compressor_pool_forward(d, gate, proj, ape, prob, pooled);
  }
  void do_compressor_pool_backward(const CompressorPoolDims& d, const Tensor& prob,
                                   const Tensor& proj, const Tensor& pooled, const Tensor& dpooled,
                                   const Tensor& dproj, const Tensor& dgate,
                                   const Tensor& dape) const override {
    const OpScope scope(*this, "compressor_pool_backward");
    cpu().compressor_pool_backward(d, prob, proj, pooled, dpooled, dproj, dgate, dape);
  }
  void do_indexer_select(const IndexerScoreDims& d, const IndexerScoreTensors& in,
                         const Tensor& selected,
                         std::vector<SelectionBoundary>* boundaries) const override {
    const OpScope scope(*this, "indexer_select");
    cpu().indexer_select(d, in, selected, boundaries);
  }
  void do_indexer_selected_scores(const IndexerScoreDims& d, const IndexerScoreTensors& in,
                                  const Tensor& selected, const Tensor& scores) const override {
    const OpScope scope(*this, "indexer_selected_scores");
    cpu().indexer_selected_scores(d, in, selected, scores);
  }
  double do_indexer_kl_loss(const Tensor& selected, const Tensor& scores, const Tensor& target,
                            const Tensor& dscores) const override {
    const OpScope scope(*this, "indexer_kl_loss");
    return cpu().indexer_kl_loss(selected, scores, target, dscores);
  }
  void do_indexer_score_backward(const IndexerScoreDims& d, const IndexerScoreTensors& in,
                                 const Tensor& selected, const Tensor& dscores, double scale,
                                 const Tensor& dq, const Tensor& dweights,
                                 const Tensor& dkeys) const override {
    const OpScope scope(*this, "indexer_score_backward");
    cpu().indexer_score_backward(d, in, selected, dscores, scale, dq, dweights, dkeys);
  }
  void do_adamw_update(const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& v,
                       const trex::kernels::AdamWCoefficients& c) const override {
    const OpScope scope(*this, "adamw_update");
    cpu().adamw_update(w, g, m, v, c);
  }
  void do_newton_schulz(const Tensor& X, const Tensor& out,
                        const trex::kernels::NewtonSchulzParams& p) const override {
    const OpScope scope(*this, "newton_schulz");
    cpu().newton_schulz(X, out, p);
  }
  void do_muon_update(std::span<const trex::kernels::MuonMatrix> matrices, const Tensor& ws,
                      const trex::kernels::MuonStep& step) const override {
    const OpScope scope(*this, "muon_update");
    cpu().muon_update(matrices, ws, step);
  }
  void do_copy_from_host(const void* src, const Tensor& dst) const override {
    const OpScope scope(*this, "copy_from_host");
    cpu().copy_from_host(src, dst);
  }
  void do_copy_to_host(const Tensor& src, void* dst) const override {
    const OpScope scope(*this, "copy_to_host");
    cpu().copy_to_host(src, dst);
  }
  void do_run_independent(int64_t count, const std::function<void(int64_t)>& task) const override {
    const OpScope scope(*this, "run_independent");
    cpu().run_independent(count, task);
  }
  void do_sequence_positions(const Tensor& positions, int64_t period,
                             int64_t stride) const override {
    const OpScope scope(*this, "sequence_positions");
    cpu().sequence_positions(positions, period, stride);
  }
  IndexScan do_scan_indices(const Tensor& index, int64_t lo, int64_t hi) const override {
    const OpScope scope(*this, "scan_indices");
    return cpu().scan_indices(index, lo, hi);
  }
  void do_count_indices(const Tensor& index, const Tensor& counts) const override {
    const OpScope scope(*this, "count_indices");
    cpu().count_indices(index, counts);
  }
  void do_counting_sort(const Tensor& keys, const Tensor& offsets, const Tensor& order,
                        const Tensor& rank) const override {
    const OpScope scope(*this, "counting_sort");
    cpu().counting_sort(keys, offsets, order, rank);
  }
  int64_t do_first_invisible_selection(const AttentionKeySetDims& dims,
                                       const Tensor& selected) const override {
    const OpScope scope(*this, "first_invisible_selection");
    return cpu().first_invisible_selection(dims, selected);
  }
  AttentionKeySetSizes do_attention_key_offsets(const AttentionKeySetDims& dims,
                                                const Tensor& selected, const Tensor& comp_offsets,
                                                const Tensor& prob_offsets) const override {
    const OpScope scope(*this, "attention_key_offsets");
    return cpu().attention_key_offsets(dims, selected, comp_offsets, prob_offsets);
  }
  void do_attention_compressed_keys(const AttentionKeySetDims& dims, const Tensor& selected,
                                    const Tensor& comp_offsets,
                                    const Tensor& comp_list) const override {
    const OpScope scope(*this, "attention_compressed_keys");
    cpu().attention_compressed_keys(dims, selected, comp_offsets, comp_list);
  }
  double do_sum_squares(const Tensor& x, const Tensor& bounds) const override {
    const OpScope scope(*this, "sum_squares");
    return cpu().sum_squares(x, bounds);
  }
  void do_router_scores(const Tensor& logits, const Tensor& scores) const override {
    const OpScope scope(*this, "router_scores");
    cpu().router_scores(logits, scores);
  }
  void do_router_select(const Tensor& scores, const Tensor& bias, const Tensor& token_ids,
                        const Tensor& tid2eid, const Tensor& expert_index) const override {
    const OpScope scope(*this, "router_select");
    cpu().router_select(scores, bias, token_ids, tid2eid, expert_index);
  }
  void do_router_combine(const RouterCombineParams& p, const Tensor& scores,
                         const Tensor& expert_index, const Tensor& combine) const override {
    const OpScope scope(*this, "router_combine");
    cpu().router_combine(p, scores, expert_index, combine);
  }
  void do_router_balance_frequencies(const Tensor& expert_index, const Tensor& sequences,
                                     const Tensor& freq) const override {
    const OpScope scope(*this, "router_balance_frequencies");
    cpu().router_balance_frequencies(expert_index, sequences, freq);
  }
  double do_router_balance_loss(double weight, const Tensor& scores, const Tensor& freq,
                                const Tensor& sequences) const override {
    const OpScope scope(*this, "router_balance_loss");
    return cpu().router_balance_loss(weight, scores, freq, sequences);
  }
  void do_router_backward(const RouterCombineParams& p, const RouterBalanceGrad& balance,
                          const Tensor& logits, const Tensor& scores, const Tensor& expert_index,
                          const Tensor& combine, const Tensor& d_combine, int64_t begin,
                          int64_t end, const Tensor& dlogits) const override {
    const OpScope scope(*this, "router_backward");
    cpu().router_backward(p, balance, logits, scores, expert_index, combine, d_combine, begin, end,
                          dlogits);
  }
  void do_router_bias_update(const Tensor& bias, const Tensor& load, double speed) const override {
    const OpScope scope(*this, "router_bias_update");
    cpu().router_bias_update(bias, load, speed);
  }
  void do_swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& scale, double limit,
                         const Tensor& h) const override {
    const OpScope scope(*this, "swiglu_forward");
    cpu().swiglu_forward(gate, up, scale, limit, h);
  }
  void do_swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& scale,
                          const Tensor& dh, double limit, const Tensor& dg, const Tensor& dv,
                          const Tensor& dscale) const override {
    const OpScope scope(*this, "swiglu_backward");
    cpu().swiglu_backward(gate, up, scale, dh, limit, dg, dv, dscale);
  }
  void do_grouped_rows_linear_forward(const Tensor& offsets, const Tensor& x,
                                      std::span<const Tensor> w, const Tensor& y,
                                      Precision p) const override {
    const OpScope scope(*this, "grouped_rows_linear_forward");
    cpu().grouped_linear_forward(offsets, x, w, y, p);
  }
  void do_grouped_rows_linear_backward(const Tensor& offsets, const Tensor& x,
                                       std::span<const Tensor> w, const Tensor& dy,
                                       const Tensor& dx, std::span<const Tensor> dw,
                                       const LinearOptions& o) const override {
    const OpScope scope(*this, "grouped_rows_linear_backward");
    cpu().grouped_linear_backward(offsets, x, w, dy, dx, dw, o);
  }
  void do_moe_permute(int64_t top_k, const Tensor& x, const Tensor& order, const Tensor& combine,
                      const Tensor& rows, const Tensor& row_combine) const override {
    const OpScope scope(*this, "moe_permute");
    cpu().moe_permute(top_k, x, order, combine, rows, row_combine);
  }
  void do_moe_unpermute(const Tensor& rows, const Tensor& pair_row,
                        const Tensor& y) const override {
    const OpScope scope(*this, "moe_unpermute");
    cpu().moe_unpermute(rows, pair_row, y);
  }
  void do_pack_rows(const Tensor& rows, const Tensor& weights, const Tensor& index,
                    const Tensor& packed) const override {
    const OpScope scope(*this, "pack_rows");
    cpu().pack_rows(rows, weights, index, packed);
  }
  void do_unpack_rows(const Tensor& packed, const Tensor& index, const Tensor& rows,
                      const Tensor& weights) const override {
    const OpScope scope(*this, "unpack_rows");
    cpu().unpack_rows(packed, index, rows, weights);
  }
  void do_decode_indexer_select(const Tensor& q, const Tensor& w, const Tensor& keys,
                                const Tensor& selected) const override {
    const OpScope scope(*this, "decode_indexer_select");
    cpu().decode_indexer_select(q, w, keys, selected);
  }
  void do_decode_attention(const Tensor& q, const Tensor& keys, const Tensor& sink,
                           const Tensor& o) const override {
    const OpScope scope(*this, "decode_attention");
    cpu().decode_attention(q, keys, sink, o);
  }
  double do_lm_head_cross_entropy(const Tensor& h, const Tensor& head, const Tensor& targets,
                                  const Tensor& weights, double loss_scale,
                                  const LmHeadOutputs& outputs, int64_t chunk_rows,
                                  Precision p) const override {
    const OpScope scope(*this, "lm_head_cross_entropy");
    return cpu().lm_head_cross_entropy(h, head, targets, weights, loss_scale, outputs, chunk_rows,
                                       p);
  }

  bool guard_ = false;
  mutable std::mutex mutex_;
  mutable std::map<void*, size_t> live_;
  mutable int in_flight_ = 0;
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

// One training step of a model on `backend` and of the same model on the CPU
// backend: the losses, expert loads and gradients are bitwise equal.
trex::model::LossBreakdown step_on_backend_matches_cpu(const trex::model::ModelConfig& config,
                                                       const trex::model::Batch& batch,
                                                       const trex::model::LossOptions& loss,
                                                       uint64_t seed, const Backend& backend) {
  trex::model::Model<float> reference(config);
  reference.init_random(seed);
  const trex::model::LossBreakdown expected = reference.forward_backward(batch, loss);
  trex::model::Model<float> model(config);
  model.init_random(seed);
  model.set_backend(backend);
  const trex::model::LossBreakdown got = model.forward_backward(batch, loss);
  EXPECT_EQ(got.total, expected.total);
  EXPECT_EQ(got.lm, expected.lm);
  EXPECT_EQ(got.mtp, expected.mtp);
  EXPECT_EQ(got.indexer, expected.indexer);
  EXPECT_EQ(got.expert_load, expected.expert_load);
  EXPECT_EQ(model.params().grads(), reference.params().grads());
  return got;
}

TEST(BackendDispatch, ModelStepOnARecordingBackendIsBitwiseTheCpuStepAndUsesEveryModelOp) {
  const auto config =
      trex::model::ModelConfig::load(trex::test::source_dir() + "/configs/models/tiny-v4.json");
  trex::model::LossOptions loss;
  loss.balance_loss_weight = 0.01;
  loss.indexer_loss = true;
  const auto batch = random_batch(config, 2, 24);

  RecordingBackend recording;
  step_on_backend_matches_cpu(config, batch, loss, 3, recording);

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
                         "moe_unpermute",
                         "copy_from_host",
                         "copy_to_host",
                         "sequence_positions",
                         "scan_indices",
                         "count_indices",
                         "counting_sort",
                         "first_invisible_selection",
                         "attention_key_offsets",
                         "attention_compressed_keys"})
    EXPECT_GT(calls.count(op) ? calls.at(op) : 0, 0) << op;
}

// A device backend's memory is out of the host's reach: model code must move
// data only through ops (copy_from_host / copy_to_host included). On a backend
// whose memory is inaccessible between ops, a packed training step (segments
// run through run_independent, MTP, hash and score routing, balance and
// indexer losses) completes and matches the CPU step bit for bit.
TEST(BackendDispatch, ModelCodeTouchesBackendMemoryOnlyInsideOps) {
  const auto config =
      trex::model::ModelConfig::load(trex::test::source_dir() + "/configs/models/tiny-v4.json");
  trex::model::LossOptions loss;
  loss.balance_loss_weight = 0.01;
  loss.indexer_loss = true;
  trex::model::Batch batch = random_batch(config, 2, 24);
  for (int64_t r = 0; r < batch.B * batch.S; ++r)
    batch.document_ids.push_back(r / batch.S * 2 + (r % batch.S >= 10 ? 1 : 0));

  RecordingBackend guarded(/*guard_memory=*/true);
  const trex::model::LossBreakdown got =
      step_on_backend_matches_cpu(config, batch, loss, 5, guarded);
  EXPECT_GT(got.mtp, 0.0);
  const std::map<std::string, int> calls = guarded.calls();
  EXPECT_GT(calls.count("run_independent") ? calls.at("run_independent") : 0, 0);
}

}  // namespace
