#pragma once
// The validation loss of a run (eval_interval and the end of training).
#include "trex/io/tokenizer.hpp"
#include "trex/model/model.hpp"
#include "trex/train/parallel_setup.hpp"
#include "trex/train/run_config.hpp"

namespace trex::train {

// Mean LM loss over the first eval_batches micro-batches of the validation
// file (file order), forward only. The micro-batches are split over the data
// ranks like a step's (every rank reads them all) and the token-weighted sums
// reduced: collective over the grid's data group (and, with expert weights
// sharded over EP, its EP group). Throws when the config has no validation file.
double validation_loss(model::Model<float>& model, const RunConfig& config,
                       const io::Tokenizer& tokenizer, const ParallelSetup& setup);

}  // namespace trex::train
