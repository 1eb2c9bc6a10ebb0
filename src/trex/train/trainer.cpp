#include "trex/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <sstream>

#include "trex/core/error.hpp"
#include "trex/core/log.hpp"
#include "trex/core/progress.hpp"
#include "trex/kernels/cpu/peak.hpp"
#include "trex/model/flops.hpp"
#include "trex/parallel/ep_token_dispatcher.hpp"
#include "trex/parallel/expert_placement.hpp"
#include "trex/parallel/expert_shard.hpp"
#include "trex/parallel/grad_reducer.hpp"
#include "trex/parallel/pipeline.hpp"
#include "trex/train/checkpoint.hpp"
#include "trex/train/data_cpt.hpp"
#include "trex/train/data_sft.hpp"
#include "trex/train/optimizer_relayout.hpp"
#include "trex/train/schedule.hpp"

namespace trex::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPT or SFT loader behind one interface.
class DataSource {
 public:
  DataSource(const RunConfig& c, const io::Tokenizer& tokenizer, const std::string& file,
             bool shuffle) {
    if (c.mode == DataMode::kCpt) {
      cpt_.emplace(CptLoader::from_jsonl(file, tokenizer,
                                         {.seq_len = c.seq_len,
                                          .batch_size = c.micro_batch,
                                          .seed = c.data_seed,
                                          .shuffle = shuffle},
                                         c.data_strict));
    } else {
      SftLoaderOptions o;
      o.seq_len = c.seq_len;
      o.batch_size = c.micro_batch;
      o.seed = c.data_seed;
      o.shuffle = shuffle;
      sft_.emplace(SftLoader::from_jsonl(file, tokenizer, o, c.data_strict));
    }
  }
  PackedBatch next_batch() { return cpt_ ? cpt_->next_batch() : sft_->next_batch(); }
  const LoaderState& state() const { return cpt_ ? cpt_->state() : sft_->state(); }
  void restore(const LoaderState& s) { cpt_ ? cpt_->restore(s) : sft_->restore(s); }
  // Lines read, skipped and repaired in the training file (data.strict = false).
  const JsonlStats& input() const { return cpt_ ? cpt_->input() : sft_->stats().input; }
  int64_t sequences_in_epoch() {
    return cpt_ ? cpt_->sequences_in_epoch() : sft_->sequences_in_epoch();
  }

 private:
  std::optional<CptLoader> cpt_;
  std::optional<SftLoader> sft_;
};

model::Batch to_model_batch(PackedBatch packed) {
  model::Batch b = std::move(packed.batch);
  b.position_ids = std::move(packed.position_ids);
  b.document_ids = std::move(packed.document_ids);
  return b;
}

// Document lengths of a packed batch (runs of equal document ids per row; the
// padding tail is a segment of its own and is computed like any other).
model::SequenceStats sequence_stats(const model::Batch& b) {
  std::vector<int64_t> lengths;
  for (int64_t row = 0; row < b.B; ++row) {
    int64_t run = 0;
    for (int64_t t = 0; t < b.S; ++t) {
      const size_t i = static_cast<size_t>(row * b.S + t);
      if (t > 0 && !b.document_ids.empty() && b.document_ids[i] != b.document_ids[i - 1]) {
        lengths.push_back(run);
        run = 0;
      }
      ++run;
    }
    lengths.push_back(run);
  }
  return model::SequenceStats::from_lengths(lengths);
}

// The model config of the run: the init checkpoint's, else model_config.
model::ModelConfig run_model_config(const RunConfig& c) {
  if (c.init_checkpoint.empty()) return model::ModelConfig::load(c.model_config);
  const std::filesystem::path path = std::filesystem::path(c.init_checkpoint) / "config.json";
  if (!std::filesystem::exists(path))
    throw Error("checkpoint directory has no config.json").file(path.string());
  return model::ModelConfig::load(path.string());
}

// With `ownership` (EP) the model holds only those routed experts from the
// start: a random init fills just them (the whole model's values), a
// checkpoint is read for just them.
model::Model<float> build_model(const RunConfig& c, const parallel::ExpertOwnership* ownership) {
  if (!c.init_checkpoint.empty()) {
    verify_checkpoint(c.init_checkpoint);  // checksums: a corrupt file is refused by name
    if (!ownership) return model::Model<float>::from_checkpoint(c.init_checkpoint);
    model::LoadedCheckpoint<float> loaded =
        parallel::load_checkpoint_shard<float>(c.init_checkpoint, *ownership);
    return model::Model<float>(std::move(loaded.config), std::move(loaded.params),
                               std::move(loaded.hash_tables));
  }
  model::ModelConfig mc = model::ModelConfig::load(c.model_config);
  if (!ownership) {
    model::Model<float> m(std::move(mc));
    m.init_random(c.init_seed);
    return m;
  }
  mc.validate("model config");
  model::ParamStore<float> store(parallel::filter_specs(model::parameter_specs(mc), *ownership));
  model::HashTables tables(
      model::hash_table_names(mc).size(),
      std::vector<int64_t>(static_cast<size_t>(mc.vocab_size * mc.num_experts_per_tok), 0));
  model::Model<float> m(std::move(mc), std::move(store), std::move(tables));
  m.init_random(c.init_seed);
  return m;
}

// The targets the engine trains on in `b` (model.cpp: a label >= 0 at t+1 in
// the same row and segment as t): the weight nᵢ of the micro-batch, known on
// every rank before any backward runs.
int64_t count_trained_tokens(const model::Batch& b) {
  const std::vector<int64_t>& labels = b.labels.empty() ? b.input_ids : b.labels;
  const bool has_doc = !b.document_ids.empty(), has_pos = !b.position_ids.empty();
  int64_t count = 0;
  for (int64_t row = 0; row < b.B; ++row)
    for (int64_t t = 0; t + 1 < b.S; ++t) {
      const size_t next = static_cast<size_t>(row * b.S + t + 1);
      const bool boundary = has_doc   ? b.document_ids[next] != b.document_ids[next - 1]
                            : has_pos ? b.position_ids[next] == 0
                                      : false;
      if (!boundary && labels[next] >= 0) ++count;
    }
  return count;
}

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

// ZeRO: state for this rank's dense and expert ranges (`zero_ranges`).
Optimizer make_optimizer(const RunConfig& c, const model::ParamStore<float>& params,
                         const std::vector<parallel::OptimizerShard>& zero_ranges) {
  OptimizerOptions options = c.optimizer;
  options.muon.precision = c.compute_precision();
  if (c.parallel.zero == 0) return Optimizer(params, options);
  return Optimizer(params, options, zero_ranges);
}

// The map of `trex plan experts` for the main MoE layers (the MTP block keeps
// the contiguous map unless the file lists it too).
void apply_expert_placement(parallel::ExpertParallel& ep, const RunConfig& config,
                            const model::ModelConfig& mc, int ep_size) {
  const std::string& path = config.parallel.expert_placement;
  const parallel::ExpertPlacement placement = parallel::load_expert_placement(path);
  const int blocks = static_cast<int>(ep.owner.size());
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
    ep.owner[static_cast<size_t>(l)] = placement.layers[static_cast<size_t>(l)];
}

// EP (ep > 1): the expert-parallel context over the grid's `ep` group
// (contiguous map, or parallel.expert_placement); null otherwise.
std::unique_ptr<parallel::ExpertParallel> make_trainer_expert_parallel(
    const RunConfig& c, parallel::ProcessGrid& grid) {
  if (grid.shape().ep <= 1) return nullptr;
  const model::ModelConfig mc = run_model_config(c);
  auto ep = std::make_unique<parallel::ExpertParallel>(
      parallel::make_expert_parallel(mc, grid.ep(), c.parallel.ep_overlap));
  if (!c.parallel.expert_placement.empty()) apply_expert_placement(*ep, c, mc, grid.shape().ep);
  return ep;
}

