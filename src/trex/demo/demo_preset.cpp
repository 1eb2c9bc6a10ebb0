#include "trex/demo/demo_preset.hpp"

#include <toml++/toml.h>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <numeric>
#include <set>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/strings.hpp"

namespace trex::demo {
namespace fs = std::filesystem;

namespace {

// One table of a preset file. Every key is required, so a preset file states
// every value the demo uses; each read marks its key, and the keys left over
// are reported as unknown. Errors name the file, the line and the key path.
class PresetTable {
 public:
  PresetTable(const toml::table& table, std::string file, std::string path)
      : table_(table), file_(std::move(file)), path_(std::move(path)) {}

  PresetTable table(const std::string& key) {
    const toml::node& node = at(key);
    if (!node.is_table()) fail(key, node, "expected a table ([" + key_path(key) + "])");
    return PresetTable(*node.as_table(), file_, key_path(key));
  }
  int64_t integer(const std::string& key, int64_t min,
                  int64_t max = std::numeric_limits<int64_t>::max()) {
    const toml::node& node = at(key);
    if (!node.is_integer()) fail(key, node, "expected an integer");
    const int64_t value = node.as_integer()->get();
    if (value < min) fail(key, node, "must be >= " + std::to_string(min));
    if (value > max) fail(key, node, "must be <= " + std::to_string(max));
    return value;
  }
  // A finite number with min < value <= max (min_inclusive: min <= value).
  double number(const std::string& key, double min, double max, bool min_inclusive) {
    const toml::node& node = at(key);
    if (!node.is_floating_point() && !node.is_integer()) fail(key, node, "expected a number");
    const double value = node.is_integer() ? static_cast<double>(node.as_integer()->get())
                                           : node.as_floating_point()->get();
    if (!(min_inclusive ? value >= min : value > min) || !(value <= max))
      fail(key, node,
           "must be in " + std::string(min_inclusive ? "[" : "(") + format_number(min) + ", " +
               format_number(max) + "]");
    return value;
  }
  bool boolean(const std::string& key) {
    const toml::node& node = at(key);
    if (!node.is_boolean()) fail(key, node, "expected true or false");
    return node.as_boolean()->get();
  }
  std::string string(const std::string& key, const std::set<std::string>& allowed = {}) {
    const toml::node& node = at(key);
    if (!node.is_string()) fail(key, node, "expected a string");
    std::string value = node.as_string()->get();
    if (value.empty()) fail(key, node, "must not be empty");
    if (!allowed.empty() && !allowed.count(value))
      fail(key, node,
           "must be one of " + join({allowed.begin(), allowed.end()}, ", ") + ", got \"" + value +
               "\"");
    return value;
  }
  std::vector<std::string> strings(const std::string& key) {
    const toml::node& node = at(key);
    const toml::array* array = node.as_array();
    if (!array) fail(key, node, "expected an array of strings");
    std::vector<std::string> out;
    for (const toml::node& element : *array) {
      if (!element.is_string()) fail(key, element, "expected an array of strings");
      out.push_back(element.as_string()->get());
    }
    return out;
  }

  // A file path, relative to `base_dir` unless absolute; the file must exist.
  std::string existing_file(const std::string& key, const fs::path& base_dir) {
    const std::string value = string(key);
    const fs::path path =
        (fs::path(value).is_absolute() ? fs::path(value) : base_dir / value).lexically_normal();
    if (!fs::is_regular_file(path)) fail(key, at(key), "file not found: " + path.string());
    return path.string();
  }

  void reject_unknown() const {
    for (const auto& [key, node] : table_)
      if (!used_.count(std::string(key.str()))) fail(std::string(key.str()), node, "unknown key");
  }

 private:
  const toml::node& at(const std::string& key) {
    used_.insert(key);
    const toml::node* node = table_.get(key);
    if (!node)
      throw Error("missing key (a preset file gives every value)")
          .file(file_)
          .line(static_cast<long>(table_.source().begin.line))
          .field(key_path(key));
    return *node;
  }
  std::string key_path(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }
  [[noreturn]] void fail(const std::string& key, const toml::node& node,
                         const std::string& message) const {
    throw Error(message)
        .file(file_)
        .line(static_cast<long>(node.source().begin.line))
        .field(key_path(key));
  }

