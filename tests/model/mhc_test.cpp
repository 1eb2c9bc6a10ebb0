#include "trex/model/mhc.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <vector>

#include "gradcheck.hpp"
#include "trex/core/error.hpp"

namespace trex::model {
namespace {

using testing::check_gradient;
using testing::dot;
using testing::random_vector;

std::vector<float> to_float(const std::vector<double>& v) {
  return {v.begin(), v.end()};
}

// Norm-wise relative difference: max |a−b| / max |a| (entries near zero would
// make an element-wise ratio meaningless for float round-off).
double max_rel_diff(const std::vector<double>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - static_cast<double>(b[i])));
    scale = std::max(scale, std::abs(a[i]));
  }
  return diff / std::max(scale, 1e-30);
}

// One mHC site with a nonlinear stand-in sublayer y = tanh(u) ⊙ c, and
// L = Σ R ⊙ X'. Holds inputs/params in double (perturbed by the FD checks).
template <class T>
struct SiteProblem {
  MhcDims dims;
  std::vector<T> X, fn, base, scale, c, R;

  // Returns L; fills u, y, Xout, cache.
  double forward(MhcCache<T>& cache, std::vector<T>& u, std::vector<T>& y, std::vector<T>& Xout,
                 const kernels::OpContext& ctx = {}) const {
    const int64_t N = dims.tokens, d = dims.hidden, n = dims.hc_mult;
    u.assign(N * d, T(0));
    y.assign(N * d, T(0));
    Xout.assign(N * n * d, T(0));
    mhc_pre_forward(dims, MhcWeights<T>{fn.data(), base.data(), scale.data()}, X.data(), u.data(),
                    cache, ctx);
    for (int64_t t = 0; t < N; ++t)
      for (int64_t i = 0; i < d; ++i) y[t * d + i] = std::tanh(u[t * d + i]) * c[i];
    mhc_post_forward(dims, cache, X.data(), y.data(), Xout.data(), ctx);
    double loss = 0.0;
    for (size_t i = 0; i < Xout.size(); ++i)
      loss += static_cast<double>(Xout[i]) * static_cast<double>(R[i]);
    return loss;
  }
  double loss() const {
    MhcCache<T> cache;
    std::vector<T> u, y, Xout;
    return forward(cache, u, y, Xout);
  }
  void backward(std::vector<T>& dfn, std::vector<T>& dbase, std::vector<T>& dscale,
                std::vector<T>& dX) const {
    const int64_t N = dims.tokens, d = dims.hidden, n = dims.hc_mult;
    MhcCache<T> cache;
    std::vector<T> u, y, Xout;
    forward(cache, u, y, Xout);
    dfn.assign(fn.size(), T(0));
    dbase.assign(base.size(), T(0));
    dscale.assign(scale.size(), T(0));
    dX.assign(N * n * d, T(-7));  // garbage: post_backward must overwrite
    std::vector<T> dy(N * d, T(-7)), du(N * d);
    MhcCoefGrads<T> coef;
    mhc_post_backward(dims, cache, X.data(), y.data(), R.data(), dX.data(), dy.data(), coef);
    for (int64_t t = 0; t < N; ++t)
      for (int64_t i = 0; i < d; ++i) {
        const T th = std::tanh(u[t * d + i]);
        du[t * d + i] = dy[t * d + i] * c[i] * (T(1) - th * th);
      }
    MhcGrads<T> grads{dfn.data(), dbase.data(), dscale.data()};
    mhc_pre_backward(dims, MhcWeights<T>{fn.data(), base.data(), scale.data()}, cache, X.data(),
                     du.data(), coef, grads, dX.data());
  }
};

SiteProblem<double> make_site(int64_t tokens, int64_t hidden, int64_t iters, uint64_t seed) {
  SiteProblem<double> p;
  p.dims = MhcDims{tokens, hidden, 4, iters, 1e-6, 1e-6};
  const int64_t n = 4, mix = p.dims.mix();
  p.X = random_vector(tokens * n * hidden, seed + 1, 1.5);
  p.fn = random_vector(mix * n * hidden, seed + 2, 0.4);
  p.base = random_vector(mix, seed + 3, 0.8);
  p.scale = {0.9, 1.3, 1.7};
  p.c = random_vector(hidden, seed + 4, 1.0);
  p.R = random_vector(tokens * n * hidden, seed + 5, 1.0);
  return p;
}

