// Expert parallelism's maps and context (parallel/expert_parallel.hpp): map
// construction, validation and fingerprints, and the per-block view.
#include "trex/parallel/expert_parallel.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "test_paths.hpp"
#include "trex/core/error.hpp"
#include "trex/model/config.hpp"
#include "trex/parallel/communicator.hpp"

namespace trex::parallel {
namespace {

using model::ModelConfig;

TEST(MoeParallelPlan, ContiguousOwner) {
  EXPECT_EQ(contiguous_expert_owner(8, 2), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(contiguous_expert_owner(8, 4), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  // 7 experts over 3 ranks: shares 3, 2, 2.
  EXPECT_EQ(contiguous_expert_owner(7, 3), (std::vector<int>{0, 0, 0, 1, 1, 2, 2}));
  EXPECT_THROW(contiguous_expert_owner(8, 0), Error);
}

TEST(MoeParallelPlan, ValidateOwnerNamesTheField) {
  const std::vector<int> short_map{0, 1};
  try {
    validate_expert_owner(short_map, 3, 2, "ep.owner[1]");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "ep.owner[1]");
  }
  const std::vector<int> bad_rank{0, 2, 1};
  EXPECT_THROW(validate_expert_owner(bad_rank, 3, 2, "f"), Error);
  const std::vector<int> negative{0, -1, 1};
  EXPECT_THROW(validate_expert_owner(negative, 3, 2, "f"), Error);
  const std::vector<int> ok{1, 0, 1};
  EXPECT_NO_THROW(validate_expert_owner(ok, 3, 2, "f"));
}

TEST(MoeParallelPlan, MapFingerprintTellsMapsApart) {
  const std::vector<int> a{0, 0, 1, 1}, b{0, 1, 0, 1}, c{0, 0, 1}, a2{0, 0, 1, 1};
  EXPECT_EQ(expert_map_fingerprint(a), expert_map_fingerprint(a2));
  EXPECT_NE(expert_map_fingerprint(a), expert_map_fingerprint(b));
  EXPECT_NE(expert_map_fingerprint(a), expert_map_fingerprint(c));
}

TEST(MoeParallelPlan, ExpertParallelContextForConfig) {
  const ModelConfig config =
      ModelConfig::load(trex::test::source_dir() + "/configs/models/tiny-v4.json");
  auto comm = parallel::make_self_communicator("ep");
  ExpertParallel ep = make_expert_parallel(config, *comm, false);
  ASSERT_EQ(ep.owner.size(), static_cast<size_t>(config.num_hidden_layers + 1));
  EXPECT_EQ(ep.owner[0], std::vector<int>(static_cast<size_t>(config.n_routed_experts), 0));
  const MoeParallel view = ep.block(2, config.n_routed_experts);
  EXPECT_EQ(view.comm, comm.get());
  EXPECT_FALSE(view.overlap);
  EXPECT_THROW(ep.block(static_cast<int64_t>(ep.owner.size()), config.n_routed_experts), Error);
  EXPECT_THROW(ep.block(0, config.n_routed_experts + 1), Error);  // map too short
}

}  // namespace
}  // namespace trex::parallel
