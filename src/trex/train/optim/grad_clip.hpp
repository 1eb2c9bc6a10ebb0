#pragma once
// Global-norm gradient clipping over the trained tensors of one store
// (docs/training.md, "Schedule and clipping"). The trainer's sharded variants
// (ZeRO-2 ranges, experts over EP) live in train/parallel_gradients.cpp.
#include "trex/model/params.hpp"

namespace trex::train {

// √(Σ g²) over the gradients of every trained tensor (OptimizerGroup other than
// kNotTrained), summed in double in buffer order (thread-count independent).
double global_grad_norm(const model::ParamStore<float>& params);

// Scales the trained gradients by max_norm / norm when norm > max_norm and
// returns the norm measured before clipping. A non-finite norm is returned
// without touching the gradients (the caller skips such a step). max_norm <= 0
// disables clipping (the norm is still returned).
double clip_grad_norm(model::ParamStore<float>& params, double max_norm);

}  // namespace trex::train