template <class From>
SiteProblem<float> to_float(const SiteProblem<From>& p) {
  SiteProblem<float> f;
  f.dims = p.dims;
  f.X = to_float(p.X);
  f.fn = to_float(p.fn);
  f.base = to_float(p.base);
  f.scale = to_float(p.scale);
  f.c = to_float(p.c);
  f.R = to_float(p.R);
  return f;
}

void check_site_gradients(int64_t iters) {
  SiteProblem<double> p = make_site(5, 6, iters, 100 + iters);
  std::vector<double> dfn, dbase, dscale, dX;
  p.backward(dfn, dbase, dscale, dX);
  auto loss = [&] { return p.loss(); };
  // Relative errors use a floor of 1e-4 (gradients here are O(0.1..10); the
  // step 1e-5 keeps the central difference's round-off and truncation near 1e-10).
  const auto rfn = check_gradient(p.fn, dfn, loss, 1e-5, 1 << 20, 1e-4);
  const auto rbase = check_gradient(p.base, dbase, loss, 1e-5, 1 << 20, 1e-4);
  const auto rscale = check_gradient(p.scale, dscale, loss, 1e-5, 1 << 20, 1e-4);
  const auto rX = check_gradient(p.X, dX, loss, 1e-5, 1 << 20, 1e-4);
  std::printf(
      "[mhc site iters=%lld] max rel (abs) err fn %.2e (%.1e) base %.2e (%.1e) scale %.2e (%.1e) "
      "X %.2e (%.1e)\n",
      static_cast<long long>(iters), rfn.max_rel_error, rfn.max_abs_error, rbase.max_rel_error,
      rbase.max_abs_error, rscale.max_rel_error, rscale.max_abs_error, rX.max_rel_error,
      rX.max_abs_error);
  EXPECT_EQ(rfn.checked, static_cast<int64_t>(p.fn.size()));
  EXPECT_LT(rfn.max_rel_error, 1e-6);
  EXPECT_LT(rbase.max_rel_error, 1e-6);
  EXPECT_LT(rscale.max_rel_error, 1e-6);
  EXPECT_LT(rX.max_rel_error, 1e-6);
  // The gradients must be non-trivial for the check to mean anything.
  EXPECT_GT(std::sqrt(dot(dscale, dscale)), 1e-3);
  EXPECT_GT(std::sqrt(dot(dbase, dbase)), 1e-3);
}

TEST(Mhc, SiteGradientsMatchFiniteDifferences20Iters) {
  check_site_gradients(20);
}
TEST(Mhc, SiteGradientsMatchFiniteDifferences1Iter) {
  check_site_gradients(1);
}

// ---- Naive reference written independently of the implementation ----------
// Sinkhorn as matrix operations on a 4×4 array: exp/normalise rows, add eps,
// then "divide each column by its sum+eps", etc.
using Mat4 = std::array<std::array<double, 4>, 4>;

Mat4 naive_sinkhorn(const Mat4& logits, int iters, double eps) {
  Mat4 P{};
  for (int r = 0; r < 4; ++r) {
    double z = 0.0;
    for (int c = 0; c < 4; ++c) z += std::exp(logits[r][c]);
    for (int c = 0; c < 4; ++c) P[r][c] = std::exp(logits[r][c]) / z + eps;
  }
  auto normalise_columns = [&] {
    for (int c = 0; c < 4; ++c) {
      const double s = P[0][c] + P[1][c] + P[2][c] + P[3][c];
      for (int r = 0; r < 4; ++r) P[r][c] /= (s + eps);
    }
  };
  auto normalise_rows = [&] {
    for (int r = 0; r < 4; ++r) {
      const double s = P[r][0] + P[r][1] + P[r][2] + P[r][3];
      for (int c = 0; c < 4; ++c) P[r][c] /= (s + eps);
    }
  };
  normalise_columns();
  for (int i = 1; i < iters; ++i) {
    normalise_rows();
    normalise_columns();
  }
  return P;
}

