// Entry point of trex_mpi_tests: every rank runs the same tests; only rank 0
// prints the progress, every rank prints its failures, and all ranks exit with
// the same status (any rank failing fails the run).
#include <gtest/gtest.h>

#include <cstdio>

#include "trex/parallel/communicator.hpp"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  auto world = trex::parallel::world();
  if (world->rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  if (failed) std::fprintf(stderr, "rank %d: tests failed\n", world->rank());
  failed = world->all_reduce_value(failed, trex::parallel::ReduceOp::kMax);
  return failed;
}
