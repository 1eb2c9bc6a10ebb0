// Checkpoints as sets of safetensors files: the reader (single file, index.json,
// or directory) with its dtype conversions, and the atomic sharded writer.

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/io/safetensors.hpp"

namespace trex {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

// Mapped data is only byte-aligned in general (safetensors does not pad
// between tensors), so every multi-byte element is loaded with memcpy; the
// compiler turns this into a plain (unaligned) load.
template <class T>
T load(const uint8_t* base, int64_t index) {
  T value;
  std::memcpy(&value, base + index * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return value;
}

Error tensor_error(const TensorView& view, const std::string& what) {
  return std::move(
      Error("tensor '" + view.name + "' (" + safetensors_name(view.dtype) + "): " + what)
          .file(view.file));
}

bool is_shard_name(const std::string& file_name) {
  static const std::regex pattern(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return std::regex_match(file_name, pattern);
}

template <class Tensor>
void validate_tensor_headers(const std::vector<Tensor>& tensors, const std::string& where) {
  std::set<std::string> names;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__")
      throw Error("\"__metadata__\" is reserved and cannot be a tensor name").file(where);
    if (!names.insert(t.name).second)
      throw Error("tensor '" + t.name + "' is given twice").file(where);
    int64_t numel = 1;
    for (int64_t d : t.shape)
      if (d < 0 || __builtin_mul_overflow(numel, d, &numel))
        throw Error("tensor '" + t.name + "': invalid shape").file(where);
    const size_t expected = static_cast<size_t>(numel) * dtype_size(t.dtype);
    if (t.nbytes != expected)
      throw Error("tensor '" + t.name + "': nbytes " + std::to_string(t.nbytes) + " but " +
                  safetensors_name(t.dtype) + " with " + std::to_string(numel) +
                  " elements needs " + std::to_string(expected))
          .file(where);
  }
}

void validate_tensors_to_write(const std::vector<TensorToWrite>& tensors,
                               const std::string& where) {
  validate_tensor_headers(tensors, where);
  for (const auto& t : tensors)
    if (t.nbytes > 0 && t.data == nullptr)
      throw Error("tensor '" + t.name + "': null data").file(where);
}

// Each tensor's bytes, from memory, in chunks so a single huge tensor never
// needs one giant fwrite.
std::vector<TensorToStream> as_streams(const std::vector<TensorToWrite>& tensors) {
  std::vector<TensorToStream> out;
  out.reserve(tensors.size());
  for (const TensorToWrite& t : tensors)
    out.push_back({t.name, t.dtype, t.shape, t.nbytes, [&t](const TensorToStream::Sink& sink) {
                     const char* bytes = static_cast<const char*>(t.data);
                     constexpr size_t kChunk = size_t{64} << 20;
                     for (size_t pos = 0; pos < t.nbytes; pos += kChunk)
                       sink(std::string_view(bytes + pos, std::min(kChunk, t.nbytes - pos)));
                   }});
  return out;
}

void write_safetensors_unchecked(const std::string& path,
                                 const std::vector<TensorToStream>& tensors,
                                 const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();  // std::map-backed: keys come out sorted
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", safetensors_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string header_text = header.dump();
  // The data buffer starts 8-byte aligned; the format allows trailing spaces in the header.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  const uint64_t header_length = header_text.size();
  char length_bytes[8];
  std::memcpy(length_bytes, &header_length, 8);

  AtomicFile out(path);
  out.write(std::string_view(length_bytes, 8));
  out.write(header_text);
  for (const auto& t : tensors) {
    size_t written = 0;
    t.produce([&](std::string_view bytes) {
      written += bytes.size();
      if (written > t.nbytes)
        throw Error("tensor '" + t.name + "' produced more than its " + std::to_string(t.nbytes) +
                    " bytes")
            .file(path);
      out.write(bytes);
    });
    if (written != t.nbytes)
      throw Error("tensor '" + t.name + "' produced " + std::to_string(written) + " of its " +
                  std::to_string(t.nbytes) + " bytes")
          .file(path);
  }
  out.commit();
}

}  // namespace

std::string checkpoint_shard_name(const std::string& stem, size_t index, size_t count) {
  char digits[32];
  std::snprintf(digits, sizeof(digits), "-%05zu-of-%05zu", index + 1, count);
  return stem + digits + ".safetensors";
}

void write_checkpoint_index(const std::string& path,
                            const std::map<std::string, std::string>& weight_map,
                            const std::map<std::string, std::string>& metadata,
                            int64_t total_size) {
  nlohmann::json index = {{"metadata", nlohmann::json::object()},
                          {"weight_map", nlohmann::json::object()}};
  for (const auto& [key, value] : metadata) index["metadata"][key] = value;
  if (total_size >= 0) index["metadata"]["total_size"] = total_size;
  for (const auto& [tensor, file] : weight_map) index["weight_map"][tensor] = file;
  write_file_atomic(path, index.dump(2) + "\n");
}

// ----------------------------------------------------------- CheckpointReader

CheckpointReader CheckpointReader::open(const std::string& path_or_dir) {
  CheckpointReader reader;
  reader.source_ = path_or_dir;
  std::error_code ec;
  const auto status = fs::status(path_or_dir, ec);
  if (ec || !fs::exists(status)) throw Error("checkpoint not found").file(path_or_dir);

  std::string index_path;
  std::vector<std::string> files;
  if (fs::is_directory(status)) {
    const fs::path dir(path_or_dir);
    if (fs::exists(dir / kIndexName)) {
      index_path = (dir / kIndexName).string();
    } else if (fs::exists(dir / kSingleName)) {
      files.push_back((dir / kSingleName).string());
    } else {
      for (const auto& entry : fs::directory_iterator(dir))
        if (entry.is_regular_file() && entry.path().extension() == ".safetensors")
          files.push_back(entry.path().string());
      std::sort(files.begin(), files.end());
      if (files.empty())
        throw Error(std::string("directory has neither ") + kIndexName + " nor *.safetensors files")
            .file(path_or_dir);
    }
  } else if (fs::path(path_or_dir).extension() == ".json") {
    index_path = path_or_dir;
  } else {
    files.push_back(path_or_dir);
  }

  // Sharded: shard name -> the tensors the index puts there.
  std::map<std::string, std::vector<std::string>> listed;
  if (!index_path.empty()) {
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(read_file(index_path));
    } catch (const nlohmann::json::exception& e) {
      throw Error(std::string("invalid JSON: ") + e.what()).file(index_path);
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      throw Error("index has no \"weight_map\" object").file(index_path);
    if (index.contains("metadata")) {
      if (!index["metadata"].is_object())
        throw Error("\"metadata\" is not a JSON object").file(index_path);
      reader.metadata_ = index["metadata"];
    }
    const fs::path index_dir = fs::path(index_path).parent_path();
    for (const auto& [name, shard] : index["weight_map"].items()) {
      if (!shard.is_string())
        throw Error("weight_map entry for tensor '" + name + "' is not a file name")
            .file(index_path);
      listed[shard.get<std::string>()].push_back(name);
    }
    for (const auto& [shard, names] : listed) {
      const fs::path shard_path = index_dir / shard;
      if (!fs::exists(shard_path))
        throw Error("index references missing shard file '" + shard + "' (for tensor '" +
                    names.front() + "' and " + std::to_string(names.size() - 1) + " more)")
            .file(index_path);
      files.push_back(shard_path.string());
    }
  }

  for (const auto& file : files) reader.files_.push_back(SafetensorsFile::open(file));
  if (index_path.empty() && reader.files_.size() == 1)
    reader.metadata_ = reader.files_.front().metadata();

  // Index entries must exist in the shard the index names.
  size_t file_number = 0;
  for (const auto& [shard, names] : listed) {
    const SafetensorsFile& file = reader.files_[file_number++];
    for (const auto& name : names)
      if (file.find(name) == nullptr)
        throw Error("tensor '" + name + "' is listed in the index under '" + shard +
                    "' but absent from that file")
            .file(index_path);
  }
  // Every tensor of every file, once. Tensors a shard holds beyond what the index
  // lists are kept (they are real data); the same name in two files is an error.
  for (size_t f = 0; f < reader.files_.size(); ++f) {
    const auto& tensors = reader.files_[f].tensors();
    for (size_t t = 0; t < tensors.size(); ++t) {
      auto [it, inserted] = reader.locations_.emplace(tensors[t].name, std::make_pair(f, t));
      if (!inserted)
        throw Error("tensor '" + tensors[t].name + "' appears in both '" +
                    reader.files_[it->second.first].path() + "' and '" + reader.files_[f].path() +
                    "'")
            .file(path_or_dir);
    }
  }
  return reader;
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  out.reserve(locations_.size());
  for (const auto& entry : locations_) out.push_back(entry.first);
  std::sort(out.begin(), out.end());
  return out;
}

bool CheckpointReader::contains(const std::string& name) const {
  return locations_.count(name) > 0;
}

const TensorView* CheckpointReader::find(const std::string& name) const {
  auto it = locations_.find(name);
  if (it == locations_.end()) return nullptr;
  return &files_[it->second.first].tensors()[it->second.second];
}

const TensorView& CheckpointReader::get(const std::string& name) const {
  const TensorView* view = find(name);
  if (view == nullptr)
    throw Error("no tensor '" + name + "' in the checkpoint (" + std::to_string(locations_.size()) +
                " tensors)")
        .file(source_);
  return *view;
}

void CheckpointReader::read_f32(const std::string& name, float* out, int64_t expected_numel) const {
  const TensorView& view = get(name);
  if (view.numel() != expected_numel)
    throw tensor_error(view, "has " + std::to_string(view.numel()) + " elements, expected " +
                                 std::to_string(expected_numel));
  read_f32_range(name, 0, expected_numel, out);
}

void CheckpointReader::read_f32_range(const std::string& name, int64_t first, int64_t count,
                                      float* out) const {
  const TensorView& view = get(name);
  if (first < 0 || count < 0 || first + count > view.numel())
    throw tensor_error(view, "has " + std::to_string(view.numel()) + " elements; elements [" +
                                 std::to_string(first) + ", " + std::to_string(first + count) +
                                 ") do not fit");
  const int64_t n = count;
  const uint8_t* p = view.data + static_cast<size_t>(first) * dtype_size(view.dtype);
  switch (view.dtype) {
    case DType::kF32:
      if (n > 0) std::memcpy(out, p, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF64:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<double>(p, i));
      return;
    case DType::kBF16:
#pragma omp parallel for schedule(static) if (n > (1 << 18))
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load<uint16_t>(p, i));
      return;
    case DType::kF16:
#pragma omp parallel for schedule(static) if (n > (1 << 18))
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(load<uint16_t>(p, i));
      return;
    case DType::kF8E8M0:
      for (int64_t i = 0; i < n; ++i) out[i] = e8m0_to_f32(p[i]);
      return;
    case DType::kI32:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<int32_t>(p, i));
      return;
    case DType::kI64:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<int64_t>(p, i));
      return;
    case DType::kF8E4M3:
    case DType::kI8:
    case DType::kU8:
      throw tensor_error(view,
                         "is quantised (or packed FP4) and needs its scale tensor: use "
                         "read_dequantized_f32 / dequantize_to_f32");
    case DType::kBool:
      break;
  }
  throw tensor_error(view, "cannot be read as float");
}

