// model.safetensors.index.json of a sharded checkpoint, next to a fixed set of
// valid shards (and one file that is not a safetensors file).
#include <filesystem>
#include <fstream>
#include <vector>

#include "fuzz_common.hpp"
#include "trex/io/safetensors.hpp"

namespace {

const std::filesystem::path& checkpoint_dir() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d = trex::fuzz::scratch_dir() / "ckpt";
    std::filesystem::create_directories(d / "sub");
    const float a[2] = {1.0f, -2.0f};
    const uint16_t b[4] = {0x3f80, 0x4000, 0x4040, 0x4080};
    const int32_t c[3] = {7, 8, 9};
    const uint8_t w[4] = {0x38, 0x40, 0xb8, 0x00};
    const uint8_t s[1] = {127};
    trex::write_safetensors((d / "model-00001-of-00002.safetensors").string(),
                            {{"a", trex::DType::kF32, {2}, a, sizeof a},
                             {"b", trex::DType::kBF16, {2, 2}, b, sizeof b}},
                            {{"format", "pt"}});
    trex::write_safetensors((d / "model-00002-of-00002.safetensors").string(),
                            {{"c", trex::DType::kI32, {3}, c, sizeof c},
                             {"w", trex::DType::kF8E4M3, {2, 2}, w, sizeof w},
                             {"w_scale", trex::DType::kF8E8M0, {1, 1}, s, sizeof s}},
                            {});
    trex::write_safetensors((d / "sub" / "extra.safetensors").string(),
                            {{"a", trex::DType::kF32, {2}, a, sizeof a}}, {});
    std::ofstream((d / "notes.txt").string()) << "not a safetensors file\n";
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path& dir = checkpoint_dir();
  const std::string index = (dir / "model.safetensors.index.json").string();
  {
    std::ofstream out(index, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  for (const std::string& path : {dir.string(), index})
    trex::fuzz::expect_only_trex_errors([&] {
      const trex::CheckpointReader reader = trex::CheckpointReader::open(path);
      for (const auto& name : reader.names()) {
        trex::fuzz::check(reader.contains(name), "names() lists a tensor contains() denies");
        trex::fuzz::expect_only_trex_errors([&] { reader.read_f32(name); });
      }
      trex::fuzz::check(reader.metadata().is_object(), "metadata is not an object");
      if (reader.contains("w") && reader.contains("w_scale"))
        trex::fuzz::expect_only_trex_errors([&] { reader.read_dequantized_f32("w", "w_scale"); });
    });
  return 0;
}
