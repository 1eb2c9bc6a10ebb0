#pragma once
// Reduce-scatter and all-gather of blocks of different sizes (the ZeRO shards
// are whole tensors, so their sizes differ) on a communicator that takes one
// count for every rank (Communicator::equal_counts_only, NCCL's model): each
// rank's block travels padded with zeros to the largest block, and the
// padding is dropped on arrival. Sums are unchanged (the padding adds zeros
// that nobody keeps).
#include <cstdint>
#include <span>
#include <vector>

#include "trex/parallel/communicator.hpp"

namespace trex::parallel {

// One reduce-scatter in flight: `send` holds Σ counts floats, rank-major
// (as Communicator::ireduce_scatter); this rank's reduced block lands in
// `recv` (counts[rank] floats) when copy_out() runs after completion.
class PaddedReduceScatter {
 public:
  PaddedReduceScatter(Communicator& comm, const float* send, float* recv,
                      std::span<const int64_t> counts);
  Request& request() { return request_; }
  // After request() completed: this rank's block into `recv`.
  void copy_out();
  // Floats staged (padded send + receive block): the cost of padding.
  int64_t staged() const { return static_cast<int64_t>(send_.size() + recv_block_.size()); }

 private:
  std::vector<float> send_, recv_block_;
  float* recv_ = nullptr;
  int64_t mine_ = 0;
  Request request_;
};

// All-gather of rank r's counts[r] floats (`send`) into `recv` (rank-major,
// Σ counts) in rounds of at most `round_elements` per rank, so no message (and
// no staging buffer) holds more than size() · round_elements floats: on an
// equal-count communicator each round's blocks are padded to one count,
// otherwise each rank sends what it has left (no padding). Blocking. `send`
// may be this rank's own block of `recv` (each round stages its piece first).
void all_gather_in_rounds(Communicator& comm, const float* send, float* recv,
                          std::span<const int64_t> counts,
                          int64_t round_elements = int64_t{1} << 22);
// The same for 16-bit values (bf16 parameters, DType::kBF16): half the bytes.
void all_gather_in_rounds(Communicator& comm, const uint16_t* send, uint16_t* recv,
                          std::span<const int64_t> counts,
                          int64_t round_elements = int64_t{1} << 22);
// The same, always padded (what an equal-count communicator needs).
void all_gather_padded(Communicator& comm, const float* send, float* recv,
                       std::span<const int64_t> counts, int64_t round_elements = int64_t{1} << 22);

}  // namespace trex::parallel
