// The engine's top-k tie rule (indexer.hpp ranks_before): descending score,
// exactly equal scores by lower index, NaN last. Exact ties are frequent at
// random init (a block whose q·k are all ≤ 0 scores exactly 0), so the rule
// must be deterministic, independent of the thread count and the one the
// parity oracle uses.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "model/gradcheck.hpp"
#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"
#include "trex/model/indexer.hpp"
#include "trex/model/moe.hpp"

namespace trex::model {
namespace {

using testing::random_vector;

// What the rule means, written independently: a stable sort by descending
// score keeps equal scores in index order (NaN moved behind every number).
template <class T>
std::vector<int64_t> stable_top(const std::vector<T>& scores, int64_t k) {
  std::vector<int64_t> order(scores.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    const bool nx = std::isnan(scores[x]), ny = std::isnan(scores[y]);
    if (nx || ny) return !nx && ny;
    return scores[x] > scores[y];
  });
  order.resize(static_cast<size_t>(std::min<int64_t>(k, static_cast<int64_t>(scores.size()))));
  return order;
}

template <class T>
std::vector<int64_t> engine_top(const std::vector<T>& scores, int64_t k) {
  std::vector<int64_t> out(static_cast<size_t>(k), -7), order;
  const int64_t take =
      select_top_indices(scores.data(), static_cast<int64_t>(scores.size()), k, out.data(), order);
  EXPECT_EQ(take, std::min<int64_t>(k, static_cast<int64_t>(scores.size())));
  for (int64_t i = take; i < k; ++i) EXPECT_EQ(out[i], -7) << "wrote past take";
  out.resize(static_cast<size_t>(take));
  return out;
}

TEST(IndexerTies, RanksBeforeIsAStrictTotalOrder) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> v = {0.0, -0.0, 1.0, 1.0, nan, -inf, inf, nan, -2.5, 0.0};
  const int64_t n = static_cast<int64_t>(v.size());
  auto before = [&](int64_t x, int64_t y) { return ranks_before(v[x], x, v[y], y); };
  for (int64_t x = 0; x < n; ++x) {
    EXPECT_FALSE(before(x, x));
    for (int64_t y = 0; y < n; ++y) {
      if (x != y) {
        EXPECT_NE(before(x, y), before(y, x)) << x << " " << y;  // total, asymmetric
      }
      for (int64_t z = 0; z < n; ++z)
        if (before(x, y) && before(y, z)) {
          EXPECT_TRUE(before(x, z)) << x << y << z;
        }
    }
  }
  EXPECT_TRUE(before(0, 1)) << "+0 and -0 tie: lower index first";
  EXPECT_TRUE(before(1, 9)) << "-0 and +0 tie: lower index first";
  EXPECT_TRUE(before(5, 4)) << "-inf ranks before NaN";
  EXPECT_TRUE(before(4, 7)) << "NaNs by index";
}

// (a) ties at the k boundary pick the lowest indices.
TEST(IndexerTies, BoundaryTiesPickTheLowestIndices) {
  const std::vector<double> s = {1.0, 0.5, 0.5, 2.0, 0.5, 0.5, -1.0};
  EXPECT_EQ(engine_top(s, 1), (std::vector<int64_t>{3}));
  EXPECT_EQ(engine_top(s, 2), (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(engine_top(s, 3), (std::vector<int64_t>{3, 0, 1}));
  EXPECT_EQ(engine_top(s, 4), (std::vector<int64_t>{3, 0, 1, 2}));
  EXPECT_EQ(engine_top(s, 5), (std::vector<int64_t>{3, 0, 1, 2, 4}));
  EXPECT_EQ(engine_top(s, 9), (std::vector<int64_t>{3, 0, 1, 2, 4, 5, 6}));
  // Zero scores of either sign tie (ReLU-zeroed blocks; w_h < 0 makes them the largest).
  const std::vector<float> z = {-0.3f, 0.0f, -0.0f, -0.1f, 0.0f, -0.0f};
  EXPECT_EQ(engine_top(z, 3), (std::vector<int64_t>{1, 2, 4}));
  // NaN is never picked ahead of a number.
  const std::vector<double> n = {std::nan(""), 0.0, std::nan(""), -5.0};
  EXPECT_EQ(engine_top(n, 2), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(engine_top(n, 3), (std::vector<int64_t>{1, 3, 0}));
}

// The selection is the stable sort's, for rows made mostly of ties, at every k.
TEST(IndexerTies, SelectionEqualsStableDescendingSort) {
  Rng rng(5, {17});
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = 1 + rng.uniform_int(int64_t{0}, int64_t{40});
    std::vector<double> s(static_cast<size_t>(n));
    for (auto& v : s) {
      const int64_t c = rng.uniform_int(int64_t{0}, int64_t{5});
      v = c == 5 ? std::nan("") : c == 4 ? -0.0 : static_cast<double>(c % 3);
    }
    for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{4}, n / 2 + 1, n, n + 3})
      ASSERT_EQ(engine_top(s, k), stable_top(s, k)) << "trial " << trial << " k " << k;
  }
}

