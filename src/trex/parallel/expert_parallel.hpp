#pragma once
// Expert parallelism for the MoE blocks (docs/expert-parallel.md): the expert
// maps, the per-call view a block dispatches through, the traffic counters,
// and the context a Model's blocks share. The dispatch itself is
// ep_token_dispatcher.hpp.
//
// Parameters may stay replicated on every rank; EP shards the compute: every
// EP rank routes its own tokens, and each (token, slot) pair's row travels to
// the EP rank that owns its expert (the map: expert -> EP rank, per MoE block).
//
// Collective: every rank of the EP group must run the same MoE blocks in the
// same order with the same options (including overlap); token counts may differ.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "trex/core/error.hpp"

namespace trex::model {
struct ModelConfig;
}

namespace trex::parallel {

class Communicator;

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
  Communicator* comm = nullptr;  // the EP group
  const int* owner = nullptr;    // [n_experts] expert -> EP rank
  bool overlap = true;
  int64_t* pairs = nullptr;                  // [ranks] accumulated (nullable)
  int64_t* dispatch_bytes = nullptr;         // [ranks] accumulated (nullable)
  int64_t* total_bytes = nullptr;            // [ranks] accumulated (nullable)
  double* count_exchange_seconds = nullptr;  // accumulated (nullable), see ExpertTraffic
  double* row_exchange_seconds = nullptr;    // accumulated (nullable)
};

// What a Model needs to run its MoE blocks expert-parallel (through
// EpTokenDispatchers, ep_token_dispatcher.hpp).
struct ExpertParallel {
  Communicator* comm = nullptr;         // ProcessGrid::ep(); not owned
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
ExpertParallel make_expert_parallel(const model::ModelConfig& config, Communicator& comm,
                                    bool overlap = true);

// trex::Error "expert parallel: <message>" naming `field`.
Error expert_parallel_error(const std::string& message, const std::string& field);

}  // namespace trex::parallel
