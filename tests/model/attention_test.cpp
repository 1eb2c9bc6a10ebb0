#include "trex/model/attention.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <functional>
#include <limits>
#include <numbers>
#include <set>
#include <string>
#include <vector>

#include "attention_fixture.hpp"
#include "gradcheck.hpp"
#include "trex/core/error.hpp"

namespace trex::model {
namespace {

using trex::testing::check_gradient;
using trex::testing::dot;
using trex::testing::random_vector;

// tiny-v4-like attention config: layers 0/1/2 = SWA / CSA / HCA.
ModelConfig tiny_config() {
  ModelConfig c;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.head_dim = 96;
  c.qk_rope_head_dim = 32;
  c.q_lora_rank = 32;
  c.o_groups = 2;
  c.o_lora_rank = 16;
  c.sliding_window = 8;
  c.compress_ratios = {0, 4, 16};
  c.num_hidden_layers = 3;
  c.rope_theta = 10000.0;
  c.compress_rope_theta = 160000.0;
  c.rope_scaling = {true, 4.0, 32, 32.0, 1.0};
  c.index_n_heads = 4;
  c.index_head_dim = 32;
  c.index_topk = 4;
  c.rms_norm_eps = 1e-6;
  return c;
}

constexpr int64_t kSwa = 0, kCsa = 1, kHca = 2;

using Params = trex::testing::AttentionParams<double>;
using Grads = trex::testing::AttentionGradBuffers<double>;

// ------------------------- naive dense reference -------------------------
// Written from the spec without sharing code with the engine: dense [S, S+N]
// masks per sequence, explicit complex rotations, explicit slot lists.

using Mat = std::vector<double>;

Mat matmul_t(const Mat& x, const double* w, int64_t rows, int64_t out, int64_t in) {
  Mat y(rows * out, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t k = 0; k < in; ++k) s += x[r * in + k] * w[o * in + k];
      y[r * out + o] = s;
    }
  return y;
}

void rms_rows(double* x, const double* w, int64_t rows, int64_t dim, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < dim; ++i) ms += x[r * dim + i] * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(ms / dim + eps);
    for (int64_t i = 0; i < dim; ++i) x[r * dim + i] *= inv * (w ? w[i] : 1.0);
  }
}

std::vector<double> ref_frequencies(const AttentionDims& d) {
  const int64_t r = d.rope_dim;
  std::vector<double> f(r / 2);
  double lo = 0, hi = 0;
  if (d.yarn) {
    auto corr = [&](double beta) {
      return r *
             std::log(d.yarn->original_max_position_embeddings / (beta * 2 * std::numbers::pi)) /
             (2 * std::log(d.rope_base));
    };
    lo = std::max(0.0, std::floor(corr(d.yarn->beta_fast)));
    hi = std::min(r - 1.0, std::ceil(corr(d.yarn->beta_slow)));
  }
  for (int64_t p = 0; p < r / 2; ++p) {
    f[p] = std::pow(d.rope_base, -2.0 * p / r);
    if (d.yarn) {
      const double ramp = std::clamp((p - lo) / (hi - lo), 0.0, 1.0);
      f[p] = f[p] * (1 - ramp) + f[p] / d.yarn->factor * ramp;
    }
  }
  return f;
}

void rotate(double* v, int64_t dim, int64_t rope, const std::vector<double>& freq, double pos) {
  for (int64_t p = 0; p < rope / 2; ++p) {
    const std::complex<double> z(v[dim - rope + 2 * p], v[dim - rope + 2 * p + 1]);
    const auto y = z * std::polar(1.0, pos * freq[p]);
    v[dim - rope + 2 * p] = y.real();
    v[dim - rope + 2 * p + 1] = y.imag();
  }
}