TEST(Mhc, TinyCaseMatchesNaiveImplementation) {
  // n = 4, d = 2, two tokens.
  const int64_t N = 2, d = 2, n = 4, iters = 20;
  const double eps = 1e-6, norm_eps = 1e-6;
  SiteProblem<double> p = make_site(N, d, iters, 7);
  MhcCache<double> cache;
  std::vector<double> u, y, Xout;
  p.forward(cache, u, y, Xout);

  for (int64_t t = 0; t < N; ++t) {
    const double* x = p.X.data() + t * n * d;
    double ss = 0.0;
    for (int i = 0; i < n * d; ++i) ss += x[i] * x[i];
    const double rho = 1.0 / std::sqrt(ss / (n * d) + norm_eps);
    double mu[24];
    for (int m = 0; m < 24; ++m) {
      double acc = 0.0;
      for (int i = 0; i < n * d; ++i) acc += p.fn[m * n * d + i] * x[i];
      mu[m] = rho * acc;
    }
    auto sig = [](double z) { return 1.0 / (1.0 + std::exp(-z)); };
    double pre[4], post[4];
    Mat4 logits{};
    for (int j = 0; j < 4; ++j) {
      pre[j] = sig(p.scale[0] * mu[j] + p.base[j]) + eps;
      post[j] = 2.0 * sig(p.scale[1] * mu[4 + j] + p.base[4 + j]);
      for (int k = 0; k < 4; ++k)
        logits[j][k] = p.scale[2] * mu[8 + 4 * j + k] + p.base[8 + 4 * j + k];
    }
    const Mat4 comb = naive_sinkhorn(logits, iters, eps);
    for (int i = 0; i < d; ++i) {
      double ui = 0.0;
      for (int j = 0; j < 4; ++j) ui += pre[j] * x[j * d + i];
      EXPECT_NEAR(u[t * d + i], ui, 1e-13);
      const double yi = std::tanh(ui) * p.c[i];
      for (int k = 0; k < 4; ++k) {
        double xk = post[k] * yi;
        for (int j = 0; j < 4; ++j) xk += comb[j][k] * x[j * d + i];  // combᵀ X
        EXPECT_NEAR(Xout[(t * n + k) * d + i], xk, 1e-13) << "t=" << t << " k=" << k;
      }
    }
    for (int j = 0; j < 4; ++j) {
      EXPECT_NEAR(cache.pre[t * n + j], pre[j], 1e-15);
      EXPECT_NEAR(cache.post[t * n + j], post[j], 1e-15);
      for (int k = 0; k < 4; ++k) EXPECT_NEAR(cache.comb[(t * n + j) * n + k], comb[j][k], 1e-15);
    }
  }
}

