// Expert parallelism over MPI (parallel/ep_token_dispatcher.hpp), on the EP group of a
// DP=1 x EP=world x PP=1 grid: every rank runs a different micro-batch through
// the EP model; the losses and the gradients summed over the ranks must equal a
// 1-rank run over all the micro-batches (fp32, 1e-5 relative) — with the
// contiguous and a non-contiguous expert map, hash layers, overlap on and off.
// ExpertParallelMpi.ExposedCommunication prints the exposed-communication
// figures of docs/expert-parallel.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "mpi/model_fixtures.hpp"
#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"
#include "trex/model/config.hpp"
#include "trex/model/model.hpp"
#include "trex/model/moe.hpp"
#include "trex/parallel/communicator.hpp"
#include "trex/parallel/ep_token_dispatcher.hpp"
#include "trex/parallel/process_grid.hpp"

namespace trex::model {
namespace {

using parallel::contiguous_expert_owner;
using parallel::EpTokenDispatcher;
using parallel::EpTokenDispatchers;
using parallel::ExpertParallel;
using parallel::make_expert_parallel;
using parallel::MoeParallel;
using trex::test::mpi::tiny_config;

Batch micro_batch(const ModelConfig& config, int index) {
  return trex::test::mpi::micro_batch(config, index, 1234);
}

LossOptions loss_options() {
  LossOptions o;
  o.mtp_weight = 0.3;
  o.balance_loss_weight = 0.01;
  o.balance_loss_on_hash_layers = true;
  return o;
}

// Expert e -> (3e + 1) mod E, then mod ranks: every rank owns experts spread
// over the index range (not contiguous for ranks > 1).
std::vector<int> scattered_owner(int64_t n_experts, int ranks) {
  std::vector<int> owner(static_cast<size_t>(n_experts));
  for (int64_t e = 0; e < n_experts; ++e)
    owner[static_cast<size_t>(e)] = static_cast<int>(((3 * e + 1) % n_experts) % ranks);
  return owner;
}

template <class T>
struct Reference {
  std::vector<double> loss;  // per micro-batch
  std::vector<T> grads;      // summed over micro-batches
  std::vector<std::vector<int64_t>> load;
};

// The 1-rank run over micro-batches 0..count-1.
template <class T>
Reference<T> one_rank(const ModelConfig& config, int count) {
  Model<T> model(config);
  model.init_random(7);
  Reference<T> r;
  for (int i = 0; i < count; ++i) {
    const LossBreakdown out = model.forward_backward(micro_batch(config, i), loss_options());
    r.loss.push_back(out.total);
    if (r.load.empty()) {
      r.load = out.expert_load;
    } else {
      for (size_t l = 0; l < r.load.size(); ++l)
        for (size_t e = 0; e < r.load[l].size(); ++e) r.load[l][e] += out.expert_load[l][e];
    }
  }
  r.grads = model.params().grads();
  return r;
}

struct Variant {
  bool overlap;
  bool scattered;
};

// Tolerances. fp64 exposes any bookkeeping error: its GEMMs compute every row
// alike whatever the row count, so only the summation order of an expert's
// weight gradient changes (measured: losses equal, gradients 5e-16). In fp32 the owner's grouped
// GEMMs run over other row counts than the 1-rank run's (another kernel / blocking), so each expert
// output row differs by rounding; the loss stays within 1e-5, the whole gradient (norm-wise) too,
// while a few small mHC tensors whose gradients are sums with heavy cancellation move by up to
// ~1e-4 of their largest entry.
template <class T>
struct Tolerance;
template <>
struct Tolerance<double> {
  static constexpr double loss = 1e-12, grad_norm = 1e-14, tensor = 1e-12;
};
template <>
struct Tolerance<float> {
  static constexpr double loss = 1e-5, grad_norm = 1e-5, tensor = 1e-3;
};

template <class T>
void check_matches_one_rank(const Variant& v) {
  auto world = parallel::world();
  parallel::ProcessGrid grid(world, {1, world->size(), 1});
  parallel::Communicator& ep_comm = grid.ep();
  const int R = ep_comm.size(), rank = ep_comm.rank();
  const ModelConfig config = tiny_config();
  ASSERT_GT(config.num_hash_layers, 0);  // hash layers are covered

  ExpertParallel ep = make_expert_parallel(config, ep_comm, v.overlap);
  if (v.scattered)
    for (std::vector<int>& map : ep.owner) map = scattered_owner(config.n_routed_experts, R);
  Model<T> model(config);
  model.init_random(7);
  EpTokenDispatchers<T> dispatchers(ep);
  model.set_token_dispatchers(&dispatchers);
  const LossBreakdown out = model.forward_backward(micro_batch(config, rank), loss_options());
  // The data-group gradient sum of the trainer.
  auto& grads = model.params().grads();
  grid.data().all_reduce(std::span<T>(grads));
  std::vector<double> losses(static_cast<size_t>(R));
  const std::vector<int64_t> one(static_cast<size_t>(R), 1);
  world->all_gather(&out.total, losses.data(), one, parallel::DType::kF64);

  const Reference<T> ref = one_rank<T>(config, R);
  double worst_loss = 0.0;
  for (int r = 0; r < R; ++r)
    worst_loss = std::max(worst_loss, std::fabs(losses[r] - ref.loss[r]) / std::fabs(ref.loss[r]));
  for (int r = 0; r < R; ++r)
    EXPECT_NEAR(losses[r], ref.loss[r], Tolerance<T>::loss * std::fabs(ref.loss[r]))
        << "micro-batch " << r;
  double diff_sq = 0.0, ref_sq = 0.0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const double delta = static_cast<double>(grads[i]) - static_cast<double>(ref.grads[i]);
    diff_sq += delta * delta;
    ref_sq += static_cast<double>(ref.grads[i]) * static_cast<double>(ref.grads[i]);
  }
  EXPECT_GT(ref_sq, 0.0);
  EXPECT_LE(std::sqrt(diff_sq / ref_sq), Tolerance<T>::grad_norm);
  // Per tensor, against the tensor's largest gradient.
  const ParamStore<T>& params = model.params();
  int64_t checked = 0;
  double worst_tensor = 0.0;
  std::string worst_name;
  for (const ParamSpec& spec : params.specs()) {
    const int64_t at = params.offset(spec.name), n = spec.numel();
    double scale = 0.0, diff = 0.0;
    for (int64_t i = at; i < at + n; ++i) {
      scale = std::max(scale, std::fabs(static_cast<double>(ref.grads[i])));
      diff = std::max(diff, std::fabs(static_cast<double>(grads[i]) - ref.grads[i]));
    }
    if (scale == 0.0) {
      EXPECT_EQ(diff, 0.0) << spec.name;
      continue;
    }
    EXPECT_LE(diff / scale, Tolerance<T>::tensor) << spec.name;
    if (diff / scale > worst_tensor) {
      worst_tensor = diff / scale;
      worst_name = spec.name;
    }
    ++checked;
  }
  EXPECT_GT(checked, 100);
  if (rank == 0)
    std::printf(
        "[ep-check] EP=%d %s %s map, overlap %s: loss rel diff %.2g, gradient norm-wise "
        "%.2g, worst tensor %s %.2g\n",
        R, sizeof(T) == 4 ? "fp32" : "fp64", v.scattered ? "scattered" : "contiguous",
        v.overlap ? "on" : "off", worst_loss, std::sqrt(diff_sq / ref_sq), worst_name.c_str(),
        worst_tensor);
  // Routed-expert gradients exist (every expert of a block is hit by someone).
  const T* expert_grad = grads.data() + params.offset("layers.0.ffn.experts.0.w1.weight");
  EXPECT_NE(*std::max_element(expert_grad, expert_grad + config.moe_intermediate_size), T(0));
  // Loads are local; their sum over ranks is the 1-rank load.
  for (size_t l = 0; l < out.expert_load.size(); ++l) {
    std::vector<int64_t> load = out.expert_load[l];
    ep_comm.all_reduce(std::span<int64_t>(load));
    EXPECT_EQ(load, ref.load[l]) << "block " << l;
  }
  // Traffic: every block dispatched all of this rank's pairs.
  ASSERT_EQ(ep.traffic.pairs.size(), static_cast<size_t>(config.num_hidden_layers + 1));
  const Batch mine = micro_batch(config, rank);
  for (size_t l = 0; l < ep.traffic.pairs.size(); ++l) {
    int64_t pairs = 0;
    for (int64_t p : ep.traffic.pairs[l]) pairs += p;
    const int64_t tokens = l < static_cast<size_t>(config.num_hidden_layers)
                               ? mine.B * mine.S
                               : mine.B * (mine.S - 1);  // MTP block
    EXPECT_EQ(pairs, tokens * config.num_experts_per_tok) << "block " << l;
  }
}

TEST(ExpertParallelMpi, MatchesOneRankDoubleScatteredOverlap) {
  check_matches_one_rank<double>({true, true});
}
TEST(ExpertParallelMpi, MatchesOneRankDoubleContiguousNoOverlap) {
  check_matches_one_rank<double>({false, false});
}
TEST(ExpertParallelMpi, MatchesOneRankContiguousOverlap) {
  check_matches_one_rank<float>({true, false});
}
TEST(ExpertParallelMpi, MatchesOneRankContiguousNoOverlap) {
  check_matches_one_rank<float>({false, false});
}
TEST(ExpertParallelMpi, MatchesOneRankScatteredOverlap) {
  check_matches_one_rank<float>({true, true});
}
TEST(ExpertParallelMpi, MatchesOneRankScatteredNoOverlap) {
  check_matches_one_rank<float>({false, true});
}

// Overlap on and off give the same losses and gradients over several steps.
TEST(ExpertParallelMpi, OverlapDoesNotChangeResults) {
  auto world = parallel::world();
  parallel::ProcessGrid grid(world, {1, world->size(), 1});
  const ModelConfig config = tiny_config();
  std::vector<double> losses[2];
  std::vector<float> grads[2];
  for (int mode = 0; mode < 2; ++mode) {
    ExpertParallel ep = make_expert_parallel(config, grid.ep(), mode == 1);
    Model<float> model(config);
    model.init_random(3);
    EpTokenDispatchers<float> dispatchers(ep);
    model.set_token_dispatchers(&dispatchers);
    for (int step = 0; step < 3; ++step)
      losses[mode].push_back(
          model.forward_backward(micro_batch(config, 10 * step + grid.ep().rank()), loss_options())
              .total);
    grads[mode] = model.params().grads();
  }
  for (size_t i = 0; i < losses[0].size(); ++i)
    EXPECT_NEAR(losses[1][i], losses[0][i], 1e-6 * std::fabs(losses[0][i]));
  double scale = 0.0, diff = 0.0;
  for (size_t i = 0; i < grads[0].size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(grads[0][i])));
    diff = std::max(diff, std::fabs(static_cast<double>(grads[1][i]) - grads[0][i]));
  }
  EXPECT_GT(scale, 0.0);
  EXPECT_LE(diff / scale, 1e-5);
}

