#include "trex/model/weights.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <type_traits>
#include <utility>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"

namespace trex::model {
namespace {

// Released block-tensor suffix -> transformers suffix (same for main and MTP blocks).
const std::vector<std::pair<std::string, std::string>>& block_suffixes() {
  static const std::vector<std::pair<std::string, std::string>> table = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"hc_attn_fn", "attn_hc.fn"},
      {"hc_attn_base", "attn_hc.base"},
      {"hc_attn_scale", "attn_hc.scale"},
      {"hc_ffn_fn", "ffn_hc.fn"},
      {"hc_ffn_base", "ffn_hc.base"},
      {"hc_ffn_scale", "ffn_hc.scale"},
      {"attn.wq_a.weight", "self_attn.q_a_proj.weight"},
      {"attn.q_norm.weight", "self_attn.q_a_norm.weight"},
      {"attn.wq_b.weight", "self_attn.q_b_proj.weight"},
      {"attn.wkv.weight", "self_attn.kv_proj.weight"},
      {"attn.kv_norm.weight", "self_attn.kv_norm.weight"},
      {"attn.wo_a.weight", "self_attn.o_a_proj.weight"},
      {"attn.wo_b.weight", "self_attn.o_b_proj.weight"},
      {"attn.attn_sink", "self_attn.sinks"},
      {"attn.compressor.wkv.weight", "self_attn.compressor.kv_proj.weight"},
      {"attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight"},
      {"attn.compressor.ape", "self_attn.compressor.position_bias"},
      {"attn.compressor.norm.weight", "self_attn.compressor.kv_norm.weight"},
      {"attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight"},
      {"attn.indexer.weights_proj.weight",
       "self_attn.compressor.indexer.scorer.weights_proj.weight"},
      {"attn.indexer.compressor.wkv.weight", "self_attn.compressor.indexer.kv_proj.weight"},
      {"attn.indexer.compressor.wgate.weight", "self_attn.compressor.indexer.gate_proj.weight"},
      {"attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"},
      {"attn.indexer.compressor.norm.weight", "self_attn.compressor.indexer.kv_norm.weight"},
      {"ffn.gate.weight", "mlp.gate.weight"},
      {"ffn.gate.bias", "mlp.gate.e_score_correction_bias"},
      {"ffn.gate.tid2eid", "mlp.gate.tid2eid"},
      {"ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"},
      {"ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"},
      {"ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"},
  };
  return table;
}

