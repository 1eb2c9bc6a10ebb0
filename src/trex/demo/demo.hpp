#pragma once
// `trex demo`: the mission end to end on an embedded default (docs/demo.md).
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
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "trex/demo/demo_data.hpp"

namespace trex::demo {

// Everything a preset fixes. `default` fits the 20-minute budget on two cores;
// `full` trains for hours on the 10K SFT set; `smoke` is the seconds-long
// configuration the tests run.
struct DemoPreset {
  std::string name;
  std::string data_preset;  // demo-data preset the sizes start from
  demo::DemoSizes sizes;
  nlohmann::json model_config;  // released key scheme; vocab/bos/eos set from the tokenizer
  int64_t vocab_size = 4096;    // an upper bound: BPE stops when no pair repeats
  // Word pre-tokens without a leading space (io::deepseek_v3_pre_tokenizer_json):
  // `face mask` in a question and `face_mask` in its model share the tokens
  // `face` and `mask`, so copying a name is an identity over token ids; the
  // DeepSeek-V3 split gives ` mask` and `_mask` (and `Warren` vs ` Warren` at
  // a line start), a map the model must learn per word. Off in the presets
  // until a full run measures it (docs/demo.md); with_bare_words() turns it on.
  bool bare_words = false;
  // CPT packs documents back to back into rows of `seq_len`; SFT packs whole
  // examples into rows of `sft_seq_len` (a 1024-token row holds 2-3 pairs of
  // ~400 tokens, where a 512-token row holds one and pads the rest).
  int64_t seq_len = 512;
  int64_t micro_batch = 4;
  int64_t global_batch = 8;
  int64_t sft_seq_len = 1024;
  int64_t sft_micro_batch = 2;
  int64_t sft_global_batch = 4;
  bool bf16 = true;  // bf16 GEMM compute, fp32 master weights (docs/training.md)
  // The copy warm-up: steps on the CPT corpus's copy drills alone, from random
  // init, before the OR CPT starts from its checkpoint. On drills alone the
  // model learns to copy a question's values (83 % of drill values at 300
  // steps, 99 % at 700; docs/demo.md), a lookup that mixed CPT + SFT had not
  // formed in 1,600 steps. Needs sizes.copy_drills > 0.
  int64_t copy_warmup_steps = 0;
  int64_t copy_warmup_seq_len = 256;  // rows of several drills (1-3 sentences + values each)
  int64_t copy_warmup_batch = 8;
  int64_t cpt_steps = 0;
  int64_t sft_steps = 0;
  double cpt_lr = 3e-3;
  double sft_lr = 2e-3;
  int64_t warmup_steps = 10;
  int64_t val_pass_evals = 3;  // validation Pass@1 measurements during SFT
  int64_t max_new_tokens = 384;
  int64_t checkpoint_interval = 25;
};
DemoPreset demo_preset(std::string_view name);  // default | full | smoke; throws trex::Error
// The preset with the bare-words tokenizer and what its ~50% longer token
// sequences need: a window over a whole pair (>= 1024), CPT and SFT rows twice
// as long with half as many per step (the same tokens per step, one pair of
// ~580 tokens per 1024-token row would pad ~40%), answers up to 5/4 as long.
DemoPreset with_bare_words(DemoPreset preset);

struct DemoOptions {
  std::string out_dir = "out/demo";
  std::string preset = "default";
  uint64_t seed = 1;
  int64_t cpt_steps = -1;  // >= 0 overrides the preset
  int64_t sft_steps = -1;
  int64_t copy_warmup_steps = -1;  // >= 0 overrides the preset (0: no warm-up)
  double cpt_lr = -1;              // > 0 overrides the preset's peak learning rate
  double sft_lr = -1;
  int64_t sft_global_batch = -1;                 // > 0 overrides the preset's SFT rows per step
  bool bare_words = false;                       // with_bare_words(preset)
  int copy_drills = -1;                          // >= 0 overrides the preset's CPT copy drills
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
  double seconds = 0.0;
};

// Under `mpirun -np N` every rank calls this (collective): training is data
// parallel over the ranks, generation split; rank 0 writes the data and report.
DemoResult run_demo(const DemoOptions& options);

}  // namespace trex::demo