// A map that names a rank outside the EP group is refused on every rank
// before anything is sent.
TEST(ExpertParallelMpi, RejectsMapOutsideTheGroup) {
  auto world = parallel::world();
  parallel::ProcessGrid grid(world, {1, world->size(), 1});
  const ModelConfig config = tiny_config();
  ExpertParallel ep = make_expert_parallel(config, grid.ep(), true);
  ep.owner[1][3] = grid.ep().size();
  Model<float> model(config);
  model.init_random(3);
  EpTokenDispatchers<float> dispatchers(ep);
  model.set_token_dispatchers(&dispatchers);
  try {
    model.forward_backward(micro_batch(config, grid.ep().rank()), loss_options());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "expert_parallel.owner[1]");
  }
  world->barrier();
}

// ---------------------------------------------------------------------------
// Exposed communication with and without overlap (docs/expert-parallel.md).

struct Timing {
  double step_seconds = 0.0;
  double exposed_seconds = 0.0;  // all of the EP communicator's waits
  double count_seconds = 0.0;    // ... in the per-expert count exchanges
  double row_seconds = 0.0;      // ... waiting for token rows
  void add(const Timing& t, double weight) {
    step_seconds += weight * t.step_seconds;
    exposed_seconds += weight * t.exposed_seconds;
    count_seconds += weight * t.count_seconds;
    row_seconds += weight * t.row_seconds;
  }
};

