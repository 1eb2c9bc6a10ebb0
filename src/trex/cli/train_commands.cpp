// `[mpirun -np N] trex train --config RUN.json [--resume] [--steps N] [--out-dir D] [--dry-run
// [--json]]` and `trex export --checkpoint DIR --out DIR2 [--scheme transformers|released] [--dtype
// bf16|fp32]`.
#include <filesystem>
#include <iostream>

#include "trex/cli/commands.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/strings.hpp"
#include "trex/model/checkpoint_export.hpp"
#include "trex/model/weights.hpp"
#include "trex/rl/grpo.hpp"
#include "trex/train/data/sft.hpp"
#include "trex/train/parallel_setup.hpp"
#include "trex/train/state_accounting.hpp"
#include "trex/train/trainer.hpp"

namespace trex::cli {
namespace {

struct TrainCliOptions {
  std::string config;
  bool resume = false;
  int64_t steps = 0;
  std::string out_dir;
  double peak_gflops = -1;
  bool quiet = false;
  bool dry_run = false;
  bool json = false;
};

int run_train(const TrainCliOptions& o) {
  train::RunConfig config = train::RunConfig::load(o.config);
  if (o.steps > 0) config.steps = o.steps;
  if (!o.out_dir.empty()) config.out_dir = o.out_dir;
  if (o.peak_gflops >= 0) config.peak_gflops = o.peak_gflops;
  config.validate(o.config);
  if (o.dry_run) {
    // The run's per-rank state from its config alone: nothing is allocated,
    // no data read, no process launched (any grid size).
    const train::StateAccount account =
        train::account_state(config, train::run_model_config(config));
    std::cout << (o.json ? train::state_account_json(account, config)
                         : train::format_state_account(account, config));
    return 0;
  }
  // The loaders read the training JSONL leniently unless data.strict is set.
  train::set_default_data_strict(config.data_strict);
  train::TrainerOptions options;
  options.resume = o.resume;
  options.quiet = o.quiet;
  if (config.mode == train::DataMode::kGrpo) {
    // Policy optimisation with the solver reward (docs/rl.md).
    rl::GrpoOptions grpo;
    grpo.trainer = options;
    const rl::GrpoSummary summary = rl::run_grpo(config, grpo);
    if (parallel::world()->rank() == 0) std::cout << rl::format_grpo_summary(summary);
    return 0;
  }
  // Under mpirun every rank runs this; the grid comes from parallel::world() and
  // only world rank 0 prints, logs and writes (docs/distributed.md).
  train::Trainer trainer(config, options);
  if (trainer.is_root())
    std::cerr << "training " << trainer.total_steps() << " steps"
              << (o.resume ? " (resumed at step " + std::to_string(trainer.step()) + ")" : "")
              << " into " << config.out_dir << " on "
              << trainer.grid().shape().to_string() + " = " +
                     std::to_string(trainer.grid().shape().size()) + " rank(s)"
              << "\n";
  const train::TrainSummary summary = trainer.run();
  if (trainer.is_root()) std::cout << train::format_summary(summary);
  // Completed, but some training records were skipped (logged with file:line).
  const JsonlStats input = train::data_input_totals();
  if (input.skipped > 0) {
    if (trainer.is_root())
      std::cerr << "trex: warning: training data: " << input.skipped
                << " lines skipped (data.strict = false)\n";
    return kExitRecordsSkipped;
  }
  return 0;
}

struct ExportOptions {
  std::string checkpoint;
  std::string out;
  std::string scheme = "transformers";
  std::string dtype = "bf16";
  double max_shard_gib = 5.0;
};

int run_export(const ExportOptions& o) {
  if (o.scheme != "transformers" && o.scheme != "released")
    throw Error("--scheme must be transformers or released").field("scheme");
  if (o.dtype != "bf16" && o.dtype != "fp32")
    throw Error("--dtype must be bf16 or fp32").field("dtype");
  namespace fs = std::filesystem;
  if (fs::weakly_canonical(o.checkpoint) == fs::weakly_canonical(o.out))
    throw Error("--out must differ from --checkpoint").field("out");
  if (!(o.max_shard_gib > 0)) throw Error("--max-shard-gib must be > 0").field("max-shard-gib");
  // Streamed tensor by tensor: the model is never held whole.
  const model::ExportSummary summary = model::export_checkpoint(
      o.checkpoint, o.out,
      o.scheme == "transformers" ? model::NamingScheme::kTransformers
                                 : model::NamingScheme::kReleased,
      o.dtype == "bf16" ? DType::kBF16 : DType::kF32,
      static_cast<size_t>(o.max_shard_gib * static_cast<double>(1ull << 30)));
  const fs::path tokenizer = fs::path(o.checkpoint) / "tokenizer.json";
  if (fs::exists(tokenizer))
    fs::copy_file(tokenizer, fs::path(o.out) / "tokenizer.json",
                  fs::copy_options::overwrite_existing);
  std::cout << "exported " << o.checkpoint << " -> " << o.out << " (" << o.scheme << " names, "
            << o.dtype << (fs::exists(tokenizer) ? ", with tokenizer.json" : ", no tokenizer.json")
            << "): " << summary.tensors << " tensors, " << summary.values << " values in "
            << summary.files << (summary.files == 1 ? " file" : " files")
            << "; largest buffer held "
            << format_fixed(static_cast<double>(summary.largest_held) / (1 << 20), 1) << " MiB\n";
  return 0;
}

}  // namespace

void add_train_commands(CLI::App& app) {
  auto train = std::make_shared<TrainCliOptions>();
  auto* t = app.add_subcommand("train", "Full-parameter CPT or SFT of a DeepSeek-V4 model");
  t->add_option("--config", train->config, "Run configuration (.json or .toml, docs/training.md)")
      ->required();
  t->add_flag("--resume", train->resume, "Continue from OUT/checkpoints/latest");
  t->add_option("--steps", train->steps, "Override the number of optimizer steps");
  t->add_option("--out-dir", train->out_dir, "Override the output directory");
  t->add_option("--peak-gflops", train->peak_gflops,
                "MFU denominator (GFLOP/s); default: the config's, else measured at start");
  t->add_flag("--quiet", train->quiet, "No progress bar or log lines, only the summary");
  t->add_flag("--dry-run", train->dry_run,
              "Print each rank's parameter, gradient, optimizer-state, activation and buffer "
              "bytes for the config's [parallel] layout (any number of ranks) without training");
  t->add_flag("--json", train->json, "With --dry-run: print JSON (as `trex model memory --json`)");
  t->callback([train] {
    const int rc = run_train(*train);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });

  auto exp = std::make_shared<ExportOptions>();
  auto* e = app.add_subcommand("export", "Write a checkpoint in the HF (transformers) format");
  e->add_option("--checkpoint", exp->checkpoint, "Checkpoint directory (e.g. a training step)")
      ->required();
  e->add_option("--out", exp->out, "Output directory")->required();
  e->add_option("--scheme", exp->scheme, "transformers or released tensor names")
      ->capture_default_str();
  e->add_option("--dtype", exp->dtype, "bf16 or fp32 floating tensors")->capture_default_str();
  e->add_option("--max-shard-gib", exp->max_shard_gib,
                "Largest weight file (GiB); more tensors go to further files with an index")
      ->capture_default_str();
  e->callback([exp] {
    const int rc = run_export(*exp);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace trex::cli
