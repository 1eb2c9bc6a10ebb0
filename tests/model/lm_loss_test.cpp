#include "trex/model/lm_loss.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "gradcheck.hpp"
#include "trex/core/error.hpp"

namespace trex::model {
namespace {

using testing::check_gradient;
using testing::random_vector;

// Straightforward reference: full [N, V] logits, log-softmax per row, and the
// gradients written out by hand (dlogits = scale·(softmax − onehot)).
struct Reference {
  std::vector<double> logits, per_token, dh, dhead;
  double loss = 0.0;
  int64_t counted = 0;
};

Reference reference(int64_t N, int64_t d, int64_t V, const std::vector<double>& h,
                    const std::vector<double>& head, const std::vector<int64_t>& targets,
                    double scale) {
  Reference r;
  r.logits.assign(N * V, 0.0);
  r.per_token.assign(N, 0.0);
  r.dh.assign(N * d, 0.0);
  r.dhead.assign(V * d, 0.0);
  for (int64_t t = 0; t < N; ++t)
    for (int64_t v = 0; v < V; ++v)
      for (int64_t i = 0; i < d; ++i) r.logits[t * V + v] += h[t * d + i] * head[v * d + i];
  for (int64_t t = 0; t < N; ++t) {
    if (targets[t] < 0) continue;
    ++r.counted;
    double z = 0.0;
    for (int64_t v = 0; v < V; ++v) z += std::exp(r.logits[t * V + v]);
    r.per_token[t] = std::log(z) - r.logits[t * V + targets[t]];
    r.loss += scale * r.per_token[t];
    for (int64_t v = 0; v < V; ++v) {
      const double g = scale * (std::exp(r.logits[t * V + v]) / z - (v == targets[t] ? 1.0 : 0.0));
      for (int64_t i = 0; i < d; ++i) {
        r.dh[t * d + i] += g * head[v * d + i];
        r.dhead[v * d + i] += g * h[t * d + i];
      }
    }
  }
  return r;
}

struct Problem {
  int64_t N = 13, d = 8, V = 11;
  std::vector<double> h, head;
  std::vector<int64_t> targets;
  double scale = 0.0;
  Problem() {
    h = random_vector(N * d, 11, 1.0);
    head = random_vector(V * d, 12, 0.8);
    targets = {3, -1, 0, 10, 7, -1, -100, 5, 5, 1, 2, -1, 9};  // 4 ignored
    scale = 1.0 / 9.0;
  }
};

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// Token weights scale each row's loss and gradient: the weighted result is the
// weighted sum of the one-token results (linearity), for any chunking, with
// negative and zero weights; float and both index types take the same path.
TEST(LmLoss, TokenWeightsScaleEachRowsLossAndGradient) {
  const Problem p;
  const std::vector<double> w = {0.5,   9.0, -1.5, 2.0, 0.0, 3.0, 1.0,
                                 -0.25, 1.0, 4.0,  1.0, 7.0, 0.75};
  for (int64_t chunk : {1, 4, 0}) {
    std::vector<double> dh(p.N * p.d, 0.0), dhead(p.V * p.d, 0.0);
    LmLossOutputs<double> o;
    o.dh = dh.data();
    o.dhead = dhead.data();
    const LmLossResult r = lm_head_cross_entropy<double, int64_t>(
        LmLossDims{p.N, p.d, p.V, chunk}, p.h.data(), p.head.data(), p.targets.data(), w.data(),
        p.scale, o);
    EXPECT_EQ(r.counted, 9);
    double want_loss = 0.0;
    std::vector<double> want_dh(p.N * p.d, 0.0), want_dhead(p.V * p.d, 0.0);
    for (int64_t t = 0; t < p.N; ++t) {
      if (p.targets[t] < 0) continue;
      std::vector<int64_t> one(p.N, -1);
      one[t] = p.targets[t];
      const Reference ref = reference(p.N, p.d, p.V, p.h, p.head, one, p.scale * w[t]);
      want_loss += ref.loss;
      for (size_t i = 0; i < want_dh.size(); ++i) want_dh[i] += ref.dh[i];
      for (size_t i = 0; i < want_dhead.size(); ++i) want_dhead[i] += ref.dhead[i];
    }
    EXPECT_NEAR(r.loss, want_loss, 1e-12) << chunk;
    EXPECT_LT(max_abs_diff(dh, want_dh), 1e-12) << chunk;
    EXPECT_LT(max_abs_diff(dhead, want_dhead), 1e-12) << chunk;
  }
  // Weights of 1 are the unweighted op, bit for bit (float, the vectorised row path).
  const std::vector<float> hf(p.h.begin(), p.h.end()), headf(p.head.begin(), p.head.end());
  const std::vector<int32_t> t32(p.targets.begin(), p.targets.end());
  const std::vector<float> ones(p.N, 1.0f);
  std::vector<float> dh1(p.N * p.d), dh2(p.N * p.d);
  LmLossOutputs<float> o1, o2;
  o1.dh = dh1.data();
  o2.dh = dh2.data();
  const auto a = lm_head_cross_entropy<float, int32_t>(LmLossDims{p.N, p.d, p.V, 0}, hf.data(),
                                                       headf.data(), t32.data(), 0.25, o1);
  const auto b = lm_head_cross_entropy<float, int32_t>(
      LmLossDims{p.N, p.d, p.V, 0}, hf.data(), headf.data(), t32.data(), ones.data(), 0.25, o2);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(dh1, dh2);
}

TEST(LmLoss, ChunkedMatchesStraightforwardComputation) {
  const Problem p;
  const Reference ref = reference(p.N, p.d, p.V, p.h, p.head, p.targets, p.scale);
  ASSERT_EQ(ref.counted, 9);
  for (int64_t chunk : {1, 4, 5, 13, 100, 0}) {
    std::vector<double> dh(p.N * p.d, -5.0), dhead(p.V * p.d, 0.0), per_token(p.N, -5.0);
    const LmLossResult r = lm_head_cross_entropy<double, int64_t>(
        LmLossDims{p.N, p.d, p.V, chunk}, p.h.data(), p.head.data(), p.targets.data(), p.scale,
        LmLossOutputs<double>{dh.data(), dhead.data(), per_token.data(), nullptr});
    EXPECT_EQ(r.counted, 9);
    EXPECT_NEAR(r.loss, ref.loss, 1e-12) << "chunk " << chunk;
    EXPECT_LT(max_abs_diff(dh, ref.dh), 1e-12) << "chunk " << chunk;
    EXPECT_LT(max_abs_diff(dhead, ref.dhead), 1e-12) << "chunk " << chunk;
    EXPECT_LT(max_abs_diff(per_token, ref.per_token), 1e-12) << "chunk " << chunk;
    std::printf("[lm loss chunk=%lld] |loss diff| %.1e max|dh diff| %.1e max|dhead diff| %.1e\n",
                static_cast<long long>(chunk), std::abs(r.loss - ref.loss),
                max_abs_diff(dh, ref.dh), max_abs_diff(dhead, ref.dhead));
  }
  // Ignored tokens: zero loss and zero gradient.
  std::vector<double> dh(p.N * p.d, -5.0);
  lm_head_cross_entropy<double, int64_t>(
      LmLossDims{p.N, p.d, p.V, 4}, p.h.data(), p.head.data(), p.targets.data(), p.scale,
      LmLossOutputs<double>{dh.data(), nullptr, nullptr, nullptr});
  for (int64_t i = 0; i < p.d; ++i) EXPECT_EQ(dh[1 * p.d + i], 0.0);
  EXPECT_GT(std::abs(dh[0]), 1e-4);
}

TEST(LmLoss, LogitsOutputAndForwardOnly) {
  const Problem p;
  const Reference ref = reference(p.N, p.d, p.V, p.h, p.head, p.targets, p.scale);
  std::vector<double> logits(p.N * p.V, 0.0), dh(p.N * p.d), dhead(p.V * p.d, 0.0);
  // With logits kept and backward requested (separate gradient buffer inside).
  const LmLossResult r = lm_head_cross_entropy<double, int64_t>(
      LmLossDims{p.N, p.d, p.V, 3}, p.h.data(), p.head.data(), p.targets.data(), p.scale,
      LmLossOutputs<double>{dh.data(), dhead.data(), nullptr, logits.data()});
  EXPECT_LT(max_abs_diff(logits, ref.logits), 1e-12);
  EXPECT_NEAR(r.loss, ref.loss, 1e-12);
  EXPECT_LT(max_abs_diff(dh, ref.dh), 1e-12);
  EXPECT_LT(max_abs_diff(dhead, ref.dhead), 1e-12);
  // Forward only.
  const LmLossResult f = lm_head_cross_entropy<double, int64_t>(
      LmLossDims{p.N, p.d, p.V, 3}, p.h.data(), p.head.data(), p.targets.data(), 1.0, {});
  EXPECT_NEAR(f.loss * p.scale, ref.loss, 1e-12);
  EXPECT_EQ(f.counted, 9);
}

TEST(LmLoss, GradientsMatchFiniteDifferences) {
  Problem p;
  std::vector<double> dh(p.N * p.d), dhead(p.V * p.d, 0.0);
  lm_head_cross_entropy<double, int64_t>(LmLossDims{p.N, p.d, p.V, 4}, p.h.data(), p.head.data(),
                                         p.targets.data(), p.scale,
                                         LmLossOutputs<double>{dh.data(), dhead.data()});
  auto loss = [&] {
    return lm_head_cross_entropy<double, int64_t>(LmLossDims{p.N, p.d, p.V, 4}, p.h.data(),
                                                  p.head.data(), p.targets.data(), p.scale, {})
        .loss;
  };
  const auto rh = check_gradient(p.h, dh, loss, 1e-5, 1 << 20, 1e-4);
  const auto rw = check_gradient(p.head, dhead, loss, 1e-5, 1 << 20, 1e-4);
  std::printf("[lm loss FD] max rel err dh %.2e (abs %.1e) dhead %.2e (abs %.1e)\n",
              rh.max_rel_error, rh.max_abs_error, rw.max_rel_error, rw.max_abs_error);
  EXPECT_EQ(rh.checked, p.N * p.d);
  EXPECT_LT(rh.max_rel_error, 1e-6);
  EXPECT_LT(rw.max_rel_error, 1e-6);
}

TEST(LmLoss, HeadGradientAccumulatesAndInt32TargetsAgree) {
  const Problem p;
  std::vector<int32_t> t32(p.targets.begin(), p.targets.end());
  std::vector<double> dh64(p.N * p.d), dh32(p.N * p.d), dhead(p.V * p.d, 0.0), once;
  const auto a = lm_head_cross_entropy<double, int64_t>(
      LmLossDims{p.N, p.d, p.V, 5}, p.h.data(), p.head.data(), p.targets.data(), p.scale,
      LmLossOutputs<double>{dh64.data(), dhead.data()});
  once = dhead;
  const auto b = lm_head_cross_entropy<double, int32_t>(
      LmLossDims{p.N, p.d, p.V, 5}, p.h.data(), p.head.data(), t32.data(), p.scale,
      LmLossOutputs<double>{dh32.data(), dhead.data()});
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(dh64, dh32);
  for (size_t i = 0; i < dhead.size(); ++i) EXPECT_NEAR(dhead[i], 2 * once[i], 1e-14);
}

TEST(LmLoss, FloatMatchesDouble) {
  const int64_t N = 37, d = 24, V = 301;
  const auto h = random_vector(N * d, 21, 1.0), head = random_vector(V * d, 22, 0.5);
  std::vector<int64_t> targets(N);
  for (int64_t t = 0; t < N; ++t) targets[t] = (t % 7 == 3) ? -1 : (t * 37) % V;
  const std::vector<float> hf(h.begin(), h.end()), headf(head.begin(), head.end());
  std::vector<double> dh(N * d), dhead(V * d, 0.0);
  std::vector<float> dhf(N * d), dheadf(V * d, 0.0f);
  const auto rd = lm_head_cross_entropy<double, int64_t>(
      LmLossDims{N, d, V, 8}, h.data(), head.data(), targets.data(), 1.0 / 32,
      LmLossOutputs<double>{dh.data(), dhead.data()});
  const auto rf = lm_head_cross_entropy<float, int64_t>(
      LmLossDims{N, d, V, 8}, hf.data(), headf.data(), targets.data(), 1.0 / 32,
      LmLossOutputs<float>{dhf.data(), dheadf.data()});
  auto normwise = [](const std::vector<double>& a, const std::vector<float>& b) {
    double diff = 0.0, scale = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, std::abs(a[i] - static_cast<double>(b[i])));
      scale = std::max(scale, std::abs(a[i]));
    }
    return diff / scale;
  };
  const double eloss = std::abs(rd.loss - rf.loss) / std::abs(rd.loss);
  const double edh = normwise(dh, dhf), edhead = normwise(dhead, dheadf);
  std::printf("[lm loss float vs double] loss %.2e dh %.2e dhead %.2e\n", eloss, edh, edhead);
  EXPECT_LT(eloss, 1e-5);
  EXPECT_LT(edh, 1e-5);
  EXPECT_LT(edhead, 1e-5);
}

