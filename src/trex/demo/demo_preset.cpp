#include "trex/demo/demo_preset.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <set>

#include "trex/core/atomic_file.hpp"
#include "trex/core/config_reader.hpp"
#include "trex/core/error.hpp"
#include "trex/core/strings.hpp"

namespace trex::demo {
namespace fs = std::filesystem;

namespace {

// Every key of a preset file is required, so a file states every value the demo
// uses; each section rejects the keys it did not read.
using config::Range;
using config::Reader;

std::string word(const Reader& r, const std::string& key,
                 const std::set<std::string>& allowed = {}) {
  std::string value = r.string(key);
  if (value.empty()) r.fail(key, "must not be empty");
  if (!allowed.empty() && !allowed.count(value))
    r.fail(key, "must be one of " + join({allowed.begin(), allowed.end()}, ", ") + ", got \"" +
                    value + "\"");
  return value;
}

std::vector<std::string> words(const Reader& r, const std::string& key) {
  const Reader array = r.array(key);
  std::vector<std::string> out;
  for (size_t i = 0; i < array.size(); ++i) out.push_back(array[i].as_string());
  return out;
}

// A file path, relative to `base_dir` unless absolute; the file must exist.
std::string existing_file(const Reader& r, const std::string& key, const fs::path& base_dir) {
  const std::string value = word(r, key);
  const fs::path path =
      (fs::path(value).is_absolute() ? fs::path(value) : base_dir / value).lexically_normal();
  if (!fs::is_regular_file(path)) r.fail(key, "file not found: " + path.string());
  return path.string();
}

int64_t at_least(const Reader& r, const std::string& key, int64_t min) {
  return r.integer(key, Range<int64_t>::at_least(min));
}

// A learning rate: in (0, 1].
double rate(const Reader& r, const std::string& key) {
  return r.number(key, Range<double>{0.0, 1.0, true});
}

void read_data(const Reader& data, DemoPreset& p) {
  p.data_preset = word(data, "size_table");
  p.difficulty = word(data, "difficulty", {"easy", "medium", "hard"});
  p.sizes.sft_train = at_least(data, "sft_train", 1);
  p.sizes.sft_val = at_least(data, "sft_val", 1);
  p.sizes.test = at_least(data, "test", 0);
  p.sizes.heldout_template = at_least(data, "heldout_template", 0);
  p.sizes.heldout_family = at_least(data, "heldout_family", 0);
  p.sizes.public_items = at_least(data, "public_items", 0);
  p.sizes.cpt_problems = at_least(data, "cpt_problems", 0);
  p.sizes.side_constraint_rate =
      data.number("side_constraint_rate", Range<double>::between(0.0, 1.0));
  p.sizes.max_chars = static_cast<size_t>(at_least(data, "max_chars", 0));
  p.sizes.copy_drills = data.integer<int>("copy_drills", Range<int>::at_least(0));
  p.sizes.renamed_share = data.number("renamed_share", Range<double>::between(0.0, 1.0));
  p.train_families = words(data, "train_families");
  p.heldout_families = words(data, "heldout_families");
  p.public_files = words(data, "public_files");
  data.reject_unknown();
}

nlohmann::json read_model_config(const std::string& path) {
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("invalid JSON: ") + e.what()).file(path);
  }
}

bool names_a_file(const std::string& name_or_path) {
  return name_or_path.find('/') != std::string::npos ||
         fs::path(name_or_path).extension() == ".toml";
}

}  // namespace

std::string find_config_dir(const std::string& explicit_dir) {
  if (!explicit_dir.empty()) return explicit_dir;
  if (const char* env = std::getenv("TREX_CONFIG_DIR"); env && *env) return env;
  std::vector<fs::path> candidates = {fs::current_path() / "configs"};
  std::error_code error;
  const fs::path executable = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    candidates.push_back(executable.parent_path() / "configs");
    candidates.push_back(executable.parent_path().parent_path() / "configs");
  }
  std::vector<std::string> looked;
  for (const fs::path& dir : candidates) {
    const std::string name = dir.lexically_normal().string();
    if (fs::is_directory(dir / "demo", error)) return name;
    if (std::find(looked.begin(), looked.end(), name) == looked.end()) looked.push_back(name);
  }
  throw Error("no configs folder with demo presets found (looked in " + join(looked, ", ") +
              "); run from the repository root, or give --config-dir or TREX_CONFIG_DIR")
      .field("config_dir");
}

