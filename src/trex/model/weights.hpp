#pragma once
// Tensor names on disk <-> the model's flat parameter buffers. Two naming
// schemes are read and written (auto-detected on load):
//   released:     the DeepSeek checkpoints' names (layers.3.attn.wq_a.weight,
//                 FP8/FP4 weights with .scale siblings dequantised on load);
//   transformers: the HF port's names (model.layers.3.self_attn.q_a_proj.weight,
//                 routed experts fused into [E, 2I, d] gate_up_proj / [E, d, I]
//                 down_proj); MTP tensors under mtp.0.<port layer names>.
//   hybrid (read only): what transformers 5.x save_pretrained writes by default
//                 (save_original_format=True): released leaf names under
//                 "model.layers.N.", model.embed_tokens / model.norm /
//                 model.hc_head.*, head.weight, and attn.norm.weight for the
//                 attention's kv_norm.
// The mapping is documented in docs/deepseek-v4-hf-port.md.
#include <cstdint>
#include <string>
#include <vector>

#include "trex/core/dtypes.hpp"
#include "trex/io/safetensors.hpp"
#include "trex/model/config.hpp"
#include "trex/model/params.hpp"

namespace trex::model {

enum class NamingScheme { kReleased, kTransformers, kTransformersHybrid };
const char* naming_scheme_name(NamingScheme scheme);

// Hybrid iff some "model.layers." name carries a released leaf (attn., ffn., hc_);
// else transformers iff some name starts with "model." or is "lm_head.weight".
NamingScheme detect_naming_scheme(const std::vector<std::string>& names);

// Where a released-scheme tensor lives in the transformers scheme. Routed
// experts are slices of fused tensors: rows [row_offset, row_offset + rows) of
// expert `expert` in `name`.
struct TransformersLocation {
  std::string name;
  int64_t expert = -1;  // >= 0: slice of a fused [E, rows_total, cols] tensor
  int64_t row_offset = 0;
  int64_t rows_total = 0;  // second dimension of the fused tensor
};
TransformersLocation transformers_location(const ModelConfig& config, const std::string& released);
// Port-scheme name of a released non-expert tensor (also tid2eid).
std::string transformers_name(const std::string& released_non_expert);
// Name of a released tensor in the hybrid scheme (experts stay split there).
std::string hybrid_name(const std::string& released);

// Hash-routing tables of layers 0..num_hash_layers-1, each [vocab, top_k].
using HashTables = std::vector<std::vector<int64_t>>;

// One released-scheme tensor located and validated without reading its data:
// present, with its `.scale` sibling when quantised (FP8 e4m3 / packed FP4),
// and of `expected_shape` once dequantised. Errors name the tensor and the
// checkpoint. `scale` is null for a plain float tensor.
struct LocatedTensor {
  std::string name;
  const TensorView* view = nullptr;
  const TensorView* scale = nullptr;
  int64_t numel = 0;
};
LocatedTensor locate_tensor(const CheckpointReader& reader, const std::string& name,
                            const std::vector<int64_t>& expected_shape);
// Its values as fp32 (dequantised when quantised) into `out` (numel values).
void read_located_tensor(const CheckpointReader& reader, const LocatedTensor& tensor, float* out);

// Loads every parameter and hash table. Rejects missing, unexpected and
// mis-shaped tensors and invalid tid2eid entries with errors naming the tensor
// and the checkpoint. Returns the scheme the checkpoint used.
template <class T>
NamingScheme load_weights(const CheckpointReader& reader, const ModelConfig& config,
                          ParamStore<T>& params, HashTables& hash_tables);

// A named fp32 tensor ready to be written.
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> f32;    // floating-point payload
  std::vector<int64_t> i64;  // integer payload (tid2eid)
};

// The model's values (or gradients, with `grads`) as tensors of `scheme`
// (fused experts assembled for the transformers scheme). Hash tables are
// included only when `hash_tables` is non-null. `name_prefix` is prepended to
// every name (e.g. "grad.").
template <class T>
std::vector<NamedTensor> export_tensors(const ModelConfig& config, const ParamStore<T>& params,
                                        bool grads, NamingScheme scheme,
                                        const HashTables* hash_tables,
                                        const std::string& name_prefix = "");

// Writes config.json (in the scheme's key convention) and the safetensors
// checkpoint (F32 or BF16 floating tensors, I64 hash tables) atomically.
template <class T>
void save_checkpoint(const std::string& dir, const ModelConfig& config, const ParamStore<T>& params,
                     const HashTables& hash_tables, NamingScheme scheme, DType float_dtype,
                     size_t max_shard_bytes = 5ull << 30);

// One parameter of `params` as a safetensors stream written as `dtype` (F32
// or BF16): read in bounded pieces (read() decodes a bf16 store's piece), so a
// writer holds no copy of the store. `params` must outlive the write.
template <class T>
TensorToStream stream_parameter(const ParamStore<T>& params, const ParamSpec& spec, DType dtype);
// The hash tables as I64 streams named by hash_table_names(config) (as many
// as both have); `tables` must outlive the write.
std::vector<TensorToStream> stream_hash_tables(const ModelConfig& config, const HashTables& tables);

// Writes only dir/config.json as save_checkpoint does (for writers that put
// the tensors into the files themselves, e.g. the ranks of a sharded save).
void save_checkpoint_config(const std::string& dir, const ModelConfig& config, NamingScheme scheme,
                            DType float_dtype);

// Loads config.json + the weights of a checkpoint directory.
template <class T>
struct LoadedCheckpoint {
  ModelConfig config;
  ParamStore<T> params;
  HashTables hash_tables;
  NamingScheme scheme = NamingScheme::kReleased;
  // Parameter values read (and dequantised) from the files: the whole model
  // for load_checkpoint, this rank's tensors for a per-rank load.
  int64_t values_read = 0;
};
template <class T>
LoadedCheckpoint<T> load_checkpoint(const std::string& dir);

}  // namespace trex::model
