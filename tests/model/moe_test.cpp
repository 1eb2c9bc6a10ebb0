// DeepSeek-V4 MoE block: router (sqrt-softplus, bias-corrected top-k, hash),
// grouped SwiGLU experts with clamp, shared expert, sequence-wise balance loss.
#include "trex/model/moe.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "model/gradcheck.hpp"
#include "trex/core/error.hpp"
#include "trex/kernels/cpu/moe.hpp"
#include "trex/model/config.hpp"

namespace trex::model {
namespace {

using kernels::sqrt_softplus;
using testing::check_gradient;
using testing::GradCheckResult;
using testing::random_vector;

template <class T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Owns every tensor of one MoE layer; weights() points into them, so a
// finite-difference check can perturb the double vectors in place.
template <class T>
struct Problem {
  MoeDims dims;
  std::vector<T> gate, bias, x;
  std::vector<int64_t> tid2eid, tokens;
  std::vector<std::vector<T>> w1, w2, w3;
  std::vector<T> sw1, sw2, sw3;
  bool with_shared = true;
  bool with_bias = true;

  MoeWeights<T> weights() const {
    MoeWeights<T> w;
    w.gate = gate.data();
    w.gate_bias = (with_bias && !dims.hash_routed) ? bias.data() : nullptr;
    w.tid2eid = dims.hash_routed ? tid2eid.data() : nullptr;
    for (int64_t e = 0; e < dims.n_experts; ++e) {
      w.w1.push_back(w1[e].data());
      w.w2.push_back(w2[e].data());
      w.w3.push_back(w3[e].data());
    }
    if (with_shared) {
      w.shared_w1 = sw1.data();
      w.shared_w2 = sw2.data();
      w.shared_w3 = sw3.data();
    }
    return w;
  }
};

MoeDims small_dims() {
  MoeDims d;
  d.batch = 2;
  d.seq = 5;
  d.hidden = 8;
  d.n_experts = 6;
  d.top_k = 2;
  d.inter = 4;
  d.routed_scaling = 1.5;
  d.swiglu_limit = 10.0;
  d.vocab = 11;
  return d;
}

template <class T>
Problem<T> make_problem(const MoeDims& dims, uint64_t seed = 1) {
  Problem<T> p;
  p.dims = dims;
  const int64_t N = dims.tokens(), d = dims.hidden, E = dims.n_experts, I = dims.inter;
  p.x = cast<T>(random_vector(N * d, seed + 1, 1.0));
  p.gate = cast<T>(random_vector(E * d, seed + 2, 0.6));
  p.bias = cast<T>(random_vector(E, seed + 3, 0.05));
  for (int64_t e = 0; e < E; ++e) {
    p.w1.push_back(cast<T>(random_vector(I * d, seed + 100 + e, 0.8)));
    p.w2.push_back(cast<T>(random_vector(d * I, seed + 200 + e, 0.8)));
    p.w3.push_back(cast<T>(random_vector(I * d, seed + 300 + e, 0.8)));
  }
  p.sw1 = cast<T>(random_vector(I * d, seed + 4, 0.8));
  p.sw2 = cast<T>(random_vector(d * I, seed + 5, 0.8));
  p.sw3 = cast<T>(random_vector(I * d, seed + 6, 0.8));
  // Hash table: row v names experts (v + j·(1 + v % 2)) mod E; row 3 repeats an expert.
  p.tid2eid.resize(static_cast<size_t>(dims.vocab * dims.top_k));
  for (int64_t v = 0; v < dims.vocab; ++v)
    for (int64_t j = 0; j < dims.top_k; ++j)
      p.tid2eid[v * dims.top_k + j] = (v + j * (1 + v % 2)) % E;
  if (dims.vocab > 3 && dims.top_k > 1) p.tid2eid[3 * dims.top_k + 1] = p.tid2eid[3 * dims.top_k];
  for (int64_t t = 0; t < N; ++t) p.tokens.push_back((7 * t + 3) % dims.vocab);
  return p;
}

// ---------------------------------------------------------------------------
// Naive per-token reference (no grouping, no GEMMs), double.

double ref_silu(double g) {
  return g / (1.0 + std::exp(-g));
}

std::vector<double> ref_expert(const std::vector<double>& xt, const double* W1, const double* W2,
                               const double* W3, int64_t d, int64_t I, double L) {
  std::vector<double> h(static_cast<size_t>(I)), out(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < I; ++i) {
    double g = 0.0, v = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      g += W1[i * d + j] * xt[j];
      v += W3[i * d + j] * xt[j];
    }
    if (L > 0.0) {
      g = std::min(g, L);
      v = std::clamp(v, -L, L);
    }
    h[i] = ref_silu(g) * v;
  }
  for (int64_t o = 0; o < d; ++o)
    for (int64_t i = 0; i < I; ++i) out[o] += W2[o * I + i] * h[i];
  return out;
}

struct Reference {
  std::vector<double> y;
  std::vector<int> idx;
  double balance_loss = 0.0;
};

Reference naive_moe(const Problem<double>& p) {
  const MoeDims& D = p.dims;
  const int64_t N = D.tokens(), d = D.hidden, E = D.n_experts, K = D.top_k, I = D.inter;
  Reference r;
  r.y.assign(static_cast<size_t>(N * d), 0.0);
  std::vector<std::vector<double>> scores(static_cast<size_t>(N));
  for (int64_t t = 0; t < N; ++t) {
    std::vector<double> xt(p.x.begin() + t * d, p.x.begin() + (t + 1) * d);
    std::vector<double>& s = scores[t];
    for (int64_t e = 0; e < E; ++e) {
      double l = 0.0;
      for (int64_t j = 0; j < d; ++j) l += p.gate[e * d + j] * xt[j];
      s.push_back(std::sqrt(std::log1p(std::exp(l))));
    }
    std::vector<int> idx(static_cast<size_t>(K));
    if (D.hash_routed) {
      for (int64_t k = 0; k < K; ++k) idx[k] = static_cast<int>(p.tid2eid[p.tokens[t] * K + k]);
    } else {
      std::vector<int> order(static_cast<size_t>(E));
      std::iota(order.begin(), order.end(), 0);
      const auto biased = [&](int e) { return s[e] + (p.with_bias ? p.bias[e] : 0.0); };
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return biased(a) > biased(b); });
      std::copy_n(order.begin(), K, idx.begin());
    }
    double denom = 0.0;
    for (int k = 0; k < K; ++k) denom += s[idx[k]];
    if (!D.norm_topk_prob) denom = 1.0;
    std::vector<double> yt(static_cast<size_t>(d), 0.0);
    if (p.with_shared)
      yt = ref_expert(xt, p.sw1.data(), p.sw2.data(), p.sw3.data(), d, I, D.swiglu_limit);
    for (int k = 0; k < K; ++k) {
      const int e = idx[k];
      const auto out =
          ref_expert(xt, p.w1[e].data(), p.w2[e].data(), p.w3[e].data(), d, I, D.swiglu_limit);
      const double w = D.routed_scaling * s[e] / denom;
      for (int64_t j = 0; j < d; ++j) yt[j] += w * out[j];
    }
    std::copy(yt.begin(), yt.end(), r.y.begin() + t * d);
    r.idx.insert(r.idx.end(), idx.begin(), idx.end());
  }
  // Balance loss: mean over sequences of α Σ_e f_e P_e.
  for (int64_t b = 0; b < D.batch; ++b) {
    double loss = 0.0;
    for (int64_t e = 0; e < E; ++e) {
      double count = 0.0, prob = 0.0;
      for (int64_t t = b * D.seq; t < (b + 1) * D.seq; ++t) {
        bool hit = false;
        for (int64_t k = 0; k < K; ++k) hit = hit || r.idx[t * K + k] == e;
        count += hit ? 1.0 : 0.0;
        double total = 0.0;
        for (double v : scores[t]) total += v;
        prob += scores[t][e] / total;
      }
      const double f = static_cast<double>(E) / static_cast<double>(K * D.seq) * count;
      loss += f * prob / static_cast<double>(D.seq);
    }
    r.balance_loss += D.balance_loss_weight * loss / static_cast<double>(D.batch);
  }
  return r;
}

