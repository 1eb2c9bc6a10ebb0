// The op layer: every op through the Backend interface equals the CPU kernel
// it wraps bit for bit (F32 and F64; the MoE and decode ops included), operands of the wrong dtype
// or shape are rejected naming the op and operand, and buffers come zero-filled from the backend.
#include "trex/kernels/backend.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"
#include "trex/kernels/cpu/attention.hpp"
#include "trex/kernels/cpu/compressor.hpp"
#include "trex/kernels/cpu/cpu_backend.hpp"
#include "trex/kernels/cpu/decode.hpp"
#include "trex/kernels/cpu/gemm.hpp"
#include "trex/kernels/cpu/indexer.hpp"
#include "trex/kernels/cpu/lm_loss.hpp"
#include "trex/kernels/cpu/mhc.hpp"
#include "trex/kernels/cpu/moe.hpp"
#include "trex/kernels/cpu/norms.hpp"
#include "trex/kernels/cpu/optimizer.hpp"
#include "trex/kernels/cpu/rope.hpp"
#include "trex/kernels/cpu/rows.hpp"

namespace trex::kernels {
namespace {

template <class T>
std::vector<T> uniform(uint64_t seed, int64_t n, double scale = 1.0) {
  Rng rng(seed, {0x0b});
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<T>(scale * (2.0 * rng.uniform() - 1.0));
  return v;
}

template <class T>
Tensor t(std::vector<T>& v, std::initializer_list<int64_t> shape) {
  return Tensor::of(v.data(), shape);
}

// Expects op() to throw a trex::Error on `field` whose message contains `text`.
template <class F>
void expect_rejected(F op, const std::string& field, const std::string& text) {
  try {
    op();
    FAIL() << "expected trex::Error on " << field;
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), field) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

template <class T>
class BackendOps : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(BackendOps, FloatTypes);

TYPED_TEST(BackendOps, LinearEqualsTheGemmKernelInBothPrecisions) {
  using T = TypeParam;
  const Backend& ops = cpu_backend();
  const int64_t M = 37, N = 29, K = 64;  // above the small-GEMM loop's cut-off
  std::vector<T> x = uniform<T>(1, M * K), w = uniform<T>(2, N * K), dy = uniform<T>(3, M * N);
  for (Precision p : {Precision::kF32, Precision::kBF16}) {
    std::vector<T> y(M * N, T(0.5)), y_ref(y), dx = uniform<T>(4, M * K), dx_ref(dx);
    std::vector<T> dw = uniform<T>(5, N * K), dw_ref(dw);
    ops.linear_forward(t(x, {M, K}), t(w, {N, K}), t(y, {M, N}), {p, true});
    linear_forward(x.data(), w.data(), y_ref.data(), M, N, K, p, true);
    EXPECT_EQ(y, y_ref);
    ops.linear_backward(t(x, {M, K}), t(w, {N, K}), t(dy, {M, N}), t(dx, {M, K}), t(dw, {N, K}),
                        {p, false});
    linear_backward(x.data(), w.data(), dy.data(), dx_ref.data(), dw_ref.data(), M, N, K, p, false);
    EXPECT_EQ(dx, dx_ref);
    EXPECT_EQ(dw, dw_ref);
    // Absent outputs are skipped.
    std::vector<T> dw_only = uniform<T>(5, N * K);
    ops.linear_backward(t(x, {M, K}), t(w, {N, K}), t(dy, {M, N}), Tensor(), t(dw_only, {N, K}),
                        {p, false});
    EXPECT_EQ(dw_only, dw_ref);
  }
}

TYPED_TEST(BackendOps, GroupedLinearEqualsOneGemmPerGroup) {
  using T = TypeParam;
  const Backend& ops = cpu_backend();
  const int64_t M = 21, G = 3, K = 16, N = 8;
  std::vector<T> x = uniform<T>(6, M * G * K), w = uniform<T>(7, G * N * K);
  std::vector<T> dy = uniform<T>(8, M * G * N);
  std::vector<T> y(M * G * N), y_ref(M * G * N), dx(M * G * K), dx_ref(M * G * K);
  std::vector<T> dw = uniform<T>(9, G * N * K), dw_ref(dw);
  ops.grouped_linear_forward(G, t(x, {M, G * K}), t(w, {G * N, K}), t(y, {M, G * N}),
                             Precision::kF32);
  ops.grouped_linear_backward(G, t(x, {M, G * K}), t(w, {G * N, K}), t(dy, {M, G * N}),
                              t(dx, {M, G * K}), t(dw, {G * N, K}), Precision::kF32);
  for (int64_t j = 0; j < G; ++j) {
    gemm<T>(Precision::kF32, false, true, M, N, K, T(1), x.data() + j * K, G * K,
            w.data() + j * N * K, K, T(0), y_ref.data() + j * N, G * N);
    gemm<T>(Precision::kF32, true, false, N, K, M, T(1), dy.data() + j * N, G * N, x.data() + j * K,
            G * K, T(1), dw_ref.data() + j * N * K, K);
    gemm<T>(Precision::kF32, false, false, M, K, N, T(1), dy.data() + j * N, G * N,
            w.data() + j * N * K, K, T(0), dx_ref.data() + j * K, G * K);
  }
  EXPECT_EQ(y, y_ref);
  EXPECT_EQ(dx, dx_ref);
  EXPECT_EQ(dw, dw_ref);
}

TYPED_TEST(BackendOps, RmsnormAndRopeEqualTheirKernels) {
  using T = TypeParam;
  const Backend& ops = cpu_backend();
  const int64_t R = 70, D = 24;
  std::vector<T> x = uniform<T>(10, R * D, 2.0), weight = uniform<T>(11, D);
  std::vector<T> dy = uniform<T>(12, R * D);
  std::vector<T> y(R * D), y_ref(R * D), inv(R), inv_ref(R), dx(R * D), dx_ref(R * D);
  std::vector<T> dweight = uniform<T>(13, D), dweight_ref(dweight);
  ops.rmsnorm_forward(t(x, {R, D}), t(weight, {D}), t(y, {R, D}), t(inv, {R}), 1e-6);
  rmsnorm_forward(x.data(), weight.data(), y_ref.data(), inv_ref.data(), R, D, 1e-6);
  EXPECT_EQ(y, y_ref);
  EXPECT_EQ(inv, inv_ref);
  ops.rmsnorm_backward(t(x, {R, D}), t(weight, {D}), t(inv, {R}), t(dy, {R, D}), t(dx, {R, D}),
                       t(dweight, {D}));
  rmsnorm_backward(x.data(), weight.data(), inv_ref.data(), dy.data(), dx_ref.data(),
                   dweight_ref.data(), R, D);
  EXPECT_EQ(dx, dx_ref);
  EXPECT_EQ(dweight, dweight_ref);
  // Unweighted, without inv_rms.
  ops.rmsnorm_forward(t(x, {R, D}), Tensor(), t(y, {R, D}), Tensor(), 1e-6);
  rmsnorm_forward(x.data(), static_cast<const T*>(nullptr), y_ref.data(), static_cast<T*>(nullptr),
                  R, D, 1e-6);
  EXPECT_EQ(y, y_ref);

  const RopeTable table(8, 10000.0, 16);
  std::vector<int64_t> positions(7);
  for (int64_t r = 0; r < 7; ++r) positions[r] = (3 * r) % 16;
  std::vector<T> q = uniform<T>(14, 7 * 3 * 16), q_ref(q);
  for (bool inverse : {false, true}) {
    ops.rope(table, t(q, {7, 3, 16}), Tensor::of(positions.data(), {7}), inverse);
    rope_apply(table, q_ref.data(), 7, 3, 16, positions.data(), inverse);
    EXPECT_EQ(q, q_ref);
  }
}

// One mHC site and the HC head, forward and backward, through the interface
// and through the kernels.
TYPED_TEST(BackendOps, MhcOpsEqualTheirKernels) {
  using T = TypeParam;
  const Backend& ops = cpu_backend();
  const MhcDims dims{40, 16, 4, 20, 1e-6, 1e-6};  // N >= 32: the Sinkhorn loop runs threaded
  const int64_t N = dims.tokens, n = dims.hc_mult, d = dims.hidden, mix = dims.mix();
  std::vector<T> X = uniform<T>(20, N * n * d, 1.5), fn = uniform<T>(21, mix * n * d, 0.3);
  std::vector<T> base = uniform<T>(22, mix, 0.5), scale = {T(1.2), T(0.8), T(1.1)};
  std::vector<T> y = uniform<T>(23, N * d), dXout = uniform<T>(24, N * n * d);
  std::vector<T> du = uniform<T>(25, N * d);
  struct Run {
    std::vector<T> u, inv, mixv, pre, post, comb, Xout, dX, dy, dpost, dcomb, gfn, gbase, gscale;
  };
  auto fresh = [&] {
    Run r;
    r.u.assign(N * d, T(0));
    r.inv.assign(N, T(0));
    r.mixv.assign(N * mix, T(0));
    r.pre.assign(N * n, T(0));
    r.post.assign(N * n, T(0));
    r.comb.assign(N * n * n, T(0));
    r.Xout.assign(N * n * d, T(0));
    r.dX.assign(N * n * d, T(0));
    r.dy.assign(N * d, T(0));
    r.dpost.assign(N * n, T(0));
    r.dcomb.assign(N * n * n, T(0));
    r.gfn.assign(fn.size(), T(0));
    r.gbase.assign(base.size(), T(0));
    r.gscale.assign(3, T(0));
    return r;
  };
  Run a = fresh(), b = fresh();
  const MhcSiteTensors weights{t(fn, {mix, n * d}), t(base, {mix}), t(scale, {3})};
  const MhcStateTensors state{t(a.inv, {N}), t(a.mixv, {N, mix}), t(a.pre, {N, n}),
                              t(a.post, {N, n}), t(a.comb, {N, n, n})};
  ops.mhc_pre_forward(dims, weights, t(X, {N, n, d}), t(a.u, {N, d}), state);
  ops.mhc_post_forward(dims, t(a.post, {N, n}), t(a.comb, {N, n, n}), t(X, {N, n, d}), t(y, {N, d}),
                       t(a.Xout, {N, n, d}));
  ops.mhc_post_backward(dims, t(a.post, {N, n}), t(a.comb, {N, n, n}), t(X, {N, n, d}),
                        t(y, {N, d}), t(dXout, {N, n, d}), t(a.dX, {N, n, d}), t(a.dy, {N, d}),
                        t(a.dpost, {N, n}), t(a.dcomb, {N, n, n}));
  ops.mhc_pre_backward(dims, weights, state, t(X, {N, n, d}), t(du, {N, d}), t(a.dpost, {N, n}),
                       t(a.dcomb, {N, n, n}),
                       MhcSiteTensors{t(a.gfn, {mix, n * d}), t(a.gbase, {mix}), t(a.gscale, {3})},
                       t(a.dX, {N, n, d}));

  const MhcSite<const T> w{fn.data(), base.data(), scale.data()};
  const MhcState<T> s{b.inv.data(), b.mixv.data(), b.pre.data(), b.post.data(), b.comb.data()};
  mhc_pre_forward(dims, w, X.data(), b.u.data(), s);
  mhc_post_forward(dims, b.post.data(), b.comb.data(), X.data(), y.data(), b.Xout.data());
  mhc_post_backward(dims, b.post.data(), b.comb.data(), X.data(), y.data(), dXout.data(),
                    b.dX.data(), b.dy.data(), b.dpost.data(), b.dcomb.data());
  mhc_pre_backward(
      dims, w,
      MhcState<const T>{b.inv.data(), b.mixv.data(), b.pre.data(), b.post.data(), b.comb.data()},
      X.data(), du.data(), b.dpost.data(), b.dcomb.data(),
      MhcSite<T>{b.gfn.data(), b.gbase.data(), b.gscale.data()}, b.dX.data());
  EXPECT_EQ(a.u, b.u);
  EXPECT_EQ(a.mixv, b.mixv);
  EXPECT_EQ(a.comb, b.comb);
  EXPECT_EQ(a.Xout, b.Xout);
  EXPECT_EQ(a.dy, b.dy);
  EXPECT_EQ(a.dX, b.dX);
  EXPECT_EQ(a.gfn, b.gfn);
  EXPECT_EQ(a.gbase, b.gbase);
  EXPECT_EQ(a.gscale, b.gscale);

  // HC head.
  std::vector<T> hfn = uniform<T>(26, n * n * d, 0.3), hbase = uniform<T>(27, n), hscale = {T(1.3)};
  Run c = fresh(), e = fresh();
  c.mixv.assign(N * n, T(0));
  e.mixv.assign(N * n, T(0));
  const MhcSiteTensors head{t(hfn, {n, n * d}), t(hbase, {n}), t(hscale, {1})};
  const MhcStateTensors head_state{t(c.inv, {N}), t(c.mixv, {N, n}), t(c.pre, {N, n}), Tensor(),
                                   Tensor()};
  ops.hc_head_forward(dims, head, t(X, {N, n, d}), t(c.u, {N, d}), head_state);
  ops.hc_head_backward(dims, head, head_state, t(X, {N, n, d}), t(du, {N, d}),
                       MhcSiteTensors{t(c.gfn, {n, n * d}), t(c.gbase, {n}), t(c.gscale, {1})},
                       t(c.dX, {N, n, d}));
  const MhcSite<const T> hw{hfn.data(), hbase.data(), hscale.data()};
  hc_head_forward(dims, hw, X.data(), e.u.data(),
                  MhcState<T>{e.inv.data(), e.mixv.data(), e.pre.data(), nullptr, nullptr});
  hc_head_backward(
      dims, hw, MhcState<const T>{e.inv.data(), e.mixv.data(), e.pre.data(), nullptr, nullptr},
      X.data(), du.data(), MhcSite<T>{e.gfn.data(), e.gbase.data(), e.gscale.data()}, e.dX.data());
  EXPECT_EQ(c.u, e.u);
  EXPECT_EQ(c.dX, e.dX);
  EXPECT_EQ(std::vector<T>(c.gfn.begin(), c.gfn.begin() + n * n * d),
            std::vector<T>(e.gfn.begin(), e.gfn.begin() + n * n * d));
  EXPECT_EQ(c.gscale, e.gscale);

  // Sinkhorn alone.
  std::vector<T> logits = uniform<T>(28, n * n, 2.0), comb(n * n), comb_ref(n * n);
  std::vector<T> dcomb = uniform<T>(29, n * n), dlogits(n * n), dlogits_ref(n * n);
  ops.sinkhorn_forward(t(logits, {n, n}), 7, 1e-6, t(comb, {n, n}));
  ops.sinkhorn_backward(t(logits, {n, n}), 7, 1e-6, t(dcomb, {n, n}), t(dlogits, {n, n}));
  sinkhorn_forward(logits.data(), n, 7, 1e-6, comb_ref.data());
  sinkhorn_backward(logits.data(), n, 7, 1e-6, dcomb.data(), dlogits_ref.data());
  EXPECT_EQ(comb, comb_ref);
  EXPECT_EQ(dlogits, dlogits_ref);
}

// Two sequences of 6 rows, window 3; row t >= 2 also attends to compressed
// entry 0 of its sequence and t >= 5 to entry 1.
TYPED_TEST(BackendOps, AttentionCoreEqualsItsKernels) {
  using T = TypeParam;
  const Backend& ops = cpu_backend();
  const AttentionCoreDims dims{6, 3};
  const int64_t B = 2, N = 12, H = 2, c = 8, E = 4;
  std::vector<int64_t> comp_offsets{0}, comp_list, prob_offsets{0};
  for (int64_t r = 0; r < N; ++r) {
    const int64_t t = r % 6, b = r / 6;
    if (t >= 2) comp_list.push_back(b * 2);
    if (t >= 5) comp_list.push_back(b * 2 + 1);
    comp_offsets.push_back(static_cast<int64_t>(comp_list.size()));
    prob_offsets.push_back(prob_offsets.back() +
                           H * (dims.window_keys(r) + comp_offsets[r + 1] - comp_offsets[r]));
  }
  ASSERT_EQ(B * 6, N);
  const int64_t P = prob_offsets.back();
  std::vector<T> q = uniform<T>(30, N * H * c), kv = uniform<T>(31, N * c);
  std::vector<T> compressed = uniform<T>(32, E * c), sink = uniform<T>(33, H);
  std::vector<T> d_o = uniform<T>(34, N * H * c);
  const AttentionKeyTensors keys{t(kv, {N, c}), t(compressed, {E, c}),
                                 Tensor::of(comp_offsets.data(), {N + 1}),
                                 Tensor::of(comp_list.data(), {int64_t(comp_list.size())}),
                                 Tensor::of(prob_offsets.data(), {N + 1})};
  std::vector<T> prob(P), sink_prob(N * H), o(N * H * c);
  std::vector<T> prob_ref(P), sink_ref(N * H), o_ref(N * H * c);
  ops.attention_core_forward(dims, t(q, {N, H, c}), keys, t(sink, {H}), t(prob, {P}),
                             t(sink_prob, {N, H}), t(o, {N, H, c}));
  const AttentionKeySets<T> ks{kv.data(),           compressed.data(), E,
                               comp_offsets.data(), comp_list.data(),  prob_offsets.data()};
  attention_core_forward(dims, N, H, c, q.data(), ks, sink.data(), prob_ref.data(), sink_ref.data(),
                         o_ref.data());
  EXPECT_EQ(prob, prob_ref);
  EXPECT_EQ(sink_prob, sink_ref);
  EXPECT_EQ(o, o_ref);
  std::vector<T> dq(N * H * c), dkv(N * c), dcomp(E * c), dsink = uniform<T>(35, H);
  std::vector<T> dq_ref(N * H * c), dkv_ref(N * c), dcomp_ref(E * c), dsink_ref(dsink);
  ops.attention_core_backward(dims, t(q, {N, H, c}), keys, t(prob, {P}), t(sink_prob, {N, H}),
                              t(o, {N, H, c}), t(d_o, {N, H, c}), t(dq, {N, H, c}), t(dkv, {N, c}),
                              t(dcomp, {E, c}), t(dsink, {H}));
  attention_core_backward(dims, N, H, c, q.data(), ks, prob.data(), sink_prob.data(), o.data(),
                          d_o.data(), dq_ref.data(), dkv_ref.data(), dcomp_ref.data(),
                          dsink_ref.data());
  EXPECT_EQ(dq, dq_ref);
  EXPECT_EQ(dkv, dkv_ref);
  EXPECT_EQ(dcomp, dcomp_ref);
  EXPECT_EQ(dsink, dsink_ref);
  std::vector<int64_t> selected(N * 2, -1);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t k = 0; k < comp_offsets[r + 1] - comp_offsets[r]; ++k) selected[r * 2 + k] = k;
  std::vector<T> target(N * 2), target_ref(N * 2);
  ops.attention_selected_mass(dims, H, t(prob, {P}), Tensor::of(prob_offsets.data(), {N + 1}),
                              Tensor::of(comp_offsets.data(), {N + 1}),
                              Tensor::of(selected.data(), {N, 2}), t(target, {N, 2}));
  attention_selected_mass(dims, N, H, 2, prob.data(), prob_offsets.data(), comp_offsets.data(),
                          selected.data(), target_ref.data());
  EXPECT_EQ(target, target_ref);
  EXPECT_GT(target[5 * 2], T(0));  // row 5 attends to entry 0
}

TYPED_TEST(BackendOps, CompressorPoolingEqualsItsKernels) {
  using T = TypeParam;
  const Backend& ops = cpu_backend();
  for (bool overlap : {true, false}) {
    const CompressorPoolDims dims{2, 9, 4, 3, overlap};  // one tail token per sequence dropped
    const int64_t tokens = 18, W = dims.width(), E = dims.entries(), slots = dims.slots();
    std::vector<T> gate = uniform<T>(40, tokens * W), proj = uniform<T>(41, tokens * W);
    std::vector<T> ape = uniform<T>(42, 4 * W), dpooled = uniform<T>(43, E * 3);
    std::vector<T> prob(E * slots * 3), pooled(E * 3), prob_ref(prob), pooled_ref(pooled);
    ops.compressor_pool_forward(dims, t(gate, {tokens, W}), t(proj, {tokens, W}), t(ape, {4, W}),
                                t(prob, {E, slots, 3}), t(pooled, {E, 3}));
    compressor_pool_forward(dims, gate.data(), proj.data(), ape.data(), prob_ref.data(),
                            pooled_ref.data());
    EXPECT_EQ(prob, prob_ref);
    EXPECT_EQ(pooled, pooled_ref);
    std::vector<T> dproj(tokens * W), dgate(tokens * W), dape = uniform<T>(44, 4 * W);
    std::vector<T> dproj_ref(dproj), dgate_ref(dgate), dape_ref(dape);
    ops.compressor_pool_backward(dims, t(prob, {E, slots, 3}), t(proj, {tokens, W}),
                                 t(pooled, {E, 3}), t(dpooled, {E, 3}), t(dproj, {tokens, W}),
                                 t(dgate, {tokens, W}), t(dape, {4, W}));
    compressor_pool_backward(dims, prob.data(), proj.data(), pooled.data(), dpooled.data(),
                             dproj_ref.data(), dgate_ref.data(), dape_ref.data());
    EXPECT_EQ(dproj, dproj_ref);
    EXPECT_EQ(dgate, dgate_ref);
    EXPECT_EQ(dape, dape_ref);
  }
}

TYPED_TEST(BackendOps, IndexerOpsEqualTheirKernels) {
  using T = TypeParam;
  const Backend& ops = cpu_backend();
  const IndexerScoreDims dims{8, 2, 4, 2};  // S 8, ratio 2, 4 blocks, top-2
  const int64_t tokens = 16, heads = 2, hd = 4, k = 2;
  std::vector<T> q = uniform<T>(50, tokens * heads * hd), hw = uniform<T>(51, tokens * heads);
  std::vector<T> keys = uniform<T>(52, 8 * hd);
  const IndexerScoreTensors in{t(q, {tokens, heads, hd}), t(hw, {tokens, heads}), t(keys, {8, hd})};
  const IndexerScoring<T> raw{q.data(), hw.data(), keys.data(), heads, hd};
  std::vector<int64_t> selected(tokens * k), selected_ref(tokens * k);
  std::vector<SelectionBoundary> bounds, bounds_ref;
  ops.indexer_select(dims, in, Tensor::of(selected.data(), {tokens, k}), &bounds);
  indexer_select(dims, raw, tokens, selected_ref.data(), &bounds_ref);
  EXPECT_EQ(selected, selected_ref);
  ASSERT_EQ(bounds.size(), bounds_ref.size());
  for (size_t i = 0; i < bounds.size(); ++i) EXPECT_EQ(bounds[i].margin, bounds_ref[i].margin);
  std::vector<T> scores(tokens * k), scores_ref(tokens * k);
  ops.indexer_selected_scores(dims, in, Tensor::of(selected.data(), {tokens, k}),
                              t(scores, {tokens, k}));
  indexer_selected_scores(dims, raw, tokens, selected.data(), scores_ref.data());
  EXPECT_EQ(scores, scores_ref);
  std::vector<T> target(tokens * k, T(0.5)), dscores(tokens * k), dscores_ref(tokens * k);
  const double loss =
      ops.indexer_kl_loss(Tensor::of(selected.data(), {tokens, k}), t(scores, {tokens, k}),
                          t(target, {tokens, k}), t(dscores, {tokens, k}));
  EXPECT_EQ(loss, indexer_kl_loss(tokens, k, selected.data(), scores.data(), target.data(),
                                  dscores_ref.data()));
  EXPECT_EQ(dscores, dscores_ref);
  std::vector<T> dq(q.size()), dw(hw.size()), dk(keys.size()), dq_ref(dq), dw_ref(dw), dk_ref(dk);
  ops.indexer_score_backward(dims, in, Tensor::of(selected.data(), {tokens, k}),
                             t(dscores, {tokens, k}), 0.75, t(dq, {tokens, heads, hd}),
                             t(dw, {tokens, heads}), t(dk, {8, hd}));
  indexer_score_backward(dims, raw, tokens, selected.data(), dscores.data(), T(0.75), dq_ref.data(),
                         dw_ref.data(), dk_ref.data());
  EXPECT_EQ(dq, dq_ref);
  EXPECT_EQ(dw, dw_ref);
  EXPECT_EQ(dk, dk_ref);
}

TYPED_TEST(BackendOps, LmHeadCrossEntropyEqualsItsKernel) {
  using T = TypeParam;
  const Backend& ops = cpu_backend();
  const int64_t N = 10, d = 8, V = 12;
  std::vector<T> h = uniform<T>(60, N * d), head = uniform<T>(61, V * d);
  std::vector<int64_t> targets{3, -100, 0, 11, 5, -1, 7, 7, 2, 9};
  std::vector<int32_t> targets32(targets.begin(), targets.end());
  for (bool with_logits : {false, true}) {
    std::vector<T> dh(N * d), dhead = uniform<T>(62, V * d), per(N), logits(N * V);
    std::vector<T> dh_ref(dh), dhead_ref(dhead), per_ref(per), logits_ref(logits);
    const LmHeadOutputs out{t(dh, {N, d}), t(dhead, {V, d}), t(per, {N}),
                            with_logits ? t(logits, {N, V}) : Tensor()};
    const double loss =
        ops.lm_head_cross_entropy(t(h, {N, d}), t(head, {V, d}), Tensor::of(targets.data(), {N}),
                                  Tensor(), 0.125, out, 3, Precision::kF32);
    const double loss_ref =
        lm_head_cross_entropy(h.data(), head.data(), targets.data(), static_cast<const T*>(nullptr),
                              N, d, V, 3, 0.125, Precision::kF32, dh_ref.data(), dhead_ref.data(),
                              per_ref.data(), with_logits ? logits_ref.data() : nullptr);
    EXPECT_EQ(loss, loss_ref);
    EXPECT_EQ(dh, dh_ref);
    EXPECT_EQ(dhead, dhead_ref);
    EXPECT_EQ(per, per_ref);
    EXPECT_EQ(logits, logits_ref);
    // I32 targets give the same.
    EXPECT_EQ(
        ops.lm_head_cross_entropy(t(h, {N, d}), t(head, {V, d}), Tensor::of(targets32.data(), {N}),
                                  Tensor(), 0.125, {}, 3, Precision::kF32),
        loss);
  }
}

// A bf16 table (2-byte parameter storage) gathers into fp32 rows exactly; it
// gathers into fp32 only, and a bf16 operand is refused by the other row ops.
TEST(BackendOpsBf16, GatherRowsWidensABf16Table) {
  const Backend& ops = cpu_backend();
  const std::vector<float> wide = uniform<float>(74, 9 * 5);
  std::vector<uint16_t> table(wide.size());
  trex::f32_to_bf16(wide.data(), table.data(), static_cast<int64_t>(wide.size()));
  std::vector<int64_t> index{2, 8, 2, 0};
  std::vector<float> dst(4 * 3 * 5, -1.0f);
  const Tensor bf16_table(table.data(), trex::DType::kBF16, {9, 5});
  ops.gather_rows(bf16_table, Tensor::of(index.data(), {4}), Tensor::of(dst.data(), {4, 3, 5}));
  for (int64_t m = 0; m < 4; ++m)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t i = 0; i < 5; ++i)
        EXPECT_EQ(dst[static_cast<size_t>((m * 3 + j) * 5 + i)],
                  trex::bf16_to_f32(table[static_cast<size_t>(index[m] * 5 + i)]));
  std::vector<double> dst64(4 * 5);
  EXPECT_THROW(
      ops.gather_rows(bf16_table, Tensor::of(index.data(), {4}), Tensor::of(dst64.data(), {4, 5})),
      trex::Error);
  EXPECT_THROW(ops.scatter_add_rows(Tensor::of(dst.data(), {4, 3, 5}),
                                    Tensor::of(index.data(), {4}), bf16_table),
               trex::Error);
}

