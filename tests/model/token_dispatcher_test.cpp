// The token-dispatcher interface of the MoE layer (model/token_dispatcher.hpp):
// what LocalTokenDispatcher hands the layer's compute (rows grouped by expert,
// in pair order within an expert) and how it combines (local work first, then
// the routed rows per token in slot order); that a dispatcher refuses another
// kind's state; and that a Model routes every MoE block through the dispatchers
// it is given, with results bitwise those of the default local path.
#include "trex/model/token_dispatcher.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "test_paths.hpp"
#include "trex/core/error.hpp"
#include "trex/model/local_token_dispatcher.hpp"
#include "trex/model/model.hpp"
#include "trex/model/moe.hpp"

namespace trex::model {
namespace {

// 5 tokens, K = 3, E = 4: expert 2 is never chosen, token 1 names expert 0 twice.
struct Routing {
  static constexpr int64_t N = 5, K = 3, E = 4, d = 2;
  std::vector<int32_t> expert_index{1, 3, 0, 0, 1, 0, 3, 3, 1, 0, 1, 3, 1, 0, 3};
  std::vector<double> x, combine;
  Routing() {
    for (int64_t t = 0; t < N; ++t)
      for (int64_t i = 0; i < d; ++i) x.push_back(10.0 * static_cast<double>(t) + i);
    for (int64_t p = 0; p < N * K; ++p) combine.push_back(0.5 + 0.125 * static_cast<double>(p));
  }
  RoutedTokens<double> tokens() const {
    RoutedTokens<double> r;
    r.tokens = N;
    r.hidden = d;
    r.n_experts = E;
    r.top_k = K;
    r.x = x.data();
    r.expert_index = expert_index.data();
    r.combine = combine.data();
    return r;
  }
  // The pairs of expert e in pair order (the grouped layout of its rows).
  std::vector<int64_t> pairs_of(int64_t e) const {
    std::vector<int64_t> out;
    for (int64_t p = 0; p < N * K; ++p)
      if (expert_index[p] == e) out.push_back(p);
    return out;
  }
};

// An output row that names its grouped row: out[row] = (row + 1, −(row + 1)) · scale.
double mark(int64_t row, int64_t i, double scale) {
  return (i == 0 ? 1.0 : -1.0) * static_cast<double>(row + 1) * scale;
}

class RecordingForward final : public ExpertForwardCompute<double> {
 public:
  explicit RecordingForward(double* y) : y_(y) {}
  void experts(int64_t group, const GroupedRows<double>& rows, double* out) override {
    groups.push_back(group);
    const int64_t* first = rows.offsets.data<int64_t>();  // CPU backend: host memory
    offsets.assign(first, first + rows.offsets.numel());
    for (int64_t r = 0; r < rows.rows(); ++r)
      for (int64_t i = 0; i < Routing::d; ++i) out[r * Routing::d + i] = mark(r, i, rows.scale[r]);
    x.assign(rows.x, rows.x + rows.rows() * Routing::d);
    scale.assign(rows.scale, rows.scale + rows.rows());
  }
  void local() override {
    ++local_calls;
    for (int64_t j = 0; j < Routing::N * Routing::d; ++j) y_[j] = 1000.0 + static_cast<double>(j);
  }
  std::vector<int64_t> groups, offsets;
  std::vector<double> x, scale;
  int local_calls = 0;

