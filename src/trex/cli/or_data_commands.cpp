// `trex or sft`, `trex or cpt` and `trex or diversity`: the OR SFT set, the CPT
// corpus, and how varied a problems file's texts are.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>

#include "trex/cli/commands.hpp"
#include "trex/core/atomic_file.hpp"
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

  // `trex or diversity`: how varied a problems file's word problems are, next to the benchmarks.
  struct DiversityArgs {
    std::string problems, bench_dir = "../shared/or_bench", json_out;
    uint64_t seed = 1;
  };
  auto div = std::make_shared<DiversityArgs>();
  auto* d = or_app.add_subcommand(
      "diversity",
      "Surface-form diversity of a problems file's word problems per family (templates, surface "
      "forms, distinct word 4-grams / all on equal samples), next to the public benchmarks'");
  d->add_option("--problems", div->problems, "Problem records from `trex or synth` (JSONL)")
      ->required()
      ->check(CLI::ExistingFile);
  d->add_option("--bench-dir", div->bench_dir, "Benchmark JSONL directory ('' : none)")
      ->capture_default_str();
  d->add_option("--seed", div->seed, "Seed of the equal-size samples")->capture_default_str();
  d->add_option("--json", div->json_out, "Also write the figures as JSON to this file");
  d->callback([=] {
    JsonlStats input;
    const std::vector<Problem> problems = load_problems(div->problems, JsonlOptions{}, &input);
    std::map<std::string, std::vector<std::string>> texts;
    std::map<std::string, TextFormCounter> counters;
    for (const Problem& p : problems) {
      texts[p.family].push_back(p.nl);
      counters[p.family].add(p.nl_template, p.surface_form);
    }
    std::map<std::string, NgramDiversity> families, benchmarks;
    std::map<std::string, TextForms> forms;
    for (const auto& [family, list] : texts) {
      families[family] = ngram_diversity(list, div->seed);
      forms[family] = counters[family].counts();
    }
    if (!div->bench_dir.empty() && std::filesystem::is_directory(div->bench_dir))
      benchmarks = benchmark_diversity(div->bench_dir, div->seed);
    std::printf("%-28s %7s %9s %13s %8s %8s\n", "family / benchmark", "texts", "templates",
                "surface forms", "sampled", "4-gram");
    for (const auto& [family, v] : families)
      std::printf("%-28s %7lld %9lld %13lld %8lld %8.3f\n", family.c_str(),
                  static_cast<long long>(forms[family].texts),
                  static_cast<long long>(forms[family].templates),
                  static_cast<long long>(forms[family].surface_forms),
                  static_cast<long long>(v.texts), v.share());
    for (const auto& [file, v] : benchmarks)
      std::printf("%-28s %7s %9s %13s %8lld %8.3f\n", file.c_str(), "-", "-", "-",
                  static_cast<long long>(v.texts), v.share());
    if (!div->json_out.empty())
      write_file_atomic(div->json_out, diversity_json(families, forms, benchmarks).dump(1) + "\n");
    finish_input(input);
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
