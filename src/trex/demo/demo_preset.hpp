#pragma once
// The presets of `trex demo`: TOML files, configs/demo/{smoke,default,full}.toml
// (every key explained there and in docs/demo.md), read into a DemoPreset.
// `--preset NAME` picks configs/demo/NAME.toml; a value that names a .toml file
// or holds a '/' is that file. The configs folder is found by
// find_config_dir().
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trex/demo/demo_data.hpp"

namespace trex::demo {

// Everything a preset fixes. `default` fits the 20-minute budget on two cores;
// `full` trains for hours on the 10K SFT set; `smoke` is the seconds-long
// configuration the tests run.
struct DemoPreset {
  std::string name;  // as given to --preset: a name or a file path
  // [data]: what `trex or demo-data` builds (DemoDataOptions).
  std::string data_preset;  // the size table the sizes start from; data/summary.json "preset"
  DemoSizes sizes;
  std::vector<std::string> train_families, heldout_families, public_files;
  std::string difficulty;
  // [model]: the released key scheme; vocab/bos/eos are set from the tokenizer.
  nlohmann::json model_config;
  // [tokenizer]
  int64_t vocab_size = 0;  // an upper bound: BPE stops when no pair repeats
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
  int64_t seq_len = 0;
  int64_t micro_batch = 0;
  int64_t global_batch = 0;
  int64_t sft_seq_len = 0;
  int64_t sft_micro_batch = 0;
  int64_t sft_global_batch = 0;
  bool bf16 = false;  // bf16 GEMM compute, fp32 master weights (docs/training.md)
  // The copy warm-up: steps on the CPT corpus's copy drills alone, from random
  // init, before the OR CPT starts from its checkpoint. On drills alone the
  // model learns to copy a question's values (83 % of drill values at 300
  // steps, 99 % at 700; docs/demo.md), a lookup that mixed CPT + SFT had not
  // formed in 1,600 steps. Needs sizes.copy_drills > 0.
  int64_t copy_warmup_steps = 0;
  int64_t copy_warmup_seq_len = 0;  // rows of several drills (1-3 sentences + values each)
  int64_t copy_warmup_batch = 0;
  int64_t cpt_steps = 0;
  int64_t sft_steps = 0;
  double cpt_lr = 0.0;  // also the copy warm-up's
  double sft_lr = 0.0;
  int64_t warmup_steps = 0;    // learning-rate warm-up of every stage
  int64_t val_pass_evals = 0;  // validation Pass@1 measurements during SFT
  int64_t max_new_tokens = 0;
  int64_t checkpoint_interval = 0;
  // [rl] (optional; none or steps = 0: no RL stage): GRPO with the solver reward
  // from the SFT model on the SFT training problems (docs/rl.md).
  int64_t rl_steps = 0;
  int64_t rl_prompts_per_step = 8;
  int64_t rl_group_size = 8;
  double rl_temperature = 0.7;
  double rl_lr = 5e-5;
  int64_t rl_val_evals = 3;  // validation Pass@1 measurements during RL (and one before)
};

// The configs folder: `explicit_dir` when given, else $TREX_CONFIG_DIR, else
// the first `configs` folder with a demo/ in it of: the working directory, the
// executable's directory and its parent (build/trex run from anywhere).
// Throws trex::Error naming the places it looked.
std::string find_config_dir(const std::string& explicit_dir = "");

// Reads a preset file; relative paths in it are relative to its directory.
// Throws trex::Error naming the file, line and key (missing, unknown, bad).
DemoPreset load_demo_preset(const std::string& path);

// `name_or_path`: default | full | smoke (or any NAME with a
// <configs>/demo/NAME.toml), or a path to a preset file (ends in .toml or
// holds a '/'). `config_dir` as for find_config_dir(). Throws trex::Error.
DemoPreset demo_preset(const std::string& name_or_path, const std::string& config_dir = "");

// The preset with the bare-words tokenizer and what its ~50% longer token
// sequences need: a window over a whole pair (>= 1024), CPT and SFT rows twice
// as long with half as many per step (the same tokens per step, one pair of
// ~580 tokens per 1024-token row would pad ~40%), answers up to 5/4 as long.
DemoPreset with_bare_words(DemoPreset preset);

}  // namespace trex::demo
