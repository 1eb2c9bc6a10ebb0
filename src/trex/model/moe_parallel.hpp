#pragma once
// Expert parallelism for the MoE block (docs/expert-parallel.md).
//
// Parameters stay replicated on every rank; EP shards the compute. Each EP rank
// routes its own tokens (router, top-k / hash, combine weights, balance loss and
// expert_load exactly as the local path), then every (token, slot) pair travels
// to the EP rank that owns its expert:
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
// Overlap: the tokens of the call are split into two halves (chunks). Both
// halves' dispatches are started at once; while half 1's rows are in flight the
// owner computes half 0, and while half 0's (then half 1's) outputs travel back
// it computes half 1 (then the shared expert). Every collective is started in
// the same order on every EP rank, as the communicator requires. Without
// overlap the call is one chunk and every exchange is waited for at once.
//
// Collective: every rank of the EP group must run the same MoE blocks in the
// same order with the same options (including overlap); token counts may differ.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace trex::parallel {
class Communicator;
}

namespace trex::model {

struct ModelConfig;

// Data sent by this rank in expert-parallel MoE calls, per MoE block and
// destination EP rank, accumulated over calls until reset (sends to itself
// included: they are copies, not network traffic).
struct ExpertTraffic {
  std::vector<std::vector<int64_t>> pairs;           // [block][rank] (token, slot) rows dispatched
  std::vector<std::vector<int64_t>> dispatch_bytes;  // [block][rank] forward token-row payload
  std::vector<std::vector<int64_t>> total_bytes;     // [block][rank] all exchanges of the
                                                     // forward and backward, counts included
  // Time blocked on the EP communicator (its stats().exposed_seconds), split
  // into the per-expert count exchange, a synchronisation point that also
  // absorbs the ranks' skew, and the waits for token rows, which overlap hides.
  double count_exchange_seconds = 0.0;
  double row_exchange_seconds = 0.0;
  void reset(size_t blocks, int ranks);
};

// The view of one MoE call.
struct MoeParallel {
  parallel::Communicator* comm = nullptr;  // the EP group
  const int* owner = nullptr;          // [n_experts] expert -> EP rank
  bool overlap = true;
  int64_t* pairs = nullptr;                  // [ranks] accumulated (nullable)
  int64_t* dispatch_bytes = nullptr;         // [ranks] accumulated (nullable)
  int64_t* total_bytes = nullptr;            // [ranks] accumulated (nullable)
  double* count_exchange_seconds = nullptr;  // accumulated (nullable), see ExpertTraffic
  double* row_exchange_seconds = nullptr;    // accumulated (nullable)
};

// What a Model needs to run its MoE blocks expert-parallel.
struct ExpertParallel {
  parallel::Communicator* comm = nullptr;   // ProcessGrid::ep(); not owned
  std::vector<std::vector<int>> owner;  // per MoE block (main layers, then MTP): expert -> rank
  bool overlap = true;
  ExpertTraffic traffic;

  // The view for MoE block `block`; throws trex::Error (field
  // "expert_parallel.owner") when the block has no valid map.
  MoeParallel block(int64_t block, int64_t n_experts);
};

// Expert e -> e / (E / ranks): contiguous equal shares (E divisible by ranks),
// otherwise the first E % ranks ranks take one expert more.
std::vector<int> contiguous_expert_owner(int64_t n_experts, int ranks);

// Throws trex::Error (field `field`) unless owner has n_experts entries in [0, ranks).
void validate_expert_owner(std::span<const int> owner, int64_t n_experts, int ranks,
                           const std::string& field);

// A fingerprint (FNV-1a) of an expert map: EP ranks compare theirs on every call.
uint64_t expert_map_fingerprint(std::span<const int> owner);

// A context over `comm` with the contiguous map on every MoE block of `config`
// (num_hidden_layers + num_nextn_predict_layers blocks) and zeroed traffic.
ExpertParallel make_expert_parallel(const ModelConfig& config, parallel::Communicator& comm,
                                    bool overlap = true);

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
};

// Throws trex::Error (field "expert_parallel.owner") when a rank sent rows for
// an expert `owner` does not give to `self` (the EP ranks' maps disagree).
ReceivePlan plan_receive(std::span<const int64_t> recv_counts, int ranks, int64_t n_experts,
                         const int* owner, int self);

}  // namespace trex::model