const std::vector<std::pair<std::string, std::string>>& head_suffixes() {
  static const std::vector<std::pair<std::string, std::string>> table = {
      {"hc_head_fn", "hc_head.hc_fn"},
      {"hc_head_base", "hc_head.hc_base"},
      {"hc_head_scale", "hc_head.hc_scale"}};
  return table;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Splits "layers.12.rest" / "mtp.0.rest" into ("layers.12.", "rest").
bool split_block(const std::string& name, const std::string& root, std::string& prefix,
                 std::string& rest) {
  if (!starts_with(name, root)) return false;
  const size_t dot = name.find('.', root.size());
  if (dot == std::string::npos) return false;
  prefix = name.substr(0, dot + 1);
  rest = name.substr(dot + 1);
  return true;
}

std::string map_block_suffix(const std::string& rest, const std::string& full) {
  for (const auto& [released, port] : block_suffixes())
    if (rest == released) return port;
  throw Error("no transformers name for tensor '" + full + "'");
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool is_quantized(DType t) {
  return t == DType::kF8E4M3 || t == DType::kI8 || t == DType::kU8;
}

std::string scale_name_for(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() > suffix.size() &&
      weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return weight_name.substr(0, weight_name.size() - suffix.size()) + ".scale";
  return weight_name + ".scale";
}

// Reads one tensor as float with shape validation (dequantising FP8/FP4 with
// its .scale sibling). Records the consumed names.
std::vector<float> read_tensor(const CheckpointReader& reader, const std::string& name,
                               const std::vector<int64_t>& expected_shape,
                               std::set<std::string>& consumed) {
  const LocatedTensor tensor = locate_tensor(reader, name, expected_shape);
  consumed.insert(name);
  if (tensor.scale) consumed.insert(scale_name_for(name));
  std::vector<float> values(static_cast<size_t>(tensor.numel));
  read_located_tensor(reader, tensor, values.data());
  return values;
}

template <class T>
void copy_into(const std::vector<float>& src, T* dst) {
  std::copy(src.begin(), src.end(), dst);
}

}  // namespace

LocatedTensor locate_tensor(const CheckpointReader& reader, const std::string& name,
                            const std::vector<int64_t>& expected_shape) {
  LocatedTensor out;
  out.name = name;
  out.view = reader.find(name);
  if (!out.view)
    throw Error("checkpoint " + reader.source() + " has no tensor '" + name + "' (expected shape " +
                shape_string(expected_shape) + ")")
        .field(name);
  std::vector<int64_t> shape = out.view->shape;
  if (is_quantized(out.view->dtype)) {
    const std::string scale = scale_name_for(name);
    out.scale = reader.find(scale);
    if (!out.scale)
      throw Error("quantised tensor '" + name + "' in " + reader.source() +
                  " has no scale tensor '" + scale + "'")
          .field(name);
    shape = dequantized_shape(*out.view, *out.scale);
    if (shape != expected_shape)
      throw Error("tensor '" + name + "' in " + reader.source() + " dequantises to shape " +
                  shape_string(shape) + ", expected " + shape_string(expected_shape))
          .field(name);
  } else if (shape != expected_shape) {
    throw Error("tensor '" + name + "' in " + out.view->file + " has shape " + shape_string(shape) +
                ", expected " + shape_string(expected_shape))
        .field(name);
  }
  out.numel = 1;
  for (int64_t d : shape) out.numel *= d;
  return out;
}

void read_located_tensor(const CheckpointReader& reader, const LocatedTensor& tensor, float* out) {
  if (tensor.scale)
    dequantize_to_f32(*tensor.view, *tensor.scale, out, tensor.numel);
  else
    reader.read_f32(tensor.name, out, tensor.numel);
}

const char* naming_scheme_name(NamingScheme scheme) {
  switch (scheme) {
    case NamingScheme::kReleased:
      return "released";
    case NamingScheme::kTransformers:
      return "transformers";
    case NamingScheme::kTransformersHybrid:
      return "transformers-hybrid";
  }
  return "?";
}

NamingScheme detect_naming_scheme(const std::vector<std::string>& names) {
  bool port = false;
  for (const auto& n : names) {
    std::string prefix, rest;
    if (starts_with(n, "model.") && split_block(n.substr(6), "layers.", prefix, rest) &&
        (starts_with(rest, "attn.") || starts_with(rest, "ffn.") || starts_with(rest, "hc_")))
      return NamingScheme::kTransformersHybrid;
    if (starts_with(n, "model.") || n == "lm_head.weight") port = true;
  }
  return port ? NamingScheme::kTransformers : NamingScheme::kReleased;
}

std::string hybrid_name(const std::string& released) {
  if (released == "embed.weight") return "model.embed_tokens.weight";
  if (released == "norm.weight") return "model.norm.weight";
  for (const auto& [r, p] : head_suffixes())
    if (released == r) return "model." + p;
  std::string prefix, rest;
  if (split_block(released, "layers.", prefix, rest))
    return "model." + prefix +
           (rest == "attn.kv_norm.weight" ? std::string("attn.norm.weight") : rest);
  return released;  // head.weight, mtp.* keep their released names
}

std::string transformers_name(const std::string& released) {
  if (released == "embed.weight") return "model.embed_tokens.weight";
  if (released == "head.weight") return "lm_head.weight";
  if (released == "norm.weight") return "model.norm.weight";
  for (const auto& [r, p] : head_suffixes())
    if (released == r) return "model." + p;
  std::string prefix, rest;
  if (split_block(released, "layers.", prefix, rest))
    return "model." + prefix + map_block_suffix(rest, released);
  if (split_block(released, "mtp.", prefix, rest)) {
    for (const char* own :
         {"e_proj.weight", "h_proj.weight", "enorm.weight", "hnorm.weight", "norm.weight"})
      if (rest == own) return released;
    for (const auto& [r, p] : head_suffixes())
      if (rest == r) return prefix + p;
    return prefix + map_block_suffix(rest, released);
  }
  throw Error("no transformers name for tensor '" + released + "'");
}

TransformersLocation transformers_location(const ModelConfig& config, const std::string& released) {
  std::string prefix, rest;
  const bool block =
      split_block(released, "layers.", prefix, rest) || split_block(released, "mtp.", prefix, rest);
  if (block && starts_with(rest, "ffn.experts.")) {
    // ffn.experts.<e>.<w>.weight
    const std::string tail = rest.substr(std::string("ffn.experts.").size());
    const size_t dot = tail.find('.');
    const int64_t expert = std::stoll(tail.substr(0, dot));
    const std::string which = tail.substr(dot + 1);
    const std::string port_prefix =
        (starts_with(prefix, "layers.") ? "model." : "") + prefix + "mlp.experts.";
    const int64_t I = config.moe_intermediate_size;
    if (which == "w1.weight") return {port_prefix + "gate_up_proj", expert, 0, 2 * I};
    if (which == "w3.weight") return {port_prefix + "gate_up_proj", expert, I, 2 * I};
    if (which == "w2.weight") return {port_prefix + "down_proj", expert, 0, config.hidden_size};
    throw Error("no transformers name for tensor '" + released + "'");
  }
  return {transformers_name(released), -1, 0, 0};
}

template <class T>
NamingScheme load_weights(const CheckpointReader& reader, const ModelConfig& config,
                          ParamStore<T>& params, HashTables& hash_tables) {
  const NamingScheme scheme = detect_naming_scheme(reader.names());
  std::set<std::string> consumed;
  std::map<std::string, std::vector<float>> fused;  // transformers expert tensors, read once
  for (const ParamSpec& spec : params.specs()) {
    T* dst = params.value(spec.name);
    if (scheme != NamingScheme::kTransformers) {
      const std::string name =
          scheme == NamingScheme::kReleased ? spec.name : hybrid_name(spec.name);
      copy_into(read_tensor(reader, name, spec.shape, consumed), dst);
      continue;
    }
    const TransformersLocation loc = transformers_location(config, spec.name);
    if (loc.expert < 0) {
      copy_into(read_tensor(reader, loc.name, spec.shape, consumed), dst);
      continue;
    }
    auto it = fused.find(loc.name);
    if (it == fused.end()) {
      const std::vector<int64_t> shape = {config.n_routed_experts, loc.rows_total, spec.shape[1]};
      it = fused.emplace(loc.name, read_tensor(reader, loc.name, shape, consumed)).first;
    }
    const int64_t rows = spec.shape[0], cols = spec.shape[1];
    const float* src = it->second.data() + (loc.expert * loc.rows_total + loc.row_offset) * cols;
    std::copy(src, src + rows * cols, dst);
  }
  hash_tables.clear();
  const int64_t V = config.vocab_size, K = config.num_experts_per_tok;
  for (const std::string& released : hash_table_names(config)) {
    const std::string name = scheme == NamingScheme::kReleased       ? released
                             : scheme == NamingScheme::kTransformers ? transformers_name(released)
                                                                     : hybrid_name(released);
    const TensorView* view = reader.find(name);
    if (!view)
      throw Error("checkpoint " + reader.source() + " has no hash-routing table '" + name + "'")
          .field(name);
    if (view->shape != std::vector<int64_t>{V, K})
      throw Error("hash-routing table '" + name + "' has shape " + shape_string(view->shape) +
                  ", expected " + shape_string({V, K}))
          .field(name);
    consumed.insert(name);
    std::vector<int64_t> table = reader.read_i64(name);
    for (int64_t i = 0; i < V * K; ++i)
      if (table[i] < 0 || table[i] >= config.n_routed_experts)
        throw Error("hash-routing table '" + name + "' maps token " + std::to_string(i / K) +
                    " to expert " + std::to_string(table[i]) + ", outside [0, " +
                    std::to_string(config.n_routed_experts) + ")")
            .field(name);
    hash_tables.push_back(std::move(table));
  }
  std::vector<std::string> extra;
  for (const std::string& n : reader.names())
    if (!consumed.count(n)) extra.push_back(n);
  if (!extra.empty()) {
    std::string list;
    for (size_t i = 0; i < std::min<size_t>(extra.size(), 5); ++i)
      list += (i ? ", " : "") + extra[i];
    if (extra.size() > 5) list += ", ...";
    throw Error("checkpoint " + reader.source() + " has " + std::to_string(extra.size()) +
                " tensor(s) this model configuration does not use: " + list)
        .field(extra.front());
  }
  return scheme;
}

template <class T>
std::vector<NamedTensor> export_tensors(const ModelConfig& config, const ParamStore<T>& params,
                                        bool grads, NamingScheme scheme,
                                        const HashTables* hash_tables,
                                        const std::string& name_prefix) {
  std::vector<NamedTensor> out;
  std::map<std::string, size_t> fused_index;
  std::vector<T> value;  // a tensor's values (read() decodes a bf16 store)
  for (const ParamSpec& spec : params.specs()) {
    if (grads && spec.group == OptimizerGroup::kNotTrained) continue;  // router bias: no gradient
    const int64_t n = spec.numel(), at = params.offset(spec.name);
    const T* src = params.grads().data() + at;
    if (!grads) {
      value.resize(static_cast<size_t>(n));
      params.read(at, at + n, value.data());
      src = value.data();
    }
    if (scheme != NamingScheme::kTransformers) {
      const std::string name =
          scheme == NamingScheme::kReleased ? spec.name : hybrid_name(spec.name);
      out.push_back({name_prefix + name, spec.shape, std::vector<float>(src, src + n), {}});
      continue;
    }
    const TransformersLocation loc = transformers_location(config, spec.name);
    if (loc.expert < 0) {
      out.push_back({name_prefix + loc.name, spec.shape, std::vector<float>(src, src + n), {}});
      continue;
    }
    auto it = fused_index.find(loc.name);
    if (it == fused_index.end()) {
      const int64_t cols = spec.shape[1];
      NamedTensor t{
          name_prefix + loc.name, {config.n_routed_experts, loc.rows_total, cols}, {}, {}};
      t.f32.assign(static_cast<size_t>(config.n_routed_experts * loc.rows_total * cols), 0.0f);
      out.push_back(std::move(t));
      it = fused_index.emplace(loc.name, out.size() - 1).first;
    }
    NamedTensor& t = out[it->second];
    std::copy(src, src + n,
              t.f32.begin() + (loc.expert * loc.rows_total + loc.row_offset) * spec.shape[1]);
  }
  if (hash_tables) {
    const std::vector<std::string> names = hash_table_names(config);
    for (size_t i = 0; i < names.size() && i < hash_tables->size(); ++i) {
      const std::string name = scheme == NamingScheme::kReleased       ? names[i]
                               : scheme == NamingScheme::kTransformers ? transformers_name(names[i])
                                                                       : hybrid_name(names[i]);
      out.push_back({name_prefix + name,
                     {config.vocab_size, config.num_experts_per_tok},
                     {},
                     (*hash_tables)[i]});
    }
  }
  return out;
}

template <class T>
TensorToStream stream_parameter(const ParamStore<T>& params, const ParamSpec& spec, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    throw Error("internal: parameter '" + spec.name + "' streamed as " +
                std::string(safetensors_name(dtype)));
  const int64_t at = params.offset(spec.name), n = spec.numel();
  const size_t element = dtype == DType::kF32 ? sizeof(float) : sizeof(uint16_t);
  return {spec.name, dtype, spec.shape, static_cast<size_t>(n) * element,
          [&params, at, n, dtype](const TensorToStream::Sink& sink) {
            constexpr int64_t kPiece = int64_t{1} << 20;  // values per piece
            std::vector<T> piece;
            std::vector<float> f32;
            for (int64_t begin = 0; begin < n; begin += kPiece) {
              const int64_t count = std::min(kPiece, n - begin);
              piece.resize(static_cast<size_t>(count));
              params.read(at + begin, at + begin + count, piece.data());
              const float* values = nullptr;
              if constexpr (std::is_same_v<T, float>) {
                values = piece.data();
              } else {
                f32.assign(piece.begin(), piece.end());
                values = f32.data();
              }
              if (dtype == DType::kF32) {
                sink(std::string_view(reinterpret_cast<const char*>(values),
                                      static_cast<size_t>(count) * sizeof(float)));
              } else {
                const std::vector<uint16_t> bf16 = to_bf16(values, count);
                sink(std::string_view(reinterpret_cast<const char*>(bf16.data()),
                                      bf16.size() * sizeof(uint16_t)));
              }
            }
          }};
}

std::vector<TensorToStream> stream_hash_tables(const ModelConfig& config,
                                               const HashTables& tables) {
  std::vector<TensorToStream> out;
  const std::vector<std::string> names = hash_table_names(config);
  for (size_t i = 0; i < names.size() && i < tables.size(); ++i) {
    const std::vector<int64_t>& table = tables[i];
    out.push_back({names[i],
                   DType::kI64,
                   {config.vocab_size, config.num_experts_per_tok},
                   table.size() * sizeof(int64_t),
                   [&table](const TensorToStream::Sink& sink) {
                     sink(std::string_view(reinterpret_cast<const char*>(table.data()),
                                           table.size() * sizeof(int64_t)));
                   }});
  }
  return out;
}

template <class T>
void save_checkpoint(const std::string& dir, const ModelConfig& config, const ParamStore<T>& params,
                     const HashTables& hash_tables, NamingScheme scheme, DType float_dtype,
                     size_t max_shard_bytes) {
  require(float_dtype == DType::kF32 || float_dtype == DType::kBF16,
          "checkpoints are written in F32 or BF16");
  require(scheme != NamingScheme::kTransformersHybrid,
          "the hybrid naming is read-only; write the released or the transformers scheme");
  std::filesystem::create_directories(dir);
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"writer", "trex"}};
  if (scheme == NamingScheme::kReleased) {
    // Streamed from the store tensor by tensor (converted in pieces), so a
    // save holds no copy of the model; the released names are the store's.
    std::vector<TensorToStream> streams;
    for (const ParamSpec& spec : params.specs())
      streams.push_back(stream_parameter(params, spec, float_dtype));
    for (TensorToStream& table : stream_hash_tables(config, hash_tables))
      streams.push_back(std::move(table));
    write_checkpoint_streaming(dir, streams, metadata, max_shard_bytes);
    save_checkpoint_config(dir, config, scheme, float_dtype);
    return;
  }
  // The transformers scheme fuses each layer's experts: assembled in memory.
  const std::vector<NamedTensor> tensors =
      export_tensors(config, params, false, scheme, &hash_tables);
  std::vector<std::vector<uint16_t>> bf16(tensors.size());
  std::vector<TensorToWrite> writes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const NamedTensor& t = tensors[i];
    if (!t.i64.empty()) {
      writes.push_back(
          {t.name, DType::kI64, t.shape, t.i64.data(), t.i64.size() * sizeof(int64_t)});
    } else if (float_dtype == DType::kBF16) {
      bf16[i] = to_bf16(t.f32.data(), static_cast<int64_t>(t.f32.size()));
      writes.push_back(
          {t.name, DType::kBF16, t.shape, bf16[i].data(), bf16[i].size() * sizeof(uint16_t)});
    } else {
      writes.push_back({t.name, DType::kF32, t.shape, t.f32.data(), t.f32.size() * sizeof(float)});
    }
  }
  write_checkpoint(dir, writes, metadata, max_shard_bytes);
  save_checkpoint_config(dir, config, scheme, float_dtype);
}