TYPED_TEST(BackendOps, RowOpsEqualTheirKernels) {
  using T = TypeParam;
  const Backend& ops = cpu_backend();
  std::vector<T> table = uniform<T>(70, 9 * 5), src = uniform<T>(71, 4 * 3 * 5);
  std::vector<int64_t> index{2, 8, 2, 0};
  std::vector<T> dst(4 * 3 * 5), dst_ref(dst);
  ops.gather_rows(t(table, {9, 5}), Tensor::of(index.data(), {4}), t(dst, {4, 3, 5}));
  gather_rows(table.data(), index.data(), 4, 3, 5, dst_ref.data());
  EXPECT_EQ(dst, dst_ref);
  std::vector<T> acc = uniform<T>(72, 9 * 5), acc_ref(acc);
  ops.scatter_add_rows(t(src, {4, 3, 5}), Tensor::of(index.data(), {4}), t(acc, {9, 5}));
  scatter_add_rows(src.data(), index.data(), 4, 3, 5, acc_ref.data());
  EXPECT_EQ(acc, acc_ref);
  std::vector<T> y = uniform<T>(73, 4 * 5), x(src), x_ref(src), y2(y), y2_ref(y);
  ops.broadcast_add(t(y, {4, 5}), t(x, {4, 3, 5}));
  broadcast_add(y.data(), 4, 3, 5, x_ref.data());
  EXPECT_EQ(x, x_ref);
  ops.sum_copies_add(t(src, {4, 3, 5}), t(y2, {4, 5}));
  sum_copies_add(src.data(), 4, 3, 5, y2_ref.data());
  EXPECT_EQ(y2, y2_ref);
  std::vector<T> z(src.size()), z2(src);
  ops.copy(t(src, {4, 3, 5}), t(z, {60}));
  EXPECT_EQ(z, src);
  ops.add(t(src, {60}), t(z2, {4, 15}));
  add(src.data(), z.data(), 60);
  EXPECT_EQ(z2, z);
  ops.scale(t(z2, {60}), 0.5);
  for (size_t i = 0; i < z.size(); ++i) EXPECT_EQ(z2[i], z[i] * T(0.5));
}

