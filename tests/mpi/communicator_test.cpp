// The MPI communicator on 2 and 4 ranks: every operation's values, the
// sub-communicators of the process grid, and progress during compute.
#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <numeric>
#include <thread>

#include "trex/core/error.hpp"
#include "trex/parallel/communicator.hpp"
#include "trex/parallel/padded_collectives.hpp"
#include "trex/parallel/process_grid.hpp"

namespace trex::parallel {
namespace {

TEST(Communicator, AllReduceSumMaxMin) {
  auto w = world();
  const int r = w->rank(), n = w->size();
  ASSERT_GE(n, 2);
  std::vector<double> v = {1.0 * r, 0.5, -1.0 * r};
  w->all_reduce(std::span<double>(v));
  EXPECT_DOUBLE_EQ(v[0], n * (n - 1) / 2.0);
  EXPECT_DOUBLE_EQ(v[1], 0.5 * n);
  EXPECT_EQ(w->all_reduce_value<int64_t>(r, ReduceOp::kMax), n - 1);
  EXPECT_EQ(w->all_reduce_value<int64_t>(r + 7, ReduceOp::kMin), 7);
  std::vector<float> f(1000, static_cast<float>(r + 1));
  w->all_reduce(std::span<float>(f));
  for (float x : f) ASSERT_EQ(x, n * (n + 1) / 2.0f);
}

TEST(Communicator, ReduceScatterUnevenBlocks) {
  auto w = world();
  const int r = w->rank(), n = w->size();
  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) counts[static_cast<size_t>(i)] = i + 1;  // rank i gets i+1 values
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<int64_t> send(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) send[static_cast<size_t>(i)] = i * 10 + r;
  std::vector<int64_t> recv(static_cast<size_t>(r + 1), -1);
  w->reduce_scatter(send.data(), recv.data(), counts, DType::kI64, ReduceOp::kSum);
  const int64_t offset = static_cast<int64_t>(r) * (r + 1) / 2;
  for (int64_t j = 0; j <= r; ++j)
    EXPECT_EQ(recv[static_cast<size_t>(j)], n * (offset + j) * 10 + n * (n - 1) / 2);
}

TEST(Communicator, AllGatherVariableCounts) {
  auto w = world();
  const int r = w->rank(), n = w->size();
  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) counts[static_cast<size_t>(i)] = 2 * i;  // rank 0 sends nothing
  std::vector<float> mine(static_cast<size_t>(2 * r), static_cast<float>(r));
  std::vector<float> all(static_cast<size_t>(n * (n - 1)), -1.0f);
  w->all_gather(mine.data(), all.data(), counts, DType::kF32);
  size_t at = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < 2 * i; ++j) EXPECT_EQ(all[at++], static_cast<float>(i));
}

