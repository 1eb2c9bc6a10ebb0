#include "trex/io/safetensors.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"

namespace trex {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

// Owns the bytes of a tensor to write.
struct OwnedTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  TensorToWrite view() const { return {name, dtype, shape, bytes.data(), bytes.size()}; }
};

template <class T>
OwnedTensor make_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                        const std::vector<T>& values) {
  OwnedTensor t{name, dtype, std::move(shape), std::vector<uint8_t>(values.size() * sizeof(T))};
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

// One tensor of every dtype, plus a scalar and an empty tensor, with awkward
// (odd) byte sizes so later tensors start unaligned.
std::vector<OwnedTensor> every_dtype() {
  std::vector<OwnedTensor> t;
  t.push_back(make_tensor<uint8_t>("u8.odd", DType::kU8, {3}, {1, 2, 255}));
  t.push_back(
      make_tensor<float>("f32", DType::kF32, {2, 3}, {1.f, -2.f, 3.5f, NAN, INFINITY, -0.f}));
  t.push_back(make_tensor<double>("f64", DType::kF64, {2}, {1e300, -1.25}));
  t.push_back(make_tensor<uint16_t>("bf16", DType::kBF16, {3}, {0x3F80, 0xC040, 0x7FC1}));
  t.push_back(make_tensor<uint16_t>("f16", DType::kF16, {2}, {0x3C00, 0x0001}));
  t.push_back(make_tensor<uint8_t>("fp8", DType::kF8E4M3, {1, 4}, {0x38, 0x7E, 0x7F, 0x80}));
  t.push_back(make_tensor<uint8_t>("e8m0", DType::kF8E8M0, {1, 1}, {127}));
  t.push_back(make_tensor<int8_t>("i8", DType::kI8, {2}, {-128, 127}));
  t.push_back(make_tensor<int32_t>("i32", DType::kI32, {2}, {-7, 1 << 30}));
  t.push_back(make_tensor<int64_t>("i64", DType::kI64, {2}, {-(int64_t{1} << 40), 5}));
  t.push_back(make_tensor<uint8_t>("bool", DType::kBool, {3}, {1, 0, 1}));
  t.push_back(make_tensor<float>("scalar", DType::kF32, {}, {42.f}));
  t.push_back(make_tensor<float>("empty", DType::kF32, {0, 4}, {}));
  return t;
}

std::vector<TensorToWrite> views(const std::vector<OwnedTensor>& owned) {
  std::vector<TensorToWrite> out;
  for (const auto& t : owned) out.push_back(t.view());
  return out;
}

void expect_same(const CheckpointReader& reader, const std::vector<OwnedTensor>& owned) {
  ASSERT_EQ(reader.size(), owned.size());
  for (const auto& t : owned) {
    SCOPED_TRACE(t.name);
    const TensorView& v = reader.get(t.name);
    EXPECT_EQ(v.name, t.name);
    EXPECT_EQ(v.dtype, t.dtype);
    EXPECT_EQ(v.shape, t.shape);
    ASSERT_EQ(v.nbytes, t.bytes.size());
    if (v.nbytes > 0) {
      EXPECT_EQ(std::memcmp(v.data, t.bytes.data(), v.nbytes), 0);
    }
  }
}

// A hand-made file: 8-byte length, header text, data bytes.
void write_raw(const std::string& path, const std::string& header, const std::string& data,
               int64_t length_override = -1) {
  const uint64_t length =
      length_override >= 0 ? static_cast<uint64_t>(length_override) : header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &length, 8);
  std::ofstream(path, std::ios::binary) << bytes << header << data;
}