// Router ops over N tokens and E experts, above the OpenMP cut-offs.
TYPED_TEST(BackendOps, RouterOpsEqualTheirKernels) {
  using T = TypeParam;
  const Backend& ops = cpu_backend();
  const int64_t N = 2100, E = 8, K = 2, V = 50;
  std::vector<T> logits = uniform<T>(90, N * E, 4.0), bias = uniform<T>(91, E, 0.1);
  std::vector<T> scores(N * E), scores_ref(N * E);
  ops.router_scores(t(logits, {N, E}), t(scores, {N, E}));
  router_scores(logits.data(), N * E, scores_ref.data());
  EXPECT_EQ(scores, scores_ref);
  EXPECT_EQ(scores[7], static_cast<T>(sqrt_softplus(static_cast<double>(logits[7])).value));

  // Score layers: top-k of scores + bias; hash layers: the table rows.
  std::vector<int32_t> index(N * K), index_ref(N * K);
  ops.router_select(t(scores, {N, E}), t(bias, {E}), Tensor(), Tensor(),
                    Tensor::of(index.data(), {N, K}));
  router_top_k(scores.data(), bias.data(), N, E, K, index_ref.data());
  EXPECT_EQ(index, index_ref);
  EXPECT_NE(index[0], index[1]);
  std::vector<int64_t> ids(N), table(V * K);
  for (int64_t i = 0; i < N; ++i) ids[i] = (7 * i) % V;
  for (int64_t i = 0; i < V * K; ++i) table[i] = (3 * i + 1) % E;
  std::vector<int32_t> hashed(N * K);
  ops.router_select(t(scores, {N, E}), Tensor(), Tensor::of(ids.data(), {N}),
                    Tensor::of(table.data(), {V, K}), Tensor::of(hashed.data(), {N, K}));
  router_hash(ids.data(), table.data(), N, K, index_ref.data());
  EXPECT_EQ(hashed, index_ref);
  EXPECT_EQ(hashed[5 * K + 1], table[ids[5] * K + 1]);

  for (bool normalised : {true, false}) {
    const RouterCombineParams params{1.5, normalised};
    std::vector<T> combine(N * K), combine_ref(N * K);
    ops.router_combine(params, t(scores, {N, E}), Tensor::of(index.data(), {N, K}),
                       t(combine, {N, K}));
    router_combine(params, scores.data(), index.data(), N, E, K, combine_ref.data());
    EXPECT_EQ(combine, combine_ref);
  }

  // Balance loss over three sequences (the last tokens in none).
  std::vector<int64_t> sequences{0, 700, 700, 900, 1600, 400};
  std::vector<double> freq(3 * E), freq_ref(3 * E);
  ops.router_balance_frequencies(Tensor::of(index.data(), {N, K}),
                                 Tensor::of(sequences.data(), {3, 2}),
                                 Tensor::of(freq.data(), {3, E}));
  router_balance_frequencies(index.data(), K, E, sequences.data(), 3, freq_ref.data());
  EXPECT_EQ(freq, freq_ref);
  const double loss =
      ops.router_balance_loss(0.01, t(scores, {N, E}), Tensor::of(freq.data(), {3, E}),
                              Tensor::of(sequences.data(), {3, 2}));
  EXPECT_EQ(loss, router_balance_loss(0.01, scores.data(), N, E, freq.data(), sequences.data(), 3));
  EXPECT_GT(loss, 0.0);

  // Backward over two token ranges, with and without the balance loss.
  std::vector<int64_t> sequence_of(N, -1);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < sequences[2 * b + 1]; ++i) sequence_of[sequences[2 * b] + i] = b;
  std::vector<T> combine(N * K), d_combine = uniform<T>(92, N * K);
  router_combine(RouterCombineParams{1.5, true}, scores.data(), index.data(), N, E, K,
                 combine.data());
  for (bool with_balance : {false, true}) {
    RouterBalanceGrad balance;
    RouterBalance balance_ref;
    if (with_balance) {
      balance = {Tensor::of(sequences.data(), {3, 2}), Tensor::of(freq.data(), {3, E}),
                 Tensor::of(sequence_of.data(), {N}), 0.01, 0.5};
      balance_ref = {sequences.data(), 3, freq.data(), sequence_of.data(), 0.01, 0.5};
    }
    std::vector<T> dlogits(N * E, T(0)), dlogits_ref(N * E, T(0));
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 1000}, {1000, N}}) {
      ops.router_backward({1.5, true}, balance, t(logits, {N, E}), t(scores, {N, E}),
                          Tensor::of(index.data(), {N, K}), t(combine, {N, K}),
                          t(d_combine, {N, K}), begin, end, t(dlogits, {N, E}));
      router_backward(RouterCombineParams{1.5, true}, balance_ref, logits.data(), scores.data(),
                      index.data(), combine.data(), d_combine.data(), E, K, begin, end,
                      dlogits_ref.data());
    }
    EXPECT_EQ(dlogits, dlogits_ref);
  }

  std::vector<T> b = uniform<T>(93, E), b_ref(b);
  std::vector<int64_t> load{5, 1, 3, 3, 9, 0, 3, 0};
  ops.router_bias_update(t(b, {E}), Tensor::of(load.data(), {E}), 0.001);
  router_bias_update(b_ref.data(), load.data(), E, 0.001);
  EXPECT_EQ(b, b_ref);
}

