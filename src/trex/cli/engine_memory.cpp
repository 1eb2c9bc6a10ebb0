#include "trex/cli/engine_memory.hpp"

#include <string>
#include <vector>

#include "trex/core/error.hpp"
#include "trex/plan/job_answers.hpp"

namespace trex::cli {

train::RunConfig engine_run_config(const plan::Layout& l, const EngineJob& job,
                                   const model::ModelConfig& m) {
  plan::Layout planner_selective = l;
  planner_selective.recompute = plan::Recompute::kNone;
  const std::vector<std::string> only = plan::planner_only_features(planner_selective);
  if (!only.empty()) {
    std::string list;
    for (const std::string& f : only) list += (list.empty() ? "" : ", ") + f;
    throw Error("layout " + l.describe() + " uses what only the planner models (" + list +
                "); `trex plan --layout` estimates it")
        .field("--layout");
  }
  if (job.devices < 1 || job.devices % (l.pp * l.ep) != 0)
    throw Error(std::to_string(job.devices) +
                " devices are not a multiple of pp x ep = " + std::to_string(l.pp * l.ep))
        .field("--devices");
  if (l.ep > 1 && m.n_routed_experts % l.ep != 0)
    throw Error("ep" + std::to_string(l.ep) + " does not divide the model's " +
                std::to_string(m.n_routed_experts) + " routed experts")
        .field("--layout");
  train::RunConfig c;
  c.parallel.pp = l.pp;
  c.parallel.ep = l.ep;
  c.parallel.dp = job.devices / (l.pp * l.ep);  // the planner's DP folds EP in; the engine's not
  c.parallel.zero = l.zero;
  c.parallel.pipeline_schedule = l.schedule == plan::Schedule::kDualPipeV
                                     ? parallel::PipelineSchedule::kDualPipeV
                                     : parallel::PipelineSchedule::k1F1B;
  c.recompute = l.recompute == plan::Recompute::kFull ? model::ActivationRecompute::kFull
                : l.recompute == plan::Recompute::kSelective
                    ? model::ActivationRecompute::kSelective
                    : model::ActivationRecompute::kNone;
  c.seq_len = job.seq_len;
  c.micro_batch = job.micro_batch > 0 ? job.micro_batch : l.mbs;
  const int64_t fill = l.pp == 1 ? 1 : (l.schedule == plan::Schedule::kDualPipeV ? 2 * l.pp : l.pp);
  c.global_batch =
      job.global_batch > 0 ? job.global_batch : c.micro_batch * c.parallel.data_size() * fill;
  if (c.global_batch % c.micro_batch != 0)
    throw Error("the global batch " + std::to_string(c.global_batch) +
                " is not a multiple of the micro-batch " + std::to_string(c.micro_batch))
        .field("--global-batch");
  c.optimizer.use_muon = job.muon;
  c.optimizer.moment_dtype =
      job.bf16_moments ? train::MomentDType::kBF16 : train::MomentDType::kF32;
  c.optimizer.master_weights = job.bf16_params;
  return c;
}

plan::MemoryEstimate largest_rank_memory(const train::StateAccount& account) {
  const train::StateRole& r = account.largest();
  plan::MemoryEstimate m;
  // The stored values and, with bf16 parameters, the fp32 weights a pass decodes.
  m.weights = static_cast<double>(r.params + r.decoded);
  m.gradients = static_cast<double>(r.grads);
  // The planner's optimizer bytes: the moments, the master weights (if any) and the update's
  // scratch.
  m.optimizer = static_cast<double>(r.moments_max + r.master + r.optimizer_work);
  m.activations = static_cast<double>(r.activations);
  m.comm_buffers = static_cast<double>(r.comm);
  return m;
}

}  // namespace trex::cli