// EP: the routed experts this rank stores (model/expert_shard.hpp): those it owns.
std::optional<parallel::ExpertOwnership> owned_experts(const parallel::ExpertParallel* ep,
                                                       const parallel::ProcessGrid& grid) {
  if (!ep) return std::nullopt;
  return parallel::ExpertOwnership::of_rank(ep->owner, grid.coords().ep);
}

// Exposed communication of every communicator of the grid (seconds blocked in wait).
double exposed_seconds(parallel::ProcessGrid& grid) {
  return grid.world().stats().exposed_seconds + grid.data().stats().exposed_seconds +
         grid.ep().stats().exposed_seconds + grid.dp().stats().exposed_seconds +
         grid.pp().stats().exposed_seconds;
}

// The weights file of a checkpoint directory (for messages).
std::string weights_file_of(const std::string& dir) {
  for (const char* name : {"model.safetensors", "model.safetensors.index.json"}) {
    const std::filesystem::path p = std::filesystem::path(dir) / name;
    if (std::filesystem::exists(p)) return p.string();
  }
  return dir;
}

// The tensor holding flat offset `at` of `params`.
const model::ParamSpec& spec_at(const model::ParamStore<float>& params, int64_t at) {
  for (const model::ParamSpec& spec : params.specs()) {
    const int64_t begin = params.offset(spec.name);
    if (at >= begin && at < begin + spec.numel()) return spec;
  }
  throw Error("internal: offset " + std::to_string(at) + " is in no parameter");
}

// The first tensor with a non-finite gradient, or "" (for the skip message).
std::string first_non_finite_gradient(const model::ParamStore<float>& params) {
  const auto& g = params.grads();
  for (const model::ParamSpec& spec : params.specs()) {
    const int64_t begin = params.offset(spec.name);
    for (int64_t i = begin; i < begin + spec.numel(); ++i)
      if (!std::isfinite(g[static_cast<size_t>(i)])) return spec.name;
  }
  return "";
}

std::string fmt(double v, const char* spec = "%.4g") {
  char buf[64];
  std::snprintf(buf, sizeof(buf), spec, v);
  return buf;
}

}  // namespace

// What this rank's micro-batches contributed to a step (before reduction).
struct LocalStep {
  double lm_sum = 0, mtp_sum = 0, balance_sum = 0;  // token-weighted sums, Σ balance
  int64_t lm_tokens = 0, mtp_tokens = 0;
  bool finite = true;
  std::vector<std::vector<int64_t>> expert_load;  // summed over the micro-batches
};

struct Trainer::Impl {
  RunConfig config;
  TrainerOptions options;
  std::unique_ptr<parallel::ProcessGrid> grid;
  bool root = true;  // world rank 0: writes metrics, logs and checkpoints
  io::Tokenizer tokenizer;
  // EP: the expert-parallel context the model's MoE blocks dispatch through (ep > 1).
  std::unique_ptr<parallel::ExpertParallel> expert_parallel;
  std::unique_ptr<parallel::EpTokenDispatchers<float>> expert_dispatchers;  // over expert_parallel
  // EP: the routed experts this rank stores (the others live on their owners).
  std::optional<parallel::ExpertOwnership> ownership;
  model::Model<float> model;
  // PP: runs this rank's stage(s) of the micro-batches in schedule order (pp > 1).
  std::unique_ptr<parallel::PipelineRunner> pipeline;
  parallel::ZeroPartition zero_partition;  // dense over `data`, experts over expert_comm()
  Optimizer optimizer;
  parallel::GradReducer reducer;
  DataSource data;
  int64_t total_steps = 0;
  int64_t step = 0;
  int64_t consumed_tokens = 0;
  int64_t trained_tokens = 0;
  int64_t skipped_steps = 0;
  int64_t spikes = 0;
  double last_validation_loss = -1.0;
  SpikeDetector spike_detector;
  GradientHook gradient_hook;
  std::vector<float> accumulated;  // Σ nᵢ gᵢ over this rank's earlier micro-batches
  TrainSummary summary;
  std::unique_ptr<MetricsWriter> metrics;
  int64_t last_checkpoint_step = -1;

  Impl(RunConfig c, TrainerOptions o)
      : config(std::move(c)),
        options(std::move(o)),
        grid(make_grid(config, options.world)),
        root(grid->world().rank() == 0),
        tokenizer(io::Tokenizer::load(config.tokenizer)),
        expert_parallel(make_trainer_expert_parallel(config, *grid)),
        expert_dispatchers(expert_parallel ? std::make_unique<parallel::EpTokenDispatchers<float>>(
                                                 *expert_parallel)
                                           : nullptr),
        ownership(owned_experts(expert_parallel.get(), *grid)),
        model(build_model(config, ownership ? &*ownership : nullptr)),
        zero_partition(parallel::partition_for_zero_by_role(
            model.params().specs(), grid->data().size(), expert_comm().size())),
        optimizer(make_optimizer(config, model.params(), zero_ranges())),
        reducer(model.params().specs(), &grid->data(), &grid->pp(), zero_partition,
                {.bucket_bytes = std::max<int64_t>(
                     4, static_cast<int64_t>(config.parallel.bucket_mb * 1024.0 * 1024.0)),
                 .scatter = gradient_scatter(),
                 .experts = ownership ? &grid->dp() : nullptr}),
        data(config, tokenizer, config.train_file, config.shuffle),
        spike_detector(config.spike_window, config.spike_z_threshold) {
    if (!root) {
      options.quiet = true;
      options.write_metrics = false;
    }
    if (expert_dispatchers) model.set_token_dispatchers(expert_dispatchers.get());
    if (grid->shape().pp > 1)
      pipeline = std::make_unique<parallel::PipelineRunner>(model, grid->pp(),
                                                            config.parallel.pipeline_schedule);
    if (tokenizer.vocab_size() > model.config().vocab_size)
      throw Error("the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                  " tokens but the model's vocab_size is " +
                  std::to_string(model.config().vocab_size))
          .file(config.tokenizer)
          .field("tokenizer");
    if (config.steps > 0) {
      total_steps = config.steps;
    } else {
      const double sequences = static_cast<double>(data.sequences_in_epoch()) * config.epochs;
      total_steps = std::max<int64_t>(
          1, static_cast<int64_t>(std::ceil(sequences / static_cast<double>(config.global_batch))));
    }
  }

  // The ranks that hold the same routed experts: with expert weights sharded
  // over EP the `dp` group, else every data rank. ZeRO partitions the dense
  // tensors over `data` and the experts over this group.
  parallel::Communicator& expert_comm() const { return ownership ? grid->dp() : grid->data(); }
  // This rank's ZeRO ranges: its dense part and its expert part.
  std::vector<parallel::OptimizerShard> zero_ranges() const {
    return zero_partition.ranges(grid->data().rank(), expert_comm().rank());
  }
  // ZeRO-2 reduce-scatters the gradients.
  bool gradient_scatter() const { return config.parallel.zero == 2 && grid->data_size() > 1; }