TYPED_TEST(BackendOps, SwigluAndGroupedExpertGemmsEqualTheirKernels) {
  using T = TypeParam;
  const Backend& ops = cpu_backend();
  const int64_t R = 600, I = 32, d = 24;
  std::vector<T> gate = uniform<T>(100, R * I, 12.0), up = uniform<T>(101, R * I, 12.0);
  std::vector<T> scale = uniform<T>(102, R), dh = uniform<T>(103, R * I);
  for (double limit : {10.0, 0.0}) {
    for (bool scaled : {true, false}) {
      const Tensor row_scale = scaled ? t(scale, {R}) : Tensor();
      const T* scale_ref = scaled ? scale.data() : nullptr;
      std::vector<T> h(R * I), h_ref(R * I);
      ops.swiglu_forward(t(gate, {R, I}), t(up, {R, I}), row_scale, limit, t(h, {R, I}));
      swiglu_forward(gate.data(), up.data(), scale_ref, R, I, limit, h_ref.data());
      EXPECT_EQ(h, h_ref);
      std::vector<T> dg(R * I), dv(R * I), ds(R), dg_ref(R * I), dv_ref(R * I), ds_ref(R);
      ops.swiglu_backward(t(gate, {R, I}), t(up, {R, I}), row_scale, t(dh, {R, I}), limit,
                          t(dg, {R, I}), t(dv, {R, I}), t(ds, {R}));
      swiglu_backward(gate.data(), up.data(), scale_ref, dh.data(), R, I, limit, dg_ref.data(),
                      dv_ref.data(), ds_ref.data());
      EXPECT_EQ(dg, dg_ref);
      EXPECT_EQ(dv, dv_ref);
      EXPECT_EQ(ds, ds_ref);
    }
  }

  // Four groups of rows, group 2 empty (its weight absent, as on an EP rank
  // that does not own the expert).
  std::vector<int64_t> offsets{0, 37, 250, 250, R};
  std::vector<std::vector<T>> w, dw, dw_ref;
  for (int64_t g = 0; g < 4; ++g) {
    w.push_back(uniform<T>(110 + g, I * d));
    dw.push_back(uniform<T>(120 + g, I * d));
    dw_ref.push_back(dw.back());
  }
  std::vector<Tensor> weights, grads;
  std::vector<const T*> weight_ptrs;
  std::vector<T*> grad_ptrs;
  for (int64_t g = 0; g < 4; ++g) {
    weights.push_back(g == 2 ? Tensor() : t(w[g], {I, d}));
    grads.push_back(g == 2 ? Tensor() : t(dw[g], {I, d}));
    weight_ptrs.push_back(g == 2 ? nullptr : w[g].data());
    grad_ptrs.push_back(g == 2 ? nullptr : dw_ref[g].data());
  }
  std::vector<T> x = uniform<T>(104, R * d), dy = uniform<T>(105, R * I);
  for (Precision p : {Precision::kF32, Precision::kBF16}) {
    std::vector<T> y(R * I), y_ref(R * I);
    ops.grouped_linear_forward(Tensor::of(offsets.data(), {5}), t(x, {R, d}), weights, t(y, {R, I}),
                               p);
    grouped_rows_linear_forward(offsets.data(), 4, x.data(), weight_ptrs.data(), I, d, y_ref.data(),
                                p);
    EXPECT_EQ(y, y_ref);
    std::vector<T> ref_rows(37 * I);
    linear_forward(x.data(), w[0].data(), ref_rows.data(), 37, I, d, p);
    EXPECT_EQ(std::vector<T>(y.begin(), y.begin() + 37 * I), ref_rows);
    for (bool accumulate : {false, true}) {
      std::vector<T> dx = uniform<T>(106, R * d), dx_ref(dx);
      ops.grouped_linear_backward(Tensor::of(offsets.data(), {5}), t(x, {R, d}), weights,
                                  t(dy, {R, I}), t(dx, {R, d}), grads, {p, accumulate});
      grouped_rows_linear_backward(offsets.data(), 4, x.data(), weight_ptrs.data(), dy.data(),
                                   dx_ref.data(), grad_ptrs.data(), I, d, p, accumulate);
      EXPECT_EQ(dx, dx_ref);
      for (int64_t g = 0; g < 4; ++g) EXPECT_EQ(dw[g], dw_ref[g]);
    }
    // Frozen weights: no gradients, no dx.
    ops.grouped_linear_backward(Tensor::of(offsets.data(), {5}), t(x, {R, d}), weights,
                                t(dy, {R, I}), Tensor(), {}, {p});
    for (int64_t g = 0; g < 4; ++g) EXPECT_EQ(dw[g], dw_ref[g]);
  }
}