void save_checkpoint_config(const std::string& dir, const ModelConfig& config, NamingScheme scheme,
                            DType float_dtype) {
  ModelConfig written = config;
  written.transformers_scheme = scheme == NamingScheme::kTransformers;
  written.torch_dtype = float_dtype == DType::kF32 ? "float32" : "bfloat16";
  write_file_atomic((std::filesystem::path(dir) / "config.json").string(),
                    written.to_json().dump(2) + "\n");
}

template <class T>
LoadedCheckpoint<T> load_checkpoint(const std::string& dir) {
  LoadedCheckpoint<T> out;
  const std::filesystem::path config_path = std::filesystem::path(dir) / "config.json";
  if (!std::filesystem::exists(config_path))
    throw Error("checkpoint directory has no config.json").file(config_path.string());
  out.config = ModelConfig::load(config_path.string());
  out.params = ParamStore<T>(parameter_specs(out.config));
  const CheckpointReader reader = CheckpointReader::open(dir);
  out.scheme = load_weights(reader, out.config, out.params, out.hash_tables);
  out.values_read = out.params.size();
  return out;
}

#define TREX_INSTANTIATE(T)                                                                      \
  template NamingScheme load_weights<T>(const CheckpointReader&, const ModelConfig&,             \
                                        ParamStore<T>&, HashTables&);                            \
  template std::vector<NamedTensor> export_tensors<T>(const ModelConfig&, const ParamStore<T>&,  \
                                                      bool, NamingScheme, const HashTables*,     \
                                                      const std::string&);                       \
  template void save_checkpoint<T>(const std::string&, const ModelConfig&, const ParamStore<T>&, \
                                   const HashTables&, NamingScheme, DType, size_t);              \
  template LoadedCheckpoint<T> load_checkpoint<T>(const std::string&);                           \
  template TensorToStream stream_parameter<T>(const ParamStore<T>&, const ParamSpec&, DType);
TREX_INSTANTIATE(float)
TREX_INSTANTIATE(double)
#undef TREX_INSTANTIATE

}  // namespace trex::model
