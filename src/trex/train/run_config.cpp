#include "trex/train/run_config.hpp"

#include <toml++/toml.h>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"

namespace trex::train {
namespace {

// Reads the keys of one JSON object, remembering which were consumed so the
// rest can be reported as unknown. Errors carry the file and the key path.
class Section {
 public:
  Section(const nlohmann::json& json, std::string origin, std::string path)
      : json_(json), origin_(std::move(origin)), path_(std::move(path)) {
    if (!json_.is_object()) throw Error("expected a JSON object").file(origin_).field(where());
  }

  bool has(const std::string& key) const { return json_.contains(key); }
  std::string key_path(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }

  template <class T>
  void read(const std::string& key, T& out) {
    used_.insert(key);
    if (!json_.contains(key)) return;
    const nlohmann::json& v = json_.at(key);
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) fail(key, "expected true or false");
      out = v.get<bool>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!v.is_string()) fail(key, "expected a string");
      out = v.get<std::string>();
    } else if constexpr (std::is_floating_point_v<T>) {
      // TOML has inf and nan; JSON (what to_json() writes back) has neither.
      if (!v.is_number() || !std::isfinite(v.get<double>())) fail(key, "expected a finite number");
      out = v.get<double>();
    } else if constexpr (std::is_unsigned_v<T>) {
      if (v.is_string()) {  // 64-bit seeds may be written as decimal strings
        try {
          size_t used = 0;
          out = std::stoull(v.get<std::string>(), &used);
          if (used != v.get<std::string>().size()) fail(key, "expected a non-negative integer");
        } catch (const std::logic_error&) {
          fail(key, "expected a non-negative integer");
        }
        return;
      }
      if (!v.is_number_integer() ||
          (v.is_number_integer() && v.get<int64_t>() < 0 && !v.is_number_unsigned()))
        fail(key, "expected a non-negative integer");
      out = v.get<T>();
    } else {
      if (!v.is_number_integer()) fail(key, "expected an integer");
      out = v.get<T>();
    }
  }

  // The raw value of `key` (null when absent), marked as consumed.
  const nlohmann::json* raw(const std::string& key) {
    used_.insert(key);
    return json_.contains(key) ? &json_.at(key) : nullptr;
  }

  Section child(const std::string& key) {
    used_.insert(key);
    static const nlohmann::json kEmpty = nlohmann::json::object();
    return Section(json_.contains(key) ? json_.at(key) : kEmpty, origin_, key_path(key));
  }

  void reject_unknown() const {
    for (const auto& [key, value] : json_.items())
      if (!used_.count(key)) fail(key, "unknown key");
  }

  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    throw Error(message).file(origin_).field(key_path(key));
  }

 private:
  std::string where() const { return path_.empty() ? "<root>" : path_; }
  const nlohmann::json& json_;
  std::string origin_;
  std::string path_;
  std::set<std::string> used_;
};

std::string resolve(const std::string& base_dir, const std::string& path) {
  if (path.empty() || base_dir.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(base_dir) / path).lexically_normal().string();
}

}  // namespace