TYPED_TEST(BackendOps, TokenDispatchRowOpsEqualTheirKernels) {
  using T = TypeParam;
  const Backend& ops = cpu_backend();
  const int64_t N = 500, d = 40, K = 2, P = N * K;
  std::vector<T> x = uniform<T>(130, N * d), combine = uniform<T>(131, N * K);
  std::vector<int64_t> order(P), pair_row(P);
  for (int64_t i = 0; i < P; ++i) order[i] = (i * 7) % P;  // 7 is prime to P
  for (int64_t i = 0; i < P; ++i) pair_row[order[i]] = i;

  // Rows with their weight beside them, and with a weight column.
  std::vector<T> rows(P * d), weights(P), rows_ref(P * d), weights_ref(P);
  ops.moe_permute(K, t(x, {N, d}), Tensor::of(order.data(), {P}), t(combine, {N, K}),
                  t(rows, {P, d}), t(weights, {P}));
  moe_permute(x.data(), d, K, order.data(), P, combine.data(), d, rows_ref.data(),
              weights_ref.data());
  EXPECT_EQ(rows, rows_ref);
  EXPECT_EQ(weights, weights_ref);
  EXPECT_EQ(rows[3 * d], x[order[3] / K * d]);
  std::vector<T> packed(P * (d + 1)), packed_ref(P * (d + 1));
  ops.moe_permute(K, t(x, {N, d}), Tensor::of(order.data(), {P}), t(combine, {N, K}),
                  t(packed, {P, d + 1}), Tensor());
  moe_permute(x.data(), d, K, order.data(), P, combine.data(), d + 1, packed_ref.data(),
              static_cast<T*>(nullptr));
  EXPECT_EQ(packed, packed_ref);
  EXPECT_EQ(packed[3 * (d + 1) + d], combine[order[3]]);

  // Unpermute adds the pairs of every token in slot order.
  std::vector<T> y = uniform<T>(132, N * d), y_ref(y);
  ops.moe_unpermute(t(rows, {P, d}), Tensor::of(pair_row.data(), {N, K}), t(y, {N, d}));
  moe_unpermute(rows.data(), d, pair_row.data(), N, K, y_ref.data());
  EXPECT_EQ(y, y_ref);

  // Packing by an index, and back (the inverse permutation restores the rows).
  std::vector<T> out(P * (d + 1)), out_ref(P * (d + 1));
  ops.pack_rows(t(rows, {P, d}), t(weights, {P}), Tensor::of(pair_row.data(), {P}),
                t(out, {P, d + 1}));
  pack_rows(rows.data(), weights.data(), d, pair_row.data(), P, d + 1, out_ref.data());
  EXPECT_EQ(out, out_ref);
  std::vector<T> back(P * d), back_weights(P);
  ops.unpack_rows(t(out, {P, d + 1}), Tensor::of(pair_row.data(), {P}), t(back, {P, d}),
                  t(back_weights, {P}));
  EXPECT_EQ(back, rows);
  EXPECT_EQ(back_weights, weights);
  // Without an index, row i stays row i (the EP dispatcher's returned rows).
  std::vector<T> plain(P * d), plain_weights(P), plain_ref(P * d), plain_weights_ref(P);
  ops.unpack_rows(t(packed, {P, d + 1}), Tensor(), t(plain, {P, d}), t(plain_weights, {P}));
  unpack_rows(packed.data(), d + 1, static_cast<const int64_t*>(nullptr), P, d, plain_ref.data(),
              plain_weights_ref.data());
  EXPECT_EQ(plain, plain_ref);
  EXPECT_EQ(plain_weights, plain_weights_ref);
  EXPECT_EQ(plain, rows);
}