// Compressed entries of one sequence a_seq [S, d].
Mat ref_compress(const Mat& a_seq, int64_t S, int64_t d, const double* wkv, const double* wgate,
                 const double* ape, const double* norm, int64_t m, int64_t cx, bool overlap,
                 const AttentionDims& dims, const std::vector<double>& freq) {
  const int64_t width = (overlap ? 2 : 1) * cx, N = S / m;
  const Mat P = matmul_t(a_seq, wkv, S, width, d), G = matmul_t(a_seq, wgate, S, width, d);
  Mat out(N * cx);
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t e = 0; e < cx; ++e) {
      std::vector<std::pair<double, double>> slots;  // (score, value)
      if (overlap && i > 0)
        for (int64_t r = 0; r < m; ++r)
          slots.push_back({G[((i - 1) * m + r) * width + e] + ape[r * width + e],
                           P[((i - 1) * m + r) * width + e]});
      const int64_t col = overlap ? cx + e : e;
      for (int64_t r = 0; r < m; ++r)
        slots.push_back(
            {G[(i * m + r) * width + col] + ape[r * width + col], P[(i * m + r) * width + col]});
      double mx = -1e300, z = 0, acc = 0;
      for (auto& s : slots) mx = std::max(mx, s.first);
      for (auto& s : slots) {
        z += std::exp(s.first - mx);
        acc += std::exp(s.first - mx) * s.second;
      }
      out[i * cx + e] = acc / z;
    }
    rms_rows(out.data() + i * cx, norm, 1, cx, dims.eps);
    rotate(out.data() + i * cx, cx, dims.rope_dim, freq, static_cast<double>(i * m));
  }
  return out;
}

struct RefResult {
  Mat out;
  std::vector<std::vector<std::vector<int64_t>>> selected;        // [b][t] sorted block indices
  std::vector<std::vector<std::vector<double>>> selected_scores;  // [b][t] descending
  // Rows with more visible blocks than k: exact k-th == (k+1)-th ties (broken by
  // lower index, the engine's rule) and the smallest relative gap of the others.
  int64_t boundary_ties = 0;
  double min_untied_margin = std::numeric_limits<double>::infinity();
};