RunConfig RunConfig::from_json(const nlohmann::json& json, const std::string& origin,
                               const std::string& base_dir) {
  RunConfig c;
  Section root(json, origin, "");
  {
    Section m = root.child("model");
    m.read("config", c.model_config);
    m.read("seed", c.init_seed);
    m.read("init_checkpoint", c.init_checkpoint);
    m.reject_unknown();
  }
  root.read("tokenizer", c.tokenizer);
  {
    Section d = root.child("data");
    std::string mode = "cpt";
    d.read("mode", mode);
    if (mode == "cpt")
      c.mode = DataMode::kCpt;
    else if (mode == "sft")
      c.mode = DataMode::kSft;
    else
      d.fail("mode", "must be \"cpt\" or \"sft\", got \"" + mode + "\"");
    d.read("train", c.train_file);
    d.read("validation", c.validation_file);
    d.read("seed", c.data_seed);
    d.read("shuffle", c.shuffle);
    d.read("strict", c.data_strict);
    d.reject_unknown();
  }
  root.read("seq_len", c.seq_len);
  root.read("micro_batch", c.micro_batch);
  root.read("global_batch", c.global_batch);
  root.read("steps", c.steps);
  root.read("epochs", c.epochs);
  {
    Section o = root.child("optimizer");
    o.read("use_muon", c.optimizer.use_muon);
    Section a = o.child("adamw");
    a.read("beta1", c.optimizer.adamw.beta1);
    a.read("beta2", c.optimizer.adamw.beta2);
    a.read("eps", c.optimizer.adamw.eps);
    a.read("weight_decay", c.optimizer.adamw.weight_decay);
    a.reject_unknown();
    Section mu = o.child("muon");
    mu.read("momentum", c.optimizer.muon.momentum);
    mu.read("nesterov", c.optimizer.muon.nesterov);
    mu.read("ns_iterations", c.optimizer.muon.ns_iterations);
    mu.read("ns_tail_iterations", c.optimizer.muon.ns_tail_iterations);
    mu.read("rms_scale", c.optimizer.muon.rms_scale);
    mu.read("weight_decay", c.optimizer.muon.weight_decay);
    mu.reject_unknown();
    o.reject_unknown();
  }
  {
    Section s = root.child("schedule");
    s.read("peak_lr", c.peak_lr);
    s.read("min_lr", c.min_lr);
    s.read("warmup_steps", c.warmup_steps);
    s.reject_unknown();
  }
  root.read("clip", c.clip);
  {
    std::string precision = "fp32";
    root.read("precision", precision);
    if (precision == "fp32")
      c.precision = TrainPrecision::kFp32;
    else if (precision == "bf16")
      c.precision = TrainPrecision::kBf16;
    else
      root.fail("precision", "must be \"fp32\" or \"bf16\", got \"" + precision + "\"");
  }
  {
    Section l = root.child("loss");
    l.read("mtp_weight", c.mtp_weight);
    l.read("balance_weight", c.balance_weight);
    l.reject_unknown();
  }
  root.read("router_bias_speed", c.router_bias_speed);
  root.read("eval_interval", c.eval_interval);
  root.read("eval_batches", c.eval_batches);
  root.read("checkpoint_interval", c.checkpoint_interval);
  root.read("keep_checkpoints", c.keep_checkpoints);
  root.read("log_interval", c.log_interval);
  root.read("out_dir", c.out_dir);
  root.read("peak_gflops", c.peak_gflops);
  {
    Section g = root.child("spike");
    g.read("window", c.spike_window);
    g.read("z_threshold", c.spike_z_threshold);
    g.reject_unknown();
  }
  {
    Section dbg = root.child("debug");
    if (const nlohmann::json* inject = dbg.raw("inject")) {
      if (!inject->is_array()) dbg.fail("inject", "expected an array of strings");
      for (const auto& entry : *inject) {
        if (!entry.is_string()) dbg.fail("inject", "expected an array of strings");
        try {
          c.debug_inject.push_back(FaultInjection::parse(entry.get<std::string>()));
        } catch (const Error& e) {
          dbg.fail("inject", e.message());
        }
      }
    }
    dbg.reject_unknown();
  }
  {
    Section p = root.child("parallel");
    p.read("dp", c.parallel.dp);
    p.read("ep", c.parallel.ep);
    p.read("pp", c.parallel.pp);
    std::string schedule = "1f1b";
    p.read("pipeline_schedule", schedule);
    if (schedule == "1f1b")
      c.parallel.pipeline_schedule = parallel::PipelineSchedule::k1F1B;
    else if (schedule == "dualpipev")
      c.parallel.pipeline_schedule = parallel::PipelineSchedule::kDualPipeV;
    else
      p.fail("pipeline_schedule", "must be \"1f1b\" or \"dualpipev\", got \"" + schedule + "\"");
    p.read("zero", c.parallel.zero);
    p.read("bucket_mb", c.parallel.bucket_mb);
    p.read("overlap_grad_reduce", c.parallel.overlap_grad_reduce);
    p.read("ep_overlap", c.parallel.ep_overlap);
    p.read("expert_placement", c.parallel.expert_placement);
    p.reject_unknown();
  }
  root.reject_unknown();

  c.model_config = resolve(base_dir, c.model_config);
  c.init_checkpoint = resolve(base_dir, c.init_checkpoint);
  c.tokenizer = resolve(base_dir, c.tokenizer);
  c.train_file = resolve(base_dir, c.train_file);
  c.validation_file = resolve(base_dir, c.validation_file);
  c.out_dir = resolve(base_dir, c.out_dir);
  c.parallel.expert_placement = resolve(base_dir, c.parallel.expert_placement);
  c.validate(origin);
  return c;
}