std::vector<float> CheckpointReader::read_f32(const std::string& name) const {
  const TensorView& view = get(name);
  std::vector<float> out(static_cast<size_t>(view.numel()));
  read_f32(name, out.data(), view.numel());
  return out;
}

std::vector<int64_t> CheckpointReader::read_i64(const std::string& name) const {
  const TensorView& view = get(name);
  const int64_t n = view.numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  const uint8_t* p = view.data;
  switch (view.dtype) {
    case DType::kI64:
      if (n > 0) std::memcpy(out.data(), p, view.nbytes);
      return out;
    case DType::kI32:
      for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = load<int32_t>(p, i);
      return out;
    case DType::kI8:
      for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<int8_t>(p[i]);
      return out;
    case DType::kU8:
    case DType::kBool:
      for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = p[i];
      return out;
    default:
      throw tensor_error(view, "is not an integer tensor (I8, U8, I32, I64 or BOOL)");
  }
}

std::vector<float> CheckpointReader::read_dequantized_f32(const std::string& weight_name,
                                                          const std::string& scale_name) const {
  return dequantize_to_f32(get(weight_name), get(scale_name));
}

// -------------------------------------------------------------------- writing

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  validate_tensors_to_write(tensors, path);
  write_safetensors_unchecked(path, as_streams(tensors), metadata);
}