  const toml::table& table_;
  std::string file_;
  std::string path_;
  std::set<std::string> used_;
};

void read_data(PresetTable data, DemoPreset& p) {
  p.data_preset = data.string("size_table");
  p.difficulty = data.string("difficulty", {"easy", "medium", "hard"});
  p.sizes.sft_train = data.integer("sft_train", 1);
  p.sizes.sft_val = data.integer("sft_val", 1);
  p.sizes.test = data.integer("test", 0);
  p.sizes.heldout_template = data.integer("heldout_template", 0);
  p.sizes.heldout_family = data.integer("heldout_family", 0);
  p.sizes.public_items = data.integer("public_items", 0);
  p.sizes.cpt_problems = data.integer("cpt_problems", 0);
  p.sizes.side_constraint_rate = data.number("side_constraint_rate", 0.0, 1.0, true);
  p.sizes.max_chars = static_cast<size_t>(data.integer("max_chars", 0));
  p.sizes.copy_drills =
      static_cast<int>(data.integer("copy_drills", 0, std::numeric_limits<int>::max()));
  p.train_families = data.strings("train_families");
  p.heldout_families = data.strings("heldout_families");
  p.public_files = data.strings("public_files");
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
  toml::table root_table;
  try {
    root_table = toml::parse(read_file(path), path);
  } catch (const toml::parse_error& e) {
    throw Error(std::string("invalid TOML: ") + std::string(e.description()))
        .file(path)
        .line(static_cast<long>(e.source().begin.line));
  }
  const fs::path base_dir = fs::path(path).parent_path();
  DemoPreset p;
  p.name = path;
  PresetTable root(root_table, path, "");
  read_data(root.table("data"), p);
  {
    PresetTable model = root.table("model");
    p.model_config = read_model_config(model.existing_file("config", base_dir));
    model.reject_unknown();
  }
  {
    PresetTable tokenizer = root.table("tokenizer");
    p.vocab_size = tokenizer.integer("vocab_size", 1);
    p.bare_words = tokenizer.boolean("bare_words");
    tokenizer.reject_unknown();
  }
  {
    PresetTable training = root.table("training");
    p.bf16 = training.string("precision", {"bf16", "fp32"}) == "bf16";
    p.warmup_steps = training.integer("lr_warmup_steps", 0);
    p.checkpoint_interval = training.integer("checkpoint_interval", 0);
    training.reject_unknown();
  }
  {
    PresetTable warmup = root.table("copy_warmup");
    p.copy_warmup_steps = warmup.integer("steps", 0);
    p.copy_warmup_seq_len = warmup.integer("seq_len", 2);
    p.copy_warmup_batch = warmup.integer("batch", 1);
    warmup.reject_unknown();
  }
  {
    PresetTable cpt = root.table("cpt");
    p.cpt_steps = cpt.integer("steps", 0);
    p.seq_len = cpt.integer("seq_len", 2);
    p.micro_batch = cpt.integer("micro_batch", 1);
    p.global_batch = cpt.integer("global_batch", 1);
    p.cpt_lr = cpt.number("peak_lr", 0.0, 1.0, false);
    cpt.reject_unknown();
  }
  {
    PresetTable sft = root.table("sft");
    p.sft_steps = sft.integer("steps", 0);
    p.sft_seq_len = sft.integer("seq_len", 2);
    p.sft_micro_batch = sft.integer("micro_batch", 1);
    p.sft_global_batch = sft.integer("global_batch", 1);
    p.sft_lr = sft.number("peak_lr", 0.0, 1.0, false);
    p.val_pass_evals = sft.integer("val_pass_evals", 1);
    sft.reject_unknown();
  }
  {
    PresetTable generation = root.table("generation");
    p.max_new_tokens = generation.integer("max_new_tokens", 1);
    generation.reject_unknown();
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
