#include "trex/kernels/cpu/elementwise.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "trex/core/rng.hpp"
#include "trex/kernels/cpu/norms.hpp"
#include "trex/model/lm_loss.hpp"
#include "trex/train/optim/adamw.hpp"

namespace trex::kernels {
namespace {

std::vector<float> uniform(uint64_t seed, int64_t n, double lo, double hi) {
  Rng rng(seed, {0});
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(lo + (hi - lo) * rng.uniform());
  return v;
}

// |y − ref| in units of the float ulp at ref (ref normal).
double ulp_error(float y, double ref) {
  int exponent = 0;
  std::frexp(ref, &exponent);  // ref = m·2^exponent, m in [0.5, 1)
  return std::abs(static_cast<double>(y) - ref) / std::ldexp(1.0, exponent - 24);
}

TEST(ElementwiseExp, WithinTwoUlpOfStdExpOverTheNormalRange) {
  // Dense sweep: every 2^-13 over [-87, 88] (1.4M points, all residues r of the
  // range reduction), plus 64 mantissas of every binade of ±[2^-126, 2^-10].
  std::vector<float> x;
  for (double v = -87.0; v <= 88.0; v += 1.0 / 8192.0) x.push_back(static_cast<float>(v));
  for (int e = -126; e <= -10; ++e)
    for (int j = 0; j < 64; ++j) {
      const float v = std::ldexp(1.0f + static_cast<float>(j) / 64.0f, e);
      x.push_back(v);
      x.push_back(-v);
    }
  std::vector<float> y(x.size());
  exp_array(x.data(), y.data(), static_cast<int64_t>(x.size()));
  double worst = 0.0;
  float worst_x = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    const double error = ulp_error(y[i], std::exp(static_cast<double>(x[i])));
    if (error > worst) worst = error, worst_x = x[i];
  }
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
  RecordProperty("max_ulp_error", std::to_string(worst));
}

TEST(ElementwiseExp, SpecialValuesAndRangeEnds) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {0.0f,   -0.0f, 88.7f,  88.73f, 89.0f,  1e30f, inf,
                                -87.3f, -95.f, -103.f, -104.f, -200.f, -inf,  std::nanf("")};
  std::vector<float> y(x.size());
  exp_array(x.data(), y.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_LE(ulp_error(y[2], std::exp(static_cast<double>(x[2]))), 2.0);  // just below FLT_MAX
  for (int i = 3; i <= 6; ++i) EXPECT_EQ(y[i], inf) << x[i];
  EXPECT_LE(ulp_error(y[7], std::exp(static_cast<double>(x[7]))), 2.0);  // near FLT_MIN
  // Subnormal results: within one subnormal step (2^-149) of the true value.
  for (int i = 8; i <= 10; ++i)
    EXPECT_NEAR(y[i], std::exp(static_cast<double>(x[i])), 0x1p-149) << x[i];
  EXPECT_GT(y[8], 0.0f);
  for (int i = 11; i <= 12; ++i) EXPECT_EQ(y[i], 0.0f) << x[i];
  EXPECT_TRUE(std::isnan(y[13]));
  // In place gives the same values.
  std::vector<float> in_place = x;
  exp_array(in_place.data(), in_place.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i + 1 < x.size(); ++i) EXPECT_EQ(in_place[i], y[i]);
}

TEST(ElementwiseSigmoid, MatchesTheDoubleFormulaIncludingTails) {
  auto x = uniform(3, 1001, -30.0, 30.0);
  x.insert(x.end(), {0.0f, -90.0f, 90.0f, -200.0f, 200.0f});
  std::vector<float> y(x.size());
  sigmoid_array(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = 1.0 / (1.0 + std::exp(-static_cast<double>(x[i])));
    EXPECT_NEAR(y[i], ref, 5e-7 * ref + 1e-37) << x[i];
  }
  EXPECT_EQ(y[x.size() - 5], 0.5f);
  EXPECT_EQ(y[x.size() - 1], 1.0f);
  EXPECT_EQ(y[x.size() - 2], 0.0f);  // e^-200 underflows in float
}

struct CrossEntropyReference {
  double loss;
  std::vector<double> grad;
};

CrossEntropyReference cross_entropy_reference(const std::vector<float>& z, int64_t target,
                                              double scale) {
  double mx = z[0];
  for (float v : z) mx = std::max<double>(mx, v);
  long double sum = 0;
  for (float v : z) sum += std::exp(static_cast<long double>(v) - mx);
  const double lse = mx + static_cast<double>(std::log(sum));
  CrossEntropyReference ref{lse - z[static_cast<size_t>(target)], {}};
  for (float v : z) ref.grad.push_back(scale * std::exp(static_cast<double>(v) - lse));
  ref.grad[static_cast<size_t>(target)] -= scale;
  return ref;
}

TEST(ElementwiseCrossEntropy, RowMatchesDoubleReferenceAcrossSizes) {
  for (int64_t V : {1, 15, 17, 256, 1000, 16384}) {
    auto z = uniform(static_cast<uint64_t>(V), V, -12.0, 12.0);
    const int64_t target = (V * 7) / 11;
    const float scale = 0.25f;
    const auto ref = cross_entropy_reference(z, target, scale);
    std::vector<float> grad(static_cast<size_t>(V));
    const double loss = softmax_cross_entropy_row(z.data(), V, target, scale, grad.data());
    EXPECT_NEAR(loss, ref.loss, 1e-6 * std::max(1.0, std::abs(ref.loss))) << V;
    for (int64_t v = 0; v < V; ++v)
      EXPECT_NEAR(grad[v], ref.grad[v], 2e-6 * scale) << V << " " << v;
    // Loss only (no grad) is the same number; in place (grad = z) the same grad.
    EXPECT_EQ(softmax_cross_entropy_row(z.data(), V, target, scale, nullptr), loss);
    EXPECT_EQ(softmax_cross_entropy_row(z.data(), V, target, scale, z.data()), loss);
    for (int64_t v = 0; v < V; ++v) EXPECT_EQ(z[v], grad[v]);
  }
}

TEST(ElementwiseCrossEntropy, ExtremeLogitsStayFinite) {
  const int64_t V = 300;
  std::vector<float> z(V, 0.0f);
  z[5] = 1e4f;
  z[6] = -1e4f;
  z[7] = 1e4f - 1.0f;
  z[299] = -3e38f;
  std::vector<float> grad(V);
  // Target at the lowest logit: CE ≈ 1e4 − (−1e4) = 2e4.
  double loss = softmax_cross_entropy_row(z.data(), V, 6, 1.0f, grad.data());
  const auto ref = cross_entropy_reference(z, 6, 1.0);
  EXPECT_NEAR(loss, ref.loss, 1e-9 * ref.loss);
  EXPECT_NEAR(loss, 2e4 + std::log1p(std::exp(-1.0)), 1e-3);
  for (int64_t v = 0; v < V; ++v) {
    ASSERT_TRUE(std::isfinite(grad[v])) << v;
    EXPECT_NEAR(grad[v], ref.grad[v], 5e-7 * std::abs(ref.grad[v]) + 1e-30) << v;
  }
  EXPECT_NEAR(grad[6], -1.0, 1e-6);
  EXPECT_EQ(grad[299], 0.0f);
  // Target at the top logit: CE = log(1 + e^-1) (the rest underflow).
  loss = softmax_cross_entropy_row(z.data(), V, 5, 1.0f, grad.data());
  EXPECT_NEAR(loss, std::log1p(std::exp(-1.0)), 1e-6);
}

// The lm-loss entry point: float (vectorised kernel) against double (scalar),
// with ignored rows, and bitwise the same result on 1 and 2 threads.
TEST(ElementwiseCrossEntropy, LmLossFloatMatchesDoubleWithIgnoredRowsAnyThreadCount) {
  const int64_t N = 9, d = 8, V = 700;
  const auto h = uniform(11, N * d, -1.0, 1.0);
  const auto head = uniform(12, V * d, -2.0, 2.0);
  const std::vector<int32_t> targets = {3, -1, 699, 0, -100, 350, 1, -1, 42};
  const std::vector<double> h_d(h.begin(), h.end()), head_d(head.begin(), head.end());
  auto run_float = [&](int threads, std::vector<float>& dh, std::vector<float>& per_token) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    dh.assign(static_cast<size_t>(N * d), 0.0f);
    per_token.assign(static_cast<size_t>(N), -1.0f);
    model::LmLossOutputs<float> out;
    out.dh = dh.data();
    out.per_token_loss = per_token.data();
    const auto r = model::lm_head_cross_entropy<float, int32_t>({N, d, V, 4}, h.data(), head.data(),
                                                                targets.data(), 0.5, out);
    omp_set_num_threads(saved);
    return r;
  };
  std::vector<float> dh1, dh2, per1, per2;
  const auto r1 = run_float(1, dh1, per1);
  const auto r2 = run_float(2, dh2, per2);
  EXPECT_EQ(r1.loss, r2.loss);
  EXPECT_EQ(dh1, dh2);
  EXPECT_EQ(per1, per2);
  EXPECT_EQ(r1.counted, 6);

