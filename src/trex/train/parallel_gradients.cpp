#include "trex/train/parallel_gradients.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>
#include <string>

#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"
#include "trex/parallel/padded_collectives.hpp"
#include "trex/train/data/source.hpp"
#include "trex/train/optim/grad_clip.hpp"

namespace trex::train {

ParallelGradients::ParallelGradients(model::Model<float>& model, const ParallelSetup& setup,
                                     const RunConfig& config)
    : model_(model),
      setup_(setup),
      zero_(static_cast<int>(config.parallel.zero)),
      overlap_(config.parallel.overlap_grad_reduce),
      zero_partition_(setup.zero_partition(model.params().specs())),
      // Stages hold disjoint tensors: nothing is summed over pp (the tied
      // embedding apart, sum_tied_embedding_gradients).
      reducer_(model.params().specs(), &setup.grid->data(), nullptr, zero_partition_,
               {.bucket_bytes = std::max<int64_t>(
                    4, static_cast<int64_t>(config.parallel.bucket_mb * 1024.0 * 1024.0)),
                .scatter = scatter(),
                .experts = setup.ownership ? &setup.grid->dp() : nullptr,
                .max_in_flight = config.parallel.max_in_flight_buckets}) {
  const int pp = setup.grid->shape().pp;
  if (pp <= 1) return;
  pipeline_ = std::make_unique<parallel::PipelineRunner>(
      model, setup.grid->pp(), config.parallel.pipeline_schedule, config.parallel.pipeline_layers);
  if (setup.tied_embedding) {
    tied_embedding_peer_ = 0;  // chunk 0, the embedding, is on pp rank 0 in every schedule
  } else if (setup.grid->coords().pp == 0) {
    for (int r = 1; r < pp; ++r)
      if (model::holds_tied_embedding(model.config(), setup.stages_of(r, model.config())))
        tied_embedding_peer_ = r;
  }
}

void ParallelGradients::sum_tied_embedding_gradients() {
  if (tied_embedding_peer_ < 0) return;
  model::ParamStore<float>& params = model_.params();
  const int64_t n = params.spec("embed.weight").numel();
  float* mine = params.grad("embed.weight");
  std::vector<float> other(static_cast<size_t>(n));
  constexpr int kTiedEmbeddingTag = 7200;
  parallel::Communicator& pp = setup_.grid->pp();
  // Whole-buffer messages: the communicator cuts what exceeds its per-call limit.
  std::vector<parallel::Request> requests;
  requests.push_back(
      pp.irecv(other.data(), n, parallel::DType::kF32, tied_embedding_peer_, kTiedEmbeddingTag));
  requests.push_back(
      pp.isend(mine, n, parallel::DType::kF32, tied_embedding_peer_, kTiedEmbeddingTag));
  parallel::wait_all(requests);
  // a + b == b + a: both copies hold the same bits afterwards.
  for (int64_t i = 0; i < n; ++i) mine[i] += other[static_cast<size_t>(i)];
}

std::vector<parallel::OptimizerShard> ParallelGradients::counted_in_norm(
    std::vector<parallel::OptimizerShard> parts) const {
  if (!setup_.tied_embedding) return parts;
  return parallel::without_tensor(parts, model_.params().specs(), "embed.weight");
}

std::vector<parallel::OptimizerShard> ParallelGradients::zero_ranges() const {
  return zero_partition_.ranges(setup_.grid->data().rank(), setup_.expert_comm().rank());
}

bool ParallelGradients::scatter() const {
  return zero_ == 2 && setup_.grid->data_size() > 1;
}

StepMetrics::Communication ParallelGradients::communication(double exposed_seconds) const {
  return {.exposed_seconds = exposed_seconds,
          .reduce_wait_seconds = reduce_wait_seconds_,
          .groups_overlapped = groups_started_early_,
          .buckets = reducer_.bucket_count(),
          .buckets_done_in_backward = reducer_.buckets_done_before_finish(),
          .gradient_bytes = gradient_bytes_};
}

std::vector<size_t> ParallelGradients::my_micro_batches(size_t count) const {
  std::vector<size_t> mine;
  for (size_t i = static_cast<size_t>(setup_.grid->data_rank()); i < count;
       i += static_cast<size_t>(setup_.grid->data_size()))
    mine.push_back(i);
  return mine;
}

StepTotals ParallelGradients::forward_backward(const std::vector<model::Batch>& batches,
                                               const model::LossOptions& loss) {
  gradient_bytes_ = 0;
  const size_t accumulation = batches.size();
  std::vector<int64_t> trained;
  int64_t step_trained = 0;
  for (const model::Batch& b : batches) {
    trained.push_back(count_trained_tokens(b));
    step_trained += trained.back();
  }
  std::vector<float> weights(accumulation, 1.0f);
  if (accumulation > 1)
    for (size_t i = 0; i < accumulation; ++i) weights[i] = static_cast<float>(trained[i]);
  // The pipeline weights every micro-batch by nᵢ (its backward starts before
  // the step's later forwards), so its step always divides by N.
  const float scale = (accumulation > 1 || pipeline_) && step_trained > 0
                          ? 1.0f / static_cast<float>(step_trained)
                          : 1.0f;
  const std::vector<size_t> mine = my_micro_batches(accumulation);
  StepTotals totals = pipeline_ ? pipeline_gradients(batches, mine, loss)
                                : local_gradients(batches, trained, mine, weights, loss);
  totals.micro_batches = static_cast<int64_t>(accumulation);
  const auto reduce_start = std::chrono::steady_clock::now();
  groups_started_early_ = reducer_.groups_started_early();
  reducer_.finish(scale);
  reduce_wait_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - reduce_start).count();
  reduce_step_totals(totals);
  return totals;
}

