#include "trex/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>

#include "trex/core/error.hpp"
#include "trex/core/log.hpp"
#include "trex/core/progress.hpp"
#include "trex/kernels/cpu/gemm.hpp"
#include "trex/kernels/cpu/peak.hpp"
#include "trex/model/flops.hpp"
#include "trex/train/checkpoint.hpp"
#include "trex/train/data_cpt.hpp"
#include "trex/train/data_sft.hpp"
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
                                          .shuffle = shuffle}));
    } else {
      SftLoaderOptions o;
      o.seq_len = c.seq_len;
      o.batch_size = c.micro_batch;
      o.seed = c.data_seed;
      o.shuffle = shuffle;
      sft_.emplace(SftLoader::from_jsonl(file, tokenizer, o));
    }
  }
  PackedBatch next_batch() { return cpt_ ? cpt_->next_batch() : sft_->next_batch(); }
  const LoaderState& state() const { return cpt_ ? cpt_->state() : sft_->state(); }
  void restore(const LoaderState& s) { cpt_ ? cpt_->restore(s) : sft_->restore(s); }
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

model::Model<float> build_model(const RunConfig& c) {
  if (!c.init_checkpoint.empty()) return model::Model<float>::from_checkpoint(c.init_checkpoint);
  model::Model<float> m(model::ModelConfig::load(c.model_config));
  m.init_random(c.init_seed);
  return m;
}

std::string fmt(double v, const char* spec = "%.4g") {
  char buf[64];
  std::snprintf(buf, sizeof(buf), spec, v);
  return buf;
}

}  // namespace

struct Trainer::Impl {
  RunConfig config;
  TrainerOptions options;
  io::Tokenizer tokenizer;
  model::Model<float> model;
  Optimizer optimizer;
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
  std::vector<float> accumulated;  // Σ nᵢ gᵢ over micro-batches (accumulation > 1)
  TrainSummary summary;
  std::unique_ptr<MetricsWriter> metrics;
  int64_t last_checkpoint_step = -1;

