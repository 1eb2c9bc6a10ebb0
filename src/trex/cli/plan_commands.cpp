// `trex plan`: memory, step time and MFU of parallel layouts for a model on a
// cluster, the best layouts by search, an --explain breakdown and an SVG of the
// candidates; `trex plan calibrate`: fit the GEMM efficiency curve;
// `trex plan validate`: the published-point validation and V4-Pro ablation;
// `trex plan experts`: topology-aware expert placement (docs/expert-placement.md).
// See docs/planner.md.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "trex/cli/commands.hpp"
#include "trex/cli/engine_memory.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/parallel/expert_plan.hpp"
#include "trex/plan/calibrate.hpp"
#include "trex/plan/cluster.hpp"
#include "trex/plan/job_answers.hpp"
#include "trex/plan/planner.hpp"
#include "trex/plan/report.hpp"
#include "trex/plan/validation.hpp"
#include "trex/train/data/packing.hpp"

namespace trex::cli {

namespace {

using namespace trex::plan;
using namespace trex::parallel;

struct PlanOptions {
  std::string model, cluster, svg, json_out, layout, optimizer = "adamw";
  std::string moment_dtype = "f32", expert_weights = "bf16";
  int64_t devices = 0, global_batch = 0, seq = 0, top = 5;
  double imbalance = 1.1;
  double goodput = 1.0;
  bool rebalance = false;
  bool explain = false, allow_fp8 = false, no_offload = false, unfused = false,
       naive_placement = false;
  JobQuestions questions;
  bool compare = false;
  bool no_engine_memory = false;
  std::string compare_svg;
  std::string root = ".";   // the repository (validation points) for the uncertainty
  std::string sft_lengths;  // tokens per SFT sample, one per line
};

// SFT rows' share of sample tokens for the samples in `path` (tokens per
// sample, one per line; '#' comments and blank lines skipped): the trainer's
// own whole-sample packing (train::PackingLoader, one shuffled epoch) against
// one sample per row. A sample longer than a row is cut to the row, as the SFT
// loader's default (OverlongPolicy::kTruncate) does.
void sft_packing(const std::string& path, int64_t seq_len, JobQuestions& q) {
  std::istringstream in(read_file(path));
  std::string line;
  std::vector<int64_t> lengths;
  int64_t line_number = 0, cut = 0;
  while (std::getline(in, line)) {
    ++line_number;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    // Digits only; more than 18 of them is longer than any row (and int64).
    const size_t begin = line.find_first_not_of(" \t\r");
    const std::string digits = line.substr(begin, line.find_last_not_of(" \t\r") - begin + 1);
    int64_t tokens = digits.find_first_not_of("0123456789") != std::string::npos ? 0
                     : digits.size() > 18                                        ? seq_len + 1
                                          : std::stoll(digits);
    if (tokens <= 0)
      throw Error("not a positive token count: '" + line + "'").file(path).line(line_number);
    if (tokens > seq_len) {
      ++cut;
      tokens = seq_len;
    }
    lengths.push_back(tokens);
  }
  if (lengths.empty()) throw Error("no sample token count").file(path);
  // The packer holds every token (8 bytes each): a large set is measured on an
  // even subsample of at most 50,000 samples and 2^25 tokens.
  int64_t all_tokens = 0;
  for (int64_t t : lengths) all_tokens += t;
  constexpr int64_t kMaxSamples = 50000, kMaxTokens = int64_t{1} << 25;
  const int64_t count = static_cast<int64_t>(lengths.size());
  const size_t stride = static_cast<size_t>(std::max<int64_t>(
      {1, (count + kMaxSamples - 1) / kMaxSamples, (all_tokens + kMaxTokens - 1) / kMaxTokens}));
  train::PackingItems items;
  int64_t total = 0;
  for (size_t i = 0; i < lengths.size(); i += stride) {
    items.tokens.insert(items.tokens.end(), static_cast<size_t>(lengths[i]), 1);
    items.offsets.push_back(static_cast<int64_t>(items.tokens.size()));
    total += lengths[i];
  }
  items.labels = items.tokens;
  train::PackingOptions options;
  options.seq_len = seq_len;
  options.mode = train::PackingMode::kWholeItems;
  train::PackingLoader loader(std::move(items), options);
  const double rows = static_cast<double>(loader.sequences_in_epoch());
  const double samples = static_cast<double>(loader.item_count());
  q.packing_efficiency = static_cast<double>(total) / (rows * static_cast<double>(seq_len));
  q.unpacked_efficiency = static_cast<double>(total) / (samples * static_cast<double>(seq_len));
  q.packing_from = "trex train's packing of " +
                   (stride > 1 ? "1 in " + std::to_string(stride) + " of the " : "the ") +
                   std::to_string(lengths.size()) + " samples of " + path +
                   (cut ? ", " + std::to_string(cut) + " longer ones cut to the row" : "");
}

// The validation's rows when the repository's configs are at `root`.
std::vector<ValidationRow> validation_if_present(const std::string& root) {
  try {
    return run_validation(root);
  } catch (const Error&) {
    return {};
  }
}

// Per listed layout: executability by `trex train`, the validated region; for
// the first: the MFU band and the job's answers.
void print_notes(const std::vector<Estimate>& estimates, const ModelShape& model, const Job& job,
                 const PlanOptions& o) {
  if (estimates.empty()) return;
  const std::vector<ValidationRow> rows = validation_if_present(o.root);
  const ValidatedRegion region = validated_region(rows);
  std::printf("\n");
  for (size_t i = 0; i < estimates.size(); ++i) {
    const std::vector<std::string> only = planner_only_features(estimates[i].layout);
    std::string text = !only.empty() ? "planner only:"
                       : estimates[i].memory_from_engine
                           ? "trex train runs this layout (memory from the engine's own "
                             "accounting, as trex model memory: fp32 parameters and gradients)"
                           : "trex train runs this layout";
    for (size_t k = 0; k < only.size(); ++k) text += (k ? ", " : " ") + only[k];
    if (!rows.empty()) {
      const std::vector<std::string> outside = outside_region(estimates[i].layout, region);
      if (!outside.empty()) {
        text += "; WARNING outside the validated region:";
        for (size_t k = 0; k < outside.size(); ++k) text += (k ? ", " : " ") + outside[k];
      }
    }
    std::printf("#%zu %s\n", i + 1, text.c_str());
  }
  const Estimate& best = estimates.front();
  if (rows.empty()) {
    std::printf("MFU uncertainty: not available (the validation points are read from --root %s)\n",
                o.root.c_str());
  } else {
    const ErrorSummary errors = summarize_errors(rows, PointRole::kValidation);
    for (size_t i = 0; i < estimates.size(); ++i) {
      const MfuBand b = mfu_band(estimates[i].mfu, errors);
      std::printf(
          "#%zu MFU %.1f%%: %.1f-%.1f%% at the validation's median error (%.0f%%), %.1f-%.1f%% "
          "at its worst (%.0f%%; %zu points, trex plan validate)\n",
          i + 1, 100 * estimates[i].mfu, 100 * b.median_low, 100 * b.median_high,
          100 * errors.median, 100 * b.worst_low, 100 * b.worst_high, 100 * errors.worst,
          errors.points);
    }
  }
  std::printf(
      "#1 job:\n%s",
      format_job_answers(answer_job(best, model, job, o.questions), o.questions, job).c_str());
  if (o.compare) std::printf("\nside by side:\n%s", format_side_by_side(estimates).c_str());
}

void run_plan(const PlanOptions& given) {
  PlanOptions o = given;
  if (o.model.empty()) throw Error("--model is required").field("--model");
  if (o.cluster.empty()) throw Error("--cluster is required").field("--cluster");
  if (o.devices <= 0) throw Error("--devices must be > 0").field("--devices");
  if (o.global_batch <= 0) throw Error("--global-batch must be > 0").field("--global-batch");
  if (o.seq <= 0) throw Error("--seq must be > 0").field("--seq");
  ModelShape model = load_model_shape(o.model, o.seq);
  ClusterSpec cluster = ClusterSpec::load(o.cluster);
  if (!o.sft_lengths.empty()) sft_packing(o.sft_lengths, o.seq, o.questions);
  Job job;
  job.devices = o.devices;
  job.global_batch = o.global_batch;
  job.seq_len = o.seq;
  job.optimizer = parse_optimizer(o.optimizer);
  if (o.moment_dtype != "f32" && o.moment_dtype != "bf16")
    throw Error("must be f32 or bf16, got '" + o.moment_dtype + "'").field("--moment-dtype");
  job.moment_bytes = o.moment_dtype == "bf16" ? 2 : 4;
  job.expert_weight_bytes = expert_weight_bytes(o.expert_weights);
  if (!(o.imbalance >= 1)) throw Error("must be >= 1").field("--expert-imbalance");
  job.expert_imbalance = o.imbalance;
  if (!(o.goodput > 0 && o.goodput <= 1)) throw Error("must be in (0, 1]").field("--goodput");
  job.goodput = o.goodput;

  std::printf("model %s (%.4g B params, %.4g B activated, %.1f GFLOP/token at seq %lld)\n",
              model.name.c_str(), model.total_params / 1e9, model.activated_params / 1e9,
              model.model_flops_per_token / 1e9, static_cast<long long>(o.seq));
  std::printf("cluster %s: %lld devices, global batch %lld x %lld tokens, %s\n",
              cluster.name.c_str(), static_cast<long long>(o.devices),
              static_cast<long long>(o.global_batch), static_cast<long long>(o.seq),
              to_string(job.optimizer).c_str());
  if (o.moment_dtype != "f32" || o.expert_weights != "bf16")
    std::printf(
        "state: %s optimizer moments, routed-expert weights %s (%.5g bytes per weight, scales "
        "included)\n",
        o.moment_dtype.c_str(), o.expert_weights.c_str(), job.expert_weight_bytes);
  if (job.goodput < 1)
    std::printf("goodput %.2f: tokens/s, TFLOP/s and MFU are wall-clock averages\n", job.goodput);

  if (!o.layout.empty()) {
    Layout layout = parse_layout(o.layout);
    if (o.rebalance) layout.expert_rebalancing = true;
    // A layout `trex train` runs gets the engine's own accounting (as `trex
    // model memory`) when --model is a model config the engine reads.
    std::optional<model::ModelConfig> engine_model;
    if (!o.no_engine_memory) {
      try {
        engine_model = model::ModelConfig::load(o.model);
      } catch (const Error&) {
        engine_model.reset();  // a planner-only model shape: the planner's memory model
      }
    }
    if (engine_model)
      job.engine_memory = [&](const Layout& l) -> std::optional<MemoryEstimate> {
        try {
          const train::RunConfig c =
              engine_run_config(l,
                                {job.devices, job.seq_len, 0, job.global_batch,
                                 job.optimizer == Optimizer::kMuon, job.moment_bytes == 2},
                                *engine_model);
          return largest_rank_memory(train::account_state(c, *engine_model));
        } catch (const Error& e) {
          std::printf("engine accounting not used: %s\n", e.what());
          return std::nullopt;  // the planner's model then
        }
      };
    Estimate e = evaluate(model, cluster, job, layout);
    if (!e.valid) throw Error("layout cannot run: " + e.invalid_reason).field("--layout");
    std::cout << format_estimates({e});
    print_notes({e}, model, job, o);
    if (o.explain) std::cout << "\n" << explain(e, model, cluster, job);
    if (!o.json_out.empty()) write_file_atomic(o.json_out, estimate_json(e).dump(2) + "\n");
    return;
  }
  SearchOptions so;
  so.top_k = o.top;
  so.allow_fp8 = o.allow_fp8;
  so.allow_offload = !o.no_offload;
  so.fused_kernels = !o.unfused;
  so.topology_aware = !o.naive_placement;
  so.expert_rebalancing = o.rebalance;
  SearchResult r = search(model, cluster, job, so);
  std::printf("searched %lld layouts: %zu valid, %zu fit in %.0f GiB\n",
              static_cast<long long>(r.evaluated), r.candidates.size(),
              static_cast<size_t>(std::count_if(r.candidates.begin(), r.candidates.end(),
                                                [](const Estimate& e) { return e.memory.fits(); })),
              cluster.device.hbm_gib);
  if (r.best.empty()) {
    std::printf("no layout fits in device memory\n");
  } else {
    std::cout << format_estimates(r.best);
    print_notes(r.best, model, job, o);
    if (o.explain) std::cout << "\nbest layout:\n" << explain(r.best.front(), model, cluster, job);
    if (!o.compare_svg.empty()) {
      write_file_atomic(o.compare_svg,
                        side_by_side_svg(r.best, cluster.device.hbm_gib,
                                         model.name + " on " + std::to_string(o.devices) + " x " +
                                             cluster.device.name + ": the top layouts"));
      std::printf("wrote %s\n", o.compare_svg.c_str());
    }
  }
  if (!o.svg.empty()) {
    write_file_atomic(o.svg, candidates_svg(r, cluster,
                                            model.name + " on " + std::to_string(o.devices) +
                                                " x " + cluster.device.name));
    std::printf("wrote %s\n", o.svg.c_str());
  }
  if (!o.json_out.empty()) {
    nlohmann::json j = nlohmann::json::array();
    for (const Estimate& e : r.best) j.push_back(estimate_json(e));
    write_file_atomic(o.json_out, j.dump(2) + "\n");
  }
}

struct CalibrateOptions {
  std::string measurements, cluster, out, save_measurements;
  bool bf16 = false;
  int repeats = 5;
  double peak_tflops = 0, hbm_gbps = 0;
};

void run_calibrate(const CalibrateOptions& o) {
  std::vector<GemmMeasurement> ms;
  if (!o.measurements.empty()) {
    ms = read_measurements(o.measurements);
    std::printf("read %zu GEMM measurements from %s\n", ms.size(), o.measurements.c_str());
  } else {
    ms = measure_gemms(default_calibration_shapes(), o.bf16, o.repeats);
    std::printf("timed %zu GEMM shapes through kernels::gemm<float> (%s operands)\n", ms.size(),
                o.bf16 ? "bf16" : "fp32");
  }
  if (!o.save_measurements.empty())
    write_file_atomic(o.save_measurements, measurements_json(ms).dump(2) + "\n");
  GemmFit f = fit_gemm_curve(ms);
  std::printf("%8s %8s %8s %12s %12s %10s\n", "M", "N", "K", "measured us", "fitted us", "GFLOP/s");
  for (const GemmMeasurement& s : ms)
    std::printf("%8.0f %8.0f %8.0f %12.2f %12.2f %10.2f\n", s.m, s.n, s.k, s.seconds * 1e6,
                f.predict(s) * 1e6, 2 * s.m * s.n * s.k / s.seconds / 1e9);
  std::printf(
      "fit: t = max(2MNK / %.4g GFLOP/s, bytes / %.4g GB/s) + %.3g us   (rms log error %.3f)\n",
      f.flops_per_s / 1e9, f.bytes_per_s / 1e9, f.launch_s * 1e6, f.rms_log_error);
  double peak = o.peak_tflops, hbm = o.hbm_gbps;
  ClusterSpec cluster;
  if (!o.cluster.empty()) {
    cluster = ClusterSpec::load(o.cluster);
    if (peak <= 0) peak = cluster.device.bf16_tflops;
    if (hbm <= 0) hbm = cluster.device.hbm_gbps;
  }
  if (peak > 0 && hbm > 0) {
    const double max = std::min(1.0, f.flops_per_s / (peak * 1e12));
    const double memory = std::min(1.0, f.bytes_per_s / (hbm * 1e9));
    std::printf(
        "efficiency curve: max %.4f of %.4g TFLOP/s, memory %.4f of %.4g GB/s, launch %.3g "
        "us\n",
        max, peak, memory, hbm, f.launch_s * 1e6);
    if (!o.out.empty()) {
      if (o.cluster.empty())
        throw Error("--out needs --cluster (the spec to update)").field("--out");
      cluster.efficiency.gemm.max = std::max(max, 1e-3);
      cluster.efficiency.gemm.memory = std::max(memory, 1e-3);
      cluster.efficiency.gemm.launch_us = f.launch_s * 1e6;
      write_file_atomic(o.out, cluster.to_json().dump(2) + "\n");
      std::printf("wrote %s\n", o.out.c_str());
    }
  } else if (!o.out.empty()) {
    throw Error("--out needs --cluster or --peak-tflops and --hbm-gbps").field("--out");
  }
}

struct ExpertsOptions {
  std::string topology, cluster, load, out, generate, dtype = "bf16";
  int ep = 0;
  int64_t hidden = 7168;
  double tolerance = 0.1;
  bool per_layer = false;
  SkewedLoadSpec skew;
};

void run_experts(const ExpertsOptions& o) {
  RankTopology topology;
  if (!o.topology.empty()) {
    const RankTopology world = RankTopology::load(o.topology);
    std::string note;
    topology = first_ep_group(world, o.ep > 0 ? o.ep : world.ranks(), &note);
    if (!note.empty()) std::printf("note: %s\n", note.c_str());
  } else if (!o.cluster.empty()) {
    if (o.ep <= 0) throw Error("--cluster needs --ep (the EP group size)").field("--ep");
    // The cluster's scale-up domains (an NVLink node, a UB supernode) are the nodes.
    const ClusterSpec cluster = ClusterSpec::load(o.cluster);
    topology =
        RankTopology::uniform(o.ep, static_cast<int>(cluster.topology.scale_up_domain),
                              cluster.topology.scale_up_gbps, cluster.topology.scale_out_gbps);
  } else {
    throw Error("--topology (or --cluster with --ep) is required").field("--topology");
  }
  std::string load_path = o.load;
  if (!o.generate.empty()) {
    const ExpertLoad generated = generate_skewed_load(o.skew, topology);
    write_file_atomic(o.generate, skewed_load_file_text(generated, o.skew, topology));
    std::printf("wrote %s (skewed load: %d layers x %d experts, zipf %.3g, locality %.3g)\n",
                o.generate.c_str(), o.skew.layers, o.skew.experts, o.skew.zipf, o.skew.locality);
    if (load_path.empty()) load_path = o.generate;
  }
  if (load_path.empty()) throw Error("--load is required").field("--load");
  PlacementOptions options;
  options.tolerance = o.tolerance;
  const ExpertPlan plan = plan_expert_placement(ExpertLoad::load(load_path, topology.ranks()),
                                                topology, options, o.dtype, o.hidden, load_path);
  std::cout << format_expert_plan(plan, o.per_layer);
  if (!o.out.empty()) {
    write_file_atomic(o.out, expert_plan_json(plan).dump() + "\n");
    std::printf("wrote %s\n", o.out.c_str());
  }
}

}  // namespace

void add_plan_commands(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* plan =
      app.add_subcommand("plan", "Plan parallel layouts: memory, step time, MFU (docs/planner.md)");
  plan->add_option("--model", options->model,
                   "Model config JSON (deepseek_v4, deepseek_v3 or qwen3_moe)");
  plan->add_option("--cluster", options->cluster, "Cluster spec JSON (configs/clusters/)");
  plan->add_option("--devices", options->devices, "Number of devices (dies on Ascend)");
  plan->add_option("--global-batch", options->global_batch, "Sequences per step");
  plan->add_option("--seq", options->seq, "Sequence length");
  plan->add_option("--top", options->top, "How many layouts to print")->capture_default_str();
  plan->add_flag("--explain", options->explain, "Memory and time breakdown of the best layout");
  plan->add_option("--svg", options->svg, "Write an SVG of all candidates");
  plan->add_option("--json", options->json_out, "Write the best layouts as JSON");
  plan->add_option(
      "--layout", options->layout,
      "Evaluate one layout instead of searching, e.g. "
      "tp2,pp8,vpp4,ep64,interleaved,selective,zero1,offload,no-overlap,fp8 "
      "(switches: no-ep-overlap, unfused, naive, rebalance, fp8-attention, bf16-dispatch, "
      "no-edge-overlap, cuda-graphs; docs/planner.md)");
  plan->add_flag("--no-engine-memory", options->no_engine_memory,
                 "With --layout: the planner's memory model even for a layout trex train runs "
                 "(default: the engine's own accounting, as trex model memory)");
  plan->add_option("--optimizer", options->optimizer, "adamw or muon")->capture_default_str();
  plan->add_option("--moment-dtype", options->moment_dtype,
                   "Optimizer moments: f32, or bf16 (DeepSeek-V3); the fp32 master stays")
      ->capture_default_str();
  plan->add_option("--expert-weights", options->expert_weights,
                   "Routed-expert weights held on the device: bf16, fp8 (128x128 block scales), "
                   "mxfp8 or mxfp4 (scales per 32)")
      ->capture_default_str();
  plan->add_flag("--allow-fp8", options->allow_fp8, "Let the search use FP8 GEMMs");
  plan->add_option("--expert-imbalance", options->imbalance,
                   "Max/mean tokens per EP rank before rebalancing")
      ->capture_default_str();
  plan->add_option("--goodput", options->goodput,
                   "Share of wall-clock time in steady-state steps (1: per-step figures; "
                   "0.9: whole-run GPU-hour accounting)")
      ->capture_default_str();
  JobQuestions& q = options->questions;
  plan->add_option("--tokens", q.tokens, "Token budget: steps, wall-clock hours, device-hours");
  plan->add_option("--price", q.price_per_device_hour, "Cost per device-hour (with --tokens)");
  plan->add_option("--storage-gbps", q.storage_gbps,
                   "Aggregate checkpoint storage bandwidth, GB/s (save/load time)");
  plan->add_option("--mtbf-hours", q.mtbf_hours,
                   "Mean time between job-stopping failures: goodput from failures, checkpoints "
                   "and restarts (replaces --goodput for the wall clock)");
  plan->add_option("--restart-minutes", q.restart_minutes, "Relaunch + reload after a failure")
      ->capture_default_str();
  plan->add_option("--checkpoint-minutes", q.checkpoint_minutes,
                   "Checkpoint interval (default: the Young/Daly optimum)");
  plan->add_option("--sft-lengths", options->sft_lengths,
                   "SFT samples' token counts, one per line: the share of sample tokens in "
                   "packed rows (trex train's packing) and per row; --tokens then counts "
                   "sample tokens");
  plan->add_flag("--compare", options->compare,
                 "Memory and time of the listed layouts side by side");
  plan->add_option("--compare-svg", options->compare_svg,
                   "Write the top layouts' time and memory as stacked bars (SVG)");
  plan->add_option("--root", options->root,
                   "Repository root: the validation points behind the MFU band and the "
                   "validated-region warnings")
      ->capture_default_str();
  plan->add_flag("--rebalance", options->rebalance, "Expert migration / hot-expert placement");
  plan->add_flag("--no-offload", options->no_offload, "Never swap optimizer states to host");
  plan->add_flag("--unfused", options->unfused, "Search with unfused (generic) kernels");
  plan->add_flag("--naive-placement", options->naive_placement,
                 "Collectives use node-level links only (no supernode-aware placement)");

  auto cal = std::make_shared<CalibrateOptions>();
  CLI::App* calibrate =
      plan->add_subcommand("calibrate", "Fit the GEMM efficiency curve from timings");
  calibrate->add_option("--measurements", cal->measurements,
                        "JSON of measured GEMMs (default: time kernels::gemm here)");
  calibrate->add_flag("--bf16", cal->bf16, "Time with bf16 operands");
  calibrate->add_option("--repeats", cal->repeats, "Timed batches per shape")
      ->capture_default_str();
  calibrate->add_option("--cluster", cal->cluster, "Cluster spec whose peak/HBM the fit refers to");
  calibrate->add_option("--peak-tflops", cal->peak_tflops, "Peak to express the fit against");
  calibrate->add_option("--hbm-gbps", cal->hbm_gbps, "Memory bandwidth to express the fit against");
  calibrate->add_option("--out", cal->out, "Write the cluster spec with the fitted GEMM curve");
  calibrate->add_option("--save-measurements", cal->save_measurements,
                        "Write the timings as a measurements JSON");
  calibrate->callback([cal] { run_calibrate(*cal); });

  auto root = std::make_shared<std::string>(".");
  CLI::App* validate =
      plan->add_subcommand("validate", "Validation against published runs and the V4-Pro ablation");
  validate->add_option("--root", *root, "Repository root (for configs/)")->capture_default_str();
  validate->callback([root] {
    const std::vector<ValidationRow> rows = run_validation(*root);
    std::cout << format_validation(rows) << "\nAssumptions varied:\n"
              << format_sensitivity(run_sensitivity(*root))
              << "\nCluster-file assumptions varied (x0.8 and x1.2):\n"
              << format_assumption_sensitivity(run_assumption_sensitivity(*root))
              << "\nV4-Pro ablation:\n"
              << format_ablation(run_ablation(*root)) << "\nWhere each efficiency comes from:\n"
              << format_knob_sources(rows, *root);
  });

  auto ex = std::make_shared<ExpertsOptions>();
  CLI::App* experts = plan->add_subcommand(
      "experts",
      "Expert -> EP rank map minimising cross-node all-to-all traffic under balance "
      "(docs/expert-placement.md)");
  experts->add_option("--topology", ex->topology, "Topology JSON: ranks -> nodes, bandwidths");
  experts->add_option("--cluster", ex->cluster,
                      "Instead of --topology: a cluster spec (nodes = scale-up domains)");
  experts->add_option("--load", ex->load, "Expert-load profile JSON (per layer [rank][expert])");
  experts->add_option("--ep", ex->ep, "EP group size (default: every rank of the topology)");
  experts->add_option("--hidden", ex->hidden, "Hidden size (bytes per token = hidden x dtype)")
      ->capture_default_str();
  experts->add_option("--dtype", ex->dtype, "Dispatch/combine element type: bf16, fp16, fp32, fp8")
      ->capture_default_str();
  experts->add_option("--tolerance", ex->tolerance, "Max rank load <= (1 + tolerance) x mean")
      ->capture_default_str();
  experts->add_option("--out", ex->out, "Write the map JSON {\"layers\": [[owner of e0, ...]]}");
  experts->add_flag("--per-layer", ex->per_layer, "Print every layer");
  experts->add_option("--generate-load", ex->generate,
                      "Write a Zipf-like load profile with node locality here (then place it)");
  experts->add_option("--experts", ex->skew.experts, "Generated profile: experts")
      ->capture_default_str();
  experts->add_option("--layers", ex->skew.layers, "Generated profile: MoE layers")
      ->capture_default_str();
  experts->add_option("--top-k", ex->skew.top_k, "Generated profile: experts per token")
      ->capture_default_str();
  experts->add_option("--tokens", ex->skew.tokens_per_rank, "Generated profile: tokens per rank")
      ->capture_default_str();
  experts->add_option("--zipf", ex->skew.zipf, "Generated profile: popularity exponent")
      ->capture_default_str();
  experts
      ->add_option("--locality", ex->skew.locality,
                   "Generated profile: share routed to the node's preferred experts")
      ->capture_default_str();
  experts->add_option("--seed", ex->skew.seed, "Generated profile: seed")->capture_default_str();
  experts->callback([ex] { run_experts(*ex); });

  plan->callback([plan, calibrate, validate, experts, options] {
    if (plan->got_subcommand(calibrate) || plan->got_subcommand(validate) ||
        plan->got_subcommand(experts))
      return;
    run_plan(*options);
  });
}

}  // namespace trex::cli
