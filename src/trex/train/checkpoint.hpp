#pragma once
// Training checkpoints: OUT/checkpoints/step-NNNNNNNN/ holding
//   config.json + model.safetensors   the model (released names, fp32; loadable by
//                                     Model<float>::from_checkpoint and `trex generate`)
//   tokenizer.json                    a copy of the run's tokenizer
//   optimizer.safetensors             Optimizer::save_state
//   trainer_state.json                step, loader state, seeds, counters, guard state
//   manifest.json                     size + CRC-32C of each file above (core/checksum.hpp)
// Each file is written atomically (and fsynced) into a temporary sibling
// directory .tmp-step-…, the manifest last; the directory is then renamed into
// place (exchanged atomically with an existing one of the same step), and
// OUT/checkpoints/latest (a one-line file naming the directory), replaced
// atomically, is the commit point. All but the newest `keep` are then removed
// (renamed out of sight first). A kill at any point leaves `latest` naming a
// complete checkpoint (the new or the previous one), or no `latest` at all
// before the first. docs/checkpoints.md, "Training checkpoints".
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

// Removes what an interrupted (killed) checkpoint write or deletion left
// under OUT/checkpoints: .tmp-… directories and a dead process's temporary of
// `latest`. The trainer calls it at start; only one trainer may use an OUT.
void remove_interrupted_checkpoint_writes(const std::string& out_dir);

// The directory OUT/checkpoints/latest points to, or nullopt when there is none.
// Throws trex::Error when the pointer names a missing directory.
std::optional<std::string> latest_checkpoint(const std::string& out_dir);

// Checks every file of the checkpoint's manifest (size and CRC-32C); a
// mismatch or a missing file throws trex::Error naming the file. A checkpoint
// without a manifest (written before checksums) loads with a warning.
void verify_checkpoint(const std::string& checkpoint_dir);

// trainer_state.json of a checkpoint directory (errors name the file).
nlohmann::json read_trainer_state(const std::string& checkpoint_dir);

}  // namespace trex::train