 private:
  double* y_;
};

TEST(TokenDispatcherLocal, GroupsRowsByExpertAndCombinesInSlotOrder) {
  const Routing routing;
  const int64_t N = Routing::N, K = Routing::K, E = Routing::E, d = Routing::d;
  LocalTokenDispatcher<double> dispatcher;
  std::vector<double> y(static_cast<size_t>(N * d), -7.0);
  RecordingForward compute(y.data());
  std::unique_ptr<DispatchState> state;
  dispatcher.forward(routing.tokens(), compute, state, y.data());
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(compute.groups, (std::vector<int64_t>{0}));
  EXPECT_EQ(compute.local_calls, 1);
  // Offsets from the expert counts (expert 2 empty); rows of an expert in pair order.
  EXPECT_EQ(compute.offsets, (std::vector<int64_t>{0, 5, 10, 10, 15}));
  std::vector<int64_t> row_of(static_cast<size_t>(N * K), -1);
  for (int64_t e = 0; e < E; ++e) {
    const std::vector<int64_t> pairs = routing.pairs_of(e);
    for (size_t j = 0; j < pairs.size(); ++j) {
      const int64_t row = compute.offsets[e] + static_cast<int64_t>(j), p = pairs[j];
      row_of[p] = row;
      EXPECT_EQ(compute.scale[row], routing.combine[p]) << "pair " << p;
      for (int64_t i = 0; i < d; ++i)
        EXPECT_EQ(compute.x[row * d + i], routing.x[(p / K) * d + i]) << "pair " << p;
    }
  }
  // y = local work, then each slot's output added left to right.
  for (int64_t t = 0; t < N; ++t)
    for (int64_t i = 0; i < d; ++i) {
      double want = 1000.0 + static_cast<double>(t * d + i);
      for (int64_t k = 0; k < K; ++k) {
        const int64_t p = t * K + k;
        want += mark(row_of[p], i, routing.combine[p]);
      }
      EXPECT_EQ(y[t * d + i], want) << "token " << t;
    }

  // Backward: the same rows, dy gathered alike; dx = local work + routed rows in
  // slot order; d_combine of a pair is its row's dscale; one finished range.
  class RecordingBackward final : public ExpertBackwardCompute<double> {
   public:
    explicit RecordingBackward(double* dx) : dx_(dx) {}
    void experts(int64_t group, const GroupedRows<double>& rows, const double* dout, double* dx,
                 double* dscale) override {
      groups.push_back(group);
      const int64_t* first = rows.offsets.data<int64_t>();  // CPU backend: host memory
      offsets.assign(first, first + rows.offsets.numel());
      dout_rows.assign(dout, dout + rows.rows() * Routing::d);
      for (int64_t r = 0; r < rows.rows(); ++r) {
        dscale[r] = 0.25 * static_cast<double>(r);
        for (int64_t i = 0; i < Routing::d; ++i) dx[r * Routing::d + i] = mark(r, i, 3.0);
      }
    }
    void local() override {
      for (int64_t j = 0; j < Routing::N * Routing::d; ++j) dx_[j] = -static_cast<double>(j);
    }
    void tokens_done(int64_t begin, int64_t end) override { done.emplace_back(begin, end); }
    std::vector<int64_t> groups, offsets;
    std::vector<double> dout_rows;
    std::vector<std::pair<int64_t, int64_t>> done;

   private:
    double* dx_;
  };
  std::vector<double> dy(static_cast<size_t>(N * d)), dx(dy.size(), 99.0),
      d_combine(static_cast<size_t>(N * K), -1.0);
  for (size_t j = 0; j < dy.size(); ++j) dy[j] = 0.5 * static_cast<double>(j) - 2.0;
  RecordingBackward backward(dx.data());
  dispatcher.backward(routing.tokens(), *state, dy.data(), backward, dx.data(), d_combine.data());
  EXPECT_EQ(backward.groups, (std::vector<int64_t>{0}));
  EXPECT_EQ(backward.offsets, compute.offsets);
  EXPECT_EQ(backward.done, (std::vector<std::pair<int64_t, int64_t>>{{0, N}}));
  for (int64_t p = 0; p < N * K; ++p) {
    EXPECT_EQ(d_combine[p], 0.25 * static_cast<double>(row_of[p])) << "pair " << p;
    for (int64_t i = 0; i < d; ++i)
      EXPECT_EQ(backward.dout_rows[row_of[p] * d + i], dy[(p / K) * d + i]) << "pair " << p;
  }
  for (int64_t t = 0; t < N; ++t)
    for (int64_t i = 0; i < d; ++i) {
      double want = -static_cast<double>(t * d + i);
      for (int64_t k = 0; k < K; ++k) want += mark(row_of[t * K + k], i, 3.0);
      EXPECT_EQ(dx[t * d + i], want) << "token " << t;
    }
}

TEST(TokenDispatcherLocal, RefusesAnotherDispatchersState) {
  struct OtherState final : DispatchState {};
  const Routing routing;
  LocalTokenDispatcher<double> dispatcher;
  class NoCompute final : public ExpertBackwardCompute<double> {
   public:
    void experts(int64_t, const GroupedRows<double>&, const double*, double*, double*) override {
      ADD_FAILURE() << "no compute expected";
    }
    void local() override { ADD_FAILURE() << "no compute expected"; }
    void tokens_done(int64_t, int64_t) override { ADD_FAILURE() << "no compute expected"; }
  } compute;
  std::vector<double> dy(static_cast<size_t>(Routing::N * Routing::d), 1.0), dx(dy.size()),
      d_combine(static_cast<size_t>(Routing::N * Routing::K));
  try {
    dispatcher.backward(routing.tokens(), OtherState{}, dy.data(), compute, dx.data(),
                        d_combine.data());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "moe.dispatcher");
  }
}

// Wraps the local dispatcher of every block and records which blocks asked.
class CountingDispatchers final : public TokenDispatchers<float> {
 public:
  class Counting final : public TokenDispatcher<float> {
   public:
    explicit Counting(int* calls) : calls_(calls) {}
    bool runs_expert(int64_t expert) const override { return inner_.runs_expert(expert); }
    void forward(const RoutedTokens<float>& tokens, ExpertForwardCompute<float>& compute,
                 std::unique_ptr<DispatchState>& state, float* y) override {
      ++*calls_;
      inner_.forward(tokens, compute, state, y);
    }
    void backward(const RoutedTokens<float>& tokens, const DispatchState& state, const float* dy,
                  ExpertBackwardCompute<float>& compute, float* dx, float* d_combine) override {
      ++*calls_;
      inner_.backward(tokens, state, dy, compute, dx, d_combine);
    }

