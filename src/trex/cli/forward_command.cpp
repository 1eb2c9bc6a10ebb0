// `trex forward`: one fp32 forward (and optionally backward) of a DeepSeek-V4
// checkpoint on given tokens; writes logits, losses and every parameter
// gradient under the checkpoint's own tensor names. The public parity interface.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "trex/cli/commands.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/io/safetensors.hpp"
#include "trex/kernels/precision.hpp"
#include "trex/model/model.hpp"

namespace trex::cli {
namespace {

struct ForwardOptions {
  std::string checkpoint;
  std::string config;
  uint64_t seed = 1;
  std::string tokens;
  std::string targets;
  std::string out;
  bool grads = false;
  double mtp_weight = 0.3;
  double balance_weight = 0.0;
  bool indexer_loss = false;
  std::string precision = "f32";
  int repeat = 1;
};

// [[ids], [ids]] (equal lengths) -> (B, S, flat).
void parse_matrix(const nlohmann::json& j, const std::string& file, const std::string& field,
                  int64_t& B, int64_t& S, std::vector<int64_t>& flat) {
  if (!j.is_array() || j.empty())
    throw Error("expected a non-empty array of token-id rows").file(file).field(field);
  const bool nested = j[0].is_array();
  const nlohmann::json rows = nested ? j : nlohmann::json::array({j});
  B = static_cast<int64_t>(rows.size());
  S = -1;
  flat.clear();
  for (size_t b = 0; b < rows.size(); ++b) {
    if (!rows[b].is_array())
      throw Error("row " + std::to_string(b) + " is not an array").file(file).field(field);
    if (S < 0) S = static_cast<int64_t>(rows[b].size());
    if (static_cast<int64_t>(rows[b].size()) != S)
      throw Error("row " + std::to_string(b) + " has " + std::to_string(rows[b].size()) +
                  " ids, row 0 has " + std::to_string(S) + "; all rows must have the same length")
          .file(file)
          .field(field);
    for (const auto& v : rows[b]) {
      if (!v.is_number_integer()) throw Error("token ids must be integers").file(file).field(field);
      flat.push_back(v.get<int64_t>());
    }
  }
  if (S <= 0) throw Error("empty token rows").file(file).field(field);
}

model::Batch read_batch(const ForwardOptions& o) {
  model::Batch batch;
  const std::string ext = std::filesystem::path(o.tokens).extension().string();
  if (ext == ".safetensors") {
    const CheckpointReader reader = CheckpointReader::open(o.tokens);
    const TensorView& ids = reader.get("input_ids");
    if (ids.shape.size() != 2)
      throw Error("input_ids must be [B, S]").file(o.tokens).field("input_ids");
    batch.B = ids.shape[0];
    batch.S = ids.shape[1];
    batch.input_ids = reader.read_i64("input_ids");
    if (reader.contains("labels")) batch.labels = reader.read_i64("labels");
  } else {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(o.tokens));
    } catch (const nlohmann::json::parse_error& e) {
      throw Error(std::string("invalid JSON: ") + e.what()).file(o.tokens);
    }
    if (j.is_object()) {
      if (!j.contains("input_ids")) throw Error("missing key").file(o.tokens).field("input_ids");
      parse_matrix(j["input_ids"], o.tokens, "input_ids", batch.B, batch.S, batch.input_ids);
      if (j.contains("labels")) {
        int64_t B2 = 0, S2 = 0;
        parse_matrix(j["labels"], o.tokens, "labels", B2, S2, batch.labels);
        if (B2 != batch.B || S2 != batch.S)
          throw Error("labels shape differs from input_ids").file(o.tokens).field("labels");
      }
    } else {
      parse_matrix(j, o.tokens, "input_ids", batch.B, batch.S, batch.input_ids);
    }
  }
  if (!o.targets.empty()) {
    nlohmann::json j = nlohmann::json::parse(read_file(o.targets), nullptr, false);
    if (j.is_discarded()) throw Error("invalid JSON").file(o.targets);
    int64_t B2 = 0, S2 = 0;
    parse_matrix(j.is_object() && j.contains("labels") ? j["labels"] : j, o.targets, "labels", B2,
                 S2, batch.labels);
    if (B2 != batch.B || S2 != batch.S)
      throw Error("targets shape [" + std::to_string(B2) + ", " + std::to_string(S2) +
                  "] differs from tokens [" + std::to_string(batch.B) + ", " +
                  std::to_string(batch.S) + "]")
          .file(o.targets);
  }
  return batch;
}

