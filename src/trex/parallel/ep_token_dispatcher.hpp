#pragma once
// The expert-parallel token dispatcher (model/token_dispatcher.hpp) over an EP
// group (docs/expert-parallel.md). Each EP rank routes its own tokens (router,
// top-k / hash, combine weights, balance loss and expert_load exactly as the
// local path), then every (token, slot) pair travels to the EP rank that owns
// its expert:
//
//   1. per-expert pair counts are exchanged (one all-to-all of int64; they also
//      tell the owner which expert every received row belongs to, since the rows
//      to one rank are ordered by expert);
//   2. token rows (x and the combine weight) go to the owners by all-to-all(v);
//   3. owners run their experts grouped over the rows of every rank (expert
//      ascending, then source rank, then the source's pair order);
//   4. the expert outputs go back by all-to-all(v) and are combined per token in
//      slot order, exactly as in the local path (the shared expert stays local).
//
// Backward mirrors it: dy rows to the owners, expert backward there (the weight
// gradients of an expert accumulate only on its owner; they stay zero elsewhere,
// and the data-group gradient sum spreads them), dx rows and d(combine weight)
// back to the source, which finishes the router backward locally.
//
// Overlap: the tokens of the call are split into two halves (chunks), each one
// group of expert rows. Both halves' dispatches are started at once; while half
// 1's rows are in flight the owner computes half 0, and while half 0's (then
// half 1's) outputs travel back it computes half 1 (then the shared expert).
// The backward finishes the router of half 0 while half 1's rows are still on
// their way back. Every collective is started in the same order on every EP
// rank, as the communicator requires. Without overlap the call is one chunk
// and every exchange is waited for at once.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "trex/model/token_dispatcher.hpp"
#include "trex/parallel/expert_parallel.hpp"

namespace trex::parallel {

// The dispatcher of one MoE call over view.comm with view.owner; accumulates
// the view's traffic counters.
template <class T>
class EpTokenDispatcher final : public model::TokenDispatcher<T> {
 public:
  explicit EpTokenDispatcher(const MoeParallel& view) : view_(view) {}
  bool runs_expert(int64_t expert) const override;
  void forward(const model::RoutedTokens<T>& tokens, model::ExpertForwardCompute<T>& compute,
               std::unique_ptr<model::DispatchState>& state, T* y) override;
  void backward(const model::RoutedTokens<T>& tokens, const model::DispatchState& state,
                const T* dy, model::ExpertBackwardCompute<T>& compute, T* dx,
                T* d_combine) override;

 private:
  MoeParallel view_;
};

// A Model's dispatchers over `context` (not owned): MoE block b dispatches
// with context.block(b, E), its map and traffic row.
template <class T>
class EpTokenDispatchers final : public model::TokenDispatchers<T> {
 public:
  explicit EpTokenDispatchers(ExpertParallel& context) : context_(context) {}
  std::unique_ptr<model::TokenDispatcher<T>> for_block(int64_t block, int64_t n_experts) override {
    return std::make_unique<EpTokenDispatcher<T>>(context_.block(block, n_experts));
  }

 private:
  ExpertParallel& context_;
};

// ---------------------------------------------------------------------------
// Dispatch bookkeeping (pure; exposed for tests).

// Send side of one call. Tokens are split into chunks [chunk_begin[c],
// chunk_begin[c+1]); the send buffer holds the pairs chunk-major, then by
// destination rank, then by expert (ascending), then in pair order (token·K + slot).
struct DispatchPlan {
  int ranks = 0;
  int64_t chunks = 0;
  int64_t n_experts = 0;
  std::vector<int64_t> counts;       // [ranks][chunks][E] pairs sent (rank-major: exchange layout)
  std::vector<int64_t> rows;         // [chunks][ranks] pairs sent per chunk and destination
  std::vector<int64_t> chunk_row;    // [chunks + 1] first send row of each chunk
  std::vector<int64_t> pair_row;     // [P] pair -> send row
  std::vector<int64_t> sorted_pair;  // [P] send row -> pair
};

DispatchPlan plan_dispatch(const int32_t* expert_index, int64_t tokens, int64_t top_k,
                           int64_t n_experts, const int* owner, int ranks,
                           std::span<const int64_t> chunk_begin);

// Token boundaries of the chunks of an N-token call: {0, N} or the two halves {0, N/2, N}.
std::vector<int64_t> chunk_bounds(int64_t tokens, bool overlap);

// Receive side of one chunk, from the per-expert counts every rank sent here
// (recv_counts [ranks][E] for this chunk). Received rows are rank-major; each
// source's rows are ordered by expert. The grouped layout is expert-major
// (ascending), then source rank, then arrival order.
struct ReceivePlan {
  std::vector<int64_t> from_rank;    // [ranks] rows received from each rank
  std::vector<int64_t> offsets;      // [E + 1] first grouped row of each expert
  std::vector<int64_t> grouped_row;  // [rows] received row -> grouped row
  std::vector<int32_t> expert;       // [rows] expert of each grouped row
  int64_t total() const { return static_cast<int64_t>(grouped_row.size()); }
  // The offsets as an op operand (host memory: the CPU backend's).
  kernels::Tensor offsets_tensor() const {
    return kernels::Tensor::of(offsets.data(), {static_cast<int64_t>(offsets.size())});
  }
};

// Throws trex::Error (field "expert_parallel.owner") when a rank sent rows for
// an expert `owner` does not give to `self` (the EP ranks' maps disagree).
ReceivePlan plan_receive(std::span<const int64_t> recv_counts, int ranks, int64_t n_experts,
                         const int* owner, int self);

}  // namespace trex::parallel
