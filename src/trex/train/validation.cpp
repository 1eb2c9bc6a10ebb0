#include "trex/train/validation.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <vector>

#include "trex/core/error.hpp"
#include "trex/parallel/pipeline.hpp"
#include "trex/train/data/source.hpp"

namespace trex::train {

double validation_loss(model::Model<float>& model, const RunConfig& config,
                       const io::Tokenizer& tokenizer, const ParallelSetup& setup) {
  if (config.validation_file.empty())
    throw Error("the run config has no validation file").field("data.validation");
  model.set_compute_precision(config.compute_precision());
  parallel::ProcessGrid& grid = *setup.grid;
  // With replicated experts validation runs the model locally: no
  // expert dispatch, whose collectives would need every EP rank to run the
  // same number of batches. With expert weights sharded over EP it has to
  // dispatch: every rank runs the same number of rounds, and a rank without
  // a batch of its own in the last round runs a copy of one and discards it.
  struct DetachExperts {
    model::Model<float>& m;
    model::TokenDispatchers<float>* dispatchers;
    ~DetachExperts() { m.set_token_dispatchers(dispatchers); }
  } detach{model, model.token_dispatchers()};
  if (!setup.ownership) model.set_token_dispatchers(nullptr);
  DataSource validation(config, tokenizer, config.validation_file, false);
  const int64_t available = std::max<int64_t>(
      1, (validation.sequences_in_epoch() + config.micro_batch - 1) / config.micro_batch);
  const int64_t batches = std::min(config.eval_batches, available);
  model::LossOptions loss_options;
  loss_options.mtp_weight = 0.0;
  model::StepOptions forward_only;
  forward_only.backward = false;
  // Pipeline stages hold only their layers: the batch goes through them all.
  std::optional<parallel::PipelineRunner> pipeline;
  if (grid.pp().size() > 1)
    pipeline.emplace(model, grid.pp(), config.parallel.pipeline_schedule,
                     config.parallel.pipeline_layers);
  auto run_forward = [&](const model::Batch& batch) {
    return pipeline ? pipeline->forward_only(batch, loss_options, forward_only)
                    : model.forward_backward(batch, loss_options, forward_only);
  };
  double sum = 0;
  int64_t count = 0;
  std::optional<model::Batch> any;  // a stand-in for the rounds without a batch of this rank
  int64_t ran = 0;
  for (int64_t i = 0; i < batches; ++i) {
    model::Batch batch = to_model_batch(validation.next_batch());
    if (i % grid.data_size() != grid.data_rank()) {
      if (!any) any = std::move(batch);
      continue;
    }
    const model::LossBreakdown r = run_forward(batch);
    sum += r.lm * static_cast<double>(r.lm_tokens);
    count += r.lm_tokens;
    ran += 1;
  }
  if (setup.ownership) {
    const int64_t rounds = (batches + grid.data_size() - 1) / grid.data_size();
    for (; ran < rounds; ++ran) {
      if (!any) throw Error("internal: no validation batch to stand in for a missing one");
      run_forward(*any);  // not counted
    }
  }
  if (grid.data_size() > 1) {
    std::vector<double> totals = {sum, static_cast<double>(count)};
    grid.data().all_reduce(std::span<double>(totals));
    sum = totals[0];
    count = static_cast<int64_t>(totals[1]);
  }
  return count > 0 ? sum / static_cast<double>(count) : NAN;
}

}  // namespace trex::train