// ---------------------------------------------------------------------------
// Finite-difference check of every gradient with the selection held fixed.
// loss = Σ y ⊙ R + c·L_bal.

struct GradReport {
  double worst = 0.0;
  double worst_abs = 0.0;
  int64_t checked = 0;
  void add(const GradCheckResult& r) {
    worst = std::max(worst, r.max_rel_error);
    worst_abs = std::max(worst_abs, r.max_abs_error);
    checked += r.checked;
  }
};

constexpr double kStep = 1e-5;

GradReport gradcheck_moe(Problem<double>& p, double balance_coef, const char* label) {
  const int64_t N = p.dims.tokens(), d = p.dims.hidden, E = p.dims.n_experts;
  MoeCache<double> cache;
  std::vector<double> y(static_cast<size_t>(N * d));
  moe_forward(p.dims, p.weights(), p.x.data(), p.tokens.data(), cache, y.data());
  const std::vector<int32_t> selection = testing::to_vector(cache.expert_index);
  const auto R = random_vector(N * d, 77);

  MoeGrads<double> grads;
  std::vector<double> g_gate(p.gate.size(), 0.0), g_s1(p.sw1.size(), 0.0), g_s2(p.sw2.size(), 0.0),
      g_s3(p.sw3.size(), 0.0), dx(p.x.size(), 0.0);
  std::vector<std::vector<double>> g1(E), g2(E), g3(E);
  grads.gate = g_gate.data();
  for (int64_t e = 0; e < E; ++e) {
    g1[e].assign(p.w1[e].size(), 0.0);
    g2[e].assign(p.w2[e].size(), 0.0);
    g3[e].assign(p.w3[e].size(), 0.0);
    grads.w1.push_back(g1[e].data());
    grads.w2.push_back(g2[e].data());
    grads.w3.push_back(g3[e].data());
  }
  if (p.with_shared) {
    grads.shared_w1 = g_s1.data();
    grads.shared_w2 = g_s2.data();
    grads.shared_w3 = g_s3.data();
  }
  moe_backward(p.dims, p.weights(), cache, R.data(), balance_coef, grads, dx.data());

  const auto loss = [&]() {
    MoeCache<double> c;
    testing::copy_into(c.expert_index, selection);
    std::vector<double> out(static_cast<size_t>(N * d));
    moe_forward(p.dims, p.weights(), p.x.data(), p.tokens.data(), c, out.data(), true);
    return testing::dot(out, R) + balance_coef * c.balance_loss;
  };
  GradReport report;
  report.add(check_gradient(p.x, dx, loss, kStep, 80));
  report.add(check_gradient(p.gate, g_gate, loss, kStep, 48));
  for (int64_t e = 0; e < E; ++e) {
    report.add(check_gradient(p.w1[e], g1[e], loss, kStep, 12));
    report.add(check_gradient(p.w2[e], g2[e], loss, kStep, 12));
    report.add(check_gradient(p.w3[e], g3[e], loss, kStep, 12));
  }
  if (p.with_shared) {
    report.add(check_gradient(p.sw1, g_s1, loss, kStep, 16));
    report.add(check_gradient(p.sw2, g_s2, loss, kStep, 16));
    report.add(check_gradient(p.sw3, g_s3, loss, kStep, 16));
  }
  std::printf("[%s] checked %lld entries, max rel error %.3e, max abs error %.3e\n", label,
              static_cast<long long>(report.checked), report.worst, report.worst_abs);
  return report;
}

