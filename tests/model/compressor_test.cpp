#include "trex/model/compressor.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "gradcheck.hpp"
#include "trex/core/error.hpp"

namespace trex::model {
namespace {

using trex::testing::check_gradient;
using trex::testing::dot;
using trex::testing::random_vector;

struct CompressorFixture {
  CompressorDims dims;
  std::vector<double> wkv, wgate, ape, norm;
  kernels::RopeTable rope;

  CompressorFixture(int64_t ratio, bool overlap, int64_t S) {
    dims = {24, ratio, 16, 8, overlap, 1e-6};
    const int64_t width = dims.proj_dim();
    wkv = random_vector(width * dims.hidden, 11, 0.4);
    wgate = random_vector(width * dims.hidden, 12, 0.6);
    ape = random_vector(ratio * width, 13, 0.5);
    norm = random_vector(dims.out_dim, 14, 0.2);
    for (auto& v : norm) v += 1.0;
    rope = kernels::RopeTable(dims.rope_dim, 160000.0, S, kernels::YarnScaling{4.0, 32, 32, 1});
  }
  CompressorWeights<double> weights() const {
    return {wkv.data(), wgate.data(), ape.data(), norm.data()};
  }
};

// Straightforward per-entry reference (spec §2.4), independent of the engine code.
std::vector<double> naive_compress(const CompressorFixture& f, const std::vector<double>& a,
                                   int64_t B, int64_t S) {
  const auto& d = f.dims;
  const int64_t width = d.proj_dim(), cx = d.out_dim, m = d.ratio, N = S / m;
  auto proj = [&](const std::vector<double>& W, int64_t row, int64_t col) {
    double s = 0;
    for (int64_t k = 0; k < d.hidden; ++k) s += a[row * d.hidden + k] * W[col * d.hidden + k];
    return s;
  };
  std::vector<double> out(B * N * cx);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < N; ++i) {
      double* entry = out.data() + (b * N + i) * cx;
      for (int64_t e = 0; e < cx; ++e) {
        std::vector<double> score, value;
        for (int64_t r = 0; r < m; ++r) {
          if (d.overlap) {
            if (i > 0) {
              const int64_t row = b * S + (i - 1) * m + r;
              score.push_back(proj(f.wgate, row, e) + f.ape[r * width + e]);
              value.push_back(proj(f.wkv, row, e));
            }
          }
        }
        for (int64_t r = 0; r < m; ++r) {
          const int64_t row = b * S + i * m + r;
          const int64_t col = d.overlap ? cx + e : e;
          score.push_back(proj(f.wgate, row, col) + f.ape[r * width + col]);
          value.push_back(proj(f.wkv, row, col));
        }
        double mx = -std::numeric_limits<double>::infinity(), z = 0, acc = 0;
        for (double s : score) mx = std::max(mx, s);
        for (size_t k = 0; k < score.size(); ++k) {
          z += std::exp(score[k] - mx);
          acc += std::exp(score[k] - mx) * value[k];
        }
        entry[e] = acc / z;
      }
      double ms = 0;
      for (int64_t e = 0; e < cx; ++e) ms += entry[e] * entry[e];
      const double inv = 1.0 / std::sqrt(ms / cx + d.eps);
      for (int64_t e = 0; e < cx; ++e) entry[e] *= inv * f.norm[e];
      const int64_t off = cx - d.rope_dim;
      for (int64_t p = 0; p < d.rope_dim / 2; ++p) {
        const double angle = static_cast<double>(i * m) * f.rope.inv_freq[p];
        const double re = entry[off + 2 * p], im = entry[off + 2 * p + 1];
        entry[off + 2 * p] = re * std::cos(angle) - im * std::sin(angle);
        entry[off + 2 * p + 1] = re * std::sin(angle) + im * std::cos(angle);
      }
    }
  return out;
}

void run_forward_and_gradcheck(int64_t ratio, bool overlap, int64_t S) {
  const int64_t B = 2;
  CompressorFixture f(ratio, overlap, S);
  const SeqShape shape{B, S};
  std::vector<double> a = random_vector(B * S * f.dims.hidden, 21);
  const int64_t entries = B * f.dims.blocks(S);
  std::vector<double> out(entries * f.dims.out_dim);
  CompressorCache<double> cache;
  compressor_forward(f.dims, f.weights(), shape, a.data(), f.rope, cache, out.data());
  const auto ref = naive_compress(f, a, B, S);
  ASSERT_EQ(ref.size(), out.size());
  double fwd_err = 0;
  for (size_t i = 0; i < out.size(); ++i) fwd_err = std::max(fwd_err, std::abs(out[i] - ref[i]));
  EXPECT_LT(fwd_err, 1e-12);

  const auto R = random_vector(out.size(), 31);
  auto loss = [&] {
    CompressorCache<double> c2;
    std::vector<double> o(out.size());
    compressor_forward(f.dims, f.weights(), shape, a.data(), f.rope, c2, o.data());
    return dot(o, R);
  };
  std::vector<double> g_wkv(f.wkv.size()), g_wgate(f.wgate.size()), g_ape(f.ape.size()),
      g_norm(f.norm.size()), da(a.size(), 0.0);
  CompressorGrads<double> grads{g_wkv.data(), g_wgate.data(), g_ape.data(), g_norm.data()};
  compressor_backward(f.dims, f.weights(), shape, a.data(), f.rope, cache, R.data(), grads,
                      da.data());
  double worst = 0;
  for (auto [values, analytic] : {std::pair{&f.wkv, &g_wkv},
                                  {&f.wgate, &g_wgate},
                                  {&f.ape, &g_ape},
                                  {&f.norm, &g_norm},
                                  {&a, &da}}) {
    double scale = 0;
    for (double v : *analytic) scale = std::max(scale, std::abs(v));
    // Errors relative to max(|fd|, |analytic|, 1e-3·tensor scale): see attention_test.
    const auto r = check_gradient(*values, *analytic, loss, 1e-5, 48, std::max(1e-3 * scale, 1e-9));
    EXPECT_LT(r.max_rel_error, 1e-5);
    worst = std::max(worst, r.max_rel_error);
  }
  // Tail tokens (beyond N·m) and, for S < m, everything get no gradient.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = f.dims.blocks(S) * ratio; t < S; ++t)
      for (int64_t k = 0; k < f.dims.hidden; ++k) EXPECT_EQ(da[(b * S + t) * f.dims.hidden + k], 0);
  std::printf(
      "[compressor m=%lld overlap=%d S=%lld] forward max|err| %.3g, grad max rel err %.3g\n",
      static_cast<long long>(ratio), overlap ? 1 : 0, static_cast<long long>(S), fwd_err, worst);
}

TEST(CompressorTest, OverlapForwardAndGradients) {
  run_forward_and_gradcheck(4, true, 18);
  run_forward_and_gradcheck(4, true, 3);
}

TEST(CompressorTest, NonOverlapForwardAndGradients) {
  run_forward_and_gradcheck(16, false, 37);
  run_forward_and_gradcheck(5, false, 17);
}

TEST(CompressorTest, EntryDependsOnlyOnItsTokens) {
  // Overlap entry i reads tokens (i−1)m..(i+1)m−1: changing token 9 (block 2 of m=4)
  // changes entries 2 and 3 only.
  CompressorFixture f(4, true, 20);
  const SeqShape shape{1, 20};
  std::vector<double> a = random_vector(20 * f.dims.hidden, 5);
  std::vector<double> out1(5 * 16), out2(5 * 16);
  CompressorCache<double> cache;
  compressor_forward(f.dims, f.weights(), shape, a.data(), f.rope, cache, out1.data());
  for (int64_t k = 0; k < f.dims.hidden; ++k) a[9 * f.dims.hidden + k] += 0.3;
  compressor_forward(f.dims, f.weights(), shape, a.data(), f.rope, cache, out2.data());
  for (int64_t i = 0; i < 5; ++i) {
    bool changed = false;
    for (int64_t e = 0; e < 16; ++e) changed |= out1[i * 16 + e] != out2[i * 16 + e];
    EXPECT_EQ(changed, i == 2 || i == 3) << i;
  }
}

TEST(CompressorTest, MissingWeightThrows) {
  CompressorFixture f(4, true, 8);
  auto w = f.weights();
  w.ape = nullptr;
  std::vector<double> a(8 * 24, 0.1), out(2 * 16);
  CompressorCache<double> cache;
  try {
    compressor_forward(f.dims, w, SeqShape{1, 8}, a.data(), f.rope, cache, out.data());
    FAIL() << "expected trex::Error";
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.field_name(), "compressor.ape");
  }
}

}  // namespace
}  // namespace trex::model
