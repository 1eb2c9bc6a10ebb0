// `trex export`'s streaming writer: its files are byte for byte those of the
// in-memory save_checkpoint (both schemes, F32 and BF16, one file or several),
// while it holds one tensor at a time; bad sources are refused by tensor name;
// a parameter streams from either storage of the store in bounded pieces.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/dtypes.hpp"
#include "trex/core/error.hpp"
#include "trex/io/safetensors.hpp"
#include "trex/model/checkpoint_export.hpp"
#include "trex/model/model.hpp"
#include "trex/model/weights.hpp"

namespace {

namespace fs = std::filesystem;
using trex::DType;
using trex::model::Model;
using trex::model::ModelConfig;
using trex::model::NamingScheme;

Model<float> tiny_model() {
  Model<float> m(
      ModelConfig::load(trex::test::source_dir() + "/configs/models/tiny-v4-clamp.json"));
  m.init_random(11);
  return m;
}

std::map<std::string, std::string> files_of(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) out[e.path().filename().string()] = trex::read_file(e.path().string());
  return out;
}

TEST(CheckpointExport, StreamedFilesEqualTheInMemorySave) {
  const Model<float> m = tiny_model();
  trex::test::TempDir source;
  trex::model::save_checkpoint(source.path(), m.config(), m.params(), m.hash_tables(),
                               NamingScheme::kReleased, DType::kF32);
  int64_t largest_tensor = 0;
  for (const auto& spec : m.params().specs())
    largest_tensor = std::max(largest_tensor, spec.numel());
  for (NamingScheme scheme : {NamingScheme::kReleased, NamingScheme::kTransformers})
    for (DType dtype : {DType::kF32, DType::kBF16})
      for (size_t shard_bytes : {size_t{5} << 30, size_t{200} << 10}) {
        const std::string label = std::string(trex::model::naming_scheme_name(scheme)) + " " +
                                  (dtype == DType::kF32 ? "F32" : "BF16") + " shard " +
                                  std::to_string(shard_bytes);
        trex::test::TempDir want, got;
        trex::model::save_checkpoint(want.path(), m.config(), m.params(), m.hash_tables(), scheme,
                                     dtype, shard_bytes);
        const trex::model::ExportSummary summary =
            trex::model::export_checkpoint(source.path(), got.path(), scheme, dtype, shard_bytes);
        const auto expected = files_of(want.path());
        const auto actual = files_of(got.path());
        ASSERT_EQ(actual.size(), expected.size()) << label;
        for (const auto& [name, bytes] : expected) {
          ASSERT_TRUE(actual.count(name)) << label << ": " << name;
          EXPECT_TRUE(actual.at(name) == bytes) << label << ": " << name << " differs";
        }
        EXPECT_EQ(summary.values, m.params().size()) << label;
        EXPECT_EQ(summary.files, shard_bytes > (size_t{1} << 20) ? 1u : expected.size() - 2)
            << label;  // the index and config.json are not weight files
        // One source tensor (fp32, plus its bf16 bits) at a time, never the model.
        EXPECT_LE(summary.largest_held, largest_tensor * 6) << label;
        EXPECT_LT(summary.largest_held,
                  m.params().size() * static_cast<int64_t>(sizeof(float)) / 4)
            << label;  // under a quarter of the model's bytes
      }
}

TEST(CheckpointExport, ATransformersSourceIsExportedThroughAWholeLoad) {
  const Model<float> m = tiny_model();
  trex::test::TempDir source, want, got;
  trex::model::save_checkpoint(source.path(), m.config(), m.params(), m.hash_tables(),
                               NamingScheme::kTransformers, DType::kF32);
  trex::model::save_checkpoint(want.path(), m.config(), m.params(), m.hash_tables(),
                               NamingScheme::kReleased, DType::kBF16);
  trex::model::export_checkpoint(source.path(), got.path(), NamingScheme::kReleased, DType::kBF16);
  EXPECT_TRUE(files_of(got.path()) == files_of(want.path()));
}