TYPED_TEST(BackendOps, DecodeOpsEqualTheirKernels) {
  using T = TypeParam;
  const Backend& ops = cpu_backend();
  const int64_t heads = 4, hd = 16, visible = 9, take = 4;
  std::vector<T> q = uniform<T>(140, heads * hd), hw = uniform<T>(141, heads);
  std::vector<T> keys = uniform<T>(142, visible * hd);
  std::vector<int64_t> selected(take), selected_ref(take);
  ops.decode_indexer_select(t(q, {heads, hd}), t(hw, {heads}), t(keys, {visible, hd}),
                            Tensor::of(selected.data(), {take}));
  decode_indexer_select(q.data(), hw.data(), heads, hd, keys.data(), visible, take,
                        selected_ref.data());
  EXPECT_EQ(selected, selected_ref);
  EXPECT_NE(selected[0], selected[1]);

  const int64_t H = 3, c = 8, n = 11;
  std::vector<T> query = uniform<T>(143, H * c), kv = uniform<T>(144, n * c),
                 sink = uniform<T>(145, H);
  std::vector<T> o = uniform<T>(146, H * c), o_ref(H * c);
  ops.decode_attention(t(query, {H, c}), t(kv, {n, c}), t(sink, {H}), t(o, {H, c}));
  decode_attention(query.data(), H, c, kv.data(), n, sink.data(), o_ref.data());
  EXPECT_EQ(o, o_ref);
}

