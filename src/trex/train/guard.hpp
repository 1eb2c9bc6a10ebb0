#pragma once
// The trainer's stability guard beyond run_step's skip of a non-finite loss or
// gradient norm (train/step.hpp): the check of the weights a run starts from,
// and the test-only fault injection (run config `debug.inject`,
// docs/training.md "Fault injection") that proves each check catches its fault.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "trex/model/model.hpp"
#include "trex/parallel/communicator.hpp"
#include "trex/train/run_config.hpp"

namespace trex::train {

class FaultInjector {
 public:
  // `log`: this rank logs what it injects (rank 0).
  FaultInjector(std::vector<FaultInjection> faults, bool log)
      : faults_(std::move(faults)), log_(log) {}

  // The injection of `kind` at `step`, or null.
  const FaultInjection* find(const std::string& kind, int64_t step) const;
  // Whether the step's metrics record gets fault_injected = 1.
  bool any_at(int64_t step) const;

  // nan_activation / inf_activation at `step`: the engine has no activation
  // hook, so the embedding row of the step's first token is poisoned for this
  // step's forward (its output, the activation entering block 0, is
  // non-finite); restore() puts the row back.
  class PoisonedRow {
   public:
    void restore();

   private:
    friend class FaultInjector;
    model::ParamStore<float>* params_ = nullptr;
    int64_t begin_ = 0;  // flat offset of the row
    std::vector<float> saved_;
  };
  PoisonedRow poison_activation(int64_t step, model::ParamStore<float>& params,
                                const model::ModelConfig& config,
                                const std::vector<model::Batch>& micro_batches) const;
  // nan_grad / inf_grad at `step`: this rank's first gradient value of the
  // first trained tensor, at or after `first_reduced` (ZeRO-2: its own range).
  void poison_gradient(int64_t step, model::ParamStore<float>& params, int64_t first_reduced) const;
  // The loss the spike detector sees: the step's (NaN unless `finite`), at a
  // loss_spike step multiplied by 100.
  double observed_loss(int64_t step, double loss, bool finite) const;
  // nan_weight_on_load: element 0 of the middle tensor of `params` set to NaN.
  void poison_loaded_weights(model::ParamStore<float>& params) const;

 private:
  void note(const FaultInjection& f, const std::string& what) const;

  std::vector<FaultInjection> faults_;
  bool log_ = false;
};

// Refuses to start from weights holding a NaN or an infinity (a diverged run's
// checkpoint, a bad conversion): names the first such tensor and `file`, where
// they came from. Collective over `world`: every rank refuses together.
void check_loaded_weights(const model::ParamStore<float>& params, const std::string& file,
                          parallel::Communicator& world);

}  // namespace trex::train