// Indexer inputs with one head (so about half the blocks score exactly 0 and,
// for tokens whose head weight is negative, those zero blocks rank first).
template <class T>
struct IndexerProblem {
  IndexerDims dims;
  SeqShape shape;
  std::vector<T> wq_b, weights_proj, wkv, wgate, ape, norm, a, c_q;
  kernels::RopeTable rope;

  IndexerProblem(int64_t B, int64_t S, int64_t heads, uint64_t seed) : shape{B, S} {
    dims.hidden = 16;
    dims.q_lora = 8;
    dims.heads = heads;
    dims.head_dim = 32;
    dims.rope_dim = 16;
    dims.ratio = 4;
    dims.topk = 4;
    auto fill = [&](std::vector<T>& v, int64_t n, double scale) {
      const auto d = random_vector(static_cast<size_t>(n), seed++, scale);
      v.assign(d.begin(), d.end());
    };
    const int64_t p = 2 * dims.head_dim;  // overlapping compressor
    fill(wq_b, dims.heads * dims.head_dim * dims.q_lora, 0.6);
    fill(weights_proj, dims.heads * dims.hidden, 0.6);
    fill(wkv, p * dims.hidden, 0.5);
    fill(wgate, p * dims.hidden, 0.5);
    fill(ape, dims.ratio * p, 0.5);
    fill(norm, dims.head_dim, 0.2);
    for (auto& v : norm) v += T(1);
    fill(a, shape.tokens() * dims.hidden, 1.0);
    fill(c_q, shape.tokens() * dims.q_lora, 1.0);
    rope = kernels::RopeTable(dims.rope_dim, 160000.0, S);
  }
  IndexerWeights<T> weights() const {
    IndexerWeights<T> w;
    w.wq_b = wq_b.data();
    w.weights_proj = weights_proj.data();
    w.compressor = {wkv.data(), wgate.data(), ape.data(), norm.data()};
    return w;
  }
  IndexerCache<T> forward() const {
    IndexerCache<T> cache;
    indexer_forward(dims, weights(), shape, a.data(), c_q.data(), rope, cache, false);
    return cache;
  }
};

// Every row's selection equals the stable sort of its scores (indexer_score of
// each visible block), -1 padded; returns the rows with a tie at the boundary.
template <class T>
int64_t expect_rule(const IndexerProblem<T>& p, const IndexerCache<T>& cache) {
  const int64_t k = p.dims.topk;
  int64_t boundary_ties = 0;
  for (int64_t r = 0; r < p.shape.tokens(); ++r) {
    const int64_t visible = visible_blocks(r % p.shape.S, p.dims.ratio, cache.blocks);
    std::vector<T> scores(static_cast<size_t>(visible));
    for (int64_t i = 0; i < visible; ++i) scores[i] = indexer_score(p.dims, cache, p.shape, r, i);
    std::vector<int64_t> want = stable_top(scores, k);
    if (visible > k && scores[want[k - 1]] == scores[stable_top(scores, k + 1)[k]]) ++boundary_ties;
    want.resize(static_cast<size_t>(k), -1);
    const std::vector<int64_t> got(cache.selected.begin() + r * k,
                                   cache.selected.begin() + (r + 1) * k);
    EXPECT_EQ(got, want) << "row " << r;
    for (int64_t j = 0; j < k; ++j)
      if (want[j] >= 0) {
        EXPECT_EQ(cache.selected_scores[r * k + j], scores[want[j]]);
      }
  }
  return boundary_ties;
}

TEST(IndexerTies, ForwardResolvesExactTiesByLowerBlockIndex) {
  const IndexerProblem<double> p(2, 64, 1, 31);
  IndexerSelectionStats stats;
  IndexerCache<double> cache;
  {
    IndexerSelectionProbe probe(stats);
    cache = p.forward();
  }
  const int64_t ties = expect_rule(p, cache);
  EXPECT_GT(ties, 10) << "the problem should exercise boundary ties";
  // The probe saw the same decisions: rows with more than k visible blocks.
  int64_t decisions = 0;
  for (int64_t r = 0; r < p.shape.tokens(); ++r)
    decisions += visible_blocks(r % p.shape.S, 4, cache.blocks) > p.dims.topk;
  EXPECT_EQ(stats.decisions, decisions);
  EXPECT_EQ(stats.boundary_ties, ties);
  EXPECT_EQ(stats.zero_ties, ties) << "with one head only zero blocks tie exactly";
  EXPECT_GT(stats.min_margin, 0.0);
  EXPECT_GE(stats.min_zero_block_relu_margin, 0.0);
  // Without a probe nothing is recorded.
  const IndexerSelectionStats before = stats;
  (void)p.forward();
  EXPECT_EQ(stats.decisions, before.decisions);
  IndexerSelectionProbe first(stats);
  EXPECT_THROW(IndexerSelectionProbe second(stats), Error);
}

