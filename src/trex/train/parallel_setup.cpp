#include "trex/train/parallel_setup.hpp"

#include <filesystem>
#include <string>
#include <utility>

#include "trex/core/error.hpp"
#include "trex/core/log.hpp"
#include "trex/parallel/expert_map.hpp"
#include "trex/train/checkpoint.hpp"
#include "trex/train/metrics.hpp"

namespace trex::train {
namespace {

std::unique_ptr<parallel::ProcessGrid> make_grid(const RunConfig& c,
                                                 std::shared_ptr<parallel::Communicator> world) {
  if (!world) world = parallel::world();
  const ParallelConfig& p = c.parallel;
  const parallel::GridShape shape{static_cast<int>(p.dp), static_cast<int>(p.ep),
                                  static_cast<int>(p.pp)};
  if (world->size() != shape.size())
    throw Error("the run config asks for " + shape.to_string() + " = " +
                std::to_string(shape.size()) + " ranks but " + std::to_string(world->size()) +
                (world->size() == 1 ? " process is" : " processes are") +
                " running; launch it with `mpirun -np " + std::to_string(shape.size()) +
                " trex train --config RUN` (or set parallel.dp / ep / pp to match)")
        .field("parallel");
  return std::make_unique<parallel::ProcessGrid>(std::move(world), shape);
}

}  // namespace

ParallelSetup ParallelSetup::build(const RunConfig& config,
                                   std::shared_ptr<parallel::Communicator> world) {
  ParallelSetup s;
  s.grid = make_grid(config, std::move(world));
  if (s.grid->shape().ep <= 1 && s.grid->shape().pp <= 1) return s;
  const model::ModelConfig mc = run_model_config(config);
  s.parallel_config = config.parallel;
  if (s.grid->shape().pp > 1) {
    s.stages = stages_of_rank(config.parallel, mc, s.grid->coords().pp);
    s.tied_embedding = model::holds_tied_embedding(mc, s.stages);
  }
  if (s.grid->shape().ep <= 1) return s;
  s.expert_parallel = std::make_unique<parallel::ExpertParallel>(
      parallel::make_expert_parallel(mc, s.grid->ep(), config.parallel.ep_overlap));
  s.expert_parallel->owner = run_expert_owners(config, mc);
  s.expert_dispatchers = std::make_unique<parallel::EpTokenDispatchers<float>>(*s.expert_parallel);
  s.ownership = parallel::ExpertOwnership::of_rank(s.expert_parallel->owner, s.grid->coords().ep);
  return s;
}

parallel::ZeroPartition ParallelSetup::zero_partition(
    const std::vector<model::ParamSpec>& specs) const {
  return parallel::partition_for_zero_by_role(specs, grid->data().size(), expert_comm().size());
}

std::vector<model::StageSpec> ParallelSetup::stages_of(int pp_rank,
                                                       const model::ModelConfig& config) const {
  return stages_of_rank(parallel_config, config, pp_rank);
}

std::vector<model::ParamSpec> ParallelSetup::layout_of_data_rank(
    int r, const model::ModelConfig& config, const std::vector<model::ParamSpec>& own) const {
  return layout_of_rank(grid->coords().pp, r, config, own);
}

std::vector<model::ParamSpec> ParallelSetup::layout_of_rank(
    int pp_rank, int r, const model::ModelConfig& config,
    const std::vector<model::ParamSpec>& own) const {
  if (rank_ownership().keeps_everything()) return own;
  return parallel::filter_specs(
      model::parameter_specs(config), config,
      ownership_of_rank(parallel_config, config,
                        ownership ? expert_parallel->owner : std::vector<std::vector<int>>{},
                        pp_rank, r % grid->shape().ep));
}

std::vector<model::StageSpec> stages_of_rank(const ParallelConfig& layout,
                                             const model::ModelConfig& model, int pp_rank) {
  if (layout.pp <= 1) return {};
  return parallel::chunks_of_rank(layout.pipeline_schedule, static_cast<int>(layout.pp),
                                  model.num_hidden_layers, pp_rank, layout.pipeline_layers);
}

parallel::RankOwnership ownership_of_rank(const ParallelConfig& layout,
                                          const model::ModelConfig& model,
                                          const std::vector<std::vector<int>>& owner, int pp_rank,
                                          int ep_rank) {
  parallel::RankOwnership out;
  if (layout.ep > 1) out.experts = parallel::ExpertOwnership::of_rank(owner, ep_rank);
  out.stages = stages_of_rank(layout, model, pp_rank);
  return out;
}

double ParallelSetup::exposed_seconds() const {
  return grid->world().stats().exposed_seconds + grid->data().stats().exposed_seconds +
         grid->ep().stats().exposed_seconds + grid->dp().stats().exposed_seconds +
         grid->pp().stats().exposed_seconds;
}

int64_t ParallelSetup::ep_bytes_sent() const {
  int64_t bytes = 0;
  for (const auto& block : expert_parallel->traffic.total_bytes)
    for (size_t r = 0; r < block.size(); ++r)
      if (static_cast<int>(r) != grid->ep().rank()) bytes += block[r];
  return bytes;
}

std::vector<std::vector<int>> run_expert_owners(const RunConfig& config,
                                                const model::ModelConfig& mc) {
  const int ep_size = static_cast<int>(config.parallel.ep);
  const int blocks = static_cast<int>(mc.num_hidden_layers + mc.num_nextn_predict_layers);
  std::vector<std::vector<int>> owner(
      static_cast<size_t>(blocks), parallel::contiguous_expert_owner(mc.n_routed_experts, ep_size));
  const std::string& path = config.parallel.expert_placement;
  if (path.empty()) return owner;
  // The map of `trex plan experts` for the main MoE layers (the MTP block keeps
  // the contiguous map unless the file lists it too).
  const parallel::ExpertPlacement placement = parallel::load_expert_placement(path);
  const int listed = static_cast<int>(placement.layers.size());
  const int main_layers = static_cast<int>(mc.num_hidden_layers);
  if (listed != main_layers && listed != blocks)
    throw Error("the expert placement lists " + std::to_string(listed) +
                " MoE layers; the model has " + std::to_string(main_layers) + " (+ " +
                std::to_string(blocks - main_layers) + " MTP)")
        .file(path)
        .field("layers");
  parallel::check_expert_placement(placement, listed, static_cast<int>(mc.n_routed_experts),
                                   ep_size, path);
  for (int l = 0; l < listed; ++l)
    owner[static_cast<size_t>(l)] = placement.layers[static_cast<size_t>(l)];
  return owner;
}

model::ModelConfig run_model_config(const RunConfig& c) {
  if (c.init_checkpoint.empty()) return model::ModelConfig::load(c.model_config);
  const std::filesystem::path path = std::filesystem::path(c.init_checkpoint) / "config.json";
  if (!std::filesystem::exists(path))
    throw Error("checkpoint directory has no config.json").file(path.string());
  return model::ModelConfig::load(path.string());
}

model::Model<float> build_model(const RunConfig& c, const ParallelSetup& setup) {
  const parallel::RankOwnership ownership = setup.rank_ownership();
  if (!c.init_checkpoint.empty()) {
    // Checksums, split over the ranks: a corrupt file is refused by name.
    verify_checkpoint(c.init_checkpoint, setup.grid->world());
    if (ownership.keeps_everything())
      return model::Model<float>::from_checkpoint(c.init_checkpoint);
    model::LoadedCheckpoint<float> loaded =
        parallel::load_checkpoint_shard<float>(c.init_checkpoint, ownership);
    return model::Model<float>(std::move(loaded.config), std::move(loaded.params),
                               std::move(loaded.hash_tables));
  }
  model::ModelConfig mc = model::ModelConfig::load(c.model_config);
  if (ownership.keeps_everything()) {
    model::Model<float> m(std::move(mc));
    m.init_random(c.init_seed);
    return m;
  }
  mc.validate("model config");
  model::ParamStore<float> store(parallel::filter_specs(model::parameter_specs(mc), mc, ownership));
  model::HashTables tables(
      model::hash_table_names(mc).size(),
      std::vector<int64_t>(static_cast<size_t>(mc.vocab_size * mc.num_experts_per_tok), 0));
  model::Model<float> m(std::move(mc), std::move(store), std::move(tables));
  m.init_random(c.init_seed);
  return m;
}

Optimizer make_optimizer(const RunConfig& c, const model::ParamStore<float>& params,
                         const std::vector<parallel::OptimizerShard>& zero_ranges) {
  OptimizerOptions options = c.optimizer;
  options.muon.precision = c.compute_precision();
  if (c.parallel.zero == 0) return Optimizer(params, options);
  return Optimizer(params, options, zero_ranges);
}

int64_t state_bytes_on_largest_rank(const ParallelSetup& setup, const model::Model<float>& model,
                                    int64_t optimizer_state_bytes) {
  // The values as stored (param_dtype = "bf16": 2 bytes per trained value)
  // plus the fp32 gradient buffer.
  const int64_t mine = model.params().value_bytes() +
                       model.params().size() * static_cast<int64_t>(sizeof(float)) +
                       optimizer_state_bytes;
  return setup.grid->world().all_reduce_value(mine, parallel::ReduceOp::kMax);
}

void log_parallel_layout(const ParallelSetup& setup, const RunConfig& c,
                         const model::Model<float>& model, int64_t optimizer_state_bytes,
                         int64_t largest_state_bytes, int64_t gradient_buckets) {
  parallel::ProcessGrid& grid = *setup.grid;
  // Whole-model figures count every parameter once, whatever this rank stores.
  const int64_t whole = parallel::total_numel(model::parameter_specs(model.config()));
  const auto mib = [](int64_t bytes) {
    return format_value(static_cast<double>(bytes) / (1024.0 * 1024.0), "%.1f");
  };
  const int64_t param_bytes = model.params().value_bytes();
  const int64_t grad_bytes = model.params().size() * static_cast<int64_t>(sizeof(float));
  log::info(grid.shape().to_string(), ": ", c.accumulation_steps(), " micro-batches per step over ",
            grid.data_size(), " data-parallel ranks; ZeRO-", c.parallel.zero, ", ",
            gradient_buckets, " gradient buckets",
            c.parallel.overlap_grad_reduce ? " reduced during backward" : "");
  std::string held;
  if (setup.ownership)
    held += "; routed experts sharded over " + std::to_string(grid.shape().ep) + " EP ranks";
  if (!setup.stages.empty()) {
    held += "; pipeline stage " + std::to_string(grid.coords().pp) + " holds layers";
    for (const model::StageSpec& chunk : setup.stages)
      held += " [" + std::to_string(chunk.first_layer) + ", " + std::to_string(chunk.last_layer) +
              ")" + (chunk.has_embedding ? " + embedding" : "") + (chunk.has_head ? " + head" : "");
    if (setup.tied_embedding) held += " + the MTP block's tied embedding";
  }
  log::info("this rank: parameters ", mib(param_bytes), " MiB (",
            model::to_string(model.params().storage()), "), gradient buffer ", mib(grad_bytes),
            " MiB, optimizer state ", mib(optimizer_state_bytes), " MiB (whole model: parameters ",
            mib(whole * static_cast<int64_t>(sizeof(float))), " MiB); the largest rank holds ",
            mib(largest_state_bytes), " MiB of the three", held);
}

}  // namespace trex::train
