// Reading side of safetensors: the mapping, header validation and the
// name-agnostic dequantisation of a (weight, scale) pair.
#include "trex/io/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "trex/core/checksum.hpp"
#include "trex/core/error.hpp"

namespace trex {

namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Error tensor_error(const std::string& file, const std::string& tensor, const std::string& what) {
  return std::move(Error("tensor '" + tensor + "': " + what).file(file));
}

// Product of the dimensions, or -1 on overflow past int64.
int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

uint64_t json_offset(const nlohmann::json& value) {
  if (!value.is_number_unsigned()) throw Error("is not a non-negative integer");
  return value.get<uint64_t>();
}

TensorView parse_entry(const std::string& path, const std::string& name,
                       const nlohmann::json& entry, const uint8_t* buffer, uint64_t buffer_size) {
  if (!entry.is_object()) throw tensor_error(path, name, "header entry is not a JSON object");
  auto field = [&](const char* key) -> const nlohmann::json& {
    auto it = entry.find(key);
    if (it == entry.end()) throw tensor_error(path, name, std::string("missing \"") + key + "\"");
    return *it;
  };
  const auto& dtype_json = field("dtype");
  const auto& shape_json = field("shape");
  const auto& offsets_json = field("data_offsets");

  TensorView view;
  view.name = name;
  view.file = path;
  if (!dtype_json.is_string()) throw tensor_error(path, name, "\"dtype\" is not a string");
  try {
    view.dtype = dtype_from_safetensors(dtype_json.get<std::string>());
  } catch (const Error& e) {
    throw tensor_error(path, name, e.message());
  }
  if (!shape_json.is_array()) throw tensor_error(path, name, "\"shape\" is not an array");
  for (const auto& dim : shape_json) {
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      throw tensor_error(
          path, name,
          "\"shape\" " + shape_json.dump() + " has an entry that is not a non-negative integer");
    view.shape.push_back(dim.get<int64_t>());
  }
  if (!offsets_json.is_array() || offsets_json.size() != 2)
    throw tensor_error(path, name, "\"data_offsets\" is not a [begin, end] pair");
  uint64_t begin = 0, end = 0;
  try {
    begin = json_offset(offsets_json[0]);
    end = json_offset(offsets_json[1]);
  } catch (const Error& e) {
    throw tensor_error(path, name, "\"data_offsets\" " + offsets_json.dump() + " " + e.message());
  }
  if (begin > end || end > buffer_size)
    throw tensor_error(path, name,
                       "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                           "] out of range of the " + std::to_string(buffer_size) +
                           "-byte data buffer (file truncated or header corrupt)");
  const int64_t numel = checked_numel(view.shape);
  uint64_t expected_bytes = 0;
  if (numel < 0 ||
      __builtin_mul_overflow(static_cast<uint64_t>(numel),
                             static_cast<uint64_t>(dtype_size(view.dtype)), &expected_bytes))
    throw tensor_error(path, name, "shape " + shape_string(view.shape) + " is too large");
  if (end - begin != expected_bytes)
    throw tensor_error(path, name,
                       "data_offsets span " + std::to_string(end - begin) + " bytes but " +
                           safetensors_name(view.dtype) + " " + shape_string(view.shape) +
                           " needs " + std::to_string(expected_bytes));
  view.data = buffer + begin;
  view.nbytes = static_cast<size_t>(expected_bytes);
  return view;
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------- MappedFile

MappedFile MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(std::string("cannot open: ") + std::strerror(errno)).file(path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(std::string("cannot stat: ") + std::strerror(err)).file(path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("not a regular file").file(path);
  }
  MappedFile mapped;
  mapped.path_ = path;
  mapped.size_ = static_cast<size_t>(st.st_size);
  if (mapped.size_ > 0) {
    void* address = ::mmap(nullptr, mapped.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps its own reference to the file
    if (address == MAP_FAILED)
      throw Error(std::string("mmap failed: ") + std::strerror(err)).file(path);
    mapped.data_ = static_cast<const uint8_t*>(address);
  } else {
    ::close(fd);
  }
  return mapped;
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

MappedFile::~MappedFile() {
  release();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

// ----------------------------------------------------------- SafetensorsFile

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  // A file of a directory with a checksum manifest (a training checkpoint) is
  // checked against it first: a corrupt file is refused by name.
  verify_file_against_manifest(path);
  SafetensorsFile file;
  file.map_ = MappedFile::open(path);
  const uint8_t* bytes = file.map_.data();
  const size_t size = file.map_.size();
  if (size < 8)
    throw Error("truncated safetensors file: " + std::to_string(size) +
                " bytes, shorter than the 8-byte header length")
        .file(path);
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes, 8);  // little-endian host (see dtypes.cpp)
  if (header_length > size - 8)
    throw Error("header length " + std::to_string(header_length) + " exceeds the " +
                std::to_string(size - 8) + " bytes after the length field (truncated file?)")
        .file(path);
  file.data_start_ = 8 + static_cast<size_t>(header_length);
  const char* header_begin = reinterpret_cast<const char*>(bytes + 8);
  const char* header_end = header_begin + header_length;

  // nlohmann::json keeps one value per key, so duplicates are caught while parsing.
  std::set<std::string> seen_keys;
  std::string duplicate;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(
        header_begin, header_end,
        [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
          if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.is_string() &&
              !seen_keys.insert(parsed.get<std::string>()).second && duplicate.empty())
            duplicate = parsed.get<std::string>();
          return true;
        });
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("invalid JSON header: ") + e.what()).file(path);
  }
  if (!header.is_object()) throw Error("JSON header is not an object").file(path);
  if (!duplicate.empty()) throw tensor_error(path, duplicate, "appears twice in the header");

  const uint8_t* buffer = bytes + file.data_start_;
  const uint64_t buffer_size = size - file.data_start_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw Error("\"__metadata__\" is not a JSON object").file(path);
      file.metadata_ = *it;
      continue;
    }
    file.tensors_.push_back(parse_entry(path, it.key(), *it, buffer, buffer_size));
  }
  std::sort(file.tensors_.begin(), file.tensors_.end(),
            [](const TensorView& a, const TensorView& b) {
              return a.data != b.data ? a.data < b.data : a.nbytes < b.nbytes;
            });
  // Sorted by start, so an overlap is always with the furthest-reaching earlier tensor.
  const TensorView* reach = nullptr;
  for (const auto& view : file.tensors_) {
    if (view.nbytes == 0) continue;
    if (reach != nullptr && view.data < reach->data + reach->nbytes)
      throw tensor_error(path, view.name,
                         "data overlaps tensor '" + reach->name + "' (data_offsets corrupt)");
    if (reach == nullptr || view.data + view.nbytes > reach->data + reach->nbytes) reach = &view;
  }
  for (size_t i = 0; i < file.tensors_.size(); ++i) file.index_[file.tensors_[i].name] = i;
  return file;
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ------------------------------------------------------------ dequantisation