TEST(BackendOptimizer, UpdatesAndNormsEqualTheirKernels) {
  const Backend& ops = cpu_backend();
  const int64_t rows = 6, cols = 10, n = rows * cols;
  std::vector<float> w = uniform<float>(80, n), g = uniform<float>(81, n);
  std::vector<float> m = uniform<float>(82, n), v = uniform<float>(83, n, 0.1);
  for (auto& x : v) x = x * x;
  std::vector<float> w_ref(w), m_ref(m), v_ref(v);
  const AdamWCoefficients c{0.9, 0.95, 0.1, 0.05, 0.999, 1e-3, 1e-8};
  ops.adamw_update(t(w, {n}), t(g, {n}), t(m, {n}), t(v, {n}), c);
  adamw_update(w_ref.data(), g.data(), m_ref.data(), v_ref.data(), n, c);
  EXPECT_EQ(w, w_ref);
  EXPECT_EQ(m, m_ref);
  EXPECT_EQ(v, v_ref);

  std::vector<double> X = uniform<double>(84, n), out(n), out_ref(n);
  const NewtonSchulzParams ns{5, 2, Precision::kF32};
  ops.newton_schulz(t(X, {rows, cols}), t(out, {rows, cols}), ns);
  newton_schulz(X.data(), out_ref.data(), rows, cols, ns);
  EXPECT_EQ(out, out_ref);

  MuonStep step;
  step.newton_schulz = ns;
  step.scale = 0.01;
  step.decay = 0.999;
  std::vector<float> workspace(n), workspace_ref(n), mom = uniform<float>(85, n), mom_ref(mom);
  w_ref = w;
  const MuonMatrix matrix{t(w, {rows, cols}), t(g, {rows, cols}), t(mom, {rows, cols})};
  ops.muon_update({&matrix, 1}, t(workspace, {n}), step);
  muon_update(w_ref.data(), g.data(), mom_ref.data(), workspace_ref.data(), rows, cols, step);
  EXPECT_EQ(w, w_ref);
  EXPECT_EQ(mom, mom_ref);

  std::vector<int64_t> bounds{0, 7, 10, 60};
  EXPECT_EQ(ops.sum_squares(t(g, {n}), Tensor::of(bounds.data(), {2, 2})),
            sum_squares_ranges(g.data(), bounds.data(), 2));
  bounds[3] = 61;
  EXPECT_THROW(ops.sum_squares(t(g, {n}), Tensor::of(bounds.data(), {2, 2})), Error);
}

// A batch of same-shaped matrices (a thread each on two or more threads) gives
// each matrix the bits of its update alone, in fp32 and bf16 GEMMs, on shapes
// large enough for the oneDNN path; a short workspace or a mixed shape is refused.
TEST(BackendOptimizer, BatchedMuonEqualsEachMatrixAlone) {
  const Backend& ops = cpu_backend();
  const int64_t rows = 48, cols = 80, n = rows * cols, count = 5;
  for (const Precision precision : {Precision::kF32, Precision::kBF16}) {
    MuonStep step;
    step.newton_schulz = {6, 2, precision};
    step.scale = 0.02;
    step.decay = 0.998;
    std::vector<std::vector<float>> w, g, mom;
    for (int64_t i = 0; i < count; ++i) {
      w.push_back(uniform<float>(90 + i, n));
      g.push_back(uniform<float>(100 + i, n));
      mom.push_back(uniform<float>(110 + i, n, 0.1));
    }
    std::vector<std::vector<float>> w_alone(w), mom_alone(mom);
    std::vector<float> workspace(static_cast<size_t>(count * n));
    std::vector<MuonMatrix> batch;
    for (int64_t i = 0; i < count; ++i)
      batch.push_back({t(w[i], {rows, cols}), t(g[i], {rows, cols}), t(mom[i], {rows, cols})});
    ops.muon_update(batch, t(workspace, {count * n}), step);
    for (int64_t i = 0; i < count; ++i) {
      const MuonMatrix one{t(w_alone[i], {rows, cols}), t(g[i], {rows, cols}),
                           t(mom_alone[i], {rows, cols})};
      ops.muon_update({&one, 1}, t(workspace, {n}), step);
      EXPECT_EQ(w[i], w_alone[i]) << precision_name(precision) << " matrix " << i;
      EXPECT_EQ(mom[i], mom_alone[i]) << precision_name(precision) << " matrix " << i;
    }
    EXPECT_THROW(ops.muon_update(batch, t(workspace, {count * n - 1}), step), trex::Error);
  }
  std::vector<float> a(12), b(12), c(12), d(10), workspace(64);
  const std::vector<MuonMatrix> mixed{{t(a, {3, 4}), t(b, {3, 4}), t(c, {3, 4})},
                                      {t(d, {2, 5}), t(d, {2, 5}), t(d, {2, 5})}};
  EXPECT_THROW(ops.muon_update(mixed, t(workspace, {64}), MuonStep{}), trex::Error);
}

