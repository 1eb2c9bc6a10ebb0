// `trex model info`: a DeepSeek-V4 config's layer schedule, parameter counts
// (model-card conventions) and training FLOPs per token (Megatron-Bridge
// convention); `trex model convert-config`: the same config in the other key
// scheme. See docs/deepseek-v4.md.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "trex/cli/commands.hpp"
#include "trex/cli/engine_memory.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/model/config.hpp"
#include "trex/model/flops.hpp"
#include "trex/model/param_counts.hpp"
#include "trex/plan/planner.hpp"
#include "trex/train/state_accounting.hpp"

namespace trex::cli {

namespace {

using json = nlohmann::json;
using model::ModelConfig;
using model::ParamBreakdown;

// The model card's rounding: "284B", "13B", "1.6T"; smaller models in M / K.
std::string short_count(double n) {
  char buf[32];
  if (n >= 1e12) {
    std::snprintf(buf, sizeof buf, "%.1fT", n / 1e12);
  } else if (n >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.0fB", n / 1e9);
  } else if (n >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
  }
  return buf;
}

// Four significant digits with a unit: 284.3B, 13.27B, 1.573T, 1.693M.
std::string precise_count(double n) {
  if (n == 0) return "0";
  const char* unit = "";
  double scaled = n;
  if (n >= 1e12) {
    unit = "T", scaled = n / 1e12;
  } else if (n >= 1e9) {
    unit = "B", scaled = n / 1e9;
  } else if (n >= 1e6) {
    unit = "M", scaled = n / 1e6;
  } else if (n >= 1e3) {
    unit = "K", scaled = n / 1e3;
  }
  int decimals = scaled >= 100 ? 1 : scaled >= 10 ? 2 : 3;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f%s", decimals, scaled, unit);
  return buf;
}

std::string gflops(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", f / 1e9);
  return buf;
}

json breakdown_json(const ParamBreakdown& p) {
  return {{"attention", p.attention},
          {"compressors_indexers", p.compressors},
          {"routed_experts", p.routed_experts},
          {"shared_experts", p.shared_experts},
          {"router", p.router},
          {"mhc", p.mhc},
          {"embed", p.embed},
          {"head", p.head},
          {"norms", p.norms},
          {"mtp_projections", p.mtp_projections},
          {"total", p.total()}};
}

std::string kind_name(const ModelConfig& c, int64_t layer) {
  switch (c.attention_kind(layer)) {
    case model::AttentionKind::kSliding:
      return "SWA";
    case model::AttentionKind::kCompressedSparse:
      return "CSA";
    case model::AttentionKind::kHeavilyCompressed:
      return "HCA" + std::to_string(c.ratio(layer));
  }
  return "?";
}

struct InfoOptions {
  std::string config;
  int64_t seq = 4096;
  bool as_json = false;
};

void run_info(const InfoOptions& o) {
  require(o.seq > 0, "--seq must be > 0, got " + std::to_string(o.seq));
  ModelConfig c = ModelConfig::load(o.config);
  model::ParamCounts counts = model::count_parameters(c);
  const int64_t mtp = c.num_nextn_predict_layers;
  model::FlopsBreakdown f = model::flops_per_token(c, o.seq, mtp);

  int64_t swa = 0, csa = 0, hca = 0;
  std::string schedule;
  for (int64_t l = 0; l < c.total_layers(); ++l) {
    auto kind = c.attention_kind(l);
    if (l < c.num_hidden_layers) {
      swa += kind == model::AttentionKind::kSliding;
      csa += kind == model::AttentionKind::kCompressedSparse;
      hca += kind == model::AttentionKind::kHeavilyCompressed;
    }
    if (!schedule.empty()) schedule += ' ';
    if (l == c.num_hidden_layers) schedule += "| MTP: ";
    schedule += kind_name(c, l) + (c.is_hash_layer(l) ? "+hash" : "");
  }

  if (o.as_json) {
    json layers = json::array();
    for (int64_t l = 0; l < c.total_layers(); ++l) {
      layers.push_back({{"layer", l},
                        {"mtp", l >= c.num_hidden_layers},
                        {"attention", kind_name(c, l)},
                        {"ratio", c.ratio(l)},
                        {"hash_routed", c.is_hash_layer(l)}});
    }
    json out = {{"config", o.config},
                {"key_scheme", c.transformers_scheme ? "transformers" : "released"},
                {"layers", layers},
                {"params",
                 {{"total", counts.total()},
                  {"activated", counts.activated()},
                  {"mtp", counts.mtp_total()},
                  {"total_rounded", short_count(static_cast<double>(counts.total()))},
                  {"activated_rounded", short_count(static_cast<double>(counts.activated()))},
                  {"main", breakdown_json(counts.main)},
                  {"main_activated", breakdown_json(counts.main_activated)},
                  {"mtp_breakdown", breakdown_json(counts.mtp)}}},
                {"flops_per_token",
                 {{"seq_len", o.seq},
                  {"mtp_layers_counted", mtp},
                  {"convention", "Megatron-Bridge dsv4_hybrid, training (3 x forward)"},
                  {"projections", f.projections},
                  {"attention_swa", f.attention_swa},
                  {"attention_csa", f.attention_csa},
                  {"attention_hca", f.attention_hca},
                  {"compressor", f.compressor},
                  {"indexer", f.indexer},
                  {"routed_experts", f.routed_experts},
                  {"shared_experts", f.shared_experts},
                  {"mtp", f.mtp},
                  {"lm_head", f.lm_head},
                  {"total", f.total()},
                  {"six_n_active", f.six_n_active}}}};
    std::cout << out.dump(2) << "\n";
    return;
  }

  std::cout << "config        " << o.config << " ("
            << (c.transformers_scheme ? "transformers" : "released") << " key scheme)\n";
  std::cout << "shape         d=" << c.hidden_size << ", " << c.num_hidden_layers << " layers + "
            << mtp << " MTP, " << c.num_attention_heads << " heads x " << c.head_dim << " (rope "
            << c.qk_rope_head_dim << "), q_lora " << c.q_lora_rank << ", o " << c.o_groups << "x"
            << c.o_lora_rank << ", window " << c.sliding_window << ", vocab " << c.vocab_size
            << "\n";
  std::cout << "experts       " << c.n_routed_experts << " routed (top-" << c.num_experts_per_tok
            << ", " << c.scoring_func << ") + " << c.n_shared_experts << " shared, width "
            << c.moe_intermediate_size << "; "
            << (c.num_hash_layers > 0
                    ? "hash-routed layers 0.." + std::to_string(c.num_hash_layers - 1)
                    : std::string("no hash-routed layers"))
            << "\n";
  std::cout << "attention     " << swa << " SWA, " << csa << " CSA (indexer " << c.index_n_heads
            << "x" << c.index_head_dim << " top-" << c.index_topk << "), " << hca << " HCA; mHC x"
            << c.hc_mult << "\n";
  std::cout << "schedule      " << schedule << "\n\n";

  const double total = static_cast<double>(counts.total());
  const double active = static_cast<double>(counts.activated());
  std::cout << "parameters    total " << short_count(total) << " (" << precise_count(total) << ", "
            << counts.total() << "), activated/token " << short_count(active) << " ("
            << precise_count(active) << ", " << counts.activated() << "), MTP +"
            << precise_count(static_cast<double>(counts.mtp_total())) << " (excluded from total)\n";
  std::printf("  %-22s %14s %14s %14s\n", "group", "total", "activated", "MTP");
  auto row = [&](const char* name, int64_t ParamBreakdown::*member) {
    std::printf("  %-22s %14s %14s %14s\n", name,
                precise_count(static_cast<double>(counts.main.*member)).c_str(),
                precise_count(static_cast<double>(counts.main_activated.*member)).c_str(),
                precise_count(static_cast<double>(counts.mtp.*member)).c_str());
  };
  row("attention", &ParamBreakdown::attention);
  row("compressors/indexers", &ParamBreakdown::compressors);
  row("routed experts", &ParamBreakdown::routed_experts);
  row("shared experts", &ParamBreakdown::shared_experts);
  row("router", &ParamBreakdown::router);
  row("mHC", &ParamBreakdown::mhc);
  row("embed", &ParamBreakdown::embed);
  row("head", &ParamBreakdown::head);
  row("norms", &ParamBreakdown::norms);
  row("MTP e/h proj", &ParamBreakdown::mtp_projections);

  std::cout << "\nFLOPs/token   " << gflops(f.total()) << " GFLOP at seq " << o.seq << " with "
            << mtp << " MTP layer(s) (Megatron-Bridge convention, fwd+bwd); 6*N_active = "
            << gflops(f.six_n_active) << " GFLOP\n";
  auto frow = [&](const char* name, double v) {
    std::printf("  %-22s %10s GFLOP  %5.1f%%\n", name, gflops(v).c_str(), 100.0 * v / f.total());
  };
  frow("projections", f.projections);
  frow("attention SWA", f.attention_swa);
  frow("attention CSA", f.attention_csa);
  frow("attention HCA", f.attention_hca);
  frow("compressors", f.compressor);
  frow("indexers", f.indexer);
  frow("routed experts", f.routed_experts);
  frow("shared experts", f.shared_experts);
  frow("MTP block", f.mtp);
  frow("LM head", f.lm_head);
}

struct ConvertOptions {
  std::string config;
  std::string scheme;
  std::string out;
};

// Rewrites a config in the other key scheme, e.g. for the transformers port,
// which maps released compress_ratios only for the values 0, 4 and 128.
void run_convert(const ConvertOptions& o) {
  ModelConfig c = ModelConfig::load(o.config);
  c.transformers_scheme = o.scheme == "transformers";
  std::string text = c.to_json().dump(2) + "\n";
  if (o.out.empty()) {
    std::cout << text;
  } else {
    write_file_atomic(o.out, text);
  }
}

struct MemoryOptions {
  std::string model;
  int64_t devices = 1;
  std::string layout = "pp1";
  int64_t seq = 4096;
  int64_t micro_batch = 0;   // 0: the layout's mbs
  int64_t global_batch = 0;  // 0: enough micro-batches to fill the pipeline
  std::string optimizer = "muon";
  std::string moments = "fp32";
  std::string params = "fp32";
  bool as_json = false;
};

void run_memory(const MemoryOptions& o) {
  const model::ModelConfig m = model::ModelConfig::load(o.model);
  const train::RunConfig c =
      engine_run_config(plan::parse_layout(o.layout),
                        {o.devices, o.seq, o.micro_batch, o.global_batch, o.optimizer == "muon",
                         o.moments == "bf16", o.params == "bf16"},
                        m);
  const train::StateAccount account = train::account_state(c, m);
  if (o.as_json) {
    std::cout << train::state_account_json(account, c);
    return;
  }
  std::cout << train::format_state_account(account, c);
}

}  // namespace

void add_model_commands(CLI::App& app) {
  auto* model = app.add_subcommand("model", "DeepSeek-V4 model tools");
  model->require_subcommand(1);
  auto options = std::make_shared<InfoOptions>();
  auto* info =
      model->add_subcommand("info", "Layer schedule, parameter counts and FLOPs/token of a config");
  info->add_option("--config", options->config,
                   "Model config.json (released or transformers key scheme)")
      ->required();
  info->add_option("--seq", options->seq, "Sequence length for FLOPs/token")->capture_default_str();
  info->add_flag("--json", options->as_json, "Print JSON instead of text");
  info->callback([options] { run_info(*options); });

  auto convert_options = std::make_shared<ConvertOptions>();
  auto* convert = model->add_subcommand(
      "convert-config", "Write a config in the released or transformers key scheme");
  convert->add_option("--config", convert_options->config, "Model config.json (either scheme)")
      ->required();
  convert->add_option("--scheme", convert_options->scheme, "Key scheme to write")
      ->required()
      ->check(CLI::IsMember({"released", "transformers"}));
  convert->add_option("--out", convert_options->out, "Output file (default: stdout)");
  convert->callback([convert_options] { run_convert(*convert_options); });

  auto memory_options = std::make_shared<MemoryOptions>();
  auto* memory = model->add_subcommand(
      "memory",
      "Bytes per rank of a layout `trex train` can run: parameters, gradients, optimizer "
      "moments, communication buffers, peak activations (no tensor is allocated)");
  memory->add_option("--model", memory_options->model, "Model config.json")->required();
  memory->add_option("--devices", memory_options->devices, "Ranks (dp x ep x pp)")->required();
  memory
      ->add_option("--layout", memory_options->layout,
                   "Layout as `trex plan --layout` takes it, e.g. pp4,ep64,zero1,full,dualpipev")
      ->capture_default_str();
  memory->add_option("--seq", memory_options->seq, "Sequence length")->capture_default_str();
  memory->add_option("--micro-batch", memory_options->micro_batch,
                     "Sequences per micro-batch (default: the layout's mbs, 1)");
  memory->add_option("--global-batch", memory_options->global_batch,
                     "Sequences per step (default: enough micro-batches to fill the pipeline)");
  memory->add_option("--optimizer", memory_options->optimizer, "Matrix optimizer")
      ->check(CLI::IsMember({"adamw", "muon"}))
      ->capture_default_str();
  memory->add_option("--moments", memory_options->moments, "Optimizer moment dtype")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  memory
      ->add_option("--param-dtype", memory_options->params,
                   "Parameter dtype of the run (param_dtype): bf16 adds fp32 master weights in "
                   "the optimizer's ranges")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  memory->add_flag("--json", memory_options->as_json, "Print JSON instead of the table");
  memory->callback([memory_options] { run_memory(*memory_options); });
}

}  // namespace trex::cli
