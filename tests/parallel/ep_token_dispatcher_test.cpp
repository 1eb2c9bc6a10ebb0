// Expert-parallel MoE (parallel/ep_token_dispatcher.hpp): the dispatch
// bookkeeping, and the whole dispatch / expert / combine path with ranks
// simulated by threads of this process (a small in-test communicator whose
// all-to-all is a synchronous exchange), compared with the local path.
#include "trex/parallel/ep_token_dispatcher.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <exception>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "model/gradcheck.hpp"
#include "trex/core/error.hpp"
#include "trex/model/moe.hpp"
#include "trex/parallel/communicator.hpp"

namespace trex::model {
namespace {

using parallel::chunk_bounds;
using parallel::contiguous_expert_owner;
using parallel::DispatchPlan;
using parallel::EpTokenDispatcher;
using parallel::MoeParallel;
using parallel::plan_dispatch;
using parallel::plan_receive;
using parallel::ReceivePlan;
using testing::random_vector;

// ---------------------------------------------------------------------------
// Bookkeeping.

TEST(MoeParallelPlan, ChunkBounds) {
  EXPECT_EQ(chunk_bounds(7, false), (std::vector<int64_t>{0, 7}));
  EXPECT_EQ(chunk_bounds(7, true), (std::vector<int64_t>{0, 3, 7}));
  EXPECT_EQ(chunk_bounds(1, true), (std::vector<int64_t>{0, 0, 1}));
}

TEST(MoeParallelPlan, DispatchOrdersByChunkRankExpertPair) {
  // 4 tokens, K = 2, E = 4; non-contiguous map: experts 0, 2 -> rank 1; 1, 3 -> rank 0.
  const std::vector<int32_t> idx{2, 1, 0, 3, 1, 2, 3, 0};
  const std::vector<int> owner{1, 0, 1, 0};
  const std::vector<int64_t> bounds{0, 2, 4};
  const DispatchPlan plan = plan_dispatch(idx.data(), 4, 2, 4, owner.data(), 2, bounds);
  EXPECT_EQ(plan.chunks, 2);
  // Chunk 0 = pairs 0..3 (experts 2, 1, 0, 3): rank 0 gets experts 1, 3 (pairs 1, 3),
  // rank 1 gets experts 0, 2 (pairs 2, 0). Chunk 1 = pairs 4..7 (experts 1, 2, 3, 0):
  // rank 0: pairs 4 (e1), 6 (e3); rank 1: pairs 7 (e0), 5 (e2).
  EXPECT_EQ(plan.sorted_pair, (std::vector<int64_t>{1, 3, 2, 0, 4, 6, 7, 5}));
  for (int64_t row = 0; row < 8; ++row) EXPECT_EQ(plan.pair_row[plan.sorted_pair[row]], row);
  EXPECT_EQ(plan.rows, (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(plan.chunk_row, (std::vector<int64_t>{0, 4, 8}));
  // counts [rank][chunk][E].
  EXPECT_EQ(plan.counts, (std::vector<int64_t>{0, 1, 0, 1, 0, 1, 0, 1,     // to rank 0
                                               1, 0, 1, 0, 1, 0, 1, 0}));  // to rank 1
}

TEST(MoeParallelPlan, DispatchRejectsBadChunks) {
  const std::vector<int32_t> idx{0, 1};
  const std::vector<int> owner{0, 0};
  const std::vector<int64_t> short_bounds{0, 0};
  EXPECT_THROW(plan_dispatch(idx.data(), 1, 2, 2, owner.data(), 1, short_bounds), Error);
  const std::vector<int32_t> bad_idx{0, 5};
  const std::vector<int64_t> bounds{0, 1};
  EXPECT_THROW(plan_dispatch(bad_idx.data(), 1, 2, 2, owner.data(), 1, bounds), Error);
}

TEST(MoeParallelPlan, ReceiveGroupsByExpertThenSource) {
  // Rank 1 owns experts 0 and 2 of E = 3; three sources.
  const std::vector<int> owner{1, 0, 1};
  const std::vector<int64_t> counts{2, 0, 1,   // from rank 0: 2 rows of e0, 1 of e2
                                    0, 0, 2,   // from rank 1: 2 rows of e2
                                    1, 0, 0};  // from rank 2: 1 row of e0
  const ReceivePlan plan = plan_receive(counts, 3, 3, owner.data(), 1);
  EXPECT_EQ(plan.from_rank, (std::vector<int64_t>{3, 2, 1}));
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 3, 3, 6}));
  // Arrival: r0e0, r0e0, r0e2, r1e2, r1e2, r2e0 -> grouped e0: r0, r0, r2; e2: r0, r1, r1.
  EXPECT_EQ(plan.grouped_row, (std::vector<int64_t>{0, 1, 3, 4, 5, 2}));
  EXPECT_EQ(plan.expert, (std::vector<int32_t>{0, 0, 0, 2, 2, 2}));
  EXPECT_EQ(plan.total(), 6);
}

TEST(MoeParallelPlan, ReceiveRejectsRowsForAnotherOwner) {
  const std::vector<int> owner{1, 0, 1};
  const std::vector<int64_t> counts{0, 1, 0};  // expert 1 belongs to rank 0, not 1
  try {
    plan_receive(counts, 1, 3, owner.data(), 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "expert_parallel.owner");
  }
}

// ---------------------------------------------------------------------------
// Ranks as threads: all-to-all is a synchronous exchange through shared slots.

class ThreadGroup {
 public:
  explicit ThreadGroup(int size)
      : size_(size),
        sync_(size),
        send_(static_cast<size_t>(size)),
        counts_(static_cast<size_t>(size)) {}
  int size() const { return size_; }