RefResult ref_attention(const AttentionDims& d, const Params& prm, const Mat& a, int64_t B,
                        int64_t S) {
  const int64_t H = d.heads, c = d.head_dim, hd = d.hidden, dc = d.q_lora;
  const auto freq = ref_frequencies(d);
  RefResult res;
  res.out.assign(B * S * hd, 0.0);
  res.selected.resize(B);
  res.selected_scores.resize(B);
  for (int64_t b = 0; b < B; ++b) {
    const Mat as(a.begin() + b * S * hd, a.begin() + (b + 1) * S * hd);
    Mat cq = matmul_t(as, prm.p("wq_a"), S, dc, hd);
    rms_rows(cq.data(), prm.p("q_norm"), S, dc, d.eps);
    Mat q = matmul_t(cq, prm.p("wq_b"), S, H * c, dc);
    rms_rows(q.data(), nullptr, S * H, c, d.eps);
    Mat kv = matmul_t(as, prm.p("wkv"), S, c, hd);
    rms_rows(kv.data(), prm.p("kv_norm"), S, c, d.eps);
    for (int64_t t = 0; t < S; ++t) {
      for (int64_t h = 0; h < H; ++h) rotate(q.data() + (t * H + h) * c, c, d.rope_dim, freq, t);
      rotate(kv.data() + t * c, c, d.rope_dim, freq, t);
    }
    const int64_t N = d.ratio > 0 ? S / d.ratio : 0;
    Mat comp;
    if (d.ratio > 0)
      comp = ref_compress(as, S, hd, prm.p("comp.wkv"), prm.p("comp.wgate"), prm.p("comp.ape"),
                          prm.p("comp.norm"), d.ratio, c, d.ratio == 4, d, freq);
    // Dense masks [S, S] (window) and [S, N] (compressed).
    std::vector<char> win_mask(S * S, 0), comp_mask(S * std::max<int64_t>(N, 1), 0);
    for (int64_t t = 0; t < S; ++t)
      for (int64_t s = 0; s < S; ++s) win_mask[t * S + s] = s <= t && s >= t - d.window + 1;
    res.selected[b].resize(S);
    res.selected_scores[b].resize(S);
    if (d.ratio == 4) {
      const int64_t nI = d.index_heads, cI = d.index_head_dim;
      Mat qi = matmul_t(cq, prm.p("idx.wq_b"), S, nI * cI, dc);
      for (int64_t t = 0; t < S; ++t)
        for (int64_t h = 0; h < nI; ++h)
          rotate(qi.data() + (t * nI + h) * cI, cI, d.rope_dim, freq, t);
      Mat wts = matmul_t(as, prm.p("idx.weights_proj"), S, nI, hd);
      const Mat ki =
          ref_compress(as, S, hd, prm.p("idx.comp.wkv"), prm.p("idx.comp.wgate"),
                       prm.p("idx.comp.ape"), prm.p("idx.comp.norm"), 4, cI, true, d, freq);
      for (int64_t t = 0; t < S; ++t) {
        std::vector<std::pair<double, int64_t>> scored;
        for (int64_t i = 0; i < N; ++i) {
          if ((i + 1) * 4 > t + 1) continue;
          double score = 0;
          for (int64_t h = 0; h < nI; ++h) {
            double s = 0;
            for (int64_t e = 0; e < cI; ++e) s += qi[(t * nI + h) * cI + e] * ki[i * cI + e];
            score += wts[t * nI + h] / std::sqrt(double(cI) * nI) * std::max(s, 0.0);
          }
          scored.push_back({-score, i});
        }
        std::sort(scored.begin(), scored.end());
        const int64_t k_max = d.index_topk;
        if (static_cast<int64_t>(scored.size()) > k_max) {
          double scale = 0;
          for (const auto& sc : scored) scale = std::max(scale, std::abs(sc.first));
          const double gap = scored[k_max].first - scored[k_max - 1].first;
          if (gap == 0) {
            ++res.boundary_ties;
          } else {
            res.min_untied_margin = std::min(res.min_untied_margin, gap / scale);
          }
        }
        for (int64_t k = 0; k < std::min<int64_t>(k_max, scored.size()); ++k) {
          comp_mask[t * N + scored[k].second] = 1;
          res.selected[b][t].push_back(scored[k].second);
          res.selected_scores[b][t].push_back(-scored[k].first);
        }
        std::sort(res.selected[b][t].begin(), res.selected[b][t].end());
      }
    } else if (d.ratio > 0) {
      for (int64_t t = 0; t < S; ++t)
        for (int64_t i = 0; i < N; ++i) comp_mask[t * N + i] = (i + 1) * d.ratio <= t + 1;
    }
    Mat o(S * H * c, 0.0);
    for (int64_t t = 0; t < S; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const double* qh = q.data() + (t * H + h) * c;
        std::vector<double> logits(S + N);
        for (int64_t j = 0; j < S + N; ++j) {
          const bool on = j < S ? win_mask[t * S + j] : comp_mask[t * N + (j - S)];
          if (!on) {
            logits[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          const double* key = j < S ? kv.data() + j * c : comp.data() + (j - S) * c;
          double s = 0;
          for (int64_t e = 0; e < c; ++e) s += qh[e] * key[e];
          logits[j] = s / std::sqrt(double(c));
        }
        const double sink = prm.p("attn_sink")[h];
        double mx = sink;
        for (double l : logits) mx = std::max(mx, l);
        double z = std::exp(sink - mx);
        for (double l : logits) z += std::exp(l - mx);
        double* oh = o.data() + (t * H + h) * c;
        for (int64_t j = 0; j < S + N; ++j) {
          const double pj = std::exp(logits[j] - mx) / z;
          if (pj == 0) continue;
          const double* key = j < S ? kv.data() + j * c : comp.data() + (j - S) * c;
          for (int64_t e = 0; e < c; ++e) oh[e] += pj * key[e];
        }
        rotate(oh, c, d.rope_dim, freq, -static_cast<double>(t));
      }
    const int64_t g = d.o_groups, dg = d.o_lora, gin = H * c / g;
    Mat z(S * g * dg, 0.0);
    for (int64_t t = 0; t < S; ++t)
      for (int64_t j = 0; j < g; ++j)
        for (int64_t u = 0; u < dg; ++u) {
          double s = 0;
          for (int64_t x = 0; x < gin; ++x)
            s += prm.p("wo_a")[(j * dg + u) * gin + x] * o[t * H * c + j * gin + x];
          z[t * g * dg + j * dg + u] = s;
        }
    const Mat out = matmul_t(z, prm.p("wo_b"), S, hd, g * dg);
    std::copy(out.begin(), out.end(), res.out.begin() + b * S * hd);
  }
  return res;
}

// ------------------------------- tests -------------------------------

AttentionDims dims_for(int64_t layer) {
  return AttentionDims::from_config(tiny_config(), layer);
}

const char* kind_name(int64_t layer) {
  return layer == kSwa ? "SWA" : layer == kCsa ? "CSA" : "HCA";
}

TEST(AttentionTest, DimsFromConfig) {
  const auto swa = dims_for(kSwa), csa = dims_for(kCsa), hca = dims_for(kHca);
  EXPECT_EQ(swa.kind(), AttentionKind::kSliding);
  EXPECT_EQ(csa.kind(), AttentionKind::kCompressedSparse);
  EXPECT_EQ(hca.kind(), AttentionKind::kHeavilyCompressed);
  EXPECT_EQ(swa.rope_base, 10000.0);
  EXPECT_FALSE(swa.yarn.has_value());
  EXPECT_EQ(csa.rope_base, 160000.0);
  ASSERT_TRUE(hca.yarn.has_value());
  EXPECT_EQ(hca.yarn->factor, 4.0);
  EXPECT_TRUE(csa.compressor().overlap);
  EXPECT_FALSE(hca.compressor().overlap);
  auto bad = tiny_config();
  bad.o_groups = 3;
  try {
    AttentionDims::from_config(bad, 0);
    FAIL();
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.field_name(), "o_groups");
  }
  EXPECT_THROW(AttentionDims::from_config(tiny_config(), 3), trex::Error);
}

TEST(AttentionTest, ForwardMatchesDenseReference) {
  for (int64_t layer : {kSwa, kCsa, kHca})
    for (int64_t S : {64, 61, 3}) {
      const int64_t B = 2;
      const auto d = dims_for(layer);
      const Params prm(d);
      const Mat a = random_vector(B * S * d.hidden, 7 + S);
      AttentionCache<double> cache;
      Mat out(a.size());
      attention_forward(d, prm.weights(), SeqShape{B, S}, a.data(), cache, out.data());
      const RefResult ref = ref_attention(d, prm, a, B, S);
      double err = 0, scale = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        err = std::max(err, std::abs(out[i] - ref.out[i]));
        scale = std::max(scale, std::abs(ref.out[i]));
      }
      std::printf(
          "[attention %s S=%lld] forward vs dense reference: max|err| %.3g (max|out| %.3g)\n",
          kind_name(layer), static_cast<long long>(S), err, scale);
      EXPECT_LT(err, 1e-12) << kind_name(layer) << " S=" << S;
      EXPECT_GT(scale, 1e-3);
      if (layer == kCsa) {
        // The output depends on which block wins a tie. Exact ties (both sides
        // score ReLU-zeroed blocks exactly 0) are broken by the same rule here
        // and in the engine; any other boundary must be clear of rounding.
        std::printf("[attention CSA S=%lld] %lld exact boundary ties, min untied margin %.3g\n",
                    static_cast<long long>(S), static_cast<long long>(ref.boundary_ties),
                    ref.min_untied_margin);
        EXPECT_GT(ref.min_untied_margin, 1e-9) << "a near tie at the top-k boundary";
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = 0; t < S; ++t) {
            auto got = attention_compressed_set(d, cache, b, t);
            std::sort(got.begin(), got.end());
            EXPECT_EQ(got, ref.selected[b][t]) << "b=" << b << " t=" << t;
            // The selected scores (the multiset, descending) agree as well.
            const int64_t k_max = d.index_topk;
            std::vector<double> got_scores;
            for (int64_t k = 0; k < k_max; ++k)
              if (cache.indexer.selected[(b * S + t) * k_max + k] >= 0)
                got_scores.push_back(cache.indexer.selected_scores[(b * S + t) * k_max + k]);
            const auto& want_scores = ref.selected_scores[b][t];
            ASSERT_EQ(got_scores.size(), want_scores.size());
            for (size_t k = 0; k < got_scores.size(); ++k)
              EXPECT_NEAR(got_scores[k], want_scores[k], 1e-12 * (1 + std::abs(want_scores[k])));
          }
      }
    }
}