// The error message of `fn`, which must throw trex::Error.
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a trex::Error";
  return "";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST(Safetensors, SingleFileRoundTripIsBitExact) {
  TempDir dir;
  const auto owned = every_dtype();
  write_checkpoint(dir.path(), views(owned), {{"format", "pt"}, {"step", "12"}});
  EXPECT_TRUE(fs::exists(dir.file("model.safetensors")));
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors.index.json")));
  for (const auto& entry : fs::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().filename().string(), "model.safetensors") << "no temp files left";

  const auto reader = CheckpointReader::open(dir.path());
  expect_same(reader, owned);
  EXPECT_EQ(reader.metadata().at("format"), "pt");
  EXPECT_EQ(reader.metadata().at("step"), "12");
  auto names = reader.names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_TRUE(reader.contains("bf16"));
  EXPECT_FALSE(reader.contains("nope"));

  // Same result through the file path, and via SafetensorsFile directly.
  expect_same(CheckpointReader::open(dir.file("model.safetensors")), owned);
  const auto file = SafetensorsFile::open(dir.file("model.safetensors"));
  EXPECT_EQ(file.data_start() % 8, 0u);
  EXPECT_EQ(file.tensors().size(), owned.size());
  EXPECT_EQ(file.tensors().front().name, "u8.odd");  // data in the given order
  EXPECT_EQ(file.find("i64")->numel(), 2);
  EXPECT_EQ(file.find("scalar")->numel(), 1);
  EXPECT_EQ(file.find("empty")->numel(), 0);
  EXPECT_EQ(file.find("missing"), nullptr);
}

TEST(Safetensors, HeaderLayoutMatchesTheFormat) {
  TempDir dir;
  const auto t = make_tensor<float>("b", DType::kF32, {1}, {1.0f});
  const auto u = make_tensor<uint16_t>("a", DType::kBF16, {1}, {0x3F80});
  write_safetensors(dir.file("x.safetensors"), {t.view(), u.view()}, {{"format", "pt"}});
  const std::string bytes = read_file(dir.file("x.safetensors"));
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  EXPECT_EQ(length % 8, 0u);
  const std::string header = bytes.substr(8, length);
  // Keys sorted; padding with trailing spaces; "b" first in the data buffer.
  EXPECT_EQ(
      header.rfind(
          R"({"__metadata__":{"format":"pt"},"a":{"data_offsets":[4,6],"dtype":"BF16","shape":[1]},)"
          R"("b":{"data_offsets":[0,4],"dtype":"F32","shape":[1]}})",
          0),
      0u)
      << header;
  EXPECT_EQ(header.find_first_not_of(' ', header.find_last_of('}') + 1), std::string::npos);
  EXPECT_EQ(bytes.size(), 8 + length + 6);
}

TEST(Safetensors, ShardedRoundTripAndIndex) {
  TempDir dir;
  std::vector<OwnedTensor> owned;
  for (int i = 0; i < 7; ++i) {
    std::vector<float> values(16);
    for (int k = 0; k < 16; ++k) values[static_cast<size_t>(k)] = static_cast<float>(i * 100 + k);
    owned.push_back(make_tensor("layers." + std::to_string(i) + ".w", DType::kF32, {4, 4}, values));
  }
  owned.push_back(make_tensor<uint8_t>("big", DType::kU8, {300}, std::vector<uint8_t>(300, 9)));
  // 64-byte tensors, 150-byte shards: 2 per shard, the 300-byte tensor alone.
  write_checkpoint(dir.path(), views(owned), {{"format", "pt"}}, 150);
  const std::vector<std::string> shards = {
      "model-00001-of-00005.safetensors", "model-00002-of-00005.safetensors",
      "model-00003-of-00005.safetensors", "model-00004-of-00005.safetensors",
      "model-00005-of-00005.safetensors"};
  for (const auto& s : shards) EXPECT_TRUE(fs::exists(dir.file(s))) << s;
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors")));

  const auto index = nlohmann::json::parse(read_file(dir.file("model.safetensors.index.json")));
  EXPECT_EQ(index["metadata"]["total_size"], 7 * 64 + 300);
  EXPECT_EQ(index["weight_map"].size(), 8u);
  EXPECT_EQ(index["weight_map"]["layers.0.w"], shards[0]);
  EXPECT_EQ(index["weight_map"]["layers.1.w"], shards[0]);
  EXPECT_EQ(index["weight_map"]["layers.2.w"], shards[1]);
  EXPECT_EQ(index["weight_map"]["layers.6.w"], shards[3]);
  EXPECT_EQ(index["weight_map"]["big"], shards[4]);

  const auto reader = CheckpointReader::open(dir.path());
  EXPECT_EQ(reader.files().size(), 5u);
  expect_same(reader, owned);
  EXPECT_EQ(reader.metadata()["total_size"], 7 * 64 + 300);
  EXPECT_EQ(reader.get("layers.6.w").file, dir.file(shards[3]));
  expect_same(CheckpointReader::open(dir.file("model.safetensors.index.json")), owned);

  // Rewriting as one file removes the index and the old shards (else the index would win).
  const std::vector<OwnedTensor> small = {owned[0]};
  write_checkpoint(dir.path(), views(small), {});
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors.index.json")));
  for (const auto& s : shards) EXPECT_FALSE(fs::exists(dir.file(s))) << s;
  expect_same(CheckpointReader::open(dir.path()), small);

  // And back to 2 shards: the single file goes.
  write_checkpoint(dir.path(), views(owned), {}, 400);
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors")));
  EXPECT_TRUE(fs::exists(dir.file("model-00002-of-00002.safetensors")));
  expect_same(CheckpointReader::open(dir.path()), owned);
}