void write_safetensors_streaming(const std::string& path,
                                 const std::vector<TensorToStream>& tensors,
                                 const std::map<std::string, std::string>& metadata) {
  validate_tensor_headers(tensors, path);
  write_safetensors_unchecked(path, tensors, metadata);
}

void write_checkpoint(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                      const std::map<std::string, std::string>& metadata, size_t max_shard_bytes) {
  validate_tensors_to_write(tensors, dir);
  write_checkpoint_streaming(dir, as_streams(tensors), metadata, max_shard_bytes);
}

void write_checkpoint_streaming(const std::string& dir, const std::vector<TensorToStream>& tensors,
                                const std::map<std::string, std::string>& metadata,
                                size_t max_shard_bytes) {
  validate_tensor_headers(tensors, dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create directory: " + ec.message()).file(dir);

  // Greedy split in the given order; a tensor over the limit gets its own shard.
  std::vector<std::vector<TensorToStream>> shards(1);
  size_t shard_bytes = 0, total_bytes = 0;
  for (const auto& t : tensors) {
    if (!shards.back().empty() && shard_bytes + t.nbytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(t);
    shard_bytes += t.nbytes;
    total_bytes += t.nbytes;
  }

  const fs::path root(dir);
  std::set<std::string> written;
  if (shards.size() == 1) {
    write_safetensors_unchecked((root / kSingleName).string(), shards.front(), metadata);
    written.insert(kSingleName);
  } else {
    std::map<std::string, std::string> weight_map;
    for (size_t s = 0; s < shards.size(); ++s) {
      const std::string name = checkpoint_shard_name("model", s, shards.size());
      write_safetensors_unchecked((root / name).string(), shards[s], metadata);
      written.insert(name);
      for (const auto& t : shards[s]) weight_map[t.name] = name;
    }
    // Last, so a reader never finds an index naming shards not yet in place.
    write_checkpoint_index((root / kIndexName).string(), weight_map, metadata,
                           static_cast<int64_t>(total_bytes));
    written.insert(kIndexName);
  }

  // Files of an earlier checkpoint in this directory would shadow or mix with
  // the new one (an index takes precedence over model.safetensors).
  // The index goes first: with it gone a reader no longer looks at old shards.
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string file_name = entry.path().filename().string();
    const bool ours =
        file_name == kSingleName || file_name == kIndexName || is_shard_name(file_name);
    if (ours && !written.count(file_name)) stale.push_back(entry.path());
  }
  std::stable_partition(stale.begin(), stale.end(),
                        [](const fs::path& p) { return p.filename() == kIndexName; });
  for (const auto& path : stale) fs::remove(path, ec);
  fsync_directory(dir);
}

}  // namespace trex
