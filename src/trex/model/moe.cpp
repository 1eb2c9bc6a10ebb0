#include "trex/model/moe.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"
#include "trex/dist/communicator.hpp"
#include "trex/kernels/cpu/elementwise.hpp"
#include "trex/kernels/cpu/gemm.hpp"
#include "trex/model/config.hpp"

namespace trex::model {
namespace {

Error moe_error(const std::string& message, const std::string& field) {
  Error error("moe: " + message);
  error.field(field);
  return error;
}

template <class T>
T sigmoid(T v) {
  if (v >= T(0)) return T(1) / (T(1) + std::exp(-v));
  const T e = std::exp(v);
  return e / (T(1) + e);
}

bool clamp_enabled(double limit) {
  return limit > 0.0;
}

void validate_dims(const MoeDims& dims) {
  if (dims.batch <= 0) throw moe_error("batch must be positive", "moe.batch");
  if (dims.seq <= 0) throw moe_error("seq must be positive", "moe.seq");
  if (dims.hidden <= 0) throw moe_error("hidden must be positive", "moe.hidden");
  if (dims.n_experts <= 0) throw moe_error("n_experts must be positive", "moe.n_experts");
  if (dims.inter <= 0) throw moe_error("inter must be positive", "moe.inter");
  if (dims.top_k <= 0) throw moe_error("top_k must be positive", "moe.top_k");
  if (!dims.hash_routed && dims.top_k > dims.n_experts)
    throw moe_error("top_k " + std::to_string(dims.top_k) + " exceeds n_experts " +
                        std::to_string(dims.n_experts),
                    "moe.top_k");
  if (dims.n_experts > INT32_MAX) throw moe_error("too many experts", "moe.n_experts");
  if (dims.balance_loss_weight < 0.0)
    throw moe_error("balance_loss_weight must be >= 0", "moe.balance_loss_weight");
  int64_t end = 0;  // sequences ascend and do not overlap
  for (const MoeSequence& s : dims.balance_sequences) {
    if (s.len <= 0 || s.row < end || s.row + s.len > dims.tokens())
      throw moe_error("balance sequence [" + std::to_string(s.row) + ", +" + std::to_string(s.len) +
                          ") overlaps another or lies outside the " +
                          std::to_string(dims.tokens()) + " tokens",
                      "moe.balance_sequences");
    end = s.row + s.len;
  }
}

// The sequences of the balance loss: the listed ones, or the B rows of S tokens.
std::vector<MoeSequence> balance_ranges(const MoeDims& dims) {
  if (!dims.balance_sequences.empty()) return dims.balance_sequences;
  std::vector<MoeSequence> rows(static_cast<size_t>(dims.batch));
  for (int64_t b = 0; b < dims.batch; ++b) rows[b] = {b * dims.seq, dims.seq};
  return rows;
}

template <class T>
bool has_shared(const MoeWeights<T>& w) {
  const int present =
      (w.shared_w1 != nullptr) + (w.shared_w2 != nullptr) + (w.shared_w3 != nullptr);
  if (present != 0 && present != 3)
    throw moe_error("shared expert needs all of w1, w2, w3 or none", "moe.shared_w1");
  return present == 3;
}

template <class T>
void validate_weights(const MoeDims& dims, const MoeWeights<T>& w, const MoeParallel* parallel) {
  if (!w.gate) throw moe_error("router weight is null", "moe.gate");
  const auto E = static_cast<size_t>(dims.n_experts);
  if (w.w1.size() != E || w.w2.size() != E || w.w3.size() != E)
    throw moe_error("expected " + std::to_string(E) + " routed expert weights", "moe.w1");
  // Expert-parallel calls need only the experts this rank owns (the others may
  // be stored elsewhere: expert_shard.hpp); a local call needs every expert.
  const bool ep = parallel && parallel->comm && parallel->owner;
  const int self = ep ? parallel->comm->rank() : 0;
  for (size_t e = 0; e < E; ++e) {
    if (ep && parallel->owner[e] != self) continue;
    if (!w.w1[e] || !w.w2[e] || !w.w3[e])
      throw moe_error(
          "routed expert " + std::to_string(e) +
              (parallel ? " has a null weight on its owner"
                        : " is not stored here (expert weights sharded over EP ranks?): the "
                          "local MoE path needs every expert"),
          "moe.experts." + std::to_string(e));
  }
  has_shared(w);
  if (dims.hash_routed) {
    if (!w.tid2eid) throw moe_error("hash-routed layer without tid2eid", "moe.tid2eid");
    if (dims.vocab <= 0) throw moe_error("hash-routed layer needs vocab > 0", "moe.vocab");
  }
}

bool balance_active(const MoeDims& dims) {
  return dims.balance_loss_weight > 0.0 && (!dims.hash_routed || dims.balance_loss_on_hash_layers);
}

// Expert SwiGLU over n contiguous rows. row_scale (nullable) multiplies h
// before W2, so out = row_scale ⊙ Expert(X).
template <class T>
void expert_forward(const T* X, int64_t n, int64_t d, int64_t I, const T* W1, const T* W2,
                    const T* W3, const T* row_scale, double limit, kernels::Precision precision,
                    T* gate_pre, T* up_pre, T* h, T* out) {
  if (n == 0) return;
  kernels::linear_forward(X, W1, gate_pre, n, I, d, precision);
  kernels::linear_forward(X, W3, up_pre, n, I, d, precision);
  const bool clamp = clamp_enabled(limit);
  const T L = static_cast<T>(limit);
  {
    TREX_PROFILE(profile::Op::kSwiglu);
#pragma omp parallel for schedule(static) if (n * I > (1 << 14))
    for (int64_t r = 0; r < n; ++r) {
      const T scale = row_scale ? row_scale[r] : T(1);
      if constexpr (std::is_same_v<T, float>) {
        kernels::swiglu_forward_row(gate_pre + r * I, up_pre + r * I, I, scale, clamp ? L : -1.0f,
                                    h + r * I);
        continue;
      }
      for (int64_t i = 0; i < I; ++i) {
        T g = gate_pre[r * I + i];
        T v = up_pre[r * I + i];
        if (clamp) {
          g = std::min(g, L);
          v = std::clamp(v, -L, L);
        }
        h[r * I + i] = scale * (g * sigmoid(g) * v);
      }
    }
  }
  kernels::linear_forward(h, W2, out, n, d, I, precision);
}

// Backward of expert_forward. dX written (nullable), weight grads accumulated
// (nullable), d_row_scale written (nullable). h, dh, dg, dv: [n, I] workspaces.
template <class T>
void expert_backward(const T* X, int64_t n, int64_t d, int64_t I, const T* W1, const T* W2,
                     const T* W3, const T* row_scale, double limit, kernels::Precision precision,
                     const T* gate_pre, const T* up_pre, const T* dout, T* h, T* dh, T* dg, T* dv,
                     T* dX, T* dW1, T* dW2, T* dW3, T* d_row_scale) {
  if (n == 0) return;
  const bool clamp = clamp_enabled(limit);
  const T L = static_cast<T>(limit);
  std::optional<profile::Scope> swiglu(std::in_place, profile::Op::kSwiglu);
#pragma omp parallel for schedule(static) if (n * I > (1 << 14))
  for (int64_t r = 0; r < n; ++r) {
    const T scale = row_scale ? row_scale[r] : T(1);
    if constexpr (std::is_same_v<T, float>) {
      kernels::swiglu_forward_row(gate_pre + r * I, up_pre + r * I, I, scale, clamp ? L : -1.0f,
                                  h + r * I);
      continue;
    }
    for (int64_t i = 0; i < I; ++i) {
      T g = gate_pre[r * I + i];
      T v = up_pre[r * I + i];
      if (clamp) {
        g = std::min(g, L);
        v = std::clamp(v, -L, L);
      }
      h[r * I + i] = scale * (g * sigmoid(g) * v);
    }
  }
  swiglu.reset();
  // dh = dout · W2 (gradient w.r.t. the scaled h); dW2 += doutᵀ · h.
  kernels::linear_backward(h, W2, dout, dh, dW2, n, d, I, precision);
  swiglu.emplace(profile::Op::kSwiglu);
#pragma omp parallel for schedule(static) if (n * I > (1 << 14))
  for (int64_t r = 0; r < n; ++r) {
    const T scale = row_scale ? row_scale[r] : T(1);
    if constexpr (std::is_same_v<T, float>) {
      const float dscale =
          kernels::swiglu_backward_row(gate_pre + r * I, up_pre + r * I, dh + r * I, I, scale,
                                       clamp ? L : -1.0f, dg + r * I, dv + r * I);
      if (d_row_scale) d_row_scale[r] = dscale;
      continue;
    }
    T dscale = T(0);
    for (int64_t i = 0; i < I; ++i) {
      const T g_raw = gate_pre[r * I + i];
      const T v_raw = up_pre[r * I + i];
      const bool g_pass = !clamp || g_raw <= L;
      const bool v_pass = !clamp || (v_raw >= -L && v_raw <= L);
      const T g = g_pass ? g_raw : L;
      const T v = clamp ? std::clamp(v_raw, -L, L) : v_raw;
      const T sg = sigmoid(g);
      const T act = g * sg;
      const T grad_h_scaled = dh[r * I + i];
      dscale += grad_h_scaled * act * v;
      const T grad_h = grad_h_scaled * scale;
      dg[r * I + i] = g_pass ? grad_h * v * sg * (T(1) + g * (T(1) - sg)) : T(0);
      dv[r * I + i] = v_pass ? grad_h * act : T(0);
    }
    if (d_row_scale) d_row_scale[r] = dscale;
  }
  swiglu.reset();
  kernels::linear_backward(X, W1, dg, dX, dW1, n, I, d, precision);
  kernels::linear_backward(X, W3, dv, dX, dW3, n, I, d, precision,
                           /*accumulate_dx=*/dX != nullptr);
}

// Top-k of (s + b) in descending order, by the engine's tie rule (ranks_before,
// model/indexer.hpp): equal values go to the lower expert index, NaN after
// every number. One token per call, so independent of the thread count.
template <class T>
void select_top_k(const T* scores, const T* bias, int64_t E, int64_t K, int32_t* out,
                  std::vector<char>& taken) {
  taken.assign(static_cast<size_t>(E), 0);
  for (int64_t k = 0; k < K; ++k) {
    int64_t best = -1;
    double best_value = 0.0;
    for (int64_t e = 0; e < E; ++e) {
      if (taken[e]) continue;
      const double value =
          static_cast<double>(scores[e]) + (bias ? static_cast<double>(bias[e]) : 0.0);
      if (best < 0 || value > best_value || (std::isnan(best_value) && !std::isnan(value))) {
        best = e;
        best_value = value;
      }
    }
    taken[best] = 1;
    out[k] = static_cast<int32_t>(best);
  }
}

// f_{b,e} = E/(K·T_b)·#{t in sequence b : e ∈ idx_t}, written to freq [sequences, E].
void balance_frequencies(const MoeDims& dims, const std::vector<MoeSequence>& sequences,
                         const int32_t* idx, std::vector<double>& freq) {
  const int64_t B = static_cast<int64_t>(sequences.size()), E = dims.n_experts, K = dims.top_k;
  freq.assign(static_cast<size_t>(B * E), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const MoeSequence& seq = sequences[static_cast<size_t>(b)];
    const double norm =
        static_cast<double>(E) / (static_cast<double>(K) * static_cast<double>(seq.len));
    double* f = freq.data() + b * E;
    for (int64_t t = seq.row; t < seq.row + seq.len; ++t) {
      const int32_t* row = idx + t * K;
      for (int64_t k = 0; k < K; ++k) {
        bool duplicate = false;
        for (int64_t j = 0; j < k; ++j) duplicate = duplicate || row[j] == row[k];
        if (!duplicate) f[row[k]] += norm;
      }
    }
  }
}

// Requests in flight on the EP communicator. Waits for every one still running
// on scope exit, so an exception never frees a buffer a transfer still uses
// (errors on that path are dropped in favour of the one propagating).
class InFlight {
 public:
  InFlight() = default;
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() {
    for (dist::Request& r : requests_) {
      try {
        r.wait();
      } catch (...) {
      }
    }
  }
  // Starts tracking `request`; with `immediately` (no overlap) waits for it now.
  size_t add(dist::Request request, bool immediately) {
    requests_.push_back(std::move(request));
    const size_t id = requests_.size() - 1;
    if (immediately) wait(id);
    return id;
  }
  void wait(size_t id) {
    dist::Request done;  // a default Request is complete: waiting on it again is free
    std::swap(done, requests_[id]);
    done.wait();
  }