TEST(BackendChecks, WrongDtypeShapeOrMissingOperandIsAnErrorNamingIt) {
  const Backend& ops = cpu_backend();
  std::vector<float> x(6 * 4), w(5 * 4), y(6 * 5);
  std::vector<double> w64(5 * 4);
  expect_rejected(
      [&] {
        ops.linear_forward(t(x, {6, 4}), t(w64, {5, 4}), t(y, {6, 5}), {});
      },
      "w", "linear_forward: w is F64 [5, 4], expected F32 [*, 4]");
  expect_rejected(
      [&] {
        ops.linear_forward(t(x, {6, 4}), t(w, {5, 4}), t(y, {5, 6}), {});
      },
      "y", "linear_forward: y is F32 [5, 6], expected F32 [6, 5]");
  expect_rejected(
      [&] {
        ops.linear_forward(t(x, {6, 4}), Tensor(), t(y, {6, 5}), {});
      },
      "w", "linear_forward: w is missing");
  std::vector<int64_t> ids(6);
  expect_rejected(
      [&] {
        ops.rmsnorm_forward(Tensor::of(ids.data(), {6}), Tensor(), t(y, {6}), Tensor(), 1e-6);
      },
      "x", "rmsnorm_forward: x is I64, expected F32 or F64");
  const RopeTable table(4, 10000.0, 8);
  std::vector<double> pos_wrong(6);
  expect_rejected(
      [&] {
        ops.rope(table, t(x, {6, 1, 4}), Tensor::of(pos_wrong.data(), {6}), false);
      },
      "positions", "rope: positions is F64 [6], expected I64 [6]");
  expect_rejected(
      [&] {
        ops.grouped_linear_forward(3, t(x, {6, 4}), t(w, {5, 4}), t(y, {6, 5}), {});
      },
      "groups", "3 groups do not divide");
  const MhcDims dims{2, 4, 4, 20, 1e-6, 1e-6};
  std::vector<float> X(2 * 4 * 4), post(2 * 4), comb(2 * 4 * 4);
  expect_rejected(
      [&] {
        ops.mhc_post_forward(dims, t(post, {2, 4}), t(comb, {2, 4, 4}), t(X, {2, 4, 4}),
                             t(y, {2, 4}), t(X, {2, 4, 4}));
      },
      "Xout", "mhc_post_forward: Xout must not alias X");

  // MoE ops.
  std::vector<float> scores(6 * 4), rows(6 * 4), w0(5 * 4), out(6 * 5);
  std::vector<int64_t> index64(6 * 2);
  expect_rejected(
      [&] {
        ops.router_select(t(scores, {6, 4}), Tensor(), Tensor(), Tensor(),
                          Tensor::of(index64.data(), {6, 2}));
      },
      "expert_index", "router_select: expert_index is I64 [6, 2], expected I32 [6, *]");
  std::vector<int32_t> index(6 * 2);
  std::vector<int64_t> sequences{0, 4, 3, 4};
  std::vector<double> freq(2 * 4);
  expect_rejected(
      [&] {
        ops.router_balance_frequencies(Tensor::of(index.data(), {6, 2}),
                                       Tensor::of(sequences.data(), {2, 2}),
                                       Tensor::of(freq.data(), {2, 4}));
      },
      "sequences", "sequence 1 [3, +4) is empty or not inside the 6 tokens");
  std::vector<int64_t> offsets{0, 4, 2};
  const std::vector<Tensor> weights{t(w0, {5, 4}), t(w0, {5, 4})};
  expect_rejected(
      [&] {
        ops.grouped_linear_forward(Tensor::of(offsets.data(), {3}), t(rows, {6, 4}), weights,
                                   t(out, {6, 5}), Precision::kF32);
      },
      "offsets", "do not ascend from 0 to the 6 rows of x");
  offsets = {0, 4, 6};
  expect_rejected(
      [&] {
        ops.grouped_linear_forward(Tensor::of(offsets.data(), {3}), t(rows, {6, 4}),
                                   std::vector<Tensor>{t(w0, {5, 4}), Tensor()}, t(out, {6, 5}),
                                   Precision::kF32);
      },
      "w[1]", "grouped_linear_forward: w[1] is missing");
  std::vector<int64_t> order(6 * 2);
  std::vector<float> combine(6 * 2), permuted(12 * 4);
  expect_rejected(
      [&] {
        ops.moe_permute(2, t(rows, {6, 4}), Tensor::of(order.data(), {12}), t(combine, {6, 2}),
                        t(permuted, {12, 4}), Tensor());
      },
      "combine", "combine needs exactly one destination");
}

TEST(BackendTensors, TypedAccessChecksTheDtypeAndViewsTheirShape) {
  std::vector<float> v(12);
  const Tensor a = Tensor::of(v.data(), {3, 4});
  EXPECT_EQ(a.dtype(), DType::kF32);
  EXPECT_EQ(a.rank(), 2);
  EXPECT_EQ(a.numel(), 12);
  EXPECT_EQ(a.shape_string(), "[3, 4]");
  EXPECT_EQ(a.data<float>(), v.data());
  EXPECT_THROW(a.data<double>(), Error);
  EXPECT_THROW(a.size(2), Error);
  EXPECT_FALSE(Tensor::optional(static_cast<float*>(nullptr), {3}).defined());
  EXPECT_TRUE(Tensor::of(static_cast<float*>(nullptr), {0, 4}).defined());  // empty, not absent
  EXPECT_THROW(Tensor::of(static_cast<float*>(nullptr), {2}), Error);
  EXPECT_THROW(Tensor(v.data(), DType::kF32, {1, 1, 1, 1, 1}), Error);
}

TEST(BackendBuffers, ComeZeroFilledFromTheBackendAndViewWithinTheirSize) {
  const Backend& ops = cpu_backend();
  Buffer b = ops.allocate(DType::kF64, 100);
  EXPECT_EQ(b.numel(), 100);
  EXPECT_EQ(b.bytes(), 800u);
  EXPECT_EQ(b.device(), ops.device());
  const double* p = b.data<double>();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(p[i], 0.0);
  EXPECT_THROW(b.data<float>(), Error);
  EXPECT_EQ(b.view({10, 10}).numel(), 100);
  EXPECT_THROW(b.view({11, 10}), Error);
  Buffer moved = std::move(b);
  EXPECT_EQ(moved.data<double>(), p);
  EXPECT_EQ(b.numel(), 0);  // NOLINT(bugprone-use-after-move): the moved-from buffer is empty
  EXPECT_EQ(ops.allocate(DType::kF32, 0).numel(), 0);
}

// The backend counts the bytes of its live buffers and their peak (moves and
// releases included): what `trex bench step` reports as activation memory.
TEST(BackendBuffers, LiveAndPeakBytesAreCounted) {
  const Backend& ops = cpu_backend();
  const int64_t base = ops.live_buffer_bytes();
  ops.reset_peak_buffer_bytes();
  EXPECT_EQ(ops.peak_buffer_bytes(), base);
  {
    Buffer a = ops.allocate(DType::kF32, 1000);
    EXPECT_EQ(ops.live_buffer_bytes(), base + 4000);
    {
      Buffer b = ops.allocate(DType::kF64, 500);
      EXPECT_EQ(ops.live_buffer_bytes(), base + 8000);
      Buffer moved = std::move(b);  // a move is not an allocation
      EXPECT_EQ(ops.live_buffer_bytes(), base + 8000);
    }
    EXPECT_EQ(ops.live_buffer_bytes(), base + 4000);
    a = ops.allocate(DType::kF32, 10);  // the old one is freed
    EXPECT_EQ(ops.live_buffer_bytes(), base + 40);
  }
  EXPECT_EQ(ops.live_buffer_bytes(), base);
  EXPECT_EQ(ops.peak_buffer_bytes(), base + 8000);
  ops.reset_peak_buffer_bytes();
  EXPECT_EQ(ops.peak_buffer_bytes(), base);
}

// A freed buffer the backend keeps for reuse comes back zero-filled, the
// same memory when the size matches; the cache is bounded and named (the
// memory accounting adds retained_bytes_limit()).
TEST(BackendBuffers, ReusedBuffersComeBackZeroFilled) {
  const Backend& ops = cpu_backend();
  EXPECT_GE(ops.retained_bytes_limit(), 0);
  EXPECT_LE(ops.retained_bytes_limit(), int64_t{64} << 20);
  for (const int64_t numel : {int64_t{100}, int64_t{40000}, int64_t{300000}}) {
    SCOPED_TRACE(numel);
    const int64_t base = ops.live_buffer_bytes();
    Buffer a = ops.allocate(DType::kF32, numel);
    std::fill_n(a.data<float>(), numel, 3.0f);
    a = Buffer();
    EXPECT_EQ(ops.live_buffer_bytes(), base);
    Buffer b = ops.allocate(DType::kF32, numel);
    const float* p = b.data<float>();
    for (int64_t i = 0; i < numel; ++i) ASSERT_EQ(p[i], 0.0f) << i;
    // A smaller buffer of the same pages is zero-filled too.
    std::fill_n(b.data<float>(), numel, 5.0f);
    b = Buffer();
    Buffer c = ops.allocate(DType::kF32, numel - 7);
    for (int64_t i = 0; i < numel - 7; ++i) ASSERT_EQ(c.data<float>()[i], 0.0f) << i;
  }
}

}  // namespace
}  // namespace trex::kernels
