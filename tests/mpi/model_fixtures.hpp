#pragma once
// The tiny model and its random micro-batches shared by the model-level
// multi-rank tests (expert parallelism, sharded expert weights).
#include <cstdint>
#include <string>

#include "trex/core/rng.hpp"
#include "trex/model/config.hpp"
#include "trex/model/model.hpp"

namespace trex::test::mpi {

inline model::ModelConfig tiny_config() {
  return model::ModelConfig::load(std::string(TREX_SOURCE_DIR) + "/configs/models/tiny-v4.json");
}

// Micro-batch `index` of stream `seed`: 1 + index % 2 rows of 8 tokens, so
// ranks route different numbers of tokens.
inline model::Batch micro_batch(const model::ModelConfig& config, int index, uint64_t seed) {
  model::Batch b;
  b.B = 1 + index % 2;
  b.S = 8;
  Rng rng(seed, {static_cast<uint64_t>(index)});
  for (int64_t i = 0; i < b.B * b.S; ++i)
    b.input_ids.push_back(rng.uniform_int(int64_t{2}, config.vocab_size - 1));
  return b;
}

}  // namespace trex::test::mpi
