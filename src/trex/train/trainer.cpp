#include "trex/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include "trex/core/error.hpp"
#include "trex/core/log.hpp"
#include "trex/core/process_memory.hpp"
#include "trex/core/progress.hpp"
#include "trex/train/checkpoint.hpp"
#include "trex/train/data/source.hpp"
#include "trex/train/guard.hpp"
#include "trex/train/optim/schedule.hpp"
#include "trex/train/parallel_gradients.hpp"
#include "trex/train/parallel_setup.hpp"
#include "trex/train/step.hpp"
#include "trex/train/validation.hpp"

namespace trex::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The weights file of a checkpoint directory (for messages).
std::string weights_file_of(const std::string& dir) {
  for (const char* name : {"model.safetensors", "model.safetensors.index.json"}) {
    const std::filesystem::path p = std::filesystem::path(dir) / name;
    if (std::filesystem::exists(p)) return p.string();
  }
  return dir;
}

// The run's training data (every rank holds all of it; none for GRPO).
std::optional<DataSource> load_data(const RunConfig& config, const io::Tokenizer& tokenizer) {
  if (config.mode == DataMode::kGrpo) return std::nullopt;
  return std::optional<DataSource>(std::in_place, config, tokenizer, config.train_file,
                                   config.shuffle);
}

}  // namespace

struct Trainer::Impl {
  RunConfig config;
  TrainerOptions options;
  ParallelSetup setup;   // grid, EP context and dispatchers, the experts this rank stores
  bool root = true;      // world rank 0: writes metrics, logs and checkpoints
  FaultInjector faults;  // debug.inject (tests of the guard only)
  io::Tokenizer tokenizer;
  std::optional<DataSource> data;  // none with data.mode = "grpo" (the rl layer brings rollouts)
  // Set between the data set and the model (member order): what the process
  // holds outside the training state the memory accounting counts.
  int64_t resident_before_model = 0;
  model::Model<float> model;
  ParallelGradients gradients;  // ZeRO partition, gradient reducer, pipeline runner
  Optimizer optimizer;
  int64_t total_steps = 0;
  int64_t step = 0;
  int64_t consumed_tokens = 0;
  int64_t trained_tokens = 0;
  int64_t skipped_steps = 0;
  int64_t spikes = 0;
  double last_validation_loss = -1.0;
  SpikeDetector spike_detector;
  GradientHook gradient_hook;
  TrainSummary summary;
  std::unique_ptr<MetricsWriter> metrics;
  int64_t last_checkpoint_step = -1;
  int64_t ep_bytes_before = 0;  // EP traffic this rank had sent before the step
  double step_flops = 0;        // model FLOPs of the steps of this run() call

  Impl(RunConfig c, TrainerOptions o)
      : config(std::move(c)),
        options(std::move(o)),
        setup(ParallelSetup::build(config, options.world)),
        root(setup.is_root()),
        faults(config.debug_inject, root),
        tokenizer(io::Tokenizer::load(config.tokenizer)),
        data(load_data(config, tokenizer)),
        resident_before_model(resident_bytes()),
        model(build_model(config, setup)),
        gradients(model, setup, config),
        optimizer(make_optimizer(config, model.params(), gradients.zero_ranges())),
        spike_detector(config.spike_window, config.spike_z_threshold) {
    if (!root) {
      options.quiet = true;
      options.write_metrics = false;
    }
    if (setup.expert_dispatchers) model.set_token_dispatchers(setup.expert_dispatchers.get());
    // param_dtype = "bf16": the master takes the initial weights, the model their bf16 rounding.
    optimizer.round_working_params(model.params());
    if (tokenizer.vocab_size() > model.config().vocab_size)
      throw Error("the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                  " tokens but the model's vocab_size is " +
                  std::to_string(model.config().vocab_size))
          .file(config.tokenizer)
          .field("tokenizer");
    if (config.steps > 0) {
      total_steps = config.steps;
    } else {
      const double sequences = static_cast<double>(data->sequences_in_epoch()) * config.epochs;
      total_steps = std::max<int64_t>(
          1, static_cast<int64_t>(std::ceil(sequences / static_cast<double>(config.global_batch))));
    }
  }

  // Every rank reads the (layout-free) checkpoint and keeps its shard of the
  // optimizer state (and with EP, only its experts), then the trainer's state.
  void restore_from(const std::string& dir) {
    load_checkpoint_on_rank(dir, config, setup, gradients.zero_ranges(), model, optimizer);
    optimizer.round_working_params(model.params());
    model.set_token_dispatchers(setup.expert_dispatchers.get());
    const TrainerState saved = TrainerState::read(dir);
    step = saved.step;
    consumed_tokens = saved.consumed_tokens;
    trained_tokens = saved.trained_tokens;
    skipped_steps = saved.skipped_steps;
    spikes = saved.spikes;
    spike_detector.restore(saved.spike_window);
    last_validation_loss = saved.last_validation_loss;
    if (saved.total_steps != total_steps && root)
      log::warn("resuming ", dir, ": the checkpoint planned ", saved.total_steps,
                " steps, this run plans ", total_steps, " (the schedule follows this run)");
    if (data) data->restore(saved.loader);
    last_checkpoint_step = step;
  }