  void all_to_all(int rank, const void* send, std::span<const int64_t> send_counts, void* recv,
                  std::span<const int64_t> recv_counts, parallel::DType type) {
    const size_t elem = parallel::dtype_size(type);
    send_[rank] = static_cast<const char*>(send);
    counts_[rank].assign(send_counts.begin(), send_counts.end());
    sync_.arrive_and_wait();
    int64_t at = 0;
    for (int src = 0; src < size_; ++src) {
      const std::vector<int64_t>& c = counts_[src];
      const int64_t offset = std::accumulate(c.begin(), c.begin() + rank, int64_t{0});
      if (c[rank] != recv_counts[src]) mismatches_ += 1;
      const int64_t n = std::min(c[rank], recv_counts[src]);
      if (n > 0)
        std::memcpy(static_cast<char*>(recv) + at * elem, send_[src] + offset * elem, n * elem);
      at += recv_counts[src];
    }
    sync_.arrive_and_wait();
  }
  int mismatches() const { return mismatches_; }

 private:
  int size_;
  std::barrier<> sync_;
  std::vector<const char*> send_;
  std::vector<std::vector<int64_t>> counts_;
  std::atomic<int> mismatches_{0};
};

class ThreadComm : public parallel::Communicator {
 public:
  ThreadComm(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }
  const std::string& name() const override { return name_; }
  parallel::Request iall_to_all(const void* send, std::span<const int64_t> send_counts, void* recv,
                                std::span<const int64_t> recv_counts,
                                parallel::DType type) override {
    group_.all_to_all(rank_, send, send_counts, recv, recv_counts, type);
    ++stats_.operations;
    return {};
  }
  parallel::Request iall_reduce(void*, int64_t, parallel::DType, parallel::ReduceOp) override {
    throw Error("thread comm: all_reduce not supported");
  }
  parallel::Request ireduce_scatter(const void*, void*, std::span<const int64_t>, parallel::DType,
                                    parallel::ReduceOp) override {
    throw Error("thread comm: reduce_scatter not supported");
  }
  parallel::Request iall_gather(const void*, void*, std::span<const int64_t>,
                                parallel::DType) override {
    throw Error("thread comm: all_gather not supported");
  }
  parallel::Request ibroadcast(void*, int64_t, parallel::DType, int) override {
    throw Error("thread comm: broadcast not supported");
  }
  parallel::Request isend(const void*, int64_t, parallel::DType, int, int) override {
    throw Error("thread comm: send not supported");
  }
  parallel::Request irecv(void*, int64_t, parallel::DType, int, int) override {
    throw Error("thread comm: recv not supported");
  }
  parallel::Request ibarrier() override { throw Error("thread comm: barrier not supported"); }
  std::unique_ptr<Communicator> split(int, int, const std::string&) override {
    throw Error("thread comm: split not supported");
  }

 private:
  ThreadGroup& group_;
  int rank_;
  std::string name_ = "ep";
};

// One MoE layer's weights (fp32) and per-rank inputs of different lengths.
struct Layer {
  MoeDims dims;
  std::vector<float> gate, bias, sw1, sw2, sw3;
  std::vector<std::vector<float>> w1, w2, w3;
  std::vector<int64_t> tid2eid;

