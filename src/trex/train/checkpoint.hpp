#pragma once
// Training checkpoints: OUT/checkpoints/step-NNNNNNNN/ holding
//   config.json + model.safetensors   the model (released names, fp32; loadable by
//                                     Model<float>::from_checkpoint and `trex generate`)
//   tokenizer.json                    a copy of the run's tokenizer
//   optimizer.safetensors             Optimizer::save_state
//   trainer_state.json                step, loader state, seeds, counters, guard state
// Each is written into a temporary sibling directory that is renamed into place
// when complete; then OUT/checkpoints/latest (a one-line file naming the
// directory) is replaced atomically and all but the newest `keep` are removed.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/io/tokenizer.hpp"
#include "trex/model/model.hpp"
#include "trex/train/optimizer.hpp"

namespace trex::train {

std::string checkpoints_dir(const std::string& out_dir);
std::string checkpoint_name(int64_t step);  // "step-00000042"

// The whole model's optimizer state gathered from the shards of a ZeRO run.
struct GatheredOptimizerState {
  std::vector<float> first_moment, second_moment;
};

// Writes a complete checkpoint for `step` and returns its directory. A sharded
// optimizer (ZeRO) passes its state gathered from every shard, so the files
// are the same whatever the parallel layout.
std::string write_training_checkpoint(const std::string& out_dir, int64_t step,
                                      const model::Model<float>& model,
                                      const io::Tokenizer& tokenizer, const Optimizer& optimizer,
                                      const nlohmann::json& trainer_state, int64_t keep,
                                      const GatheredOptimizerState* gathered = nullptr);

// The directory OUT/checkpoints/latest points to, or nullopt when there is none.
// Throws trex::Error when the pointer names a missing directory.
std::optional<std::string> latest_checkpoint(const std::string& out_dir);

// trainer_state.json of a checkpoint directory (errors name the file).
nlohmann::json read_trainer_state(const std::string& checkpoint_dir);

}  // namespace trex::train