  Impl(RunConfig c, TrainerOptions o)
      : config(std::move(c)),
        options(o),
        tokenizer(io::Tokenizer::load(config.tokenizer)),
        model(build_model(config)),
        optimizer(model.params(), config.optimizer),
        data(config, tokenizer, config.train_file, config.shuffle),
        spike_detector(config.spike_window, config.spike_z_threshold) {
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

  void restore_from(const std::string& dir) {
    model = model::Model<float>::from_checkpoint(dir);
    optimizer = Optimizer(model.params(), config.optimizer);
    optimizer.load_state((std::filesystem::path(dir) / "optimizer.safetensors").string());
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
      if (state.at("total_steps").get<int64_t>() != total_steps)
        log::warn("resuming ", dir, ": the checkpoint planned ",
                  state.at("total_steps").get<int64_t>(), " steps, this run plans ", total_steps,
                  " (the schedule follows this run)");
    } catch (const nlohmann::json::exception& e) {
      throw Error(std::string("bad trainer state: ") + e.what()).file(origin);
    }
    data.restore(LoaderState::from_json(state.at("loader"), origin + ": loader"));
    last_checkpoint_step = step;
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

  MetricsRecord train_step() {
    kernels::ScopedGemmPrecision precision(config.precision == TrainPrecision::kBf16
                                               ? kernels::Precision::kBF16
                                               : kernels::Precision::kF32);
    const auto start = Clock::now();
    step += 1;
    const double lr = learning_rate(config.schedule(total_steps), step);
    model::ParamStore<float>& params = model.params();
    const int64_t accumulation = config.accumulation_steps();
    model::LossOptions loss_options;
    loss_options.mtp_weight = config.mtp_weight;
    loss_options.balance_loss_weight = config.balance_weight;

    double lm_sum = 0, mtp_sum = 0, balance_sum = 0;
    int64_t lm_tokens = 0, mtp_tokens = 0, tokens = 0;
    double flops = 0;
    bool finite_loss = true;
    model::LossBreakdown loads;  // expert loads summed over the micro-batches
    if (accumulation > 1) accumulated.assign(static_cast<size_t>(params.size()), 0.0f);
    const int64_t mtp_counted = config.mtp_weight > 0 ? model.config().num_nextn_predict_layers : 0;
    for (int64_t micro = 0; micro < accumulation; ++micro) {
      const model::Batch batch = to_model_batch(data.next_batch());
      params.zero_grads();
      const model::LossBreakdown r = model.forward_backward(batch, loss_options);
      finite_loss = finite_loss && std::isfinite(r.total);
      lm_sum += r.lm * static_cast<double>(r.lm_tokens);
      mtp_sum += r.mtp * static_cast<double>(r.mtp_tokens);
      balance_sum += r.balance;
      lm_tokens += r.lm_tokens;
      mtp_tokens += r.mtp_tokens;
      tokens += batch.B * batch.S;
      flops += model::training_step_flops(model.config(), sequence_stats(batch), mtp_counted);
      if (loads.expert_load.empty()) {
        loads.expert_load = r.expert_load;
      } else {
        for (size_t l = 0; l < loads.expert_load.size(); ++l)
          for (size_t e = 0; e < loads.expert_load[l].size(); ++e)
            loads.expert_load[l][e] += r.expert_load[l][e];
      }
      if (accumulation > 1) {
        // The engine's gradient is that of the micro-batch's mean; weighting by
        // its trained tokens and dividing by the step's total makes the step's
        // gradient that of the mean over every trained token of the step.
        const float weight = static_cast<float>(r.lm_tokens);
        const std::vector<float>& g = params.grads();
        for (size_t i = 0; i < accumulated.size(); ++i) accumulated[i] += weight * g[i];
      }
    }
    if (accumulation > 1) {
      std::vector<float>& g = params.grads();
      const float inv = lm_tokens > 0 ? 1.0f / static_cast<float>(lm_tokens) : 0.0f;
      for (size_t i = 0; i < g.size(); ++i) g[i] = accumulated[i] * inv;
    }
    if (gradient_hook) gradient_hook(step, params);

    MetricsRecord rec;
    rec.step = step;
    const double lm = lm_tokens > 0 ? lm_sum / static_cast<double>(lm_tokens) : 0.0;
    const double mtp = mtp_tokens > 0 ? mtp_sum / static_cast<double>(mtp_tokens) : 0.0;
    const double balance = balance_sum / static_cast<double>(accumulation);
    const double loss = lm + config.mtp_weight * mtp + balance;
    rec.set("loss", finite_loss ? loss : NAN);
    rec.set("loss_lm", lm);
    rec.set("loss_mtp", mtp);
    rec.set("loss_balance", balance);
    rec.set("lr", lr);

    std::string skip_reason;
    double grad_norm = NAN;
    if (!finite_loss) {
      skip_reason = "non-finite loss";
    } else if (lm_tokens == 0) {
      skip_reason = "no trained tokens in the step";
    } else {
      grad_norm = clip_grad_norm(params, config.clip);
      if (!std::isfinite(grad_norm)) skip_reason = "non-finite gradient norm";
    }
    rec.set("grad_norm", grad_norm);
    if (skip_reason.empty()) {
      optimizer.step(params, lr);
      model.update_router_biases(loads, config.router_bias_speed);
    } else {
      skipped_steps += 1;
      summary.skip_reasons.push_back("step " + std::to_string(step) + ": " + skip_reason);
      log::warn("step ", step, " skipped: ", skip_reason, " (no update)");
    }
    params.zero_grads();
    rec.set("skipped", skip_reason.empty() ? 0.0 : 1.0);

    const SpikeDetector::Result spike = spike_detector.observe(finite_loss ? loss : NAN);
    rec.set("loss_z", spike.z);
    rec.set("spike", spike.spike ? 1.0 : 0.0);
    if (spike.spike) {
      spikes += 1;
      log::warn("step ", step, ": loss spike ", fmt(loss), " (z = ", fmt(spike.z, "%.1f"), ")");
    }

    consumed_tokens += tokens;
    trained_tokens += lm_tokens;
    const double seconds = std::max(seconds_since(start), 1e-9);
    rec.set("tokens", static_cast<double>(tokens));
    rec.set("consumed_tokens", static_cast<double>(consumed_tokens));
    rec.set("step_seconds", seconds);
    rec.set("tokens_per_s", static_cast<double>(tokens) / seconds);
    rec.set("model_tflops", flops / seconds / 1e12);
    rec.set("mfu", config.peak_gflops > 0 ? flops / seconds / (config.peak_gflops * 1e9) : 0.0);
    summary.tokens += tokens;
    summary.seconds += seconds;
    step_flops += flops;
    double worst = 0;
    for (size_t l = 0; l < loads.expert_load.size(); ++l) {
      const auto& load = loads.expert_load[l];
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

  double validation_loss() {
    if (config.validation_file.empty())
      throw Error("the run config has no validation file").field("data.validation");
    kernels::ScopedGemmPrecision precision(config.precision == TrainPrecision::kBf16
                                               ? kernels::Precision::kBF16
                                               : kernels::Precision::kF32);
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
    for (int64_t i = 0; i < batches; ++i) {
      const model::Batch batch = to_model_batch(validation.next_batch());
      const model::LossBreakdown r = model.forward_backward(batch, loss_options, forward_only);
      sum += r.lm * static_cast<double>(r.lm_tokens);
      count += r.lm_tokens;
    }
    last_validation_loss = count > 0 ? sum / static_cast<double>(count) : NAN;
    return last_validation_loss;
  }

  std::string save_checkpoint() {
    const std::string dir =
        write_training_checkpoint(config.out_dir, step, model, tokenizer, optimizer,
                                  trainer_state(), config.keep_checkpoints);
    last_checkpoint_step = step;
    summary.last_checkpoint = dir;
    return dir;
  }
};

Trainer::Trainer(RunConfig config, TrainerOptions options)
    : impl_(std::make_unique<Impl>(std::move(config), options)) {
  if (options.resume) {
    const std::optional<std::string> latest = latest_checkpoint(impl_->config.out_dir);
    if (!latest)
      throw Error("--resume: no checkpoint to resume from (no " +
                  checkpoints_dir(impl_->config.out_dir) + "/latest)")
          .field("out_dir");
    impl_->restore_from(*latest);
    impl_->summary.last_checkpoint = *latest;
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
void Trainer::set_gradient_hook(GradientHook hook) {
  impl_->gradient_hook = std::move(hook);
}
MetricsRecord Trainer::train_step() {
  return impl_->train_step();
}
double Trainer::validation_loss() {
  return impl_->validation_loss();
}
std::string Trainer::save_checkpoint() {
  return impl_->save_checkpoint();
}

TrainSummary Trainer::run(const EvalHook& on_eval) {
  Impl& s = *impl_;
  RunConfig& c = s.config;
  if (c.peak_gflops <= 0) {
    // The same measurement as `trex bench peak`, on a short budget.
    const auto peak = kernels::measure_peak(c.precision == TrainPrecision::kBf16, {512, 1024}, 3);
    c.peak_gflops = peak.peak_gflops;
    if (!s.options.quiet)
      log::info("measured peak (", c.precision == TrainPrecision::kBf16 ? "bf16" : "f32",
                "): ", fmt(c.peak_gflops, "%.1f"), " GFLOP/s");
  }
  if (s.options.write_metrics && !s.metrics)
    s.metrics = std::make_unique<MetricsWriter>(c.out_dir, s.options.resume ? s.step : -1);
  s.summary.seconds = 0;
  s.summary.tokens = 0;
  s.step_flops = 0;
  s.summary.interrupted = false;
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
                ? s.step_flops / out.seconds / (c.peak_gflops * 1e9)
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
  for (const auto& r : s.skip_reasons) o << "                   " << r << "\n";
  o << "loss spikes      " << s.spikes << "\n";
  o << "tokens           " << s.tokens << " this run (" << s.trained_tokens
    << " trained in total)\n";
  o << "throughput       " << fmt(s.tokens_per_second, "%.1f") << " tokens/s, "
    << fmt(s.model_tflops * 1e3, "%.3f") << " model GFLOP/s, MFU " << fmt(100 * s.mfu, "%.2f")
    << "% of " << fmt(s.peak_gflops, "%.1f") << " GFLOP/s\n";
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
