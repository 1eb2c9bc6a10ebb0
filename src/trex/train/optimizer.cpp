#include "trex/train/optimizer.hpp"

#include <cstring>
#include <map>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"
#include "trex/core/rng.hpp"
#include "trex/io/safetensors.hpp"

namespace trex::train {

namespace {

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

}  // namespace

Optimizer::Optimizer(const model::ParamStore<float>& params, OptimizerOptions options)
    : options_(options),
      specs_(params.specs()),
      layout_hash_(layout_hash_of(params.specs())),
      size_(params.size()),
      first_moment_(static_cast<size_t>(params.size()), 0.0f),
      second_moment_(static_cast<size_t>(params.size()), 0.0f) {
  for (const model::ParamSpec& spec : specs_)
    if (options_.use_muon && spec.group == model::OptimizerGroup::kMuon && spec.shape.size() < 2)
      throw Error("Muon needs a matrix, got a tensor of rank " + std::to_string(spec.shape.size()))
          .field(spec.name);
}

void Optimizer::step(model::ParamStore<float>& params, double lr) {
  if (params.size() != size_ || params.specs().size() != specs_.size())
    throw Error(
        "optimizer step: parameter layout differs from the one the optimizer was built for");
  ++step_;
  const profile::PhaseScope phase(profile::Phase::kOptimizer);
  float* w = params.values().data();
  const float* g = params.grads().data();
  int64_t offset = 0;
  for (const model::ParamSpec& spec : specs_) {
    const int64_t n = spec.numel();
    if (spec.group == model::OptimizerGroup::kMuon && options_.use_muon) {
      // Trailing dimensions flatten into columns: [out, in] for every V4 matrix.
      const int64_t rows = spec.shape[0];
      TREX_PROFILE(profile::Op::kMuonOther);
      muon_update(w + offset, g + offset, first_moment_.data() + offset, rows, n / rows, lr,
                  options_.muon, workspace_);
    } else if (spec.group != model::OptimizerGroup::kNotTrained) {
      TREX_PROFILE(profile::Op::kAdamW);
      adamw_update(w + offset, g + offset, first_moment_.data() + offset,
                   second_moment_.data() + offset, n, lr, step_, options_.adamw);
    }
    offset += n;
  }
}

void Optimizer::set_state(int64_t step, std::vector<float> first_moment,
                          std::vector<float> second_moment) {
  if (step < 0) throw Error("optimizer state: negative step");
  if (static_cast<int64_t>(first_moment.size()) != size_ ||
      static_cast<int64_t>(second_moment.size()) != size_)
    throw Error("optimizer state: buffers of " + std::to_string(first_moment.size()) + " / " +
                std::to_string(second_moment.size()) + " values, expected " +
                std::to_string(size_));
  step_ = step;
  first_moment_ = std::move(first_moment);
  second_moment_ = std::move(second_moment);
}

void Optimizer::save_state(const std::string& path) const {
  const size_t bytes = first_moment_.size() * sizeof(float);
  std::vector<TensorToWrite> tensors = {
      {"first_moment", DType::kF32, {size_}, first_moment_.data(), bytes},
      {"second_moment", DType::kF32, {size_}, second_moment_.data(), bytes},
  };
  std::map<std::string, std::string> metadata = {
      {"trex_optimizer", kind_of(options_)},
      {"step", std::to_string(step_)},
      {"param_count", std::to_string(size_)},
      {"layout_hash", std::to_string(layout_hash_)},
  };
  ensure_parent_dir(path);
  write_safetensors(path, tensors, metadata);
}

void Optimizer::load_state(const std::string& path) {
  SafetensorsFile file = SafetensorsFile::open(path);
  const nlohmann::json& meta = file.metadata();
  auto text = [&](const char* key) -> std::string {
    if (!meta.contains(key) || !meta[key].is_string())
      throw Error("optimizer state: missing metadata").file(path).field(key);
    return meta[key].get<std::string>();
  };
  if (text("trex_optimizer") != kind_of(options_))
    throw Error("optimizer state is for '" + text("trex_optimizer") + "', this run uses '" +
                kind_of(options_) + "'")
        .file(path)
        .field("trex_optimizer");
  if (text("layout_hash") != std::to_string(layout_hash_) ||
      text("param_count") != std::to_string(size_))
    throw Error("optimizer state belongs to a different parameter layout")
        .file(path)
        .field("layout_hash");
  int64_t step = 0;
  try {
    step = std::stoll(text("step"));
  } catch (const std::exception&) {
    throw Error("optimizer state: step is not an integer").file(path).field("step");
  }
  auto read = [&](const char* name) {
    const TensorView* view = file.find(name);
    if (!view) throw Error("optimizer state: missing tensor").file(path).field(name);
    if (view->dtype != DType::kF32 || view->numel() != size_)
      throw Error("optimizer state: expected F32 [" + std::to_string(size_) + "]")
          .file(path)
          .field(name);
    std::vector<float> values(static_cast<size_t>(size_));
    std::memcpy(values.data(), view->data, view->nbytes);
    return values;
  };
  set_state(step, read("first_moment"), read("second_moment"));
}

}  // namespace trex::train