// One MoE layer, large enough that the expert GEMMs take a few milliseconds:
// `steps` forward+backward calls per mode after one warm-up call.
Timing time_moe_layer(parallel::Communicator& comm, bool overlap, int steps,
                      std::vector<float>& y_out) {
  MoeDims dims;
  dims.batch = 2;
  dims.seq = 128;
  dims.hidden = 256;
  dims.n_experts = 8;
  dims.top_k = 2;
  dims.inter = 256;
  dims.routed_scaling = 1.5;
  dims.swiglu_limit = 10.0;
  const int64_t N = dims.tokens(), d = dims.hidden, E = dims.n_experts, I = dims.inter;
  Rng rng(99);
  const auto fill = [&](int64_t n, double scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = static_cast<float>(scale * (2.0 * rng.uniform() - 1.0));
    return v;
  };
  const std::vector<float> gate = fill(E * d, 0.1), sw1 = fill(I * d, 0.06),
                           sw2 = fill(d * I, 0.06), sw3 = fill(I * d, 0.06);
  std::vector<std::vector<float>> w1, w2, w3;
  for (int64_t e = 0; e < E; ++e) {
    w1.push_back(fill(I * d, 0.06));
    w2.push_back(fill(d * I, 0.06));
    w3.push_back(fill(I * d, 0.06));
  }
  Rng data_rng(5, {static_cast<uint64_t>(comm.rank())});
  std::vector<float> x(static_cast<size_t>(N * d)), dy(x.size());
  for (float& v : x) v = static_cast<float>(2.0 * data_rng.uniform() - 1.0);
  for (float& v : dy) v = static_cast<float>(2.0 * data_rng.uniform() - 1.0);
  MoeWeights<float> w;
  w.gate = gate.data();
  w.shared_w1 = sw1.data();
  w.shared_w2 = sw2.data();
  w.shared_w3 = sw3.data();
  std::vector<std::vector<float>> gw1(static_cast<size_t>(E), std::vector<float>(I * d)),
      gw2(gw1.size(), std::vector<float>(d * I)), gw3(gw1);
  MoeGrads<float> g;
  for (int64_t e = 0; e < E; ++e) {
    w.w1.push_back(w1[e].data());
    w.w2.push_back(w2[e].data());
    w.w3.push_back(w3[e].data());
    g.w1.push_back(gw1[e].data());
    g.w2.push_back(gw2[e].data());
    g.w3.push_back(gw3[e].data());
  }
  const std::vector<int> owner = contiguous_expert_owner(E, comm.size());
  MoeParallel view;
  view.comm = &comm;
  view.owner = owner.data();
  view.overlap = overlap;
  double count_seconds = 0.0, row_seconds = 0.0;
  view.count_exchange_seconds = &count_seconds;
  view.row_exchange_seconds = &row_seconds;
  EpTokenDispatcher<float> dispatcher(view);
  MoeCache<float> cache;
  std::vector<float> y(x.size()), dx(x.size());
  Timing t;
  for (int step = -1; step < steps; ++step) {
    comm.barrier();
    const double exposed = comm.stats().exposed_seconds;
    const double counts_before = count_seconds, rows_before = row_seconds;
    const auto start = std::chrono::steady_clock::now();
    moe_forward(dims, w, x.data(), nullptr, cache, y.data(), false, &dispatcher);
    moe_backward(dims, w, cache, dy.data(), 1.0f, g, dx.data(), &dispatcher);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step < 0) continue;  // warm-up
    t.step_seconds += seconds / steps;
    t.exposed_seconds += (comm.stats().exposed_seconds - exposed) / steps;
    t.count_seconds += (count_seconds - counts_before) / steps;
    t.row_seconds += (row_seconds - rows_before) / steps;
  }
  y_out = y;
  return t;
}