TEST(AttentionTest, SelectionShapeAndVisibility) {
  const auto d = dims_for(kCsa);
  const Params prm(d);
  const int64_t S = 64;
  const Mat a = random_vector(S * d.hidden, 3);
  AttentionCache<double> cache;
  Mat out(a.size());
  attention_forward(d, prm.weights(), SeqShape{1, S}, a.data(), cache, out.data());
  ASSERT_EQ(cache.indexer.selected.size(), static_cast<int64_t>(S * 4));
  for (int64_t t = 0; t < S; ++t) {
    const int64_t visible = std::min<int64_t>((t + 1) / 4, 16);
    int64_t valid = 0;
    std::set<int64_t> seen;
    for (int64_t k = 0; k < 4; ++k) {
      const int64_t i = cache.indexer.selected[t * 4 + k];
      if (i < 0) continue;
      ++valid;
      EXPECT_LT(i, visible);
      EXPECT_TRUE(seen.insert(i).second);
      // picks are in descending score order
      if (k > 0) {
        EXPECT_GE(cache.indexer.selected_scores[t * 4 + k - 1],
                  cache.indexer.selected_scores[t * 4 + k]);
      }
    }
    EXPECT_EQ(valid, std::min<int64_t>(4, visible)) << t;
  }
  // HCA: all visible entries, SWA: none.
  const auto dh = dims_for(kHca);
  const Params ph(dh);
  attention_forward(dh, ph.weights(), SeqShape{1, S}, a.data(), cache, out.data());
  EXPECT_EQ(attention_compressed_set(dh, cache, 0, 14).size(), 0u);
  EXPECT_EQ(attention_compressed_set(dh, cache, 0, 15).size(), 1u);
  EXPECT_EQ(attention_compressed_set(dh, cache, 0, 63).size(), 4u);
}

