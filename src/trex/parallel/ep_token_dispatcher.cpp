#include "trex/parallel/ep_token_dispatcher.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include "trex/core/profile.hpp"
#include "trex/model/moe_types.hpp"
#include "trex/parallel/communicator.hpp"

namespace trex::parallel {
namespace {

using kernels::Tensor;
using model::moe_error;

// What the backward needs from the forward: the send order and, per chunk,
// the receive layout and the rows this rank computed for its experts.
template <class T>
struct EpDispatchState final : model::DispatchState {
  struct Chunk {
    ReceivePlan recv;
    std::vector<T> xs;     // [rows, d] grouped input rows
    std::vector<T> scale;  // [rows] their combine weights
  };
  std::vector<int64_t> sorted_pair;  // [P] send row -> pair (DispatchPlan)
  std::vector<int64_t> pair_row;     // [P] pair -> send row
  std::vector<int64_t> rows;         // [chunks][ranks] pairs sent per chunk and rank
  std::vector<int64_t> chunk_row;    // [chunks + 1] first send row of each chunk
  std::vector<int64_t> bounds;       // [chunks + 1] first token of each chunk
  std::vector<Chunk> chunks;
};

// Requests in flight on the EP communicator. Waits for every one still running
// on scope exit, so an exception never frees a buffer a transfer still uses
// (errors on that path are dropped in favour of the one propagating).
class InFlight {
 public:
  InFlight() = default;
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() {
    for (parallel::Request& r : requests_) {
      try {
        r.wait();
      } catch (...) {
      }
    }
  }
  // Starts tracking `request`; with `immediately` (no overlap) waits for it now.
  size_t add(parallel::Request request, bool immediately) {
    requests_.push_back(std::move(request));
    const size_t id = requests_.size() - 1;
    if (immediately) wait(id);
    return id;
  }
  void wait(size_t id) {
    parallel::Request done;  // a default Request is complete: waiting on it again is free
    std::swap(done, requests_[id]);
    done.wait();
  }

 private:
  std::vector<parallel::Request> requests_;
};

// rows[r]·width elements per rank.
std::vector<int64_t> scaled_counts(const int64_t* rows, int ranks, int64_t width) {
  std::vector<int64_t> out(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) out[r] = rows[r] * width;
  return out;
}

}  // namespace

template <class T>
bool EpTokenDispatcher<T>::runs_expert(int64_t expert) const {
  // Without a group or map every expert counts; forward and backward refuse the call.
  if (!view_.comm || !view_.owner) return true;
  return view_.owner[expert] == view_.comm->rank();
}

// Routing is done (tokens.expert_index, tokens.combine): fills the state's
// send order and chunks, writes the w-scaled expert output of pair p to
// outs[pair_row[p]], runs compute.local() while the last transfers are in
// flight and combines each chunk's tokens once its outputs are back.
template <class T>
void EpTokenDispatcher<T>::forward(const model::RoutedTokens<T>& tokens,
                                   model::ExpertForwardCompute<T>& compute,
                                   std::unique_ptr<model::DispatchState>& state, T* y) {
  const MoeParallel& par = view_;
  if (!par.comm) throw moe_error("expert-parallel call without a communicator", "moe.parallel");
  Communicator& comm = *par.comm;
  const int R = comm.size(), self = comm.rank();
  const int64_t N = tokens.tokens, d = tokens.hidden, E = tokens.n_experts, K = tokens.top_k;
  const int64_t wx = d + 1;  // a token row and its combine weight
  const parallel::DType type = parallel::dtype_of<T>();
  if (!par.owner) throw moe_error("expert-parallel call without an expert map", "moe.parallel");
  validate_expert_owner(std::span<const int>(par.owner, static_cast<size_t>(E)), E, R,
                        "expert_parallel.owner");

  std::optional<profile::Scope> section(std::in_place, profile::Op::kDispatch);
  EpDispatchState<T>& s = model::dispatch_state<EpDispatchState<T>>(state);
  s.bounds = chunk_bounds(N, par.overlap);
  const int64_t C = static_cast<int64_t>(s.bounds.size()) - 1;
  DispatchPlan plan = plan_dispatch(tokens.expert_index, N, K, E, par.owner, R, s.bounds);
  s.pair_row = std::move(plan.pair_row);
  s.sorted_pair = std::move(plan.sorted_pair);
  s.rows = plan.rows;
  s.chunk_row = plan.chunk_row;

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
                  parallel::DType::kI64);
  const double exposed_rows = comm.stats().exposed_seconds;
  if (par.count_exchange_seconds) *par.count_exchange_seconds += exposed_rows - exposed_before;
  for (int src = 0; src < R; ++src) {
    const int64_t* in = recv_counts.data() + src * block;
    if (in[0] != fingerprint || in[1] != C || in[2] != E)
      throw moe_error("EP rank " + std::to_string(src) + " runs this MoE block with another " +
                          (in[1] != C ? std::string("overlap setting") : "expert map") +
                          " than rank " + std::to_string(self),
                      "expert_parallel.owner");
  }
  s.chunks.assign(static_cast<size_t>(C), {});
  std::vector<int64_t> slice(static_cast<size_t>(R * E));
  for (int64_t c = 0; c < C; ++c) {
    for (int src = 0; src < R; ++src)
      std::copy_n(recv_counts.begin() + src * block + kHeader + c * E, E, slice.begin() + src * E);
    s.chunks[c].recv = plan_receive(slice, R, E, par.owner, self);
  }

