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
// A run on a DP × EP × PP grid saves and resumes the same files (they do not
// depend on the layout): see "Checkpoints of a parallel run" below.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/io/tokenizer.hpp"
#include "trex/model/model.hpp"
#include "trex/parallel/communicator.hpp"
#include "trex/parallel/zero_partition.hpp"
#include "trex/train/data/packing.hpp"
#include "trex/train/optim/optimizer.hpp"
#include "trex/train/run_config.hpp"

namespace trex::train {

std::string checkpoints_dir(const std::string& out_dir);
std::string checkpoint_name(int64_t step);  // "step-00000042"

// The whole model's optimizer state gathered from the shards of a ZeRO run.
struct GatheredOptimizerState {
  std::vector<float> first_moment, second_moment;
  std::vector<float> master;  // with master weights (OptimizerOptions::master_weights)
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
// The same, collective over `world`: each rank reads 1/world.size() of the
// files (a resume of a large run never reads the whole checkpoint on every
// rank), every rank throws the first failing rank's error, and afterwards
// opening the checkpoint's files reads none of them again for checking.
void verify_checkpoint(const std::string& checkpoint_dir, parallel::Communicator& world);

// trainer_state.json of a checkpoint directory (checked against the manifest;
// errors name the file).
nlohmann::json read_trainer_state(const std::string& checkpoint_dir);

// trainer_state.json: where a run stands, all a resume needs besides the
// weights and the optimizer state (the file also records the optimizer's step,
// the seeds and the effective run config).
struct TrainerState {
  int64_t step = 0;
  int64_t total_steps = 0;  // the run's plan (a resumed run may plan another)
  int64_t consumed_tokens = 0, trained_tokens = 0, skipped_steps = 0, spikes = 0;
  double last_validation_loss = -1.0;                     // < 0: never evaluated
  nlohmann::json spike_window = nlohmann::json::array();  // SpikeDetector::state()
  LoaderState loader;

  nlohmann::json to_json(const RunConfig& config, int64_t optimizer_step) const;
  // read_trainer_state of a checkpoint directory; errors name the file (and the field).
  static TrainerState read(const std::string& checkpoint_dir);
};

// ---- Checkpoints of a parallel run (docs/distributed.md) ----

struct ParallelSetup;  // train/parallel_setup.hpp

// Collective: writes the checkpoint of `step` under config.out_dir and every
// rank returns its directory once it is committed. Both formats are
// layout-free (any DP / EP / PP / ZeRO layout resumes from either).
//  * sharded (config.checkpoint_format, default on more than one rank): every
//    rank writes its part of its stage's weights and optimizer state (its
//    ZeRO ranges) into model-/optimizer-{r}-of-{N}.safetensors; rank 0 adds the small files, the
//    two indexes and the manifest. Nothing is gathered; a failure on any rank fails the save on
//    every rank and leaves `latest` on the previous checkpoint.
//  * whole: world rank 0 writes the files of a 1-rank run; the other data
//    ranks of the first stage send it, point to point, what it lacks (their
//    ZeRO ranges of the optimizer state; with expert weights sharded over EP
//    their experts' weights and state): only rank 0 holds the whole model.
//    Pipelined runs (stages own their layers) save sharded only.
std::string save_checkpoint_from_ranks(const RunConfig& config, int64_t step,
                                       const ParallelSetup& setup, const model::Model<float>& model,
                                       const Optimizer& optimizer, const io::Tokenizer& tokenizer,
                                       const nlohmann::json& trainer_state);

// Whether `dir` is a sharded training checkpoint (written by the ranks of a
// parallel run, docs/checkpoints.md): the model as an HF multi-file
// checkpoint and the optimizer state as shards with an index.
bool is_sharded_checkpoint(const std::string& dir);

// The optimizer state of training checkpoint `dir` (either format) into
// `optimizer`, built over `params`: a store of the whole model `config` or,
// with EP, of some of its routed experts. Errors name the file and tensor.
void load_checkpoint_optimizer_state(const std::string& dir, const model::ParamStore<float>& params,
                                     const model::ModelConfig& config, Optimizer& optimizer);

// Every rank reads the (layout-free) checkpoint `dir`, verified against its
// manifest first: its model replaces `model` (with EP only this rank's routed
// experts) and `optimizer` becomes one over it holding the file's state (under
// ZeRO only `zero_ranges` of it).
void load_checkpoint_on_rank(const std::string& dir, const RunConfig& config,
                             const ParallelSetup& setup,
                             const std::vector<parallel::OptimizerShard>& zero_ranges,
                             model::Model<float>& model, Optimizer& optimizer);

// The whole model's parameter values in the layout of model::parameter_specs.
// With expert weights sharded over EP each expert comes from its owner
// (collective over the EP group), with pipeline stages each layer from its
// stage (collective over pp); otherwise model.params().values().
std::vector<float> gather_full_parameters(const ParallelSetup& setup,
                                          const model::Model<float>& model);

}  // namespace trex::train