// Finite differences (step 1e-5) with errors measured relative to
// max(|fd|, |analytic|, 1e-3·max|analytic of the tensor|): entries far below the
// tensor's scale only carry round-off noise of the loss.
trex::testing::GradCheckResult check(std::vector<double>& values, const std::vector<double>& grad,
                                     const std::function<double()>& loss, int64_t entries) {
  double scale = 0;
  for (double v : grad) scale = std::max(scale, std::abs(v));
  return check_gradient(values, grad, loss, 1e-5, entries, std::max(1e-3 * scale, 1e-9));
}

constexpr double kGradTolerance = 1e-5;

// Gradient check of every weight tensor and da with the selection held fixed.
void gradcheck_variant(int64_t layer, int64_t S, int64_t entries) {
  const int64_t B = 2;
  const auto d = dims_for(layer);
  Params prm(d);
  Mat a = random_vector(B * S * d.hidden, 40 + S);
  AttentionCache<double> cache;
  Mat out(a.size());
  attention_forward(d, prm.weights(), SeqShape{B, S}, a.data(), cache, out.data());
  const Mat R = random_vector(out.size(), 77);
  AttentionOptions fixed;
  fixed.fixed_selection = true;
  auto loss = [&] {
    AttentionCache<double> c2;
    trex::testing::copy_into(c2.indexer.selected, cache.indexer.selected);
    Mat o(a.size());
    attention_forward(d, prm.weights(), SeqShape{B, S}, a.data(), c2, o.data(), fixed);
    return dot(o, R);
  };
  Grads grads(prm);
  auto g = grads.grads();
  Mat da(a.size(), 0.0);
  attention_backward(d, prm.weights(), cache, R.data(), g, da.data());
  double worst = 0;
  std::string worst_name;
  for (auto& [name, values] : prm.t) {
    if (name.rfind("idx.", 0) == 0) {
      // The LM loss never reaches the indexer.
      for (double v : grads.t[name]) ASSERT_EQ(v, 0.0) << name;
      continue;
    }
    const auto r = check(values, grads.t[name], loss, entries);
    EXPECT_LT(r.max_rel_error, kGradTolerance) << kind_name(layer) << " S=" << S << " " << name;
    if (r.max_rel_error > worst) worst = r.max_rel_error, worst_name = name;
  }
  const auto r = check(a, da, loss, entries);
  EXPECT_LT(r.max_rel_error, kGradTolerance) << "da";
  if (r.max_rel_error > worst) worst = r.max_rel_error, worst_name = "da";
  std::printf("[attention %s S=%lld B=2] gradcheck max rel err %.3g (%s)\n", kind_name(layer),
              static_cast<long long>(S), worst, worst_name.c_str());
}