// ---------------------------------------------------------------------------

TEST(MoeSqrtSoftplus, StableValueAndDerivative) {
  const auto at_minus = sqrt_softplus(-100.0);
  EXPECT_NEAR(at_minus.value / std::exp(-50.0), 1.0, 1e-14);
  EXPECT_NEAR(at_minus.derivative / (0.5 * std::exp(-50.0)), 1.0, 1e-14);
  const auto at_zero = sqrt_softplus(0.0);
  EXPECT_NEAR(at_zero.value, std::sqrt(std::log(2.0)), 1e-15);
  EXPECT_NEAR(at_zero.derivative, 0.5 / (2.0 * std::sqrt(std::log(2.0))), 1e-15);
  const auto at_plus = sqrt_softplus(100.0);
  EXPECT_NEAR(at_plus.value, 10.0, 1e-14);
  EXPECT_NEAR(at_plus.derivative, 0.05, 1e-15);
  // Far into the tails: finite, non-negative, the e^{ℓ/2}/2 limit, no NaN.
  const auto far = sqrt_softplus(-2000.0);
  EXPECT_EQ(far.value, 0.0);
  EXPECT_EQ(far.derivative, 0.0);
  const auto big = sqrt_softplus(1e6);
  EXPECT_NEAR(big.value, 1000.0, 1e-10);
  EXPECT_NEAR(big.derivative, 0.5e-3, 1e-15);
  // Derivative matches a central difference of the value everywhere.
  for (double l : {-60.0, -30.0, -5.0, -0.3, 0.3, 5.0, 30.0}) {
    const double h = 1e-5 * std::max(1.0, std::abs(l));
    const double fd = (sqrt_softplus(l + h).value - sqrt_softplus(l - h).value) / (2.0 * h);
    EXPECT_NEAR(fd / sqrt_softplus(l).derivative, 1.0, 1e-7) << "logit " << l;
  }
}