TEST(Safetensors, F32ViewIsZeroCopyIntoTheMapping) {
  TempDir dir;
  const auto owned = every_dtype();
  write_checkpoint(dir.path(), views(owned), {});
  auto reader = CheckpointReader::open(dir.path());
  const MappedFile& map = reader.files().front().mapping();
  const TensorView& v = reader.get("f32");
  EXPECT_GE(v.data, map.data() + reader.files().front().data_start());
  EXPECT_LE(v.data + v.nbytes, map.data() + map.size());
  // Moving the reader keeps the views valid (the mapping does not move).
  const uint8_t* before = v.data;
  CheckpointReader moved = std::move(reader);
  EXPECT_EQ(moved.get("f32").data, before);
  EXPECT_EQ(moved.read_f32("f32")[2], 3.5f);
}

TEST(Safetensors, ReadConversions) {
  TempDir dir;
  const auto owned = every_dtype();
  write_checkpoint(dir.path(), views(owned), {});
  const auto reader = CheckpointReader::open(dir.path());

  const auto f32 = reader.read_f32("f32");  // unaligned in the file (after a 3-byte tensor)
  EXPECT_EQ(f32[0], 1.f);
  EXPECT_EQ(f32[2], 3.5f);
  EXPECT_TRUE(std::isnan(f32[3]));
  EXPECT_TRUE(std::signbit(f32[5]));
  EXPECT_EQ(reader.read_f32("f64"), (std::vector<float>{INFINITY, -1.25f}));
  const auto bf16 = reader.read_f32("bf16");
  EXPECT_EQ(bf16[0], 1.f);
  EXPECT_EQ(bf16[1], -3.f);
  EXPECT_TRUE(std::isnan(bf16[2]));
  EXPECT_EQ(reader.read_f32("f16"), (std::vector<float>{1.f, std::ldexp(1.f, -24)}));
  EXPECT_EQ(reader.read_f32("e8m0"), std::vector<float>{1.f});
  EXPECT_EQ(reader.read_f32("i32"), (std::vector<float>{-7.f, 1073741824.f}));
  EXPECT_EQ(reader.read_f32("scalar"), std::vector<float>{42.f});
  EXPECT_TRUE(reader.read_f32("empty").empty());

  float buffer[6];
  reader.read_f32("f32", buffer, 6);
  EXPECT_EQ(buffer[1], -2.f);
  const std::string wrong_size = error_of([&] { reader.read_f32("f32", buffer, 5); });
  EXPECT_CONTAINS(wrong_size, "'f32'");
  EXPECT_CONTAINS(wrong_size, "expected 5");
  EXPECT_CONTAINS(wrong_size, "model.safetensors");
  EXPECT_CONTAINS(error_of([&] { reader.read_f32("fp8"); }), "dequantize");
  EXPECT_CONTAINS(error_of([&] { reader.read_f32("i8"); }), "'i8'");

  EXPECT_EQ(reader.read_i64("i64"), (std::vector<int64_t>{-(int64_t{1} << 40), 5}));
  EXPECT_EQ(reader.read_i64("i32"), (std::vector<int64_t>{-7, 1 << 30}));
  EXPECT_EQ(reader.read_i64("i8"), (std::vector<int64_t>{-128, 127}));
  EXPECT_EQ(reader.read_i64("u8.odd"), (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(reader.read_i64("bool"), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_CONTAINS(error_of([&] { reader.read_i64("bf16"); }), "not an integer tensor");

  const std::string missing = error_of([&] { reader.get("layers.0.nope"); });
  EXPECT_CONTAINS(missing, "layers.0.nope");
  EXPECT_CONTAINS(missing, dir.path());
}

TEST(Safetensors, DequantisesWeightScalePairs) {
  TempDir dir;
  // FP8 [130, 260] with E8M0 scales [2, 3] and F32 scales; MXFP4 [3, 64] packed as I8 [3, 32].
  std::vector<uint8_t> fp8(130 * 260);
  for (size_t k = 0; k < fp8.size(); ++k) fp8[k] = static_cast<uint8_t>((k * 31) % 0x7F);
  const std::vector<uint8_t> e8m0 = {120, 127, 130, 125, 127, 129};
  std::vector<float> f32_scale(6);
  for (size_t k = 0; k < 6; ++k) f32_scale[k] = e8m0_to_f32(e8m0[k]);
  std::vector<uint8_t> fp4(3 * 32);
  for (size_t k = 0; k < fp4.size(); ++k) fp4[k] = static_cast<uint8_t>(k * 37);
  const std::vector<uint8_t> fp4_scale = {127, 128, 126, 127, 130, 120};
  const std::vector<OwnedTensor> owned = {
      make_tensor("w.weight", DType::kF8E4M3, {130, 260}, fp8),
      make_tensor("w.scale", DType::kF8E8M0, {2, 3}, e8m0),
      make_tensor("w.scale_f32", DType::kF32, {2, 3}, f32_scale),
      make_tensor("e.weight", DType::kI8, {3, 32}, fp4),
      make_tensor("e.scale", DType::kF8E8M0, {3, 2}, fp4_scale),
  };
  write_checkpoint(dir.path(), views(owned), {});
  const auto reader = CheckpointReader::open(dir.path());

  const auto w = reader.read_dequantized_f32("w.weight", "w.scale");
  ASSERT_EQ(w.size(), fp8.size());
  std::vector<float> expected(fp8.size());
  dequant_fp8_blocks(fp8.data(), e8m0.data(), 130, 260, 128, expected.data());
  EXPECT_EQ(w, expected);
  EXPECT_EQ(w[129 * 260 + 259], fp8_e4m3_to_f32(fp8[129 * 260 + 259]) * 4.0f);
  EXPECT_EQ(reader.read_dequantized_f32("w.weight", "w.scale_f32"), expected);
  EXPECT_EQ(dequantized_shape(reader.get("w.weight"), reader.get("w.scale")),
            (std::vector<int64_t>{130, 260}));

  const auto e = reader.read_dequantized_f32("e.weight", "e.scale");
  ASSERT_EQ(e.size(), 3u * 64u);
  EXPECT_EQ(dequantized_shape(reader.get("e.weight"), reader.get("e.scale")),
            (std::vector<int64_t>{3, 64}));
  // Row 2, byte 20 (elements 40, 41; second block, scale 2^-7).
  const uint8_t byte = fp4[2 * 32 + 20];
  EXPECT_EQ(e[2 * 64 + 40], fp4_e2m1_to_f32(byte & 0xF) / 128.0f);
  EXPECT_EQ(e[2 * 64 + 41], fp4_e2m1_to_f32(byte >> 4) / 128.0f);

  const std::string bad = error_of([&] { reader.read_dequantized_f32("w.weight", "e.scale"); });
  EXPECT_CONTAINS(bad, "'w.weight'");
  EXPECT_CONTAINS(bad, "'e.scale'");
  EXPECT_CONTAINS(bad, "[2, 3]");
  EXPECT_CONTAINS(error_of([&] { reader.read_dequantized_f32("w.scale_f32", "w.scale"); }),
                  "not a quantised format");
}

TEST(Safetensors, RejectsMalformedFiles) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  auto open_error = [&] { return error_of([&] { SafetensorsFile::open(path); }); };
  const std::string good_entry = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_CONTAINS(open_error(), "truncated");
  EXPECT_CONTAINS(open_error(), path);

  write_raw(path, "{" + good_entry + "}", std::string(8, '\0'), 4096);
  EXPECT_CONTAINS(open_error(), "header length 4096 exceeds");

  write_raw(path, R"({"t":{"dtype":"F32",)", "");
  EXPECT_CONTAINS(open_error(), "invalid JSON header");

  write_raw(path, "[1, 2]", "");
  EXPECT_CONTAINS(open_error(), "not an object");

  write_raw(path, "{" + good_entry + "}", std::string(4, '\0'));  // buffer too short
  std::string msg = open_error();
  EXPECT_CONTAINS(msg, "'t'");
  EXPECT_CONTAINS(msg, "out of range");
  EXPECT_CONTAINS(msg, path);

  write_raw(path, R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
            std::string(12, '\0'));
  msg = open_error();
  EXPECT_CONTAINS(msg, "'t'");
  EXPECT_CONTAINS(msg, "needs 12");

  write_raw(path,
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
            std::string(10, '\0'));
  msg = open_error();
  EXPECT_CONTAINS(msg, "overlaps");
  EXPECT_CONTAINS(msg, "'a'");
  EXPECT_CONTAINS(msg, "'b'");

  write_raw(path, R"({"t":{"dtype":"F8_E5M2","shape":[2],"data_offsets":[0,2]}})", "xx");
  msg = open_error();
  EXPECT_CONTAINS(msg, "F8_E5M2");
  EXPECT_CONTAINS(msg, "'t'");

  write_raw(path, "{" + good_entry + "," + good_entry + "}", std::string(8, '\0'));
  EXPECT_CONTAINS(open_error(), "appears twice");

  write_raw(path, R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
            std::string(8, '\0'));
  EXPECT_CONTAINS(open_error(), "shape");

  write_raw(path, R"({"t":{"dtype":"F32","shape":[2]}})", std::string(8, '\0'));
  EXPECT_CONTAINS(open_error(), "missing \"data_offsets\"");

  write_raw(path, R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})",
            std::string(8, '\0'));
  EXPECT_CONTAINS(open_error(), "out of range");

  // Dimensions whose product overflows int64.
  write_raw(path, R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
            std::string(8, '\0'));
  EXPECT_CONTAINS(open_error(), "too large");

  // A valid file padded with spaces and with a gap-free zero-length tensor opens fine.
  write_raw(path,
            R"({"__metadata__":{"k":"v"},"z":{"dtype":"I64","shape":[0],"data_offsets":[8,8]},)" +
                good_entry + "}   ",
            std::string(8, '\0'));
  const auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file.tensors().size(), 2u);
  EXPECT_EQ(file.metadata()["k"], "v");
}