// Forward and backward of this rank's micro-batches `mine` (gᵢ the engine's
// per-micro-batch mean gradient, wᵢ = weights[i], applied by the engine
// through StepOptions::gradient_weight); the reducer holds Σ wᵢ gᵢ reduced
// once it finishes. ZeRO-0/1: the micro-batches accumulate (+=, fp32) into
// the engine's gradient buffer, zeroed once per step, and the last one's
// backward hands it to the reducer: one reduction per step and no second
// full-size buffer. ZeRO-2: every micro-batch is reduce-scattered into this
// rank's shard (accumulated there) and the buckets already sent give their
// pages back (params' grad buffer), so the buffer is zeroed per micro-batch.
// With overlap, each reduced backward hands every finished layer to the
// reducer, which starts reducing it at once.
StepTotals ParallelGradients::local_gradients(const std::vector<model::Batch>& batches,
                                              const std::vector<int64_t>& trained,
                                              const std::vector<size_t>& mine,
                                              const std::vector<float>& weights,
                                              const model::LossOptions& loss) {
  model::ParamStore<float>& params = model_.params();
  const bool every_micro_batch = scatter();
  StepTotals local;
  reducer_.begin_step(params.grads().data(),
                      [this](int64_t b, int64_t e) { model_.params().release_grads(b, e); });
  for (size_t k = 0; k < mine.size(); ++k) {
    const size_t i = mine[k];
    const bool last = k + 1 == mine.size();
    const bool reduce = every_micro_batch || last;
    if (every_micro_batch || k == 0) {
      TREX_PROFILE(profile::Op::kZeroGrads, profile::Phase::kOptimizer);
      params.zero_grads();
    }
    model::StepOptions step_options;
    // The engine applies wᵢ inside backward (not afterwards): with expert
    // parallelism an owned expert's gradient also holds other ranks' micro-batches.
    step_options.gradient_weight = weights[i];
    if (reduce) {
      reducer_.begin_micro_batch();
      if (overlap_)
        step_options.on_gradients_ready = [this](int64_t layer) {
          reducer_.on_gradients_ready(layer);
          note_gradient_memory();
        };
    }
    const model::LossBreakdown r = model_.forward_backward(batches[i], loss, step_options);
    note_gradient_memory();
    if (r.lm_tokens != trained[i])
      throw Error("internal: micro-batch " + std::to_string(i) + " trained " +
                  std::to_string(r.lm_tokens) + " tokens, the step planned " +
                  std::to_string(trained[i]));
    local.add(r);
    if (reduce) reducer_.finish_micro_batch();
    note_gradient_memory();
  }
  return local;
}

