#pragma once
// The bridge between the planner's layouts and the engine's memory accounting
// (train/state_accounting.hpp), shared by `trex model memory` and
// `trex plan --layout`: a planner layout string names the layout, the engine
// accounts for it.
#include <cstdint>
#include <optional>

#include "trex/model/config.hpp"
#include "trex/plan/planner.hpp"
#include "trex/train/run_config.hpp"
#include "trex/train/state_accounting.hpp"

namespace trex::cli {

struct EngineJob {
  int64_t devices = 1;
  int64_t seq_len = 4096;
  int64_t micro_batch = 0;   // 0: the layout's mbs
  int64_t global_batch = 0;  // 0: enough micro-batches to fill the pipeline
  bool muon = true;          // AdamW + Muon (the trainer's split); false: AdamW for everything
  bool bf16_moments = false;
  bool bf16_params = false;  // param_dtype = "bf16": fp32 master weights in the optimizer's ranges
};

// The run config of `layout` (what `trex train` would run), or a trex::Error
// (field "--layout" / "--devices" / "--global-batch") naming what only the
// planner models or what does not divide. "selective" is the engine's
// selective recomputation. The engine's DP is devices / (pp x ep).
train::RunConfig engine_run_config(const plan::Layout& layout, const EngineJob& job,
                                   const model::ModelConfig& model);

// The largest rank of an account as the planner's memory breakdown (reserve
// and capacity left 0 for the caller).
plan::MemoryEstimate largest_rank_memory(const train::StateAccount& account);

}  // namespace trex::cli