TEST(Safetensors, RejectsInconsistentShardedCheckpoints) {
  const auto a = make_tensor<float>("a", DType::kF32, {1}, {1.f});
  const auto b = make_tensor<float>("b", DType::kF32, {1}, {2.f});
  const auto index_with = [](const nlohmann::json& weight_map) {
    return nlohmann::json{{"metadata", {{"total_size", 8}}}, {"weight_map", weight_map}}.dump();
  };
  {
    TempDir dir;  // the same name in two files of a directory without index
    write_safetensors(dir.file("one.safetensors"), {a.view()}, {});
    write_safetensors(dir.file("two.safetensors"), {a.view(), b.view()}, {});
    const std::string msg = error_of([&] { CheckpointReader::open(dir.path()); });
    EXPECT_CONTAINS(msg, "'a' appears in both");
    EXPECT_CONTAINS(msg, "one.safetensors");
    EXPECT_CONTAINS(msg, "two.safetensors");
  }
  {
    TempDir dir;  // ... and with an index
    write_safetensors(dir.file("s1.safetensors"), {a.view()}, {});
    write_safetensors(dir.file("s2.safetensors"), {a.view(), b.view()}, {});
    write_file_atomic(dir.file("model.safetensors.index.json"),
                      index_with({{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}));
    EXPECT_CONTAINS(error_of([&] { CheckpointReader::open(dir.path()); }), "appears in both");
  }
  {
    TempDir dir;  // index names a shard that is not there
    write_safetensors(dir.file("s1.safetensors"), {a.view()}, {});
    write_file_atomic(dir.file("model.safetensors.index.json"),
                      index_with({{"a", "s1.safetensors"}, {"b", "s9.safetensors"}}));
    const std::string msg = error_of([&] { CheckpointReader::open(dir.path()); });
    EXPECT_CONTAINS(msg, "missing shard file 's9.safetensors'");
    EXPECT_CONTAINS(msg, "'b'");
    EXPECT_CONTAINS(msg, "model.safetensors.index.json");
  }
  {
    TempDir dir;  // index lists a tensor its shard does not have
    write_safetensors(dir.file("s1.safetensors"), {a.view()}, {});
    write_safetensors(dir.file("s2.safetensors"), {b.view()}, {});
    write_file_atomic(dir.file("model.safetensors.index.json"),
                      index_with({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}}));
    const std::string msg = error_of([&] { CheckpointReader::open(dir.path()); });
    EXPECT_CONTAINS(msg, "'b' is listed in the index under 's1.safetensors' but absent");
  }
  {
    TempDir dir;  // corrupt index, and an index without weight_map
    write_file_atomic(dir.file("model.safetensors.index.json"), "{\"weight_map\": ");
    EXPECT_CONTAINS(error_of([&] { CheckpointReader::open(dir.path()); }), "invalid JSON");
    write_file_atomic(dir.file("model.safetensors.index.json"), "{}");
    EXPECT_CONTAINS(error_of([&] { CheckpointReader::open(dir.path()); }), "weight_map");
  }
  {
    TempDir dir;  // empty directory, missing path
    EXPECT_CONTAINS(error_of([&] { CheckpointReader::open(dir.path()); }), "*.safetensors");
    EXPECT_CONTAINS(error_of([&] { CheckpointReader::open(dir.file("nope")); }), "not found");
  }
}

