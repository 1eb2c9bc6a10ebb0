#include "trex/train/state_accounting.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "trex/core/error.hpp"
#include "trex/kernels/backend.hpp"
#include "trex/model/activation_memory.hpp"
#include "trex/model/page_buffer.hpp"
#include "trex/model/params.hpp"
#include "trex/parallel/expert_shard.hpp"
#include "trex/parallel/pipeline.hpp"
#include "trex/parallel/zero_partition.hpp"
#include "trex/train/optim/optimizer.hpp"
#include "trex/train/parallel_setup.hpp"

namespace trex::train {
namespace {

// The tensors of one (pipeline stage, EP rank): what build_model gives it.
std::vector<model::ParamSpec> layout_of(const RunConfig& c, const model::ModelConfig& m,
                                        const std::vector<std::vector<int>>& owner, int pp_rank,
                                        int ep_rank) {
  const parallel::RankOwnership ownership =
      ownership_of_rank(c.parallel, m, owner, pp_rank, ep_rank);
  if (ownership.keeps_everything()) return model::parameter_specs(m);
  return parallel::filter_specs(model::parameter_specs(m), m, ownership);
}

// The ZeRO partition of a layout as ParallelGradients builds it: experts over
// the ranks holding the same ones (dp), the rest over `data`; none without ZeRO.
std::optional<parallel::ZeroPartition> zero_partition_of(
    const RunConfig& c, const std::vector<model::ParamSpec>& layout) {
  if (c.parallel.zero == 0) return std::nullopt;
  const int ep = static_cast<int>(c.parallel.ep), dp = static_cast<int>(c.parallel.dp);
  return parallel::partition_for_zero_by_role(layout, ep * dp, ep > 1 ? dp : ep * dp);
}

// Data rank d's ranges of the layout: its ZeRO ranges, or the whole layout.
std::vector<parallel::OptimizerShard> ranges_of_data_rank(
    const RunConfig& c, const std::vector<model::ParamSpec>& layout,
    const std::optional<parallel::ZeroPartition>& zero, int d) {
  if (!zero) return {parallel::whole_shard(layout)};
  return zero->ranges(d, c.parallel.ep > 1 ? d / static_cast<int>(c.parallel.ep) : d);
}

// Optimizer bytes over `ranges` of a layout (make_optimizer's rule).
int64_t moment_bytes(const RunConfig& c, const std::vector<model::ParamSpec>& layout,
                     const std::vector<parallel::OptimizerShard>& ranges) {
  const Optimizer::StateElements e = Optimizer::state_elements(layout, ranges, c.optimizer);
  return (e.first + e.second) * moment_dtype_bytes(c.optimizer.moment_dtype);
}

// The optimizer's fp32 master weights: one value per first-moment element.
int64_t master_bytes(const RunConfig& c, const std::vector<model::ParamSpec>& layout,
                     const std::vector<parallel::OptimizerShard>& ranges) {
  if (!c.optimizer.master_weights) return 0;
  return Optimizer::state_elements(layout, ranges, c.optimizer).first *
         static_cast<int64_t>(sizeof(float));
}

model::ParamStorage storage_of(const RunConfig& c) {
  return c.optimizer.master_weights ? model::ParamStorage::kBF16 : model::ParamStorage::kF32;
}

// Micro-batches of a step each data rank runs (ParallelGradients::my_micro_batches).
int64_t micro_batches_per_data_rank(const RunConfig& config) {
  const int64_t data = config.parallel.data_size();
  return (config.accumulation_steps() + data - 1) / data;
}

// The micro-batch every stage runs (model/activation_memory.hpp).
model::ActivationShape activation_shape(const RunConfig& c) {
  model::ActivationShape shape;
  shape.sequences = c.micro_batch;
  shape.seq_len = c.seq_len;
  shape.recompute = c.recompute;
  shape.value_bytes = static_cast<int64_t>(sizeof(float));
  shape.mtp_loss = c.mtp_weight != 0.0;
  return shape;
}

struct RankActivations {
  int64_t peak = 0, caches = 0, buffers = 0;  // buffers: caches + backend work at the peak
  int in_flight = 0;
};

// The peak over pp rank `pp_rank`'s program of (caches of the micro-batches
// in flight + the running action's work set). pp = 1: one micro-batch at a
// time through the whole model.
RankActivations activations_of_stage(const RunConfig& c, const model::ModelConfig& m, int pp_rank,
                                     int64_t micro_batches) {
  model::ActivationShape shape = activation_shape(c);
  shape.local_experts = m.n_routed_experts / c.parallel.ep;
  auto cache = [&](const model::StageSpec& s) {
    return model::stage_cache_bytes(m, s, shape).total();
  };
  auto work = [&](const model::StageSpec& s) {
    return model::transient_activation_bytes(m, s, shape);
  };
  // The kernels' temporaries, and what the backend keeps of freed buffers
  // for reuse (the training backend: the CPU backend's mapping cache).
  const int64_t retained = kernels::default_backend().retained_bytes_limit();
  auto kernel_work = [&](const model::StageSpec& s) {
    return model::kernel_work_bytes(m, s, shape) + retained;
  };
  RankActivations out;
  if (c.parallel.pp == 1) {
    const model::StageSpec whole = model::whole_model_stage(m);
    out.caches = cache(whole);
    out.buffers = out.caches + work(whole);
    out.peak = out.buffers + kernel_work(whole);
    out.in_flight = 1;
    return out;
  }
  const parallel::PipelinePlan plan = parallel::make_pipeline_plan(
      c.parallel.pipeline_schedule, static_cast<int>(c.parallel.pp),
      static_cast<int>(micro_batches), m.num_hidden_layers, c.parallel.pipeline_layers);
  int64_t live = 0;
  int live_count = 0;
  for (const parallel::PipeAction& a : plan.programs[static_cast<size_t>(pp_rank)]) {
    const model::StageSpec& chunk = plan.chunks[static_cast<size_t>(a.chunk)];
    if (a.op == parallel::PipeOp::kForward) {
      live += cache(chunk);
      ++live_count;
    }
    if (live + work(chunk) + kernel_work(chunk) > out.peak) {
      out.peak = live + work(chunk) + kernel_work(chunk);
      out.buffers = live + work(chunk);
      out.caches = live;
      out.in_flight = live_count;
    }
    if (a.op == parallel::PipeOp::kBackward) {
      live -= cache(chunk);
      --live_count;
    }
  }
  return out;
}

// Bytes of the buckets the reducer may have running at once (the whole
// `reduced` part without a bound).
int64_t in_flight_bucket_bytes(const RunConfig& c, int64_t reduced) {
  const int64_t n = c.parallel.max_in_flight_buckets;
  const auto bucket = static_cast<int64_t>(c.parallel.bucket_mb * 1024 * 1024);
  return n == 0 ? reduced : std::min(reduced, n * bucket);
}

// The part of a layout's gradient buffer reduced over more than one rank
// (dense over the data group, experts over their replicas), bytes.
int64_t reduced_gradient_bytes(const RunConfig& c, const std::vector<model::ParamSpec>& layout) {
  const int64_t value = static_cast<int64_t>(sizeof(float));
  int64_t dense = 0, experts = 0;
  for (const model::ParamSpec& spec : layout)
    (spec.role == model::ParamRole::kExpert ? experts : dense) += spec.numel() * value;
  const bool ep = c.parallel.ep > 1;
  int64_t out = 0;
  if (c.parallel.data_size() > 1) out += ep ? dense : dense + experts;
  if (ep && c.parallel.dp > 1) out += experts;
  return out;
}

// The gradient buffer's resident bytes at the rank's peak. ZeRO-0/1: all of
// it. ZeRO-2: the pages of a bucket go back once its reduce-scatter is done,
// so during backward the buffer holds what backward wrote and has not handed
// over yet — the globals (head, final norm, embedding: written first, handed
// over last) and the largest layer — plus the buckets in flight. The
// embedding's gradient is written row by row (scatter-add) for the micro-
// batch's tokens and its MTP blocks' next tokens, so only those rows' pages
// ever become resident there. (During the update it holds this rank's
// ranges, no more than the shard accumulator it replaces, counted in comm.
// With a pipeline the reduction starts after the schedule and gives nothing
// back: all of it.)
int64_t resident_gradient_bytes(const RunConfig& c, const model::ModelConfig& m,
                                const std::vector<model::ParamSpec>& layout, int64_t reduced) {
  const int64_t value = static_cast<int64_t>(sizeof(float));
  const int64_t whole = parallel::total_numel(layout) * value;
  if (c.parallel.zero < 2 || c.parallel.pp > 1 || reduced == 0) return whole;
  const int64_t page = static_cast<int64_t>(model::page_memory::page_size());
  const auto written_bytes = [&](const model::ParamSpec& spec) {
    const int64_t all = spec.numel() * value;
    if (spec.name != "embed.weight") return all;
    const int64_t rows =
        std::min(spec.shape[0], c.micro_batch * c.seq_len * (1 + m.num_nextn_predict_layers));
    const int64_t row_pages = (spec.shape[1] * value + page - 1) / page + 1;  // + a straddled one
    return std::min(all, rows * row_pages * page);
  };
  std::map<int64_t, int64_t> by_layer;
  for (const model::ParamSpec& spec : layout) by_layer[spec.layer] += written_bytes(spec);
  int64_t largest_layer = 0;
  for (const auto& [layer, bytes] : by_layer)
    if (layer >= 0) largest_layer = std::max(largest_layer, bytes);
  return std::min(whole, by_layer[-1] + largest_layer + in_flight_bucket_bytes(c, reduced));
}

// Communication and accumulation buffers of a rank: the ZeRO-2 shard
// accumulator (ZeRO-0/1 accumulate the micro-batches in the gradient buffer
// itself); the staging of the gradient reduction; the pipeline's stage
// streams. Open MPI's non-blocking collectives keep a temporary of each
// message until it completes, and the reducer runs at most
// max_in_flight_buckets at once: the staging is that many buckets of the
// part reduced over more than one rank (`reduced`; all of it without a bound).
int64_t comm_bytes(const RunConfig& c, const model::ModelConfig& m,
                   const std::vector<parallel::OptimizerShard>& ranges, int64_t reduced) {
  const int64_t value = static_cast<int64_t>(sizeof(float));
  int64_t out = in_flight_bucket_bytes(c, reduced);
  if (c.parallel.zero >= 2 && c.parallel.data_size() > 1)
    for (const parallel::OptimizerShard& r : ranges) out += r.size() * value;
  // The runner's stage streams: the receives posted ahead and the running
  // action's, its output and one send not yet completed.
  if (c.parallel.pp > 1)
    out += static_cast<int64_t>(parallel::kPipelineReceiveLookahead + 3) * c.micro_batch *
           c.seq_len * m.hc_mult * m.hidden_size * value;
  return out;
}

// The EP map, as ParallelSetup::build reads it (only with EP).
std::vector<std::vector<int>> expert_owners(const RunConfig& c, const model::ModelConfig& m) {
  return c.parallel.ep > 1 ? run_expert_owners(c, m) : std::vector<std::vector<int>>{};
}

double mib(int64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

}  // namespace

const StateRole& StateAccount::largest() const {
  if (roles.empty()) throw Error("internal: an empty state account");
  return *std::max_element(roles.begin(), roles.end(), [](const StateRole& a, const StateRole& b) {
    return a.total_max() < b.total_max();
  });
}

StateAccount account_state(const RunConfig& config, const model::ModelConfig& model) {
  const std::vector<std::vector<int>> owner = expert_owners(config, model);
  StateAccount out;
  out.total_parameters = parallel::total_numel(model::parameter_specs(model));
  out.micro_batches_per_rank = micro_batches_per_data_rank(config);
  for (int p = 0; p < static_cast<int>(config.parallel.pp); ++p) {
    const RankActivations acts = activations_of_stage(config, model, p, out.micro_batches_per_rank);
    for (int e = 0; e < static_cast<int>(config.parallel.ep); ++e) {
      const std::vector<model::ParamSpec> layout = layout_of(config, model, owner, p, e);
      StateRole role;
      role.pp_rank = p;
      role.ep_rank = e;
      role.ranks = config.parallel.dp;
      role.params = model::parameter_value_bytes(layout, storage_of(config));
      role.decoded = model::decoded_weight_bytes_bound(layout, storage_of(config));
      const int64_t reduced = reduced_gradient_bytes(config, layout);
      role.grads = resident_gradient_bytes(config, model, layout, reduced);
      const std::optional<parallel::ZeroPartition> zero = zero_partition_of(config, layout);
      role.moments_min = INT64_MAX;
      for (int d = e; d < static_cast<int>(config.parallel.data_size());
           d += static_cast<int>(config.parallel.ep)) {
        const std::vector<parallel::OptimizerShard> ranges =
            ranges_of_data_rank(config, layout, zero, d);
        const int64_t moments = moment_bytes(config, layout, ranges);
        role.master = std::max(role.master, master_bytes(config, layout, ranges));
        role.moments_max = std::max(role.moments_max, moments);
        role.optimizer_work = std::max(role.optimizer_work,
                                       Optimizer::work_elements(layout, ranges, config.optimizer) *
                                           static_cast<int64_t>(sizeof(float)));
        role.moments_min = std::min(role.moments_min, moments);
        role.comm = std::max(role.comm, comm_bytes(config, model, ranges, reduced));
      }
      role.activations = acts.peak;
      role.activation_caches = acts.caches;
      role.activation_buffers = acts.buffers;
      role.in_flight = acts.in_flight;
      out.roles.push_back(role);
    }
  }
  return out;
}

RankState state_of_rank(const RunConfig& config, const model::ModelConfig& model, int world_rank) {
  const int ep = static_cast<int>(config.parallel.ep), dp = static_cast<int>(config.parallel.dp);
  if (world_rank < 0 || world_rank >= static_cast<int>(config.parallel.world_size()))
    throw Error("rank " + std::to_string(world_rank) + " outside the run's " +
                std::to_string(config.parallel.world_size()) + " ranks")
        .field("parallel");
  // The grid's coordinates (parallel/process_grid.cpp): EP innermost, then DP, then PP.
  const int ep_rank = world_rank % ep, dp_rank = (world_rank / ep) % dp,
            pp_rank = world_rank / (ep * dp);
  const std::vector<model::ParamSpec> layout =
      layout_of(config, model, expert_owners(config, model), pp_rank, ep_rank);
  RankState s;
  s.params = model::parameter_value_bytes(layout, storage_of(config));
  s.decoded = model::decoded_weight_bytes_bound(layout, storage_of(config));
  s.grads = parallel::total_numel(layout) * static_cast<int64_t>(sizeof(float));
  const std::vector<parallel::OptimizerShard> ranges = ranges_of_data_rank(
      config, layout, zero_partition_of(config, layout), dp_rank * ep + ep_rank);
  s.moments = moment_bytes(config, layout, ranges);
  s.master = master_bytes(config, layout, ranges);
  return s;
}

std::string format_state_account(const StateAccount& account, const RunConfig& config) {
  std::string out;
  char line[320];
  std::snprintf(
      line, sizeof line,
      "memory per rank, DP=%lld x EP=%lld x PP=%lld, ZeRO-%lld, %s, fp32 gradients, %s "
      "moments; micro-batch %lld x %lld tokens, %lld per data rank, recompute %s (MiB)\n",
      static_cast<long long>(config.parallel.dp), static_cast<long long>(config.parallel.ep),
      static_cast<long long>(config.parallel.pp), static_cast<long long>(config.parallel.zero),
      config.optimizer.master_weights
          ? "bf16 parameters (fp32 router bias) + fp32 master in the optimizer's ranges"
          : "fp32 parameters",
      config.optimizer.moment_dtype == MomentDType::kBF16 ? "bf16" : "fp32",
      static_cast<long long>(config.micro_batch), static_cast<long long>(config.seq_len),
      static_cast<long long>(account.micro_batches_per_rank),
      model::activation_recompute_name(config.recompute));
  out += line;
  std::snprintf(line, sizeof line,
                "%-6s %-6s %6s %12s %9s %12s %10s %18s %9s %12s %12s %9s %10s %12s\n", "stage",
                "EP", "ranks", "parameters", "decoded", "gradients", "master", "moments min-max",
                "opt work", "activations", "of which buf", "in flight", "comm", "total max");
  out += line;
  for (const StateRole& r : account.roles) {
    std::snprintf(line, sizeof line,
                  "%-6d %-6d %6lld %12.1f %9.1f %12.1f %10.1f %8.1f-%-9.1f %9.1f %12.1f %12.1f "
                  "%9d %10.1f %12.1f\n",
                  r.pp_rank, r.ep_rank, static_cast<long long>(r.ranks), mib(r.params),
                  mib(r.decoded), mib(r.grads), mib(r.master), mib(r.moments_min),
                  mib(r.moments_max), mib(r.optimizer_work), mib(r.activations),
                  mib(r.activation_buffers), r.in_flight, mib(r.comm), mib(r.total_max()));
    out += line;
  }
  const StateRole& big = account.largest();
  std::snprintf(line, sizeof line,
                "largest rank: stage %d, EP rank %d: %.1f MiB (state %.1f); whole model %lld "
                "parameters (%.1f MiB in fp32)\n",
                big.pp_rank, big.ep_rank, mib(big.total_max()), mib(big.state_max()),
                static_cast<long long>(account.total_parameters),
                mib(account.total_parameters * static_cast<int64_t>(sizeof(float))));
  out += line;
  out +=
      "decoded: with bf16 parameters, the fp32 weights of one block and the globals a "
      "pass decodes (an upper bound); "
      "activations: the cached micro-batches (exact) plus one op's work set (an upper "
      "estimate) and the kernels' own temporaries; \"of which buf\": the backend's buffers; "
      "comm: the ZeRO-2 shard accumulator, reduction staging, the stage streams; opt work: the "
      "optimizer's scratch kept between steps\n";
  return out;
}

std::string state_account_json(const StateAccount& account, const RunConfig& config) {
  nlohmann::json roles = nlohmann::json::array();
  for (const StateRole& r : account.roles)
    roles.push_back(
        {{"name", "stage " + std::to_string(r.pp_rank) + " / EP rank " + std::to_string(r.ep_rank)},
         {"pp_rank", r.pp_rank},
         {"ep_rank", r.ep_rank},
         {"ranks", r.ranks},
         {"params", r.params},
         // param_dtype = "bf16": the fp32 weights a pass decodes (0 for fp32).
         {"decoded", r.decoded},
         {"grads", r.grads},
         // param_dtype = "fp32": the parameters are the master weights (0 here).
         {"master", r.master},
         {"moments", r.moments_max},
         {"moments_min", r.moments_min},
         {"optimizer_work", r.optimizer_work},
         {"comm", r.comm},
         {"activations", r.activations},
         {"activation_caches", r.activation_caches},
         {"activation_buffers", r.activation_buffers},
         {"micro_batches_in_flight", r.in_flight},
         {"total", r.total_max()}});
  const nlohmann::json out = {
      {"total_parameters", account.total_parameters},
      // Bytes per trained parameter value (the router bias stays fp32).
      {"parameter_bytes", config.optimizer.master_weights ? 2 : 4},
      {"param_dtype", config.optimizer.master_weights ? "bf16" : "fp32"},
      {"layout",
       {{"dp", config.parallel.dp},
        {"ep", config.parallel.ep},
        {"pp", config.parallel.pp},
        {"zero", config.parallel.zero},
        {"schedule", parallel::pipeline_schedule_name(config.parallel.pipeline_schedule)},
        {"recompute", model::activation_recompute_name(config.recompute)},
        {"seq_len", config.seq_len},
        {"micro_batch", config.micro_batch},
        {"micro_batches_per_rank", account.micro_batches_per_rank}}},
      {"roles", roles}};
  return out.dump(2) + "\n";
}

}  // namespace trex::train