TEST(LmLoss, LargeLogitsStayFinite) {
  const int64_t N = 3, d = 4, V = 5;
  std::vector<double> h = random_vector(N * d, 31, 1000.0), head = random_vector(V * d, 32, 10.0);
  std::vector<int64_t> targets{0, 4, 2};
  std::vector<float> hf(h.begin(), h.end()), headf(head.begin(), head.end()), dh(N * d),
      dhead(V * d, 0.0f), per_token(N);
  const auto r = lm_head_cross_entropy<float, int64_t>(
      LmLossDims{N, d, V, 2}, hf.data(), headf.data(), targets.data(), 1.0,
      LmLossOutputs<float>{dh.data(), dhead.data(), per_token.data()});
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_GT(r.loss, 1.0);  // logits in the thousands: some target is far from the max
  for (float g : dh) EXPECT_TRUE(std::isfinite(g));
  for (float g : dhead) EXPECT_TRUE(std::isfinite(g));
  for (float l : per_token) EXPECT_GE(l, 0.0f);
}

TEST(LmLoss, AllTargetsIgnored) {
  const Problem p;
  const std::vector<int32_t> none(p.N, -1);
  std::vector<double> dh(p.N * p.d, 3.0), dhead(p.V * p.d, 0.5);
  const auto r = lm_head_cross_entropy<double, int32_t>(
      LmLossDims{p.N, p.d, p.V, 4}, p.h.data(), p.head.data(), none.data(), 1.0,
      LmLossOutputs<double>{dh.data(), dhead.data()});
  EXPECT_EQ(r.loss, 0.0);
  EXPECT_EQ(r.counted, 0);
  for (double g : dh) EXPECT_EQ(g, 0.0);
  for (double g : dhead) EXPECT_EQ(g, 0.5);
}