TEST(MoeRouter, BiasForcesSelectionCombineUsesUnbiasedScores) {
  MoeDims dims = small_dims();
  auto p = make_problem<double>(dims);
  // First without a bias: the selection is the top-k of s itself.
  p.with_bias = false;
  const int64_t N = dims.tokens(), d = dims.hidden, E = dims.n_experts, K = dims.top_k;
  MoeCache<double> cache;
  std::vector<double> y(static_cast<size_t>(N * d));
  moe_forward(dims, p.weights(), p.x.data(), nullptr, cache, y.data());
  const Reference ref = naive_moe(p);
  for (int64_t i = 0; i < N * K; ++i) EXPECT_EQ(cache.expert_index[i], ref.idx[i]);

  // A large bias on expert 4 forces it into every token's selection, first slot.
  p.with_bias = true;
  std::fill(p.bias.begin(), p.bias.end(), 0.0);
  p.bias[4] = 50.0;
  moe_forward(dims, p.weights(), p.x.data(), nullptr, cache, y.data());
  int64_t changed = 0;
  for (int64_t t = 0; t < N; ++t) {
    EXPECT_EQ(cache.expert_index[t * K], 4) << "token " << t;
    const double* s = cache.scores.data() + t * E;
    double denom = 0.0;
    for (int64_t k = 0; k < K; ++k) denom += s[cache.expert_index[t * K + k]];
    for (int64_t k = 0; k < K; ++k) {
      const double expected = 1.5 * s[cache.expert_index[t * K + k]] / denom;
      EXPECT_NEAR(cache.combine[t * K + k], expected, 1e-15);
      EXPECT_LT(cache.combine[t * K + k], 1.5);  // the bias (50) never enters the weight
    }
    bool four_was_selected = false;
    for (int64_t k = 0; k < K; ++k) four_was_selected |= ref.idx[t * K + k] == 4;
    changed += four_was_selected ? 0 : 1;
  }
  EXPECT_GT(changed, 0) << "test data never changes the selection";
  const Reference biased = naive_moe(p);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], biased.y[i], 1e-12);
  // Load counts: every (token, slot) pair counted once.
  EXPECT_EQ(cache.expert_load[4], N);
  EXPECT_EQ(std::accumulate(cache.expert_load.begin(), cache.expert_load.end(), int64_t{0}), N * K);
}

