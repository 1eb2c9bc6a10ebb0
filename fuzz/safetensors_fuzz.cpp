// A .safetensors file: header validation on open (SafetensorsFile and the
// single-file CheckpointReader), then every read path on what it accepted.
#include <cstring>
#include <vector>

#include "fuzz_common.hpp"
#include "trex/io/safetensors.hpp"

namespace {

constexpr int64_t kMaxReadElements = int64_t{1} << 18;

void read_everything(const trex::CheckpointReader& reader) {
  for (const auto& name : reader.names()) {
    const trex::TensorView& view = reader.get(name);
    if (view.numel() > kMaxReadElements) continue;
    trex::fuzz::expect_only_trex_errors([&] { reader.read_f32(name); });
    trex::fuzz::expect_only_trex_errors([&] { reader.read_i64(name); });
  }
  // Every (weight, scale) pair of the first few tensors, with the real block
  // size and a tiny one.
  const auto& tensors = reader.files().front().tensors();
  const size_t n = std::min<size_t>(tensors.size(), 4);
  for (size_t w = 0; w < n; ++w)
    for (size_t s = 0; s < n; ++s)
      for (int64_t block : {int64_t{128}, int64_t{2}})
        trex::fuzz::expect_only_trex_errors([&] {
          const auto shape = trex::dequantized_shape(tensors[w], tensors[s], block);
          if (shape[0] > 0 && shape[1] > 0 && shape[0] <= kMaxReadElements / shape[1])
            trex::dequantize_to_f32(tensors[w], tensors[s], block);
        });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = trex::fuzz::write_scratch("model.safetensors", data, size);
  trex::fuzz::expect_only_trex_errors([&] {
    const trex::SafetensorsFile file = trex::SafetensorsFile::open(path);
    const uint8_t* begin = file.mapping().data();
    const uint8_t* end = begin + file.file_size();
    trex::fuzz::check(file.data_start() >= 8 && file.data_start() <= file.file_size(),
                      "data_start outside the file");
    for (const auto& view : file.tensors()) {
      trex::fuzz::check(view.nbytes == 0 || (view.data >= begin + file.data_start() &&
                                             view.data + view.nbytes <= end),
                        "tensor data outside the mapping");
      trex::fuzz::check(
          static_cast<size_t>(view.numel()) * trex::dtype_size(view.dtype) == view.nbytes,
          "nbytes != numel * dtype size");
      trex::fuzz::check(file.find(view.name) == &view, "find() does not return the tensor");
    }
    const trex::CheckpointReader reader = trex::CheckpointReader::open(path);
    trex::fuzz::check(reader.size() == file.tensors().size(), "reader and file disagree");
    read_everything(reader);
  });
  return 0;
}