  TrainerState trainer_state() const {
    return {step,
            total_steps,
            consumed_tokens,
            trained_tokens,
            skipped_steps,
            spikes,
            last_validation_loss,
            spike_detector.state(),
            data ? data->state() : LoaderState{}};
  }

  // One optimizer step: read the step's micro-batches, run_step (forward and
  // backward, reduce, guard, clip, update, router bias), then count, report
  // and record what it did.
  int64_t mtp_layers() const {
    return config.mtp_weight > 0 ? model.config().num_nextn_predict_layers : 0;
  }

  MetricsRecord train_step() {
    if (!data)
      throw Error("data.mode = \"grpo\": the steps come from the rl layer (trex train runs it)")
          .field("data.mode");
    const auto start = Clock::now();
    return train_step_on(read_step_batches(*data, static_cast<size_t>(config.accumulation_steps()),
                                           model.config(), mtp_layers()),
                         start);
  }

  MetricsRecord train_step_on(const StepBatches& batches, Clock::time_point start) {
    model.set_compute_precision(config.compute_precision());
    model.set_activation_recompute(config.recompute);
    const double exposed_before = setup.exposed_seconds();
    step += 1;
    const double lr = learning_rate(config.schedule(total_steps), step);
    model::ParamStore<float>& params = model.params();

    FaultInjector::PoisonedRow poisoned =
        faults.poison_activation(step, params, model.config(), batches.micro_batches);
    StepSettings settings = StepSettings::of(config, lr);
    const kernels::Backend& ops = model.op_context().ops();
    ops.reset_peak_buffer_bytes();
    settings.on_gradients = [&] {
      poisoned.restore();
      if (gradient_hook) gradient_hook(step, params);
      faults.poison_gradient(step, params, gradients.first_reduced_gradient());
    };
    const StepOutcome outcome =
        run_step(model, optimizer, gradients, batches.micro_batches, settings);
    const StepTotals& totals = outcome.totals;
    if (!outcome.updated()) {
      skipped_steps += 1;
      summary.skip_reasons.push_back("step " + std::to_string(step) + ": " + outcome.skip_reason);
      if (root)
        log::warn("step ", step, " skipped: ", outcome.skip_reason, outcome.skip_detail,
                  " (no update)");
    }

    StepMetrics m = step_metrics(step, outcome, config.mtp_weight);
    m.activation_peak_bytes = ops.peak_buffer_bytes();
    const double observed_loss = faults.observed_loss(step, m.loss, totals.finite);
    m.spike = spike_detector.observe(observed_loss);
    if (m.spike.spike) {
      spikes += 1;
      if (root)
        log::warn("step ", step, ": loss spike ", format_value(observed_loss),
                  " (z = ", format_value(m.spike.z, "%.1f"), " > ",
                  format_value(config.spike_z_threshold, "%.1f"),
                  "): reported and counted, the step's update is kept");
    }
    consumed_tokens += batches.tokens;
    trained_tokens += totals.lm_tokens;

    m.lr = lr;
    m.fault_injected = faults.any_at(step);
    m.tokens = batches.tokens;
    m.consumed_tokens = consumed_tokens;
    m.seconds = std::max(seconds_since(start), 1e-9);
    m.flops = batches.flops;
    m.world_peak_flops = config.peak_gflops * 1e9 * setup.grid->world().size();
    if (setup.grid->world().size() > 1)
      m.communication = gradients.communication(setup.exposed_seconds() - exposed_before);
    if (gradients.pipelined()) m.pipeline_bubble = gradients.bubble_fraction();
    if (setup.expert_parallel) {
      const int64_t sent = setup.ep_bytes_sent();
      m.ep_bytes_sent = sent - ep_bytes_before;
      ep_bytes_before = sent;
    }
    summary.tokens += batches.tokens;
    summary.seconds += m.seconds;
    step_flops += batches.flops;
    summary.final_loss = m.loss;
    summary.final_lm_loss = m.lm_loss;
    summary.final_mtp_loss = m.mtp_loss;
    return step_record(m);
  }

  double validation_loss() {
    last_validation_loss = train::validation_loss(model, config, tokenizer, setup);
    return last_validation_loss;
  }

  std::string save_checkpoint() {
    summary.last_checkpoint =
        save_checkpoint_from_ranks(config, step, setup, model, optimizer, tokenizer,
                                   trainer_state().to_json(config, optimizer.step_count()));
    last_checkpoint_step = step;
    return summary.last_checkpoint;
  }
};