 private:
  std::vector<dist::Request> requests_;
};

// rows[r]·width elements per rank.
std::vector<int64_t> scaled_counts(const int64_t* rows, int ranks, int64_t width) {
  std::vector<int64_t> out(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) out[r] = rows[r] * width;
  return out;
}

// Expert-parallel routed experts, forward (moe_parallel.hpp). Routing is done
// (cache.expert_index, cache.combine); fills cache's send order and EP chunks,
// writes the w-scaled expert output of pair p to outs[cache.pair_row[p]], runs
// local_work() while the last transfers are in flight and combine(t0, t1) for
// each chunk's tokens once its outputs are back.
template <class T, class Local, class Combine>
void ep_forward(const MoeDims& dims, const MoeWeights<T>& weights, const MoeParallel& par,
                const T* x, MoeCache<T>& cache, std::vector<T>& outs, Local&& local_work,
                Combine&& combine) {
  if (!par.comm) throw moe_error("expert-parallel call without a communicator", "moe.parallel");
  dist::Communicator& comm = *par.comm;
  const int R = comm.size(), self = comm.rank();
  const int64_t N = dims.tokens(), d = dims.hidden, E = dims.n_experts, K = dims.top_k,
                I = dims.inter;
  const int64_t wx = d + 1;  // a token row and its combine weight
  const dist::DType type = dist::dtype_of<T>();
  if (!par.owner) throw moe_error("expert-parallel call without an expert map", "moe.parallel");
  validate_expert_owner(std::span<const int>(par.owner, static_cast<size_t>(E)), E, R,
                        "expert_parallel.owner");

  std::optional<profile::Scope> section(std::in_place, profile::Op::kDispatch);
  cache.expert_parallel = true;
  cache.offsets.clear();
  cache.gate_pre.clear();
  cache.up_pre.clear();
  cache.ep_bounds = chunk_bounds(N, par.overlap);
  const int64_t C = static_cast<int64_t>(cache.ep_bounds.size()) - 1;
  DispatchPlan plan =
      plan_dispatch(cache.expert_index.data(), N, K, E, par.owner, R, cache.ep_bounds);
  cache.pair_row = std::move(plan.pair_row);
  cache.sorted_pair = std::move(plan.sorted_pair);
  cache.ep_rows = plan.rows;
  cache.ep_chunk_row = plan.chunk_row;

  // Per-expert counts of every chunk: the sizes and expert ids of the rows.
  // Every rank's block has the same size whatever the chunking (up to two
  // chunks, unused ones zero) and starts with a header that every rank checks,
  // so ranks whose maps or overlap settings differ all fail here together
  // instead of exchanging rows of mismatched sizes.
  constexpr int64_t kHeader = 3;  // map fingerprint, chunks, experts
  const int64_t block = kHeader + 2 * E;
  const int64_t fingerprint = static_cast<int64_t>(
      expert_map_fingerprint(std::span<const int>(par.owner, static_cast<size_t>(E))));
  std::vector<int64_t> send_counts(static_cast<size_t>(R * block), 0),
      recv_counts(static_cast<size_t>(R * block), 0);
  for (int r = 0; r < R; ++r) {
    int64_t* out = send_counts.data() + r * block;
    out[0] = fingerprint;
    out[1] = C;
    out[2] = E;
    std::copy_n(plan.counts.begin() + r * C * E, C * E, out + kHeader);
  }
  const std::vector<int64_t> count_block(static_cast<size_t>(R), block);
  const double exposed_before = comm.stats().exposed_seconds;
  comm.all_to_all(send_counts.data(), count_block, recv_counts.data(), count_block,
                  dist::DType::kI64);
  const double exposed_rows = comm.stats().exposed_seconds;
  if (par.count_exchange_seconds) *par.count_exchange_seconds += exposed_rows - exposed_before;
  for (int s = 0; s < R; ++s) {
    const int64_t* in = recv_counts.data() + s * block;
    if (in[0] != fingerprint || in[1] != C || in[2] != E)
      throw moe_error("EP rank " + std::to_string(s) + " runs this MoE block with another " +
                          (in[1] != C ? std::string("overlap setting") : "expert map") +
                          " than rank " + std::to_string(self),
                      "expert_parallel.owner");
  }
  cache.ep_chunks.assign(static_cast<size_t>(C), {});
  std::vector<int64_t> slice(static_cast<size_t>(R * E));
  for (int64_t c = 0; c < C; ++c) {
    for (int s = 0; s < R; ++s)
      std::copy_n(recv_counts.begin() + s * block + kHeader + c * E, E, slice.begin() + s * E);
    cache.ep_chunks[c].recv = plan_receive(slice, R, E, par.owner, self);
  }

  // Token rows in send order: x, then the combine weight.
  std::vector<T> send(static_cast<size_t>(N * K * wx));
#pragma omp parallel for schedule(static) if (N * K * d > (1 << 14))
  for (int64_t row = 0; row < N * K; ++row) {
    const int64_t p = cache.sorted_pair[row];
    std::copy_n(x + (p / K) * d, d, send.data() + row * wx);
    send[row * wx + d] = cache.combine[p];
  }
  std::vector<std::vector<T>> recv(static_cast<size_t>(C)), back(static_cast<size_t>(C));
  std::vector<std::vector<int64_t>> send_wx(C), recv_wx(C), send_d(C), recv_d(C);
  for (int64_t c = 0; c < C; ++c) {
    const int64_t* to = cache.ep_rows.data() + c * R;
    const int64_t* from = cache.ep_chunks[c].recv.from_rank.data();
    send_wx[c] = scaled_counts(to, R, wx);
    recv_wx[c] = scaled_counts(from, R, wx);
    send_d[c] = scaled_counts(to, R, d);
    recv_d[c] = scaled_counts(from, R, d);
    recv[c].resize(static_cast<size_t>(cache.ep_chunks[c].recv.total() * wx));
    back[c].resize(static_cast<size_t>(cache.ep_chunks[c].recv.total() * d));
    for (int r = 0; r < R; ++r) {
      const auto value_bytes = static_cast<int64_t>(sizeof(T));
      if (par.pairs) par.pairs[r] += to[r];
      if (par.dispatch_bytes) par.dispatch_bytes[r] += to[r] * wx * value_bytes;
      // Token rows out, the owner's outputs back to their sources.
      if (par.total_bytes) par.total_bytes[r] += (to[r] * wx + from[r] * d) * value_bytes;
    }
  }
  if (par.total_bytes)
    for (int r = 0; r < R; ++r) par.total_bytes[r] += block * static_cast<int64_t>(sizeof(int64_t));
  InFlight flight;  // declared after the buffers: destroyed (waited) first
  std::vector<size_t> dispatch(static_cast<size_t>(C)), returned(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c)
    dispatch[c] = flight.add(comm.iall_to_all(send.data() + cache.ep_chunk_row[c] * wx, send_wx[c],
                                              recv[c].data(), recv_wx[c], type),
                             !par.overlap);

  // Owner side, chunk by chunk: group the received rows by expert, run the
  // experts, send the outputs back while the next chunk computes.
  for (int64_t c = 0; c < C; ++c) {
    section.emplace(profile::Op::kDispatch);
    flight.wait(dispatch[c]);
    typename MoeCache<T>::EpChunk& ch = cache.ep_chunks[c];
    const ReceivePlan& rp = ch.recv;
    const int64_t n = rp.total();
    ch.xs.resize(static_cast<size_t>(n * d));
    ch.scale.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t g = rp.grouped_row[i];
      std::copy_n(recv[c].data() + i * wx, d, ch.xs.data() + g * d);
      ch.scale[g] = recv[c][i * wx + d];
    }
    section.emplace(profile::Op::kGemmExpert, 3 * profile::linear_flops(n, I, d));
    ch.gate_pre.assign(static_cast<size_t>(n * I), T(0));
    ch.up_pre.assign(static_cast<size_t>(n * I), T(0));
    std::vector<T> h(static_cast<size_t>(n * I)), out(static_cast<size_t>(n * d));
    for (int64_t e = 0; e < E; ++e) {
      const int64_t begin = rp.offsets[e], count = rp.offsets[e + 1] - begin;
      expert_forward(ch.xs.data() + begin * d, count, d, I, weights.w1[e], weights.w2[e],
                     weights.w3[e], ch.scale.data() + begin, dims.swiglu_limit, dims.precision,
                     ch.gate_pre.data() + begin * I, ch.up_pre.data() + begin * I,
                     h.data() + begin * I, out.data() + begin * d);
    }
    section.emplace(profile::Op::kCombine);
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(out.data() + rp.grouped_row[i] * d, d, back[c].data() + i * d);
    returned[c] =
        flight.add(comm.iall_to_all(back[c].data(), recv_d[c],
                                    outs.data() + cache.ep_chunk_row[c] * d, send_d[c], type),
                   !par.overlap);
  }
  section.reset();
  local_work();
  for (int64_t c = 0; c < C; ++c) {
    TREX_PROFILE(profile::Op::kCombine);
    flight.wait(returned[c]);
    combine(cache.ep_bounds[c], cache.ep_bounds[c + 1]);
  }
  if (par.row_exchange_seconds)
    *par.row_exchange_seconds += comm.stats().exposed_seconds - exposed_rows;
}

// Expert-parallel routed experts, backward: dy rows to the owners, expert
// backward there (weight gradients of owned experts), dx rows and d(combine
// weight) back into dxs [P, d] / dscale [P] at cache.pair_row. local_work()
// runs while the dy rows travel; finish(t0, t1) for each chunk once it is back.
template <class T, class Grad, class Local, class Finish>
void ep_backward(const MoeDims& dims, const MoeWeights<T>& weights, const MoeParallel& par,
                 const MoeCache<T>& cache, const T* dy, const Grad& expert_grad,
                 std::vector<T>& dxs, std::vector<T>& dscale, Local&& local_work, Finish&& finish) {
  if (!par.comm) throw moe_error("expert-parallel call without a communicator", "moe.parallel");
  dist::Communicator& comm = *par.comm;
  const int R = comm.size();
  const int64_t N = dims.tokens(), d = dims.hidden, E = dims.n_experts, K = dims.top_k,
                I = dims.inter;
  const int64_t P = N * K, wx = d + 1;
  const dist::DType type = dist::dtype_of<T>();
  const int64_t C = static_cast<int64_t>(cache.ep_chunks.size());
  if (C != (par.overlap ? 2 : 1) || static_cast<int64_t>(cache.ep_rows.size()) != C * R ||
      static_cast<int64_t>(cache.ep_bounds.size()) != C + 1)
    throw moe_error("expert-parallel backward does not match its forward (group or overlap)",
                    "moe.parallel");
  dxs.assign(static_cast<size_t>(P * d), T(0));
  dscale.assign(static_cast<size_t>(P), T(0));

  std::optional<profile::Scope> section(std::in_place, profile::Op::kDispatch);
  const double exposed_before = comm.stats().exposed_seconds;
  std::vector<T> send(static_cast<size_t>(P * d));
#pragma omp parallel for schedule(static) if (P * d > (1 << 14))
  for (int64_t row = 0; row < P; ++row)
    std::copy_n(dy + (cache.sorted_pair[row] / K) * d, d, send.data() + row * d);
  std::vector<T> result(static_cast<size_t>(P * wx));
  std::vector<std::vector<T>> recv(static_cast<size_t>(C)), back(static_cast<size_t>(C));
  std::vector<std::vector<int64_t>> send_wx(C), recv_wx(C), send_d(C), recv_d(C);
  for (int64_t c = 0; c < C; ++c) {
    const int64_t* to = cache.ep_rows.data() + c * R;
    const int64_t* from = cache.ep_chunks[c].recv.from_rank.data();
    send_wx[c] = scaled_counts(to, R, wx);
    recv_wx[c] = scaled_counts(from, R, wx);
    send_d[c] = scaled_counts(to, R, d);
    recv_d[c] = scaled_counts(from, R, d);
    recv[c].resize(static_cast<size_t>(cache.ep_chunks[c].recv.total() * d));
    back[c].resize(static_cast<size_t>(cache.ep_chunks[c].recv.total() * wx));
    // dy rows out, dx rows (and d weight) back to their sources.
    if (par.total_bytes)
      for (int r = 0; r < R; ++r)
        par.total_bytes[r] += (to[r] * d + from[r] * wx) * static_cast<int64_t>(sizeof(T));
  }
  InFlight flight;  // declared after the buffers: destroyed (waited) first
  std::vector<size_t> dispatch(static_cast<size_t>(C)), returned(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c)
    dispatch[c] = flight.add(comm.iall_to_all(send.data() + cache.ep_chunk_row[c] * d, send_d[c],
                                              recv[c].data(), recv_d[c], type),
                             !par.overlap);
  section.reset();
  local_work();

  for (int64_t c = 0; c < C; ++c) {
    section.emplace(profile::Op::kDispatch);
    flight.wait(dispatch[c]);
    const typename MoeCache<T>::EpChunk& ch = cache.ep_chunks[c];
    const ReceivePlan& rp = ch.recv;
    const int64_t n = rp.total();
    std::vector<T> dys(static_cast<size_t>(n * d));
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(recv[c].data() + i * d, d, dys.data() + rp.grouped_row[i] * d);
    section.emplace(profile::Op::kGemmExpert, 3 * profile::linear_backward_flops(n, I, d));
    std::vector<T> h(static_cast<size_t>(n * I)), dh(static_cast<size_t>(n * I)),
        dg(static_cast<size_t>(n * I)), dv(static_cast<size_t>(n * I));
    std::vector<T> dxg(static_cast<size_t>(n * d)), dsg(static_cast<size_t>(n), T(0));
    for (int64_t e = 0; e < E; ++e) {
      const int64_t begin = rp.offsets[e], count = rp.offsets[e + 1] - begin;
      if (count == 0) continue;
      expert_backward(ch.xs.data() + begin * d, count, d, I, weights.w1[e], weights.w2[e],
                      weights.w3[e], ch.scale.data() + begin, dims.swiglu_limit, dims.precision,
                      ch.gate_pre.data() + begin * I, ch.up_pre.data() + begin * I,
                      dys.data() + begin * d, h.data() + begin * I, dh.data() + begin * I,
                      dg.data() + begin * I, dv.data() + begin * I, dxg.data() + begin * d,
                      expert_grad(0, e), expert_grad(1, e), expert_grad(2, e), dsg.data() + begin);
    }
    section.emplace(profile::Op::kCombine);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t g = rp.grouped_row[i];
      std::copy_n(dxg.data() + g * d, d, back[c].data() + i * wx);
      back[c][i * wx + d] = dsg[g];
    }
    returned[c] =
        flight.add(comm.iall_to_all(back[c].data(), recv_wx[c],
                                    result.data() + cache.ep_chunk_row[c] * wx, send_wx[c], type),
                   !par.overlap);
  }
  for (int64_t c = 0; c < C; ++c) {
    section.emplace(profile::Op::kCombine);
    flight.wait(returned[c]);
    for (int64_t row = cache.ep_chunk_row[c]; row < cache.ep_chunk_row[c + 1]; ++row) {
      std::copy_n(result.data() + row * wx, d, dxs.data() + row * d);
      dscale[row] = result[row * wx + d];
    }
    section.reset();
    finish(cache.ep_bounds[c], cache.ep_bounds[c + 1]);
  }
  if (par.row_exchange_seconds)
    *par.row_exchange_seconds += comm.stats().exposed_seconds - exposed_before;
}

}  // namespace