DemoPreset load_demo_preset(const std::string& path) {
  if (!fs::is_regular_file(path)) throw Error("demo preset file not found").file(path);
  const config::Document document = config::Document::load(path, config::Format::kToml);
  const fs::path base_dir = fs::path(path).parent_path();
  DemoPreset p;
  p.name = path;
  const Reader root = document.root();
  read_data(root.object("data"), p);
  {
    const Reader model = root.object("model");
    p.model_config = read_model_config(existing_file(model, "config", base_dir));
    model.reject_unknown();
  }
  {
    const Reader tokenizer = root.object("tokenizer");
    p.vocab_size = at_least(tokenizer, "vocab_size", 1);
    p.bare_words = tokenizer.boolean("bare_words");
    tokenizer.reject_unknown();
  }
  {
    const Reader training = root.object("training");
    p.bf16 = word(training, "precision", {"bf16", "fp32"}) == "bf16";
    p.warmup_steps = at_least(training, "lr_warmup_steps", 0);
    p.checkpoint_interval = at_least(training, "checkpoint_interval", 0);
    training.reject_unknown();
  }
  {
    const Reader warmup = root.object("copy_warmup");
    p.copy_warmup_steps = at_least(warmup, "steps", 0);
    p.copy_warmup_seq_len = at_least(warmup, "seq_len", 2);
    p.copy_warmup_batch = at_least(warmup, "batch", 1);
    warmup.reject_unknown();
  }
  {
    const Reader cpt = root.object("cpt");
    p.cpt_steps = at_least(cpt, "steps", 0);
    p.seq_len = at_least(cpt, "seq_len", 2);
    p.micro_batch = at_least(cpt, "micro_batch", 1);
    p.global_batch = at_least(cpt, "global_batch", 1);
    p.cpt_lr = rate(cpt, "peak_lr");
    cpt.reject_unknown();
  }
  {
    const Reader sft = root.object("sft");
    p.sft_steps = at_least(sft, "steps", 0);
    p.sft_seq_len = at_least(sft, "seq_len", 2);
    p.sft_micro_batch = at_least(sft, "micro_batch", 1);
    p.sft_global_batch = at_least(sft, "global_batch", 1);
    p.sft_lr = rate(sft, "peak_lr");
    p.val_pass_evals = at_least(sft, "val_pass_evals", 1);
    sft.reject_unknown();
  }
  {
    const Reader generation = root.object("generation");
    p.max_new_tokens = at_least(generation, "max_new_tokens", 1);
    generation.reject_unknown();
  }
  if (root.has("rl")) {
    const Reader rl = root.object("rl");
    p.rl_steps = at_least(rl, "steps", 0);
    p.rl_prompts_per_step = at_least(rl, "prompts_per_step", 1);
    p.rl_group_size = at_least(rl, "group_size", 2);
    p.rl_temperature = rl.number("temperature", Range<double>{0.0, 2.0, true});
    p.rl_lr = rate(rl, "peak_lr");
    p.rl_val_evals = at_least(rl, "val_evals", 1);
    rl.reject_unknown();
  }
  root.reject_unknown();
  return p;
}

DemoPreset demo_preset(const std::string& name_or_path, const std::string& config_dir) {
  const std::string path = names_a_file(name_or_path)
                               ? name_or_path
                               : find_config_dir(config_dir) + "/demo/" + name_or_path + ".toml";
  if (!names_a_file(name_or_path) && !fs::is_regular_file(path))
    throw Error("unknown demo preset '" + name_or_path + "': no " + path +
                " (default, full or smoke, or a preset file)")
        .field("preset");
  DemoPreset p = load_demo_preset(path);
  p.name = name_or_path;
  return p;
}

DemoPreset with_bare_words(DemoPreset p) {
  p.bare_words = true;
  const int64_t window = p.model_config.at("sliding_window").get<int64_t>();
  p.model_config["sliding_window"] = std::max<int64_t>(window, 1024);
  auto longer_rows = [](int64_t& seq_len, int64_t& micro, int64_t& global) {
    if (global % 2 != 0) return;  // keep the rows when the batch cannot halve
    seq_len *= 2;
    global /= 2;
    micro = std::gcd(micro, global);
  };
  longer_rows(p.seq_len, p.micro_batch, p.global_batch);
  longer_rows(p.sft_seq_len, p.sft_micro_batch, p.sft_global_batch);
  p.max_new_tokens = p.max_new_tokens * 5 / 4;
  return p;
}

}  // namespace trex::demo
