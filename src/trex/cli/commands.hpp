#pragma once
#include <CLI/CLI.hpp>

namespace trex::cli {

void add_or_commands(CLI::App& app);
void add_or_eval_commands(CLI::App& or_app);
void add_or_data_commands(CLI::App& or_app);
void add_demo_command(CLI::App& app);
void add_forward_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_model_commands(CLI::App& app);
void add_tokenizer_commands(CLI::App& app);
void add_plan_commands(CLI::App& app);
void add_bench_commands(CLI::App& app);
void add_train_commands(CLI::App& app);  // train + export

// Runs `or synth` with the given settings and writes FILE + FILE's summary.
struct SynthCliOptions {
  int64_t n = 100;
  std::string families = "all";
  uint64_t seed = 1;
  std::string out;
  std::string shard = "0/1";
  std::string difficulty = "mix";
  int jobs = -1;  // -1: one per core
  double time_limit = 20.0;
  bool reproducible = false;
  bool quiet = false;
};
int run_synth_command(const SynthCliOptions& options);

}  // namespace trex::cli
