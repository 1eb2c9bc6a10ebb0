#include "trex/train/run_config.hpp"

#include <cmath>
#include <filesystem>
#include <set>

#include "trex/core/config_reader.hpp"
#include "trex/core/error.hpp"

namespace trex::train {

const char* checkpoint_format_name(CheckpointFormat format) {
  switch (format) {
    case CheckpointFormat::kWhole:
      return "whole";
    case CheckpointFormat::kSharded:
      return "sharded";
    case CheckpointFormat::kAuto:
      break;
  }
  return "auto";
}
namespace {

std::string resolve(const std::string& base_dir, const std::string& path) {
  if (path.empty() || base_dir.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(base_dir) / path).lexically_normal().string();
}

RunConfig read_run_config(const config::Reader& root, const std::string& base_dir) {
  RunConfig c;
  {
    const config::Reader m = root.section("model");
    c.model_config = m.string("config", c.model_config);
    c.init_seed = m.integer<uint64_t>("seed", c.init_seed);
    c.init_checkpoint = m.string("init_checkpoint", c.init_checkpoint);
    m.reject_unknown();
  }
  c.tokenizer = root.string("tokenizer", c.tokenizer);
  {
    const config::Reader d = root.section("data");
    c.mode =
        d.choice("mode", c.mode,
                 {{"cpt", DataMode::kCpt}, {"sft", DataMode::kSft}, {"grpo", DataMode::kGrpo}});
    c.train_file = d.string("train", c.train_file);
    c.validation_file = d.string("validation", c.validation_file);
    c.data_seed = d.integer<uint64_t>("seed", c.data_seed);
    c.shuffle = d.boolean("shuffle", c.shuffle);
    c.data_strict = d.boolean("strict", c.data_strict);
    d.reject_unknown();
  }
  c.seq_len = root.integer("seq_len", c.seq_len);
  c.micro_batch = root.integer("micro_batch", c.micro_batch);
  c.global_batch = root.integer("global_batch", c.global_batch);
  c.steps = root.integer("steps", c.steps);
  c.epochs = root.number("epochs", c.epochs);
  {
    const config::Reader o = root.section("optimizer");
    OptimizerOptions& opt = c.optimizer;
    opt.use_muon = o.boolean("use_muon", opt.use_muon);
    opt.moment_dtype = o.choice("moment_dtype", opt.moment_dtype,
                                {{"f32", MomentDType::kF32}, {"bf16", MomentDType::kBF16}});
    const config::Reader a = o.section("adamw");
    opt.adamw.beta1 = a.number("beta1", opt.adamw.beta1);
    opt.adamw.beta2 = a.number("beta2", opt.adamw.beta2);
    opt.adamw.eps = a.number("eps", opt.adamw.eps);
    opt.adamw.weight_decay = a.number("weight_decay", opt.adamw.weight_decay);
    a.reject_unknown();
    const config::Reader mu = o.section("muon");
    opt.muon.momentum = mu.number("momentum", opt.muon.momentum);
    opt.muon.nesterov = mu.boolean("nesterov", opt.muon.nesterov);
    opt.muon.ns_iterations = mu.integer<int>("ns_iterations", opt.muon.ns_iterations);
    opt.muon.ns_tail_iterations =
        mu.integer<int>("ns_tail_iterations", opt.muon.ns_tail_iterations);
    opt.muon.rms_scale = mu.number("rms_scale", opt.muon.rms_scale);
    opt.muon.weight_decay = mu.number("weight_decay", opt.muon.weight_decay);
    mu.reject_unknown();
    o.reject_unknown();
  }
  {
    const config::Reader s = root.section("schedule");
    c.peak_lr = s.number("peak_lr", c.peak_lr);
    c.min_lr = s.number("min_lr", c.min_lr);
    c.warmup_steps = s.integer("warmup_steps", c.warmup_steps);
    s.reject_unknown();
  }
  c.clip = root.number("clip", c.clip);
  c.precision = root.choice("precision", c.precision,
                            {{"fp32", TrainPrecision::kFp32}, {"bf16", TrainPrecision::kBf16}});
  // bf16 working parameters with fp32 master weights in the optimizer's ranges.
  c.optimizer.master_weights =
      root.choice("param_dtype", c.optimizer.master_weights, {{"fp32", false}, {"bf16", true}});
  c.recompute = root.choice("recompute", c.recompute,
                            {{"none", model::ActivationRecompute::kNone},
                             {"selective", model::ActivationRecompute::kSelective},
                             {"full", model::ActivationRecompute::kFull}});
  {
    const config::Reader l = root.section("loss");
    c.mtp_weight = l.number("mtp_weight", c.mtp_weight);
    if (c.mode == DataMode::kGrpo && !l.has("mtp_weight")) c.mtp_weight = 0;  // no MTP term
    c.balance_weight = l.number("balance_weight", c.balance_weight);
    l.reject_unknown();
  }
  c.router_bias_speed = root.number("router_bias_speed", c.router_bias_speed);
  c.eval_interval = root.integer("eval_interval", c.eval_interval);
  c.eval_batches = root.integer("eval_batches", c.eval_batches);
  c.checkpoint_interval = root.integer("checkpoint_interval", c.checkpoint_interval);
  c.keep_checkpoints = root.integer("keep_checkpoints", c.keep_checkpoints);
  c.checkpoint_format = root.choice("checkpoint_format", c.checkpoint_format,
                                    {{"auto", CheckpointFormat::kAuto},
                                     {"whole", CheckpointFormat::kWhole},
                                     {"sharded", CheckpointFormat::kSharded}});
  c.log_interval = root.integer("log_interval", c.log_interval);
  c.out_dir = root.string("out_dir", c.out_dir);
  c.peak_gflops = root.number("peak_gflops", c.peak_gflops);
  {
    const config::Reader g = root.section("spike");
    c.spike_window = g.integer("window", c.spike_window);
    c.spike_z_threshold = g.number("z_threshold", c.spike_z_threshold);
    g.reject_unknown();
  }
  {
    const config::Reader dbg = root.section("debug");
    if (dbg.has("inject")) {
      const config::Reader inject = dbg.array("inject");
      for (size_t i = 0; i < inject.size(); ++i) {
        const std::string text = inject[i].as_string();
        try {
          c.debug_inject.push_back(FaultInjection::parse(text));
        } catch (const Error& e) {
          inject.fail(e.message());
        }
      }
    }
    dbg.reject_unknown();
  }
  {
    const config::Reader p = root.section("parallel");
    c.parallel.dp = p.integer("dp", c.parallel.dp);
    c.parallel.ep = p.integer("ep", c.parallel.ep);
    c.parallel.pp = p.integer("pp", c.parallel.pp);
    c.parallel.pipeline_schedule =
        p.choice("pipeline_schedule", c.parallel.pipeline_schedule,
                 {{"1f1b", parallel::PipelineSchedule::k1F1B},
                  {"dualpipev", parallel::PipelineSchedule::kDualPipeV}});
    if (p.has("pipeline_layers"))
      c.parallel.pipeline_layers =
          p.array("pipeline_layers").integers<int64_t>(config::Range<int64_t>::between(0, 1 << 20));
    c.parallel.zero = p.integer("zero", c.parallel.zero);
    c.parallel.bucket_mb = p.number("bucket_mb", c.parallel.bucket_mb);
    c.parallel.max_in_flight_buckets =
        p.integer("max_in_flight_buckets", c.parallel.max_in_flight_buckets);
    c.parallel.overlap_grad_reduce =
        p.boolean("overlap_grad_reduce", c.parallel.overlap_grad_reduce);
    c.parallel.ep_overlap = p.boolean("ep_overlap", c.parallel.ep_overlap);
    c.parallel.expert_placement = p.string("expert_placement", c.parallel.expert_placement);
    p.reject_unknown();
  }
  {
    const config::Reader g = root.section("grpo");
    GrpoConfig& r = c.grpo;
    r.prompts_per_step = g.integer("prompts_per_step", r.prompts_per_step);
    r.group_size = g.integer("group_size", r.group_size);
    r.max_new_tokens = g.integer("max_new_tokens", r.max_new_tokens);
    r.temperature = g.number("temperature", r.temperature);
    r.top_p = g.number("top_p", r.top_p);
    r.generation_batch = g.integer("generation_batch", r.generation_batch);
    r.updates_per_batch = g.integer("updates_per_batch", r.updates_per_batch);
    r.clip_low = g.number("clip_low", r.clip_low);
    r.clip_high = g.number("clip_high", r.clip_high);
    r.kl_coef = g.number("kl_coef", r.kl_coef);
    r.reference = g.string("reference", r.reference);
    r.scale_advantages_by_std = g.boolean("scale_advantages_by_std", r.scale_advantages_by_std);
    r.format = g.string("format", r.format);
    r.prompt_template = g.string("prompt_template", r.prompt_template);
    r.eval_prompts = g.integer("eval_prompts", r.eval_prompts);
    const config::Reader w = g.section("reward");
    r.reward_correct = w.number("correct", r.reward_correct);
    r.reward_wrong = w.number("wrong", r.reward_wrong);
    r.failure_penalty = w.number("failure_penalty", r.failure_penalty);
    r.format_reward = w.number("format_reward", r.format_reward);
    r.rule = w.string("rule", r.rule);
    r.grade_timeout = w.number("timeout", r.grade_timeout);
    r.grade_jobs = w.integer("jobs", r.grade_jobs);
    r.python = w.string("python", r.python);
    r.solver = w.string("solver", r.solver);
    w.reject_unknown();
    g.reject_unknown();
    // A GRPO step trains on the P·G rollouts of its prompts.
    if (c.mode == DataMode::kGrpo && !root.has("global_batch"))
      c.global_batch = r.prompts_per_step * r.group_size;
  }
  root.reject_unknown();

  c.model_config = resolve(base_dir, c.model_config);
  c.init_checkpoint = resolve(base_dir, c.init_checkpoint);
  c.tokenizer = resolve(base_dir, c.tokenizer);
  c.train_file = resolve(base_dir, c.train_file);
  c.validation_file = resolve(base_dir, c.validation_file);
  c.out_dir = resolve(base_dir, c.out_dir);
  c.parallel.expert_placement = resolve(base_dir, c.parallel.expert_placement);
  c.grpo.reference = resolve(base_dir, c.grpo.reference);
  return c;
}

}  // namespace

RunConfig RunConfig::from_json(const nlohmann::json& json, const std::string& origin,
                               const std::string& base_dir) {
  RunConfig c = read_run_config(config::Reader(json, origin), base_dir);
  c.validate(origin);
  return c;
}

RunConfig RunConfig::load(const std::string& path) {
  const config::Document document = config::Document::load(path, config::format_of(path));
  RunConfig c =
      read_run_config(document.root(), std::filesystem::path(path).parent_path().string());
  c.validate(path);
  return c;
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
  if (mode == DataMode::kGrpo) validate_grpo(origin);
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
  if (parallel.max_in_flight_buckets < 0 || parallel.max_in_flight_buckets > 1 << 20)
    fail("parallel.max_in_flight_buckets", "must be in [0, 1048576] (0: no bound)");
  if (accumulation_steps() % parallel.data_size() != 0)
    fail("parallel.dp",
         "global_batch / micro_batch = " + std::to_string(accumulation_steps()) +
             " micro-batches per step must be a multiple of parallel.dp x parallel.ep = " +
             std::to_string(parallel.data_size()) +
             " (each data-parallel rank takes an equal share)");
  if (!parallel.pipeline_layers.empty()) {
    const int64_t chunks = parallel.pipeline_schedule == parallel::PipelineSchedule::kDualPipeV
                               ? 2 * parallel.pp
                               : parallel.pp;
    if (static_cast<int64_t>(parallel.pipeline_layers.size()) != chunks)
      fail("parallel.pipeline_layers",
           "lists " + std::to_string(parallel.pipeline_layers.size()) +
               " chunks; the pipeline has " + std::to_string(chunks) +
               " (pp = " + std::to_string(parallel.pp) +
               (chunks == parallel.pp ? ", 1f1b" : ", dualpipev: 2 x pp") +
               "); the counts must sum to the model's num_hidden_layers");
  }
  if (parallel.pp > 1 && checkpoint_format == CheckpointFormat::kWhole)
    fail("checkpoint_format",
         "\"whole\" gathers the model on one rank, but pipeline stages each hold only their "
         "layers (parallel.pp > 1): use \"sharded\" (the default on several ranks); `trex "
         "export` turns a sharded checkpoint into one HF checkpoint");
  if (parallel.pp > 1 && parallel.pipeline_schedule == parallel::PipelineSchedule::kDualPipeV &&
      accumulation_steps() / parallel.data_size() < 2 * parallel.pp)
    fail("parallel.pipeline_schedule",
         "DualPipeV needs at least 2 x pp = " + std::to_string(2 * parallel.pp) +
             " micro-batches per pipeline and step; this config gives " +
             std::to_string(accumulation_steps() / parallel.data_size()) +
             " (raise global_batch or use \"1f1b\")");
}

void RunConfig::validate_grpo(const std::string& origin) const {
  auto fail = [&](const std::string& field, const std::string& message) {
    throw Error(message).file(origin).field(field);
  };
  const GrpoConfig& g = grpo;
  if (steps < 1) fail("steps", "data.mode = \"grpo\" needs steps >= 1 (optimizer steps)");
  if (g.prompts_per_step < 1) fail("grpo.prompts_per_step", "must be >= 1");
  if (g.group_size < 2)
    fail("grpo.group_size", "must be >= 2 (advantages are relative to the group)");
  if (global_batch != g.prompts_per_step * g.group_size)
    fail("global_batch",
         "with data.mode = \"grpo\" a step trains on prompts_per_step x "
         "group_size = " +
             std::to_string(g.prompts_per_step * g.group_size) +
             " rollouts; leave global_batch out or set it to that");
  if (g.prompts_per_step % parallel.data_size() != 0)
    fail("grpo.prompts_per_step", "must be a multiple of parallel.dp x parallel.ep = " +
                                      std::to_string(parallel.data_size()));
  if (g.prompts_per_step / parallel.data_size() * g.group_size % micro_batch != 0)
    fail("micro_batch",
         "must divide each rank's rollouts per step (prompts_per_step / dp x "
         "group_size = " +
             std::to_string(g.prompts_per_step / parallel.data_size() * g.group_size) + ")");
  if (parallel.ep > 1 || parallel.pp > 1)
    fail("parallel", "data.mode = \"grpo\" runs data-parallel only (parallel.ep = pp = 1)");
  if (g.max_new_tokens < 1) fail("grpo.max_new_tokens", "must be >= 1");
  if (g.max_new_tokens >= seq_len)
    fail("grpo.max_new_tokens",
         "must leave room for the prompt in seq_len = " + std::to_string(seq_len));
  if (!(g.temperature > 0)) fail("grpo.temperature", "must be > 0 (rollouts are sampled)");
  if (!(g.top_p > 0 && g.top_p <= 1)) fail("grpo.top_p", "must be in (0, 1]");
  if (g.generation_batch < 1) fail("grpo.generation_batch", "must be >= 1");
  if (g.updates_per_batch < 1) fail("grpo.updates_per_batch", "must be >= 1");
  if (!(g.clip_low >= 0 && g.clip_low < 1)) fail("grpo.clip_low", "must be in [0, 1)");
  if (!(g.clip_high >= 0)) fail("grpo.clip_high", "must be >= 0");
  if (!(g.kl_coef >= 0)) fail("grpo.kl_coef", "must be >= 0");
  if (g.kl_coef > 0 && g.reference.empty() && init_checkpoint.empty())
    fail("grpo.reference", "kl_coef > 0 needs a reference checkpoint (or model.init_checkpoint)");
  if (g.format != "mathprog" && g.format != "lp" && g.format != "python")
    fail("grpo.format", "must be mathprog, lp or python");
  if (!g.prompt_template.empty() && g.prompt_template.find("{question}") == std::string::npos)
    fail("grpo.prompt_template", "must contain {question}");
  if (!(g.grade_timeout > 0)) fail("grpo.reward.timeout", "must be > 0 seconds");
  if (g.grade_jobs < 0) fail("grpo.reward.jobs", "must be >= 0 (0 = online cores)");
  for (const auto& [key, value] :
       {std::pair<const char*, double>{"grpo.reward.correct", g.reward_correct},
        {"grpo.reward.wrong", g.reward_wrong},
        {"grpo.reward.failure_penalty", g.failure_penalty},
        {"grpo.reward.format_reward", g.format_reward}})
    if (!std::isfinite(value)) fail(key, "must be a finite number");
  if (g.eval_prompts < 0) fail("grpo.eval_prompts", "must be >= 0");
  if (mtp_weight != 0)
    fail("loss.mtp_weight",
         "must be 0 with data.mode = \"grpo\" (the policy loss has no MTP term)");
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
  nlohmann::json data = {{"mode", mode == DataMode::kCpt   ? "cpt"
                                  : mode == DataMode::kSft ? "sft"
                                                           : "grpo"},
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
        {"moment_dtype", moment_dtype_name(optimizer.moment_dtype)},
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
      {"param_dtype", optimizer.master_weights ? "bf16" : "fp32"},
      {"recompute", model::activation_recompute_name(recompute)},
      {"loss", {{"mtp_weight", mtp_weight}, {"balance_weight", balance_weight}}},
      {"router_bias_speed", router_bias_speed},
      {"eval_interval", eval_interval},
      {"eval_batches", eval_batches},
      {"checkpoint_interval", checkpoint_interval},
      {"keep_checkpoints", keep_checkpoints},
      {"checkpoint_format", checkpoint_format_name(checkpoint_format)},
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
        {"pipeline_layers", parallel.pipeline_layers},
        {"zero", parallel.zero},
        {"bucket_mb", parallel.bucket_mb},
        {"max_in_flight_buckets", parallel.max_in_flight_buckets},
        {"overlap_grad_reduce", parallel.overlap_grad_reduce},
        {"ep_overlap", parallel.ep_overlap},
        {"expert_placement", parallel.expert_placement}}},
  };
  if (mode == DataMode::kGrpo)
    out["grpo"] = {{"prompts_per_step", grpo.prompts_per_step},
                   {"group_size", grpo.group_size},
                   {"max_new_tokens", grpo.max_new_tokens},
                   {"temperature", grpo.temperature},
                   {"top_p", grpo.top_p},
                   {"generation_batch", grpo.generation_batch},
                   {"updates_per_batch", grpo.updates_per_batch},
                   {"clip_low", grpo.clip_low},
                   {"clip_high", grpo.clip_high},
                   {"kl_coef", grpo.kl_coef},
                   {"reference", grpo.reference},
                   {"scale_advantages_by_std", grpo.scale_advantages_by_std},
                   {"format", grpo.format},
                   {"prompt_template", grpo.prompt_template},
                   {"eval_prompts", grpo.eval_prompts},
                   {"reward",
                    {{"correct", grpo.reward_correct},
                     {"wrong", grpo.reward_wrong},
                     {"failure_penalty", grpo.failure_penalty},
                     {"format_reward", grpo.format_reward},
                     {"rule", grpo.rule},
                     {"timeout", grpo.grade_timeout},
                     {"jobs", grpo.grade_jobs},
                     {"python", grpo.python},
                     {"solver", grpo.solver}}}};
  if (!debug_inject.empty()) {
    nlohmann::json inject = nlohmann::json::array();
    for (const FaultInjection& f : debug_inject) inject.push_back(f.text());
    out["debug"] = {{"inject", inject}};
  }
  return out;
}

}  // namespace trex::train
