#include "trex/train/guard.hpp"

#include <algorithm>
#include <cmath>

#include "trex/core/error.hpp"
#include "trex/core/log.hpp"
#include "trex/train/metrics.hpp"

namespace trex::train {

const FaultInjection* FaultInjector::find(const std::string& kind, int64_t step) const {
  for (const FaultInjection& f : faults_)
    if (f.kind == kind && f.step == step) return &f;
  return nullptr;
}

bool FaultInjector::any_at(int64_t step) const {
  for (const char* kind :
       {"nan_activation", "inf_activation", "nan_grad", "inf_grad", "loss_spike"})
    if (find(kind, step)) return true;
  return false;
}

void FaultInjector::note(const FaultInjection& f, const std::string& what) const {
  if (log_) log::warn("fault injection (debug.inject ", f.text(), "): ", what);
}

void FaultInjector::PoisonedRow::restore() {
  if (params_) params_->write(begin_, begin_ + static_cast<int64_t>(saved_.size()), saved_.data());
  params_ = nullptr;
}

FaultInjector::PoisonedRow FaultInjector::poison_activation(
    int64_t step, model::ParamStore<float>& params, const model::ModelConfig& config,
    const std::vector<model::Batch>& micro_batches) const {
  PoisonedRow poisoned;
  const FaultInjection* f = find("nan_activation", step);
  if (!f) f = find("inf_activation", step);
  if (!f || !params.contains("embed.weight") || micro_batches.empty() ||
      micro_batches.front().input_ids.empty())
    return poisoned;
  const int64_t d = config.hidden_size;
  const int64_t token = micro_batches.front().input_ids.front();
  // Through read/write so that a bf16 store is poisoned (and restored) alike.
  poisoned.params_ = &params;
  poisoned.begin_ = params.offset("embed.weight") + token * d;
  poisoned.saved_.resize(static_cast<size_t>(d));
  params.read(poisoned.begin_, poisoned.begin_ + d, poisoned.saved_.data());
  const bool nan = f->kind == "nan_activation";
  const std::vector<float> poison(static_cast<size_t>(d), nan ? NAN : INFINITY);
  params.write(poisoned.begin_, poisoned.begin_ + d, poison.data());
  note(*f, "the embedding activation of token " + std::to_string(token) + " set to " +
               (nan ? "NaN" : "Inf") + " for this step's forward");
  return poisoned;
}

namespace {

// The first tensor the optimizer trains (a NaN there reaches the global norm).
const model::ParamSpec& first_trained_spec(const model::ParamStore<float>& params) {
  for (const model::ParamSpec& spec : params.specs())
    if (spec.group != model::OptimizerGroup::kNotTrained) return spec;
  throw Error("internal: the model has no trained parameter");
}

// The tensor holding flat offset `at` of `params`.
const model::ParamSpec& spec_at(const model::ParamStore<float>& params, int64_t at) {
  for (const model::ParamSpec& spec : params.specs()) {
    const int64_t begin = params.offset(spec.name);
    if (at >= begin && at < begin + spec.numel()) return spec;
  }
  throw Error("internal: offset " + std::to_string(at) + " is in no parameter");
}

}  // namespace

void FaultInjector::poison_gradient(int64_t step, model::ParamStore<float>& params,
                                    int64_t first_reduced) const {
  const FaultInjection* f = find("nan_grad", step);
  if (!f) f = find("inf_grad", step);
  if (!f) return;
  const int64_t at = std::max(params.offset(first_trained_spec(params).name), first_reduced);
  const bool nan = f->kind == "nan_grad";
  params.grads()[static_cast<size_t>(at)] = nan ? NAN : INFINITY;
  note(*f,
       "a gradient value of '" + spec_at(params, at).name + "' set to " + (nan ? "NaN" : "Inf"));
}

double FaultInjector::observed_loss(int64_t step, double loss, bool finite) const {
  double observed = finite ? loss : NAN;
  const FaultInjection* f = find("loss_spike", step);
  if (!f) return observed;
  observed *= 100.0;
  note(*f, "the loss the spike detector sees multiplied by 100 (" + format_value(loss) + " -> " +
               format_value(observed) + ")");
  return observed;
}

void FaultInjector::poison_loaded_weights(model::ParamStore<float>& params) const {
  const FaultInjection* f = find("nan_weight_on_load", 0);
  if (!f) return;
  const model::ParamSpec& spec = params.specs()[params.specs().size() / 2];
  const int64_t at = params.offset(spec.name);
  const float nan = NAN;
  params.write(at, at + 1, &nan);
  note(*f, "element 0 of loaded weight '" + spec.name + "' set to NaN");
}

void check_loaded_weights(const model::ParamStore<float>& params, const std::string& file,
                          parallel::Communicator& world) {
  std::string message;
  std::vector<float> v;
  for (const model::ParamSpec& spec : params.specs()) {
    const int64_t begin = params.offset(spec.name);
    v.resize(static_cast<size_t>(spec.numel()));
    params.read(begin, begin + spec.numel(), v.data());  // either storage
    int64_t count = 0, first = -1;
    for (int64_t i = 0; i < spec.numel(); ++i)
      if (!std::isfinite(v[i])) {
        if (first < 0) first = i;
        ++count;
      }
    if (count == 0) continue;
    message = "loaded weight tensor '" + spec.name + "' holds " + std::to_string(count) +
              " non-finite value" + (count == 1 ? "" : "s") +
              " (first: " + format_value(static_cast<double>(v[first])) + " at element " +
              std::to_string(first) + " of " + std::to_string(spec.numel()) +
              "): refusing to start training from these weights";
    break;
  }
  double bad = message.empty() ? 0.0 : 1.0;
  if (world.size() > 1) bad = world.all_reduce_value(bad);
  if (!message.empty()) throw Error(message).file(file);
  if (bad > 0)
    throw Error(
        "another rank found a non-finite loaded weight (see its message): refusing "
        "to start training")
        .file(file);
}

}  // namespace trex::train