  // Every rank reads the (layout-free) checkpoint and keeps its shard of the
  // optimizer state (and with EP, only its experts).
  void restore_from(const std::string& dir) {
    // Every file against the manifest's checksums before anything is read: a
    // corrupt checkpoint is refused naming the file (never a silent fresh start).
    verify_checkpoint(dir);
    const std::string optimizer_file =
        (std::filesystem::path(dir) / "optimizer.safetensors").string();
    if (ownership) {
      // Only this rank's experts are read (weights and optimizer state).
      model::LoadedCheckpoint<float> loaded =
          parallel::load_checkpoint_shard<float>(dir, *ownership);
      model = model::Model<float>(std::move(loaded.config), std::move(loaded.params),
                                  std::move(loaded.hash_tables));
      optimizer = make_optimizer(config, model.params(), zero_ranges());
      load_optimizer_state_by_name(optimizer, model.params(), optimizer_file,
                                   model::parameter_specs(model.config()));
    } else {
      model = model::Model<float>::from_checkpoint(dir);
      optimizer = make_optimizer(config, model.params(), zero_ranges());
      optimizer.load_state(optimizer_file);
    }
    model.set_token_dispatchers(expert_dispatchers.get());
    const nlohmann::json state = read_trainer_state(dir);
    const std::string origin = (std::filesystem::path(dir) / "trainer_state.json").string();
    try {
      step = state.at("step").get<int64_t>();
      consumed_tokens = state.at("consumed_tokens").get<int64_t>();
      trained_tokens = state.at("trained_tokens").get<int64_t>();
      skipped_steps = state.at("skipped_steps").get<int64_t>();
      spikes = state.at("spikes").get<int64_t>();
      spike_detector.restore(state.at("spike_window"));
      last_validation_loss = state.value("last_validation_loss", -1.0);
      if (state.at("total_steps").get<int64_t>() != total_steps && root)
        log::warn("resuming ", dir, ": the checkpoint planned ",
                  state.at("total_steps").get<int64_t>(), " steps, this run plans ", total_steps,
                  " (the schedule follows this run)");
    } catch (const nlohmann::json::exception& e) {
      throw Error(std::string("bad trainer state: ") + e.what()).file(origin);
    }
    data.restore(LoaderState::from_json(state.at("loader"), origin + ": loader"));
    last_checkpoint_step = step;
  }

  // ---- fault injection (debug.inject; tests of the guard only) ----
  const FaultInjection* injection(const std::string& kind, int64_t at_step) const {
    for (const FaultInjection& f : config.debug_inject)
      if (f.kind == kind && f.step == at_step) return &f;
    return nullptr;
  }
  void note_injection(const FaultInjection& f, const std::string& what) const {
    if (root) log::warn("fault injection (debug.inject ", f.text(), "): ", what);
  }
  // The first tensor the optimizer trains (a NaN there reaches the global norm).
  const model::ParamSpec& first_trained_spec() const {
    for (const model::ParamSpec& spec : model.params().specs())
      if (spec.group != model::OptimizerGroup::kNotTrained) return spec;
    throw Error("internal: the model has no trained parameter");
  }

  // Refuses to start from weights holding a NaN or an infinity (a diverged
  // run's checkpoint, a bad conversion): names the first such tensor and the
  // file it came from. Collective: every rank refuses together.
  void check_loaded_weights(const std::string& file) {
    model::ParamStore<float>& params = model.params();
    if (const FaultInjection* f = injection("nan_weight_on_load", 0)) {
      const model::ParamSpec& spec = params.specs()[params.specs().size() / 2];
      params.value(spec.name)[0] = NAN;
      note_injection(*f, "element 0 of loaded weight '" + spec.name + "' set to NaN");
    }
    std::string message;
    for (const model::ParamSpec& spec : params.specs()) {
      const float* v = params.value(spec.name);
      int64_t count = 0, first = -1;
      for (int64_t i = 0; i < spec.numel(); ++i)
        if (!std::isfinite(v[i])) {
          if (first < 0) first = i;
          ++count;
        }
      if (count == 0) continue;
      message = "loaded weight tensor '" + spec.name + "' holds " + std::to_string(count) +
                " non-finite value" + (count == 1 ? "" : "s") +
                " (first: " + fmt(static_cast<double>(v[first])) + " at element " +
                std::to_string(first) + " of " + std::to_string(spec.numel()) +
                "): refusing to start training from these weights";
      break;
    }
    double bad = message.empty() ? 0.0 : 1.0;
    if (grid->world().size() > 1) bad = grid->world().all_reduce_value(bad);
    if (!message.empty()) throw Error(message).file(file);
    if (bad > 0)
      throw Error(
          "another rank found a non-finite loaded weight (see its message): refusing "
          "to start training")
          .file(file);
  }

  nlohmann::json trainer_state() const {
    return {{"step", step},
            {"total_steps", total_steps},
            {"loader", data.state().to_json()},
            {"data_seed", std::to_string(config.data_seed)},
            {"init_seed", std::to_string(config.init_seed)},
            {"consumed_tokens", consumed_tokens},
            {"trained_tokens", trained_tokens},
            {"skipped_steps", skipped_steps},
            {"spikes", spikes},
            {"spike_window", spike_detector.state()},
            {"last_validation_loss", last_validation_loss},
            {"optimizer_step", optimizer.step_count()},
            {"run_config", config.to_json()}};
  }

  model::LossOptions loss_options() const {
    model::LossOptions o;
    o.mtp_weight = config.mtp_weight;
    o.balance_loss_weight = config.balance_weight;
    return o;
  }

  // This rank's share of the step: micro-batch i goes to data rank i mod data_size.
  std::vector<size_t> my_micro_batches(size_t count) const {
    std::vector<size_t> mine;
    for (size_t i = static_cast<size_t>(grid->data_rank()); i < count;
         i += static_cast<size_t>(grid->data_size()))
      mine.push_back(i);
    return mine;
  }

  // Forward and backward of this rank's micro-batches `mine` (gᵢ the engine's
  // per-micro-batch mean gradient, wᵢ = weights[i], applied by the engine
  // through StepOptions::gradient_weight); the reducer holds Σ wᵢ gᵢ reduced
  // once it finishes. ZeRO-0/1: the earlier micro-batches are summed into
  // `accumulated` and folded into the last one range by range (the reducer's
  // prepare step), one reduction per step. ZeRO-2: every micro-batch is
  // reduce-scattered into this rank's shard (accumulated there), so there is
  // no second full-size buffer, and the buckets already sent give their pages
  // back (params' grad buffer). With overlap, each reduced backward hands every
  // finished layer to the reducer, which starts reducing it at once. (The
  // pipeline runner replaces this function when pp > 1.)
  LocalStep compute_local_gradients(const std::vector<model::Batch>& batches,
                                    const std::vector<int64_t>& trained,
                                    const std::vector<size_t>& mine,
                                    const std::vector<float>& weights) {
    model::ParamStore<float>& params = model.params();
    const model::LossOptions loss = loss_options();
    const bool every_micro_batch = gradient_scatter();
    LocalStep local;
    reducer.begin_step(params.grads().data(),
                       [this](int64_t b, int64_t e) { model.params().release_grads(b, e); });
    for (size_t k = 0; k < mine.size(); ++k) {
      const size_t i = mine[k];
      const bool last = k + 1 == mine.size();
      const bool reduce = every_micro_batch || last;
      params.zero_grads();
      model::StepOptions step_options;
      // The engine applies wᵢ inside backward (not afterwards): with expert
      // parallelism an owned expert's gradient also holds other ranks' micro-batches.
      step_options.gradient_weight = weights[i];
      if (reduce) {
        if (!every_micro_batch && k > 0)
          // Fold the earlier micro-batches in just before a range is reduced.
          reducer.begin_micro_batch([this](int64_t b, int64_t e) {
            float* g = model.params().grads().data();
            for (int64_t j = b; j < e; ++j) g[j] += accumulated[static_cast<size_t>(j)];
          });
        else
          reducer.begin_micro_batch();
        if (config.parallel.overlap_grad_reduce)
          step_options.on_gradients_ready = [this](int64_t layer) {
            reducer.on_gradients_ready(layer);
            note_gradient_memory();
          };
      }
      const model::LossBreakdown r = model.forward_backward(batches[i], loss, step_options);
      note_gradient_memory();
      if (r.lm_tokens != trained[i])
        throw Error("internal: micro-batch " + std::to_string(i) + " trained " +
                    std::to_string(r.lm_tokens) + " tokens, the step planned " +
                    std::to_string(trained[i]));
      local.finite = local.finite && std::isfinite(r.total);
      local.lm_sum += r.lm * static_cast<double>(r.lm_tokens);
      local.mtp_sum += r.mtp * static_cast<double>(r.mtp_tokens);
      local.balance_sum += r.balance;
      local.lm_tokens += r.lm_tokens;
      local.mtp_tokens += r.mtp_tokens;
      if (local.expert_load.empty()) {
        local.expert_load = r.expert_load;
      } else {
        for (size_t l = 0; l < local.expert_load.size(); ++l)
          for (size_t e = 0; e < local.expert_load[l].size(); ++e)
            local.expert_load[l][e] += r.expert_load[l][e];
      }
      if (reduce) {
        reducer.finish_micro_batch();
      } else {
        const auto& g = params.grads();
        if (k == 0) accumulated.assign(g.size(), 0.0f);
        for (size_t j = 0; j < accumulated.size(); ++j) accumulated[j] += g[j];
      }
      note_gradient_memory();
    }
    return local;
  }