  MoeWeights<float> weights() const {
    MoeWeights<float> w;
    w.gate = gate.data();
    w.gate_bias = dims.hash_routed ? nullptr : bias.data();
    w.tid2eid = dims.hash_routed ? tid2eid.data() : nullptr;
    for (int64_t e = 0; e < dims.n_experts; ++e) {
      w.w1.push_back(w1[e].data());
      w.w2.push_back(w2[e].data());
      w.w3.push_back(w3[e].data());
    }
    w.shared_w1 = sw1.data();
    w.shared_w2 = sw2.data();
    w.shared_w3 = sw3.data();
    return w;
  }
};

std::vector<float> floats(const std::vector<double>& v) {
  return {v.begin(), v.end()};
}

Layer make_layer(bool hash) {
  Layer l;
  l.dims.batch = 1;
  l.dims.seq = 1;
  l.dims.hidden = 16;
  l.dims.n_experts = 8;
  l.dims.top_k = 3;
  l.dims.inter = 8;
  l.dims.routed_scaling = 1.5;
  l.dims.swiglu_limit = 10.0;
  l.dims.hash_routed = hash;
  l.dims.vocab = 37;
  l.dims.balance_loss_weight = 0.01;
  l.dims.balance_loss_on_hash_layers = true;
  const int64_t d = l.dims.hidden, E = l.dims.n_experts, I = l.dims.inter, K = l.dims.top_k;
  l.gate = floats(random_vector(E * d, 11, 0.7));
  l.bias = floats(random_vector(E, 12, 0.05));
  l.sw1 = floats(random_vector(I * d, 13, 0.5));
  l.sw2 = floats(random_vector(d * I, 14, 0.5));
  l.sw3 = floats(random_vector(I * d, 15, 0.5));
  for (int64_t e = 0; e < E; ++e) {
    l.w1.push_back(floats(random_vector(I * d, 100 + e, 0.5)));
    l.w2.push_back(floats(random_vector(d * I, 200 + e, 0.5)));
    l.w3.push_back(floats(random_vector(I * d, 300 + e, 0.5)));
  }
  for (int64_t v = 0; v < l.dims.vocab; ++v)
    for (int64_t k = 0; k < K; ++k) l.tid2eid.push_back((3 * v + 5 * k) % E);
  return l;
}

// Per-rank gradient buffers of one layer (fp32).
struct Grads {
  std::vector<float> gate, sw1, sw2, sw3;
  std::vector<std::vector<float>> w1, w2, w3;
  explicit Grads(const MoeDims& dims) {
    const int64_t d = dims.hidden, E = dims.n_experts, I = dims.inter;
    gate.assign(static_cast<size_t>(E * d), 0.f);
    sw1.assign(static_cast<size_t>(I * d), 0.f);
    sw2.assign(static_cast<size_t>(d * I), 0.f);
    sw3.assign(static_cast<size_t>(I * d), 0.f);
    w1.assign(static_cast<size_t>(E), std::vector<float>(static_cast<size_t>(I * d), 0.f));
    w2.assign(static_cast<size_t>(E), std::vector<float>(static_cast<size_t>(d * I), 0.f));
    w3.assign(static_cast<size_t>(E), std::vector<float>(static_cast<size_t>(I * d), 0.f));
  }
  MoeGrads<float> view() {
    MoeGrads<float> g;
    g.gate = gate.data();
    g.shared_w1 = sw1.data();
    g.shared_w2 = sw2.data();
    g.shared_w3 = sw3.data();
    for (size_t e = 0; e < w1.size(); ++e) {
      g.w1.push_back(w1[e].data());
      g.w2.push_back(w2[e].data());
      g.w3.push_back(w3[e].data());
    }
    return g;
  }
  std::vector<std::vector<float>*> all() {
    std::vector<std::vector<float>*> v{&gate, &sw1, &sw2, &sw3};
    for (size_t e = 0; e < w1.size(); ++e) {
      v.push_back(&w1[e]);
      v.push_back(&w2[e]);
      v.push_back(&w3[e]);
    }
    return v;
  }
};

struct RankResult {
  std::vector<float> y, dx;
  double balance = 0.0;
  std::vector<int64_t> load;
};

// Rank r's micro-batch: 2 sequences of 5 + 2r tokens (different lengths per rank).
struct Micro {
  MoeDims dims;
  std::vector<float> x, dy;
  std::vector<int64_t> tokens;
};

Micro micro_batch(const Layer& layer, int rank) {
  Micro m;
  m.dims = layer.dims;
  m.dims.batch = 2;
  m.dims.seq = 5 + 2 * rank;
  const int64_t N = m.dims.tokens(), d = m.dims.hidden;
  m.x = floats(random_vector(N * d, 1000 + rank, 1.0));
  m.dy = floats(random_vector(N * d, 2000 + rank, 1.0));
  for (int64_t t = 0; t < N; ++t) m.tokens.push_back((7 * t + 11 * rank + 2) % m.dims.vocab);
  return m;
}

RankResult run_rank(const Layer& layer, const Micro& m, Grads& grads,
                    TokenDispatcher<float>* dispatcher) {
  RankResult r;
  const int64_t N = m.dims.tokens(), d = m.dims.hidden;
  MoeCache<float> cache;
  r.y.assign(static_cast<size_t>(N * d), 0.f);
  r.dx.assign(static_cast<size_t>(N * d), 0.f);
  const MoeWeights<float> w = layer.weights();
  moe_forward(m.dims, w, m.x.data(), m.tokens.data(), cache, r.y.data(), false, dispatcher);
  MoeGrads<float> g = grads.view();
  moe_backward(m.dims, w, cache, m.dy.data(), 1.0f, g, r.dx.data(), dispatcher);
  r.balance = cache.balance_loss;
  r.load = cache.expert_load;
  return r;
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 1e-30, diff = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  }
  return diff / scale;
}

