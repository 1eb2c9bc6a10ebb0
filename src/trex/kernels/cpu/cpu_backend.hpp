#pragma once
// The CPU backend: host memory and the engine's CPU kernels (oneDNN GEMMs,
// vectorised elementwise loops, OpenMP over rows with thread-count independent
// reductions). It is the oracle other backends are compared with.
#include "trex/kernels/backend.hpp"

namespace trex::kernels {

// The process's CPU backend (stateless; safe to call from any thread).
const Backend& cpu_backend();

}  // namespace trex::kernels
