// `trex or demo-data`: the data of `trex demo` (docs/demo.md).
#include <unistd.h>

#include <iostream>
#include <memory>

#include "trex/cli/commands.hpp"
#include "trex/core/strings.hpp"
#include "trex/demo/demo_data.hpp"

namespace trex::cli {

void add_or_demo_data_command(CLI::App& or_app) {
  using namespace trex::demo;
  struct Settings {
    DemoDataOptions options;
    std::string train_families, heldout_families, public_files;
    // -1: the preset's value.
    int64_t sft_train = -1, sft_val = -1, test = -1, heldout_template = -1, heldout_family = -1,
            public_items = -1, cpt_problems = -1, max_chars = -1, copy_drills = -1;
    double side_constraint_rate = -1, renamed_share = -1;
    int jobs = -1;
    bool quiet = false;
  };
  auto st = std::make_shared<Settings>();
  auto* c = or_app.add_subcommand(
      "demo-data", "Build the data of `trex demo`: compact SFT set, CPT corpus, eval splits");
  c->add_option("--out", st->options.out_dir, "Output directory")->required();
  c->add_option("--preset", st->options.preset, "Size table: default|full")
      ->check(CLI::IsMember({"default", "full"}))
      ->capture_default_str();
  c->add_option("--seed", st->options.seed, "Random seed")->capture_default_str();
  c->add_option("--train-families", st->train_families,
                "Comma-separated trained families (default: the preset's list)");
  c->add_option("--heldout-families", st->heldout_families,
                "Comma-separated families never trained (default: the preset's list)");
  c->add_option("--difficulty", st->options.difficulty, "easy|medium|hard")
      ->check(CLI::IsMember({"easy", "medium", "hard"}))
      ->capture_default_str();
  c->add_option("--sft-train", st->sft_train, "SFT training records");
  c->add_option("--sft-val", st->sft_val, "SFT validation records (also val.jsonl)");
  c->add_option("--test", st->test, "Test items (trained families and templates)");
  c->add_option("--heldout-template", st->heldout_template, "Held-out-template items");
  c->add_option("--heldout-family", st->heldout_family, "Held-out-family items");
  c->add_option("--public", st->public_items, "Public benchmark items (0: none)");
  c->add_option("--cpt-problems", st->cpt_problems, "Problems behind the CPT corpus");
  c->add_option("--max-chars", st->max_chars, "Longest prompt + target in characters (0: any)");
  c->add_option("--copy-drills", st->copy_drills,
                "CPT copy drills per trained problem (question span -> its values in order)");
  c->add_option("--renamed-share", st->renamed_share,
                "Share of trained problems whose named entities get invented or other pools' "
                "names (evaluated problems never do)")
      ->check(CLI::Range(0.0, 1.0));
  c->add_option("--side-constraints", st->side_constraint_rate,
                "Probability of each optional side constraint");
  c->add_option("--bench-dir", st->options.bench_dir, "Benchmark directory for the public slice")
      ->capture_default_str();
  c->add_option("--public-files", st->public_files,
                "Comma-separated benchmark file stems for the public slice");
  c->add_option("--jobs", st->jobs, "Worker processes (default: one per core; 0 = in-process)");
  c->add_flag("--quiet", st->quiet, "No progress or summary");
  c->callback([st] {
    DemoDataOptions o = st->options;
    o.sizes = demo_preset_sizes(o.preset);
    auto pick = [](int64_t given, auto& field) {
      if (given >= 0) field = static_cast<std::remove_reference_t<decltype(field)>>(given);
    };
    pick(st->sft_train, o.sizes.sft_train);
    pick(st->sft_val, o.sizes.sft_val);
    pick(st->test, o.sizes.test);
    pick(st->heldout_template, o.sizes.heldout_template);
    pick(st->heldout_family, o.sizes.heldout_family);
    pick(st->public_items, o.sizes.public_items);
    pick(st->cpt_problems, o.sizes.cpt_problems);
    pick(st->max_chars, o.sizes.max_chars);
    pick(st->copy_drills, o.sizes.copy_drills);
    if (st->side_constraint_rate >= 0) o.sizes.side_constraint_rate = st->side_constraint_rate;
    if (st->renamed_share >= 0) o.sizes.renamed_share = st->renamed_share;
    auto list = [](const std::string& text) {
      std::vector<std::string> out;
      for (const auto& part : split(text, ','))
        if (!trim(part).empty()) out.push_back(trim(part));
      return out;
    };
    o.train_families = list(st->train_families);
    o.heldout_families = list(st->heldout_families);
    o.public_files = list(st->public_files);
    o.jobs =
        st->jobs >= 0 ? st->jobs : static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
    o.show_progress = !st->quiet;
    DemoDataSummary summary = build_demo_data(o);
    if (!st->quiet) {
      std::vector<std::string> parts;
      for (const auto& [name, count] : summary.split_sizes)
        parts.push_back(name + " " + std::to_string(count));
      int64_t renamed = 0;
      for (const auto& [source, count] : summary.renamed) renamed += count;
      std::cout << "wrote " << join(parts, ", ") << "; CPT " << summary.cpt_documents
                << " documents (" << summary.cpt_bytes << " bytes); " << summary.verified_solves
                << " targets re-solved; " << renamed << " trained problems renamed; "
                << format_fixed(summary.seconds, 1) << " s; summary: " << o.out_dir
                << "/summary.json\n";
    }
  });
}

}  // namespace trex::cli