  std::vector<double> dh_d(static_cast<size_t>(N * d)), per_d(static_cast<size_t>(N));
  model::LmLossOutputs<double> out_d;
  out_d.dh = dh_d.data();
  out_d.per_token_loss = per_d.data();
  const auto rd = model::lm_head_cross_entropy<double, int32_t>(
      {N, d, V, 4}, h_d.data(), head_d.data(), targets.data(), 0.5, out_d);
  EXPECT_NEAR(r1.loss, rd.loss, 1e-5 * std::abs(rd.loss));
  for (int64_t t = 0; t < N; ++t) {
    EXPECT_NEAR(per1[t], per_d[t], 1e-5 * std::max(1.0, per_d[t])) << t;
    if (targets[t] < 0) {
      EXPECT_EQ(per1[t], 0.0f) << t;
    }
  }
  for (int64_t i = 0; i < N * d; ++i) {
    EXPECT_NEAR(dh1[i], dh_d[i], 1e-5) << i;
    if (targets[i / d] < 0) {
      EXPECT_EQ(dh1[i], 0.0f) << i;
    }
  }
}

// Scalar double formula of model/moe.cpp's SwiGLU with its clamp.
struct SwigluReference {
  double h, dg, dv, dscale_term;
};

SwigluReference swiglu_reference(double g_raw, double v_raw, double dh, double scale,
                                 double limit) {
  const bool clamp = limit >= 0.0;
  const bool g_pass = !clamp || g_raw <= limit;
  const bool v_pass = !clamp || (v_raw >= -limit && v_raw <= limit);
  const double g = g_pass ? g_raw : limit;
  const double v = clamp ? std::clamp(v_raw, -limit, limit) : v_raw;
  const double sg = 1.0 / (1.0 + std::exp(-g));
  const double act = g * sg;
  return {scale * act * v, g_pass ? dh * scale * v * sg * (1.0 + g * (1.0 - sg)) : 0.0,
          v_pass ? dh * scale * act : 0.0, dh * act * v};
}