  // Gradient memory this rank holds right now (resident pages of the engine's
  // buffer, the earlier micro-batches' sum, the ZeRO-2 shard); the step's
  // largest sample is reported as grad_memory_mib.
  void note_gradient_memory() {
    const int64_t resident = model::resident_bytes(model.params().grads());
    const int64_t buffer =
        resident >= 0 ? resident
                      : static_cast<int64_t>(model.params().grads().size() * sizeof(float));
    const int64_t held = buffer + static_cast<int64_t>(accumulated.capacity() * sizeof(float)) +
                         reducer.shard_bytes();
    step_gradient_bytes = std::max(step_gradient_bytes, held);
  }
  int64_t step_gradient_bytes = 0;  // largest note_gradient_memory() of the step

  // pp > 1: this rank's micro-batches go through the pipeline; the runner
  // accumulates Σ nᵢ gᵢ for the chunks this rank holds (zeros elsewhere) and
  // returns the step's losses and loads, identical on every stage.
  LocalStep compute_pipeline_gradients(const std::vector<model::Batch>& batches,
                                       const std::vector<size_t>& mine) {
    model::ParamStore<float>& params = model.params();
    params.zero_grads();
    reducer.begin_step(params.grads().data());
    reducer.begin_micro_batch();
    std::vector<model::Batch> local;
    for (size_t i : mine) local.push_back(batches[i]);
    const parallel::PipelineResult r = pipeline->run(local, loss_options());
    LocalStep step_totals;
    step_totals.lm_sum = r.lm_sum;
    step_totals.mtp_sum = r.mtp_sum;
    step_totals.balance_sum = r.balance_sum;
    step_totals.lm_tokens = r.lm_tokens;
    step_totals.mtp_tokens = r.mtp_tokens;
    step_totals.expert_load = r.expert_load;
    for (const model::LossBreakdown& b : r.micro_batches)
      step_totals.finite = step_totals.finite && std::isfinite(b.total);
    last_bubble_fraction = 0.0;
    for (double f : r.bubble_fraction) last_bubble_fraction = std::max(last_bubble_fraction, f);
    return step_totals;
  }
  double last_bubble_fraction = 0.0;  // worst stage of the last pipelined step
  int64_t ep_bytes_before = 0;        // cumulative EP traffic at the previous step