TEST(AttentionTest, GradientsSWAS64) {
  gradcheck_variant(kSwa, 64, 10);
}
TEST(AttentionTest, GradientsSWAS61) {
  gradcheck_variant(kSwa, 61, 10);
}
TEST(AttentionTest, GradientsSWAS3) {
  gradcheck_variant(kSwa, 3, 24);
}
TEST(AttentionTest, GradientsCSAS64) {
  gradcheck_variant(kCsa, 64, 10);
}
TEST(AttentionTest, GradientsCSAS61) {
  gradcheck_variant(kCsa, 61, 10);
}
TEST(AttentionTest, GradientsCSAS3) {
  gradcheck_variant(kCsa, 3, 24);
}
TEST(AttentionTest, GradientsHCAS64) {
  gradcheck_variant(kHca, 64, 10);
}
TEST(AttentionTest, GradientsHCAS61) {
  gradcheck_variant(kHca, 61, 10);
}
TEST(AttentionTest, GradientsHCAS3) {
  gradcheck_variant(kHca, 3, 24);
}

TEST(AttentionTest, IndexerLossGradient) {
  const int64_t B = 2, S = 64;
  const auto d = dims_for(kCsa);
  Params prm(d);
  const Mat a = random_vector(B * S * d.hidden, 5);
  AttentionCache<double> cache;
  Mat out(a.size());
  AttentionOptions opt;
  opt.compute_indexer_loss = true;
  opt.indexer_loss_weight = 0.7;
  const double loss0 =
      attention_forward(d, prm.weights(), SeqShape{B, S}, a.data(), cache, out.data(), opt);
  EXPECT_GT(loss0, 0.0);
  EXPECT_EQ(loss0, cache.indexer_loss);
  // Independent recomputation of L_I from the cached probabilities and scores.
  double expected = 0;
  for (int64_t r = 0; r < B * S; ++r) {
    const auto set = attention_compressed_set(d, cache, r / S, r % S);
    if (set.empty()) continue;
    const int64_t n_keys = (cache.prob_offsets[r + 1] - cache.prob_offsets[r]) / d.heads;
    const int64_t n_win = n_keys - static_cast<int64_t>(set.size());
    std::vector<double> p(set.size(), 0.0), s(set.size());
    double pt = 0, zmax = -1e300, z = 0;
    for (size_t k = 0; k < set.size(); ++k) {
      for (int64_t h = 0; h < d.heads; ++h)
        p[k] += cache.prob[cache.prob_offsets[r] + h * n_keys + n_win + k];
      pt += p[k];
      s[k] = indexer_score(d.indexer(), cache.indexer, SeqShape{B, S}, r, set[k]);
      zmax = std::max(zmax, s[k]);
    }
    for (double v : s) z += std::exp(v - zmax);
    for (size_t k = 0; k < set.size(); ++k)
      expected += p[k] / pt * (std::log(p[k] / pt) - (s[k] - zmax - std::log(z)));
  }
  EXPECT_NEAR(loss0, expected, 1e-12 * std::max(1.0, expected));

  opt.fixed_selection = true;
  auto loss = [&] {
    AttentionCache<double> c2;
    trex::testing::copy_into(c2.indexer.selected, cache.indexer.selected);
    Mat o(a.size());
    return opt.indexer_loss_weight *
           attention_forward(d, prm.weights(), SeqShape{B, S}, a.data(), c2, o.data(), opt);
  };
  Grads grads(prm);
  auto g = grads.grads();
  const Mat zero_dout(out.size(), 0.0);
  Mat da(a.size(), 1.0);
  attention_backward(d, prm.weights(), cache, zero_dout.data(), g, da.data());
  for (double v : da) ASSERT_EQ(v, 0.0);  // indexer inputs are detached
  double worst = 0;
  for (auto& [name, values] : prm.t) {
    if (name.rfind("idx.", 0) != 0) {
      for (double v : grads.t[name]) ASSERT_EQ(v, 0.0) << name;
      continue;
    }
    const auto r = check(values, grads.t[name], loss, 16);
    EXPECT_LT(r.max_rel_error, kGradTolerance) << name;
    double norm = 0;
    for (double v : grads.t[name]) norm += v * v;
    EXPECT_GT(norm, 0.0) << name;
    worst = std::max(worst, r.max_rel_error);
  }
  std::printf("[attention CSA indexer loss] L_I %.6g, gradcheck max rel err %.3g\n", loss0, worst);
}