TEST(Mhc, HandComputedGatesWithZeroProjection) {
  // φ = 0 → μ = 0: pre = σ(b)+ε, post = 2σ(b) (no ε), comb = Sinkhorn(b).
  const int64_t N = 1, d = 2, n = 4;
  MhcDims dims{N, d, n, 1, 1e-6, 1e-6};
  std::vector<double> fn(24 * n * d, 0.0), base(24, 0.0), scale{1.0, 1.0, 1.0};
  // Comb logits: row j = log([1, 2, 3, 4]) shifted → softmax row = [0.1, 0.2, 0.3, 0.4].
  for (int j = 0; j < 4; ++j)
    for (int k = 0; k < 4; ++k) base[8 + 4 * j + k] = std::log(k + 1.0) + j;
  const std::vector<double> X{1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<double> u(d), y{10.0, -10.0}, Xout(n * d);
  MhcCache<double> cache;
  mhc_pre_forward(dims, MhcWeights<double>{fn.data(), base.data(), scale.data()}, X.data(),
                  u.data(), cache);
  mhc_post_forward(dims, cache, X.data(), y.data(), Xout.data());
  const double pre = 0.5 + 1e-6;
  EXPECT_NEAR(u[0], pre * (1 + 3 + 5 + 7), 1e-14);
  EXPECT_NEAR(u[1], pre * (2 + 4 + 6 + 8), 1e-14);
  for (int j = 0; j < 4; ++j) EXPECT_DOUBLE_EQ(cache.post[j], 1.0);  // 2·σ(0), no eps
  // One iteration: every row is [0.1,0.2,0.3,0.4]+ε, column k sums to 4(k+1)/10 + 4ε.
  for (int j = 0; j < 4; ++j)
    for (int k = 0; k < 4; ++k) {
      const double pk = (k + 1) / 10.0 + 1e-6;
      EXPECT_NEAR(cache.comb[j * 4 + k], pk / (4 * pk + 1e-6), 1e-15);
    }
  // comb is ≈ 1/4 everywhere here; X'_k = y + Σ_j comb_jk X_j.
  for (int k = 0; k < 4; ++k) {
    const double c = ((k + 1) / 10.0 + 1e-6) / (4 * ((k + 1) / 10.0 + 1e-6) + 1e-6);
    EXPECT_NEAR(Xout[k * 2 + 0], 10.0 + c * 16.0, 1e-13);
    EXPECT_NEAR(Xout[k * 2 + 1], -10.0 + c * 20.0, 1e-13);
  }
}

TEST(Mhc, TransposeTrapCombSumsOverFirstIndex) {
  // A strongly asymmetric comb: check X'_k uses comb[j][k] (column k), not row k.
  const int64_t N = 1, d = 1, n = 4;
  MhcDims dims{N, d, n, 20, 1e-6, 1e-6};
  MhcCache<double> cache;
  cache.pre.assign(4, 0.0, kernels::cpu_backend());
  cache.post.assign(4, 0.0, kernels::cpu_backend());
  cache.comb.assign(16, 0.0, kernels::cpu_backend());
  cache.comb[0 * 4 + 1] = 1.0;  // comb[0][1]: stream 0 feeds output stream 1
  const std::vector<double> X{5, 6, 7, 8}, y{0};
  std::vector<double> Xout(4);
  mhc_post_forward(dims, cache, X.data(), y.data(), Xout.data());
  EXPECT_EQ(Xout[1], 5.0);
  EXPECT_EQ(Xout[0], 0.0);
}

TEST(Mhc, SinkhornIsDoublyStochasticAfter20Iterations) {
  const int64_t n = 4;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    const auto logits = random_vector(n * n, 500 + seed, 3.0);
    std::vector<double> comb(n * n);
    sinkhorn_forward(logits.data(), n, 20, 1e-6, comb.data());
    double worst_row = 0.0, worst_col = 0.0;
    for (int64_t a = 0; a < n; ++a) {
      double r = 0.0, c = 0.0;
      for (int64_t b = 0; b < n; ++b) {
        r += comb[a * n + b];
        c += comb[b * n + a];
        EXPECT_GT(comb[a * n + b], 0.0);
      }
      worst_row = std::max(worst_row, std::abs(r - 1.0));
      worst_col = std::max(worst_col, std::abs(c - 1.0));
    }
    std::printf("[sinkhorn seed=%llu] max |row sum-1| %.2e  max |col sum-1| %.2e\n",
                static_cast<unsigned long long>(seed), worst_row, worst_col);
    EXPECT_LT(worst_col, 1e-5);  // columns were normalised last: 1 − O(ε)
    EXPECT_LT(worst_row, 1e-3);
  }
}

void check_sinkhorn_backward(int64_t iters) {
  const int64_t n = 4;
  auto logits = random_vector(n * n, 900 + iters, 2.0);
  const auto R = random_vector(n * n, 901 + iters, 1.0);
  auto loss = [&] {
    std::vector<double> comb(n * n);
    sinkhorn_forward(logits.data(), n, iters, 1e-6, comb.data());
    return dot(comb, R);
  };
  std::vector<double> dlogits(n * n);
  sinkhorn_backward(logits.data(), n, iters, 1e-6, R.data(), dlogits.data());
  const auto r = check_gradient(logits, dlogits, loss, 1e-6, 1 << 20);
  std::printf("[sinkhorn backward iters=%lld] max rel err %.2e (abs %.2e)\n",
              static_cast<long long>(iters), r.max_rel_error, r.max_abs_error);
  EXPECT_LT(r.max_rel_error, 1e-6);
  EXPECT_GT(std::sqrt(dot(dlogits, dlogits)), 1e-3);
}

TEST(Mhc, SinkhornBackwardMatchesFiniteDifferences20Iters) {
  check_sinkhorn_backward(20);
}
TEST(Mhc, SinkhornBackwardMatchesFiniteDifferences1Iter) {
  check_sinkhorn_backward(1);
}