// NCCL's model on MPI: unequal counts are refused, and the padded
// reduce-scatter / all-gather give what the per-rank-count calls give.
TEST(Communicator, PaddedCollectivesEqualTheVariableCountOnes) {
  auto w = world();
  const int r = w->rank(), n = w->size();
  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) counts[static_cast<size_t>(i)] = (i * 7 + 3) % 5;  // 3, 0, 2, 4 …
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<float> send(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) send[static_cast<size_t>(i)] = 0.25f * i + r;
  const int64_t mine = counts[static_cast<size_t>(r)];
  std::vector<float> want(static_cast<size_t>(mine)), got(want.size(), -1.0f);
  w->reduce_scatter(send.data(), want.data(), counts, DType::kF32, ReduceOp::kSum);
  std::vector<float> own(static_cast<size_t>(mine), static_cast<float>(r) + 0.5f);
  std::vector<float> gathered_want(static_cast<size_t>(total)), gathered(gathered_want.size());
  w->all_gather(own.data(), gathered_want.data(), counts, DType::kF32);

  int64_t own_offset = 0;
  for (int i = 0; i < r; ++i) own_offset += counts[static_cast<size_t>(i)];
  // In place: this rank's block already lies in the output and is sent from there.
  auto gather_in_place = [&](int64_t round) {
    std::fill(gathered.begin(), gathered.end(), -1.0f);
    std::copy(own.begin(), own.end(), gathered.begin() + own_offset);
    trex::parallel::all_gather_in_rounds(*w, gathered.data() + own_offset, gathered.data(), counts,
                                         round);
  };
  for (int64_t round : {int64_t{1}, int64_t{3}, int64_t{1} << 20}) {  // variable counts
    std::fill(gathered.begin(), gathered.end(), -1.0f);
    trex::parallel::all_gather_in_rounds(*w, own.data(), gathered.data(), counts, round);
    EXPECT_EQ(gathered, gathered_want) << "unpadded rounds of " << round;
    gather_in_place(round);
    EXPECT_EQ(gathered, gathered_want) << "unpadded rounds of " << round << ", in place";
  }

  struct EqualCounts {
    EqualCounts() { trex::parallel::set_mpi_equal_counts_only(true); }
    ~EqualCounts() { trex::parallel::set_mpi_equal_counts_only(false); }
  } equal_counts;
  ASSERT_TRUE(w->equal_counts_only());
  if (n > 1) {
    EXPECT_THROW(w->reduce_scatter(send.data(), got.data(), counts, DType::kF32, ReduceOp::kSum),
                 Error);
  }
  trex::parallel::PaddedReduceScatter padded(*w, send.data(), got.data(), counts);
  padded.request().wait();
  padded.copy_out();
  EXPECT_EQ(got, want);
  EXPECT_EQ(padded.staged(), 0);  // released after the copy
  for (int64_t round : {int64_t{1}, int64_t{2}, int64_t{1} << 20}) {
    std::fill(gathered.begin(), gathered.end(), -1.0f);
    trex::parallel::all_gather_padded(*w, own.data(), gathered.data(), counts, round);
    EXPECT_EQ(gathered, gathered_want) << "rounds of " << round;
    std::fill(gathered.begin(), gathered.end(), -1.0f);
    trex::parallel::all_gather_in_rounds(*w, own.data(), gathered.data(), counts, round);
    EXPECT_EQ(gathered, gathered_want) << "rounds of " << round << " (padded: equal counts)";
    gather_in_place(round);
    EXPECT_EQ(gathered, gathered_want) << "rounds of " << round << " (padded), in place";
  }
}

// bf16 parameters travel as their 16 bits (half the bytes of fp32), in rounds,
// padded or not; a reduction of bf16 values is refused (MPI would add the bits
// as integers).
TEST(Communicator, Bf16ValuesAreGatheredAsTheyAreAndNeverReduced) {
  auto w = world();
  const int r = w->rank(), n = w->size();
  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) counts[static_cast<size_t>(i)] = (i * 5 + 4) % 7;  // 4, 2, 0, 5 …
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<uint16_t> want(static_cast<size_t>(total));
  for (int i = 0, at = 0; i < n; ++i)
    for (int64_t k = 0; k < counts[static_cast<size_t>(i)]; ++k, ++at)
      want[static_cast<size_t>(at)] = static_cast<uint16_t>(0x3f80 + 97 * i + k);  // 1.0 and up
  int64_t own_offset = 0;
  for (int i = 0; i < r; ++i) own_offset += counts[static_cast<size_t>(i)];
  const std::vector<uint16_t> own(want.begin() + own_offset,
                                  want.begin() + own_offset + counts[static_cast<size_t>(r)]);
  const int64_t bytes_before = w->stats().bytes_sent;
  for (bool padded : {false, true}) {
    trex::parallel::set_mpi_equal_counts_only(padded);
    for (int64_t round : {int64_t{1}, int64_t{3}, int64_t{1} << 20}) {
      std::vector<uint16_t> got(want.size(), 0xffff);
      trex::parallel::all_gather_in_rounds(*w, own.data(), got.data(), counts, round);
      EXPECT_EQ(got, want) << (padded ? "padded" : "unpadded") << " rounds of " << round;
    }
  }
  trex::parallel::set_mpi_equal_counts_only(false);
  if (n > 1) {
    EXPECT_GT(w->stats().bytes_sent, bytes_before);
    std::vector<uint16_t> values(4, 0x3f80);
    EXPECT_THROW(w->all_reduce(values.data(), 4, DType::kBF16, ReduceOp::kSum), Error);
  }
  EXPECT_EQ(trex::parallel::dtype_size(DType::kBF16), 2u);
}