// pp > 1: this rank's micro-batches go through the pipeline; the runner
// accumulates Σ nᵢ gᵢ for the chunks this rank holds (zeros elsewhere) and
// returns the step's losses and loads, identical on every stage.
StepTotals ParallelGradients::pipeline_gradients(const std::vector<model::Batch>& batches,
                                                 const std::vector<size_t>& mine,
                                                 const model::LossOptions& loss) {
  model::ParamStore<float>& params = model_.params();
  {
    TREX_PROFILE(profile::Op::kZeroGrads, profile::Phase::kOptimizer);
    params.zero_grads();
  }
  reducer_.begin_step(params.grads().data());
  reducer_.begin_micro_batch();
  std::vector<model::Batch> local;
  for (size_t i : mine) local.push_back(batches[i]);
  const parallel::PipelineResult r = pipeline_->run(local, loss);
  sum_tied_embedding_gradients();
  StepTotals totals;
  totals.lm_sum = r.lm_sum;
  totals.mtp_sum = r.mtp_sum;
  totals.balance_sum = r.balance_sum;
  totals.lm_tokens = r.lm_tokens;
  totals.mtp_tokens = r.mtp_tokens;
  totals.expert_load = r.expert_load;
  for (const model::LossBreakdown& b : r.micro_batches)
    totals.finite = totals.finite && std::isfinite(b.total);
  bubble_fraction_ = 0.0;
  for (double f : r.bubble_fraction) bubble_fraction_ = std::max(bubble_fraction_, f);
  return totals;
}

// Sums the ranks' contributions (data group, then pipeline stages, whose
// non-owning stages contribute zeros) so every rank sees the step's totals.
void ParallelGradients::reduce_step_totals(StepTotals& local) {
  parallel::ProcessGrid& grid = *setup_.grid;
  std::vector<double> totals = {local.lm_sum,
                                local.mtp_sum,
                                local.balance_sum,
                                static_cast<double>(local.lm_tokens),
                                static_cast<double>(local.mtp_tokens),
                                local.finite ? 0.0 : 1.0};
  for (const auto& layer : local.expert_load)
    for (int64_t v : layer) totals.push_back(static_cast<double>(v));  // exact below 2⁵³
  // The pipeline runner's totals are already those of the whole pipeline.
  if (grid.data().size() > 1) grid.data().all_reduce(std::span<double>(totals));
  if (!pipeline_ && grid.pp().size() > 1) grid.pp().all_reduce(std::span<double>(totals));
  local.lm_sum = totals[0];
  local.mtp_sum = totals[1];
  local.balance_sum = totals[2];
  local.lm_tokens = static_cast<int64_t>(totals[3]);
  local.mtp_tokens = static_cast<int64_t>(totals[4]);
  local.finite = totals[5] == 0.0;
  size_t at = 6;
  for (auto& layer : local.expert_load)
    for (int64_t& v : layer) v = static_cast<int64_t>(totals[at++]);
}

// Gradient memory this rank holds right now (resident pages of the engine's
// buffer, the ZeRO-2 shard); the step's
// largest sample is reported as grad_memory_mib.
void ParallelGradients::note_gradient_memory() {
  const int64_t resident = model::resident_bytes(model_.params().grads());
  const int64_t buffer = resident >= 0
                             ? resident
                             : static_cast<int64_t>(model_.params().grads().size() * sizeof(float));
  const int64_t held = buffer + reducer_.shard_bytes();
  gradient_bytes_ = std::max(gradient_bytes_, held);
}