TEST(MoeGrouped, MatchesNaivePerTokenReference) {
  double overall = 0.0;
  for (bool hash : {false, true}) {
    for (double limit : {0.5, 10.0, 0.0}) {
      for (bool norm : {true, false}) {
        MoeDims dims = small_dims();
        dims.batch = 3;
        dims.seq = 7;
        dims.n_experts = 8;
        dims.top_k = 3;
        dims.hash_routed = hash;
        dims.swiglu_limit = limit;
        dims.norm_topk_prob = norm;
        dims.balance_loss_weight = 0.3;
        dims.balance_loss_on_hash_layers = true;
        auto p = make_problem<double>(dims, 9);
        MoeCache<double> cache;
        std::vector<double> y(static_cast<size_t>(dims.tokens() * dims.hidden));
        moe_forward(dims, p.weights(), p.x.data(), p.tokens.data(), cache, y.data());
        const Reference ref = naive_moe(p);
        double worst = 0.0;
        for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::abs(y[i] - ref.y[i]));
        EXPECT_LT(worst, 1e-12) << "hash " << hash << " limit " << limit << " norm " << norm;
        overall = std::max(overall, worst);
        for (size_t i = 0; i < ref.idx.size(); ++i) ASSERT_EQ(cache.expert_index[i], ref.idx[i]);
        EXPECT_NEAR(cache.balance_loss, ref.balance_loss, 1e-14);
        EXPECT_GT(cache.balance_loss, 0.0);
      }
    }
  }
  std::printf("[grouped vs naive] max abs difference in y %.3e\n", overall);
}

TEST(MoeGrad, ScoreRoutingSharedClampInactive) {
  MoeDims dims = small_dims();
  dims.swiglu_limit = 10.0;
  auto p = make_problem<double>(dims);
  MoeCache<double> cache;
  std::vector<double> y(static_cast<size_t>(dims.tokens() * dims.hidden));
  moe_forward(dims, p.weights(), p.x.data(), nullptr, cache, y.data());
  for (double g : cache.routed[0].gate_pre) ASSERT_LT(g, 10.0);
  EXPECT_LT(gradcheck_moe(p, 0.0, "score, L=10").worst, 1e-6);
}

TEST(MoeGrad, ScoreRoutingClampActive) {
  MoeDims dims = small_dims();
  dims.swiglu_limit = 0.5;
  auto p = make_problem<double>(dims);
  MoeCache<double> cache;
  std::vector<double> y(static_cast<size_t>(dims.tokens() * dims.hidden));
  moe_forward(dims, p.weights(), p.x.data(), nullptr, cache, y.data());
  int64_t gate_clamped = 0, up_clamped = 0;
  for (double g : cache.routed[0].gate_pre) gate_clamped += g > 0.5;
  for (double v : cache.routed[0].up_pre) up_clamped += std::abs(v) > 0.5;
  for (double g : cache.shared_gate_pre) gate_clamped += g > 0.5;
  EXPECT_GT(gate_clamped, 5);
  EXPECT_GT(up_clamped, 5);
  EXPECT_LT(gradcheck_moe(p, 0.0, "score, L=0.5").worst, 1e-6);
}

TEST(MoeGrad, ScoreRoutingWithoutNormalisationOrShared) {
  MoeDims dims = small_dims();
  dims.norm_topk_prob = false;
  auto p = make_problem<double>(dims);
  p.with_shared = false;
  EXPECT_LT(gradcheck_moe(p, 0.0, "score, no norm, no shared").worst, 1e-6);
}

TEST(MoeGrad, HashRouting) {
  MoeDims dims = small_dims();
  dims.hash_routed = true;
  dims.swiglu_limit = 0.5;
  auto p = make_problem<double>(dims);
  MoeCache<double> cache;
  std::vector<double> y(static_cast<size_t>(dims.tokens() * dims.hidden));
  moe_forward(dims, p.weights(), p.x.data(), p.tokens.data(), cache, y.data());
  for (int64_t t = 0; t < dims.tokens(); ++t)
    for (int64_t k = 0; k < dims.top_k; ++k)
      EXPECT_EQ(cache.expert_index[t * dims.top_k + k], p.tid2eid[p.tokens[t] * dims.top_k + k]);
  EXPECT_FALSE(cache.balance_loss_active);  // hash layers are excluded by default
  EXPECT_LT(gradcheck_moe(p, 0.0, "hash, L=0.5").worst, 1e-6);
}

