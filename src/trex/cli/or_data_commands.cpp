// `trex or sft` and `trex or cpt`: the OR SFT set and the CPT corpus.
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include "trex/cli/commands.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/strings.hpp"
#include "trex/or/dataset/cpt.hpp"
#include "trex/or/dataset/sft.hpp"

namespace trex::cli {

void add_or_demo_data_command(CLI::App& or_app);  // or_demo_data_command.cpp

namespace {

// Bad lines of the problems file were skipped: say so and exit 3.
void finish_input(const JsonlStats& input) {
  if (input.skipped == 0) return;
  std::cerr << "trex: warning: " << input.path << ": " << input.summary() << "\n";
  throw CLI::RuntimeError(kExitRecordsSkipped);
}

const char* kStrictHelp =
    "Stop at the first bad line of the problems file (default: skip and count it, and exit 3 "
    "when any was skipped)";

}  // namespace

void add_or_data_commands(CLI::App& or_app) {
  add_or_demo_data_command(or_app);
  using namespace trex::orlib;
  auto jobs_default = [] {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return static_cast<int>(std::max(1L, cores));
  };

  auto sft = std::make_shared<SftOptions>();
  auto sft_jobs = std::make_shared<int>(-1);
  auto sft_quiet = std::make_shared<bool>(false);
  auto* s = or_app.add_subcommand("sft",
                                  "Build the solver-verified chat SFT set from `or synth` records");
  s->add_option("--problems", sft->problems_path, "Problem records from `trex or synth` (JSONL)")
      ->required()
      ->check(CLI::ExistingFile);
  s->add_option("--n", sft->n, "Number of samples")->capture_default_str();
  s->add_option("--seed", sft->seed, "Random seed")->capture_default_str();
  s->add_option("--out", sft->out_dir, "Output directory")->required();
  s->add_option("--bench-dir", sft->bench_dir,
                "Benchmark JSONL directory for decontamination ('' disables)")
      ->capture_default_str();
  s->add_option("--decontam-threshold", sft->decontam_threshold,
                "Drop records whose max benchmark n-gram overlap exceeds this")
      ->capture_default_str();
  s->add_option("--heldout-families", sft->heldout_families, "Families never in train (>= 2)")
      ->check(CLI::Range(2, 10))
      ->capture_default_str();
  s->add_option("--time-limit", sft->time_limit_seconds, "Per-solve time limit in seconds")
      ->capture_default_str();
  s->add_option("--jobs", *sft_jobs, "Worker processes (default: one per core; 0 = in-process)");
  s->add_flag("--quiet", *sft_quiet, "No progress bar or summary");
  s->add_flag("--strict", sft->strict, kStrictHelp);
  s->callback([=] {
    SftOptions o = *sft;
    o.jobs = *sft_jobs >= 0 ? *sft_jobs : jobs_default();
    o.show_progress = !*sft_quiet;
    SftSummary summary = build_sft(o);
    if (!*sft_quiet) {
      std::cout << "wrote " << summary.written << " records to " << o.out_dir << " in "
                << format_fixed(summary.seconds, 1) << " s (";
      std::vector<std::string> parts;
      for (const auto& [name, count] : summary.split_sizes)
        parts.push_back(name + " " + std::to_string(count));
      std::cout << join(parts, ", ") << "); decontamination dropped " << summary.decontam_dropped
                << ", duplicates " << summary.duplicates << "; card: " << o.out_dir
                << "/README.md\n";
      std::cout << "problems file: " << summary.input.summary() << "\n";
    }
    finish_input(summary.input);
  });

  auto cpt = std::make_shared<CptOptions>();
  auto cpt_quiet = std::make_shared<bool>(false);
  auto* c =
      or_app.add_subcommand("cpt", "Build the OR continued-pretraining corpus (JSONL documents)");
  c->add_option("--problems", cpt->problems_path, "Problem records from `trex or synth` (JSONL)")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("--out", cpt->out_dir, "Output directory")->required();
  c->add_option("--seed", cpt->seed, "Random seed")->capture_default_str();
  c->add_option("--glpk-examples", cpt->glpk_examples_dir,
                "Directory of GLPK example models ('' skips them)")
      ->capture_default_str();
  c->add_option("--jobs", cpt->jobs, "Worker processes for the error narratives (0 = in-process)")
      ->capture_default_str();
  cpt->bench_dir = "../shared/or_bench";
  c->add_option("--bench-dir", cpt->bench_dir,
                "Benchmark JSONL files every document is decontaminated against ('' or a "
                "missing default directory: none)")
      ->capture_default_str();
  c->add_option("--tokenizer", cpt->tokenizer_path,
                "HF tokenizer.json to count the corpus' tokens by source and kind (default: "
                "bytes/4)")
      ->check(CLI::ExistingFile);
  c->add_flag("--quiet", *cpt_quiet, "No summary");
  c->add_flag("--strict", cpt->strict, kStrictHelp);
  c->callback([=] {
    CptOptions o = *cpt;
    if (o.bench_dir == "../shared/or_bench" && !std::filesystem::is_directory(o.bench_dir)) {
      std::cerr << "note: no " << o.bench_dir << ": the corpus is not decontaminated\n";
      o.bench_dir.clear();
    }
    CptSummary summary = build_cpt(o);
    if (!*cpt_quiet) std::cout << format_cpt_summary(summary);
    finish_input(summary.input);
  });
}

}  // namespace trex::cli