Timing time_model(parallel::ProcessGrid& grid, bool overlap, int steps) {
  const ModelConfig config = tiny_config();
  ExpertParallel ep = make_expert_parallel(config, grid.ep(), overlap);
  Model<float> model(config);
  model.init_random(3);
  EpTokenDispatchers<float> dispatchers(ep);
  model.set_token_dispatchers(&dispatchers);
  Timing t;
  for (int step = -1; step < steps; ++step) {
    Batch b = micro_batch(config, grid.ep().rank());
    b.B = 2;
    b.S = 32;
    b.input_ids.resize(static_cast<size_t>(b.B * b.S));
    for (size_t i = 0; i < b.input_ids.size(); ++i)
      b.input_ids[i] = 2 + static_cast<int64_t>((i * 37 + grid.ep().rank()) % 500);
    grid.ep().barrier();
    const double exposed = grid.ep().stats().exposed_seconds;
    const double counts_before = ep.traffic.count_exchange_seconds,
                 rows_before = ep.traffic.row_exchange_seconds;
    const auto start = std::chrono::steady_clock::now();
    model.forward_backward(b, loss_options());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step < 0) continue;
    t.step_seconds += seconds / steps;
    t.exposed_seconds += (grid.ep().stats().exposed_seconds - exposed) / steps;
    t.count_seconds += (ep.traffic.count_exchange_seconds - counts_before) / steps;
    t.row_seconds += (ep.traffic.row_exchange_seconds - rows_before) / steps;
  }
  return t;
}