MoeDims moe_dims(const ModelConfig& config, int64_t layer, int64_t batch, int64_t seq,
                 double balance_loss_weight) {
  if (config.scoring_func != "sqrtsoftplus")
    throw moe_error("unsupported scoring_func '" + config.scoring_func + "' (V4 uses sqrtsoftplus)",
                    "scoring_func");
  if (config.n_shared_experts != 0 && config.n_shared_experts != 1)
    throw moe_error("n_shared_experts must be 0 or 1", "n_shared_experts");
  if (layer < 0) throw moe_error("negative layer index", "layer");
  MoeDims dims;
  dims.batch = batch;
  dims.seq = seq;
  dims.hidden = config.hidden_size;
  dims.n_experts = config.n_routed_experts;
  dims.top_k = config.num_experts_per_tok;
  dims.inter = config.moe_intermediate_size;
  dims.routed_scaling = config.routed_scaling_factor;
  dims.swiglu_limit = config.swiglu_limit;
  dims.hash_routed = layer < config.num_hidden_layers && config.is_hash_layer(layer);
  dims.norm_topk_prob = config.norm_topk_prob;
  dims.balance_loss_weight = balance_loss_weight;
  dims.vocab = config.vocab_size;
  validate_dims(dims);
  return dims;
}

SqrtSoftplus sqrt_softplus(double logit) {
  if (logit >= 0.0) {
    const double softplus = logit + std::log1p(std::exp(-logit));
    const double s = std::sqrt(softplus);
    const double sigma = 1.0 / (1.0 + std::exp(-logit));
    return {s, sigma / (2.0 * s)};
  }
  // softplus(ℓ) = log1p(z) with z = e^ℓ ∈ (0, 1); write it as z·r, r = log1p(z)/z ∈ [log 2, 1],
  // so s = e^{ℓ/2}·sqrt(r) and σ/(2s) = e^{ℓ/2}/(2(1+z)sqrt(r)) never form 0/0.
  const double z = std::exp(logit);
  const double r = z > 0.0 ? std::log1p(z) / z : 1.0;
  const double half = std::exp(0.5 * logit);
  const double root_r = std::sqrt(r);
  return {half * root_r, half / (2.0 * (1.0 + z) * root_r)};
}

