#pragma once
// Expert → EP-rank maps for sharding tests.
#include <cstdint>
#include <vector>

#include "trex/model/config.hpp"

namespace trex::test {

// Expert e of every block (MTP blocks included) → rank (e + block) mod ranks:
// not contiguous, and different per block.
inline std::vector<std::vector<int>> rotating_expert_owner(const model::ModelConfig& c, int ranks) {
  std::vector<std::vector<int>> owner;
  for (int64_t b = 0; b < c.num_hidden_layers + c.num_nextn_predict_layers; ++b) {
    std::vector<int>& map = owner.emplace_back();
    for (int64_t e = 0; e < c.n_routed_experts; ++e)
      map.push_back(static_cast<int>((e + b) % ranks));
  }
  return owner;
}

}  // namespace trex::test
