#include "trex/parallel/padded_collectives.hpp"

#include <algorithm>

#include "trex/core/error.hpp"

namespace trex::parallel {

namespace {

int64_t largest(std::span<const int64_t> counts) {
  int64_t m = 0;
  for (int64_t c : counts) m = std::max(m, c);
  return m;
}

}  // namespace

PaddedReduceScatter::PaddedReduceScatter(Communicator& comm, const float* send, float* recv,
                                         std::span<const int64_t> counts)
    : recv_(recv) {
  if (static_cast<int>(counts.size()) != comm.size())
    throw Error("padded reduce-scatter: " + std::to_string(counts.size()) + " counts for " +
                std::to_string(comm.size()) + " ranks");
  const int64_t block = largest(counts);
  send_.assign(static_cast<size_t>(block) * counts.size(), 0.0f);
  recv_block_.assign(static_cast<size_t>(block), 0.0f);
  const float* from = send;
  for (size_t r = 0; r < counts.size(); ++r) {
    std::copy_n(from, counts[r], send_.begin() + static_cast<int64_t>(r) * block);
    from += counts[r];
  }
  mine_ = counts[static_cast<size_t>(comm.rank())];
  const std::vector<int64_t> equal(counts.size(), block);
  request_ =
      comm.ireduce_scatter(send_.data(), recv_block_.data(), equal, DType::kF32, ReduceOp::kSum);
}

void PaddedReduceScatter::copy_out() {
  std::copy_n(recv_block_.begin(), mine_, recv_);
  // The staging is not needed any more.
  std::vector<float>().swap(send_);
  std::vector<float>().swap(recv_block_);
}

namespace {

template <class T>
void gather_rounds(Communicator& comm, const T* send, T* recv, std::span<const int64_t> counts,
                   int64_t round_elements, bool pad, DType type) {
  if (static_cast<int>(counts.size()) != comm.size())
    throw Error("all-gather in rounds: " + std::to_string(counts.size()) + " counts for " +
                std::to_string(comm.size()) + " ranks");
  if (round_elements < 1) throw Error("all-gather in rounds: round_elements must be >= 1");
  const int64_t block = largest(counts);
  std::vector<int64_t> offsets(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  const int64_t mine = counts[static_cast<size_t>(comm.rank())];
  const int64_t round = std::min(block, round_elements);
  std::vector<T> out_block(static_cast<size_t>(round));
  std::vector<T> gathered(static_cast<size_t>(round) * counts.size());
  std::vector<int64_t> sizes(counts.size());
  for (int64_t at = 0; at < block; at += round) {
    const int64_t n = std::min(round, block - at);
    // This round's piece of every rank's block (padded: all n long).
    for (size_t r = 0; r < counts.size(); ++r)
      sizes[r] = pad ? n : std::clamp<int64_t>(counts[r] - at, 0, n);
    std::fill(out_block.begin(), out_block.end(), T(0));
    if (at < mine) std::copy_n(send + at, std::min(n, mine - at), out_block.begin());
    comm.all_gather(out_block.data(), gathered.data(), sizes, type);
    int64_t from = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      if (at < counts[r])
        std::copy_n(gathered.begin() + from, std::min(n, counts[r] - at), recv + offsets[r] + at);
      from += sizes[r];
    }
  }
}

}  // namespace

void all_gather_in_rounds(Communicator& comm, const float* send, float* recv,
                          std::span<const int64_t> counts, int64_t round_elements) {
  gather_rounds(comm, send, recv, counts, round_elements, comm.equal_counts_only(), DType::kF32);
}

void all_gather_in_rounds(Communicator& comm, const uint16_t* send, uint16_t* recv,
                          std::span<const int64_t> counts, int64_t round_elements) {
  gather_rounds(comm, send, recv, counts, round_elements, comm.equal_counts_only(), DType::kBF16);
}

void all_gather_padded(Communicator& comm, const float* send, float* recv,
                       std::span<const int64_t> counts, int64_t round_elements) {
  gather_rounds(comm, send, recv, counts, round_elements, true, DType::kF32);
}

}  // namespace trex::parallel