template <class T>
void moe_forward(const MoeDims& dims, const MoeWeights<T>& weights, const T* x,
                 const int64_t* token_ids, MoeCache<T>& cache, T* y, bool fixed_selection,
                 const MoeParallel* parallel) {
  validate_dims(dims);
  validate_weights(dims, weights, parallel);
  if (!x || !y) throw moe_error("null input or output", "moe.x");
  const int64_t N = dims.tokens(), d = dims.hidden, E = dims.n_experts, K = dims.top_k,
                I = dims.inter;
  const int64_t P = N * K;  // (token, slot) pairs
  const bool shared = has_shared(weights);

  cache.x.assign(x, x + N * d);

  // Router: ℓ = x W_gᵀ in fp32 (spec §2.7), s = sqrt(softplus(ℓ)).
  std::optional<profile::Scope> section(std::in_place, profile::Op::kRouter);
  cache.logits.assign(static_cast<size_t>(N * E), T(0));
  cache.scores.assign(static_cast<size_t>(N * E), T(0));
  {
    TREX_PROFILE(profile::Op::kGemmRouter, profile::linear_flops(N, E, d));
    kernels::linear_forward(x, weights.gate, cache.logits.data(), N, E, d,
                            kernels::Precision::kF32);
  }
#pragma omp parallel for schedule(static) if (N * E > (1 << 14))
  for (int64_t i = 0; i < N * E; ++i)
    cache.scores[i] = static_cast<T>(sqrt_softplus(static_cast<double>(cache.logits[i])).value);

  // Selection.
  if (fixed_selection) {
    if (static_cast<int64_t>(cache.expert_index.size()) != P)
      throw moe_error("fixed_selection needs cache.expert_index of size tokens*top_k",
                      "moe.expert_index");
    for (int64_t p = 0; p < P; ++p)
      if (cache.expert_index[p] < 0 || cache.expert_index[p] >= E)
        throw moe_error("cached expert index out of range", "moe.expert_index");
  } else {
    cache.expert_index.assign(static_cast<size_t>(P), 0);
    if (dims.hash_routed) {
      if (!token_ids) throw moe_error("hash-routed layer needs token ids", "moe.token_ids");
      for (int64_t t = 0; t < N; ++t) {
        const int64_t id = token_ids[t];
        if (id < 0 || id >= dims.vocab)
          throw moe_error("token id " + std::to_string(id) + " outside the tid2eid table (vocab " +
                              std::to_string(dims.vocab) + ")",
                          "moe.token_ids");
        for (int64_t k = 0; k < K; ++k) {
          const int64_t e = weights.tid2eid[id * K + k];
          if (e < 0 || e >= E)
            throw moe_error("tid2eid[" + std::to_string(id) + "] names expert " +
                                std::to_string(e) + " outside [0, " + std::to_string(E) + ")",
                            "moe.tid2eid");
          cache.expert_index[t * K + k] = static_cast<int32_t>(e);
        }
      }
    } else {
#pragma omp parallel if (N * E * K > (1 << 14))
      {
        std::vector<char> taken;
#pragma omp for schedule(static)
        for (int64_t t = 0; t < N; ++t)
          select_top_k(cache.scores.data() + t * E, weights.gate_bias, E, K,
                       cache.expert_index.data() + t * K, taken);
      }
    }
  }

  // Combine weights from the unbiased scores.
  cache.combine.assign(static_cast<size_t>(P), T(0));
  const double gamma = dims.routed_scaling;
  for (int64_t t = 0; t < N; ++t) {
    const T* s = cache.scores.data() + t * E;
    const int32_t* idx = cache.expert_index.data() + t * K;
    double denom = 1.0;
    if (dims.norm_topk_prob) {
      denom = 0.0;
      for (int64_t k = 0; k < K; ++k) denom += static_cast<double>(s[idx[k]]);
    }
    for (int64_t k = 0; k < K; ++k)
      cache.combine[t * K + k] =
          denom > 0.0 ? static_cast<T>(gamma * static_cast<double>(s[idx[k]]) / denom) : T(0);
  }

  // Tokens routed to each expert by this call's routing (summed by the trainer).
  section.emplace(profile::Op::kDispatch);
  cache.expert_load.assign(static_cast<size_t>(E), 0);
  for (int64_t p = 0; p < P; ++p) ++cache.expert_load[cache.expert_index[p]];

  // outs: the w-scaled output of pair p's expert at row cache.pair_row[p].
  std::vector<T> outs(static_cast<size_t>(P * d));
  // y = Shared(x) first; the routed outputs are added per token in slot order.
  const auto shared_forward = [&] {
    if (shared) {
      TREX_PROFILE(profile::Op::kGemmShared, 3 * profile::linear_flops(N, I, d));
      cache.shared_gate_pre.assign(static_cast<size_t>(N * I), T(0));
      cache.shared_up_pre.assign(static_cast<size_t>(N * I), T(0));
      std::vector<T> hs(static_cast<size_t>(N * I));
      expert_forward(cache.x.data(), N, d, I, weights.shared_w1, weights.shared_w2,
                     weights.shared_w3, static_cast<const T*>(nullptr), dims.swiglu_limit,
                     dims.precision, cache.shared_gate_pre.data(), cache.shared_up_pre.data(),
                     hs.data(), y);
    } else {
      cache.shared_gate_pre.clear();
      cache.shared_up_pre.clear();
      std::fill_n(y, N * d, T(0));
    }
  };
  const auto combine_tokens = [&](int64_t begin, int64_t end) {
    TREX_PROFILE(profile::Op::kCombine);
#pragma omp parallel for schedule(static) if ((end - begin) * d > (1 << 14))
    for (int64_t t = begin; t < end; ++t) {
      T* yt = y + t * d;
      for (int64_t k = 0; k < K; ++k) {
        const T* o = outs.data() + cache.pair_row[t * K + k] * d;
        for (int64_t i = 0; i < d; ++i) yt[i] += o[i];
      }
    }
  };

  if (parallel) {
    section.reset();
    ep_forward(dims, weights, *parallel, x, cache, outs, shared_forward, combine_tokens);
  } else {
    cache.expert_parallel = false;
    cache.ep_rows.clear();
    cache.ep_chunk_row.clear();
    cache.ep_bounds.clear();
    cache.ep_chunks.clear();
    // Stable counting sort of the pairs by expert.
    cache.offsets.assign(static_cast<size_t>(E + 1), 0);
    for (int64_t e = 0; e < E; ++e) cache.offsets[e + 1] = cache.offsets[e] + cache.expert_load[e];
    cache.sorted_pair.assign(static_cast<size_t>(P), 0);
    cache.pair_row.assign(static_cast<size_t>(P), 0);
    {
      std::vector<int64_t> cursor(cache.offsets.begin(), cache.offsets.end() - 1);
      for (int64_t p = 0; p < P; ++p) {
        const int64_t row = cursor[cache.expert_index[p]]++;
        cache.sorted_pair[row] = p;
        cache.pair_row[p] = row;
      }
    }

    // Gather rows and combine weights in sorted order.
    std::vector<T> xs(static_cast<size_t>(P * d)), scale(static_cast<size_t>(P));
#pragma omp parallel for schedule(static) if (P * d > (1 << 14))
    for (int64_t row = 0; row < P; ++row) {
      const int64_t p = cache.sorted_pair[row];
      std::copy_n(x + (p / K) * d, d, xs.data() + row * d);
      scale[row] = cache.combine[p];
    }

    section.emplace(profile::Op::kGemmExpert, 3 * profile::linear_flops(P, I, d));
    cache.gate_pre.assign(static_cast<size_t>(P * I), T(0));
    cache.up_pre.assign(static_cast<size_t>(P * I), T(0));
    std::vector<T> h(static_cast<size_t>(P * I));
    for (int64_t e = 0; e < E; ++e) {
      const int64_t begin = cache.offsets[e], n = cache.offsets[e + 1] - begin;
      expert_forward(xs.data() + begin * d, n, d, I, weights.w1[e], weights.w2[e], weights.w3[e],
                     scale.data() + begin, dims.swiglu_limit, dims.precision,
                     cache.gate_pre.data() + begin * I, cache.up_pre.data() + begin * I,
                     h.data() + begin * I, outs.data() + begin * d);
    }
    section.reset();
    shared_forward();
    combine_tokens(0, N);
  }

  // Sequence-wise balance loss (mean over the B sequences).
  section.emplace(profile::Op::kRouter);
  cache.balance_loss = 0.0;
  cache.balance_loss_active = balance_active(dims);
  if (cache.balance_loss_active) {
    std::vector<double> freq;
    const std::vector<MoeSequence> sequences = balance_ranges(dims);
    balance_frequencies(dims, sequences, cache.expert_index.data(), freq);
    const int64_t B = static_cast<int64_t>(sequences.size());
    std::vector<double> per_seq(static_cast<size_t>(B), 0.0);
#pragma omp parallel for schedule(static) if (B > 1 && N * E > (1 << 12))
    for (int64_t b = 0; b < B; ++b) {
      const int64_t row = sequences[static_cast<size_t>(b)].row;
      const int64_t S = sequences[static_cast<size_t>(b)].len;
      std::vector<double> prob(static_cast<size_t>(E), 0.0);
      for (int64_t t = row; t < row + S; ++t) {
        const T* s = cache.scores.data() + t * E;
        double total = 0.0;
        for (int64_t e = 0; e < E; ++e) total += static_cast<double>(s[e]);
        if (total <= 0.0) continue;
        for (int64_t e = 0; e < E; ++e) prob[e] += static_cast<double>(s[e]) / total;
      }
      double loss = 0.0;
      for (int64_t e = 0; e < E; ++e) loss += freq[b * E + e] * prob[e] / static_cast<double>(S);
      per_seq[b] = dims.balance_loss_weight * loss;
    }
    double total = 0.0;
    for (int64_t b = 0; b < B; ++b) total += per_seq[b];
    cache.balance_loss = B > 0 ? total / static_cast<double>(B) : 0.0;
  }
}

