#include "trex/demo/demo.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <optional>
#include <set>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/log.hpp"
#include "trex/core/rng.hpp"
#include "trex/core/strings.hpp"
#include "trex/demo/demo_report.hpp"
#include "trex/infer/generate.hpp"
#include "trex/io/tokenizer.hpp"
#include "trex/kernels/cpu/gemm.hpp"
#include "trex/kernels/cpu/peak.hpp"
#include "trex/model/config.hpp"
#include "trex/model/param_counts.hpp"
#include "trex/or/eval/eval.hpp"
#include "trex/parallel/communicator.hpp"
#include "trex/rl/grpo.hpp"
#include "trex/train/checkpoint.hpp"
#include "trex/train/trainer.hpp"

namespace trex::demo {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::vector<std::string>& eval_splits() {
  static const std::vector<std::string> splits = {"test", "heldout_template", "heldout_family",
                                                  "public"};
  return splits;
}

// The processes of `mpirun -np N trex demo` (without mpirun: this process
// alone). Both training stages run data parallel over all of them, every
// generation splits its prompts into N blocks, and rank 0 alone builds the
// data, trains the tokenizer, grades, prints and writes the report. On two
// cores two 1-thread ranks do more work than one 2-thread process (small
// GEMMs and per-step work parallelise poorly over threads; docs/demo.md).
class DemoRanks {
 public:
  DemoRanks() : world_(parallel::world()) {}
  bool root() const { return world_->rank() == 0; }
  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }

  // Runs fn on every rank, then agrees on the outcome: when any rank failed,
  // every rank throws (the failing one its own error), so none is left
  // waiting in a later collective.
  template <class Fn>
  void all(const std::string& what, Fn&& fn) {
    std::exception_ptr failure;
    try {
      fn();
    } catch (...) {
      failure = std::current_exception();
    }
    int32_t failed = failure ? 1 : 0;
    if (size() > 1) world_->all_reduce(&failed, 1, parallel::DType::kI32, parallel::ReduceOp::kMax);
    if (failure) std::rethrow_exception(failure);
    if (failed != 0) throw Error(what + " failed on another rank (its error is printed above)");
  }
  // fn on rank 0 only; the others wait for it (and fail with it).
  template <class Fn>
  void on_root(const std::string& what, Fn&& fn) {
    all(what, [&] {
      if (root()) fn();
    });
  }
  double sum(double value) {
    if (size() > 1) world_->all_reduce(&value, 1, parallel::DType::kF64, parallel::ReduceOp::kSum);
    return value;
  }
  double max(double value) {
    if (size() > 1) world_->all_reduce(&value, 1, parallel::DType::kF64, parallel::ReduceOp::kMax);
    return value;
  }
  // Rank 0's decision, on every rank (a file check that must not race a write).
  bool root_decides(bool value) {
    int32_t v = value ? 1 : 0;
    if (size() > 1) world_->broadcast(&v, 1, parallel::DType::kI32, 0);
    return v != 0;
  }

