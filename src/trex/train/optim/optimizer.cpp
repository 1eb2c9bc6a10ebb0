#include "trex/train/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>

#include "trex/core/atomic_file.hpp"
#include "trex/core/dtypes.hpp"
#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"
#include "trex/core/rng.hpp"
#include "trex/io/safetensors.hpp"
#include "trex/train/optim/optimizer_relayout.hpp"

namespace trex::train {

namespace {

// Muon matrices of one shape are updated in batches whose scratch
// (count·rows·cols floats) stays under this many values unless one matrix
// alone is larger; AdamW with bf16 moments goes through fp32 chunks.
constexpr int64_t kMuonBatchValues = int64_t{1} << 24;
constexpr int64_t kAdamWChunk = int64_t{1} << 20;

size_t muon_batch_size(int64_t rows, int64_t cols) {
  return static_cast<size_t>(std::max<int64_t>(1, kMuonBatchValues / (rows * cols)));
}

// Muon's [rows, cols] of a tensor: trailing dimensions flatten into columns
// ([out, in] for every V4 matrix). Matrices of one shape are updated together.
std::pair<int64_t, int64_t> muon_shape(const model::ParamSpec& spec) {
  return {spec.shape[0], spec.numel() / spec.shape[0]};
}

uint64_t layout_hash_of(const std::vector<model::ParamSpec>& specs) {
  uint64_t h = hash_string("trex-optimizer-layout");
  for (const model::ParamSpec& spec : specs) {
    h = hash_combine(h, hash_string(spec.name));
    h = hash_combine(h, static_cast<uint64_t>(spec.group));
    for (int64_t d : spec.shape) h = hash_combine(h, static_cast<uint64_t>(d));
  }
  return h;
}

const char* kind_of(const OptimizerOptions& options) {
  return options.use_muon ? "adamw+muon" : "adamw";
}

// Checks a state file's metadata against this run (optimizer kind, the layout
// the file was written for) and returns its step; errors name the file and key.
int64_t check_state_metadata(const nlohmann::json& meta, const std::string& path,
                             const OptimizerOptions& options, uint64_t layout_hash,
                             int64_t param_count) {
  auto text = [&](const char* key) -> std::string {
    if (!meta.contains(key) || !meta[key].is_string())
      throw Error("optimizer state: missing metadata").file(path).field(key);
    return meta[key].get<std::string>();
  };
  if (text("trex_optimizer") != kind_of(options))
    throw Error("optimizer state is for '" + text("trex_optimizer") + "', this run uses '" +
                kind_of(options) + "'")
        .file(path)
        .field("trex_optimizer");
  if (text("layout_hash") != std::to_string(layout_hash) ||
      text("param_count") != std::to_string(param_count))
    throw Error("optimizer state belongs to a different parameter layout")
        .file(path)
        .field("layout_hash");
  try {
    return std::stoll(text("step"));
  } catch (const std::exception&) {
    throw Error("optimizer state: step is not an integer").file(path).field("step");
  }
}

}  // namespace

Optimizer::Optimizer(const model::ParamStore<float>& params, OptimizerOptions options)
    : Optimizer(params, options, parallel::whole_shard(params.specs())) {}

Optimizer::Optimizer(const model::ParamStore<float>& params, OptimizerOptions options,
                     parallel::OptimizerShard shard)
    : Optimizer(params, options, std::vector<parallel::OptimizerShard>{shard}) {}

Optimizer::Optimizer(const model::ParamStore<float>& params, OptimizerOptions options,
                     std::vector<parallel::OptimizerShard> ranges)
    : options_(options),
      specs_(params.specs()),
      layout_hash_(layout_hash_of(params.specs())),
      size_(params.size()),
      ranges_(std::move(ranges)) {
  std::vector<int64_t> offset(specs_.size() + 1, 0);
  for (size_t i = 0; i < specs_.size(); ++i) offset[i + 1] = offset[i] + specs_[i].numel();
  int64_t state = 0, previous_end = 0;
  for (const parallel::OptimizerShard& r : ranges_) {
    if (r.first_spec > r.end_spec || r.end_spec > specs_.size() ||
        r.begin != offset[r.first_spec] || r.end != offset[r.end_spec])
      throw Error("optimizer shard does not cover whole parameter tensors of this model")
          .field("parallel.zero");
    if (r.begin < previous_end && r.size() > 0)
      throw Error("optimizer shard ranges overlap or are not in ascending order")
          .field("parallel.zero");
    if (r.size() > 0) previous_end = r.end;
    state += r.size();
  }
  for (const model::ParamSpec& spec : specs_)
    if (options_.use_muon && spec.group == model::OptimizerGroup::kMuon && spec.shape.size() < 2)
      throw Error("Muon needs a matrix, got a tensor of rank " + std::to_string(spec.shape.size()))
          .field(spec.name);
  int64_t second = 0, local = 0;
  for (const parallel::OptimizerShard& range : ranges_)
    for (size_t i = range.first_spec; i < range.end_spec; ++i) {
      const model::ParamSpec& spec = specs_[i];
      Slot slot;
      slot.spec = i;
      slot.param_offset = offset[i];
      slot.state_offset = local;
      if (spec.group == model::OptimizerGroup::kMuon && options_.use_muon) {
        slot.update = Update::kMuon;
      } else if (spec.group != model::OptimizerGroup::kNotTrained) {
        slot.update = Update::kAdamW;
        slot.second_offset = second;
        second += spec.numel();
      }
      slots_.push_back(slot);
      local += spec.numel();
    }
  const StateElements elements = state_elements(specs_, ranges_, options_);
  if (elements.first != state || elements.second != second)
    throw Error("internal: optimizer state sizes disagree with state_elements");
  first_moment_ = MomentBuffer(options_.moment_dtype, state);
  second_moment_ = MomentBuffer(options_.moment_dtype, second);
  if (options_.master_weights) master_.assign(static_cast<size_t>(state), 0.0f);
}

Optimizer::StateElements Optimizer::state_elements(
    const std::vector<model::ParamSpec>& specs, const std::vector<parallel::OptimizerShard>& ranges,
    const OptimizerOptions& options) {
  StateElements out;
  for (const parallel::OptimizerShard& range : ranges)
    for (size_t i = range.first_spec; i < range.end_spec; ++i) {
      const model::ParamSpec& spec = specs[i];
      out.first += spec.numel();
      const bool muon = spec.group == model::OptimizerGroup::kMuon && options.use_muon;
      if (!muon && spec.group != model::OptimizerGroup::kNotTrained) out.second += spec.numel();
    }
  return out;
}

int64_t Optimizer::work_elements(const std::vector<model::ParamSpec>& specs,
                                 const std::vector<parallel::OptimizerShard>& ranges,
                                 const OptimizerOptions& options) {
  std::map<std::pair<int64_t, int64_t>, int64_t> muon_by_shape;
  int64_t largest_adamw = 0;
  for (const parallel::OptimizerShard& range : ranges)
    for (size_t i = range.first_spec; i < range.end_spec; ++i) {
      const model::ParamSpec& spec = specs[i];
      if (spec.group == model::OptimizerGroup::kMuon && options.use_muon)
        muon_by_shape[muon_shape(spec)] += 1;
      else if (spec.group != model::OptimizerGroup::kNotTrained)
        largest_adamw = std::max(largest_adamw, spec.numel());
    }
  int64_t muon = 0;
  for (const auto& [shape, count] : muon_by_shape) {
    const auto [rows, cols] = shape;
    const auto batch = std::min<int64_t>(count, static_cast<int64_t>(muon_batch_size(rows, cols)));
    muon = std::max(muon, batch * rows * cols);
  }
  if (options.moment_dtype == MomentDType::kF32) return muon;
  // fp32 copies of the moments: a Muon batch's momentum or AdamW's first
  // moment of one chunk (one buffer), AdamW's second moment of one chunk.
  const int64_t chunk = std::min(kAdamWChunk, largest_adamw);
  return muon + std::max(muon, chunk) + chunk;
}

float* Optimizer::weights_of(const Slot& slot, float* params) {
  return master_.empty() ? params + slot.param_offset : master_.data() + slot.state_offset;
}

// `w` and `g`: the slot's weights (weights_of) and gradients.
void Optimizer::adamw_step(const Slot& slot, float* w, const float* g, double lr) {
  TREX_PROFILE(profile::Op::kAdamW);
  const int64_t n = specs_[slot.spec].numel();
  if (options_.moment_dtype == MomentDType::kF32) {
    adamw_update(w, g, first_moment_.f32() + slot.state_offset,
                 second_moment_.f32() + slot.second_offset, n, lr, step_, options_.adamw);
    return;
  }
  // AdamW is elementwise: bf16 moments go through fp32 scratch in chunks.
  for (int64_t at = 0; at < n; at += kAdamWChunk) {
    const int64_t count = std::min(kAdamWChunk, n - at);
    first_scratch_.resize(static_cast<size_t>(count));
    second_scratch_.resize(static_cast<size_t>(count));
    first_moment_.read(slot.state_offset + at, first_scratch_);
    second_moment_.read(slot.second_offset + at, second_scratch_);
    adamw_update(w + at, g + at, first_scratch_.data(), second_scratch_.data(), count, lr, step_,
                 options_.adamw);
    first_moment_.write(slot.state_offset + at, first_scratch_);
    second_moment_.write(slot.second_offset + at, second_scratch_);
  }
}

void Optimizer::muon_step(std::span<const Slot* const> slots, float* params, const float* grads,
                          double lr) {
  TREX_PROFILE(profile::Op::kMuonOther);
  const model::ParamSpec& first = specs_[slots.front()->spec];
  const int64_t rows = first.shape[0], cols = first.numel() / rows;
  const bool f32 = options_.moment_dtype == MomentDType::kF32;
  if (!f32) first_scratch_.resize(slots.size() * static_cast<size_t>(rows * cols));
  std::vector<MuonMatrixRef> matrices;
  matrices.reserve(slots.size());
  for (size_t k = 0; k < slots.size(); ++k) {
    const Slot& slot = *slots[k];
    float* momentum = f32 ? first_moment_.f32() + slot.state_offset
                          : first_scratch_.data() + k * static_cast<size_t>(rows * cols);
    if (!f32)
      first_moment_.read(slot.state_offset, std::span(momentum, static_cast<size_t>(rows * cols)));
    matrices.push_back({weights_of(slot, params), grads + slot.param_offset, momentum});
  }
  muon_update(matrices, rows, cols, lr, options_.muon, workspace_);
  if (!f32)
    for (size_t k = 0; k < slots.size(); ++k)
      first_moment_.write(
          slots[k]->state_offset,
          std::span<const float>(matrices[k].momentum, static_cast<size_t>(rows * cols)));
}

void Optimizer::step(model::ParamStore<float>& params, double lr) {
  if (params.size() != size_ || params.specs().size() != specs_.size())
    throw Error(
        "optimizer step: parameter layout differs from the one the optimizer was built for");
  const bool bf16_store = params.storage() == model::ParamStorage::kBF16;
  if (bf16_store && !options_.master_weights)
    throw Error("optimizer: a bf16 parameter store needs master weights (param_dtype = \"bf16\")");
  ++step_;
  const profile::PhaseScope phase(profile::Phase::kOptimizer);
  // A bf16 store has no fp32 values to update in place: the updates run on the
  // master (weights_of never reads w then).
  float* w = bf16_store ? nullptr : params.values().data();
  const float* g = params.grads().data();
  // Built and stepped without round_working_params (tests, tools): the
  // master starts from the store's values as they are.
  if (options_.master_weights && !master_set_) take_master_from(params);
  // Muon matrices of one shape are updated together (one batched op per shape);
  // each matrix's update is independent of the others, so the grouping does
  // not change results.
  std::map<std::pair<int64_t, int64_t>, std::vector<const Slot*>> muon_by_shape;
  for (const Slot& slot : slots_) {
    if (slot.update == Update::kAdamW)
      adamw_step(slot, weights_of(slot, w), g + slot.param_offset, lr);
    if (slot.update != Update::kMuon) continue;
    muon_by_shape[muon_shape(specs_[slot.spec])].push_back(&slot);
  }
  for (const auto& [shape, slots] : muon_by_shape) {
    const auto [rows, cols] = shape;
    const size_t per_batch = muon_batch_size(rows, cols);
    for (size_t first = 0; first < slots.size(); first += per_batch) {
      const size_t count = std::min(per_batch, slots.size() - first);
      muon_step(std::span(slots).subspan(first, count), w, g, lr);
    }
  }
  if (!options_.master_weights) return;
  // The working parameters: the updated master rounded to bf16 (a bf16 store
  // rounds what it is given; an fp32 store holds the rounded values).
  for (const Slot& slot : slots_) {
    if (slot.update == Update::kNone) continue;
    const int64_t n = specs_[slot.spec].numel();
    const float* master = master_.data() + slot.state_offset;
    if (bf16_store)
      params.write(slot.param_offset, slot.param_offset + n, master);
    else
      round_to_bf16(master, w + slot.param_offset, n);
  }
}

void Optimizer::round_working_params(model::ParamStore<float>& params) {
  if (!options_.master_weights) return;
  if (params.size() != size_ || params.specs().size() != specs_.size())
    throw Error("optimizer: parameter layout differs from the one the optimizer was built for");
  if (!master_set_) take_master_from(params);
  // A bf16 store holds rounded values already (its writes round).
  if (params.storage() == model::ParamStorage::kBF16) return;
  float* w = params.values().data();
  for (const model::ParamSpec& spec : specs_)
    if (spec.group != model::OptimizerGroup::kNotTrained) {
      float* values = w + params.offset(spec.name);
      round_to_bf16(values, values, spec.numel());
    }
}

void Optimizer::take_master_from(const model::ParamStore<float>& params) {
  // In place: the buffer was allocated with the optimizer.
  master_.resize(static_cast<size_t>(state_size()));
  int64_t at = 0;
  for (const parallel::OptimizerShard& r : ranges_) {
    params.read(r.begin, r.end, master_.data() + at);
    at += r.size();
  }
  master_set_ = true;
}

std::vector<float> Optimizer::second_moment() const {
  std::vector<float> out(static_cast<size_t>(state_size()), 0.0f);
  for (const Slot& slot : slots_)
    if (slot.update == Update::kAdamW)
      second_moment_.read(slot.second_offset,
                          std::span(out.data() + slot.state_offset,
                                    static_cast<size_t>(specs_[slot.spec].numel())));
  return out;
}

std::vector<float> Optimizer::gather_ranges(const void* whole) const {
  // Bytes: a mapped file's tensor need not be float-aligned.
  const auto* bytes = static_cast<const uint8_t*>(whole);
  std::vector<float> out(static_cast<size_t>(state_size()));
  int64_t at = 0;
  for (const parallel::OptimizerShard& r : ranges_) {
    std::memcpy(out.data() + at, bytes + static_cast<size_t>(r.begin) * sizeof(float),
                static_cast<size_t>(r.size()) * sizeof(float));
    at += r.size();
  }
  return out;
}

void Optimizer::set_state(int64_t step, std::vector<float> first_moment,
                          std::vector<float> second_moment, std::vector<float> master) {
  if (step < 0) throw Error("optimizer state: negative step");
  const auto length = [](const std::vector<float>& v) { return static_cast<int64_t>(v.size()); };
  if (length(first_moment) == size_ && length(second_moment) == size_ && sharded()) {
    // The whole model's state: keep this optimizer's ranges.
    first_moment = gather_ranges(first_moment.data());
    second_moment = gather_ranges(second_moment.data());
    if (length(master) == size_) master = gather_ranges(master.data());
  }
  if (!master.empty() && length(master) != state_size())
    throw Error("optimizer state: master weights of " + std::to_string(master.size()) +
                " values, expected " + std::to_string(state_size()));
  if (length(first_moment) != state_size() || length(second_moment) != state_size())
    throw Error("optimizer state: buffers of " + std::to_string(first_moment.size()) + " / " +
                std::to_string(second_moment.size()) + " values, expected " +
                std::to_string(size_) +
                (sharded() ? " (or the shard's " + std::to_string(state_size()) + ")" : ""));
  step_ = step;
  first_moment_.assign(first_moment);
  if (options_.master_weights) {
    // Without a master in the state, round_working_params takes it from the
    // parameters loaded with it.
    master_set_ = !master.empty();
    if (master_set_) master_ = std::move(master);
  }
  for (const Slot& slot : slots_)
    if (slot.update == Update::kAdamW)
      second_moment_.write(slot.second_offset,
                           std::span<const float>(second_moment.data() + slot.state_offset,
                                                  static_cast<size_t>(specs_[slot.spec].numel())));
}

void Optimizer::save_state(const std::string& path) const {
  if (sharded())
    throw Error("a sharded (ZeRO) optimizer saves the state gathered from every shard").file(path);
  // Streamed in pieces, so that saving holds neither moment as a whole fp32
  // copy (the second moment exists only for AdamW's tensors; the file's is
  // whole, zero elsewhere).
  constexpr int64_t kPiece = int64_t{1} << 22;  // values per piece (16 MiB of fp32)
  auto stream = [&](bool second) {
    return [this, second](const TensorToStream::Sink& sink) {
      std::vector<float> piece;
      for (int64_t begin = 0; begin < size_; begin += kPiece) {
        const int64_t end = std::min(size_, begin + kPiece);
        piece.assign(static_cast<size_t>(end - begin), 0.0f);
        if (!second) {
          first_moment_.read(begin, piece);
        } else {
          for (const Slot& slot : slots_) {
            if (slot.update != Update::kAdamW) continue;
            const int64_t lo = std::max(begin, slot.state_offset);
            const int64_t hi = std::min(end, slot.state_offset + specs_[slot.spec].numel());
            if (lo < hi)
              second_moment_.read(
                  slot.second_offset + (lo - slot.state_offset),
                  std::span(piece.data() + (lo - begin), static_cast<size_t>(hi - lo)));
          }
        }
        sink(std::string_view(reinterpret_cast<const char*>(piece.data()),
                              piece.size() * sizeof(float)));
      }
    };
  };
  const size_t bytes = static_cast<size_t>(size_) * sizeof(float);
  std::vector<TensorToStream> tensors = {
      {"first_moment", DType::kF32, {size_}, bytes, stream(false)},
      {"second_moment", DType::kF32, {size_}, bytes, stream(true)}};
  if (options_.master_weights) {
    // Unsharded: the master is indexed like the parameters.
    if (!master_set_)
      throw Error("optimizer state: master weights were never set (round_working_params)")
          .file(path);
    tensors.push_back(
        {"master", DType::kF32, {size_}, bytes, [this](const TensorToStream::Sink& sink) {
           sink(std::string_view(reinterpret_cast<const char*>(master_.data()),
                                 master_.size() * sizeof(float)));
         }});
  }
  ensure_parent_dir(path);
  write_safetensors_streaming(path, tensors, state_metadata());
}

void Optimizer::save_state(const std::string& path, std::span<const float> whole_first_moment,
                           std::span<const float> whole_second_moment,
                           std::span<const float> whole_master) const {
  if (static_cast<int64_t>(whole_first_moment.size()) != size_ ||
      static_cast<int64_t>(whole_second_moment.size()) != size_)
    throw Error("optimizer state to save: buffers of " + std::to_string(whole_first_moment.size()) +
                " / " + std::to_string(whole_second_moment.size()) + " values, expected " +
                std::to_string(size_))
        .file(path);
  const size_t bytes = whole_first_moment.size() * sizeof(float);
  std::vector<TensorToWrite> tensors = {
      {"first_moment", DType::kF32, {size_}, whole_first_moment.data(), bytes},
      {"second_moment", DType::kF32, {size_}, whole_second_moment.data(), bytes},
  };
  if (options_.master_weights) {
    if (static_cast<int64_t>(whole_master.size()) != size_)
      throw Error("optimizer state to save: master weights of " +
                  std::to_string(whole_master.size()) + " values, expected " +
                  std::to_string(size_))
          .file(path);
    tensors.push_back({"master", DType::kF32, {size_}, whole_master.data(), bytes});
  }
  ensure_parent_dir(path);
  write_safetensors(path, tensors, state_metadata());
}

std::map<std::string, std::string> Optimizer::state_metadata() const {
  return {
      {"trex_optimizer", kind_of(options_)},
      {"step", std::to_string(step_)},
      {"param_count", std::to_string(size_)},
      {"layout_hash", std::to_string(layout_hash_)},
      // Informational: the file always holds fp32 (bf16 widens exactly), so
      // a run may resume with either moment dtype.
      {"moment_dtype", moment_dtype_name(options_.moment_dtype)},
      // Informational: whether the file holds fp32 master weights.
      {"master_weights", options_.master_weights ? "f32" : "none"},
  };
}

void Optimizer::load_state(const std::string& path) {
  SafetensorsFile file = SafetensorsFile::open(path);
  const int64_t step = check_state_metadata(file.metadata(), path, options_, layout_hash_, size_);
  auto read = [&](const char* name) {
    const TensorView* view = file.find(name);
    if (!view) throw Error("optimizer state: missing tensor").file(path).field(name);
    if (view->dtype != DType::kF32 || view->numel() != size_)
      throw Error("optimizer state: expected F32 [" + std::to_string(size_) + "]")
          .file(path)
          .field(name);
    // Only this optimizer's ranges of the (whole-model) state are kept.
    return gather_ranges(view->data);
  };
  // A master is read when this run keeps one and the file has it.
  std::vector<float> master;
  if (options_.master_weights && file.find("master")) master = read("master");
  set_state(step, read("first_moment"), read("second_moment"), std::move(master));
}

std::vector<std::string> Optimizer::state_tensor_names(const model::ParamSpec& spec,
                                                       const OptimizerOptions& options) {
  if (spec.group == model::OptimizerGroup::kNotTrained) return {};
  std::vector<std::string> names = {"first_moment." + spec.name};
  // Muon: momentum only.
  if (spec.group != model::OptimizerGroup::kMuon || !options.use_muon)
    names.push_back("second_moment." + spec.name);
  if (options.master_weights) names.push_back("master." + spec.name);
  return names;
}

void Optimizer::save_state_shard(const std::string& path,
                                 const std::vector<parallel::OptimizerShard>& ranges,
                                 const std::vector<model::ParamSpec>& whole_layout) const {
  std::vector<const Slot*> slot_of(specs_.size(), nullptr);
  for (const Slot& slot : slots_) slot_of[slot.spec] = &slot;
  // fp32 moments are written from the buffers; bf16 ones decoded per tensor.
  std::vector<std::vector<float>> decoded;
  std::vector<TensorToWrite> tensors;
  auto add = [&](const std::string& name, const model::ParamSpec& spec, const MomentBuffer& buffer,
                 int64_t at) {
    const size_t n = static_cast<size_t>(spec.numel());
    const float* data = nullptr;
    if (buffer.dtype() == MomentDType::kF32) {
      data = buffer.f32() + at;
    } else {
      decoded.emplace_back(n);
      buffer.read(at, decoded.back());
      data = decoded.back().data();
    }
    tensors.push_back({name, DType::kF32, spec.shape, data, n * sizeof(float)});
  };
  decoded.reserve(2 * specs_.size());  // pointers into it must stay valid
  for (const parallel::OptimizerShard& range : ranges)
    for (size_t i = range.first_spec; i < range.end_spec; ++i) {
      const Slot* slot = i < slot_of.size() ? slot_of[i] : nullptr;
      if (!slot)
        throw Error("optimizer state: tensor '" + (i < specs_.size() ? specs_[i].name : "?") +
                    "' is outside this optimizer's shard")
            .file(path);
      if (slot->update == Update::kNone) continue;
      const model::ParamSpec& spec = specs_[i];
      add("first_moment." + spec.name, spec, first_moment_, slot->state_offset);
      if (slot->update == Update::kAdamW)
        add("second_moment." + spec.name, spec, second_moment_, slot->second_offset);
      if (options_.master_weights) {
        if (!master_set_)
          throw Error("optimizer state: master weights were never set (round_working_params)")
              .file(path);
        tensors.push_back({"master." + spec.name, DType::kF32, spec.shape,
                           master_.data() + slot->state_offset,
                           static_cast<size_t>(spec.numel()) * sizeof(float)});
      }
    }
  int64_t whole_size = 0;
  for (const model::ParamSpec& spec : whole_layout) whole_size += spec.numel();
  const std::map<std::string, std::string> metadata = {
      {"trex_optimizer", kind_of(options_)},
      {"step", std::to_string(step_)},
      {"param_count", std::to_string(whole_size)},
      {"layout_hash", std::to_string(layout_hash_of(whole_layout))},
      {"moment_dtype", moment_dtype_name(options_.moment_dtype)},
      {"master_weights", options_.master_weights ? "f32" : "none"},
  };
  ensure_parent_dir(path);
  write_safetensors(path, tensors, metadata);
}

void Optimizer::load_state_shards(const CheckpointReader& shards,
                                  const std::vector<model::ParamSpec>& whole_layout) {
  const std::string& where = shards.source();
  int64_t whole_size = 0;
  for (const model::ParamSpec& spec : whole_layout) whole_size += spec.numel();
  const int64_t step = check_state_metadata(shards.metadata(), where, options_,
                                            layout_hash_of(whole_layout), whole_size);
  std::vector<float> first(static_cast<size_t>(state_size()), 0.0f);
  std::vector<float> second(first.size(), 0.0f);
  // The master is read when this run keeps one and the shards have it (all
  // of its tensors or none: a state saved without master weights).
  std::vector<float> master(options_.master_weights ? first.size() : 0, 0.0f);
  int64_t masters_found = 0, masters_wanted = 0;
  for (const Slot& slot : slots_) {
    if (slot.update == Update::kNone) continue;
    const model::ParamSpec& spec = specs_[slot.spec];
    OptimizerOptions moments_only = options_;
    moments_only.master_weights = false;
    for (const std::string& name : state_tensor_names(spec, moments_only)) {
      const TensorView* view = shards.find(name);
      if (!view) throw Error("optimizer state: missing tensor").file(where).field(name);
      std::vector<float>& out = name.rfind("first_moment.", 0) == 0 ? first : second;
      shards.read_f32(name, out.data() + slot.state_offset, spec.numel());
    }
    if (!options_.master_weights) continue;
    ++masters_wanted;
    const std::string name = "master." + spec.name;
    if (!shards.find(name)) continue;
    shards.read_f32(name, master.data() + slot.state_offset, spec.numel());
    ++masters_found;
  }
  if (masters_found != 0 && masters_found != masters_wanted)
    throw Error("optimizer state: master weights for " + std::to_string(masters_found) + " of " +
                std::to_string(masters_wanted) + " tensors of this rank")
        .file(where)
        .field("master");
  if (masters_found == 0) master.clear();
  set_state(step, std::move(first), std::move(second), std::move(master));
}

void load_optimizer_state_by_name(Optimizer& optimizer, const model::ParamStore<float>& params,
                                  const std::string& path,
                                  const std::vector<model::ParamSpec>& file_layout) {
  if (params.size() != optimizer.param_count())
    throw Error("optimizer state: the optimizer was built for another parameter layout").file(path);
  int64_t file_size = 0;
  std::map<std::string, int64_t> file_offset;
  for (const model::ParamSpec& spec : file_layout) {
    file_offset.emplace(spec.name, file_size);
    file_size += spec.numel();
  }
  SafetensorsFile file = SafetensorsFile::open(path);
  const int64_t step = check_state_metadata(file.metadata(), path, optimizer.options(),
                                            layout_hash_of(file_layout), file_size);
  auto read = [&](const char* name) {
    const TensorView* view = file.find(name);
    if (!view) throw Error("optimizer state: missing tensor").file(path).field(name);
    if (view->dtype != DType::kF32 || view->numel() != file_size)
      throw Error("optimizer state: expected F32 [" + std::to_string(file_size) + "]")
          .file(path)
          .field(name);
    // params' tensors in params' order; set_state keeps the optimizer's shard.
    std::vector<float> values(static_cast<size_t>(params.size()));
    int64_t at = 0;
    for (const model::ParamSpec& spec : params.specs()) {
      auto it = file_offset.find(spec.name);
      if (it == file_offset.end())
        throw Error("optimizer state: the file's layout has no tensor '" + spec.name + "'")
            .file(path)
            .field(spec.name);
      std::memcpy(values.data() + at, view->data + static_cast<size_t>(it->second) * sizeof(float),
                  static_cast<size_t>(spec.numel()) * sizeof(float));
      at += spec.numel();
    }
    return values;
  };
  std::vector<float> master;
  if (optimizer.has_master() && file.find("master")) master = read("master");
  optimizer.set_state(step, read("first_moment"), read("second_moment"), std::move(master));
}

}  // namespace trex::train