TEST(ElementwiseSwiglu, ForwardAndBackwardMatchTheScalarFormulaAtClampEdges) {
  const int64_t n = 533;  // 33 blocks of 16 and a tail
  auto gate = uniform(21, n, -14.0, 14.0);
  auto up = uniform(22, n, -14.0, 14.0);
  const auto dh = uniform(23, n, -1.0, 1.0);
  // Clamp edges: exactly at ±limit, just past it, far below the gate's range.
  const float limit = 10.0f;
  const float above = std::nextafter(limit, 20.0f);
  const float edges_gate[] = {limit, above, -limit, 50.0f, -90.0f, -200.0f, 0.0f};
  const float edges_up[] = {limit, above, -limit, -above, 50.0f, -50.0f, 0.0f};
  for (int i = 0; i < 7; ++i) gate[i] = edges_gate[i], up[i] = edges_up[i];
  const float scale = 0.75f;
  for (float lim : {limit, -1.0f}) {
    std::vector<float> h(n), dg(n), dv(n);
    swiglu_forward_row(gate.data(), up.data(), n, scale, lim, h.data());
    const float dscale =
        swiglu_backward_row(gate.data(), up.data(), dh.data(), n, scale, lim, dg.data(), dv.data());
    double dscale_ref = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const auto ref = swiglu_reference(gate[i], up[i], dh[i], scale, lim);
      dscale_ref += ref.dscale_term;
      const double tol = 2e-6 * (1.0 + std::abs(gate[i]) * std::abs(up[i]));
      EXPECT_NEAR(h[i], ref.h, tol) << lim << " " << i;
      EXPECT_NEAR(dg[i], ref.dg, tol) << lim << " " << i;
      EXPECT_NEAR(dv[i], ref.dv, tol) << lim << " " << i;
    }
    EXPECT_NEAR(dscale, dscale_ref, 1e-5 * (1.0 + std::abs(dscale_ref))) << lim;
    if (lim > 0) {
      EXPECT_EQ(dg[1], 0.0f);  // gate just above the limit: cut
      EXPECT_EQ(dg[3], 0.0f);
      EXPECT_NE(dg[0], 0.0f);  // gate at the limit passes
      EXPECT_NE(dv[0], 0.0f);  // up at ±limit passes
      EXPECT_NE(dv[2], 0.0f);
      EXPECT_EQ(dv[1], 0.0f);  // up just past ±limit: cut
      EXPECT_EQ(dv[3], 0.0f);
      EXPECT_EQ(dv[4], 0.0f);
      // Gate 50 and up −(limit+) clamp to h = scale·limit·σ(limit)·(−limit).
      EXPECT_FLOAT_EQ(h[3], static_cast<float>(-scale * limit * limit / (1.0 + std::exp(-10.0))));
    } else {
      EXPECT_NE(dg[1], 0.0f);
      EXPECT_NE(dv[4], 0.0f);
    }
  }
}