TEST(ExpertParallelMpi, ExposedCommunication) {
  auto world = parallel::world();
  parallel::ProcessGrid grid(world, {1, world->size(), 1});
  parallel::Communicator& comm = grid.ep();
  const int rounds = 3, steps = 4;  // per mode: rounds x steps timed steps
  Timing layer[2], model[2];
  std::vector<float> y[2];
  // Alternate the modes so that background load hits both alike.
  for (int round = 0; round < rounds; ++round)
    for (int mode = 0; mode < 2; ++mode) {
      layer[mode].add(time_moe_layer(comm, mode == 1, steps, y[mode]), 1.0 / rounds);
      model[mode].add(time_model(grid, mode == 1, steps), 1.0 / rounds);
    }
  // Same maths either way.
  double scale = 0.0, diff = 0.0;
  for (size_t i = 0; i < y[0].size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(y[0][i])));
    diff = std::max(diff, std::fabs(static_cast<double>(y[1][i]) - y[0][i]));
  }
  EXPECT_LE(diff / scale, 1e-6);
  for (const Timing* t : {&layer[0], &layer[1], &model[0], &model[1]}) {
    EXPECT_GT(t->step_seconds, 0.0);
    EXPECT_LE(t->exposed_seconds, t->step_seconds);
    // The two parts are the whole of the EP communicator's waits.
    EXPECT_NEAR(t->count_seconds + t->row_seconds, t->exposed_seconds,
                1e-9 + 1e-6 * t->exposed_seconds);
  }
  // The token-row exchange alone (ranks synchronised first): one forward
  // dispatch of the layer above, 512 rows of 257 floats spread evenly.
  std::vector<double> alone;
  {
    const int R = comm.size();
    const int64_t per_rank = 512 * 257 / R;
    std::vector<float> send(static_cast<size_t>(per_rank * R), 1.f), recv(send.size());
    const std::vector<int64_t> counts(static_cast<size_t>(R), per_rank);
    for (int rep = 0; rep < 11; ++rep) {
      comm.barrier();
      const auto start = std::chrono::steady_clock::now();
      comm.all_to_all(send.data(), counts, recv.data(), counts, parallel::DType::kF32);
      alone.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(alone.begin(), alone.end());
    EXPECT_EQ(recv.front(), 1.f);
  }
  double transfer = alone[alone.size() / 2];
  world->all_reduce(&transfer, 1, parallel::DType::kF64, parallel::ReduceOp::kMax);
  // Mean over ranks.
  const Timing* all[4] = {&layer[0], &layer[1], &model[0], &model[1]};
  double figures[16];
  for (int i = 0; i < 4; ++i) {
    figures[4 * i] = all[i]->step_seconds;
    figures[4 * i + 1] = all[i]->exposed_seconds;
    figures[4 * i + 2] = all[i]->count_seconds;
    figures[4 * i + 3] = all[i]->row_seconds;
  }
  world->all_reduce(figures, 16, parallel::DType::kF64, parallel::ReduceOp::kSum);
  if (world->rank() == 0) {
    const char* what[2] = {"MoE layer fwd+bwd (N=256/rank, d=256, I=256, E=8, K=2)",
                           "tiny-v4 model step (B=2, S=32 per rank)"};
    for (int i = 0; i < 4; ++i) {
      const double* f = figures + 4 * i;
      const double n = world->size();
      std::printf(
          "[ep-overlap] EP=%d %s overlap=%s: step %.2f ms, exposed %.2f ms (%.1f%%) = count "
          "exchange %.2f ms + token rows %.2f ms (%.1f%% of the step)\n",
          world->size(), what[i / 2], i % 2 ? "on " : "off", 1e3 * f[0] / n, 1e3 * f[1] / n,
          100.0 * f[1] / f[0], 1e3 * f[2] / n, 1e3 * f[3] / n, 100.0 * f[3] / f[0]);
    }
    std::printf(
        "[ep-overlap] EP=%d one token-row all-to-all alone (512 x 257 floats): %.3f ms "
        "(median of 11)\n",
        world->size(), 1e3 * transfer);
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace trex::model