   private:
    LocalTokenDispatcher<float> inner_;
    int* calls_;
  };
  std::unique_ptr<TokenDispatcher<float>> for_block(int64_t block, int64_t n_experts) override {
    blocks.push_back(block);
    experts = n_experts;
    return std::make_unique<Counting>(&calls);
  }
  std::vector<int64_t> blocks;
  int64_t experts = 0;
  int calls = 0;
};

TEST(TokenDispatcherModel, EveryMoeBlockDispatchesThroughTheModelsDispatchers) {
  const ModelConfig config =
      ModelConfig::load(trex::test::source_dir() + "/configs/models/tiny-v4.json");
  Batch batch;
  batch.B = 2;
  batch.S = 8;
  for (int64_t i = 0; i < batch.B * batch.S; ++i) batch.input_ids.push_back(2 + (7 * i) % 50);
  LossOptions loss;
  loss.balance_loss_weight = 0.01;

  Model<float> local(config);
  local.init_random(11);
  const LossBreakdown want = local.forward_backward(batch, loss);

  Model<float> dispatched(config);
  dispatched.init_random(11);
  CountingDispatchers dispatchers;
  dispatched.set_token_dispatchers(&dispatchers);
  EXPECT_EQ(dispatched.token_dispatchers(), &dispatchers);
  const LossBreakdown got = dispatched.forward_backward(batch, loss);

  // Every block (main layers, then MTP) once in the forward and once in the
  // backward; the forward asks in layer order.
  const int64_t blocks = config.num_hidden_layers + config.num_nextn_predict_layers;
  ASSERT_GT(config.num_nextn_predict_layers, 0);
  EXPECT_EQ(static_cast<int64_t>(dispatchers.blocks.size()), 2 * blocks);
  EXPECT_EQ(dispatchers.calls, static_cast<int>(2 * blocks));
  EXPECT_EQ(dispatchers.experts, config.n_routed_experts);
  for (int64_t b = 0; b < config.num_hidden_layers; ++b) EXPECT_EQ(dispatchers.blocks[b], b);
  for (int64_t b = 0; b < blocks; ++b)
    EXPECT_EQ(std::count(dispatchers.blocks.begin(), dispatchers.blocks.end(), b), 2)
        << "block " << b;
  // Bitwise the default path.
  EXPECT_EQ(got.total, want.total);
  EXPECT_EQ(got.balance, want.balance);
  EXPECT_EQ(got.expert_load, want.expert_load);
  EXPECT_EQ(dispatched.params().grads(), local.params().grads());
}

}  // namespace
}  // namespace trex::model