TEST(CheckpointExport, AMissingOrExtraTensorIsRefusedByNameBeforeWriting) {
  const Model<float> m = tiny_model();
  const auto& specs = m.params().specs();
  for (bool extra : {false, true}) {
    trex::test::TempDir source, out;
    std::vector<trex::TensorToWrite> tensors;
    for (size_t i = extra ? 0 : 1; i < specs.size(); ++i)
      tensors.push_back({specs[i].name, DType::kF32, specs[i].shape,
                         m.params().value(specs[i].name),
                         static_cast<size_t>(specs[i].numel()) * sizeof(float)});
    const std::vector<std::string> tables = trex::model::hash_table_names(m.config());
    for (size_t t = 0; t < tables.size(); ++t)
      tensors.push_back({tables[t],
                         DType::kI64,
                         {m.config().vocab_size, m.config().num_experts_per_tok},
                         m.hash_tables()[t].data(),
                         m.hash_tables()[t].size() * sizeof(int64_t)});
    const float stray[2] = {1, 2};
    if (extra) tensors.push_back({"stray.weight", DType::kF32, {2}, stray, sizeof(stray)});
    trex::write_checkpoint(source.path(), tensors, {});
    trex::write_file_atomic(source.file("config.json"), m.config().to_json().dump());
    try {
      trex::model::export_checkpoint(source.path(), out.file("x"), NamingScheme::kTransformers,
                                     DType::kBF16);
      ADD_FAILURE() << "accepted a source " << (extra ? "with a stray tensor" : "missing one");
    } catch (const trex::Error& e) {
      const std::string named = extra ? "stray.weight" : specs[0].name;
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out.file("x") + "/model.safetensors"));
  }
}

}  // namespace

// A parameter streamed from the store, in pieces, as F32 and as BF16: the
// bytes are the tensor's values (or their bf16 rounding), whichever storage
// holds them — with a tensor longer than one piece and a short last piece.
TEST(CheckpointExport, AStreamedParameterIsItsValuesInEitherStorage) {
  using trex::model::ParamSpec;
  using trex::model::ParamStorage;
  const int64_t rows = 1025, cols = 1031;  // 1,056,775 values: a piece of 2^20 and a short one
  trex::model::ParamStore<float> params(
      std::vector<ParamSpec>{{"a.weight", {7}}, {"b.weight", {rows, cols}}});
  std::vector<float> values(static_cast<size_t>(params.size()));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(i % 4099) * 0.37f - 700.0f;
  trex::round_to_bf16(values.data(), values.data(), params.size());
  params.write(0, params.size(), values.data());
  const ParamSpec& b = params.specs()[1];
  const auto bytes_of = [&](DType dtype) {
    const trex::TensorToStream stream = trex::model::stream_parameter(params, b, dtype);
    EXPECT_EQ(stream.name, "b.weight");
    EXPECT_EQ(stream.shape, (std::vector<int64_t>{rows, cols}));
    std::string out;
    int pieces = 0;
    stream.produce([&](std::string_view piece) {
      out.append(piece);
      pieces += 1;
    });
    EXPECT_EQ(out.size(), stream.nbytes);
    EXPECT_EQ(pieces, 2);
    return out;
  };
  const float* b_values = values.data() + params.offset("b.weight");
  std::vector<uint16_t> b_bf16(static_cast<size_t>(rows * cols));
  trex::f32_to_bf16(b_values, b_bf16.data(), rows * cols);
  const std::string f32_bytes(reinterpret_cast<const char*>(b_values),
                              static_cast<size_t>(rows * cols) * sizeof(float));
  const std::string bf16_bytes(reinterpret_cast<const char*>(b_bf16.data()),
                               b_bf16.size() * sizeof(uint16_t));
  for (const ParamStorage storage : {ParamStorage::kF32, ParamStorage::kBF16}) {
    params.set_storage(storage);
    EXPECT_TRUE(bytes_of(DType::kF32) == f32_bytes) << "F32 from storage " << int(storage);
    EXPECT_TRUE(bytes_of(DType::kBF16) == bf16_bytes) << "BF16 from storage " << int(storage);
  }
  EXPECT_THROW(trex::model::stream_parameter(params, b, DType::kI64), trex::Error);
}