std::vector<int64_t> dequantized_shape(const TensorView& weight, const TensorView& scale,
                                       int64_t block) {
  auto fail = [&](const std::string& why) -> Error {
    return std::move(Error("cannot dequantise '" + weight.name + "' " +
                           safetensors_name(weight.dtype) + " " + shape_string(weight.shape) +
                           " with scale '" + scale.name + "' " + safetensors_name(scale.dtype) +
                           " " + shape_string(scale.shape) + ": " + why)
                         .file(weight.file));
  };
  if (weight.shape.size() != 2 || scale.shape.size() != 2)
    throw fail("weight and scale must both be 2-D");
  const int64_t rows = weight.shape[0], cols = weight.shape[1];
  if (weight.dtype == DType::kF8E4M3) {
    if (block <= 0) throw fail("block size must be positive");
    if (scale.dtype != DType::kF8E8M0 && scale.dtype != DType::kF32 && scale.dtype != DType::kBF16)
      throw fail("FP8 block scales must be F8_E8M0, F32 or BF16");
    const std::vector<int64_t> expected = {(rows + block - 1) / block, (cols + block - 1) / block};
    if (scale.shape != expected)
      throw fail("expected a scale of shape " + shape_string(expected) + " for " +
                 std::to_string(block) + "x" + std::to_string(block) + " blocks");
    return {rows, cols};
  }
  if (weight.dtype == DType::kI8 || weight.dtype == DType::kU8) {
    if (scale.dtype != DType::kF8E8M0) throw fail("MXFP4 scales must be F8_E8M0");
    const int64_t logical_cols = 2 * cols;
    if (scale.shape[0] != rows || scale.shape[1] * 32 != logical_cols)
      throw fail("packed FP4 [r, c/2] needs a scale of shape [r, c/32] = " +
                 shape_string({rows, logical_cols / 32}) +
                 (logical_cols % 32 ? " (c not a multiple of 32)" : ""));
    return {rows, logical_cols};
  }
  throw fail("the weight dtype is not a quantised format (F8_E4M3, or I8/U8 packed FP4)");
}

void dequantize_to_f32(const TensorView& weight, const TensorView& scale, float* out,
                       int64_t expected_numel, int64_t block) {
  const auto shape = dequantized_shape(weight, scale, block);
  const int64_t rows = shape[0], cols = shape[1];
  if (rows * cols != expected_numel)
    throw Error("dequantised '" + weight.name + "' has " + std::to_string(rows * cols) +
                " elements, expected " + std::to_string(expected_numel))
        .file(weight.file);
  if (weight.dtype != DType::kF8E4M3) {
    dequant_mxfp4(weight.data, scale.data, rows, cols, out);
    return;
  }
  if (scale.dtype == DType::kF8E8M0) {
    dequant_fp8_blocks(weight.data, scale.data, rows, cols, block, out);
    return;
  }
  // F32/BF16 scales are small; widen them into an aligned buffer first.
  std::vector<float> scale_f32(static_cast<size_t>(scale.numel()));
  if (scale.dtype == DType::kF32) {
    std::memcpy(scale_f32.data(), scale.data, scale.nbytes);
  } else {
    for (size_t k = 0; k < scale_f32.size(); ++k) {
      uint16_t bits;
      std::memcpy(&bits, scale.data + 2 * k, 2);
      scale_f32[k] = bf16_to_f32(bits);
    }
  }
  dequant_fp8_blocks(weight.data, scale_f32.data(), rows, cols, block, out);
}

std::vector<float> dequantize_to_f32(const TensorView& weight, const TensorView& scale,
                                     int64_t block) {
  const auto shape = dequantized_shape(weight, scale, block);
  std::vector<float> out(static_cast<size_t>(shape[0] * shape[1]));
  dequantize_to_f32(weight, scale, out.data(), shape[0] * shape[1], block);
  return out;
}

std::vector<uint16_t> to_bf16(const float* values, int64_t n) {
  std::vector<uint16_t> out(static_cast<size_t>(n));
  f32_to_bf16(values, out.data(), n);
  return out;
}

}  // namespace trex
