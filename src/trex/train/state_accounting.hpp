#pragma once
// What each rank of a run holds between steps — parameters, gradient buffer,
// optimizer moments — from the run config alone, with the engine's own layout
// code (parallel::RankOwnership for its experts and pipeline stages, the ZeRO
// partition by role, Optimizer::state_elements) and without allocating a
// tensor: the bytes the trainer then allocates (the multi-rank tests check
// them rank by rank). Beside the state, each role's peak activations
// (model/activation_memory.hpp: the caches of the micro-batches its pipeline
// schedule keeps in flight, exact, plus the largest transient work set, an
// upper estimate) and its communication buffers (the gradient accumulation
// buffer, the reduction's staging, the pipeline's stage streams).
#include <cstdint>
#include <string>
#include <vector>

#include "trex/model/config.hpp"
#include "trex/train/run_config.hpp"

namespace trex::train {

// One world rank's state, bytes.
struct RankState {
  // The values of the tensors it stores: fp32, or (param_dtype = "bf16") 2
  // bytes per trained + 4 per not-trained value (model::parameter_value_bytes).
  int64_t params = 0;
  // param_dtype = "bf16": the fp32 weights a forward or backward pass decodes
  // (one block's and the globals': model::decoded_weight_bytes_bound); else 0.
  int64_t decoded = 0;
  int64_t grads = 0;    // the fp32 gradient buffer of the same layout
  int64_t moments = 0;  // optimizer moments of its ZeRO ranges (or of everything)
  int64_t master = 0;   // fp32 master weights of the same ranges (param_dtype = "bf16")
  int64_t total() const { return params + decoded + grads + moments + master; }
};

// The ranks that hold the same tensors: one pipeline stage x one EP rank, its
// `ranks` data-parallel replicas (whose ZeRO shards differ by whole tensors:
// the largest and smallest moments are given).
struct StateRole {
  int pp_rank = 0;
  int ep_rank = 0;
  int64_t ranks = 0;
  int64_t params = 0;   // as RankState::params
  int64_t decoded = 0;  // as RankState::decoded
  // The gradient buffer's resident bytes at the peak: all of it, except under
  // ZeRO-2 without a pipeline, where the pages of reduced buckets go back.
  int64_t grads = 0;
  int64_t moments_max = 0, moments_min = 0;
  // fp32 master weights of the ZeRO ranges (param_dtype = "bf16"; else 0):
  // the largest over the role's data ranks, like the moments.
  int64_t master = 0;
  int64_t state_max() const { return params + decoded + grads + moments_max + master; }
  // Peak activations: the largest (cached micro-batches + one op's work set
  // + the kernels' own temporaries) over the rank's pipeline program;
  // `activation_caches` is the cached part at that moment,
  // `activation_buffers` what the backend holds then (caches + work arrays:
  // what its peak-buffer counter measures), `in_flight` how many micro-batch
  // caches it holds.
  int64_t activations = 0, activation_caches = 0, activation_buffers = 0;
  int in_flight = 0;
  int64_t comm = 0;  // gradient accumulation + reduction staging + stage streams
  // The optimizer's scratch kept between steps (Optimizer::work_elements).
  int64_t optimizer_work = 0;
  int64_t total_max() const { return state_max() + activations + comm + optimizer_work; }
};

struct StateAccount {
  int64_t total_parameters = 0;        // elements of the whole model, MTP blocks included
  int64_t micro_batches_per_rank = 0;  // of a step, on each data rank (pipeline)
  std::vector<StateRole> roles;        // pp-major, then EP rank
  const StateRole& largest() const;    // by total_max
};

// `model` is the run's model config (run_model_config). Throws trex::Error on
// a layout the trainer would refuse (pipeline chunks, expert placement).
StateAccount account_state(const RunConfig& config, const model::ModelConfig& model);
RankState state_of_rank(const RunConfig& config, const model::ModelConfig& model, int world_rank);

// The per-role table `trex train --dry-run` prints, and its JSON form
// {"total_parameters", "roles": [{"name", "ranks", "params", "grads", "master",
// "moments", "comm", "activations", "total", ...}]} (bytes).
std::string format_state_account(const StateAccount& account, const RunConfig& config);
std::string state_account_json(const StateAccount& account, const RunConfig& config);

}  // namespace trex::train