TEST(Communicator, AllToAllV) {
  auto w = world();
  const int r = w->rank(), n = w->size();
  // Rank r sends (r + d + 1) values to rank d, each encoding (source, dest, index).
  std::vector<int64_t> send_counts(static_cast<size_t>(n)), recv_counts(static_cast<size_t>(n));
  std::vector<int64_t> send;
  for (int d = 0; d < n; ++d) {
    send_counts[static_cast<size_t>(d)] = r + d + 1;
    recv_counts[static_cast<size_t>(d)] = d + r + 1;
    for (int k = 0; k < r + d + 1; ++k) send.push_back(r * 10000 + d * 100 + k);
  }
  std::vector<int64_t> recv(
      static_cast<size_t>(std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0})));
  w->all_to_all(send.data(), send_counts, recv.data(), recv_counts, DType::kI64);
  size_t at = 0;
  for (int s = 0; s < n; ++s)
    for (int k = 0; k < s + r + 1; ++k) EXPECT_EQ(recv[at++], s * 10000 + r * 100 + k);
  EXPECT_GT(w->stats().bytes_sent, 0);
}

TEST(Communicator, BroadcastAndRing) {
  auto w = world();
  const int r = w->rank(), n = w->size();
  std::vector<double> b(5, r == n - 1 ? 3.25 : 0.0);
  w->broadcast(b.data(), 5, DType::kF64, n - 1);
  for (double x : b) EXPECT_EQ(x, 3.25);
  // Ring: post the receive first, then send; both non-blocking.
  std::vector<int32_t> out = {r, r * r}, in(2, -1);
  Request rx = w->irecv(in.data(), 2, DType::kI32, (r + n - 1) % n, 7);
  Request tx = w->isend(out.data(), 2, DType::kI32, (r + 1) % n, 7);
  tx.wait();
  rx.wait();
  const int left = (r + n - 1) % n;
  EXPECT_EQ(in[0], left);
  EXPECT_EQ(in[1], left * left);
  w->barrier();
}

TEST(Communicator, BadArgumentsAreErrors) {
  auto w = world();
  std::vector<int64_t> wrong(static_cast<size_t>(w->size() + 1), 0);
  float x = 0;
  EXPECT_THROW(w->all_gather(&x, &x, wrong, DType::kF32), Error);
  EXPECT_THROW(w->isend(&x, 1, DType::kF32, w->size(), 0), Error);
  EXPECT_THROW(w->broadcast(&x, 1, DType::kF32, -1), Error);
  w->barrier();  // the communicator is still usable
}

// Every operation with the limit of elements per MPI call set to 3: buffers of
// up to a few dozen values travel as many calls (the path a buffer over
// INT_MAX elements takes) and give the same values as in one call.
TEST(Communicator, BuffersOverTheMessageLimitTravelInPieces) {
  struct LimitGuard {
    LimitGuard() { set_mpi_message_limit(3); }
    ~LimitGuard() { set_mpi_message_limit(INT_MAX); }
  } guard;
  auto w = world();
  const int r = w->rank(), n = w->size();

  std::vector<float> f(1001, static_cast<float>(r + 1));
  f[1000] = static_cast<float>(r);
  w->all_reduce(std::span<float>(f));
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(f[i], n * (n + 1) / 2.0f) << i;
  EXPECT_EQ(f[1000], n * (n - 1) / 2.0f);

  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) counts[static_cast<size_t>(i)] = 2 * i + 4;  // 4, 6, 8, ...
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const int64_t first = static_cast<int64_t>(r) * (r + 3);  // Σ_{i<r} (2i + 4)
  std::vector<int64_t> send(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) send[static_cast<size_t>(i)] = i * 10 + r;
  std::vector<int64_t> block(static_cast<size_t>(2 * r + 4), -1);
  w->reduce_scatter(send.data(), block.data(), counts, DType::kI64, ReduceOp::kSum);
  for (int64_t j = 0; j < 2 * r + 4; ++j)
    EXPECT_EQ(block[static_cast<size_t>(j)], n * (first + j) * 10 + n * (n - 1) / 2) << j;

  std::vector<int64_t> gathered(static_cast<size_t>(total), -1);
  std::vector<int64_t> mine(static_cast<size_t>(2 * r + 4));
  for (size_t j = 0; j < mine.size(); ++j) mine[j] = r * 1000 + static_cast<int64_t>(j);
  w->all_gather(mine.data(), gathered.data(), counts, DType::kI64);
  size_t at = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < 2 * i + 4; ++j) EXPECT_EQ(gathered[at++], i * 1000 + j);

  std::vector<int64_t> send_counts(static_cast<size_t>(n)), recv_counts(static_cast<size_t>(n));
  std::vector<int64_t> out;
  for (int d = 0; d < n; ++d) {
    send_counts[static_cast<size_t>(d)] = r + d + 4;
    recv_counts[static_cast<size_t>(d)] = d + r + 4;
    for (int k = 0; k < r + d + 4; ++k) out.push_back(r * 10000 + d * 100 + k);
  }
  std::vector<int64_t> in(
      static_cast<size_t>(std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0})));
  w->all_to_all(out.data(), send_counts, in.data(), recv_counts, DType::kI64);
  at = 0;
  for (int s = 0; s < n; ++s)
    for (int k = 0; k < s + r + 4; ++k) EXPECT_EQ(in[at++], s * 10000 + r * 100 + k);

  std::vector<double> b(10, r == n - 1 ? 3.25 : 0.0);
  w->broadcast(b.data(), 10, DType::kF64, n - 1);
  for (double x : b) EXPECT_EQ(x, 3.25);

  std::vector<int32_t> ring_out(8), ring_in(8, -1);
  for (int k = 0; k < 8; ++k) ring_out[static_cast<size_t>(k)] = r * 100 + k;
  Request rx = w->irecv(ring_in.data(), 8, DType::kI32, (r + n - 1) % n, 7);
  Request tx = w->isend(ring_out.data(), 8, DType::kI32, (r + 1) % n, 7);
  tx.wait();
  rx.wait();
  for (int k = 0; k < 8; ++k)
    EXPECT_EQ(ring_in[static_cast<size_t>(k)], ((r + n - 1) % n) * 100 + k);
  w->barrier();
}