TEST(Safetensors, WriterValidatesBeforeWriting) {
  TempDir dir;
  const auto a = make_tensor<float>("a", DType::kF32, {2}, {1.f, 2.f});
  TensorToWrite short_bytes = a.view();
  short_bytes.shape = {3};
  EXPECT_CONTAINS(error_of([&] { write_checkpoint(dir.path(), {short_bytes}, {}); }), "needs 12");
  EXPECT_CONTAINS(error_of([&] {
                    write_checkpoint(dir.path(), {a.view(), a.view()}, {});
                  }),
                  "'a' is given twice");
  TensorToWrite reserved = a.view();
  reserved.name = "__metadata__";
  EXPECT_THROW(write_safetensors(dir.file("x.safetensors"), {reserved}, {}), Error);
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(Safetensors, MappedFileIsMovable) {
  TempDir dir;
  write_file_atomic(dir.file("blob"), "hello");
  MappedFile a = MappedFile::open(dir.file("blob"));
  ASSERT_EQ(a.size(), 5u);
  const uint8_t* data = a.data();
  MappedFile b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(std::memcmp(b.data(), "hello", 5), 0);
  MappedFile c;
  c = std::move(b);
  EXPECT_EQ(c.data(), data);
  EXPECT_CONTAINS(error_of([&] { MappedFile::open(dir.file("none")); }), "cannot open");
  EXPECT_CONTAINS(error_of([&] { MappedFile::open(dir.path()); }), "not a regular file");
}

}  // namespace
}  // namespace trex
