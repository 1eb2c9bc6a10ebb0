// `trex demo`: the end-to-end job on its embedded default. Today it covers the
// data stage (solver-verified OR problems); later stages join as they land.
#include <iostream>

#include "trex/cli/commands.hpp"

namespace trex::cli {

void add_demo_command(CLI::App& app) {
  auto options = std::make_shared<SynthCliOptions>();
  options->n = 220;
  options->out = "out/demo/problems.jsonl";
  auto* demo = app.add_subcommand("demo", "Run the end-to-end demo on its embedded default");
  demo->add_option("--out-dir", options->out, "Where the problems file goes")->capture_default_str();
  demo->add_option("--n", options->n, "Problems to synthesise")->capture_default_str();
  demo->add_option("--seed", options->seed, "Random seed")->capture_default_str();
  demo->callback([options] {
    std::cout << "== T-Rex demo: synthesise solver-verified OR problems (all families, mixed difficulty)\n";
    run_synth_command(*options);
  });
}

}  // namespace trex::cli
