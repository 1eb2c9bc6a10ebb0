#pragma once
// safetensors checkpoints: memory-mapped, validated reads (single files and
// sharded directories with model.safetensors.index.json) and atomic, optionally
// sharded writes. This layer is name-agnostic: it never interprets tensor names.
// Format and error reference: docs/checkpoints.md.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trex/core/dtypes.hpp"

namespace trex {

// One tensor inside a mapped file. `data` points into the read-only mapping
// (zero-copy) and stays valid while the owning SafetensorsFile/CheckpointReader
// lives. It is only 1-byte aligned in general: copy with memcpy, or use the
// CheckpointReader::read_* converters.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // path of the file holding it, for error messages
  int64_t numel() const;
};

// A read-only POSIX memory mapping of a whole file (RAII, move-only).
class MappedFile {
 public:
  MappedFile() = default;
  static MappedFile open(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release() noexcept;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// One .safetensors file, mapped read-only; the header is fully validated on
// open (see docs/checkpoints.md for the list of checks). Move-only.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);

  // In the order of their data offsets.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;
  // The "__metadata__" object (empty object when absent).
  const nlohmann::json& metadata() const { return metadata_; }
  const std::string& path() const { return map_.path(); }
  size_t file_size() const { return map_.size(); }
  // The whole file; every TensorView::data points inside it.
  const MappedFile& mapping() const { return map_; }
  // 8 + header length: where the data buffer starts.
  size_t data_start() const { return data_start_; }

 private:
  MappedFile map_;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> index_;
  nlohmann::json metadata_ = nlohmann::json::object();
  size_t data_start_ = 0;
};

// A checkpoint: a directory (model.safetensors.index.json if present, else
// model.safetensors, else every *.safetensors in it), an index.json file, or a
// single .safetensors file. All files stay mapped for the reader's lifetime.
class CheckpointReader {
 public:
  static CheckpointReader open(const std::string& path_or_dir);

  // Sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  // Throws trex::Error naming the tensor and the checkpoint when absent.
  const TensorView& get(const std::string& name) const;
  const TensorView* find(const std::string& name) const;
  size_t size() const { return locations_.size(); }

  // F32/F64/BF16/F16 (and F8_E8M0 scales, I32/I64 values) converted to float.
  // Throws (naming the tensor) when its numel differs from expected_numel or its
  // dtype is quantised (F8_E4M3, packed I8/U8: use dequantize_to_f32).
  void read_f32(const std::string& name, float* out, int64_t expected_numel) const;
  // Elements [first, first + count) of the flattened tensor, converted the
  // same way (a slice of a fused tensor, e.g. one expert's rows).
  void read_f32_range(const std::string& name, int64_t first, int64_t count, float* out) const;
  std::vector<float> read_f32(const std::string& name) const;
  // I8/U8/I32/I64/BOOL converted to int64 (e.g. tid2eid, stored I32 or I64).
  std::vector<int64_t> read_i64(const std::string& name) const;
  // Dequantises `weight_name` with its scale tensor (see dequantize_to_f32 below).
  std::vector<float> read_dequantized_f32(const std::string& weight_name,
                                          const std::string& scale_name) const;

  // The directory (or file) this reader was opened on.
  const std::string& source() const { return source_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }
  // Index "metadata" object for sharded checkpoints, else the single file's __metadata__.
  const nlohmann::json& metadata() const { return metadata_; }

 private:
  std::string source_;
  std::vector<SafetensorsFile> files_;
  // name -> (file, tensor within file); indices rather than pointers so moves are safe.
  std::unordered_map<std::string, std::pair<size_t, size_t>> locations_;
  nlohmann::json metadata_ = nlohmann::json::object();
};

// The logical [rows, cols] shape of a quantised weight given its scale tensor:
//  * F8_E4M3 weight [r, c] with F8_E8M0/F32/BF16 scale [ceil(r/block), ceil(c/block)] -> [r, c];
//  * I8/U8 packed FP4 weight [r, c/2] with F8_E8M0 scale [r, c/32]                    -> [r, c].
// Throws naming both tensors when the dtypes or shapes do not fit either layout.
std::vector<int64_t> dequantized_shape(const TensorView& weight, const TensorView& scale,
                                       int64_t block = 128);
void dequantize_to_f32(const TensorView& weight, const TensorView& scale, float* out,
                       int64_t expected_numel, int64_t block = 128);
std::vector<float> dequantize_to_f32(const TensorView& weight, const TensorView& scale,
                                     int64_t block = 128);

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// A tensor whose bytes are produced while its file is written, so a writer
// holds one tensor (or one piece of it) at a time: `produce` passes exactly
// nbytes, in order, to `sink` (in any number of calls).
struct TensorToStream {
  using Sink = std::function<void(std::string_view bytes)>;
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  size_t nbytes = 0;
  std::function<void(const Sink& sink)> produce;
};

// write_checkpoint for streamed tensors (same files, names, sharding and
// atomicity). Throws, leaving no partial file, when a tensor produces other
// than its nbytes.
void write_checkpoint_streaming(const std::string& dir, const std::vector<TensorToStream>& tensors,
                                const std::map<std::string, std::string>& metadata,
                                size_t max_shard_bytes = 5ull << 30);

// Writes dir/model.safetensors, or, when the tensors' total exceeds
// max_shard_bytes, dir/model-0000i-of-0000n.safetensors plus
// model.safetensors.index.json. Shards are filled greedily in the given order
// (a tensor larger than the limit gets a shard of its own). Every file goes to
// a temp name, is fsynced and renamed; the index is written last, then files of
// an earlier checkpoint in dir that the new one does not use (a stale index or
// stale shards) are removed. `metadata` becomes "__metadata__" in every file.
void write_checkpoint(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                      const std::map<std::string, std::string>& metadata,
                      size_t max_shard_bytes = 5ull << 30);
// "<stem>-0000i-of-0000n.safetensors" (index from 0, printed from 1): the
// shard names of a multi-file checkpoint, e.g. stem "model".
std::string checkpoint_shard_name(const std::string& stem, size_t index, size_t count);
// "<stem>.safetensors.index.json" mapping each tensor to its file, with
// `metadata` (plus "total_size" when given, >= 0), written atomically: what
// CheckpointReader::open reads for a multi-file checkpoint.
void write_checkpoint_index(const std::string& path,
                            const std::map<std::string, std::string>& weight_map,
                            const std::map<std::string, std::string>& metadata,
                            int64_t total_size = -1);

// One file. Data in the given order, header keys sorted, header padded with
// spaces to a multiple of 8 bytes. Throws (before writing) on duplicate names,
// nbytes != numel * dtype_size, or null data with nonzero nbytes.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata);
// The same file from streamed tensors: the writer holds no tensor whole.
void write_safetensors_streaming(const std::string& path,
                                 const std::vector<TensorToStream>& tensors,
                                 const std::map<std::string, std::string>& metadata);

// Convenience for writers holding fp32 master weights: the bf16 bytes of `values`.
std::vector<uint16_t> to_bf16(const float* values, int64_t n);

}  // namespace trex