  // Token rows in send order: x, then the combine weight.
  const kernels::Backend& ops = tokens.ops();
  std::vector<T> send(static_cast<size_t>(N * K * wx));
  ops.moe_permute(K, Tensor::of(tokens.x, {N, d}), Tensor::of(s.sorted_pair.data(), {N * K}),
                  Tensor::of(tokens.combine, {N, K}), Tensor::of(send.data(), {N * K, wx}),
                  Tensor());
  // outs: the w-scaled output of pair p's expert at row s.pair_row[p].
  std::vector<T> outs(static_cast<size_t>(N * K * d));
  std::vector<std::vector<T>> recv(static_cast<size_t>(C)), back(static_cast<size_t>(C));
  std::vector<std::vector<int64_t>> send_wx(C), recv_wx(C), send_d(C), recv_d(C);
  for (int64_t c = 0; c < C; ++c) {
    const int64_t* to = s.rows.data() + c * R;
    const int64_t* from = s.chunks[c].recv.from_rank.data();
    send_wx[c] = scaled_counts(to, R, wx);
    recv_wx[c] = scaled_counts(from, R, wx);
    send_d[c] = scaled_counts(to, R, d);
    recv_d[c] = scaled_counts(from, R, d);
    recv[c].resize(static_cast<size_t>(s.chunks[c].recv.total() * wx));
    back[c].resize(static_cast<size_t>(s.chunks[c].recv.total() * d));
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
    dispatch[c] = flight.add(comm.iall_to_all(send.data() + s.chunk_row[c] * wx, send_wx[c],
                                              recv[c].data(), recv_wx[c], type),
                             !par.overlap);

  // Owner side, chunk by chunk: group the received rows by expert, run the
  // experts, send the outputs back while the next chunk computes.
  for (int64_t c = 0; c < C; ++c) {
    section.emplace(profile::Op::kDispatch);
    flight.wait(dispatch[c]);
    typename EpDispatchState<T>::Chunk& ch = s.chunks[c];
    const ReceivePlan& rp = ch.recv;
    const int64_t n = rp.total();
    ch.xs.resize(static_cast<size_t>(n * d));
    ch.scale.resize(static_cast<size_t>(n));
    const Tensor grouped_row = Tensor::of(rp.grouped_row.data(), {n});
    ops.unpack_rows(Tensor::of(recv[c].data(), {n, wx}), grouped_row,
                    Tensor::of(ch.xs.data(), {n, d}), Tensor::of(ch.scale.data(), {n}));
    section.reset();
    std::vector<T> out(static_cast<size_t>(n * d));
    compute.experts(c, {rp.offsets_tensor(), n, ch.xs.data(), ch.scale.data()}, out.data());
    section.emplace(profile::Op::kCombine);
    ops.pack_rows(Tensor::of(out.data(), {n, d}), Tensor(), grouped_row,
                  Tensor::of(back[c].data(), {n, d}));
    returned[c] = flight.add(comm.iall_to_all(back[c].data(), recv_d[c],
                                              outs.data() + s.chunk_row[c] * d, send_d[c], type),
                             !par.overlap);
  }
  section.reset();
  compute.local();
  for (int64_t c = 0; c < C; ++c) {
    TREX_PROFILE(profile::Op::kCombine);
    flight.wait(returned[c]);
    const int64_t first = s.bounds[c], count = s.bounds[c + 1] - first;
    ops.moe_unpermute(Tensor::of(outs.data(), {N * K, d}),
                      Tensor::of(s.pair_row.data() + first * K, {count, K}),
                      Tensor::of(y + first * d, {count, d}));
  }
  if (par.row_exchange_seconds)
    *par.row_exchange_seconds += comm.stats().exposed_seconds - exposed_rows;
}

// dy rows to the owners, expert backward there (weight gradients of owned
// experts), dx rows and d(combine weight) back; compute.local() runs while the
// dy rows travel, then each chunk's tokens are combined and finished once back.
template <class T>
void EpTokenDispatcher<T>::backward(const model::RoutedTokens<T>& tokens,
                                    const model::DispatchState& state, const T* dy,
                                    model::ExpertBackwardCompute<T>& compute, T* dx, T* d_combine) {
  const MoeParallel& par = view_;
  const auto* s = dynamic_cast<const EpDispatchState<T>*>(&state);
  if (!s)
    throw moe_error("expert-parallel backward of a forward that another token dispatcher ran",
                    "moe.parallel");
  if (!par.comm) throw moe_error("expert-parallel call without a communicator", "moe.parallel");
  Communicator& comm = *par.comm;
  const int R = comm.size();
  const int64_t N = tokens.tokens, d = tokens.hidden, K = tokens.top_k;
  const int64_t P = tokens.pairs(), wx = d + 1;
  const parallel::DType type = parallel::dtype_of<T>();
  const int64_t C = static_cast<int64_t>(s->chunks.size());
  if (C != (par.overlap ? 2 : 1) || static_cast<int64_t>(s->rows.size()) != C * R ||
      static_cast<int64_t>(s->bounds.size()) != C + 1)
    throw moe_error("expert-parallel backward does not match its forward (group or overlap)",
                    "moe.parallel");
  if (static_cast<int64_t>(s->pair_row.size()) != P)
    throw moe_error("cache does not match the dims (run moe_forward first)", "moe.cache");
  // dxs [P, d], d_sent [P]: the input gradient of each pair's row and of its
  // combine weight, at its send row.
  std::vector<T> dxs(static_cast<size_t>(P * d), T(0)), d_sent(static_cast<size_t>(P), T(0));

  std::optional<profile::Scope> section(std::in_place, profile::Op::kDispatch);
  const double exposed_before = comm.stats().exposed_seconds;
  const kernels::Backend& ops = tokens.ops();
  std::vector<T> send(static_cast<size_t>(P * d));
  ops.moe_permute(K, Tensor::of(dy, {N, d}), Tensor::of(s->sorted_pair.data(), {P}), Tensor(),
                  Tensor::of(send.data(), {P, d}), Tensor());
  std::vector<T> result(static_cast<size_t>(P * wx));
  std::vector<std::vector<T>> recv(static_cast<size_t>(C)), back(static_cast<size_t>(C));
  std::vector<std::vector<int64_t>> send_wx(C), recv_wx(C), send_d(C), recv_d(C);
  for (int64_t c = 0; c < C; ++c) {
    const int64_t* to = s->rows.data() + c * R;
    const int64_t* from = s->chunks[c].recv.from_rank.data();
    send_wx[c] = scaled_counts(to, R, wx);
    recv_wx[c] = scaled_counts(from, R, wx);
    send_d[c] = scaled_counts(to, R, d);
    recv_d[c] = scaled_counts(from, R, d);
    recv[c].resize(static_cast<size_t>(s->chunks[c].recv.total() * d));
    back[c].resize(static_cast<size_t>(s->chunks[c].recv.total() * wx));
    // dy rows out, dx rows (and d weight) back to their sources.
    if (par.total_bytes)
      for (int r = 0; r < R; ++r)
        par.total_bytes[r] += (to[r] * d + from[r] * wx) * static_cast<int64_t>(sizeof(T));
  }
  InFlight flight;  // declared after the buffers: destroyed (waited) first
  std::vector<size_t> dispatch(static_cast<size_t>(C)), returned(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c)
    dispatch[c] = flight.add(comm.iall_to_all(send.data() + s->chunk_row[c] * d, send_d[c],
                                              recv[c].data(), recv_d[c], type),
                             !par.overlap);
  section.reset();
  compute.local();

  for (int64_t c = 0; c < C; ++c) {
    section.emplace(profile::Op::kDispatch);
    flight.wait(dispatch[c]);
    const typename EpDispatchState<T>::Chunk& ch = s->chunks[c];
    const ReceivePlan& rp = ch.recv;
    const int64_t n = rp.total();
    std::vector<T> dys(static_cast<size_t>(n * d));
    const Tensor grouped_row = Tensor::of(rp.grouped_row.data(), {n});
    ops.unpack_rows(Tensor::of(recv[c].data(), {n, d}), grouped_row, Tensor::of(dys.data(), {n, d}),
                    Tensor());
    section.reset();
    std::vector<T> dxg(static_cast<size_t>(n * d)), dsg(static_cast<size_t>(n), T(0));
    compute.experts(c, {rp.offsets_tensor(), n, ch.xs.data(), ch.scale.data()}, dys.data(),
                    dxg.data(), dsg.data());
    section.emplace(profile::Op::kCombine);
    ops.pack_rows(Tensor::of(dxg.data(), {n, d}), Tensor::of(dsg.data(), {n}), grouped_row,
                  Tensor::of(back[c].data(), {n, wx}));
    returned[c] =
        flight.add(comm.iall_to_all(back[c].data(), recv_wx[c],
                                    result.data() + s->chunk_row[c] * wx, send_wx[c], type),
                   !par.overlap);
  }
  for (int64_t c = 0; c < C; ++c) {
    section.emplace(profile::Op::kCombine);
    flight.wait(returned[c]);
    // The chunk's send rows back: dx rows to dxs, each weight gradient to its pair.
    const int64_t row = s->chunk_row[c], rows = s->chunk_row[c + 1] - row;
    const int64_t first = s->bounds[c], count = s->bounds[c + 1] - first;
    ops.unpack_rows(Tensor::of(result.data() + row * wx, {rows, wx}), Tensor(),
                    Tensor::of(dxs.data() + row * d, {rows, d}),
                    Tensor::of(d_sent.data() + row, {rows}));
    ops.gather_rows(Tensor::of(d_sent.data(), {P, 1}),
                    Tensor::of(s->pair_row.data() + first * K, {count * K}),
                    Tensor::of(d_combine + first * K, {count * K, 1}));
    section.reset();
    if (dx)
      ops.moe_unpermute(Tensor::of(dxs.data(), {P, d}),
                        Tensor::of(s->pair_row.data() + first * K, {count, K}),
                        Tensor::of(dx + first * d, {count, d}));
    compute.tokens_done(first, s->bounds[c + 1]);
  }
  if (par.row_exchange_seconds)
    *par.row_exchange_seconds += comm.stats().exposed_seconds - exposed_before;
}

template class EpTokenDispatcher<float>;
template class EpTokenDispatcher<double>;

std::vector<int64_t> chunk_bounds(int64_t tokens, bool overlap) {
  if (!overlap) return {0, tokens};
  return {0, tokens / 2, tokens};
}

DispatchPlan plan_dispatch(const int32_t* expert_index, int64_t tokens, int64_t top_k,
                           int64_t n_experts, const int* owner, int ranks,
                           std::span<const int64_t> chunk_begin) {
  const int64_t C = static_cast<int64_t>(chunk_begin.size()) - 1, E = n_experts, K = top_k;
  const int64_t P = tokens * K;
  if (C < 1 || chunk_begin.front() != 0 || chunk_begin.back() != tokens)
    throw expert_parallel_error("chunks must cover the tokens", "expert_parallel.chunks");
  for (int64_t c = 0; c < C; ++c)
    if (chunk_begin[c + 1] < chunk_begin[c])
      throw expert_parallel_error("chunk bounds must ascend", "expert_parallel.chunks");
  DispatchPlan plan;
  plan.ranks = ranks;
  plan.chunks = C;
  plan.n_experts = E;
  plan.counts.assign(static_cast<size_t>(ranks * C * E), 0);
  plan.rows.assign(static_cast<size_t>(C * ranks), 0);
  plan.chunk_row.assign(static_cast<size_t>(C + 1), 0);
  plan.pair_row.assign(static_cast<size_t>(P), 0);
  plan.sorted_pair.assign(static_cast<size_t>(P), 0);
  const auto count_at = [&](int r, int64_t c, int64_t e) -> int64_t& {
    return plan.counts[static_cast<size_t>((r * C + c) * E + e)];
  };
  for (int64_t c = 0; c < C; ++c)
    for (int64_t p = chunk_begin[c] * K; p < chunk_begin[c + 1] * K; ++p) {
      const int32_t e = expert_index[p];
      if (e < 0 || e >= E)
        throw expert_parallel_error("expert index out of range", "moe.expert_index");
      ++count_at(owner[e], c, e);
    }
  // Start row of every (chunk, rank, expert) block in the send buffer.
  std::vector<int64_t> cursor(static_cast<size_t>(C * ranks * E), 0);
  int64_t row = 0;
  for (int64_t c = 0; c < C; ++c) {
    plan.chunk_row[c] = row;
    for (int r = 0; r < ranks; ++r) {
      const int64_t first = row;
      for (int64_t e = 0; e < E; ++e) {
        cursor[static_cast<size_t>((c * ranks + r) * E + e)] = row;
        row += count_at(r, c, e);
      }
      plan.rows[static_cast<size_t>(c * ranks + r)] = row - first;
    }
  }
  plan.chunk_row[C] = row;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t p = chunk_begin[c] * K; p < chunk_begin[c + 1] * K; ++p) {
      const int32_t e = expert_index[p];
      const int64_t at = cursor[static_cast<size_t>((c * ranks + owner[e]) * E + e)]++;
      plan.pair_row[p] = at;
      plan.sorted_pair[at] = p;
    }
  return plan;
}