TEST(MoeGrad, BalanceLossGradient) {
  MoeDims dims = small_dims();
  dims.balance_loss_weight = 0.7;
  auto p = make_problem<double>(dims);
  // The combined loss Σ y ⊙ R + 2·L_bal, then the balance loss alone.
  EXPECT_LT(gradcheck_moe(p, 2.0, "score + balance").worst, 1e-6);

  // Pure balance loss: gradient reaches gate and x, nothing else.
  const int64_t N = dims.tokens(), d = dims.hidden;
  MoeCache<double> cache;
  std::vector<double> y(static_cast<size_t>(N * d)), zero(static_cast<size_t>(N * d), 0.0);
  moe_forward(dims, p.weights(), p.x.data(), nullptr, cache, y.data());
  ASSERT_TRUE(cache.balance_loss_active);
  const auto selection = testing::to_vector(cache.expert_index);
  std::vector<double> g_gate(p.gate.size(), 0.0), dx(p.x.size(), 0.0);
  MoeGrads<double> grads;
  grads.gate = g_gate.data();
  moe_backward(dims, p.weights(), cache, zero.data(), 1.0, grads, dx.data());
  const auto loss = [&]() {
    MoeCache<double> c;
    testing::copy_into(c.expert_index, selection);
    std::vector<double> out(static_cast<size_t>(N * d));
    moe_forward(dims, p.weights(), p.x.data(), nullptr, c, out.data(), true);
    return c.balance_loss;
  };
  const auto rg = check_gradient(p.gate, g_gate, loss, kStep, 48, 1e-9);
  const auto rx = check_gradient(p.x, dx, loss, kStep, 80, 1e-9);
  std::printf("[balance only] gate max rel %.3e, x max rel %.3e\n", rg.max_rel_error,
              rx.max_rel_error);
  EXPECT_LT(rg.max_rel_error, 1e-6);
  EXPECT_LT(rx.max_rel_error, 1e-6);
  double norm = 0.0;
  for (double g : g_gate) norm += std::abs(g);
  EXPECT_GT(norm, 1e-4);

  // Hash layers contribute only when asked.
  dims.hash_routed = true;
  dims.balance_loss_on_hash_layers = true;
  auto h = make_problem<double>(dims);
  EXPECT_LT(gradcheck_moe(h, 1.0, "hash + balance").worst, 1e-6);
}

TEST(MoeBias, UpdateRule) {
  std::vector<float> bias = {0.0f, 0.5f, -0.25f, 1.0f};
  const std::vector<int64_t> load = {5, 1, 3, 3};  // mean 3
  update_router_bias(bias.data(), load.data(), 4, 0.001);
  EXPECT_FLOAT_EQ(bias[0], -0.001f);
  EXPECT_FLOAT_EQ(bias[1], 0.501f);
  EXPECT_FLOAT_EQ(bias[2], -0.25f);
  EXPECT_FLOAT_EQ(bias[3], 1.0f);
  std::vector<double> b2 = {0.0, 0.0, 0.0};
  const std::vector<int64_t> load2 = {2, 1, 1};  // mean 4/3: only expert 0 is over-loaded
  update_router_bias(b2.data(), load2.data(), 3, 0.01);
  EXPECT_DOUBLE_EQ(b2[0], -0.01);
  EXPECT_DOUBLE_EQ(b2[1], 0.01);
  EXPECT_DOUBLE_EQ(b2[2], 0.01);
  const std::vector<int64_t> even = {4, 4, 4};
  update_router_bias(b2.data(), even.data(), 3, 0.01);
  EXPECT_DOUBLE_EQ(b2[0], -0.01);
}