// Bitwise the scalar double formula of train/adamw.hpp (the pre-kernel code).
TEST(ElementwiseAdamW, BitwiseEqualToTheScalarDoubleFormula) {
  const int64_t n = 1031;  // blocks of 256, an odd tail for the paired square roots
  auto w = uniform(31, n, -1.0, 1.0);
  auto g = uniform(32, n, -1e-3, 1e-3);
  auto m = uniform(33, n, -1e-3, 1e-3);
  auto v = uniform(34, n, 0.0, 1e-6);
  g[0] = 0.0f, m[0] = 0.0f, v[0] = 0.0f;  // untouched expert: 0/(0+ε)
  g[1] = 1e-30f;                          // g² underflows in float, not in double
  g[2] = 3e4f;
  for (int64_t step : {1, 7}) {
    train::AdamWOptions options;
    const double lr = 3e-4;
    auto w_ref = w, m_ref = m, v_ref = v;
    const double c1 = 1.0 - std::pow(options.beta1, static_cast<double>(step));
    const double c2 = 1.0 - std::pow(options.beta2, static_cast<double>(step));
    const double decay = 1.0 - lr * options.weight_decay;
    for (int64_t i = 0; i < n; ++i) {
      const double gi = g[i];
      const double mi = options.beta1 * m_ref[i] + (1.0 - options.beta1) * gi;
      const double vi = options.beta2 * v_ref[i] + (1.0 - options.beta2) * gi * gi;
      m_ref[i] = static_cast<float>(mi);
      v_ref[i] = static_cast<float>(vi);
      const double update = (mi / c1) / (std::sqrt(vi / c2) + options.eps);
      w_ref[i] = static_cast<float>(w_ref[i] * decay - lr * update);
    }
    auto w_new = w, m_new = m, v_new = v;
    train::adamw_update(w_new.data(), g.data(), m_new.data(), v_new.data(), n, lr, step, options);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(m_new[i], m_ref[i]) << step << " " << i;
      ASSERT_EQ(v_new[i], v_ref[i]) << step << " " << i;
      ASSERT_EQ(w_new[i], w_ref[i]) << step << " " << i;
    }
    EXPECT_NE(w_new, w);
  }
}