ReceivePlan plan_receive(std::span<const int64_t> recv_counts, int ranks, int64_t n_experts,
                         const int* owner, int self) {
  const int64_t E = n_experts;
  if (static_cast<int64_t>(recv_counts.size()) != ranks * E)
    throw expert_parallel_error("received counts have the wrong size", "expert_parallel.counts");
  ReceivePlan plan;
  plan.from_rank.assign(static_cast<size_t>(ranks), 0);
  plan.offsets.assign(static_cast<size_t>(E + 1), 0);
  for (int s = 0; s < ranks; ++s)
    for (int64_t e = 0; e < E; ++e) {
      const int64_t n = recv_counts[static_cast<size_t>(s * E + e)];
      if (n < 0) throw expert_parallel_error("negative row count", "expert_parallel.counts");
      if (n > 0 && owner[e] != self)
        throw expert_parallel_error("rank " + std::to_string(s) + " sent " + std::to_string(n) +
                                        " rows of expert " + std::to_string(e) + " to rank " +
                                        std::to_string(self) + ", which the map gives to rank " +
                                        std::to_string(owner[e]) + " (the EP ranks' maps disagree)",
                                    "expert_parallel.owner");
      plan.from_rank[s] += n;
      plan.offsets[e + 1] += n;
    }
  for (int64_t e = 0; e < E; ++e) plan.offsets[e + 1] += plan.offsets[e];
  const int64_t total = plan.offsets[E];
  plan.grouped_row.assign(static_cast<size_t>(total), 0);
  plan.expert.assign(static_cast<size_t>(total), 0);
  std::vector<int64_t> cursor(plan.offsets.begin(), plan.offsets.end() - 1);
  int64_t received = 0;
  for (int s = 0; s < ranks; ++s)
    for (int64_t e = 0; e < E; ++e)
      for (int64_t i = 0; i < recv_counts[static_cast<size_t>(s * E + e)]; ++i) {
        const int64_t g = cursor[e]++;
        plan.grouped_row[received++] = g;
        plan.expert[g] = static_cast<int32_t>(e);
      }
  return plan;
}

}  // namespace trex::parallel