TEST(MoePrecision, FloatMatchesDouble) {
  MoeDims dims = small_dims();
  dims.batch = 2;
  dims.seq = 16;
  dims.hidden = 32;
  dims.n_experts = 8;
  dims.top_k = 3;
  dims.inter = 16;
  dims.swiglu_limit = 0.7;
  dims.balance_loss_weight = 0.1;
  auto pd = make_problem<double>(dims, 5);
  auto pf = make_problem<float>(dims, 5);
  const int64_t N = dims.tokens(), d = dims.hidden;
  const auto R = random_vector(N * d, 31);
  const auto Rf = cast<float>(R);

  MoeCache<double> cd;
  MoeCache<float> cf;
  std::vector<double> yd(static_cast<size_t>(N * d)), dxd(static_cast<size_t>(N * d)),
      gd(pd.gate.size(), 0.0), g1d(pd.w1[2].size(), 0.0);
  std::vector<float> yf(static_cast<size_t>(N * d)), dxf(static_cast<size_t>(N * d)),
      gf(pf.gate.size(), 0.0f), g1f(pf.w1[2].size(), 0.0f);
  moe_forward(dims, pd.weights(), pd.x.data(), nullptr, cd, yd.data());
  testing::copy_into(cf.expert_index,
                     cd.expert_index);  // the same selection even if a near-tie flips in float
  moe_forward(dims, pf.weights(), pf.x.data(), nullptr, cf, yf.data(), true);
  MoeGrads<double> gradd;
  gradd.gate = gd.data();
  gradd.w1.assign(dims.n_experts, nullptr);
  gradd.w1[2] = g1d.data();
  MoeGrads<float> gradf;
  gradf.gate = gf.data();
  gradf.w1.assign(dims.n_experts, nullptr);
  gradf.w1[2] = g1f.data();
  moe_backward(dims, pd.weights(), cd, R.data(), 1.0, gradd, dxd.data());
  moe_backward(dims, pf.weights(), cf, Rf.data(), 1.0f, gradf, dxf.data());

  const auto rel = [](const auto& a, const auto& b) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      num = std::max(num, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
      den = std::max(den, std::abs(static_cast<double>(b[i])));
    }
    return num / den;
  };
  const double ey = rel(yf, yd), edx = rel(dxf, dxd), eg = rel(gf, gd), e1 = rel(g1f, g1d);
  std::printf("[float vs double] y %.2e dx %.2e d_gate %.2e d_w1 %.2e balance %.2e\n", ey, edx, eg,
              e1, std::abs(cf.balance_loss - cd.balance_loss) / cd.balance_loss);
  EXPECT_LT(ey, 1e-5);
  EXPECT_LT(edx, 1e-5);
  EXPECT_LT(eg, 1e-5);
  EXPECT_LT(e1, 1e-5);
  EXPECT_NEAR(cf.balance_loss / cd.balance_loss, 1.0, 1e-5);
}

template <class T>
void run_at_threads(int threads, const MoeDims& dims, std::vector<T>& y, std::vector<T>& dx,
                    std::vector<T>& dgate, std::vector<T>& dw2, std::vector<T>& dsw1) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  auto p = make_problem<T>(dims, 21);
  const int64_t N = dims.tokens(), d = dims.hidden;
  const auto R = cast<T>(random_vector(N * d, 41));
  MoeCache<T> cache;
  y.assign(static_cast<size_t>(N * d), T(0));
  dx.assign(static_cast<size_t>(N * d), T(0));
  dgate.assign(p.gate.size(), T(0));
  dw2.assign(p.w2[1].size(), T(0));
  dsw1.assign(p.sw1.size(), T(0));
  moe_forward(dims, p.weights(), p.x.data(), p.tokens.data(), cache, y.data());
  MoeGrads<T> grads;
  grads.gate = dgate.data();
  grads.w2.assign(dims.n_experts, nullptr);
  grads.w2[1] = dw2.data();
  grads.shared_w1 = dsw1.data();
  moe_backward(dims, p.weights(), cache, R.data(), T(1), grads, dx.data());
  omp_set_num_threads(saved);
}

template <class T>
void expect_deterministic(const MoeDims& dims) {
  std::vector<T> y1, dx1, g1, w1, s1, y2, dx2, g2, w2, s2;
  run_at_threads<T>(1, dims, y1, dx1, g1, w1, s1);
  run_at_threads<T>(2, dims, y2, dx2, g2, w2, s2);
  const auto same = [](const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
  };
  EXPECT_TRUE(same(y1, y2));
  EXPECT_TRUE(same(dx1, dx2));
  EXPECT_TRUE(same(g1, g2));
  EXPECT_TRUE(same(w1, w2));
  EXPECT_TRUE(same(s1, s2));
}

MoeDims threaded_dims() {
  MoeDims dims;  // large enough that every OpenMP region actually splits
  dims.batch = 4;
  dims.seq = 128;
  dims.hidden = 32;
  dims.n_experts = 16;
  dims.top_k = 4;
  dims.inter = 32;
  dims.routed_scaling = 2.5;
  dims.swiglu_limit = 1.0;
  dims.balance_loss_weight = 0.01;
  dims.vocab = 50;
  return dims;
}