TEST(Mhc, FloatMatchesDouble) {
  const SiteProblem<double> p = make_site(7, 16, 20, 33);
  const SiteProblem<float> f = to_float(p);
  MhcCache<double> cd;
  MhcCache<float> cf;
  std::vector<double> ud, yd, Xd;
  std::vector<float> uf, yf, Xf;
  p.forward(cd, ud, yd, Xd);
  f.forward(cf, uf, yf, Xf);
  std::vector<double> dfn, dbase, dscale, dX;
  std::vector<float> ffn, fbase, fscale, fX;
  p.backward(dfn, dbase, dscale, dX);
  f.backward(ffn, fbase, fscale, fX);
  const double e_out = max_rel_diff(Xd, Xf), e_u = max_rel_diff(ud, uf);
  const double e_fn = max_rel_diff(dfn, ffn), e_base = max_rel_diff(dbase, fbase);
  const double e_scale = max_rel_diff(dscale, fscale), e_X = max_rel_diff(dX, fX);
  std::printf("[mhc float vs double] u %.2e X' %.2e dfn %.2e dbase %.2e dscale %.2e dX %.2e\n", e_u,
              e_out, e_fn, e_base, e_scale, e_X);
  EXPECT_LT(e_u, 1e-5);
  EXPECT_LT(e_out, 1e-5);
  EXPECT_LT(e_fn, 1e-4);
  EXPECT_LT(e_base, 1e-4);
  EXPECT_LT(e_scale, 1e-4);
  EXPECT_LT(e_X, 1e-4);
}

TEST(Mhc, ResultsIndependentOfThreadCount) {
  const SiteProblem<float> f = to_float(make_site(300, 64, 20, 44));
  std::vector<float> a_fn, a_base, a_scale, a_X, b_fn, b_base, b_scale, b_X;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  f.backward(a_fn, a_base, a_scale, a_X);
  omp_set_num_threads(std::max(2, saved));
  f.backward(b_fn, b_base, b_scale, b_X);
  omp_set_num_threads(saved);
  EXPECT_EQ(a_base, b_base);
  EXPECT_EQ(a_scale, b_scale);
  EXPECT_EQ(a_X, b_X);
  EXPECT_EQ(a_fn, b_fn);
}

TEST(Mhc, ParamGradsAccumulate) {
  SiteProblem<double> p = make_site(3, 4, 5, 55);
  std::vector<double> dfn, dbase, dscale, dX;
  p.backward(dfn, dbase, dscale, dX);
  // Second backward into the same buffers adds.
  MhcCache<double> cache;
  std::vector<double> u, y, Xout;
  p.forward(cache, u, y, Xout);
  MhcCoefGrads<double> coef;
  std::vector<double> dX2(dX.size()), dy(u.size()), du(u.size());
  mhc_post_backward(p.dims, cache, p.X.data(), y.data(), p.R.data(), dX2.data(), dy.data(), coef);
  for (size_t i = 0; i < u.size(); ++i) {
    const double th = std::tanh(u[i]);
    du[i] = dy[i] * p.c[i % p.dims.hidden] * (1 - th * th);
  }
  std::vector<double> fn2 = dfn, base2 = dbase, scale2 = dscale;
  MhcGrads<double> grads{fn2.data(), base2.data(), scale2.data()};
  mhc_pre_backward(p.dims, MhcWeights<double>{p.fn.data(), p.base.data(), p.scale.data()}, cache,
                   p.X.data(), du.data(), coef, grads, dX2.data());
  for (size_t i = 0; i < dfn.size(); ++i) EXPECT_NEAR(fn2[i], 2 * dfn[i], 1e-12);
  for (size_t i = 0; i < dbase.size(); ++i) EXPECT_NEAR(base2[i], 2 * dbase[i], 1e-12);
  for (size_t i = 0; i < dscale.size(); ++i) EXPECT_NEAR(scale2[i], 2 * dscale[i], 1e-12);
  for (size_t i = 0; i < dX.size(); ++i) EXPECT_NEAR(dX2[i], dX[i], 1e-12);
  // Frozen (null) grads are fine.
  MhcGrads<double> frozen;
  std::vector<double> dX3(dX.size());
  mhc_post_backward(p.dims, cache, p.X.data(), y.data(), p.R.data(), dX3.data(), dy.data(), coef);
  mhc_pre_backward(p.dims, MhcWeights<double>{p.fn.data(), p.base.data(), p.scale.data()}, cache,
                   p.X.data(), du.data(), coef, frozen, dX3.data());
  for (size_t i = 0; i < dX.size(); ++i) EXPECT_NEAR(dX3[i], dX[i], 1e-12);
}