TEST(ElementwiseReductions, SumSquaresDotsScaleAxpy) {
  for (int64_t n : {0, 1, 15, 16, 17, 255, 256, 257, 5000}) {
    const auto x = uniform(41 + static_cast<uint64_t>(n), n, -3.0, 3.0);
    long double ref = 0;
    for (float v : x) ref += static_cast<long double>(v) * v;
    EXPECT_NEAR(sum_squares(x.data(), n), static_cast<double>(ref), 1e-13 * (1.0 + double(ref)))
        << n;
    const auto b = uniform(91 + static_cast<uint64_t>(n), n, -2.0, 2.0);
    const auto w = uniform(92 + static_cast<uint64_t>(n), n, -2.0, 2.0);
    long double dot_ref = 0, weighted_ref = 0;
    for (int64_t i = 0; i < n; ++i) {
      dot_ref += static_cast<long double>(x[i]) * b[i];
      weighted_ref += static_cast<long double>(w[i] * x[i]) * b[i];  // w·x rounded to float
    }
    EXPECT_NEAR(dot_double(x.data(), b.data(), n), static_cast<double>(dot_ref),
                1e-13 * (1.0 + static_cast<double>(ref)))
        << n;
    EXPECT_NEAR(weighted_dot_double(w.data(), x.data(), b.data(), n),
                static_cast<double>(weighted_ref), 1e-13 * (1.0 + 2.0 * static_cast<double>(ref)))
        << n;
    auto y = x;
    scale_array(y.data(), n, 0.5f);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], x[i] * 0.5f);
    auto z = b;
    axpy(z.data(), x.data(), 0.3f, n);  // rounded product, then rounded sum
    for (int64_t i = 0; i < n; ++i) {
      const float product = 0.3f * x[i];
      EXPECT_EQ(z[i], b[i] + product);
    }
  }
  const std::vector<float> big = {0x3p64f, 0x4p64f};  // squares overflow float, not double
  EXPECT_EQ(std::sqrt(sum_squares(big.data(), 2)), 0x5p64);
}

// RMSNorm's fp32 path sums through sum_squares / (weighted_)dot_double: it
// matches the double instantiation (scalar sums) to float rounding.
TEST(ElementwiseRmsNorm, FloatMatchesDoubleWithAndWithoutWeight) {
  const int64_t rows = 5, dim = 1000;
  const auto x = uniform(51, rows * dim, -2.0, 2.0);
  const auto weight = uniform(52, dim, 0.5, 1.5);
  const auto dy = uniform(53, rows * dim, -1.0, 1.0);
  const std::vector<double> xd(x.begin(), x.end()), wd(weight.begin(), weight.end()),
      dyd(dy.begin(), dy.end());
  for (bool with_weight : {true, false}) {
    std::vector<float> y(rows * dim), inv(rows), dx(rows * dim), dw(dim, 0.0f);
    std::vector<double> yd(rows * dim), invd(rows), dxd(rows * dim), dwd(dim, 0.0);
    rmsnorm_forward(x.data(), with_weight ? weight.data() : nullptr, y.data(), inv.data(), rows,
                    dim, 1e-6);
    rmsnorm_forward(xd.data(), with_weight ? wd.data() : nullptr, yd.data(), invd.data(), rows, dim,
                    1e-6);
    rmsnorm_backward(x.data(), with_weight ? weight.data() : nullptr, inv.data(), dy.data(),
                     dx.data(), with_weight ? dw.data() : nullptr, rows, dim);
    rmsnorm_backward(xd.data(), with_weight ? wd.data() : nullptr, invd.data(), dyd.data(),
                     dxd.data(), with_weight ? dwd.data() : nullptr, rows, dim);
    for (int64_t r = 0; r < rows; ++r) EXPECT_NEAR(inv[r], invd[r], 1e-6 * invd[r]);
    for (int64_t i = 0; i < rows * dim; ++i) {
      EXPECT_NEAR(y[i], yd[i], 2e-6 * (1.0 + std::abs(yd[i]))) << with_weight << " " << i;
      EXPECT_NEAR(dx[i], dxd[i], 5e-6 * (1.0 + std::abs(dxd[i]))) << with_weight << " " << i;
    }
    if (with_weight) {
      for (int64_t i = 0; i < dim; ++i) EXPECT_NEAR(dw[i], dwd[i], 1e-5 * (1.0 + std::abs(dwd[i])));
    }
  }
}

}  // namespace
}  // namespace trex::kernels