 private:
  std::shared_ptr<parallel::Communicator> world_;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void say(const DemoOptions& o, const std::string& line) {
  if (!o.quiet) std::cout << line << std::endl;
}

// CPT validation documents in the corpus' question->model form, from sft_val.
void write_cpt_validation(const std::string& sft_val, const std::string& out) {
  std::string text;
  read_jsonl(sft_val, [&](const json& record, long line) {
    const json& messages = record.at("messages");
    if (!messages.is_array() || messages.size() != 2)
      throw Error("expected a user and an assistant message")
          .file(sft_val)
          .line(line)
          .field("messages");
    json doc = {{"text", messages[0].at("content").get<std::string>() + "\n\n" +
                             messages[1].at("content").get<std::string>()}};
    text += doc.dump() + "\n";
  });
  write_file_atomic(out, text);
}

// The copy warm-up's data: the CPT corpus's copy drills (meta.kind
// "copy_drill"), split by problem so that the warm-up's validation loss is
// measured on questions it never trained on: the problems with the smallest
// id hashes, 1 in 50 and at least one, validate. Returns the training drills.
int64_t write_copy_drill_files(const std::string& cpt_path, const std::string& train_out,
                               const std::string& val_out) {
  std::vector<std::pair<std::string, std::string>> drills;  // problem id, line
  read_jsonl(cpt_path, [&](const json& record, long line) {
    const auto meta = record.find("meta");
    if (meta == record.end() || !meta->is_object() || meta->value("kind", "") != "copy_drill")
      return;
    const auto id = meta->find("problem_id");
    if (id == meta->end() || !id->is_string())
      throw Error("a copy drill without its problem id")
          .file(cpt_path)
          .line(line)
          .field("meta.problem_id");
    drills.emplace_back(id->get<std::string>(), json{{"text", record.at("text")}}.dump());
  });
  std::vector<std::pair<uint64_t, std::string>> problems;
  for (const auto& [id, _] : drills) problems.emplace_back(hash_string(id), id);
  std::sort(problems.begin(), problems.end());
  problems.erase(std::unique(problems.begin(), problems.end()), problems.end());
  if (problems.size() < 2)
    throw Error("the copy warm-up needs copy drills of at least two problems, found " +
                std::to_string(problems.size()) + " (build the data with --copy-drills N > 0)")
        .file(cpt_path);
  const size_t val_problems = std::max<size_t>(1, problems.size() / 50);
  std::set<std::string> validating;
  for (size_t i = 0; i < val_problems; ++i) validating.insert(problems[i].second);
  std::string train_text, val_text;
  int64_t trained = 0;
  for (const auto& [id, line] : drills) {
    const bool val = validating.count(id) > 0;
    (val ? val_text : train_text) += line + "\n";
    trained += val ? 0 : 1;
  }
  write_file_atomic(val_out, val_text);
  write_file_atomic(train_out, train_text);  // last: its presence marks both done
  return trained;
}

io::Tokenizer train_demo_tokenizer(const std::string& cpt_path, int64_t vocab_size, bool bare_words,
                                   bool quiet) {
  std::vector<std::string> texts;
  read_jsonl(cpt_path, [&](const json& record, long) {
    texts.push_back(record.at("text").get<std::string>());
  });
  io::TokenizerTrainOptions options;
  options.vocab_size = vocab_size;
  options.bare_words = bare_words;
  options.show_progress = !quiet;
  return io::Tokenizer::train_from_texts(texts, options);
}

struct SplitResult {
  bool present = false;
  double pass1 = 0.0;
  int64_t n = 0;
  double data_lines = -1.0;  // percent of reference data lines reproduced; -1: no gold file
};

// Greedy zero-shot generation for one prompts file, then `trex or eval`.
// Collective over the ranks: each generates its block of the prompts, rank 0
// joins the blocks in order and grades; every rank gets the result.
SplitResult generate_and_grade(const model::Model<float>& model, const io::Tokenizer& tokenizer,
                               const std::string& prompts, const std::string& bench,
                               const std::string& stage_dir, const std::string& split,
                               const DemoPreset& preset, const DemoOptions& o, DemoRanks& ranks,
                               infer::GenerateFileStats* stats_out = nullptr) {
  SplitResult result;
  if (!fs::exists(prompts) || !fs::exists(bench)) return result;
  const std::string completions = stage_dir + "/generations/" + split + ".jsonl";
  const std::string eval_dir = stage_dir + "/eval/" + split;
  if (ranks.root_decides(!fs::exists(eval_dir + "/report.json"))) {
    infer::GenerateOptions g;
    g.max_new_tokens = preset.max_new_tokens;
    g.seed = o.seed;
    const std::string block =
        ranks.size() == 1 ? completions : completions + ".rank" + std::to_string(ranks.rank());
    infer::GenerateFileStats stats;
    ranks.all("generating " + split, [&] {
      ensure_parent_dir(block);
      stats = infer::generate_file(model, tokenizer, prompts, block, g, !o.quiet,
                                   {ranks.rank(), ranks.size()});
    });
    // The split's throughput: every rank's tokens over the slowest rank's time.
    stats.generated_tokens = static_cast<int64_t>(ranks.sum(stats.generated_tokens));
    stats.completions = static_cast<int64_t>(ranks.sum(stats.completions));
    stats.prompts = static_cast<int64_t>(ranks.sum(stats.prompts));
    stats.seconds = ranks.max(stats.seconds);
    if (stats_out) *stats_out = stats;
    ranks.on_root("grading " + split, [&] {
      if (ranks.size() > 1) {
        std::string joined;
        for (int r = 0; r < ranks.size(); ++r)
          joined += read_file(completions + ".rank" + std::to_string(r));
        write_file_atomic(completions, joined);
        for (int r = 0; r < ranks.size(); ++r)
          fs::remove(completions + ".rank" + std::to_string(r));
      }
      orlib::eval::EvalOptions e;
      e.bench_paths = {bench};
      e.completions_path = completions;
      e.out_dir = eval_dir;
      e.jobs = o.jobs;
      e.timeout = 20.0;
      e.progress = false;
      orlib::eval::run_eval(e);
    });
  }
  const Pass1Cell cell = read_pass1(eval_dir + "/report.json", split);
  result.present = cell.present;
  result.pass1 = cell.pass1;
  result.n = cell.n;
  const std::string gold = (fs::path(bench).parent_path() / "gold" / (split + ".jsonl")).string();
  if (fs::exists(gold) && fs::exists(completions))
    result.data_lines = data_line_recall(completions, gold).percent();
  return result;
}

std::map<std::string, double> evaluate_stage(const model::Model<float>& model,
                                             const io::Tokenizer& tokenizer,
                                             const std::string& data_dir,
                                             const std::string& stage_dir, const std::string& label,
                                             const DemoPreset& preset, const DemoOptions& o,
                                             DemoRanks& ranks, double* generation_tokens_per_s,
                                             std::map<std::string, double>* data_lines) {
  std::map<std::string, double> pass1;
  double tokens = 0, seconds = 0;
  for (const std::string& split : eval_splits()) {
    infer::GenerateFileStats stats;
    const SplitResult r = generate_and_grade(
        model, tokenizer, data_dir + "/prompts/" + split + ".jsonl",
        data_dir + "/" + split + ".jsonl", stage_dir, split, preset, o, ranks, &stats);
    tokens += static_cast<double>(stats.generated_tokens);
    seconds += stats.seconds;
    if (!r.present) continue;
    pass1[split] = r.pass1;
    std::string line = "   " + label + " " + split + ": Pass@1 " + format_fixed(r.pass1, 1) +
                       "% of " + std::to_string(r.n);
    if (r.data_lines >= 0) {
      (*data_lines)[split] = r.data_lines;
      line += ", data lines reproduced " + format_fixed(r.data_lines, 1) + "%";
    }
    say(o, line);
  }
  if (generation_tokens_per_s && seconds > 0) *generation_tokens_per_s = tokens / seconds;
  return pass1;
}

// Training metrics series other than losses (e.g. the validation Pass@1).
CurveSeries metric_series(const std::string& metrics_path, const std::string& field,
                          const std::string& label) {
  CurveSeries series;
  series.label = label;
  if (!fs::exists(metrics_path)) return series;
  read_jsonl(metrics_path, [&](const json& r, long) {
    if (r.contains(field) && r[field].is_number() && r.contains("step"))
      series.points.push_back({r["step"].get<double>(), r[field].get<double>()});
  });
  return series;
}

// A training stage's history over all its runs, from its metrics.jsonl.
struct StageHistory {
  double tokens = 0, seconds = 0, tflop = 0, mfu_seconds = 0;
  double final_loss = 0, final_lm_loss = 0, final_validation_loss = -1;
  double tokens_per_second() const { return seconds > 0 ? tokens / seconds : 0.0; }
  double model_gflops_per_second() const { return seconds > 0 ? 1e3 * tflop / seconds : 0.0; }
  double mfu() const { return seconds > 0 ? mfu_seconds / seconds : 0.0; }  // time-weighted
};

StageHistory read_stage_history(const std::string& metrics_path) {
  StageHistory h;
  if (metrics_path.empty() || !fs::exists(metrics_path)) return h;
  auto number = [](const json& r, const char* key) {
    auto it = r.find(key);
    return it != r.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  read_jsonl(metrics_path, [&](const json& r, long) {
    const double seconds = number(r, "step_seconds");
    h.tokens += number(r, "tokens");
    h.seconds += seconds;
    h.tflop += number(r, "model_tflops") * seconds;
    h.mfu_seconds += number(r, "mfu") * seconds;
    if (r.contains("loss")) h.final_loss = number(r, "loss");
    if (r.contains("loss_lm")) h.final_lm_loss = number(r, "loss_lm");
    if (r.contains("val_loss")) h.final_validation_loss = number(r, "val_loss");
  });
  return h;
}

train::RunConfig base_run_config(const DemoPreset& preset, const std::string& tokenizer_path,
                                 double peak_gflops, uint64_t seed) {
  train::RunConfig c;
  c.tokenizer = tokenizer_path;
  c.data_seed = seed;
  c.seq_len = preset.seq_len;
  c.micro_batch = preset.micro_batch;
  c.global_batch = preset.global_batch;
  c.warmup_steps = preset.warmup_steps;
  c.precision = preset.bf16 ? train::TrainPrecision::kBf16 : train::TrainPrecision::kFp32;
  c.checkpoint_interval = preset.checkpoint_interval;
  c.keep_checkpoints = 2;
  c.log_interval = 10;
  c.eval_batches = 4;
  c.peak_gflops = peak_gflops;
  return c;
}

// Runs (or resumes, or skips when finished) one training stage.
// Under mpirun the stage is data parallel over every rank with ZeRO-1 (each
// rank updates its share of the optimizer state); checkpoints do not depend on
// the layout, so a run may resume on another number of ranks.
train::TrainSummary run_stage(train::RunConfig config, const DemoOptions& o, DemoRanks& ranks,
                              std::unique_ptr<train::Trainer>& trainer,
                              const train::Trainer::EvalHook& hook = {}) {
  config.parallel.dp = ranks.size();
  if (ranks.size() > 1) {
    const int64_t dp = ranks.size();
    if (config.global_batch % dp != 0)
      throw Error("the stage's " + std::to_string(config.global_batch) +
                  " rows per step do not split over " + std::to_string(dp) + " ranks")
          .field("ranks");
    // Micro-batches a multiple of the ranks: at most the preset's rows each.
    config.micro_batch = std::gcd(config.micro_batch, config.global_batch / dp);
    config.parallel.zero = 1;
  }
  train::TrainerOptions options;
  options.quiet = o.quiet;
  options.resume = train::latest_checkpoint(config.out_dir).has_value();
  trainer = std::make_unique<train::Trainer>(std::move(config), options);
  return trainer->run(hook);
}

// What the stages of one `trex demo` share: the options (quiet on every rank
// but 0), the preset, the processes, where everything goes, and the wall time
// of each stage for the report.
struct DemoRun {
  DemoRun(const DemoOptions& o, DemoRanks& r)
      : options(o), ranks(r), out(o.out_dir), data_dir(o.out_dir + "/data") {
    if (!ranks.root()) options.quiet = true;  // rank 0 prints
    preset = resolve_demo_preset(options);
  }

  const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  DemoOptions options;
  DemoRanks& ranks;
  DemoPreset preset;
  const std::string out;                                      // options.out_dir
  const std::string data_dir;                                 // out/data
  std::vector<std::pair<std::string, double>> stage_seconds;  // in stage order

  void say(const std::string& line) const { demo::say(options, line); }
  // Runs one stage and records its wall time under `stage`.
  template <class Fn>
  auto timed(const std::string& stage, Fn&& fn) {
    const auto t = std::chrono::steady_clock::now();
    auto result = fn();
    stage_seconds.push_back({stage, seconds_since(t)});
    return result;
  }
};

// What every training stage starts from.
struct TrainingInputs {
  std::string tokenizer_path;
  std::string model_config_path;  // the preset's model with the tokenizer's vocabulary
  double peak_gflops = 0.0;       // the MFU denominator
  std::string peak_dtype;         // how it was measured, for the report
};

// The zero-shot results of one model over the evaluation splits.
struct StageEvaluation {
  std::map<std::string, double> pass1, data_lines;  // split -> percent
  double generation_tokens_per_s = 0.0;
};

// 1. Data (rank 0): the solver-verified problems, built once, plus the CPT
// validation documents and, for a copy warm-up, its drill files.
json build_data(const DemoRun& run) {
  const DemoOptions& o = run.options;
  const DemoPreset& preset = run.preset;
  const std::string& data_dir = run.data_dir;
  run.ranks.on_root("building the data", [&] {
    if (fs::exists(data_dir + "/summary.json")) {
      run.say("== data: reusing " + data_dir);
    } else {
      run.say("== data: solver-verified problems -> compact SFT set, CPT corpus, eval splits (" +
              preset.data_preset + " sizes)");
      DemoDataOptions d;
      d.out_dir = data_dir;
      d.preset = preset.data_preset;
      d.sizes = preset.sizes;
      d.train_families = preset.train_families;
      d.heldout_families = preset.heldout_families;
      d.public_files = preset.public_files;
      d.difficulty = preset.difficulty;
      d.seed = o.seed;
      d.bench_dir = fs::is_directory(o.bench_dir) ? o.bench_dir : "";
      if (d.bench_dir.empty()) {
        log::warn("benchmark directory ", o.bench_dir, " not found: no public slice");
        d.sizes.public_items = 0;
      }
      d.jobs = o.jobs;
      d.show_progress = !o.quiet;
      build_demo_data(d);
    }
    if (!fs::exists(data_dir + "/cpt_val.jsonl"))
      write_cpt_validation(data_dir + "/sft_val.jsonl", data_dir + "/cpt_val.jsonl");
    if (preset.copy_warmup_steps > 0 && !fs::exists(data_dir + "/copy_drills.jsonl"))
      write_copy_drill_files(data_dir + "/cpt.jsonl", data_dir + "/copy_drills.jsonl",
                             data_dir + "/copy_drills_val.jsonl");
  });
  return json::parse(read_file(data_dir + "/summary.json"));
}

// 2. Tokenizer (rank 0 trains it once; every rank loads it). A resumed run
// must not train on a tokenizer of the other pre-tokenizer.
io::Tokenizer prepare_tokenizer(const DemoRun& run, const std::string& tokenizer_path) {
  const DemoPreset& preset = run.preset;
  run.ranks.on_root("training the tokenizer", [&] {
    if (fs::exists(tokenizer_path)) return;
    run.say("== tokenizer: byte-level BPE, " + std::to_string(preset.vocab_size) +
            " tokens at most, on the CPT corpus" +
            (preset.bare_words ? " (bare words: names copy token for token)" : ""));
    train_demo_tokenizer(run.data_dir + "/cpt.jsonl", preset.vocab_size, preset.bare_words,
                         run.options.quiet)
        .save(tokenizer_path);
  });
  io::Tokenizer tokenizer = io::Tokenizer::load(tokenizer_path);
  if (nlohmann::json(tokenizer.to_json()["pre_tokenizer"]) !=
      nlohmann::json(io::deepseek_v3_pre_tokenizer_json(false, preset.bare_words)))
    throw Error(std::string("the tokenizer was trained ") +
                (preset.bare_words ? "without" : "with") +
                " --bare-words; use that setting or a new --out-dir")
        .file(tokenizer_path)
        .field("pre_tokenizer");
  return tokenizer;
}

// The preset's model with the tokenizer's vocabulary and special ids, written
// where every training stage reads it. Returns its path.
std::string write_model_config(const DemoRun& run, const io::Tokenizer& tokenizer) {
  json model_config = run.preset.model_config;
  model_config["vocab_size"] = tokenizer.vocab_size();
  model_config["bos_token_id"] = tokenizer.special_ids().bos;
  model_config["eos_token_id"] = tokenizer.special_ids().eos;
  const std::string path = run.out + "/model-config.json";
  run.ranks.on_root("writing " + path,
                    [&] { write_file_atomic(path, model_config.dump(2) + "\n"); });
  return path;
}

// The MFU denominator, measured once through the engine's GEMM path unless
// given; with several ranks each measures its own threads while the others do
// (what a rank gets while all train), and the mean is the per-rank peak.
void measure_mfu_peak(const DemoRun& run, TrainingInputs& inputs) {
  const bool bf16 = run.preset.bf16;
  inputs.peak_gflops = run.options.peak_gflops;
  inputs.peak_dtype = bf16 ? "bf16" : "fp32";
  if (bf16 && !kernels::gemm_bf16_native()) inputs.peak_dtype = "bf16 rounding on fp32";
  if (inputs.peak_gflops <= 0) {
    double measured = 0;
    run.ranks.all("measuring the GEMM peak", [&] {
      measured = kernels::measure_peak(bf16, {512, 1024}, 3).peak_gflops;
    });
    inputs.peak_gflops = run.ranks.sum(measured) / run.ranks.size();
  }
  if (run.ranks.size() > 1) inputs.peak_dtype += ", per rank";
  run.say("== peak: " + format_fixed(inputs.peak_gflops, 1) + " GFLOP/s (" + inputs.peak_dtype +
          " GEMM, the MFU denominator)");
}

// 3. The copy warm-up from random init, on the drills alone.
train::TrainSummary copy_warmup(DemoRun& run, const TrainingInputs& inputs,
                                std::unique_ptr<train::Trainer>& trainer) {
  const DemoPreset& preset = run.preset;
  run.say("== warm-up: " + std::to_string(preset.copy_warmup_steps) + " steps of " +
          std::to_string(preset.copy_warmup_batch) + " x " +
          std::to_string(preset.copy_warmup_seq_len) +
          " tokens of copy drills from random init, peak LR " + format_fixed(preset.cpt_lr, 4));
  train::RunConfig warmup =
      base_run_config(preset, inputs.tokenizer_path, inputs.peak_gflops, run.options.seed);
  warmup.model_config = inputs.model_config_path;
  warmup.init_seed = run.options.seed;
  warmup.mode = train::DataMode::kCpt;
  warmup.train_file = run.data_dir + "/copy_drills.jsonl";
  warmup.validation_file = run.data_dir + "/copy_drills_val.jsonl";
  warmup.seq_len = preset.copy_warmup_seq_len;
  warmup.global_batch = preset.copy_warmup_batch;
  warmup.micro_batch = preset.copy_warmup_batch;
  warmup.steps = preset.copy_warmup_steps;
  warmup.peak_lr = preset.cpt_lr;
  warmup.min_lr = preset.cpt_lr / 10;
  warmup.eval_interval = std::max<int64_t>(1, preset.copy_warmup_steps / 4);
  warmup.out_dir = run.out + "/warmup";
  const train::TrainSummary summary = run_stage(warmup, run.options, run.ranks, trainer);
  trainer.reset();
  return summary;
}

// 4. CPT on the corpus, from the warm-up's last checkpoint or from random init.
// Leaves the trained model in `trainer` for the base evaluation.
train::TrainSummary continued_pretraining(DemoRun& run, const TrainingInputs& inputs,
                                          const std::optional<train::TrainSummary>& warmup,
                                          std::unique_ptr<train::Trainer>& trainer) {
  const DemoPreset& preset = run.preset;
  run.say("== cpt: " + std::to_string(preset.cpt_steps) + " steps of " +
          std::to_string(preset.global_batch) + " x " + std::to_string(preset.seq_len) +
          " tokens from " + (warmup ? warmup->last_checkpoint : std::string("random init")) +
          ", peak LR " + format_fixed(preset.cpt_lr, 4));
  train::RunConfig cpt =
      base_run_config(preset, inputs.tokenizer_path, inputs.peak_gflops, run.options.seed);
  if (warmup) {
    cpt.init_checkpoint = warmup->last_checkpoint;
  } else {
    cpt.model_config = inputs.model_config_path;
    cpt.init_seed = run.options.seed;
  }
  cpt.mode = train::DataMode::kCpt;
  cpt.train_file = run.data_dir + "/cpt.jsonl";
  cpt.validation_file = run.data_dir + "/cpt_val.jsonl";
  cpt.steps = preset.cpt_steps;
  cpt.peak_lr = preset.cpt_lr;
  cpt.min_lr = preset.cpt_lr / 10;
  cpt.eval_interval = std::max<int64_t>(1, preset.cpt_steps / 4);
  cpt.out_dir = run.out + "/cpt";
  return run_stage(cpt, run.options, run.ranks, trainer);
}

// 5 and 7. Zero-shot answers of `model` on every evaluation split, graded.
StageEvaluation evaluate(const DemoRun& run, const model::Model<float>& model,
                         const io::Tokenizer& tokenizer, const std::string& stage_dir,
                         const std::string& label) {
  StageEvaluation e;
  e.pass1 = evaluate_stage(model, tokenizer, run.data_dir, stage_dir, label, run.preset,
                           run.options, run.ranks, &e.generation_tokens_per_s, &e.data_lines);
  return e;
}

// 6. SFT from the CPT checkpoint, with a validation Pass@1 at intervals.
// Leaves the trained model in `trainer` for the final evaluation.
train::TrainSummary supervised_finetuning(DemoRun& run, const TrainingInputs& inputs,
                                          const train::TrainSummary& cpt,
                                          std::unique_ptr<train::Trainer>& trainer) {
  const DemoPreset& preset = run.preset;
  run.say("== sft: " + std::to_string(preset.sft_steps) + " steps of " +
          std::to_string(preset.sft_global_batch) + " x " + std::to_string(preset.sft_seq_len) +
          " tokens from " + cpt.last_checkpoint + ", peak LR " + format_fixed(preset.sft_lr, 4));
  train::RunConfig sft =
      base_run_config(preset, inputs.tokenizer_path, inputs.peak_gflops, run.options.seed);
  sft.seq_len = preset.sft_seq_len;
  sft.micro_batch = preset.sft_micro_batch;
  sft.global_batch = preset.sft_global_batch;
  sft.init_checkpoint = cpt.last_checkpoint;
  sft.mode = train::DataMode::kSft;
  sft.train_file = run.data_dir + "/sft_train.jsonl";
  sft.validation_file = run.data_dir + "/sft_val.jsonl";
  sft.steps = preset.sft_steps;
  sft.peak_lr = preset.sft_lr;
  sft.min_lr = preset.sft_lr / 10;
  sft.eval_interval = std::max<int64_t>(1, preset.sft_steps / preset.val_pass_evals);
  sft.out_dir = run.out + "/sft";
  const std::string val_prompts = run.data_dir + "/prompts/val.jsonl";
  const std::string val_bench = run.data_dir + "/val.jsonl";
  auto val_pass1_hook = [&](train::Trainer& tr, int64_t step, train::MetricsRecord& record) {
    const std::string dir = run.out + "/sft/val-pass1/step-" + std::to_string(step);
    // A resumed run re-measures the step it repeats.
    run.ranks.on_root("clearing " + dir, [&] { fs::remove_all(dir); });
    const SplitResult r = generate_and_grade(tr.model(), tr.tokenizer(), val_prompts, val_bench,
                                             dir, "val", preset, run.options, run.ranks);
    if (!r.present) return;
    record.set("val_pass1", r.pass1);
    std::string line = "   step " + std::to_string(step) + ": validation Pass@1 " +
                       format_fixed(r.pass1, 1) + "% of " + std::to_string(r.n);
    if (r.data_lines >= 0) {
      record.set("val_data_lines", r.data_lines);
      line += ", data lines reproduced " + format_fixed(r.data_lines, 1) + "%";
    }
    run.say(line);
  };
  return run_stage(sft, run.options, run.ranks, trainer, val_pass1_hook);
}

// 8. GRPO (docs/rl.md) from the SFT model on the SFT training problems, the
// reward from the solver, with a validation Pass@1 before the first update and
// at intervals. Returns the summary; the RL model is its last checkpoint.
rl::GrpoSummary policy_optimisation(DemoRun& run, const TrainingInputs& inputs,
                                    const train::TrainSummary& sft) {
  const DemoPreset& preset = run.preset;
  const std::string prompts = run.data_dir + "/rl_train.jsonl";
  if (!run.ranks.root_decides(fs::exists(prompts)))
    throw Error("the RL stage needs " + prompts +
                " (written by `trex or demo-data` since the RL stage exists): remove " +
                run.data_dir + " to rebuild the data, or pass --rl-steps 0")
        .field("rl_steps");
  const int64_t P = preset.rl_prompts_per_step, G = preset.rl_group_size;
  const int64_t ranks = run.ranks.size();
  run.say("== rl: " + std::to_string(preset.rl_steps) + " GRPO steps of " + std::to_string(P) +
          " prompts x " + std::to_string(G) + " samples (temperature " +
          format_fixed(preset.rl_temperature, 2) + ") from " + sft.last_checkpoint +
          ", reward from the solver, LR " + format_fixed(preset.rl_lr, 6));
  if (P % ranks != 0)
    throw Error("the RL stage's " + std::to_string(P) + " prompts per step do not split over " +
                std::to_string(ranks) + " ranks")
        .field("ranks");
  train::RunConfig c =
      base_run_config(preset, inputs.tokenizer_path, inputs.peak_gflops, run.options.seed);
  c.mode = train::DataMode::kGrpo;
  c.init_checkpoint = sft.last_checkpoint;
  c.train_file = prompts;
  c.validation_file = run.data_dir + "/val.jsonl";
  c.seq_len = preset.sft_seq_len;
  c.global_batch = P * G;
  c.micro_batch = std::gcd<int64_t>(4, P / ranks * G);
  c.steps = preset.rl_steps;
  c.peak_lr = preset.rl_lr;
  c.min_lr = preset.rl_lr;
  c.warmup_steps = 0;
  c.mtp_weight = 0;
  c.eval_interval = std::max<int64_t>(1, preset.rl_steps / preset.rl_val_evals);
  c.out_dir = run.out + "/rl";
  c.parallel.dp = ranks;
  c.parallel.zero = ranks > 1 ? 1 : 0;
  train::GrpoConfig& g = c.grpo;
  g.prompts_per_step = P;
  g.group_size = G;
  g.temperature = preset.rl_temperature;
  g.max_new_tokens = preset.max_new_tokens;
  g.prompt_template = demo_user_prompt("{question}");  // what SFT trained on
  g.eval_prompts = preset.sizes.sft_val;
  g.grade_jobs = std::max<int64_t>(1, run.options.jobs / ranks);
  c.validate("the demo's RL stage");
  rl::GrpoOptions options;
  options.trainer.quiet = run.options.quiet;
  options.trainer.resume = train::latest_checkpoint(c.out_dir).has_value();
  return rl::run_grpo(c, options);
}

// The training figures of one stage for the report. They come from the
// stage's metrics.jsonl (one record per step), so a stage finished by an
// earlier, interrupted `trex demo` still reports its whole history, not this
// process's share of it (none, for a stage that was already complete).
void add_stage_figures(DemoReportInputs& report, const std::string& name,
                       const train::TrainSummary& s, double lr) {
  const StageHistory h = read_stage_history(s.metrics_jsonl);
  report.figures.push_back({name + " steps", std::to_string(s.steps) + " (" +
                                                 std::to_string(s.skipped_steps) + " skipped, " +
                                                 std::to_string(s.spikes) +
                                                 " loss spikes), peak LR " + format_fixed(lr, 4)});
  report.figures.push_back({name + " tokens", format_fixed(h.tokens, 0) + " (" +
                                                  std::to_string(s.trained_tokens) + " trained)"});
  report.figures.push_back(
      {name + " throughput", format_fixed(h.tokens_per_second(), 0) + " tokens/s, " +
                                 format_fixed(h.model_gflops_per_second(), 1) +
                                 " model GFLOP/s, MFU " + format_fixed(100 * h.mfu(), 1) + "% (" +
                                 format_fixed(h.seconds, 0) + " s of training steps)"});
  report.figures.push_back(
      {name + " final loss", format_fixed(h.final_loss, 3) + " (LM " +
                                 format_fixed(h.final_lm_loss, 3) + ", validation " +
                                 format_fixed(h.final_validation_loss, 3) + ")"});
}

// The loss curves of every training stage and the validation Pass@1 during SFT.
void write_charts(const DemoRun& run, const std::optional<train::TrainSummary>& warmup,
                  const train::TrainSummary& cpt, const train::TrainSummary& sft,
                  const std::optional<rl::GrpoSummary>& rl) {
  SvgChart chart;
  chart.title = std::string(warmup ? "Copy warm-up, CPT" : "CPT") +
                " then SFT: training and validation loss (LM + MTP + balance)";
  std::vector<CurveSeries> series;
  if (warmup) series = read_loss_series(warmup->metrics_jsonl, "warm-up");
  for (auto& s : read_loss_series(cpt.metrics_jsonl, "CPT")) series.push_back(s);
  for (auto& s : read_loss_series(sft.metrics_jsonl, "SFT")) series.push_back(s);
  write_file_atomic(run.out + "/loss.svg", loss_curves_svg(series, chart));
  SvgChart pass_chart;
  pass_chart.title = "SFT: validation Pass@1 and data lines reproduced during training";
  pass_chart.y_label = "percent";
  write_file_atomic(
      run.out + "/val_pass1.svg",
      loss_curves_svg(
          {metric_series(sft.metrics_jsonl, "val_pass1", "validation Pass@1"),
           metric_series(sft.metrics_jsonl, "val_data_lines", "validation data lines reproduced")},
          pass_chart));
  if (rl) {
    SvgChart rl_chart;
    rl_chart.title = "GRPO: validation Pass@1 (greedy) and the rollouts' pass rate per step";
    rl_chart.y_label = "percent";
    CurveSeries rollouts = metric_series(rl->train.metrics_jsonl, "pass_rate", "rollout pass rate");
    for (CurvePoint& p : rollouts.points) p.y *= 100;  // a fraction in the metrics
    rollouts.dashed = true;
    write_file_atomic(
        run.out + "/rl_pass1.svg",
        loss_curves_svg(
            {metric_series(rl->train.metrics_jsonl, "val_pass1", "validation Pass@1"), rollouts},
            rl_chart));
  }
}

// The report's opening sentence: what was trained, on what, in how long.
std::string what_was_trained(const DemoRun& run, const TrainingInputs& inputs,
                             const json& data_summary) {
  const DemoPreset& preset = run.preset;
  const double params = static_cast<double>(
      model::count_parameters(model::ModelConfig::load(inputs.model_config_path)).total());
  const json sizes = data_summary.value("split_sizes", json::object());
  std::vector<std::string> families;
  for (const json& f : data_summary.value("train_families", json::array()))
    if (f.is_string()) families.push_back(f.get<std::string>());
  const std::string where =
      run.ranks.size() == 1 ? "one process" : std::to_string(run.ranks.size()) + " MPI ranks";
  std::string stages;
  if (preset.copy_warmup_steps > 0)
    stages += std::to_string(preset.copy_warmup_steps) + " copy-drill warm-up steps, ";
  stages += std::to_string(preset.cpt_steps) + " CPT steps on " +
            data_summary.value("cpt_documents", json(0)).dump() + " synthetic OR documents, then " +
            std::to_string(preset.sft_steps) + " SFT steps on " +
            sizes.value("sft_train", json(0)).dump() + " problem-to-MathProg formulation pairs (" +
            join(families, ", ") + ")";
  return "What you are looking at: a " + format_fixed(params / 1e6, 1) +
         "M-parameter model with the DeepSeek-V4 architecture, trained from random "
         "initialisation on this machine (" +
         where + ", " + format_fixed(seconds_since(run.start) / 60.0, 1) +
         " minutes from data to "
         "report): " +
         stages + ".";
}

// 8. report.md (rank 0): the Pass@1 table, charts, data summary and figures.
void write_report(const DemoRun& run, const std::string& report_path, const json& data_summary,
                  const TrainingInputs& inputs, const std::optional<train::TrainSummary>& warmup,
                  const train::TrainSummary& cpt, const train::TrainSummary& sft,
                  const StageEvaluation& base, const StageEvaluation& final_eval,
                  const std::optional<rl::GrpoSummary>& rl, const StageEvaluation& rl_eval) {
  const DemoPreset& preset = run.preset;
  run.ranks.on_root("writing the report", [&] {
    write_charts(run, warmup, cpt, sft, rl);
    DemoReportInputs report;
    report.title =
        "T-Rex demo (" + preset.name + " preset, seed " + std::to_string(run.options.seed) + ")";
    for (const std::string& split : eval_splits()) {
      const std::string base_report = run.out + "/base/eval/" + split + "/report.json";
      const std::string sft_report = run.out + "/final/eval/" + split + "/report.json";
      if (fs::exists(base_report)) report.base_reports[split] = base_report;
      if (fs::exists(sft_report)) report.sft_reports[split] = sft_report;
      const std::string rl_report = run.out + "/rl-eval/eval/" + split + "/report.json";
      if (rl && fs::exists(rl_report)) report.rl_reports[split] = rl_report;
    }
    report.figures.push_back({"model", "DeepSeek-V4 architecture, " + inputs.model_config_path});
    report.figures.push_back(
        {"processes", run.ranks.size() == 1
                          ? std::string("1")
                          : std::to_string(run.ranks.size()) +
                                " MPI ranks (training data parallel, ZeRO-1; generation split)"});
    report.figures.push_back({"MFU denominator", format_fixed(inputs.peak_gflops, 1) +
                                                     " GFLOP/s (" + inputs.peak_dtype + " GEMM)"});
    if (warmup) add_stage_figures(report, "copy warm-up", *warmup, preset.cpt_lr);
    add_stage_figures(report, "CPT", cpt, preset.cpt_lr);
    add_stage_figures(report, "SFT", sft, preset.sft_lr);
    if (base.generation_tokens_per_s > 0)
      report.figures.push_back(
          {"generation (base)", format_fixed(base.generation_tokens_per_s, 0) + " tokens/s"});
    if (final_eval.generation_tokens_per_s > 0)
      report.figures.push_back(
          {"generation (SFT)", format_fixed(final_eval.generation_tokens_per_s, 0) + " tokens/s"});
    if (rl) {
      const rl::GrpoSummary& r = *rl;
      const double t = r.generate_seconds + r.grade_seconds + r.train_seconds;
      report.figures.push_back(
          {"GRPO steps", std::to_string(r.train.steps) + " of " +
                             std::to_string(preset.rl_prompts_per_step) + " prompts x " +
                             std::to_string(preset.rl_group_size) + " samples, LR " +
                             format_fixed(preset.rl_lr, 6) + ", temperature " +
                             format_fixed(preset.rl_temperature, 2)});
      if (t > 0)
        report.figures.push_back(
            {"GRPO time split (this run)",
             "generate " + format_fixed(100 * r.generate_seconds / t, 0) + "%, grade (waited) " +
                 format_fixed(100 * r.grade_seconds / t, 0) + "%, train " +
                 format_fixed(100 * r.train_seconds / t, 0) + "%; " +
                 format_fixed(r.generate_seconds > 0 ? r.generated_tokens / r.generate_seconds : 0,
                              0) +
                 " generated tokens/s"});
      if (rl_eval.generation_tokens_per_s > 0)
        report.figures.push_back(
            {"generation (RL)", format_fixed(rl_eval.generation_tokens_per_s, 0) + " tokens/s"});
    }
    for (const auto& [stage, seconds] : run.stage_seconds)
      report.figures.push_back({"time: " + stage, format_fixed(seconds, 1) + " s"});
    report.figures.push_back({"time: total", format_fixed(seconds_since(run.start), 1) + " s"});
    report.charts = {{"Loss curves", "loss.svg"},
                     {"Validation Pass@1 during SFT", "val_pass1.svg"}};
    if (rl) report.charts.push_back({"Validation Pass@1 during GRPO", "rl_pass1.svg"});
    report.data_summary = data_summary;
    report.what_was_trained = what_was_trained(run, inputs, data_summary);
    report.base_data_lines = base.data_lines;
    report.sft_data_lines = final_eval.data_lines;
    report.notes =
        "Pass@1 is greedy zero-shot decoding graded by `trex or eval` (the generated MathProg "
        "model "
        "is solved and its objective compared with the ground truth, relative tolerance 1e-6). "
        "Reproduce: `trex demo --preset " +
        preset.name + " --seed " + std::to_string(run.options.seed) + "`; docs/demo.md.\n";
    write_demo_report(report_path, report);
  });
}

}  // namespace

DemoPreset resolve_demo_preset(const DemoOptions& o) {
  DemoPreset preset = demo_preset(o.preset, o.config_dir);
  if (o.bare_words && !preset.bare_words) preset = with_bare_words(std::move(preset));
  if (o.cpt_steps >= 0) preset.cpt_steps = o.cpt_steps;
  if (o.copy_warmup_steps >= 0) preset.copy_warmup_steps = o.copy_warmup_steps;
  if (o.sft_steps >= 0) preset.sft_steps = o.sft_steps;
  if (o.rl_steps >= 0) preset.rl_steps = o.rl_steps;
  if (preset.cpt_steps < 1 || preset.sft_steps < 1)
    throw Error("the demo needs at least one CPT and one SFT step").field("steps");
  if (!(o.cpt_lr < 0 || o.cpt_lr > 0) || !(o.sft_lr < 0 || o.sft_lr > 0))
    throw Error("a learning-rate override must be > 0 (negative: the preset's)").field("lr");
  if (o.sft_global_batch == 0 || o.sft_global_batch < -1)
    throw Error("must be >= 1 rows per step").field("sft_global_batch");
  if (o.cpt_lr > 0) preset.cpt_lr = o.cpt_lr;
  if (o.sft_lr > 0) preset.sft_lr = o.sft_lr;
  if (o.copy_drills >= 0) preset.sizes.copy_drills = o.copy_drills;
  if (o.renamed_share > 1) throw Error("must be a share in [0, 1]").field("renamed_share");
  if (o.renamed_share >= 0) preset.sizes.renamed_share = o.renamed_share;
  if (preset.copy_warmup_steps > 0 && preset.sizes.copy_drills <= 0)
    throw Error(
        "the copy warm-up trains on copy drills: set --copy-drills N > 0 or "
        "--copy-warmup-steps 0")
        .field("copy_drills");
  if (o.val_evals == 0 || o.val_evals < -1)
    throw Error("must be >= 1 validation points").field("val_evals");
  if (o.val_evals > 0) preset.val_pass_evals = o.val_evals;
  if (o.sft_global_batch > 0) {
    preset.sft_global_batch = o.sft_global_batch;
    // A micro-batch no larger than the preset's that divides the new batch.
    preset.sft_micro_batch = std::gcd(preset.sft_micro_batch, o.sft_global_batch);
  }
  return preset;
}

DemoResult run_demo(const DemoOptions& options) {
  DemoRanks ranks;
  DemoRun run(options, ranks);
  ranks.on_root("creating " + run.out, [&] { fs::create_directories(run.out); });
  if (ranks.size() > 1)
    run.say("== ranks: " + std::to_string(ranks.size()) +
            " (training data parallel with ZeRO-1, generation split over the ranks)");

  const json data_summary = run.timed("data", [&] { return build_data(run); });
  TrainingInputs inputs;
  inputs.tokenizer_path = run.out + "/tokenizer.json";
  const io::Tokenizer tokenizer = run.timed("tokenizer", [&] {
    io::Tokenizer loaded = prepare_tokenizer(run, inputs.tokenizer_path);
    inputs.model_config_path = write_model_config(run, loaded);
    return loaded;
  });
  measure_mfu_peak(run, inputs);

  std::unique_ptr<train::Trainer> trainer;
  std::optional<train::TrainSummary> warmup;
  if (run.preset.copy_warmup_steps > 0)
    warmup = run.timed("warm-up", [&] { return copy_warmup(run, inputs, trainer); });
  const train::TrainSummary cpt =
      run.timed("cpt", [&] { return continued_pretraining(run, inputs, warmup, trainer); });
  const StageEvaluation base = run.timed("base eval", [&] {
    run.say("== base: zero-shot answers of the CPT-only model");
    return evaluate(run, trainer->model(), tokenizer, run.out + "/base", "base");
  });
  trainer.reset();
  const train::TrainSummary sft =
      run.timed("sft", [&] { return supervised_finetuning(run, inputs, cpt, trainer); });
  const StageEvaluation final_eval = run.timed("final eval", [&] {
    run.say("== final: zero-shot answers of the SFT model");
    return evaluate(run, trainer->model(), tokenizer, run.out + "/final", "sft");
  });

  std::optional<rl::GrpoSummary> rl;
  StageEvaluation rl_eval;
  if (run.preset.rl_steps > 0) {
    trainer.reset();
    rl = run.timed("rl", [&] { return policy_optimisation(run, inputs, sft); });
    rl_eval = run.timed("rl eval", [&] {
      run.say("== rl eval: zero-shot answers of the GRPO model");
      const model::Model<float> model =
          model::Model<float>::from_checkpoint(rl->train.last_checkpoint);
      return evaluate(run, model, tokenizer, run.out + "/rl-eval", "rl");
    });
  }

  DemoResult result;
  result.root = ranks.root();
  result.base_pass1 = base.pass1;
  result.sft_pass1 = final_eval.pass1;
  result.rl_pass1 = rl_eval.pass1;
  result.report_path = run.out + "/report.md";
  write_report(run, result.report_path, data_summary, inputs, warmup, cpt, sft, base, final_eval,
               rl, rl_eval);
  result.seconds = seconds_since(run.start);
  return result;
}

}  // namespace trex::demo