struct EpCase {
  int ranks;
  bool overlap;
  bool hash;
  bool contiguous;
};

// Each rank runs its own micro-batch through the EP layer; every rank's output
// and input gradient must match the local path on the same micro-batch, and
// the gradients summed over ranks the sum of the local gradients.
void check_expert_parallel(const EpCase& ec) {
  const Layer layer = make_layer(ec.hash);
  const int R = ec.ranks;
  const int64_t E = layer.dims.n_experts;
  std::vector<int> owner = contiguous_expert_owner(E, R);
  if (!ec.contiguous)
    for (int64_t e = 0; e < E; ++e) owner[e] = static_cast<int>((e * 5 + 3) % E) % R;

  std::vector<Micro> micro;
  for (int r = 0; r < R; ++r) micro.push_back(micro_batch(layer, r));
  Grads reference(layer.dims);
  std::vector<RankResult> local;
  for (int r = 0; r < R; ++r) local.push_back(run_rank(layer, micro[r], reference, nullptr));

  ThreadGroup group(R);
  std::vector<Grads> grads(static_cast<size_t>(R), Grads(layer.dims));
  std::vector<RankResult> parallel(static_cast<size_t>(R));
  std::vector<std::vector<int64_t>> pairs(static_cast<size_t>(R), std::vector<int64_t>(R, 0)),
      dispatch(pairs), total(pairs);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(R));
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < R; ++r)
      threads.emplace_back([&, r] {
        try {
          ThreadComm comm(group, r);
          MoeParallel view;
          view.comm = &comm;
          view.owner = owner.data();
          view.overlap = ec.overlap;
          view.pairs = pairs[r].data();
          view.dispatch_bytes = dispatch[r].data();
          view.total_bytes = total[r].data();
          EpTokenDispatcher<float> dispatcher(view);
          parallel[r] = run_rank(layer, micro[r], grads[r], &dispatcher);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    for (std::thread& t : threads) t.join();
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  EXPECT_EQ(group.mismatches(), 0);

  for (int r = 0; r < R; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_LE(max_rel(parallel[r].y, local[r].y), 1e-6);
    EXPECT_LE(max_rel(parallel[r].dx, local[r].dx), 1e-6);
    EXPECT_EQ(parallel[r].balance, local[r].balance);
    EXPECT_EQ(parallel[r].load, local[r].load);
    // Traffic: the pairs sent to each rank are the routed pairs of its experts.
    const int64_t K = layer.dims.top_k, d = layer.dims.hidden;
    for (int dest = 0; dest < R; ++dest) {
      int64_t expected = 0;
      for (int64_t e = 0; e < E; ++e)
        if (owner[e] == dest) expected += local[r].load[e];
      EXPECT_EQ(pairs[r][dest], expected);
      EXPECT_EQ(dispatch[r][dest], expected * (d + 1) * static_cast<int64_t>(sizeof(float)));
      // Rows out and dx back (d + 1 values), outputs back and dy out (d), the count block.
      const int64_t received = pairs[dest][r];
      EXPECT_EQ(total[r][dest], ((expected + received) * (2 * d + 1)) * 4 + (3 + 2 * E) * 8);
    }
    int64_t sent = 0;
    for (int dest = 0; dest < R; ++dest) sent += pairs[r][dest];
    EXPECT_EQ(sent, micro[r].dims.tokens() * K);
    // A rank's gradient of an expert it does not own stays zero.
    for (int64_t e = 0; e < E; ++e) {
      if (owner[e] == r) continue;
      for (float v : grads[r].w1[e]) ASSERT_EQ(v, 0.f) << "expert " << e;
    }
  }
  // Σ_r EP grads == Σ_r local grads.
  Grads summed(layer.dims);
  const std::vector<std::vector<float>*> out = summed.all();
  for (int r = 0; r < R; ++r) {
    const std::vector<std::vector<float>*> in = grads[r].all();
    for (size_t i = 0; i < out.size(); ++i)
      for (size_t j = 0; j < out[i]->size(); ++j) (*out[i])[j] += (*in[i])[j];
  }
  const std::vector<std::vector<float>*> ref = reference.all();
  for (size_t i = 0; i < out.size(); ++i) {
    SCOPED_TRACE("gradient tensor " + std::to_string(i));
    double ref_norm = 0.0;
    for (float v : *ref[i]) ref_norm = std::max(ref_norm, std::fabs(static_cast<double>(v)));
    EXPECT_GT(ref_norm, 0.0);
    EXPECT_LE(max_rel(*out[i], *ref[i]), 1e-5);
  }
}

TEST(MoeParallelThreads, TwoRanksContiguousNoOverlap) {
  check_expert_parallel({2, false, false, true});
}
TEST(MoeParallelThreads, TwoRanksContiguousOverlap) {
  check_expert_parallel({2, true, false, true});
}
TEST(MoeParallelThreads, ThreeRanksNonContiguousOverlap) {
  check_expert_parallel({3, true, false, false});
}
TEST(MoeParallelThreads, FourRanksNonContiguousHashLayer) {
  check_expert_parallel({4, true, true, false});
  check_expert_parallel({4, false, true, false});
}
TEST(MoeParallelThreads, UnbalancedMapAllExpertsOnOneRank) {
  // Any map works: rank 1 owns nothing and only sends.
  const Layer layer = make_layer(false);
  const int64_t E = layer.dims.n_experts;
  const std::vector<int> owner(static_cast<size_t>(E), 0);
  const Micro m0 = micro_batch(layer, 0), m1 = micro_batch(layer, 1);
  Grads ref(layer.dims);
  const RankResult l0 = run_rank(layer, m0, ref, nullptr), l1 = run_rank(layer, m1, ref, nullptr);
  ThreadGroup group(2);
  std::vector<Grads> grads(2, Grads(layer.dims));
  std::vector<RankResult> out(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ThreadComm comm(group, r);
      MoeParallel view;
      view.comm = &comm;
      view.owner = owner.data();
      view.overlap = true;
      EpTokenDispatcher<float> dispatcher(view);
      out[r] = run_rank(layer, r == 0 ? m0 : m1, grads[r], &dispatcher);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_LE(max_rel(out[0].y, l0.y), 1e-6);
  EXPECT_LE(max_rel(out[1].y, l1.y), 1e-6);
  EXPECT_LE(max_rel(out[1].dx, l1.dx), 1e-6);
  for (int64_t e = 0; e < E; ++e) {
    EXPECT_LE(max_rel(grads[0].w2[e], ref.w2[e]), 1e-5);
    for (float v : grads[1].w2[e]) ASSERT_EQ(v, 0.f);
  }
}

// Ranks that disagree on the map or on overlap all throw after the count
// exchange (none is left waiting for rows).
TEST(MoeParallelThreads, DisagreeingRanksAllFail) {
  const Layer layer = make_layer(false);
  const int64_t E = layer.dims.n_experts;
  for (int variant = 0; variant < 2; ++variant) {
    ThreadGroup group(3);
    std::vector<std::vector<int>> owner(3, contiguous_expert_owner(E, 3));
    if (variant == 0) std::swap(owner[2][0], owner[2][E - 1]);  // rank 2's map differs
    std::vector<std::string> errors(3);
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r)
      threads.emplace_back([&, r] {
        ThreadComm comm(group, r);
        MoeParallel view;
        view.comm = &comm;
        view.owner = owner[r].data();
        view.overlap = variant == 0 || r != 1;  // variant 1: rank 1 runs without overlap
        EpTokenDispatcher<float> dispatcher(view);
        Grads grads(layer.dims);
        try {
          run_rank(layer, micro_batch(layer, r), grads, &dispatcher);
        } catch (const Error& e) {
          errors[r] = e.field_name() + ": " + e.what();
        }
      });
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < 3; ++r) {
      EXPECT_NE(errors[r].find("expert_parallel.owner"), std::string::npos) << errors[r];
      EXPECT_NE(errors[r].find(variant == 0 ? "expert map" : "overlap setting"), std::string::npos)
          << errors[r];
    }
  }
}

// With one EP rank and no overlap the expert-parallel path runs the same
// grouped GEMMs on the same rows in the same order: bitwise equal.
TEST(MoeParallelSelf, OneRankIsBitwiseTheLocalPath) {
  const Layer layer = make_layer(false);
  const Micro m = micro_batch(layer, 1);
  auto comm = parallel::make_self_communicator("ep");
  const std::vector<int> owner(static_cast<size_t>(layer.dims.n_experts), 0);
  MoeParallel view;
  view.comm = comm.get();
  view.owner = owner.data();
  view.overlap = false;
  Grads local_grads(layer.dims), ep_grads(layer.dims);
  const RankResult local = run_rank(layer, m, local_grads, nullptr);
  EpTokenDispatcher<float> one_chunk(view);
  const RankResult ep = run_rank(layer, m, ep_grads, &one_chunk);
  EXPECT_EQ(ep.y, local.y);
  EXPECT_EQ(ep.dx, local.dx);
  const auto a = ep_grads.all(), b = local_grads.all();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(*a[i], *b[i]) << "tensor " << i;
  // Overlap splits the call in two halves: per-token maths unchanged.
  view.overlap = true;
  Grads half_grads(layer.dims);
  EpTokenDispatcher<float> two_chunks(view);
  const RankResult halves = run_rank(layer, m, half_grads, &two_chunks);
  EXPECT_LE(max_rel(halves.y, local.y), 1e-6);
  EXPECT_LE(max_rel(halves.dx, local.dx), 1e-6);
  const auto c = half_grads.all();
  for (size_t i = 0; i < c.size(); ++i) EXPECT_LE(max_rel(*c[i], *b[i]), 1e-5) << "tensor " << i;
}

TEST(MoeParallelSelf, BackwardMustMatchTheForwardMode) {
  const Layer layer = make_layer(false);
  const Micro m = micro_batch(layer, 0);
  auto comm = parallel::make_self_communicator("ep");
  const std::vector<int> owner(static_cast<size_t>(layer.dims.n_experts), 0);
  MoeParallel view;
  view.comm = comm.get();
  view.owner = owner.data();
  const int64_t N = m.dims.tokens(), d = m.dims.hidden;
  std::vector<float> y(static_cast<size_t>(N * d)), dx(y.size());
  MoeCache<float> cache;
  Grads grads(layer.dims);
  MoeGrads<float> g = grads.view();
  const MoeWeights<float> w = layer.weights();
  moe_forward(m.dims, w, m.x.data(), m.tokens.data(), cache, y.data());
  EpTokenDispatcher<float> two_chunks(view);
  EXPECT_THROW(moe_backward(m.dims, w, cache, m.dy.data(), 1.0f, g, dx.data(), &two_chunks), Error);
  moe_forward(m.dims, w, m.x.data(), m.tokens.data(), cache, y.data(), false, &two_chunks);
  EXPECT_THROW(moe_backward(m.dims, w, cache, m.dy.data(), 1.0f, g, dx.data()), Error);
  view.overlap = false;  // the forward ran two chunks
  EpTokenDispatcher<float> one_chunk(view);
  EXPECT_THROW(moe_backward(m.dims, w, cache, m.dy.data(), 1.0f, g, dx.data(), &one_chunk), Error);
  // A map naming a rank outside the group.
  const std::vector<int> bad(static_cast<size_t>(layer.dims.n_experts), 1);
  view.owner = bad.data();
  EpTokenDispatcher<float> bad_map(view);
  EXPECT_THROW(
      moe_forward(m.dims, w, m.x.data(), m.tokens.data(), cache, y.data(), false, &bad_map), Error);
}

}  // namespace
}  // namespace trex::model