namespace {

// TOML run configs use the same keys as JSON: the parsed table is converted to
// JSON and read by the one validating reader.
nlohmann::json toml_to_json(const toml::node& node) {
  if (const auto* table = node.as_table()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, value] : *table) out[std::string(key.str())] = toml_to_json(value);
    return out;
  }
  if (const auto* array = node.as_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& value : *array) out.push_back(toml_to_json(value));
    return out;
  }
  if (const auto* v = node.as_string()) return v->get();
  if (const auto* v = node.as_integer()) return v->get();
  if (const auto* v = node.as_floating_point()) return v->get();
  if (const auto* v = node.as_boolean()) return v->get();
  std::ostringstream text;  // dates and times: kept as their TOML text
  if (const auto* v = node.as_date()) text << v->get();
  if (const auto* v = node.as_time()) text << v->get();
  if (const auto* v = node.as_date_time()) text << v->get();
  return text.str();
}

bool is_toml_path(const std::string& path) {
  return std::filesystem::path(path).extension() == ".toml";
}

}  // namespace

RunConfig RunConfig::load(const std::string& path) {
  nlohmann::json json;
  if (is_toml_path(path)) {
    const std::string text = read_file(path);
    try {
      json = toml_to_json(toml::parse(text, path));
    } catch (const toml::parse_error& e) {
      throw Error(std::string("invalid TOML: ") + std::string(e.description()))
          .file(path)
          .line(static_cast<long>(e.source().begin.line));
    }
  } else {
    try {
      json = nlohmann::json::parse(read_file(path));
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
      throw Error(std::string("invalid JSON: ") + e.what()).file(path);
    }
  }
  return from_json(json, path, std::filesystem::path(path).parent_path().string());
}

