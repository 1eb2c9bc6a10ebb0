#pragma once
// `trex demo`: the mission end to end on a preset file (docs/demo.md).
// Stages, each resumable (a rerun with the same out dir skips finished work and
// continues interrupted training from its last checkpoint):
//   data      solver-verified OR problems -> compact SFT set, CPT corpus, eval splits
//   tokenizer byte-level BPE trained on the CPT corpus (digits in groups of <= 3)
//   warm-up   (presets with copy_warmup_steps) a small DeepSeek-V4 from scratch
//             on the corpus's copy drills alone: the question-to-data lookup
//   cpt       the model (from the warm-up, else from scratch) on the CPT corpus
//   base      zero-shot generation + `trex or eval` of the CPT-only model
//   sft       SFT from the CPT checkpoint, with a validation Pass@1 at intervals
//   final     zero-shot generation + `trex or eval` of the SFT model
//   report    report.md with the Pass@1 table, loss curves (SVG), throughput, MFU
#include <cstdint>
#include <map>
#include <string>

#include "trex/demo/demo_preset.hpp"

namespace trex::demo {

struct DemoOptions {
  std::string out_dir = "out/demo";
  std::string preset = "default";  // a name (configs/demo/NAME.toml) or a preset file
  std::string config_dir;          // empty: find_config_dir()'s search
  uint64_t seed = 1;
  int64_t cpt_steps = -1;  // >= 0 overrides the preset
  int64_t sft_steps = -1;
  int64_t rl_steps = -1;           // >= 0 overrides the preset's GRPO steps (0: no RL stage)
  int64_t copy_warmup_steps = -1;  // >= 0 overrides the preset (0: no warm-up)
  double cpt_lr = -1;              // > 0 overrides the preset's peak learning rate
  double sft_lr = -1;
  int64_t sft_global_batch = -1;                 // > 0 overrides the preset's SFT rows per step
  bool bare_words = false;                       // with_bare_words(preset)
  int copy_drills = -1;                          // >= 0 overrides the preset's CPT copy drills
  double renamed_share = -1;                     // >= 0 overrides the preset's renamed share
  int64_t val_evals = -1;                        // >= 1 overrides the validation Pass@1 points
  std::string bench_dir = "../shared/or_bench";  // missing: no public slice
  int jobs = 2;                                  // data build and grading workers
  double peak_gflops = 0.0;                      // <= 0: measured once at start
  bool quiet = false;
};

struct DemoResult {
  bool root = true;  // rank 0 of `mpirun -np N trex demo` (prints; the others are silent)
  std::string report_path;
  std::map<std::string, double> base_pass1, sft_pass1;  // split -> percent
  std::map<std::string, double> rl_pass1;               // empty without an RL stage
  double seconds = 0.0;
};

// The preset run_demo() trains: options.preset's file with the command-line
// overrides applied (they win over the file). Throws trex::Error naming the
// file or the option.
DemoPreset resolve_demo_preset(const DemoOptions& options);

// Under `mpirun -np N` every rank calls this (collective): training is data
// parallel over the ranks, generation split; rank 0 writes the data and report.
DemoResult run_demo(const DemoOptions& options);

}  // namespace trex::demo