  // Sums the ranks' contributions (data group, then pipeline stages, whose
  // non-owning stages contribute zeros) so every rank sees the step's totals.
  void reduce_step_totals(LocalStep& local) {
    std::vector<double> totals = {local.lm_sum,
                                  local.mtp_sum,
                                  local.balance_sum,
                                  static_cast<double>(local.lm_tokens),
                                  static_cast<double>(local.mtp_tokens),
                                  local.finite ? 0.0 : 1.0};
    for (const auto& layer : local.expert_load)
      for (int64_t v : layer) totals.push_back(static_cast<double>(v));  // exact below 2⁵³
    // The pipeline runner's totals are already those of the whole pipeline.
    if (grid->data().size() > 1) grid->data().all_reduce(std::span<double>(totals));
    if (!pipeline && grid->pp().size() > 1) grid->pp().all_reduce(std::span<double>(totals));
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

  // Global-norm clipping. Under ZeRO-2 each rank holds only its ranges of the
  // gradient: the dense parts split the dense tensors over `data` and, in each
  // expert group, the expert parts split that group's experts, so the squared
  // norms of every data rank's ranges sum to each value exactly once.
  double clip_gradients() {
    model::ParamStore<float>& params = model.params();
    const std::vector<model::ParamSpec>& specs = params.specs();
    float* g = params.grads().data();
    if (gradient_scatter()) {
      const std::vector<parallel::OptimizerShard> mine = zero_ranges();
      double local = 0.0;
      for (const parallel::OptimizerShard& r : mine) local += shard_grad_norm_squared(specs, r, g);
      const double norm = std::sqrt(grid->data().all_reduce_value(local));
      if (std::isfinite(norm) && config.clip > 0.0 && norm > config.clip)
        for (const parallel::OptimizerShard& r : mine)
          scale_shard_grads(specs, r, g, static_cast<float>(config.clip / norm));
      return norm;
    }
    if (ownership) {
      // Dense tensors are replicated (counted once); each expert lives on one EP rank.
      const parallel::OptimizerShard dense = parallel::role_range(specs, model::ParamRole::kDense);
      const parallel::OptimizerShard experts =
          parallel::role_range(specs, model::ParamRole::kExpert);
      const double squared =
          shard_grad_norm_squared(specs, dense, g) +
          grid->ep().all_reduce_value(shard_grad_norm_squared(specs, experts, g));
      const double norm = std::sqrt(squared);
      if (std::isfinite(norm) && config.clip > 0.0 && norm > config.clip) {
        const float scale = static_cast<float>(config.clip / norm);
        scale_shard_grads(specs, dense, g, scale);
        scale_shard_grads(specs, experts, g, scale);
      }
      return norm;
    }
    return clip_grad_norm(params, config.clip);
  }

  // ZeRO: each rank updated its ranges; everyone gets the whole model back,
  // the dense tensors over `data`, the experts over the expert group.
  void gather_parameters() {
    if (config.parallel.zero == 0) return;
    std::vector<float>& values = model.params().values();
    auto gather = [&](parallel::Communicator& comm,
                      const std::vector<parallel::OptimizerShard>& parts) {
      if (comm.size() == 1 || parts.front().begin == parts.back().end) return;
      const parallel::OptimizerShard& mine = parts[static_cast<size_t>(comm.rank())];
      const std::vector<float> own(values.begin() + mine.begin, values.begin() + mine.end);
      std::vector<int64_t> counts;
      for (const parallel::OptimizerShard& part : parts) counts.push_back(part.size());
      comm.all_gather(own.data(), values.data() + parts.front().begin, counts,
                      parallel::DType::kF32);
    };
    gather(grid->data(), zero_partition.dense);
    gather(expert_comm(), zero_partition.expert);
  }

  MetricsRecord train_step() {
    model.set_compute_precision(config.compute_precision());
    const auto start = Clock::now();
    const double exposed_before = exposed_seconds(*grid);
    step += 1;
    step_gradient_bytes = 0;
    const double lr = learning_rate(config.schedule(total_steps), step);
    model::ParamStore<float>& params = model.params();
    const size_t accumulation = static_cast<size_t>(config.accumulation_steps());
    const int64_t mtp_counted = config.mtp_weight > 0 ? model.config().num_nextn_predict_layers : 0;

    // Every rank reads every micro-batch of the step (loaders stay identical on
    // all ranks) and so knows each one's trained tokens nᵢ and the step's N.
    std::vector<model::Batch> batches;
    std::vector<int64_t> trained;
    int64_t tokens = 0, step_trained = 0;
    double flops = 0;
    for (size_t i = 0; i < accumulation; ++i) {
      batches.push_back(to_model_batch(data.next_batch()));
      const model::Batch& b = batches.back();
      trained.push_back(count_trained_tokens(b));
      step_trained += trained.back();
      tokens += b.B * b.S;
      flops += model::training_step_flops(model.config(), sequence_stats(b), mtp_counted);
    }
    // Step gradient = Σᵢ nᵢ gᵢ / N: the mean over every trained token of the
    // step. A step of one micro-batch uses the engine's gradient as it is.
    std::vector<float> weights(accumulation, 1.0f);
    if (accumulation > 1)
      for (size_t i = 0; i < accumulation; ++i) weights[i] = static_cast<float>(trained[i]);
    const float scale = (accumulation > 1 || pipeline) && step_trained > 0
                            ? 1.0f / static_cast<float>(step_trained)
                            : 1.0f;

    // Fault injection: a NaN / Inf activation. The engine has no activation
    // hook, so the embedding row of the step's first token is poisoned for
    // this step's forward (its output, the activation entering block 0, is
    // non-finite) and restored right after.
    std::vector<float> saved_row;
    float* poisoned_row = nullptr;
    const FaultInjection* activation_fault = injection("nan_activation", step);
    if (!activation_fault) activation_fault = injection("inf_activation", step);
    if (activation_fault && params.contains("embed.weight") && !batches.empty() &&
        !batches.front().input_ids.empty()) {
      const int64_t d = model.config().hidden_size;
      const int64_t token = batches.front().input_ids.front();
      poisoned_row = params.value("embed.weight") + token * d;
      saved_row.assign(poisoned_row, poisoned_row + d);
      std::fill(poisoned_row, poisoned_row + d,
                activation_fault->kind == "nan_activation" ? NAN : INFINITY);
      note_injection(*activation_fault,
                     "the embedding activation of token " + std::to_string(token) + " set to " +
                         (activation_fault->kind == "nan_activation" ? "NaN" : "Inf") +
                         " for this step's forward");
    }

    // The pipeline weights every micro-batch by nᵢ (its backward starts before
    // the step's later forwards), so its step always divides by N.
    LocalStep totals =
        pipeline
            ? compute_pipeline_gradients(batches, my_micro_batches(accumulation))
            : compute_local_gradients(batches, trained, my_micro_batches(accumulation), weights);
    const auto reduce_start = Clock::now();
    const int64_t early = reducer.groups_started_early();
    reducer.finish(scale);
    const double reduce_seconds = seconds_since(reduce_start);
    reduce_step_totals(totals);
    if (poisoned_row) std::copy(saved_row.begin(), saved_row.end(), poisoned_row);
    if (gradient_hook) gradient_hook(step, params);
    const FaultInjection* gradient_fault = injection("nan_grad", step);
    if (!gradient_fault) gradient_fault = injection("inf_grad", step);
    if (gradient_fault) {
      // This rank's first gradient value of the first trained tensor (ZeRO-2:
      // of its own reduced range).
      int64_t at = params.offset(first_trained_spec().name);
      if (gradient_scatter()) at = std::max(at, zero_ranges().front().begin);
      params.grads()[static_cast<size_t>(at)] = gradient_fault->kind == "nan_grad" ? NAN : INFINITY;
      note_injection(*gradient_fault, "a gradient value of '" + spec_at(params, at).name +
                                          "' set to " +
                                          (gradient_fault->kind == "nan_grad" ? "NaN" : "Inf"));
    }

    MetricsRecord rec;
    rec.step = step;
    const double lm =
        totals.lm_tokens > 0 ? totals.lm_sum / static_cast<double>(totals.lm_tokens) : 0.0;
    const double mtp =
        totals.mtp_tokens > 0 ? totals.mtp_sum / static_cast<double>(totals.mtp_tokens) : 0.0;
    const double balance = totals.balance_sum / static_cast<double>(accumulation);
    const double loss = lm + config.mtp_weight * mtp + balance;
    const bool finite_loss = totals.finite;
    rec.set("loss", finite_loss ? loss : NAN);
    rec.set("loss_lm", lm);
    rec.set("loss_mtp", mtp);
    rec.set("loss_balance", balance);
    rec.set("lr", lr);
    const bool injected = activation_fault || gradient_fault || injection("loss_spike", step);
    if (injected) rec.set("fault_injected", 1.0);

    std::string skip_reason, skip_detail;  // the detail goes to the log line only
    double grad_norm = NAN;
    if (!finite_loss) {
      skip_reason = "non-finite loss";
    } else if (totals.lm_tokens == 0) {
      skip_reason = "no trained tokens in the step";
    } else {
      grad_norm = clip_gradients();
      if (!std::isfinite(grad_norm)) {
        skip_reason = "non-finite gradient norm";
        const std::string tensor = first_non_finite_gradient(params);
        if (!tensor.empty()) skip_detail = " (first non-finite gradient in '" + tensor + "')";
      }
    }
    rec.set("grad_norm", grad_norm);
    if (skip_reason.empty()) {
      optimizer.step(params, lr);
      gather_parameters();
      model::LossBreakdown loads;
      loads.expert_load = totals.expert_load;
      model.update_router_biases(loads, config.router_bias_speed);
    } else {
      skipped_steps += 1;
      summary.skip_reasons.push_back("step " + std::to_string(step) + ": " + skip_reason);
      if (root) log::warn("step ", step, " skipped: ", skip_reason, skip_detail, " (no update)");
    }
    if (gradient_scatter() && !pipeline)
      // ZeRO-2: past the update this rank's reduced ranges are not needed
      // either; their pages go back too (zero_grads writes only resident pages).
      for (const parallel::GradReducer::Range& r : reducer.reduced_ranges())
        params.release_grads(r.begin, r.end);
    params.zero_grads();
    rec.set("skipped", skip_reason.empty() ? 0.0 : 1.0);

    double observed_loss = finite_loss ? loss : NAN;
    if (const FaultInjection* f = injection("loss_spike", step)) {
      observed_loss *= 100.0;
      note_injection(*f, "the loss the spike detector sees multiplied by 100 (" + fmt(loss) +
                             " -> " + fmt(observed_loss) + ")");
    }
    const SpikeDetector::Result spike = spike_detector.observe(observed_loss);
    rec.set("loss_z", spike.z);
    rec.set("spike", spike.spike ? 1.0 : 0.0);
    if (spike.spike) {
      spikes += 1;
      if (root)
        log::warn("step ", step, ": loss spike ", fmt(observed_loss),
                  " (z = ", fmt(spike.z, "%.1f"), " > ", fmt(config.spike_z_threshold, "%.1f"),
                  "): reported and counted, the step's update is kept");
    }

    consumed_tokens += tokens;
    trained_tokens += totals.lm_tokens;
    const double seconds = std::max(seconds_since(start), 1e-9);
    const double world_peak = config.peak_gflops * 1e9 * grid->world().size();
    rec.set("tokens", static_cast<double>(tokens));
    rec.set("consumed_tokens", static_cast<double>(consumed_tokens));
    rec.set("step_seconds", seconds);
    rec.set("tokens_per_s", static_cast<double>(tokens) / seconds);
    rec.set("model_tflops", flops / seconds / 1e12);
    rec.set("mfu", world_peak > 0 ? flops / seconds / world_peak : 0.0);
    if (grid->world().size() > 1) {
      rec.set("comm_exposed_s", exposed_seconds(*grid) - exposed_before);
      rec.set("grad_reduce_wait_s", reduce_seconds);
      rec.set("grad_groups_overlapped", static_cast<double>(early));
      rec.set("grad_buckets", static_cast<double>(reducer.bucket_count()));
      rec.set("grad_buckets_done_in_backward",
              static_cast<double>(reducer.buckets_done_before_finish()));
      rec.set("grad_memory_mib", static_cast<double>(step_gradient_bytes) / (1024.0 * 1024.0));
    }
    if (pipeline) rec.set("pipeline_bubble", last_bubble_fraction);
    if (expert_parallel) {
      // Token rows this rank sent to other EP ranks (dispatch + combine, both passes).
      int64_t bytes = 0;
      for (const auto& block : expert_parallel->traffic.total_bytes)
        for (size_t r = 0; r < block.size(); ++r)
          if (static_cast<int>(r) != grid->ep().rank()) bytes += block[r];
      rec.set("ep_bytes_sent", static_cast<double>(bytes - ep_bytes_before));
      ep_bytes_before = bytes;
    }
    summary.tokens += tokens;
    summary.seconds += seconds;
    step_flops += flops;
    double worst = 0;
    for (size_t l = 0; l < totals.expert_load.size(); ++l) {
      const auto& load = totals.expert_load[l];
      if (load.empty()) continue;
      int64_t total = 0, most = 0;
      for (int64_t v : load) {
        total += v;
        most = std::max(most, v);
      }
      const double mean = static_cast<double>(total) / static_cast<double>(load.size());
      const double imbalance = mean > 0 ? static_cast<double>(most) / mean : 0.0;
      worst = std::max(worst, imbalance);
      rec.set("expert_imbalance/layer_" + std::to_string(l), imbalance);
    }
    rec.set("expert_imbalance/max", worst);
    summary.final_loss = loss;
    summary.final_lm_loss = lm;
    summary.final_mtp_loss = mtp;
    return rec;
  }
  double step_flops = 0;  // model FLOPs of the steps of this run() call

  // The validation micro-batches are split over the data ranks like a step's
  // (every rank reads them all) and the token-weighted sums reduced.
  double validation_loss() {
    if (config.validation_file.empty())
      throw Error("the run config has no validation file").field("data.validation");
    model.set_compute_precision(config.compute_precision());
    // With replicated parameters validation runs the whole model locally: no
    // expert dispatch, whose collectives would need every EP rank to run the
    // same number of batches. With expert weights sharded over EP it has to
    // dispatch: every rank runs the same number of rounds, and a rank without
    // a batch of its own in the last round runs a copy of one and discards it.
    struct DetachExperts {
      model::Model<float>& m;
      model::TokenDispatchers<float>* dispatchers;
      ~DetachExperts() { m.set_token_dispatchers(dispatchers); }
    } detach{model, model.token_dispatchers()};
    if (!ownership) model.set_token_dispatchers(nullptr);
    DataSource validation(config, tokenizer, config.validation_file, false);
    const int64_t available = std::max<int64_t>(
        1, (validation.sequences_in_epoch() + config.micro_batch - 1) / config.micro_batch);
    const int64_t batches = std::min(config.eval_batches, available);
    model::LossOptions loss_options;
    loss_options.mtp_weight = 0.0;
    model::StepOptions forward_only;
    forward_only.backward = false;
    double sum = 0;
    int64_t count = 0;
    std::optional<model::Batch> any;  // a stand-in for the rounds without a batch of this rank
    int64_t ran = 0;
    for (int64_t i = 0; i < batches; ++i) {
      model::Batch batch = to_model_batch(validation.next_batch());
      if (i % grid->data_size() != grid->data_rank()) {
        if (!any) any = std::move(batch);
        continue;
      }
      const model::LossBreakdown r = model.forward_backward(batch, loss_options, forward_only);
      sum += r.lm * static_cast<double>(r.lm_tokens);
      count += r.lm_tokens;
      ran += 1;
    }
    if (ownership) {
      const int64_t rounds = (batches + grid->data_size() - 1) / grid->data_size();
      for (; ran < rounds; ++ran) {
        if (!any) throw Error("internal: no validation batch to stand in for a missing one");
        model.forward_backward(*any, loss_options, forward_only);  // not counted
      }
    }
    if (grid->data_size() > 1) {
      std::vector<double> totals = {sum, static_cast<double>(count)};
      grid->data().all_reduce(std::span<double>(totals));
      sum = totals[0];
      count = static_cast<int64_t>(totals[1]);
    }
    last_validation_loss = count > 0 ? sum / static_cast<double>(count) : NAN;
    return last_validation_loss;
  }

  // The parameter layout of data rank `r` (with expert weights sharded over EP:
  // the dense tensors and the experts of its EP rank r mod ep).
  std::vector<model::ParamSpec> layout_of_data_rank(int r) const {
    if (!ownership) return model.params().specs();
    return parallel::filter_specs(
        model::parameter_specs(model.config()),
        parallel::ExpertOwnership::of_rank(expert_parallel->owner, r % grid->shape().ep));
  }

  // What data rank `r` of the first stage contributes to the checkpoint that
  // world rank 0 writes, as ranges of r's layout: its expert weights (one rank
  // per EP rank: dp = 0) and its optimizer state (its ZeRO ranges; unsharded
  // with sharded experts, its experts' state, again from dp = 0). Rank 0 holds
  // the rest itself.
  struct Contribution {
    std::vector<parallel::OptimizerShard> values, state;
  };
  Contribution contribution_of(int r, const std::vector<model::ParamSpec>& layout) const {
    Contribution c;
    const int ep = grid->shape().ep;
    if (ownership && r / ep == 0)
      c.values = {parallel::role_range(layout, model::ParamRole::kExpert)};
    if (config.parallel.zero > 0) {
      const parallel::ZeroPartition parts =
          parallel::partition_for_zero_by_role(layout, grid->data().size(), expert_comm().size());
      c.state = parts.ranges(r, ownership ? r / ep : r);
    } else if (ownership && r / ep == 0) {
      c.state = c.values;
    }
    return c;
  }

  // The whole model's weights (with sharded experts) and optimizer state (when
  // sharded) on world rank 0: every other data rank of the first stage sends
  // its contribution point to point; only rank 0 ever holds the whole model.
  // Returns null on the other ranks and when rank 0 already holds everything.
  struct WholeState {
    std::vector<float> values;  // empty: the model's own
    GatheredOptimizerState optimizer;
    bool optimizer_gathered = false;
  };
  std::unique_ptr<WholeState> gather_whole_state() {
    if (grid->coords().pp != 0 || grid->data().size() == 1) return nullptr;
    if (!ownership && config.parallel.zero == 0) return nullptr;  // rank 0 holds everything
    const bool zero = config.parallel.zero > 0;  // the optimizer holds its ZeRO ranges
    parallel::Communicator& data_comm = grid->data();
    constexpr int kValuesTag = 7100, kFirstMomentTag = 7101, kSecondMomentTag = 7102;
    auto size_of = [](const std::vector<parallel::OptimizerShard>& ranges) {
      int64_t n = 0;
      for (const parallel::OptimizerShard& r : ranges) n += r.size();
      return n;
    };
    if (data_comm.rank() != 0) {
      const Contribution mine = contribution_of(data_comm.rank(), model.params().specs());
      std::vector<float> values;
      for (const parallel::OptimizerShard& r : mine.values)
        values.insert(values.end(), model.params().values().begin() + r.begin,
                      model.params().values().begin() + r.end);
      // The optimizer's buffers are its ranges already (or, unsharded, the whole layout).
      std::vector<float> first, second;
      if (!zero)
        for (const parallel::OptimizerShard& r : mine.state) {
          first.insert(first.end(), optimizer.first_moment().begin() + r.begin,
                       optimizer.first_moment().begin() + r.end);
          second.insert(second.end(), optimizer.second_moment().begin() + r.begin,
                        optimizer.second_moment().begin() + r.end);
        }
      const float* first_data = zero ? optimizer.first_moment().data() : first.data();
      const float* second_data = zero ? optimizer.second_moment().data() : second.data();
      std::vector<parallel::Request> sends;
      if (!values.empty())
        sends.push_back(data_comm.isend(values.data(), size_of(mine.values), parallel::DType::kF32,
                                        0, kValuesTag));
      if (size_of(mine.state) > 0) {
        sends.push_back(data_comm.isend(first_data, size_of(mine.state), parallel::DType::kF32, 0,
                                        kFirstMomentTag));
        sends.push_back(data_comm.isend(second_data, size_of(mine.state), parallel::DType::kF32, 0,
                                        kSecondMomentTag));
      }
      parallel::wait_all(sends);
      return nullptr;
    }
    // Rank 0: place every contribution (its own first) into the whole layout by name.
    const std::vector<model::ParamSpec> whole =
        ownership ? model::parameter_specs(model.config()) : model.params().specs();
    std::map<std::string, int64_t> whole_offset;
    int64_t total = 0;
    for (const model::ParamSpec& spec : whole) {
      whole_offset.emplace(spec.name, total);
      total += spec.numel();
    }
    auto place = [&](const std::vector<model::ParamSpec>& layout,
                     const std::vector<parallel::OptimizerShard>& ranges, const float* packed,
                     std::vector<float>& out) {
      for (const parallel::OptimizerShard& r : ranges)
        for (size_t i = r.first_spec; i < r.end_spec; ++i) {
          const int64_t n = layout[i].numel();
          std::copy_n(packed, n, out.begin() + whole_offset.at(layout[i].name));
          packed += n;
        }
    };
    auto out = std::make_unique<WholeState>();
    const std::vector<model::ParamSpec>& own_layout = model.params().specs();
    const std::vector<parallel::OptimizerShard> everything = {parallel::whole_shard(own_layout)};
    if (ownership) {
      out->values.assign(static_cast<size_t>(total), 0.0f);
      place(own_layout, everything, model.params().values().data(), out->values);
    }
    {
      out->optimizer_gathered = true;
      out->optimizer.first_moment.assign(static_cast<size_t>(total), 0.0f);
      out->optimizer.second_moment.assign(static_cast<size_t>(total), 0.0f);
      const std::vector<parallel::OptimizerShard>& own_state =
          zero ? optimizer.ranges() : everything;
      place(own_layout, own_state, optimizer.first_moment().data(), out->optimizer.first_moment);
      place(own_layout, own_state, optimizer.second_moment().data(), out->optimizer.second_moment);
    }
    for (int r = 1; r < data_comm.size(); ++r) {
      const std::vector<model::ParamSpec> layout = layout_of_data_rank(r);
      const Contribution c = contribution_of(r, layout);
      std::vector<float> values(static_cast<size_t>(size_of(c.values)));
      std::vector<float> first(static_cast<size_t>(size_of(c.state)));
      std::vector<float> second(first.size());
      std::vector<parallel::Request> receives;
      if (!values.empty())
        receives.push_back(data_comm.irecv(values.data(), size_of(c.values), parallel::DType::kF32,
                                           r, kValuesTag));
      if (!first.empty()) {
        receives.push_back(data_comm.irecv(first.data(), size_of(c.state), parallel::DType::kF32, r,
                                           kFirstMomentTag));
        receives.push_back(data_comm.irecv(second.data(), size_of(c.state), parallel::DType::kF32,
                                           r, kSecondMomentTag));
      }
      parallel::wait_all(receives);
      place(layout, c.values, values.data(), out->values);
      place(layout, c.state, first.data(), out->optimizer.first_moment);
      place(layout, c.state, second.data(), out->optimizer.second_moment);
    }
    return out;
  }

  // A buffer of this rank's layout (dense, then its experts) in the whole
  // model's layout (parameter_specs): the dense part is this rank's, each
  // expert comes from its owner. Collective over the EP group.
  std::vector<float> assemble_whole(std::span<const float> local) {
    const std::vector<model::ParamSpec> whole = model::parameter_specs(model.config());
    const int64_t dense = parallel::role_numel(model.params().specs(), model::ParamRole::kDense);
    parallel::Communicator& ep = grid->ep();
    std::vector<std::vector<model::ParamSpec>> owned(static_cast<size_t>(ep.size()));
    std::vector<int64_t> counts;
    for (int r = 0; r < ep.size(); ++r) {
      owned[static_cast<size_t>(r)] = parallel::filter_specs(
          whole, parallel::ExpertOwnership::of_rank(expert_parallel->owner, r));
      counts.push_back(
          parallel::role_numel(owned[static_cast<size_t>(r)], model::ParamRole::kExpert));
    }
    if (static_cast<int64_t>(local.size()) != dense + counts[static_cast<size_t>(ep.rank())])
      throw Error("internal: a buffer of " + std::to_string(local.size()) +
                  " values does not match this rank's parameter layout");
    std::vector<float> experts(
        static_cast<size_t>(parallel::role_numel(whole, model::ParamRole::kExpert)));
    ep.all_gather(local.data() + dense, experts.data(), counts, parallel::DType::kF32);
    std::map<std::string, int64_t> offset_of;
    int64_t offset = 0;
    for (const model::ParamSpec& spec : whole) {
      offset_of[spec.name] = offset;
      offset += spec.numel();
    }
    std::vector<float> out(static_cast<size_t>(offset), 0.0f);
    std::copy(local.begin(), local.begin() + dense, out.begin());
    int64_t at = 0;  // rank-major: rank r's experts in its layout order
    for (const std::vector<model::ParamSpec>& specs : owned)
      for (const model::ParamSpec& spec : specs) {
        if (spec.role != model::ParamRole::kExpert) continue;
        std::copy_n(experts.begin() + at, spec.numel(), out.begin() + offset_of.at(spec.name));
        at += spec.numel();
      }
    return out;
  }

  std::vector<float> full_parameters() {
    if (!ownership) return model.params().values();
    return assemble_whole(model.params().values());
  }

  // Collective: world rank 0 writes; every rank returns once the files exist.
  // The other data ranks of the first stage send rank 0 what it lacks (their
  // optimizer-state ranges under ZeRO, and with expert weights sharded over EP
  // their experts' weights and state, gather_whole_state); rank 0 writes the
  // files of a 1-rank run.
  std::string save_checkpoint() {
    std::unique_ptr<WholeState> gathered = gather_whole_state();
    std::string dir =
        (std::filesystem::path(checkpoints_dir(config.out_dir)) / checkpoint_name(step)).string();
    if (root && ownership) {
      model::ParamStore<float> store(model::parameter_specs(model.config()));
      store.values() = std::move(gathered->values);
      const model::Model<float> whole(model.config(), std::move(store), model.hash_tables());
      Optimizer whole_optimizer(whole.params(), config.optimizer);
      whole_optimizer.set_state(optimizer.step_count(), std::move(gathered->optimizer.first_moment),
                                std::move(gathered->optimizer.second_moment));
      dir = write_training_checkpoint(config.out_dir, step, whole, tokenizer, whole_optimizer,
                                      trainer_state(), config.keep_checkpoints);
    } else if (root) {
      dir = write_training_checkpoint(
          config.out_dir, step, model, tokenizer, optimizer, trainer_state(),
          config.keep_checkpoints,
          gathered && gathered->optimizer_gathered ? &gathered->optimizer : nullptr);
    }
    if (grid->world().size() > 1) grid->world().barrier();
    last_checkpoint_step = step;
    summary.last_checkpoint = dir;
    return dir;
  }
};

Trainer::Trainer(RunConfig config, TrainerOptions options)
    : impl_(std::make_unique<Impl>(std::move(config), options)) {
  if (impl_->root) remove_interrupted_checkpoint_writes(impl_->config.out_dir);
  if (options.resume) {
    const std::optional<std::string> latest = latest_checkpoint(impl_->config.out_dir);
    if (!latest)
      throw Error("--resume: no checkpoint to resume from (no " +
                  checkpoints_dir(impl_->config.out_dir) + "/latest)")
          .field("out_dir");
    impl_->restore_from(*latest);
    impl_->summary.last_checkpoint = *latest;
    impl_->check_loaded_weights(weights_file_of(*latest));
  } else if (!impl_->config.init_checkpoint.empty()) {
    impl_->check_loaded_weights(weights_file_of(impl_->config.init_checkpoint));
  } else {
    impl_->check_loaded_weights("random initialisation of " + impl_->config.model_config +
                                " (model.seed " + std::to_string(impl_->config.init_seed) + ")");
  }
}

Trainer::~Trainer() = default;

model::Model<float>& Trainer::model() {
  return impl_->model;
}
const model::Model<float>& Trainer::model() const {
  return impl_->model;
}
Optimizer& Trainer::optimizer() {
  return impl_->optimizer;
}
const io::Tokenizer& Trainer::tokenizer() const {
  return impl_->tokenizer;
}
const RunConfig& Trainer::config() const {
  return impl_->config;
}
int64_t Trainer::step() const {
  return impl_->step;
}
int64_t Trainer::total_steps() const {
  return impl_->total_steps;
}
const TrainSummary& Trainer::summary() const {
  return impl_->summary;
}
parallel::ProcessGrid& Trainer::grid() {
  return *impl_->grid;
}
bool Trainer::is_root() const {
  return impl_->root;
}
void Trainer::set_gradient_hook(GradientHook hook) {
  impl_->gradient_hook = std::move(hook);
}
MetricsRecord Trainer::train_step() {
  return impl_->train_step();
}
double Trainer::validation_loss() {
  return impl_->validation_loss();
}
std::vector<float> Trainer::full_parameters() {
  return impl_->full_parameters();
}
std::string Trainer::save_checkpoint() {
  return impl_->save_checkpoint();
}

TrainSummary Trainer::run(const EvalHook& on_eval) {
  Impl& s = *impl_;
  RunConfig& c = s.config;
  if (c.peak_gflops <= 0) {
    // The same measurement as `trex bench peak`, on a short budget, on rank 0
    // (MFU is reported against world size × this per-rank peak).
    if (s.root)
      c.peak_gflops =
          kernels::measure_peak(c.precision == TrainPrecision::kBf16, {512, 1024}, 3).peak_gflops;
    if (s.grid->world().size() > 1)
      s.grid->world().broadcast(&c.peak_gflops, 1, parallel::DType::kF64, 0);
    if (!s.options.quiet)
      log::info("measured peak (", c.precision == TrainPrecision::kBf16 ? "bf16" : "f32",
                "): ", fmt(c.peak_gflops, "%.1f"), " GFLOP/s per rank");
  }
  if (s.options.write_metrics && !s.metrics)
    s.metrics = std::make_unique<MetricsWriter>(c.out_dir, s.options.resume ? s.step : -1);
  s.summary.data_lines_skipped = s.data.input().skipped;
  s.summary.data_records_repaired = s.data.input().repaired;
  s.summary.seconds = 0;
  s.summary.tokens = 0;
  s.step_flops = 0;
  s.summary.interrupted = false;
  if (!s.options.quiet && s.grid->world().size() > 1) {
    // Whole-model figures count every parameter once, whatever this rank stores.
    const int64_t whole = parallel::total_numel(model::parameter_specs(s.model.config()));
    const double mib = 2.0 * sizeof(float) / (1024.0 * 1024.0);
    log::info(s.grid->shape().to_string(), ": ", s.config.accumulation_steps(),
              " micro-batches per step over ", s.grid->data_size(), " data-parallel ranks; ZeRO-",
              c.parallel.zero, ", optimizer state ",
              fmt(mib * static_cast<double>(s.optimizer.state_size()), "%.1f"),
              " MiB per rank (whole model ", fmt(mib * static_cast<double>(whole), "%.1f"),
              " MiB), ", s.reducer.bucket_count(), " gradient buckets",
              c.parallel.overlap_grad_reduce ? " reduced during backward" : "");
    const double param_mib = sizeof(float) / (1024.0 * 1024.0);
    log::info(
        "parameters ", fmt(param_mib * static_cast<double>(s.model.params().size()), "%.2f"),
        " MiB per rank (whole model ", fmt(param_mib * static_cast<double>(whole), "%.2f"), " MiB)",
        s.ownership
            ? "; routed experts sharded over " + std::to_string(s.grid->shape().ep) + " EP ranks"
            : std::string());
  }
  std::optional<Progress> progress;
  if (!s.options.quiet) progress.emplace("train", s.total_steps);

  while (s.step < s.total_steps) {
    MetricsRecord rec = s.train_step();
    const bool last = s.step == s.total_steps;
    const bool evaluate = (c.eval_interval > 0 && s.step % c.eval_interval == 0) || last;
    if (evaluate) {
      if (!c.validation_file.empty()) rec.set("val_loss", s.validation_loss());
      if (on_eval) on_eval(*this, s.step, rec);
    }
    if (s.metrics) s.metrics->write(rec);
    if (progress) {
      progress->update(s.step, "loss " + fmt(rec.get("loss")) + " lr " +
                                   fmt(rec.get("lr"), "%.2e") + " tok/s " +
                                   fmt(rec.get("tokens_per_s"), "%.0f") + " MFU " +
                                   fmt(100 * rec.get("mfu"), "%.1f") + "%");
      if (s.step % c.log_interval == 0 || last) {
        std::string line = "step " + std::to_string(s.step) + "/" + std::to_string(s.total_steps) +
                           " loss " + fmt(rec.get("loss")) + " (lm " + fmt(rec.get("loss_lm")) +
                           ", mtp " + fmt(rec.get("loss_mtp")) + ") gnorm " +
                           fmt(rec.get("grad_norm")) + " lr " + fmt(rec.get("lr"), "%.2e");
        if (evaluate && !c.validation_file.empty()) line += " val " + fmt(rec.get("val_loss"));
        log::info(line);
      }
    }
    const bool stop = s.options.stop_after_step >= 0 && s.step >= s.options.stop_after_step;
    if ((c.checkpoint_interval > 0 && s.step % c.checkpoint_interval == 0) || last || stop)
      s.save_checkpoint();
    if (stop && !last) {
      s.summary.interrupted = true;
      break;
    }
  }
  if (s.last_checkpoint_step != s.step) s.save_checkpoint();
  if (progress) progress->finish();

  TrainSummary& out = s.summary;
  out.steps = s.step;
  out.total_steps = s.total_steps;
  out.skipped_steps = s.skipped_steps;
  out.spikes = s.spikes;
  out.trained_tokens = s.trained_tokens;
  out.peak_gflops = c.peak_gflops;
  out.tokens_per_second = out.seconds > 0 ? static_cast<double>(out.tokens) / out.seconds : 0.0;
  out.model_tflops = out.seconds > 0 ? s.step_flops / out.seconds / 1e12 : 0.0;
  out.mfu = out.seconds > 0 && c.peak_gflops > 0
                ? s.step_flops / out.seconds / (c.peak_gflops * 1e9 * s.grid->world().size())
                : 0.0;
  out.final_validation_loss = s.last_validation_loss;
  if (s.metrics) {
    out.metrics_jsonl = s.metrics->jsonl_path();
    out.tensorboard_dir = s.metrics->tensorboard_dir();
  }
  return out;
}

std::string format_summary(const TrainSummary& s) {
  std::ostringstream o;
  o << "steps            " << s.steps << " / " << s.total_steps
    << (s.interrupted ? " (stopped early)" : "") << "\n";
  o << "skipped steps    " << s.skipped_steps << "\n";
  if (s.data_lines_skipped > 0 || s.data_records_repaired > 0)
    o << "training data    " << s.data_lines_skipped << " lines skipped, "
      << s.data_records_repaired << " records repaired (U+FFFD)\n";
  for (const auto& r : s.skip_reasons) o << "                   " << r << "\n";
  o << "loss spikes      " << s.spikes << "\n";
  o << "tokens           " << s.tokens << " this run (" << s.trained_tokens
    << " trained in total)\n";
  o << "throughput       " << fmt(s.tokens_per_second, "%.1f") << " tokens/s, "
    << fmt(s.model_tflops * 1e3, "%.3f") << " model GFLOP/s, MFU " << fmt(100 * s.mfu, "%.2f")
    << "% of " << fmt(s.peak_gflops, "%.1f") << " GFLOP/s per rank\n";
  o << "final loss       " << fmt(s.final_loss) << " (lm " << fmt(s.final_lm_loss) << ", mtp "
    << fmt(s.final_mtp_loss) << ")";
  if (s.final_validation_loss >= 0) o << ", validation " << fmt(s.final_validation_loss);
  o << "\n";
  o << "checkpoint       " << s.last_checkpoint << "\n";
  if (!s.metrics_jsonl.empty()) {
    o << "metrics          " << s.metrics_jsonl << "\n";
    o << "tensorboard      " << s.tensorboard_dir << "\n";
  }
  return o.str();
}

}  // namespace trex::train
