// `trex demo`: the mission end to end on a preset file (docs/demo.md):
// data -> tokenizer -> [copy warm-up] -> CPT -> zero-shot base -> SFT -> zero-shot SFT -> report.
#include <iostream>
#include <memory>

#include "trex/cli/commands.hpp"
#include "trex/core/strings.hpp"
#include "trex/demo/demo.hpp"

namespace trex::cli {

void add_demo_command(CLI::App& app) {
  auto options = std::make_shared<demo::DemoOptions>();
  auto* d = app.add_subcommand(
      "demo",
      "Run the end-to-end demo: OR data, tokenizer, CPT and SFT of a small DeepSeek-V4, "
      "zero-shot Pass@1 report (a rerun resumes)");
  d->add_option("--out-dir", options->out_dir, "Output directory (rerun to resume)")
      ->capture_default_str();
  d->add_option("--preset", options->preset,
                "default (~17 min on 2 cores) | full (hours, 10K SFT set) | smoke (seconds): "
                "configs/demo/NAME.toml; or a preset file (PATH.toml)")
      ->capture_default_str();
  d->add_option("--config-dir", options->config_dir,
                "The configs folder of the preset names (default: $TREX_CONFIG_DIR, else "
                "./configs, else configs next to or above the trex binary)");
  d->add_option("--seed", options->seed, "Random seed (data, init, shuffling)")
      ->capture_default_str();
  d->add_option("--cpt-steps", options->cpt_steps, "Override the preset's CPT steps");
  d->add_option("--sft-steps", options->sft_steps, "Override the preset's SFT steps");
  d->add_option("--rl-steps", options->rl_steps,
                "Override the preset's GRPO steps after SFT (0: no RL stage; docs/rl.md)")
      ->check(CLI::NonNegativeNumber);
  d->add_option("--cpt-lr", options->cpt_lr, "Override the preset's peak CPT learning rate")
      ->check(CLI::PositiveNumber);
  d->add_option("--sft-lr", options->sft_lr, "Override the preset's peak SFT learning rate")
      ->check(CLI::PositiveNumber);
  d->add_option("--sft-batch", options->sft_global_batch,
                "Override the preset's SFT batch (rows of the preset's SFT length per step)")
      ->check(CLI::PositiveNumber);
  d->add_flag("--bare-words", options->bare_words,
              "Bare-words tokenizer (names copy token for token; ~50% more tokens), with a 1024 "
              "window and rows twice as long (docs/demo.md)");
  d->add_option("--copy-drills", options->copy_drills,
                "Override the preset's CPT copy drills per trained problem (0: none; docs/demo.md)")
      ->check(CLI::NonNegativeNumber);
  d->add_option("--renamed-share", options->renamed_share,
                "Override the preset's share of trained problems whose named entities get "
                "invented or other pools' names (0: none; docs/demo.md)")
      ->check(CLI::Range(0.0, 1.0));
  d->add_option("--copy-warmup-steps", options->copy_warmup_steps,
                "Override the preset's copy warm-up: steps on the copy drills alone before CPT "
                "(0: none; needs --copy-drills > 0; docs/demo.md)")
      ->check(CLI::NonNegativeNumber);
  d->add_option("--val-evals", options->val_evals,
                "Override the preset's number of validation Pass@1 points during SFT")
      ->check(CLI::PositiveNumber);
  d->add_option("--bench-dir", options->bench_dir, "Public benchmarks for the public slice")
      ->capture_default_str();
  d->add_option("--jobs", options->jobs, "Worker processes for data building and grading")
      ->capture_default_str();
  d->add_option("--peak-gflops", options->peak_gflops,
                "MFU denominator (default: measured at start)");
  d->add_flag("--quiet", options->quiet, "Only errors and the final table");
  d->callback([options] {
    const demo::DemoResult r = demo::run_demo(*options);
    if (!r.root) return;
    const bool rl = !r.rl_pass1.empty();
    std::cout << "\nzero-shot Pass@1 (%)      CPT-only base    SFT model"
              << (rl ? "        RL model" : "") << "\n";
    for (const char* split : {"test", "heldout_template", "heldout_family", "public"}) {
      auto cell = [&](const std::map<std::string, double>& m) {
        auto it = m.find(split);
        return it == m.end() ? std::string("-") : format_fixed(it->second, 1);
      };
      std::string name = split;
      name.resize(26, ' ');
      std::string base = cell(r.base_pass1);
      base.resize(17, ' ');
      std::string sft = cell(r.sft_pass1);
      if (rl) sft.resize(17, ' ');
      std::cout << name << base << sft << (rl ? cell(r.rl_pass1) : "") << "\n";
    }
    std::cout << "report: " << r.report_path << " (" << format_fixed(r.seconds / 60, 1)
              << " min)\n";
  });
}

}  // namespace trex::cli