void RunConfig::validate(const std::string& origin) const {
  auto fail = [&](const std::string& field, const std::string& message) {
    throw Error(message).file(origin).field(field);
  };
  if (model_config.empty() == init_checkpoint.empty())
    fail("model", "give exactly one of model.config (random init) or model.init_checkpoint");
  if (tokenizer.empty()) fail("tokenizer", "missing the tokenizer.json path");
  if (train_file.empty()) fail("data.train", "missing the training JSONL path");
  if (seq_len < 2) fail("seq_len", "must be at least 2");
  if (micro_batch < 1) fail("micro_batch", "must be at least 1");
  if (global_batch < micro_batch || global_batch % micro_batch != 0)
    fail("global_batch",
         "must be a positive multiple of micro_batch (" + std::to_string(micro_batch) + ")");
  if (steps < 0) fail("steps", "must be >= 0");
  if (!(epochs >= 0)) fail("epochs", "must be >= 0");
  if (steps == 0 && epochs <= 0) fail("steps", "give steps > 0 or epochs > 0");
  if (!(peak_lr > 0)) fail("schedule.peak_lr", "must be > 0");
  if (!(min_lr >= 0) || min_lr > peak_lr) fail("schedule.min_lr", "must be in [0, peak_lr]");
  if (warmup_steps < 0) fail("schedule.warmup_steps", "must be >= 0");
  if (!(optimizer.adamw.beta1 >= 0 && optimizer.adamw.beta1 < 1))
    fail("optimizer.adamw.beta1", "must be in [0, 1)");
  if (!(optimizer.adamw.beta2 >= 0 && optimizer.adamw.beta2 < 1))
    fail("optimizer.adamw.beta2", "must be in [0, 1)");
  if (!(optimizer.adamw.eps > 0)) fail("optimizer.adamw.eps", "must be > 0");
  if (!(optimizer.adamw.weight_decay >= 0)) fail("optimizer.adamw.weight_decay", "must be >= 0");
  if (!(optimizer.muon.momentum >= 0 && optimizer.muon.momentum < 1))
    fail("optimizer.muon.momentum", "must be in [0, 1)");
  if (optimizer.muon.ns_iterations < 1) fail("optimizer.muon.ns_iterations", "must be >= 1");
  if (optimizer.muon.ns_tail_iterations < 0 ||
      optimizer.muon.ns_tail_iterations > optimizer.muon.ns_iterations)
    fail("optimizer.muon.ns_tail_iterations", "must be in [0, ns_iterations]");
  if (!(optimizer.muon.rms_scale > 0)) fail("optimizer.muon.rms_scale", "must be > 0");
  if (!(optimizer.muon.weight_decay >= 0)) fail("optimizer.muon.weight_decay", "must be >= 0");
  if (!(clip >= 0 || clip < 0)) fail("clip", "must be a number");
  if (!(mtp_weight >= 0)) fail("loss.mtp_weight", "must be >= 0");
  if (!(balance_weight >= 0)) fail("loss.balance_weight", "must be >= 0");
  if (!(router_bias_speed >= 0)) fail("router_bias_speed", "must be >= 0");
  if (eval_interval < 0) fail("eval_interval", "must be >= 0");
  if (eval_batches < 1) fail("eval_batches", "must be >= 1");
  if (checkpoint_interval < 0) fail("checkpoint_interval", "must be >= 0");
  if (keep_checkpoints < 1) fail("keep_checkpoints", "must be >= 1");
  if (log_interval < 1) fail("log_interval", "must be >= 1");
  if (out_dir.empty()) fail("out_dir", "must not be empty");
  if (!(peak_gflops >= 0)) fail("peak_gflops", "must be >= 0 (0 = measure)");
  if (spike_window < 2) fail("spike.window", "must be at least 2");
  if (!(spike_z_threshold > 0)) fail("spike.z_threshold", "must be > 0");
  for (const auto& [key, degree] : {std::pair<const char*, int64_t>{"parallel.dp", parallel.dp},
                                    {"parallel.ep", parallel.ep},
                                    {"parallel.pp", parallel.pp}})
    if (degree < 1 || degree > 65536) fail(key, "must be in [1, 65536]");
  if (parallel.zero < 0 || parallel.zero > 2) fail("parallel.zero", "must be 0, 1 or 2");
  if (!(parallel.bucket_mb > 0) || parallel.bucket_mb > 1e6)
    fail("parallel.bucket_mb", "must be > 0 (MiB)");
  if (accumulation_steps() % parallel.data_size() != 0)
    fail("parallel.dp",
         "global_batch / micro_batch = " + std::to_string(accumulation_steps()) +
             " micro-batches per step must be a multiple of parallel.dp x parallel.ep = " +
             std::to_string(parallel.data_size()) +
             " (each data-parallel rank takes an equal share)");
  if (parallel.pp > 1 && parallel.pipeline_schedule == parallel::PipelineSchedule::kDualPipeV &&
      accumulation_steps() / parallel.data_size() < 2 * parallel.pp)
    fail("parallel.pipeline_schedule",
         "DualPipeV needs at least 2 x pp = " + std::to_string(2 * parallel.pp) +
             " micro-batches per pipeline and step; this config gives " +
             std::to_string(accumulation_steps() / parallel.data_size()) +
             " (raise global_batch or use \"1f1b\")");
}

std::string FaultInjection::text() const {
  return kind == "nan_weight_on_load" ? kind : kind + "@step=" + std::to_string(step);
}

