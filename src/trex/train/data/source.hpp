#pragma once
// The trainer's data: the run's CPT or SFT loader behind one interface, and the
// micro-batches of one optimizer step with what the step needs to know of them
// before any backward runs (their tokens, FLOPs and trained targets).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trex/io/tokenizer.hpp"
#include "trex/model/config.hpp"
#include "trex/model/model.hpp"
#include "trex/train/data/cpt.hpp"
#include "trex/train/data/sft.hpp"
#include "trex/train/run_config.hpp"

namespace trex::train {

// The loader of the run's mode (data.mode) over `file`.
class DataSource {
 public:
  DataSource(const RunConfig& config, const io::Tokenizer& tokenizer, const std::string& file,
             bool shuffle);
  PackedBatch next_batch() { return cpt_ ? cpt_->next_batch() : sft_->next_batch(); }
  const LoaderState& state() const { return cpt_ ? cpt_->state() : sft_->state(); }
  void restore(const LoaderState& s) { cpt_ ? cpt_->restore(s) : sft_->restore(s); }
  // Lines read, skipped and repaired in the training file (data.strict = false).
  const JsonlStats& input() const { return cpt_ ? cpt_->input() : sft_->stats().input; }
  int64_t sequences_in_epoch() {
    return cpt_ ? cpt_->sequences_in_epoch() : sft_->sequences_in_epoch();
  }

 private:
  std::optional<CptLoader> cpt_;
  std::optional<SftLoader> sft_;
};

// The engine's batch of a packed one (with its position and document ids).
model::Batch to_model_batch(PackedBatch packed);

// The micro-batches of one optimizer step. Every rank reads every micro-batch
// of the step (the loaders stay identical on all ranks), so each knows every
// micro-batch's trained tokens and the step's total without communication.
struct StepBatches {
  std::vector<model::Batch> micro_batches;
  int64_t tokens = 0;  // B·S summed over the micro-batches
  double flops = 0;    // model::training_step_flops over their documents
};
// The next `count` micro-batches of `data`; FLOPs count `mtp_layers` MTP blocks.
StepBatches read_step_batches(DataSource& data, size_t count, const model::ModelConfig& config,
                              int64_t mtp_layers);
// A step of micro-batches built elsewhere (the policy-gradient step's rollouts), counted alike.
StepBatches step_batches_of(std::vector<model::Batch> micro_batches,
                            const model::ModelConfig& config, int64_t mtp_layers);

// The targets the engine trains on in `b` (model.cpp: a label >= 0 at t+1 in
// the same row and segment as t): the weight nᵢ of the micro-batch, known on
// every rank before any backward runs.
int64_t count_trained_tokens(const model::Batch& b);

}  // namespace trex::train