// Global-norm clipping. Under ZeRO-2 each rank holds only its ranges of the
// gradient: the dense parts split the dense tensors over `data` and, in each
// expert group, the expert parts split that group's experts, so the squared
// norms of every data rank's ranges sum to each value exactly once. Pipeline
// stages hold disjoint tensors (the tied embedding copy is left out of the
// norm): their squared norms add over pp.
double ParallelGradients::clip_gradients(double max_norm) {
  model::ParamStore<float>& params = model_.params();
  const std::vector<model::ParamSpec>& specs = params.specs();
  float* g = params.grads().data();
  const bool pipelined = setup_.grid->pp().size() > 1;
  if (!scatter() && !setup_.ownership && !pipelined) return clip_grad_norm(params, max_norm);
  auto squared_norm = [&](const std::vector<parallel::OptimizerShard>& parts) {
    double sum = 0.0;
    for (const parallel::OptimizerShard& r : counted_in_norm(parts))
      sum += shard_grad_norm_squared(specs, r, g);
    return sum;
  };
  std::vector<parallel::OptimizerShard> mine;
  double squared = 0.0;
  if (scatter()) {
    mine = zero_ranges();
    squared = setup_.grid->data().all_reduce_value(squared_norm(mine));
  } else if (setup_.ownership) {
    // Dense tensors are replicated (counted once); each expert lives on one EP rank.
    const parallel::OptimizerShard dense = parallel::role_range(specs, model::ParamRole::kDense);
    const parallel::OptimizerShard experts = parallel::role_range(specs, model::ParamRole::kExpert);
    mine = {dense, experts};
    squared = squared_norm({dense}) + setup_.grid->ep().all_reduce_value(squared_norm({experts}));
  } else {
    mine = {parallel::whole_shard(specs)};
    squared = squared_norm(mine);
  }
  if (pipelined) squared = setup_.grid->pp().all_reduce_value(squared);
  const double norm = std::sqrt(squared);
  if (std::isfinite(norm) && max_norm > 0.0 && norm > max_norm)
    for (const parallel::OptimizerShard& r : mine)
      scale_shard_grads(specs, r, g, static_cast<float>(max_norm / norm));
  return norm;
}

// ZeRO: each rank updated its ranges; everyone gets the whole model back,
// the dense tensors over `data`, the experts over the expert group.
void ParallelGradients::after_update() {
  if (zero_ == 0) return;
  model::ParamStore<float>& params = model_.params();
  // A bf16 store gathers its 16-bit values (half the bytes); the not-trained
  // router bias, kept in fp32 beside them, is the same on every rank (each
  // rank applies the same all-reduced expert load), so it needs no gather.
  const bool bf16 = params.storage() == model::ParamStorage::kBF16;
  float* values = bf16 ? nullptr : params.values().data();
  uint16_t* bits = bf16 ? params.bf16_values() : nullptr;
  auto gather = [&](parallel::Communicator& comm,
                    const std::vector<parallel::OptimizerShard>& parts) {
    if (comm.size() == 1 || parts.front().begin == parts.back().end) return;
    const parallel::OptimizerShard& mine = parts[static_cast<size_t>(comm.rank())];
    std::vector<int64_t> counts;
    for (const parallel::OptimizerShard& part : parts) counts.push_back(part.size());
    // In bounded rounds (never the model in one message), padded to equal
    // counts where the communicator needs it (NCCL's model); this rank's
    // block is sent from where it lies (no copy of the shard).
    if (bf16)
      parallel::all_gather_in_rounds(comm, bits + mine.begin, bits + parts.front().begin, counts);
    else
      parallel::all_gather_in_rounds(comm, values + mine.begin, values + parts.front().begin,
                                     counts);
  };
  gather(setup_.grid->data(), zero_partition_.dense);
  gather(setup_.expert_comm(), zero_partition_.expert);
}

// ZeRO-2: past the update this rank's reduced ranges are not needed either;
// their pages go back too (zero_grads writes only resident pages).
void ParallelGradients::release_gradients() {
  if (!scatter() || pipeline_) return;
  for (const parallel::GradReducer::Range& r : reducer_.reduced_ranges())
    model_.params().release_grads(r.begin, r.end);
}

}  // namespace trex::train