TEST(Mhc, BadDimsThrowNamingTheField) {
  std::vector<double> fn(24 * 8), base(24), scale(3), X(8), u(2);
  MhcCache<double> cache;
  MhcDims dims{1, 2, 4, 0, 1e-6, 1e-6};
  try {
    mhc_pre_forward(dims, MhcWeights<double>{fn.data(), base.data(), scale.data()}, X.data(),
                    u.data(), cache);
    FAIL() << "expected trex::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "hc_sinkhorn_iters");
  }
  dims = MhcDims{1, 2, 0, 20, 1e-6, 1e-6};
  try {
    validate(dims);
    FAIL() << "expected trex::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "hc_mult");
  }
  dims = MhcDims{1, 2, 4, 20, 1e-6, 1e-6};
  try {
    mhc_pre_forward(dims, MhcWeights<double>{nullptr, base.data(), scale.data()}, X.data(),
                    u.data(), cache);
    FAIL() << "expected trex::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "hc_fn");
  }
  MhcCache<double> empty;
  std::vector<double> y(2), Xout(8);
  EXPECT_THROW(mhc_post_forward(dims, empty, X.data(), y.data(), Xout.data()), Error);
}

TEST(Mhc, StaysFp32UnderBf16ComputePrecision) {
  const SiteProblem<float> f = to_float(make_site(40, 32, 20, 66));
  MhcCache<float> a, b;
  std::vector<float> ua, ya, Xa, ub, yb, Xb;
  f.forward(a, ua, ya, Xa);
  f.forward(b, ub, yb, Xb, kernels::OpContext{nullptr, kernels::Precision::kBF16});
  EXPECT_EQ(testing::to_vector(a.mix), testing::to_vector(b.mix));
  EXPECT_EQ(Xa, Xb);
}

TEST(Mhc, DimsFromConfig) {
  ModelConfig config;
  config.hidden_size = 64;
  config.hc_mult = 4;
  config.hc_sinkhorn_iters = 20;
  config.hc_eps = 1e-6;
  config.rms_norm_eps = 1e-5;
  const MhcDims dims = mhc_dims(config, 10);
  EXPECT_EQ(dims.tokens, 10);
  EXPECT_EQ(dims.hidden, 64);
  EXPECT_EQ(dims.mix(), 24);
  EXPECT_EQ(dims.mix(), config.hc_mix_dim());
  EXPECT_EQ(dims.streams_width(), 256);
  EXPECT_EQ(dims.norm_eps, 1e-5);
}

// ---- HC head ----------------------------------------------------------------
struct HeadProblem {
  MhcDims dims;
  std::vector<double> X, fn, base, scale, R;
  double loss() const {
    HcHeadCache<double> cache;
    std::vector<double> h(dims.tokens * dims.hidden);
    hc_head_forward(dims, HcHeadWeights<double>{fn.data(), base.data(), scale.data()}, X.data(),
                    h.data(), cache);
    return dot(h, R);
  }
};