int run_forward(const ForwardOptions& o) {
  if (o.checkpoint.empty() == o.config.empty())
    throw Error("give exactly one of --checkpoint DIR or --config FILE");
  if (o.precision != "f32" && o.precision != "bf16")
    throw Error("--precision must be f32 or bf16").field("precision");
  model::NamingScheme scheme = model::NamingScheme::kReleased;
  model::Model<float> m = o.checkpoint.empty()
                              ? model::Model<float>(model::ModelConfig::load(o.config))
                              : model::Model<float>::from_checkpoint(o.checkpoint, &scheme);
  if (!o.config.empty()) m.init_random(o.seed);
  const model::Batch batch = read_batch(o);
  m.set_compute_precision(o.precision == "bf16" ? kernels::Precision::kBF16
                                                : kernels::Precision::kF32);
  const model::ModelConfig& c = m.config();
  const int64_t N = batch.B * batch.S, V = c.vocab_size;
  const bool has_mtp = c.num_nextn_predict_layers > 0 && batch.S >= 2;
  std::vector<float> logits(static_cast<size_t>(N * V));
  std::vector<float> mtp_logits(has_mtp ? static_cast<size_t>(batch.B * (batch.S - 1) * V) : 0);
  model::LossOptions loss;
  loss.mtp_weight = o.mtp_weight;
  loss.balance_loss_weight = o.balance_weight;
  loss.indexer_loss = o.indexer_loss;
  model::StepOptions step;
  step.backward = o.grads;
  std::vector<double> times;
  model::LossBreakdown result;
  for (int r = 0; r < std::max(1, o.repeat); ++r) {
    m.params().zero_grads();
    const auto start = std::chrono::steady_clock::now();
    result =
        m.forward_backward(batch, loss, step, logits.data(), has_mtp ? mtp_logits.data() : nullptr);
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];

  if (!o.out.empty()) {
    std::vector<TensorToWrite> writes;
    const float loss_total = static_cast<float>(result.total),
                loss_lm = static_cast<float>(result.lm), loss_mtp = static_cast<float>(result.mtp),
                loss_bal = static_cast<float>(result.balance);
    writes.push_back({"logits",
                      DType::kF32,
                      {batch.B, batch.S, V},
                      logits.data(),
                      logits.size() * sizeof(float)});
    if (has_mtp)
      writes.push_back({"mtp_logits",
                        DType::kF32,
                        {batch.B, batch.S - 1, V},
                        mtp_logits.data(),
                        mtp_logits.size() * sizeof(float)});
    writes.push_back({"loss", DType::kF32, {1}, &loss_total, sizeof(float)});
    writes.push_back({"loss_lm", DType::kF32, {1}, &loss_lm, sizeof(float)});
    writes.push_back({"loss_mtp", DType::kF32, {1}, &loss_mtp, sizeof(float)});
    writes.push_back({"loss_balance", DType::kF32, {1}, &loss_bal, sizeof(float)});
    std::vector<model::NamedTensor> grads;
    if (o.grads) grads = model::export_tensors(c, m.params(), true, scheme, nullptr, "grad.");
    for (const auto& g : grads)
      writes.push_back({g.name, DType::kF32, g.shape, g.f32.data(), g.f32.size() * sizeof(float)});
    ensure_parent_dir(o.out);
    write_safetensors(o.out, writes,
                      {{"naming_scheme", model::naming_scheme_name(scheme)},
                       {"mtp_weight", std::to_string(o.mtp_weight)},
                       {"precision", o.precision}});
  }
  nlohmann::json summary = {{"loss", result.total},
                            {"loss_lm", result.lm},
                            {"loss_mtp", result.mtp},
                            {"loss_balance", result.balance},
                            {"lm_tokens", result.lm_tokens},
                            {"mtp_tokens", result.mtp_tokens},
                            {"batch", batch.B},
                            {"seq", batch.S},
                            {"precision", o.precision},
                            {"backward", o.grads},
                            {"naming_scheme", model::naming_scheme_name(scheme)},
                            {"median_seconds", median},
                            {"repeats", times.size()}};
  std::cout << summary.dump() << "\n";
  return 0;
}

}  // namespace

void add_forward_command(CLI::App& app) {
  auto options = std::make_shared<ForwardOptions>();
  auto* cmd = app.add_subcommand("forward",
                                 "One fp32 forward (+ backward with --grads) of a V4 model; writes "
                                 "logits, losses and gradients");
  cmd->add_option("--checkpoint", options->checkpoint,
                  "Checkpoint directory (config.json + safetensors)");
  cmd->add_option("--config", options->config,
                  "Model config.json to run with random init instead of a checkpoint");
  cmd->add_option("--seed", options->seed, "Random-init seed with --config")->capture_default_str();
  cmd->add_option("--tokens", options->tokens,
                  "Token ids: JSON [[ids..],..] or {\"input_ids\": .., \"labels\": ..}, or a "
                  ".safetensors with "
                  "input_ids [B,S] (and labels)")
      ->required();
  cmd->add_option("--targets", options->targets,
                  "Labels JSON (HF convention: unshifted, -100 = masked); default: the input ids");
  cmd->add_option("--out", options->out,
                  "Output .safetensors (logits, mtp_logits, losses, grad.<name>)");
  cmd->add_flag("--grads", options->grads, "Run the backward and write every parameter gradient");
  cmd->add_option("--mtp-weight", options->mtp_weight, "λ of the MTP loss")->capture_default_str();
  cmd->add_option("--balance-weight", options->balance_weight,
                  "α of the sequence-wise balance loss")
      ->capture_default_str();
  cmd->add_flag("--indexer-loss", options->indexer_loss, "Add the CSA indexer KL loss");
  cmd->add_option("--precision", options->precision,
                  "GEMM precision: f32 or bf16 (fp32 accumulation)")
      ->capture_default_str();
  cmd->add_option("--repeat", options->repeat, "Run N times and report the median time")
      ->capture_default_str();
  cmd->callback([options] {
    const int rc = run_forward(*options);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace trex::cli