TEST(MoeThreads, DeterministicAcrossThreadCountsDouble) {
  expect_deterministic<double>(threaded_dims());
}

TEST(MoeThreads, DeterministicAcrossThreadCountsFloat) {
  expect_deterministic<float>(threaded_dims());
}

TEST(MoeErrors, BadInputsNameTheField) {
  MoeDims dims = small_dims();
  auto p = make_problem<double>(dims);
  MoeCache<double> cache;
  std::vector<double> y(static_cast<size_t>(dims.tokens() * dims.hidden));
  const auto field_of = [&](const MoeDims& dd, const MoeWeights<double>& w, const int64_t* ids) {
    try {
      moe_forward(dd, w, p.x.data(), ids, cache, y.data());
    } catch (const Error& e) {
      return e.field_name();
    }
    return std::string("no error");
  };
  MoeDims too_many = dims;
  too_many.top_k = 7;
  EXPECT_EQ(field_of(too_many, p.weights(), nullptr), "moe.top_k");
  MoeDims hash = dims;
  hash.hash_routed = true;
  EXPECT_EQ(field_of(hash, p.weights(), nullptr), "moe.tid2eid");  // weights() built for score
  p.dims = hash;
  EXPECT_EQ(field_of(hash, p.weights(), nullptr), "moe.token_ids");
  std::vector<int64_t> bad_ids = p.tokens;
  bad_ids[3] = dims.vocab;
  EXPECT_EQ(field_of(hash, p.weights(), bad_ids.data()), "moe.token_ids");
  p.tid2eid[p.tokens[0] * dims.top_k] = dims.n_experts;
  EXPECT_EQ(field_of(hash, p.weights(), p.tokens.data()), "moe.tid2eid");
  p.dims = dims;
  auto w = p.weights();
  w.w2.pop_back();
  EXPECT_EQ(field_of(dims, w, nullptr), "moe.w1");
  w = p.weights();
  w.shared_w2 = nullptr;
  EXPECT_EQ(field_of(dims, w, nullptr), "moe.shared_w1");
  cache.expert_index.assign(3, 0, kernels::cpu_backend());
  try {
    moe_forward(dims, p.weights(), p.x.data(), nullptr, cache, y.data(), true);
    ADD_FAILURE() << "fixed_selection with a wrong-sized index did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "moe.expert_index");
  }
}

TEST(MoeDimsFromConfig, HashLayersScoreLayersAndMtp) {
  ModelConfig config;
  config.vocab_size = 100;
  config.hidden_size = 16;
  config.num_hidden_layers = 4;
  config.num_nextn_predict_layers = 1;
  config.n_routed_experts = 8;
  config.num_experts_per_tok = 2;
  config.moe_intermediate_size = 12;
  config.num_hash_layers = 3;
  config.routed_scaling_factor = 1.5;
  config.swiglu_limit = 10.0;
  const MoeDims hash = moe_dims(config, 2, 3, 5, 1e-4);
  EXPECT_TRUE(hash.hash_routed);
  EXPECT_EQ(hash.tokens(), 15);
  EXPECT_EQ(hash.n_experts, 8);
  EXPECT_EQ(hash.top_k, 2);
  EXPECT_EQ(hash.inter, 12);
  EXPECT_EQ(hash.vocab, 100);
  EXPECT_DOUBLE_EQ(hash.routed_scaling, 1.5);
  EXPECT_DOUBLE_EQ(hash.swiglu_limit, 10.0);
  EXPECT_DOUBLE_EQ(hash.balance_loss_weight, 1e-4);
  EXPECT_FALSE(moe_dims(config, 3, 1, 5).hash_routed);
  // The MTP layer (index num_hidden_layers) is score routed even with many hash layers.
  config.num_hash_layers = 10;
  EXPECT_FALSE(moe_dims(config, 4, 1, 5).hash_routed);
  config.scoring_func = "softmax";
  try {
    moe_dims(config, 3, 1, 5);
    ADD_FAILURE() << "softmax scoring accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "scoring_func");
  }
}

}  // namespace
}  // namespace trex::model