TEST(HcHead, GradientsMatchFiniteDifferences) {
  HeadProblem p;
  p.dims = MhcDims{6, 5, 4, 20, 1e-6, 1e-6};
  const int64_t N = 6, d = 5, n = 4;
  p.X = random_vector(N * n * d, 71, 1.5);
  p.fn = random_vector(n * n * d, 72, 0.5);
  p.base = random_vector(n, 73, 0.8);
  p.scale = {1.4};
  p.R = random_vector(N * d, 74, 1.0);
  HcHeadCache<double> cache;
  std::vector<double> h(N * d);
  const HcHeadWeights<double> w{p.fn.data(), p.base.data(), p.scale.data()};
  hc_head_forward(p.dims, w, p.X.data(), h.data(), cache);
  // Forward against the formula.
  for (int64_t t = 0; t < N; ++t) {
    const double* x = p.X.data() + t * n * d;
    double ss = 0.0;
    for (int i = 0; i < n * d; ++i) ss += x[i] * x[i];
    const double rho = 1.0 / std::sqrt(ss / (n * d) + 1e-6);
    for (int64_t i = 0; i < d; ++i) {
      double hi = 0.0;
      for (int j = 0; j < n; ++j) {
        double m = 0.0;
        for (int q = 0; q < n * d; ++q) m += p.fn[j * n * d + q] * x[q];
        const double pre = 1.0 / (1.0 + std::exp(-(p.scale[0] * rho * m + p.base[j]))) + 1e-6;
        hi += pre * x[j * d + i];
      }
      EXPECT_NEAR(h[t * d + i], hi, 1e-13);
    }
  }
  std::vector<double> dfn(p.fn.size()), dbase(n), dscale(1), dX(p.X.size(), -3.0);
  HcHeadGrads<double> grads{dfn.data(), dbase.data(), dscale.data()};
  hc_head_backward(p.dims, w, cache, p.X.data(), p.R.data(), grads, dX.data());
  auto loss = [&] { return p.loss(); };
  const auto rfn = check_gradient(p.fn, dfn, loss, 1e-6, 1 << 20);
  const auto rbase = check_gradient(p.base, dbase, loss, 1e-6, 1 << 20);
  const auto rscale = check_gradient(p.scale, dscale, loss, 1e-6, 1 << 20);
  const auto rX = check_gradient(p.X, dX, loss, 1e-6, 1 << 20);
  std::printf("[hc head] max rel err fn %.2e base %.2e scale %.2e X %.2e\n", rfn.max_rel_error,
              rbase.max_rel_error, rscale.max_rel_error, rX.max_rel_error);
  EXPECT_LT(rfn.max_rel_error, 1e-6);
  EXPECT_LT(rbase.max_rel_error, 1e-6);
  EXPECT_LT(rscale.max_rel_error, 1e-6);
  EXPECT_LT(rX.max_rel_error, 1e-6);
}

TEST(HcHead, FloatMatchesDouble) {
  const int64_t N = 9, d = 32, n = 4;
  const MhcDims dims{N, d, n, 20, 1e-6, 1e-6};
  const auto X = random_vector(N * n * d, 81, 1.5), fn = random_vector(n * n * d, 82, 0.3),
             base = random_vector(n, 83, 0.8), R = random_vector(N * d, 84);
  const std::vector<double> scale{1.2};
  const auto Xf = to_float(X), fnf = to_float(fn), basef = to_float(base), Rf = to_float(R),
             scalef = to_float(scale);
  HcHeadCache<double> cd;
  HcHeadCache<float> cf;
  std::vector<double> hd(N * d), dfn(fn.size()), dbase(n), dscale(1), dX(X.size());
  std::vector<float> hf(N * d), ffn(fn.size()), fbase(n), fscale(1), fX(X.size());
  hc_head_forward(dims, HcHeadWeights<double>{fn.data(), base.data(), scale.data()}, X.data(),
                  hd.data(), cd);
  hc_head_forward(dims, HcHeadWeights<float>{fnf.data(), basef.data(), scalef.data()}, Xf.data(),
                  hf.data(), cf);
  HcHeadGrads<double> gd{dfn.data(), dbase.data(), dscale.data()};
  HcHeadGrads<float> gf{ffn.data(), fbase.data(), fscale.data()};
  hc_head_backward(dims, HcHeadWeights<double>{fn.data(), base.data(), scale.data()}, cd, X.data(),
                   R.data(), gd, dX.data());
  hc_head_backward(dims, HcHeadWeights<float>{fnf.data(), basef.data(), scalef.data()}, cf,
                   Xf.data(), Rf.data(), gf, fX.data());
  const double eh = max_rel_diff(hd, hf), efn = max_rel_diff(dfn, ffn),
               ebase = max_rel_diff(dbase, fbase), escale = max_rel_diff(dscale, fscale),
               eX = max_rel_diff(dX, fX);
  std::printf("[hc head float vs double] h %.2e dfn %.2e dbase %.2e dscale %.2e dX %.2e\n", eh, efn,
              ebase, escale, eX);
  EXPECT_LT(eh, 1e-5);
  EXPECT_LT(efn, 1e-4);
  EXPECT_LT(ebase, 1e-4);
  EXPECT_LT(escale, 1e-4);
  EXPECT_LT(eX, 1e-4);
}

}  // namespace
}  // namespace trex::model