FaultInjection FaultInjection::parse(const std::string& text) {
  static const std::set<std::string> kStepped = {"nan_grad", "inf_grad", "nan_activation",
                                                 "inf_activation", "loss_spike"};
  FaultInjection f;
  const size_t at = text.find('@');
  f.kind = text.substr(0, at);
  if (f.kind == "nan_weight_on_load") {
    if (at != std::string::npos)
      throw Error("\"nan_weight_on_load\" takes no step, got \"" + text + "\"");
    return f;
  }
  if (!kStepped.count(f.kind))
    throw Error("unknown fault \"" + text +
                "\" (expected nan_grad, inf_grad, nan_activation, inf_activation or loss_spike "
                "@step=N, or nan_weight_on_load)");
  const std::string prefix = "@step=";
  if (at == std::string::npos || text.compare(at, prefix.size(), prefix) != 0)
    throw Error("expected \"" + f.kind + "@step=N\", got \"" + text + "\"");
  const std::string number = text.substr(at + prefix.size());
  size_t used = 0;
  try {
    f.step = std::stoll(number, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  if (number.empty() || used != number.size() || f.step < 1)
    throw Error("expected a step >= 1 in \"" + text + "\"");
  return f;
}

nlohmann::json RunConfig::to_json() const {
  nlohmann::json model = {{"seed", std::to_string(init_seed)}};
  if (!model_config.empty()) model["config"] = model_config;
  if (!init_checkpoint.empty()) model["init_checkpoint"] = init_checkpoint;
  nlohmann::json data = {{"mode", mode == DataMode::kCpt ? "cpt" : "sft"},
                         {"train", train_file},
                         {"seed", std::to_string(data_seed)},
                         {"shuffle", shuffle},
                         {"strict", data_strict}};
  if (!validation_file.empty()) data["validation"] = validation_file;
  nlohmann::json out = {
      {"model", model},
      {"tokenizer", tokenizer},
      {"data", data},
      {"seq_len", seq_len},
      {"micro_batch", micro_batch},
      {"global_batch", global_batch},
      {"steps", steps},
      {"epochs", epochs},
      {"optimizer",
       {{"use_muon", optimizer.use_muon},
        {"adamw",
         {{"beta1", optimizer.adamw.beta1},
          {"beta2", optimizer.adamw.beta2},
          {"eps", optimizer.adamw.eps},
          {"weight_decay", optimizer.adamw.weight_decay}}},
        {"muon",
         {{"momentum", optimizer.muon.momentum},
          {"nesterov", optimizer.muon.nesterov},
          {"ns_iterations", optimizer.muon.ns_iterations},
          {"ns_tail_iterations", optimizer.muon.ns_tail_iterations},
          {"rms_scale", optimizer.muon.rms_scale},
          {"weight_decay", optimizer.muon.weight_decay}}}}},
      {"schedule", {{"peak_lr", peak_lr}, {"min_lr", min_lr}, {"warmup_steps", warmup_steps}}},
      {"clip", clip},
      {"precision", precision == TrainPrecision::kFp32 ? "fp32" : "bf16"},
      {"loss", {{"mtp_weight", mtp_weight}, {"balance_weight", balance_weight}}},
      {"router_bias_speed", router_bias_speed},
      {"eval_interval", eval_interval},
      {"eval_batches", eval_batches},
      {"checkpoint_interval", checkpoint_interval},
      {"keep_checkpoints", keep_checkpoints},
      {"log_interval", log_interval},
      {"out_dir", out_dir},
      {"peak_gflops", peak_gflops},
      {"spike", {{"window", spike_window}, {"z_threshold", spike_z_threshold}}},
      {"parallel",
       {{"dp", parallel.dp},
        {"ep", parallel.ep},
        {"pp", parallel.pp},
        {"pipeline_schedule",
         parallel.pipeline_schedule == parallel::PipelineSchedule::k1F1B ? "1f1b" : "dualpipev"},
        {"zero", parallel.zero},
        {"bucket_mb", parallel.bucket_mb},
        {"overlap_grad_reduce", parallel.overlap_grad_reduce},
        {"ep_overlap", parallel.ep_overlap},
        {"expert_placement", parallel.expert_placement}}},
  };
  if (!debug_inject.empty()) {
    nlohmann::json inject = nlohmann::json::array();
    for (const FaultInjection& f : debug_inject) inject.push_back(f.text());
    out["debug"] = {{"inject", inject}};
  }
  return out;
}

}  // namespace trex::train
