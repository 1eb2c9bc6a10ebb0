// The 1-rank communicator and the grid arithmetic (no MPI needed).
#include <gtest/gtest.h>

#include "trex/core/error.hpp"
#include "trex/parallel/communicator.hpp"
#include "trex/parallel/process_grid.hpp"

namespace trex::parallel {
namespace {

TEST(SelfCommunicator, CollectivesAreIdentityCopies) {
  auto c = make_self_communicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  std::vector<float> v = {1, 2, 3};
  c->all_reduce(std::span<float>(v));
  EXPECT_EQ(v[2], 3.0f);
  std::vector<int64_t> counts = {3};
  std::vector<float> out(3, 0);
  c->all_gather(v.data(), out.data(), counts, DType::kF32);
  EXPECT_EQ(out, v);
  std::fill(out.begin(), out.end(), 0.0f);
  c->reduce_scatter(v.data(), out.data(), counts, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(out, v);
  std::fill(out.begin(), out.end(), 0.0f);
  c->all_to_all(v.data(), counts, out.data(), counts, DType::kF32);
  EXPECT_EQ(out, v);
  std::vector<int64_t> two = {1, 2};
  EXPECT_THROW(c->all_gather(v.data(), out.data(), two, DType::kF32), Error);
}

TEST(SelfCommunicator, SendRecvMatchByTagInOrder) {
  auto c = make_self_communicator();
  double a = 1.5, b = 2.5, x = 0, y = 0, z = 0;
  Request rz = c->irecv(&z, 1, DType::kF64, 0, 9);  // posted before the send
  c->isend(&a, 1, DType::kF64, 0, 3).wait();
  c->isend(&b, 1, DType::kF64, 0, 3).wait();
  EXPECT_FALSE(rz.done());
  c->recv(&x, 1, DType::kF64, 0, 3);
  c->recv(&y, 1, DType::kF64, 0, 3);
  EXPECT_EQ(x, 1.5);
  EXPECT_EQ(y, 2.5);
  c->send(&b, 1, DType::kF64, 0, 9);
  rz.wait();
  EXPECT_EQ(z, 2.5);
  float small = 0;
  Request bad = c->irecv(&small, 1, DType::kF32, 0, 4);
  c->send(&a, 1, DType::kF64, 0, 4);
  EXPECT_THROW(bad.wait(), Error);
  EXPECT_THROW(c->send(&a, 1, DType::kF64, 1, 0), Error);
}

TEST(ProcessGrid, CoordinatesRoundTripWithEpInnermost) {
  const GridShape shape{2, 2, 2};
  EXPECT_EQ(shape.size(), 8);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(grid_rank(shape, grid_coords(shape, r)), r);
  const GridCoords c = grid_coords(shape, 5);  // (pp 1, dp 0, ep 1)
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(c.dp, 0);
  EXPECT_EQ(c.ep, 1);
  EXPECT_EQ(grid_coords(shape, 1).ep, 1);  // neighbours differ in the EP index
  EXPECT_EQ(shape.to_string(), "DP=2 x EP=2 x PP=2");
}

TEST(ProcessGrid, OneRankGridAndWrongSizeError) {
  std::shared_ptr<Communicator> self = make_self_communicator("world");
  ProcessGrid g(self, GridShape{});
  EXPECT_TRUE(g.is_first_stage());
  EXPECT_TRUE(g.is_last_stage());
  EXPECT_EQ(g.data_size(), 1);
  try {
    ProcessGrid bad(self, GridShape{2, 1, 1});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "parallel");
    EXPECT_NE(std::string(e.what()).find("mpirun -np 2"), std::string::npos);
  }
}

}  // namespace
}  // namespace trex::parallel