// Changing token t' must not change any output t < t' (selection included).
TEST(AttentionTest, Causality) {
  const int64_t S = 64, tp = 37;
  for (int64_t layer : {kSwa, kCsa, kHca}) {
    const auto d = dims_for(layer);
    const Params prm(d);
    Mat a = random_vector(S * d.hidden, 9);
    AttentionCache<double> c1, c2;
    Mat o1(a.size()), o2(a.size());
    attention_forward(d, prm.weights(), SeqShape{1, S}, a.data(), c1, o1.data());
    for (int64_t k = 0; k < d.hidden; ++k) a[tp * d.hidden + k] += 0.5;
    attention_forward(d, prm.weights(), SeqShape{1, S}, a.data(), c2, o2.data());
    for (int64_t t = 0; t < S; ++t) {
      bool same = true;
      for (int64_t k = 0; k < d.hidden; ++k) same &= o1[t * d.hidden + k] == o2[t * d.hidden + k];
      if (t < tp) {
        EXPECT_TRUE(same) << kind_name(layer) << " t=" << t;
      }
      if (t == tp) {
        EXPECT_FALSE(same) << kind_name(layer);
      }
    }
  }
}

// A token inside the query's own (incomplete) block but outside its window must not
// reach it through the compressed branch.
TEST(AttentionTest, IncompleteBlockInvisible) {
  struct Case {
    int64_t layer, window, query, changed;
  };
  // HCA m=16: query 60, window 53..60, token 50 in block 3 (48..63, incomplete).
  // CSA m=4 with window 2: query 22, window 21..22, token 20 in block 5 (20..23).
  for (const Case& cs : {Case{kHca, 8, 60, 50}, Case{kCsa, 2, 22, 20}}) {
    auto cfg = tiny_config();
    cfg.sliding_window = cs.window;
    const auto d = AttentionDims::from_config(cfg, cs.layer);
    const Params prm(d);
    const int64_t S = 64;
    Mat a = random_vector(S * d.hidden, 19);
    AttentionCache<double> c1, c2;
    Mat o1(a.size()), o2(a.size());
    attention_forward(d, prm.weights(), SeqShape{1, S}, a.data(), c1, o1.data());
    for (int64_t k = 0; k < d.hidden; ++k) a[cs.changed * d.hidden + k] += 0.5;
    attention_forward(d, prm.weights(), SeqShape{1, S}, a.data(), c2, o2.data());
    for (int64_t k = 0; k < d.hidden; ++k)
      EXPECT_EQ(o1[cs.query * d.hidden + k], o2[cs.query * d.hidden + k]) << kind_name(cs.layer);
    // ... while the query at the end of that block (which sees it complete) does change.
    const int64_t block_end = (cs.changed / d.ratio + 1) * d.ratio - 1;
    bool changed = false;
    for (int64_t k = 0; k < d.hidden; ++k)
      changed |= o1[block_end * d.hidden + k] != o2[block_end * d.hidden + k];
    if (cs.layer == kHca) {
      EXPECT_TRUE(changed);
    }
  }
}