template <class T>
void moe_backward(const MoeDims& dims, const MoeWeights<T>& weights, const MoeCache<T>& cache,
                  const T* dy, T d_balance_loss, MoeGrads<T>& grads, T* dx,
                  const MoeParallel* parallel) {
  validate_dims(dims);
  validate_weights(dims, weights, parallel);
  const int64_t N = dims.tokens(), d = dims.hidden, E = dims.n_experts, K = dims.top_k,
                I = dims.inter;
  const int64_t P = N * K;
  if (!dy) throw moe_error("null output gradient", "moe.dy");
  if (static_cast<int64_t>(cache.expert_index.size()) != P ||
      static_cast<int64_t>(cache.x.size()) != N * d ||
      static_cast<int64_t>(cache.pair_row.size()) != P ||
      (!cache.expert_parallel && static_cast<int64_t>(cache.gate_pre.size()) != P * I))
    throw moe_error("cache does not match the dims (run moe_forward first)", "moe.cache");
  if (cache.expert_parallel != (parallel != nullptr))
    throw moe_error(parallel ? "expert-parallel backward of a local forward"
                             : "local backward of an expert-parallel forward",
                    "moe.parallel");
  const auto expert_grad_of = [&](const std::vector<T*>& v, int64_t e) -> T* {
    if (v.empty()) return nullptr;
    if (static_cast<int64_t>(v.size()) != E)
      throw moe_error("expert gradient vector must be empty or have n_experts entries",
                      "moe.grads");
    return v[e];
  };
  const auto expert_grad = [&](int which, int64_t e) -> T* {
    return expert_grad_of(which == 0 ? grads.w1 : which == 1 ? grads.w2 : grads.w3, e);
  };
  const T* x = cache.x.data();
  const bool shared = has_shared(weights);

  // Router gradient inputs: the balance-loss frequencies and every token's sequence.
  std::vector<double> freq;
  const bool balance = cache.balance_loss_active && d_balance_loss != T(0);
  const std::vector<MoeSequence> sequences =
      balance ? balance_ranges(dims) : std::vector<MoeSequence>{};
  std::vector<int64_t> sequence_of(balance ? static_cast<size_t>(N) : 0, -1);  // −1: in none
  if (balance) {
    balance_frequencies(dims, sequences, cache.expert_index.data(), freq);
    for (size_t i = 0; i < sequences.size(); ++i)
      std::fill_n(sequence_of.begin() + sequences[i].row, sequences[i].len,
                  static_cast<int64_t>(i));
  }
  const double gamma = dims.routed_scaling;
  std::vector<T> dlogits(static_cast<size_t>(N * E), T(0));
  // dxs [P, d] / dscale [P]: gradients w.r.t. each pair's input row and combine
  // weight, at row cache.pair_row[p].
  std::vector<T> dxs, dscale;

  // Shared expert writes dx first; routed contributions are added per token in slot order.
  const auto shared_backward = [&] {
    if (shared) {
      TREX_PROFILE(profile::Op::kGemmShared, 3 * profile::linear_backward_flops(N, I, d));
      std::vector<T> hs(static_cast<size_t>(N * I)), dhs(static_cast<size_t>(N * I)),
          dgs(static_cast<size_t>(N * I)), dvs(static_cast<size_t>(N * I));
      expert_backward(x, N, d, I, weights.shared_w1, weights.shared_w2, weights.shared_w3,
                      static_cast<const T*>(nullptr), dims.swiglu_limit, dims.precision,
                      cache.shared_gate_pre.data(), cache.shared_up_pre.data(), dy, hs.data(),
                      dhs.data(), dgs.data(), dvs.data(), dx, grads.shared_w1, grads.shared_w2,
                      grads.shared_w3, static_cast<T*>(nullptr));
    } else if (dx) {
      std::fill_n(dx, N * d, T(0));
    }
  };
  // Tokens [begin, end): routed dx rows in slot order, then dw -> ds (selected
  // experts, through the normalisation) plus the balance loss -> ds (all
  // experts), then dℓ = ds·σ(ℓ)/(2s).
  const auto finish_tokens = [&](int64_t begin, int64_t end) {
    if (dx) {
      TREX_PROFILE(profile::Op::kCombine);
#pragma omp parallel for schedule(static) if ((end - begin) * d > (1 << 14))
      for (int64_t t = begin; t < end; ++t) {
        T* dxt = dx + t * d;
        for (int64_t k = 0; k < K; ++k) {
          const T* src = dxs.data() + cache.pair_row[t * K + k] * d;
          for (int64_t i = 0; i < d; ++i) dxt[i] += src[i];
        }
      }
    }
    TREX_PROFILE(profile::Op::kRouter);
#pragma omp parallel if ((end - begin) * E > (1 << 12))
    {
      std::vector<double> ds(static_cast<size_t>(E));
#pragma omp for schedule(static)
      for (int64_t t = begin; t < end; ++t) {
        std::fill(ds.begin(), ds.end(), 0.0);
        const T* s = cache.scores.data() + t * E;
        const int32_t* idx = cache.expert_index.data() + t * K;
        double dw[64];
        std::vector<double> dw_big;
        double* dwp = dw;
        if (K > 64) {
          dw_big.resize(static_cast<size_t>(K));
          dwp = dw_big.data();
        }
        for (int64_t k = 0; k < K; ++k)
          dwp[k] = static_cast<double>(dscale[cache.pair_row[t * K + k]]);
        if (dims.norm_topk_prob) {
          double denom = 0.0, dot = 0.0;
          for (int64_t k = 0; k < K; ++k) {
            denom += static_cast<double>(s[idx[k]]);
            dot += dwp[k] * static_cast<double>(cache.combine[t * K + k]);
          }
          if (denom > 0.0)
            for (int64_t k = 0; k < K; ++k) ds[idx[k]] += (gamma * dwp[k] - dot) / denom;
        } else {
          for (int64_t k = 0; k < K; ++k) ds[idx[k]] += gamma * dwp[k];
        }
        const int64_t b = balance ? sequence_of[t] : -1;
        if (b >= 0) {
          double total = 0.0;
          for (int64_t e = 0; e < E; ++e) total += static_cast<double>(s[e]);
          if (total > 0.0) {
            // dL/ds'_{e,t} = α f_{b,e} / (T_b·B) · dL_bal; s' = s/Σs.
            const double coef = dims.balance_loss_weight * static_cast<double>(d_balance_loss) /
                                (static_cast<double>(sequences[static_cast<size_t>(b)].len) *
                                 static_cast<double>(sequences.size()));
            double dot = 0.0;
            for (int64_t e = 0; e < E; ++e)
              dot += coef * freq[b * E + e] * static_cast<double>(s[e]) / total;
            for (int64_t e = 0; e < E; ++e) ds[e] += (coef * freq[b * E + e] - dot) / total;
          }
        }
        for (int64_t e = 0; e < E; ++e) {
          if (ds[e] == 0.0) continue;
          dlogits[t * E + e] = static_cast<T>(
              ds[e] * sqrt_softplus(static_cast<double>(cache.logits[t * E + e])).derivative);
        }
      }
    }
  };

  if (parallel) {
    ep_backward(dims, weights, *parallel, cache, dy, expert_grad, dxs, dscale, shared_backward,
                finish_tokens);
  } else {
    // Routed experts, grouped: gather x and dy rows in sorted order.
    std::optional<profile::Scope> section(std::in_place, profile::Op::kDispatch);
    std::vector<T> xs(static_cast<size_t>(P * d)), dys(static_cast<size_t>(P * d)),
        scale(static_cast<size_t>(P));
#pragma omp parallel for schedule(static) if (P * d > (1 << 14))
    for (int64_t row = 0; row < P; ++row) {
      const int64_t p = cache.sorted_pair[row];
      std::copy_n(x + (p / K) * d, d, xs.data() + row * d);
      std::copy_n(dy + (p / K) * d, d, dys.data() + row * d);
      scale[row] = cache.combine[p];
    }
    section.emplace(profile::Op::kGemmExpert, 3 * profile::linear_backward_flops(P, I, d));
    std::vector<T> h(static_cast<size_t>(P * I)), dh(static_cast<size_t>(P * I)),
        dg(static_cast<size_t>(P * I)), dv(static_cast<size_t>(P * I));
    dxs.assign(dx ? static_cast<size_t>(P * d) : 0, T(0));
    dscale.assign(static_cast<size_t>(P), T(0));
    for (int64_t e = 0; e < E; ++e) {
      const int64_t begin = cache.offsets[e], n = cache.offsets[e + 1] - begin;
      expert_backward(xs.data() + begin * d, n, d, I, weights.w1[e], weights.w2[e], weights.w3[e],
                      scale.data() + begin, dims.swiglu_limit, dims.precision,
                      cache.gate_pre.data() + begin * I, cache.up_pre.data() + begin * I,
                      dys.data() + begin * d, h.data() + begin * I, dh.data() + begin * I,
                      dg.data() + begin * I, dv.data() + begin * I,
                      dx ? dxs.data() + begin * d : nullptr, expert_grad(0, e), expert_grad(1, e),
                      expert_grad(2, e), dscale.data() + begin);
    }
    section.reset();
    shared_backward();
    finish_tokens(0, N);
  }
  {
    TREX_PROFILE(profile::Op::kGemmRouter, profile::linear_backward_flops(N, E, d));
    kernels::linear_backward(x, weights.gate, dlogits.data(), dx, grads.gate, N, E, d,
                             kernels::Precision::kF32, /*accumulate_dx=*/true);
  }
}