// (c) all scores zero (here q^I = 0): every row takes blocks 0..min(k, visible)−1,
// causal visibility respected, −1 pads.
TEST(IndexerTies, AllZeroScoresSelectTheFirstVisibleBlocks) {
  IndexerProblem<float> p(2, 37, 3, 41);
  std::fill(p.wq_b.begin(), p.wq_b.end(), 0.0f);
  const IndexerCache<float> cache = p.forward();
  const int64_t k = p.dims.topk;
  ASSERT_EQ(cache.blocks, 9);
  for (int64_t r = 0; r < p.shape.tokens(); ++r) {
    const int64_t t = r % p.shape.S, visible = (t + 1) / 4;
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(cache.selected[r * k + j], j < visible ? j : -1) << "t " << t << " j " << j;
      EXPECT_EQ(cache.selected_scores[r * k + j], 0.0f);
    }
  }
}

// (b) the selection (ties included) does not depend on the OpenMP thread count,
// on a problem large enough for the parallel path.
template <class T>
void expect_thread_count_independent() {
  const IndexerProblem<T> p(2, 256, 1, 51);
  ASSERT_GT(p.shape.tokens() * (p.shape.S / 4) * p.dims.heads * p.dims.head_dim, 1 << 18);
  const int saved = omp_get_max_threads();
  std::vector<IndexerCache<T>> caches;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    caches.push_back(p.forward());
  }
  omp_set_num_threads(saved);
  EXPECT_GT(expect_rule(p, caches[0]), 50);
  for (size_t i = 1; i < caches.size(); ++i) {
    EXPECT_EQ(testing::to_vector(caches[i].selected), testing::to_vector(caches[0].selected))
        << "threads run " << i;
    EXPECT_EQ(testing::to_vector(caches[i].selected_scores),
              testing::to_vector(caches[0].selected_scores))
        << "threads run " << i;
  }
}

TEST(IndexerTies, SelectionIsThreadCountIndependentDouble) {
  expect_thread_count_independent<double>();
}
TEST(IndexerTies, SelectionIsThreadCountIndependentFloat) {
  expect_thread_count_independent<float>();
}

// The router's top-k follows the same order: with a zero router weight every
// score is sqrt(softplus(0)), and the bias alone (with its own ties) decides.
TEST(MoeRouterTies, EqualBiasedScoresPickTheLowestExperts) {
  MoeDims d;
  d.batch = 1;
  d.seq = 3;
  d.hidden = 4;
  d.n_experts = 6;
  d.top_k = 3;
  d.inter = 2;
  const int64_t N = d.tokens();
  std::vector<double> gate(static_cast<size_t>(d.n_experts * d.hidden), 0.0);
  std::vector<double> x = random_vector(static_cast<size_t>(N * d.hidden), 3);
  std::vector<std::vector<double>> w(static_cast<size_t>(d.n_experts),
                                     random_vector(static_cast<size_t>(d.inter * d.hidden), 4));
  MoeWeights<double> weights;
  weights.gate = gate.data();
  for (const auto& e : w) {
    weights.w1.push_back(e.data());
    weights.w2.push_back(e.data());
    weights.w3.push_back(e.data());
  }
  std::vector<double> y(x.size());
  for (const auto& [bias, want] : std::vector<std::pair<std::vector<double>, std::vector<int32_t>>>{
           {{}, {0, 1, 2}},
           {{0, 0.5, 0, 0.5, 0, 0}, {1, 3, 0}},
           {{0.5, 0, 0, 0, 0.5, 0.5}, {0, 4, 5}},
           {{0, std::nan(""), 0, 0, 0, 0}, {0, 2, 3}}}) {
    weights.gate_bias = bias.empty() ? nullptr : bias.data();
    MoeCache<double> cache;
    moe_forward(d, weights, x.data(), nullptr, cache, y.data());
    for (int64_t t = 0; t < N; ++t)
      EXPECT_EQ(std::vector<int32_t>(cache.expert_index.begin() + t * d.top_k,
                                     cache.expert_index.begin() + (t + 1) * d.top_k),
                want)
          << "token " << t;
  }
}

}  // namespace
}  // namespace trex::model