TEST(AttentionTest, FloatMatchesDouble) {
  const int64_t B = 2, S = 61;
  for (int64_t layer : {kSwa, kCsa, kHca}) {
    const auto d = dims_for(layer);
    const Params prm(d);
    const Mat a = random_vector(B * S * d.hidden, 8);
    AttentionCache<double> cd;
    Mat od(a.size());
    attention_forward(d, prm.weights(), SeqShape{B, S}, a.data(), cd, od.data());
    const trex::testing::AttentionParams<float> prm_float(prm);
    const AttentionWeights<float> w = prm_float.weights();
    AttentionCache<float> cf;
    trex::testing::copy_into(cf.indexer.selected, cd.indexer.selected);  // avoid near-tie flips
    std::vector<float> af(a.begin(), a.end()), of(a.size());
    AttentionOptions opt;
    opt.fixed_selection = layer == kCsa;
    attention_forward(d, w, SeqShape{B, S}, af.data(), cf, of.data(), opt);
    double err = 0, scale = 0;
    for (size_t i = 0; i < od.size(); ++i) {
      err = std::max(err, std::abs(od[i] - of[i]));
      scale = std::max(scale, std::abs(od[i]));
    }
    EXPECT_LT(err, 1e-4 * scale) << kind_name(layer);
    std::vector<float> dof(of.size(), 0.01f), daf(af.size());
    AttentionGrads<float> gf;  // all frozen: only da
    attention_backward(d, w, cf, dof.data(), gf, daf.data());
    for (float v : daf) ASSERT_TRUE(std::isfinite(v));
  }
}

// Parameter gradients and da must not depend on the number of OpenMP threads.
TEST(AttentionTest, BackwardIsThreadCountIndependent) {
  const int64_t B = 2, S = 61;
  for (int64_t layer : {kCsa, kHca}) {
    const auto d = dims_for(layer);
    const Params prm(d);
    const Mat a = random_vector(B * S * d.hidden, 12);
    const Mat R = random_vector(a.size(), 13);
    std::vector<Grads> results;
    std::vector<Mat> das;
    const int saved = omp_get_max_threads();
    for (int threads : {1, 3}) {
      omp_set_num_threads(threads);
      AttentionCache<double> cache;
      Mat out(a.size()), da(a.size());
      AttentionOptions opt;
      opt.compute_indexer_loss = layer == kCsa;
      attention_forward(d, prm.weights(), SeqShape{B, S}, a.data(), cache, out.data(), opt);
      results.emplace_back(prm);
      auto g = results.back().grads();
      attention_backward(d, prm.weights(), cache, R.data(), g, da.data());
      das.push_back(da);
    }
    omp_set_num_threads(saved);
    EXPECT_EQ(das[0], das[1]) << kind_name(layer);
    for (const auto& [name, v] : results[0].t) EXPECT_EQ(v, results[1].t.at(name)) << name;
  }
}

TEST(AttentionTest, BadInputThrows) {
  const auto d = dims_for(kCsa);
  const Params prm(d);
  const Mat a(2 * 8 * d.hidden, 0.1);
  Mat out(a.size());
  AttentionCache<double> cache;
  auto w = prm.weights();
  w.indexer.weights_proj = nullptr;
  try {
    attention_forward(d, w, SeqShape{2, 8}, a.data(), cache, out.data());
    FAIL();
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.field_name(), "attn.indexer.weights_proj.weight");
  }
  AttentionOptions fixed;
  fixed.fixed_selection = true;
  AttentionCache<double> empty;
  EXPECT_THROW(
      attention_forward(d, prm.weights(), SeqShape{2, 8}, a.data(), empty, out.data(), fixed),
      trex::Error);
  AttentionOptions loss;
  loss.compute_indexer_loss = true;
  const auto ds = dims_for(kSwa);
  const Params ps(ds);
  EXPECT_THROW(
      attention_forward(ds, ps.weights(), SeqShape{2, 8}, a.data(), cache, out.data(), loss),
      trex::Error);
}

}  // namespace
}  // namespace trex::model