Trainer::Trainer(RunConfig config, TrainerOptions options)
    : impl_(std::make_unique<Impl>(std::move(config), options)) {
  Impl& s = *impl_;
  if (s.root) remove_interrupted_checkpoint_writes(s.config.out_dir);
  std::string weights_origin;
  if (options.resume) {
    const std::optional<std::string> latest = latest_checkpoint(s.config.out_dir);
    if (!latest)
      throw Error("--resume: no checkpoint to resume from (no " +
                  checkpoints_dir(s.config.out_dir) + "/latest)")
          .field("out_dir");
    s.restore_from(*latest);
    s.summary.last_checkpoint = *latest;
    weights_origin = weights_file_of(*latest);
  } else if (!s.config.init_checkpoint.empty()) {
    weights_origin = weights_file_of(s.config.init_checkpoint);
  } else {
    weights_origin = "random initialisation of " + s.config.model_config + " (model.seed " +
                     std::to_string(s.config.init_seed) + ")";
  }
  s.faults.poison_loaded_weights(s.model.params());
  check_loaded_weights(s.model.params(), weights_origin, s.setup.grid->world());
  // param_dtype = "bf16": from here on the store keeps 2 bytes per trained
  // value (the values are bf16 already; the optimizer holds the fp32 master).
  if (s.optimizer.has_master()) s.model.params().set_storage(model::ParamStorage::kBF16);
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
  return *impl_->setup.grid;
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
MetricsRecord Trainer::train_step_on(const StepBatches& batches) {
  if (static_cast<int64_t>(batches.micro_batches.size()) != impl_->config.accumulation_steps())
    throw Error("a step takes global_batch / micro_batch = " +
                std::to_string(impl_->config.accumulation_steps()) + " micro-batches, not " +
                std::to_string(batches.micro_batches.size()))
        .field("micro_batches");
  return impl_->train_step_on(batches, Clock::now());
}
std::vector<size_t> Trainer::my_micro_batches(size_t count) const {
  return impl_->gradients.my_micro_batches(count);
}
std::vector<double> Trainer::label_log_probs(const model::Batch& batch) {
  Impl& s = *impl_;
  s.model.set_compute_precision(s.config.compute_precision());
  return s.model.label_log_probs(batch, StepSettings::of(s.config, 0.0).loss.logit_temperature);
}
int64_t Trainer::mtp_layers() const {
  return impl_->mtp_layers();
}
double Trainer::validation_loss() {
  return impl_->validation_loss();
}
std::vector<float> Trainer::full_parameters() {
  return gather_full_parameters(impl_->setup, impl_->model);
}
std::string Trainer::save_checkpoint() {
  return impl_->save_checkpoint();
}

TrainSummary Trainer::run(const EvalHook& on_eval) {
  Impl& s = *impl_;
  RunConfig& c = s.config;
  parallel::Communicator& world = s.setup.grid->world();
  if (c.peak_gflops <= 0) {
    // MFU is reported against world size × this per-rank peak.
    c.peak_gflops = measure_peak_gflops(c.precision == TrainPrecision::kBf16, world);
    if (!s.options.quiet)
      log::info("measured peak (", c.precision == TrainPrecision::kBf16 ? "bf16" : "f32",
                "): ", format_value(c.peak_gflops, "%.1f"), " GFLOP/s per rank");
  }
  if (s.options.write_metrics && !s.metrics)
    s.metrics = std::make_unique<MetricsWriter>(c.out_dir, s.options.resume ? s.step : -1);
  if (!s.data)
    throw Error("data.mode = \"grpo\": run the policy-gradient loop (rl layer; trex train does)")
        .field("data.mode");
  s.summary.data_lines_skipped = s.data->input().skipped;
  s.summary.data_records_repaired = s.data->input().repaired;
  s.summary.seconds = 0;
  s.summary.tokens = 0;
  s.step_flops = 0;
  s.summary.interrupted = false;
  if (world.size() > 1) {
    const int64_t optimizer_bytes = s.optimizer.state_bytes() + s.optimizer.master_bytes();
    const int64_t largest =
        state_bytes_on_largest_rank(s.setup, s.model, optimizer_bytes);  // collective
    if (!s.options.quiet)
      log_parallel_layout(s.setup, c, s.model, optimizer_bytes, largest,
                          s.gradients.reducer().bucket_count());
  }
  std::optional<Progress> progress;
  if (!s.options.quiet) progress.emplace("train", s.total_steps);

  while (s.step < s.total_steps) {
    MetricsRecord rec = s.train_step();
    const bool last = s.step == s.total_steps;
    const bool evaluate = (c.eval_interval > 0 && s.step % c.eval_interval == 0) || last;
    const bool validate = evaluate && !c.validation_file.empty();
    if (validate) rec.set("val_loss", s.validation_loss());
    if (evaluate && on_eval) on_eval(*this, s.step, rec);
    if (s.metrics) s.metrics->write(rec);
    if (progress) {
      progress->update(s.step, progress_text(rec));
      if (s.step % c.log_interval == 0 || last)
        log::info(step_log_line(rec, s.total_steps, validate));
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
                ? s.step_flops / out.seconds / (c.peak_gflops * 1e9 * world.size())
                : 0.0;
  out.final_validation_loss = s.last_validation_loss;
  out.peak_resident_bytes = peak_resident_bytes();
  out.resident_before_model = s.resident_before_model;
  if (s.metrics) {
    out.metrics_jsonl = s.metrics->jsonl_path();
    out.tensorboard_dir = s.metrics->tensorboard_dir();
  }
  return out;
}

}  // namespace trex::train
