// `trex bench peak`: this machine's large-GEMM throughput through the engine's
// own GEMM path (kernels::gemm, oneDNN; bf16 includes the operand rounding the
// engine does), the denominator of every MFU T-Rex prints.
// `trex bench step`: timed full training steps of a randomly initialised model
// (docs/performance.md), optionally with the per-operation profile.
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "trex/cli/commands.hpp"
#include "trex/core/error.hpp"
#include "trex/core/process_memory.hpp"
#include "trex/core/profile.hpp"
#include "trex/core/rng.hpp"
#include "trex/kernels/cpu/peak.hpp"
#include "trex/kernels/precision.hpp"
#include "trex/model/flops.hpp"
#include "trex/model/model.hpp"
#include "trex/train/optim/optimizer.hpp"
#include "trex/train/run_config.hpp"
#include "trex/train/step.hpp"

namespace trex::cli {
namespace {

struct PeakOptions {
  std::string dtype = "bf16";
  std::vector<int64_t> sizes = {1024, 2048, 3072, 4096};
  int repeats = 5;
  bool json = false;
};

int run_peak(const PeakOptions& o) {
  if (o.dtype != "bf16" && o.dtype != "f32")
    throw Error("--dtype must be bf16 or f32").field("dtype");
  const kernels::PeakMeasurement measured =
      kernels::measure_peak(o.dtype == "bf16", o.sizes, o.repeats);
  const double best = measured.peak_gflops;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& m : measured.gemms) {
    rows.push_back(
        {{"m", m.m}, {"n", m.n}, {"k", m.k}, {"seconds", m.seconds}, {"gflops", m.gflops}});
    if (!o.json)
      std::printf("%5lld x %5lld x %5lld  %9.3f ms  %8.1f GFLOP/s\n", static_cast<long long>(m.m),
                  static_cast<long long>(m.n), static_cast<long long>(m.k), m.seconds * 1e3,
                  m.gflops);
  }
  if (o.json) {
    std::cout << nlohmann::json{{"dtype", o.dtype}, {"peak_gflops", best}, {"gemms", rows}}.dump()
              << "\n";
  } else {
    std::printf("peak (%s, best size, median of %d repeats): %.1f GFLOP/s\n", o.dtype.c_str(),
                o.repeats, best);
  }
  return 0;
}

struct StepBenchOptions {
  std::string config;
  int64_t seq = 1024;
  int64_t batch = 1;
  int64_t steps = 5;
  int64_t warmup = 1;
  std::string dtype = "fp32";
  int mtp = 1;
  std::string optimizer = "muon";    // muon: the trainer's AdamW+Muon split; adamw: AdamW only
  std::string moment_dtype = "f32";  // storage of the optimizer moments
  std::string recompute = "none";    // activation recomputation
  uint64_t seed = 1;
  double peak_gflops = 0.0;  // > 0: given; otherwise measured after the steps
  bool profile = false;
  bool json = false;
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mib(int64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

struct ProfileRow {
  std::string op, phase;
  double ms_per_step = 0.0, percent = 0.0, calls_per_step = 0.0;
  double gflops = -1.0;  // GEMM roles and Newton–Schulz only
};

int run_step(const StepBenchOptions& o) {
  if (o.dtype != "fp32" && o.dtype != "f32" && o.dtype != "bf16")
    throw Error("--dtype must be fp32 or bf16").field("dtype");
  if (o.seq < 2) throw Error("--seq must be at least 2").field("seq");
  if (o.batch < 1) throw Error("--batch must be positive").field("batch");
  if (o.steps < 1) throw Error("--steps must be positive").field("steps");
  if (o.warmup < 0) throw Error("--warmup must be >= 0").field("warmup");
  if (o.mtp != 0 && o.mtp != 1) throw Error("--mtp must be 0 or 1").field("mtp");
  if (o.optimizer != "muon" && o.optimizer != "adamw")
    throw Error("--optimizer must be muon or adamw").field("optimizer");
  if (o.peak_gflops < 0) throw Error("--peak-gflops must be >= 0").field("peak-gflops");
  if (o.moment_dtype != "f32" && o.moment_dtype != "bf16")
    throw Error("--moment-dtype must be f32 or bf16").field("moment-dtype");
  if (o.recompute != "none" && o.recompute != "selective" && o.recompute != "full")
    throw Error("--recompute must be none, selective or full").field("recompute");
  const bool bf16 = o.dtype == "bf16";
  const int64_t baseline_rss = peak_resident_bytes();

  // The trainer's defaults (docs/training.md) for everything a step does.
  const train::RunConfig defaults;
  model::Model<float> m(model::ModelConfig::load(o.config));
  m.init_random(o.seed);
  const model::ModelConfig& c = m.config();
  model::ParamStore<float>& params = m.params();
  train::OptimizerOptions optimizer_options = defaults.optimizer;
  // AdamW only is what the transformers baseline runs (reference/bench_hf_train.py).
  optimizer_options.use_muon = o.optimizer == "muon";
  optimizer_options.moment_dtype =
      o.moment_dtype == "bf16" ? train::MomentDType::kBF16 : train::MomentDType::kF32;
  const kernels::Precision precision = bf16 ? kernels::Precision::kBF16 : kernels::Precision::kF32;
  optimizer_options.muon.precision = precision;
  train::Optimizer optimizer(params, optimizer_options);

  std::vector<model::Batch> micro_batches(1);  // one micro-batch per step
  model::Batch& batch = micro_batches.front();
  batch.B = o.batch;
  batch.S = o.seq;
  Rng rng(o.seed, {0xbe4c});
  batch.input_ids.resize(static_cast<size_t>(o.batch * o.seq));
  for (int64_t& id : batch.input_ids) id = rng.uniform_int(int64_t{0}, c.vocab_size - 1);
  const int64_t mtp_counted = o.mtp ? c.num_nextn_predict_layers : 0;
  const double step_flops =
      model::training_step_flops(c, model::SequenceStats::uniform(o.seq, o.batch), mtp_counted);

  // The trainer's step (train::run_step) on one process: zero, forward +
  // backward, clip, AdamW/Muon, router-bias rule, zero.
  m.set_compute_precision(precision);
  m.set_activation_recompute(o.recompute == "full"        ? model::ActivationRecompute::kFull
                             : o.recompute == "selective" ? model::ActivationRecompute::kSelective
                                                          : model::ActivationRecompute::kNone);
  train::SingleProcessGradients gradients(m);
  train::StepSettings settings = train::StepSettings::of(defaults, defaults.peak_lr);
  if (!o.mtp) settings.loss.mtp_weight = 0.0;
  std::vector<double> seconds, model_seconds;  // whole steps; forward_backward alone
  double last_loss = 0.0;
  const kernels::Backend& backend = m.op_context().ops();
  for (int64_t i = 0; i < o.warmup + o.steps; ++i) {
    const bool timed = i >= o.warmup;
    if (timed && i == o.warmup) backend.reset_peak_buffer_bytes();
    if (timed && i == o.warmup && o.profile) {
      profile::reset();
      profile::set_enabled(true);
    }
    const auto start = std::chrono::steady_clock::now();
    const train::StepOutcome outcome =
        train::run_step(m, optimizer, gradients, micro_batches, settings);
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!outcome.totals.finite)
      throw Error("bench step: non-finite loss at step " + std::to_string(i));
    if (!outcome.updated())
      throw Error("bench step: step " + std::to_string(i) + " skipped: " + outcome.skip_reason +
                  outcome.skip_detail);
    if (timed) {
      seconds.push_back(elapsed);
      model_seconds.push_back(gradients.forward_backward_seconds());
    }
    last_loss = gradients.last().total;
  }
  profile::set_enabled(false);
  const int64_t peak_rss = peak_resident_bytes();
  // Activations and work buffers: the most backend memory alive at once during the timed steps.
  const int64_t peak_buffers = backend.peak_buffer_bytes();

  double peak_gflops = o.peak_gflops;
  const bool peak_given = peak_gflops > 0;
  if (!peak_given)  // after the steps, so its buffers do not count in the peak RSS
    peak_gflops = kernels::measure_peak(bf16, {1024, 2048, 3072}, 3).peak_gflops;

  double total = 0.0;
  for (double s : seconds) total += s;
  const double mean = total / static_cast<double>(seconds.size());
  const double median = median_of(seconds);
  const double tokens = static_cast<double>(o.batch * o.seq);
  const double tokens_per_second = tokens / median;
  const double flops_per_second = step_flops / median;
  const double mfu = flops_per_second / (peak_gflops * 1e9);
  // The optimizer's cost is per step, not per token (gradient accumulation
  // amortises it): forward + backward alone is reported too.
  const double model_median = median_of(model_seconds);
  const double model_mfu = step_flops / model_median / (peak_gflops * 1e9);
  const int64_t param_bytes = params.size() * static_cast<int64_t>(sizeof(float));
  const int64_t grad_bytes = static_cast<int64_t>(params.grads().size() * sizeof(float));
  const int64_t optimizer_bytes = optimizer.state_bytes();
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif

  // Profile: exclusive time per (op, phase), per timed step.
  std::vector<ProfileRow> rows;
  double profiled = 0.0;
  if (o.profile) {
    const double n = static_cast<double>(seconds.size());
    for (const profile::Record& rec : profile::records()) {
      ProfileRow row;
      row.op = profile::op_name(rec.op);
      row.phase = profile::phase_name(rec.phase);
      row.ms_per_step = rec.seconds / n * 1e3;
      row.percent = 100.0 * rec.seconds / total;
      row.calls_per_step = static_cast<double>(rec.calls) / n;
      if (rec.flops > 0 && rec.seconds > 0) row.gflops = rec.flops / rec.seconds / 1e9;
      profiled += rec.seconds;
      rows.push_back(row);
    }
    std::stable_sort(rows.begin(), rows.end(), [](const ProfileRow& a, const ProfileRow& b) {
      return a.ms_per_step > b.ms_per_step;
    });
  }
  const double unattributed = std::max(0.0, total - profiled);
  std::map<std::string, double> phase_ms;  // per timed step
  for (const ProfileRow& row : rows) phase_ms[row.phase] += row.ms_per_step;
  const double n_steps = static_cast<double>(seconds.size());

  if (o.json) {
    nlohmann::json j = {
        {"config", o.config},
        {"seq", o.seq},
        {"batch", o.batch},
        {"steps", o.steps},
        {"warmup", o.warmup},
        {"dtype", bf16 ? "bf16" : "fp32"},
        {"mtp", o.mtp},
        {"optimizer", o.optimizer},
        {"moment_dtype", o.moment_dtype},
        {"recompute", o.recompute},
        {"threads", threads},
        {"step_seconds",
         {{"median", median},
          {"mean", mean},
          {"min", *std::min_element(seconds.begin(), seconds.end())},
          {"max", *std::max_element(seconds.begin(), seconds.end())},
          {"all", seconds}}},
        {"forward_backward_seconds", {{"median", model_median}, {"all", model_seconds}}},
        {"forward_backward_mfu", model_mfu},
        {"tokens_per_step", tokens},
        {"tokens_per_second", tokens_per_second},
        {"flops_per_step", step_flops},
        {"model_tflops", flops_per_second / 1e12},
        {"peak_gflops", peak_gflops},
        {"peak_source", peak_given ? "given" : "measured"},
        {"mfu", mfu},
        {"final_loss", last_loss},
        {"memory",
         {{"peak_rss_bytes", peak_rss},
          {"baseline_rss_bytes", baseline_rss},
          {"delta_rss_bytes", peak_rss - baseline_rss},
          {"param_bytes", param_bytes},
          {"grad_bytes", grad_bytes},
          {"optimizer_state_bytes", optimizer_bytes},
          {"peak_buffer_bytes", peak_buffers},
          {"peak_buffer_bytes_per_token", static_cast<double>(peak_buffers) / tokens}}}};
    if (o.profile) {
      nlohmann::json ops = nlohmann::json::array();
      for (const ProfileRow& row : rows) {
        nlohmann::json e = {{"op", row.op},
                            {"phase", row.phase},
                            {"ms_per_step", row.ms_per_step},
                            {"percent", row.percent},
                            {"calls_per_step", row.calls_per_step}};
        if (row.gflops >= 0) e["gflops"] = row.gflops;
        ops.push_back(e);
      }
      j["profile"] = {{"ops", ops},
                      {"step_ms", total / n_steps * 1e3},
                      {"profiled_ms_per_step", profiled / n_steps * 1e3},
                      {"unattributed_ms_per_step", unattributed / n_steps * 1e3},
                      {"coverage", profiled / total},
                      {"phase_ms_per_step", phase_ms}};
    }
    std::cout << j.dump() << "\n";
    return 0;
  }

  std::printf("bench step: %s, seq %lld x batch %lld, %s, MTP %d, %d threads\n", o.config.c_str(),
              static_cast<long long>(o.seq), static_cast<long long>(o.batch),
              bf16 ? "bf16" : "fp32", o.mtp, threads);
  std::printf(
      "step time over %lld steps (warm-up %lld excluded): median %.1f ms, mean %.1f ms "
      "(min %.1f, max %.1f)\n",
      static_cast<long long>(o.steps), static_cast<long long>(o.warmup), median * 1e3, mean * 1e3,
      *std::min_element(seconds.begin(), seconds.end()) * 1e3,
      *std::max_element(seconds.begin(), seconds.end()) * 1e3);
  std::printf("tokens/s: %.1f (median step)\n", tokens_per_second);
  std::printf("model: %.3f TFLOP/s (%.2f GFLOP/step), MFU %.2f%% of %.1f GFLOP/s (%s peak, %s)\n",
              flops_per_second / 1e12, step_flops / 1e9, 100.0 * mfu, peak_gflops,
              bf16 ? "bf16" : "f32", peak_given ? "given" : "measured");
  std::printf("forward+backward alone: median %.1f ms (%.1f%% of the step), MFU %.2f%%\n",
              model_median * 1e3, 100.0 * model_median / median, 100.0 * model_mfu);
  std::printf(
      "memory: peak RSS %.1f MiB (baseline %.1f MiB, +%.1f MiB); parameters %.1f MiB, "
      "gradients %.1f MiB, optimizer state %.1f MiB; activations and work buffers at peak "
      "%.1f MiB (%.1f KiB per token, recompute %s)\n",
      mib(peak_rss), mib(baseline_rss), mib(peak_rss - baseline_rss), mib(param_bytes),
      mib(grad_bytes), mib(optimizer_bytes), mib(peak_buffers),
      static_cast<double>(peak_buffers) / tokens / 1024.0, o.recompute.c_str());
  std::printf("final loss: %.4f\n", last_loss);
  if (o.profile) {
    std::printf("\nprofile (exclusive time per timed step; %% of the mean step %.1f ms)\n",
                total / n_steps * 1e3);
    std::printf("%-18s %-5s %10s %7s %9s %9s\n", "op", "phase", "ms/step", "%", "calls", "GFLOP/s");
    for (const ProfileRow& row : rows) {
      std::printf("%-18s %-5s %10.2f %6.1f%% %9.1f", row.op.c_str(), row.phase.c_str(),
                  row.ms_per_step, row.percent, row.calls_per_step);
      if (row.gflops >= 0)
        std::printf(" %9.1f\n", row.gflops);
      else
        std::printf(" %9s\n", "");
    }
    std::printf("%-18s %-5s %10.2f %6.1f%%\n", "other/unattributed", "",
                unattributed / n_steps * 1e3, 100.0 * unattributed / total);
    std::printf("%-18s %-5s %10.2f %6.1f%%\n", "step", "", total / n_steps * 1e3, 100.0);
    for (const auto& [phase, ms] : phase_ms)
      std::printf("phase %-5s %.2f ms/step (%.1f%%)\n", phase.c_str(), ms,
                  100.0 * ms / (total / n_steps * 1e3));
  }
  return 0;
}

}  // namespace

void add_bench_commands(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks of this machine and of the engine");
  bench->require_subcommand(1);
  auto options = std::make_shared<PeakOptions>();
  auto* peak = bench->add_subcommand(
      "peak", "Large-GEMM throughput through the engine's GEMM path (the MFU denominator)");
  peak->add_option("--dtype", options->dtype,
                   "bf16 (operands rounded to bf16, fp32 accumulation) or f32")
      ->capture_default_str();
  peak->add_option("--sizes", options->sizes, "Square GEMM sizes to time")
      ->delimiter(',')
      ->capture_default_str();
  peak->add_option("--repeats", options->repeats,
                   "Timed repeats per size (the median is kept; the best size is the peak)")
      ->capture_default_str();
  peak->add_flag("--json", options->json, "Print one JSON object instead of a table");
  peak->callback([options] {
    const int rc = run_peak(*options);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });

  auto step_options = std::make_shared<StepBenchOptions>();
  auto* step = bench->add_subcommand(
      "step",
      "Timed training steps (forward, backward, clip, AdamW+Muon, router bias) of a randomly "
      "initialised model: tokens/s, model TFLOP/s, MFU, memory; --profile adds a per-op breakdown");
  step->add_option("--config", step_options->config, "Model config JSON")->required();
  step->add_option("--seq", step_options->seq, "Sequence length")->capture_default_str();
  step->add_option("--batch", step_options->batch, "Sequences per step")->capture_default_str();
  step->add_option("--steps", step_options->steps, "Timed steps")->capture_default_str();
  step->add_option("--warmup", step_options->warmup, "Untimed steps first")->capture_default_str();
  step->add_option("--dtype", step_options->dtype,
                   "fp32, or bf16 (GEMM operands rounded to bf16, fp32 accumulation)")
      ->capture_default_str();
  step->add_option("--mtp", step_options->mtp, "1: train the MTP block as the trainer does; 0: off")
      ->capture_default_str();
  step->add_option("--optimizer", step_options->optimizer,
                   "muon: the trainer's AdamW+Muon split; adamw: AdamW for every parameter (the "
                   "transformers baseline's optimizer)")
      ->capture_default_str();
  step->add_option("--moment-dtype", step_options->moment_dtype,
                   "f32 or bf16 storage of the optimizer moments (updates compute in fp32)")
      ->capture_default_str();
  step->add_option("--recompute", step_options->recompute,
                   "Activation recomputation: none, selective (mHC/norm outputs and the "
                   "attention core again in the block's backward) or full (each block's forward "
                   "again)")
      ->capture_default_str();
  step->add_option("--seed", step_options->seed, "Seed of the random init and tokens")
      ->capture_default_str();
  step->add_option("--peak-gflops", step_options->peak_gflops,
                   "MFU denominator (e.g. from `trex bench peak`); 0: measured after the steps")
      ->capture_default_str();
  step->add_flag("--profile", step_options->profile, "Per-operation time breakdown");
  step->add_flag("--json", step_options->json, "Print one JSON object instead of text");
  step->callback([step_options] {
    const int rc = run_step(*step_options);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace trex::cli