TEST(LmLoss, ResultsIndependentOfThreadCount) {
  const int64_t N = 200, d = 64, V = 1000;
  const auto hd = random_vector(N * d, 41, 1.0), headd = random_vector(V * d, 42, 0.2);
  const std::vector<float> h(hd.begin(), hd.end()), head(headd.begin(), headd.end());
  std::vector<int32_t> targets(N);
  for (int64_t t = 0; t < N; ++t)
    targets[t] = (t % 5 == 0) ? -1 : static_cast<int32_t>((t * 977) % V);
  std::vector<float> dh1(N * d), dh2(N * d), dw1(V * d, 0.0f), dw2(V * d, 0.0f);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto a = lm_head_cross_entropy<float, int32_t>(
      LmLossDims{N, d, V, 64}, h.data(), head.data(), targets.data(), 1.0 / N,
      LmLossOutputs<float>{dh1.data(), dw1.data()});
  omp_set_num_threads(std::max(2, saved));
  const auto b = lm_head_cross_entropy<float, int32_t>(
      LmLossDims{N, d, V, 64}, h.data(), head.data(), targets.data(), 1.0 / N,
      LmLossOutputs<float>{dh2.data(), dw2.data()});
  omp_set_num_threads(saved);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(dh1, dh2);
  EXPECT_EQ(dw1, dw2);
}

TEST(LmLoss, BadInputThrowsNamingTheField) {
  const Problem p;
  std::vector<int64_t> bad = p.targets;
  bad[4] = p.V;
  try {
    lm_head_cross_entropy<double, int64_t>(LmLossDims{p.N, p.d, p.V, 4}, p.h.data(), p.head.data(),
                                           bad.data(), 1.0, {});
    FAIL() << "expected trex::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "targets");
  }
  try {
    lm_head_cross_entropy<double, int64_t>(LmLossDims{p.N, p.d, 0, 4}, p.h.data(), p.head.data(),
                                           p.targets.data(), 1.0, {});
    FAIL() << "expected trex::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "vocab_size");
  }
  EXPECT_EQ(lm_loss_count_targets(p.targets.data(), p.N, p.V), 9);
  // No tokens: zero loss, nothing counted.
  const auto empty = lm_head_cross_entropy<double, int64_t>(LmLossDims{0, p.d, p.V, 0}, nullptr,
                                                            nullptr, nullptr, 1.0, {});
  EXPECT_EQ(empty.loss, 0.0);
  EXPECT_EQ(empty.counted, 0);
}

}  // namespace
}  // namespace trex::model
