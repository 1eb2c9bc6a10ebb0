#pragma once
// `trex export`: a checkpoint rewritten in the released or the transformers
// (HF) scheme, F32 or BF16, streamed tensor by tensor: the source stays mapped
// and the writer holds one source tensor at a time (an expert's matrix while
// the fused [E, rows, cols] tensors of the transformers scheme are written
// piece by piece), never the model.
#include <cstddef>
#include <cstdint>
#include <string>

#include "trex/core/dtypes.hpp"
#include "trex/model/weights.hpp"

namespace trex::model {

struct ExportSummary {
  int64_t tensors = 0;       // written
  int64_t values = 0;        // parameter values written
  int64_t largest_held = 0;  // bytes of the largest buffer held at once
  size_t files = 0;          // safetensors files written
};

// Reads `source_dir` (config.json + one file or an HF index; a training
// checkpoint, sharded or not, or a released V4 checkpoint with FP8 / MXFP4
// tensors, which are dequantised) and writes `out_dir` (config.json and the
// weights, sharded over max_shard_bytes; atomic like save_checkpoint). Every
// tensor is located and shape-checked before anything is written. A source
// in another scheme than the released one is loaded whole first (the
// transformers scheme's fused experts cannot be split without reading them).
ExportSummary export_checkpoint(const std::string& source_dir, const std::string& out_dir,
                                NamingScheme scheme, DType float_dtype,
                                size_t max_shard_bytes = 5ull << 30);

}  // namespace trex::model
