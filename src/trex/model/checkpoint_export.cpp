#include "trex/model/checkpoint_export.hpp"

#include <algorithm>
#include <filesystem>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "trex/core/error.hpp"
#include "trex/io/safetensors.hpp"
#include "trex/model/params.hpp"

namespace trex::model {

namespace {

std::string_view bytes_of(const void* data, size_t nbytes) {
  return {static_cast<const char*>(data), nbytes};
}

size_t count_weight_files(const std::string& dir) {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("model", 0) == 0 && entry.path().extension() == ".safetensors") ++n;
  }
  return n;
}

}  // namespace

ExportSummary export_checkpoint(const std::string& source_dir, const std::string& out_dir,
                                NamingScheme scheme, DType float_dtype, size_t max_shard_bytes) {
  if (float_dtype != DType::kF32 && float_dtype != DType::kBF16)
    throw Error("checkpoints are exported in F32 or BF16").field("dtype");
  if (scheme == NamingScheme::kTransformersHybrid)
    throw Error("the hybrid naming is read-only; export the released or the transformers scheme")
        .field("scheme");
  const std::filesystem::path config_path = std::filesystem::path(source_dir) / "config.json";
  if (!std::filesystem::exists(config_path))
    throw Error("checkpoint directory has no config.json").file(config_path.string());
  const ModelConfig config = ModelConfig::load(config_path.string());
  const CheckpointReader reader = CheckpointReader::open(source_dir);
  ExportSummary summary;

  if (detect_naming_scheme(reader.names()) != NamingScheme::kReleased) {
    const LoadedCheckpoint<float> whole = load_checkpoint<float>(source_dir);
    save_checkpoint(out_dir, whole.config, whole.params, whole.hash_tables, scheme, float_dtype,
                    max_shard_bytes);
    summary.tensors = static_cast<int64_t>(whole.params.specs().size() + whole.hash_tables.size());
    summary.values = whole.params.size();
    summary.largest_held = whole.params.size() * static_cast<int64_t>(sizeof(float));
    summary.files = count_weight_files(out_dir);
    return summary;
  }

  // Every tensor located and checked before a byte is written.
  const std::vector<ParamSpec> specs = parameter_specs(config);
  std::vector<LocatedTensor> located;
  std::set<std::string> consumed;
  for (const ParamSpec& spec : specs) {
    located.push_back(locate_tensor(reader, spec.name, spec.shape));
    consumed.insert(spec.name);
    if (located.back().scale) consumed.insert(located.back().scale->name);
  }
  const int64_t V = config.vocab_size, K = config.num_experts_per_tok;
  const std::vector<std::string> tables = hash_table_names(config);
  for (const std::string& name : tables) {
    const TensorView* view = reader.find(name);
    if (!view)
      throw Error("checkpoint " + reader.source() + " has no hash-routing table '" + name + "'")
          .field(name);
    if (view->shape != std::vector<int64_t>{V, K})
      throw Error("hash-routing table '" + name + "' has the wrong shape").field(name);
    consumed.insert(name);
  }
  for (const std::string& name : reader.names())
    if (!consumed.count(name))
      throw Error("checkpoint " + reader.source() + " has a tensor this model configuration " +
                  "does not use: '" + name + "'")
          .field(name);

  const size_t element = float_dtype == DType::kF32 ? sizeof(float) : sizeof(uint16_t);
  // One source tensor at a time, reused: fp32 values and, for BF16, their bits.
  std::vector<float> values;
  std::vector<uint16_t> half;
  auto emit = [&](const LocatedTensor& tensor, const TensorToStream::Sink& sink) {
    const size_t n = static_cast<size_t>(tensor.numel);
    values.resize(n);
    read_located_tensor(reader, tensor, values.data());
    if (float_dtype == DType::kF32) {
      sink(bytes_of(values.data(), n * sizeof(float)));
    } else {
      half = to_bf16(values.data(), tensor.numel);
      sink(bytes_of(half.data(), n * sizeof(uint16_t)));
    }
    summary.largest_held =
        std::max(summary.largest_held, static_cast<int64_t>(values.capacity() * sizeof(float) +
                                                            half.capacity() * sizeof(uint16_t)));
    summary.values += tensor.numel;
  };

  // The order of export_tensors (so the files equal save_checkpoint's): the
  // specs in order, a fused expert tensor where its first piece appears, then
  // the hash tables.
  std::vector<TensorToStream> out;
  struct Piece {
    int64_t offset = 0;  // values into the fused tensor
    size_t spec = 0;
  };
  std::vector<std::vector<Piece>> pieces;  // per fused tensor
  std::vector<std::pair<std::string, size_t>> fused_index;
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& spec = specs[i];
    const size_t nbytes = static_cast<size_t>(spec.numel()) * element;
    if (scheme == NamingScheme::kReleased) {
      out.push_back({spec.name, float_dtype, spec.shape, nbytes,
                     [&, i](const TensorToStream::Sink& sink) { emit(located[i], sink); }});
      continue;
    }
    const TransformersLocation loc = transformers_location(config, spec.name);
    if (loc.expert < 0) {
      out.push_back({loc.name, float_dtype, spec.shape, nbytes,
                     [&, i](const TensorToStream::Sink& sink) { emit(located[i], sink); }});
      continue;
    }
    auto it = std::find_if(fused_index.begin(), fused_index.end(),
                           [&](const auto& entry) { return entry.first == loc.name; });
    if (it == fused_index.end()) {
      const int64_t cols = spec.shape[1];
      const size_t k = pieces.size();
      pieces.emplace_back();
      fused_index.emplace_back(loc.name, k);
      it = std::prev(fused_index.end());
      const int64_t fused_numel = config.n_routed_experts * loc.rows_total * cols;
      out.push_back({loc.name, float_dtype,
                     std::vector<int64_t>{config.n_routed_experts, loc.rows_total, cols},
                     static_cast<size_t>(fused_numel) * element,
                     [&, k](const TensorToStream::Sink& sink) {
                       for (const Piece& piece : pieces[k]) emit(located[piece.spec], sink);
                     }});
    }
    pieces[it->second].push_back(
        {(loc.expert * loc.rows_total + loc.row_offset) * spec.shape[1], i});
  }
  // The pieces of a fused tensor, in memory order, must tile it exactly.
  for (const auto& [name, k] : fused_index) {
    std::vector<Piece>& list = pieces[k];
    std::sort(list.begin(), list.end(),
              [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
    int64_t at = 0;
    for (const Piece& piece : list) {
      if (piece.offset != at)
        throw Error("internal: the experts of fused tensor '" + name + "' do not tile it")
            .field(name);
      at += specs[piece.spec].numel();
    }
  }
  for (const std::string& released : tables) {
    const std::string name =
        scheme == NamingScheme::kReleased ? released : transformers_name(released);
    out.push_back({name,
                   DType::kI64,
                   {V, K},
                   static_cast<size_t>(V * K) * sizeof(int64_t),
                   [&, released](const TensorToStream::Sink& sink) {
                     const std::vector<int64_t> table = reader.read_i64(released);
                     for (int64_t e : table)
                       if (e < 0 || e >= config.n_routed_experts)
                         throw Error("hash-routing table '" + released + "' maps a token to " +
                                     "expert " + std::to_string(e) + ", outside [0, " +
                                     std::to_string(config.n_routed_experts) + ")")
                             .field(released);
                     sink(bytes_of(table.data(), table.size() * sizeof(int64_t)));
                   }});
  }
  summary.tensors = static_cast<int64_t>(out.size());
  write_checkpoint_streaming(out_dir, out, {{"format", "pt"}, {"writer", "trex"}}, max_shard_bytes);
  save_checkpoint_config(out_dir, config, scheme, float_dtype);
  summary.files = count_weight_files(out_dir);
  return summary;
}

}  // namespace trex::model
