#pragma once
// What one stage keeps of one micro-batch between its forward and its
// backward (a StageCache), in bytes, from the model config and the batch shape
// alone: the planner's and the dry-run's activation figure. It follows the
// arrays model.cpp, attention.cpp, compressor.cpp, indexer.cpp, mhc.cpp and
// moe*.cpp size for their caches, array by array; the model tests check it
// against the backend's live-buffer count after forward_stage for every
// recompute mode, stage cut and the MTP block, so a change to a cache that is
// not made here fails them.
//
// Not in it: the transient buffers of the op running at the moment (one
// block's forward or backward work arrays, the LM head's logits chunk) — see
// transient_activation_bytes — and the parameters, gradients and optimizer
// state (train/state_accounting.hpp).
#include <cstdint>

#include "trex/model/config.hpp"
#include "trex/model/model.hpp"

namespace trex::model {

struct ActivationShape {
  int64_t sequences = 1;  // B rows of the micro-batch ...
  int64_t seq_len = 0;    // ... of S tokens (unpacked; a packed batch keeps the same arrays)
  ActivationRecompute recompute = ActivationRecompute::kNone;
  int64_t value_bytes = 4;    // sizeof(T) of the model's values (float)
  bool indexer_loss = false;  // CSA layers keep the indexer loss's gradient
  bool mtp_loss = true;       // the head stage runs the MTP block (mtp_weight != 0, S >= 2)
  // Routed (token, slot) rows whose expert activations this rank keeps per
  // MoE layer, as a multiple of the tokens × top-k of the micro-batch: 1 with
  // the local dispatcher (and on an EP rank under balanced routing).
  double routed_rows_share = 1.0;
  int64_t local_experts = -1;  // routed experts this rank holds; -1: all
};

struct ActivationBytes {
  int64_t device = 0;  // backend buffers (the backend's live-buffer count)
  int64_t host = 0;    // host tables: each attention layer's RoPE cos/sin (double)
  int64_t total() const { return device + host; }
};

// Bytes a StageCache holds from forward_stage (preparing a backward) to
// backward_stage for `stage` of `config`.
ActivationBytes stage_cache_bytes(const ModelConfig& config, const StageSpec& stage,
                                  const ActivationShape& shape);

// The largest working set on top of the caches while the stage runs one
// micro-batch, in backend buffers: one block's forward or backward work
// arrays (its gradient streams, the MoE's dispatched rows and their
// gradients, the recomputed block under full recomputation). An upper
// estimate from the same shapes, not a count of every temporary.
int64_t transient_activation_bytes(const ModelConfig& config, const StageSpec& stage,
                                   const ActivationShape& shape);

// Memory the kernels take for themselves (not backend buffers) while the
// stage runs: the bf16 GEMMs' per-thread operand copies (the stage's largest
// weight and activation operand) and, on the head stage, the LM loss's
// logits chunk and its gradient. An estimate.
int64_t kernel_work_bytes(const ModelConfig& config, const StageSpec& stage,
                          const ActivationShape& shape);

}  // namespace trex::model