template <class T>
void update_router_bias(T* bias, const int64_t* load, int64_t n_experts, double speed) {
  if (n_experts <= 0) return;
  if (!bias || !load) throw moe_error("null bias or load", "moe.gate_bias");
  int64_t total = 0;
  for (int64_t e = 0; e < n_experts; ++e) total += load[e];
  for (int64_t e = 0; e < n_experts; ++e) {
    const int64_t scaled = load[e] * n_experts;  // load_e vs total/E, exactly
    if (scaled > total)
      bias[e] = static_cast<T>(static_cast<double>(bias[e]) - speed);
    else if (scaled < total)
      bias[e] = static_cast<T>(static_cast<double>(bias[e]) + speed);
  }
}

#define TREX_MOE_INSTANTIATE(T)                                                                \
  template void moe_forward<T>(const MoeDims&, const MoeWeights<T>&, const T*, const int64_t*, \
                               MoeCache<T>&, T*, bool, const MoeParallel*);                    \
  template void moe_backward<T>(const MoeDims&, const MoeWeights<T>&, const MoeCache<T>&,      \
                                const T*, T, MoeGrads<T>&, T*, const MoeParallel*);            \
  template void update_router_bias<T>(T*, const int64_t*, int64_t, double);

TREX_MOE_INSTANTIATE(float)
TREX_MOE_INSTANTIATE(double)
#undef TREX_MOE_INSTANTIATE

}  // namespace trex::model