TEST(Communicator, MessageLimitAndReservedTagAreChecked) {
  auto w = world();
  float x = 0;
  EXPECT_THROW(set_mpi_message_limit(0), Error);
  EXPECT_THROW(set_mpi_message_limit(int64_t{INT_MAX} + 1), Error);
  EXPECT_THROW(w->isend(&x, 1, DType::kF32, 0, 32767), Error);
  EXPECT_THROW(w->irecv(&x, 1, DType::kF32, 0, -1), Error);
  w->barrier();
}

TEST(Communicator, RequestProgressesWhileCallerComputes) {
  // A request started before a "compute phase" completes during it: waiting
  // afterwards is (almost) free. This is what overlap relies on.
  auto w = world();
  std::vector<float> big(1 << 18, 1.0f);
  w->barrier();
  const double before = w->stats().exposed_seconds;
  Request req =
      w->iall_reduce(big.data(), static_cast<int64_t>(big.size()), DType::kF32, ReduceOp::kSum);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (!req.done() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_TRUE(req.done()) << "the all-reduce did not progress without a wait()";
  req.wait();
  EXPECT_LT(w->stats().exposed_seconds - before, 0.05);
  EXPECT_EQ(big[12345], static_cast<float>(w->size()));
}

TEST(ProcessGridMpi, GroupsHaveTheDocumentedMembers) {
  auto w = world();
  if (w->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  for (GridShape shape : {GridShape{2, 2, 1}, GridShape{1, 2, 2}, GridShape{2, 1, 2},
                          GridShape{4, 1, 1}, GridShape{1, 1, 4}}) {
    ProcessGrid g(w, shape);
    const GridCoords c = g.coords();
    EXPECT_EQ(grid_rank(shape, c), w->rank());
    EXPECT_EQ(g.data().size(), shape.dp * shape.ep);
    EXPECT_EQ(g.ep().size(), shape.ep);
    EXPECT_EQ(g.dp().size(), shape.dp);
    EXPECT_EQ(g.pp().size(), shape.pp);
    EXPECT_EQ(g.ep().rank(), c.ep);
    EXPECT_EQ(g.dp().rank(), c.dp);
    EXPECT_EQ(g.pp().rank(), c.pp);
    EXPECT_EQ(g.data().rank(), g.data_rank());
    // Each group sums the world ranks of exactly its members.
    auto members_sum = [&](Communicator& comm, auto same) {
      int64_t expected = 0;
      for (int r = 0; r < shape.size(); ++r)
        if (same(grid_coords(shape, r))) expected += r;
      EXPECT_EQ(comm.all_reduce_value<int64_t>(w->rank()), expected) << comm.name();
    };
    members_sum(g.data(), [&](GridCoords o) { return o.pp == c.pp; });
    members_sum(g.ep(), [&](GridCoords o) { return o.pp == c.pp && o.dp == c.dp; });
    members_sum(g.dp(), [&](GridCoords o) { return o.pp == c.pp && o.ep == c.ep; });
    members_sum(g.pp(), [&](GridCoords o) { return o.dp == c.dp && o.ep == c.ep; });
  }
  EXPECT_THROW(ProcessGrid(w, GridShape{3, 1, 1}), Error);
}

}  // namespace
}  // namespace trex::parallel
