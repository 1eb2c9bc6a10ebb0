#include "trex/rl/grpo.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>

#include "trex/core/error.hpp"
#include "trex/core/log.hpp"
#include "trex/core/progress.hpp"
#include "trex/core/rng.hpp"
#include "trex/infer/generate.hpp"
#include "trex/io/chat.hpp"
#include "trex/io/tokenizer.hpp"
#include "trex/or/eval/bench.hpp"
#include "trex/or/eval/prompts.hpp"
#include "trex/or/eval/runner.hpp"
#include "trex/or/eval/sandbox.hpp"
#include "trex/rl/objective.hpp"
#include "trex/rl/reward.hpp"
#include "trex/train/checkpoint.hpp"
#include "trex/train/data/source.hpp"

namespace trex::rl {

using orlib::eval::Category;
using train::format_value;
using Clock = std::chrono::steady_clock;

namespace {

// Rng stream tags: the prompt order of each epoch, the sampling seed of each step.
constexpr uint64_t kPromptOrderStream = 0x67'72'70'6f'6f'72'64ULL;
constexpr uint64_t kRolloutSeedStream = 0x67'72'70'6f'73'65'65ULL;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The prompts of step `step` (1-based): positions (step−1)·P … step·P − 1 of
// the concatenation of per-epoch seeded permutations of the prompt set.
std::vector<int64_t> step_prompts(int64_t count, int64_t step, int64_t per_step, uint64_t seed) {
  std::vector<int64_t> out;
  std::vector<int64_t> order;
  int64_t order_epoch = -1;
  for (int64_t k = 0; k < per_step; ++k) {
    const int64_t position = (step - 1) * per_step + k;
    const int64_t epoch = position / count;
    if (epoch != order_epoch) {
      order.resize(static_cast<size_t>(count));
      std::iota(order.begin(), order.end(), int64_t{0});
      Rng rng(seed, {kPromptOrderStream, static_cast<uint64_t>(epoch)});
      rng.shuffle(order);
      order_epoch = epoch;
    }
    out.push_back(order[static_cast<size_t>(position % count)]);
  }
  return out;
}

// One sampled completion of one prompt, graded.
struct Rollout {
  int64_t prompt = 0;                // index in the prompt set
  std::vector<int32_t> completion;   // generated ids, the EOS last when it stopped there
  std::vector<float> old_log_probs;  // one per completion id
  std::vector<float> entropies;
  bool stopped_at_eos = false;
  std::string text;
  double reward = 0;
  Category category = Category::no_code;
  double advantage = 0;
  bool trained = true;  // false: its group's rewards are all equal (no signal, left out)
};

// Sums every rank contributes to a step's metrics (all-reduced once).
struct StepSums {
  enum : size_t {
    kRollouts,
    kRewardSum,
    kCorrect,
    kGroups,
    kUniformGroups,
    kGroupStdSum,
    kResponseTokens,
    kEntropySum,
    kStoppedAtEos,
    kTrainedTokens,
    kLossSum,
    kPgLossSum,
    kKlSum,
    kClippedTokens,
    kRatioSum,
    kFailed,  // did not parse or solve
    kTrainedRollouts,
    kPgLossAfterUpdate,
    kCount
  };
  std::vector<double> v = std::vector<double>(kCount, 0.0);
  double& operator[](size_t i) { return v[i]; }
};

bool did_not_run(Category c) {
  switch (c) {
    case Category::no_code:
    case Category::extraction_failed:
    case Category::syntax_error:
    case Category::runtime_error:
    case Category::runtime_missing:
    case Category::timeout:
      return true;
    default:
      return false;
  }
}

RewardOptions reward_options(const train::GrpoConfig& g) {
  RewardOptions o;
  o.correct = g.reward_correct;
  o.wrong = g.reward_wrong;
  o.failure_penalty = g.failure_penalty;
  o.format_reward = g.format_reward;
  try {
    o.rule = orlib::eval::parse_rule(g.rule);
  } catch (Error& e) {
    throw e.field("grpo.reward.rule");
  }
  const std::string python = orlib::eval::resolve_executable(g.python);
  o.run.python = python.empty() ? g.python : python;
  if (!python.empty()) o.run.python_env = orlib::eval::python_environment(python);
  o.run.solver = g.solver;
  o.run.limits.wall_seconds = g.grade_timeout;
  o.run.limits.cpu_seconds = g.grade_timeout;
  o.jobs = static_cast<int>(g.grade_jobs);
  return o;
}

// The rows of one micro-batch: which rollout each row holds and where its
// completion starts.
struct RowSpan {
  size_t rollout = 0;
  int64_t completion_start = 0;  // position of the first completion token in the row
  int64_t trained = 0;           // completion tokens inside seq_len
};

// The rollouts `rows` as one micro-batch padded to the longest (padding after the
// sequence: causal attention keeps it out of the real tokens). Only trained
// rollouts have labels; a micro-batch without any is one short unlabelled row
// (the step's micro-batch count is fixed, its cost need not be).
model::Batch rollout_batch(const std::vector<Rollout>& rollouts, const PromptSet& prompts,
                           const std::vector<size_t>& rows, int64_t seq_len, int64_t pad_id,
                           std::vector<RowSpan>& spans) {
  spans.clear();
  model::Batch b;
  bool any_trained = false;
  for (size_t index : rows) any_trained = any_trained || rollouts[index].trained;
  if (!any_trained) {
    b.B = 1;
    b.S = 2;
    b.input_ids.assign(2, pad_id);
    b.labels.assign(2, -1);
    return b;
  }
  b.B = static_cast<int64_t>(rows.size());
  int64_t S = 2;
  for (size_t index : rows) {
    const Rollout& ro = rollouts[index];
    const int64_t len =
        static_cast<int64_t>(prompts.items[ro.prompt].tokens.size() + ro.completion.size());
    S = std::max(S, std::min(len, seq_len));
  }
  b.S = S;
  b.input_ids.assign(static_cast<size_t>(b.B * S), pad_id);
  b.labels.assign(static_cast<size_t>(b.B * S), -1);
  for (int64_t r = 0; r < b.B; ++r) {
    const size_t index = rows[static_cast<size_t>(r)];
    const Rollout& ro = rollouts[index];
    const std::vector<int32_t>& p = prompts.items[ro.prompt].tokens;
    const int64_t plen = static_cast<int64_t>(p.size());
    RowSpan span{index, plen, 0};
    for (int64_t t = 0; t < S; ++t) {
      const size_t at = static_cast<size_t>(r * S + t);
      if (t < plen) {
        b.input_ids[at] = p[static_cast<size_t>(t)];
      } else if (t - plen < static_cast<int64_t>(ro.completion.size())) {
        b.input_ids[at] = ro.completion[static_cast<size_t>(t - plen)];
        if (ro.trained) {
          b.labels[at] = b.input_ids[at];
          ++span.trained;
        }
      }
    }
    spans.push_back(span);
  }
  return b;
}

// Every rank's micro-batches, in the trainer's order (micro-batch i belongs to
// data rank i mod D): rank r's j-th is i = j·D + r. Ranks exchange ids and labels.
std::vector<model::Batch> gather_micro_batches(std::vector<model::Batch> mine,
                                               parallel::Communicator& world) {
  const int D = world.size();
  if (D == 1) return mine;
  std::vector<int64_t> flat;
  for (const model::Batch& b : mine) {
    flat.push_back(b.B);
    flat.push_back(b.S);
    flat.insert(flat.end(), b.input_ids.begin(), b.input_ids.end());
    flat.insert(flat.end(), b.labels.begin(), b.labels.end());
  }
  int64_t size = static_cast<int64_t>(flat.size());
  std::vector<int64_t> sizes(static_cast<size_t>(D), 0);
  world.all_gather(&size, sizes.data(), std::vector<int64_t>(static_cast<size_t>(D), 1),
                   parallel::DType::kI64);
  std::vector<int64_t> all(
      static_cast<size_t>(std::accumulate(sizes.begin(), sizes.end(), int64_t{0})));
  world.all_gather(flat.data(), all.data(), sizes, parallel::DType::kI64);
  std::vector<std::vector<model::Batch>> per_rank(static_cast<size_t>(D));
  size_t at = 0;
  for (int r = 0; r < D; ++r) {
    const size_t end = at + static_cast<size_t>(sizes[static_cast<size_t>(r)]);
    while (at < end) {
      model::Batch b;
      b.B = all[at];
      b.S = all[at + 1];
      at += 2;
      const size_t n = static_cast<size_t>(b.B * b.S);
      b.input_ids.assign(all.begin() + static_cast<std::ptrdiff_t>(at),
                         all.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
      b.labels.assign(all.begin() + static_cast<std::ptrdiff_t>(at),
                      all.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
      per_rank[static_cast<size_t>(r)].push_back(std::move(b));
    }
  }
  std::vector<model::Batch> out;
  const size_t per = per_rank.front().size();
  for (size_t j = 0; j < per; ++j)
    for (int r = 0; r < D; ++r) {
      if (per_rank[static_cast<size_t>(r)].size() != per)
        throw Error("internal: ranks built different numbers of micro-batches");
      out.push_back(per_rank[static_cast<size_t>(r)][j]);
    }
  return out;
}

class GrpoLoop {
 public:
  GrpoLoop(const train::RunConfig& config, const GrpoOptions& options)
      : config_(config),
        g_(config.grpo),
        options_(options),
        grader_(reward_options(g_)),
        trainer_(config, options.trainer),
        root_(trainer_.is_root()),
        world_(trainer_.grid().world()),
        prompts_(load_prompts(config.train_file, trainer_.tokenizer(), g_.format,
                              g_.prompt_template, config.seq_len - g_.max_new_tokens,
                              config.data_strict)) {
    if (prompts_.items.empty())
      throw Error("no gradable prompt that fits seq_len − max_new_tokens = " +
                  std::to_string(config.seq_len - g_.max_new_tokens) + " tokens")
          .file(config.train_file)
          .field("data.train");
    if (!config.validation_file.empty() && g_.eval_prompts > 0) {
      val_ =
          load_prompts(config.validation_file, trainer_.tokenizer(), g_.format, g_.prompt_template,
                       config.seq_len - g_.max_new_tokens, config.data_strict);
      if (static_cast<int64_t>(val_.items.size()) > g_.eval_prompts)
        val_.items.resize(static_cast<size_t>(g_.eval_prompts));
    }
    const std::string reference = g_.reference.empty() ? config.init_checkpoint : g_.reference;
    if (g_.kl_coef > 0) {
      reference_.emplace(model::Model<float>::from_checkpoint(reference));
      reference_->set_compute_precision(config.compute_precision());
    }
    const int64_t eos = trainer_.tokenizer().special_ids().eos;
    eos_id_ = eos >= 0 ? eos : trainer_.model().config().eos_token_id;
    pad_id_ = eos_id_ >= 0 ? eos_id_ : 0;
    if (root_ && prompts_.unknown_truth + prompts_.too_long + prompts_.skipped_lines > 0)
      log::warn("grpo prompts ", config.train_file, ": ", prompts_.items.size(), " used, ",
                prompts_.unknown_truth, " without a gradable answer, ", prompts_.too_long,
                " longer than seq_len − max_new_tokens, ", prompts_.skipped_lines,
                " bad lines skipped");
  }

  GrpoSummary run() {
    GrpoSummary out;
    const int64_t total = trainer_.total_steps();
    if (options_.trainer.write_metrics && root_)
      metrics_.emplace(config_.out_dir, options_.trainer.resume ? trainer_.step() : -1);
    std::optional<Progress> progress;
    if (!options_.trainer.quiet && root_) progress.emplace("grpo", total);
    const auto start = Clock::now();
    int64_t rollouts = 0;
    double reward_sum = 0, correct = 0;
    if (trainer_.step() == 0 && !val_.items.empty()) {
      train::MetricsRecord rec;
      rec.step = 0;
      rec.set("val_pass1", validation_pass1());
      if (metrics_) metrics_->write(rec);
      if (root_)
        log::info("grpo step 0: val Pass@1 ", format_value(rec.get("val_pass1"), "%.1f"), "%");
    }
    while (trainer_.step() < total) {
      train::MetricsRecord rec = step(out);
      rollouts += static_cast<int64_t>(rec.get("rollouts"));
      reward_sum += rec.get("reward_mean") * rec.get("rollouts");
      correct += rec.get("pass_rate") * rec.get("rollouts");
      const int64_t s = trainer_.step();
      const bool last = s == total;
      if ((config_.eval_interval > 0 && s % config_.eval_interval == 0) || last)
        if (!val_.items.empty()) {
          out.final_val_pass1 = validation_pass1();
          rec.set("val_pass1", out.final_val_pass1);
        }
      if (options_.on_step) options_.on_step(s, rec);
      if (metrics_) metrics_->write(rec);
      if (progress) {
        progress->update(s, step_text(rec));
        if (s % config_.log_interval == 0 || last)
          log::info("grpo step ", s, "/", total, ": ", step_text(rec));
      }
      const bool stop =
          options_.trainer.stop_after_step >= 0 && s >= options_.trainer.stop_after_step;
      if ((config_.checkpoint_interval > 0 && s % config_.checkpoint_interval == 0) || last || stop)
        out.train.last_checkpoint = trainer_.save_checkpoint();
      if (stop && !last) {
        out.train.interrupted = true;
        break;
      }
    }
    if (progress) progress->finish();
    if (out.train.last_checkpoint.empty())  // a finished run resumed: nothing left to do
      out.train.last_checkpoint = train::latest_checkpoint(config_.out_dir).value_or("");
    out.train.steps = trainer_.step();
    out.train.total_steps = total;
    out.train.seconds = seconds_since(start);
    const train::TrainSummary& trained = trainer_.summary();
    out.train.skip_reasons = trained.skip_reasons;
    out.train.skipped_steps = static_cast<int64_t>(trained.skip_reasons.size());
    out.train.tokens = trained.tokens;
    out.train.final_loss = trained.final_loss;
    out.rollouts = rollouts;
    out.mean_reward = rollouts > 0 ? reward_sum / static_cast<double>(rollouts) : 0;
    out.pass_rate = rollouts > 0 ? correct / static_cast<double>(rollouts) : 0;
    if (metrics_) {
      out.train.metrics_jsonl = metrics_->jsonl_path();
      out.train.tensorboard_dir = metrics_->tensorboard_dir();
    }
    return out;
  }

 private:
  // Generates the completions of `prompt_indices` (positions `first_position`… of
  // the step) in chunks, grading each chunk while the next one generates.
  std::vector<Rollout> rollouts_for(const std::vector<int64_t>& prompt_indices,
                                    int64_t first_position, uint64_t seed,
                                    const infer::SamplingOptions& sampling, int64_t samples,
                                    const PromptSet& set, double& generate_s, double& grade_s,
                                    int64_t& generated_tokens) {
    std::vector<Rollout> rollouts;
    const int64_t per_chunk = std::max<int64_t>(1, g_.generation_batch / samples);
    const int64_t P = static_cast<int64_t>(prompt_indices.size());
    std::optional<std::pair<size_t, size_t>> grading;  // [begin, end) of rollouts in the grader
    auto collect = [&] {
      const auto t0 = Clock::now();
      std::vector<GradedRollout> graded = grader_.wait();
      grade_s += seconds_since(t0);
      for (size_t i = grading->first; i < grading->second; ++i) {
        rollouts[i].reward = graded[i - grading->first].reward;
        rollouts[i].category = graded[i - grading->first].category;
      }
      grading.reset();
    };
    for (int64_t c0 = 0; c0 < P; c0 += per_chunk) {
      const int64_t count = std::min(per_chunk, P - c0);
      std::vector<std::vector<int32_t>> tokens;
      for (int64_t k = 0; k < count; ++k)
        tokens.push_back(set.items[static_cast<size_t>(prompt_indices[c0 + k])].tokens);
      infer::GenerateOptions o;
      o.max_new_tokens = g_.max_new_tokens;
      o.sampling = sampling;
      o.samples = samples;
      o.seed = seed;
      o.first_prompt_index = first_position + c0;
      o.batch_size = g_.generation_batch;
      o.eos_id = eos_id_;
      o.record_log_probs = true;
      const auto t0 = Clock::now();
      const infer::GeneratedTokens gen = infer::generate_tokens(trainer_.model(), tokens, o);
      generate_s += seconds_since(t0);
      generated_tokens += gen.generated_tokens;
      const size_t begin = rollouts.size();
      std::vector<RewardRequest> requests;
      for (int64_t k = 0; k < count; ++k)
        for (int64_t s = 0; s < samples; ++s) {
          Rollout ro;
          ro.prompt = prompt_indices[c0 + k];
          ro.completion = gen.tokens[k][s];
          ro.text = trainer_.tokenizer().decode(ro.completion, true);
          ro.stopped_at_eos = gen.stopped_at_eos[k][s];
          if (ro.stopped_at_eos) ro.completion.push_back(static_cast<int32_t>(eos_id_));
          ro.old_log_probs = gen.log_probs[k][s];
          ro.entropies = gen.entropies[k][s];
          const PromptItem& item = set.items[static_cast<size_t>(ro.prompt)];
          requests.push_back({item.id, item.truth, ro.text});
          rollouts.push_back(std::move(ro));
        }
      if (grading) collect();
      if (options_.reward_hook) {
        for (size_t i = begin; i < rollouts.size(); ++i) {
          Rollout& ro = rollouts[i];
          ro.reward =
              options_.reward_hook(set.items[static_cast<size_t>(ro.prompt)].id, ro.completion);
          ro.category = ro.reward > 0 ? Category::correct : Category::wrong_objective;
        }
        continue;
      }
      grader_.start(std::move(requests));
      grading.emplace(begin, rollouts.size());
    }
    if (grading) collect();
    return rollouts;
  }

  // Greedy Pass@1 (percent) on the validation prompts (each rank its block), over all ranks.
  double validation_pass1() {
    const int D = world_.size(), r = world_.rank();
    const int64_t n = static_cast<int64_t>(val_.items.size());
    const int64_t begin = n * r / D, end = n * (r + 1) / D;
    std::vector<int64_t> mine;
    for (int64_t i = begin; i < end; ++i) mine.push_back(i);
    double generate_s = 0, grade_s = 0;
    int64_t tokens = 0;
    const std::vector<Rollout> done = rollouts_for(mine, begin, 0, infer::SamplingOptions{0.0, 1.0},
                                                   1, val_, generate_s, grade_s, tokens);
    double counts[2] = {0, static_cast<double>(done.size())};
    for (const Rollout& ro : done) counts[0] += ro.category == Category::correct ? 1 : 0;
    world_.all_reduce(counts, 2, parallel::DType::kF64, parallel::ReduceOp::kSum);
    return counts[1] > 0 ? 100.0 * counts[0] / counts[1] : 0.0;  // percent
  }

  train::MetricsRecord step(GrpoSummary& summary) {
    const auto step_start = Clock::now();
    const int64_t s = trainer_.step() + 1;
    const int D = world_.size(), rank = world_.rank();
    const int64_t P = g_.prompts_per_step, G = g_.group_size, local_p = P / D;
    const std::vector<int64_t> chosen =
        step_prompts(static_cast<int64_t>(prompts_.items.size()), s, P, config_.data_seed);
    const std::vector<int64_t> mine(chosen.begin() + rank * local_p,
                                    chosen.begin() + (rank + 1) * local_p);
    const uint64_t seed =
        Rng(config_.data_seed, {kRolloutSeedStream, static_cast<uint64_t>(s)}).next_u64();
    double generate_s = 0, grade_s = 0;
    int64_t generated = 0;
    std::vector<Rollout> rollouts =
        rollouts_for(mine, rank * local_p, seed, infer::SamplingOptions{g_.temperature, g_.top_p},
                     G, prompts_, generate_s, grade_s, generated);

    StepSums sums;
    std::vector<double> rewards;
    for (const Rollout& ro : rollouts) {
      rewards.push_back(ro.reward);
      sums[StepSums::kRewardSum] += ro.reward;
      sums[StepSums::kCorrect] += ro.category == Category::correct ? 1 : 0;
      sums[StepSums::kFailed] += did_not_run(ro.category) ? 1 : 0;
      sums[StepSums::kResponseTokens] += static_cast<double>(ro.completion.size());
      sums[StepSums::kStoppedAtEos] += ro.stopped_at_eos ? 1 : 0;
      for (float h : ro.entropies) sums[StepSums::kEntropySum] += h;
    }
    sums[StepSums::kRollouts] = static_cast<double>(rollouts.size());
    AdvantageOptions adv_options;
    adv_options.scale_by_std = g_.scale_advantages_by_std;
    const GroupAdvantages adv = group_advantages(rewards, G, adv_options);
    for (size_t i = 0; i < rollouts.size(); ++i) rollouts[i].advantage = adv.advantages[i];
    // Without a KL term the rollouts of an all-equal group have no gradient: they
    // are left out of the update and of its token normaliser (as DAPO's dynamic
    // sampling drops them, without resampling). A step whose groups are all equal
    // then makes no update at all (Muon would otherwise take a full-size step along
    // the balance loss's gradient alone).
    if (g_.kl_coef == 0)
      for (size_t first = 0; first < rollouts.size(); first += static_cast<size_t>(G)) {
        bool uniform = true;
        for (size_t i = first + 1; i < first + static_cast<size_t>(G); ++i)
          uniform = uniform && rollouts[i].reward == rollouts[first].reward;
        for (size_t i = first; i < first + static_cast<size_t>(G); ++i)
          rollouts[i].trained = !uniform;
      }
    sums[StepSums::kGroups] = static_cast<double>(adv.groups);
    sums[StepSums::kUniformGroups] = static_cast<double>(adv.uniform_groups);
    sums[StepSums::kGroupStdSum] = adv.mean_group_std * static_cast<double>(adv.groups);

    // This rank's micro-batches, then every rank's (the trainer's step takes the list).
    const auto train_start = Clock::now();
    const int64_t rows = config_.micro_batch;
    std::vector<model::Batch> local;
    std::vector<std::vector<RowSpan>> spans;
    std::vector<size_t> order;  // trained rollouts first: the others fill the last micro-batches
    for (size_t i = 0; i < rollouts.size(); ++i)
      if (rollouts[i].trained) order.push_back(i);
    sums[StepSums::kTrainedRollouts] = static_cast<double>(order.size());
    for (size_t i = 0; i < rollouts.size(); ++i)
      if (!rollouts[i].trained) order.push_back(i);
    for (size_t first = 0; first < order.size(); first += static_cast<size_t>(rows)) {
      const std::vector<size_t> chunk(order.begin() + static_cast<std::ptrdiff_t>(first),
                                      order.begin() + static_cast<std::ptrdiff_t>(first + rows));
      spans.emplace_back();
      local.push_back(
          rollout_batch(rollouts, prompts_, chunk, config_.seq_len, pad_id_, spans.back()));
    }
    std::vector<model::Batch> all = gather_micro_batches(local, world_);
    const std::vector<size_t> my_indices = trainer_.my_micro_batches(all.size());
    if (my_indices.size() != local.size())
      throw Error("internal: this rank owns " + std::to_string(my_indices.size()) +
                  " micro-batches of the step but built " + std::to_string(local.size()));
    std::vector<std::vector<double>> ref_lp;
    if (reference_)
      for (size_t m = 0; m < local.size(); ++m)
        ref_lp.push_back(spans[m].empty() ? std::vector<double>{}
                                          : reference_->label_log_probs(local[m], g_.temperature));

    train::MetricsRecord rec;
    for (int64_t update = 0; update < g_.updates_per_batch; ++update) {
      // The current policy's log-probabilities of every trained token, in order.
      std::vector<double> lp, old_lp, ref, token_adv;
      std::vector<std::vector<double>> batch_lp;
      for (size_t m = 0; m < local.size(); ++m)
        batch_lp.push_back(spans[m].empty() ? std::vector<double>{}
                                            : trainer_.label_log_probs(local[m]));
      for (size_t m = 0; m < local.size(); ++m)
        for (size_t row = 0; row < spans[m].size(); ++row) {
          const RowSpan& sp = spans[m][row];
          const Rollout& ro = rollouts[sp.rollout];
          for (int64_t i = 0; i < sp.trained; ++i) {
            const size_t at = static_cast<size_t>(static_cast<int64_t>(row) * local[m].S +
                                                  sp.completion_start + i);
            lp.push_back(batch_lp[m][at]);
            old_lp.push_back(ro.old_log_probs[static_cast<size_t>(i)]);
            if (reference_) ref.push_back(ref_lp[m][at]);
            token_adv.push_back(ro.advantage);
          }
        }
      ObjectiveOptions objective;
      objective.clip_low = g_.clip_low;
      objective.clip_high = g_.clip_high;
      objective.kl_coef = g_.kl_coef;
      const ObjectiveResult obj = policy_objective(lp, old_lp, ref, token_adv, objective);
      // The trainer's step is Σ w·∇CE / N_step with CE = −log p: w = −N_local·∂L/∂lp.
      size_t t = 0;
      const double n_local = static_cast<double>(obj.tokens);
      for (size_t m = 0; m < local.size(); ++m) {
        model::Batch& b = all[my_indices[m]];
        b.loss_weights.assign(b.input_ids.size(), 0.0f);
        for (size_t row = 0; row < spans[m].size(); ++row) {
          const RowSpan& sp = spans[m][row];
          for (int64_t i = 0; i < sp.trained; ++i) {
            const size_t at =
                static_cast<size_t>(static_cast<int64_t>(row) * b.S + sp.completion_start + i);
            b.loss_weights[at] = static_cast<float>(-obj.grad_logprobs[t++] * n_local);
          }
        }
      }
      if (update == 0) {
        sums[StepSums::kTrainedTokens] = n_local;
        sums[StepSums::kLossSum] = obj.loss * n_local;
        sums[StepSums::kPgLossSum] = obj.pg_loss * n_local;
        sums[StepSums::kKlSum] = obj.kl * n_local;
        sums[StepSums::kClippedTokens] = obj.clip_fraction * n_local;
        sums[StepSums::kRatioSum] = obj.ratio_mean * n_local;
      } else if (update == 1) {
        // The same batch after one update: a lower surrogate than before means the update
        // followed the advantages (first order: Σ A·(r − 1) / N > 0).
        sums[StepSums::kPgLossAfterUpdate] = obj.pg_loss * n_local;
      }
      train::StepBatches batches =
          train::step_batches_of(all, trainer_.model().config(), trainer_.mtp_layers());
      rec = trainer_.train_step_on(batches);
    }
    const double train_s = seconds_since(train_start);

    world_.all_reduce(sums.v.data(), static_cast<int64_t>(sums.v.size()), parallel::DType::kF64,
                      parallel::ReduceOp::kSum);
    double times[3] = {generate_s, grade_s, train_s};
    world_.all_reduce(times, 3, parallel::DType::kF64, parallel::ReduceOp::kMax);
    const double n = std::max(1.0, sums[StepSums::kRollouts]);
    const double tokens = std::max(1.0, sums[StepSums::kTrainedTokens]);
    rec.set("loss", sums[StepSums::kLossSum] / tokens);
    rec.set("pg_loss", sums[StepSums::kPgLossSum] / tokens);
    if (g_.updates_per_batch > 1)
      rec.set("pg_loss_after_update", sums[StepSums::kPgLossAfterUpdate] / tokens);
    rec.set("kl", sums[StepSums::kKlSum] / tokens);
    rec.set("clip_fraction", sums[StepSums::kClippedTokens] / tokens);
    rec.set("ratio_mean", sums[StepSums::kRatioSum] / tokens);
    rec.set("entropy",
            sums[StepSums::kEntropySum] / std::max(1.0, sums[StepSums::kResponseTokens]));
    rec.set("rollouts", sums[StepSums::kRollouts]);
    rec.set("trained_rollouts", sums[StepSums::kTrainedRollouts]);
    rec.set("reward_mean", sums[StepSums::kRewardSum] / n);
    rec.set("pass_rate", sums[StepSums::kCorrect] / n);
    rec.set("failed_rate", sums[StepSums::kFailed] / n);
    rec.set("reward_group_std",
            sums[StepSums::kGroupStdSum] / std::max(1.0, sums[StepSums::kGroups]));
    rec.set("uniform_group_share",
            sums[StepSums::kUniformGroups] / std::max(1.0, sums[StepSums::kGroups]));
    rec.set("response_length", sums[StepSums::kResponseTokens] / n);
    rec.set("generated_tokens", world_.all_reduce_value(static_cast<double>(generated)));
    rec.set("stopped_at_eos_rate", sums[StepSums::kStoppedAtEos] / n);
    rec.set("generate_s", times[0]);
    rec.set("grade_wait_s", times[1]);
    rec.set("train_s", times[2]);
    const double step_s = seconds_since(step_start);
    rec.set("step_seconds", step_s);
    rec.set("rollouts_per_s", sums[StepSums::kRollouts] / step_s);
    rec.set("generated_tokens_per_s",
            times[0] > 0 ? sums[StepSums::kResponseTokens] / D / times[0] : 0.0);
    summary.generate_seconds += times[0];
    summary.grade_seconds += times[1];
    summary.train_seconds += times[2];
    summary.generated_tokens += sums[StepSums::kResponseTokens];
    return rec;
  }

  static std::string step_text(const train::MetricsRecord& rec) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "reward %.3f pass %.1f%% uniform %.0f%% len %.0f clip %.3f gen %.1fs grade "
                  "%.1fs train %.1fs",
                  rec.get("reward_mean"), 100 * rec.get("pass_rate"),
                  100 * rec.get("uniform_group_share"), rec.get("response_length"),
                  rec.get("clip_fraction"), rec.get("generate_s"), rec.get("grade_wait_s"),
                  rec.get("train_s"));
    std::string text = buf;
    if (rec.get("val_pass1", -1) >= 0)
      text += " val Pass@1 " + format_value(rec.get("val_pass1"), "%.1f") + "%";
    return text;
  }

  const train::RunConfig& config_;
  const train::GrpoConfig& g_;
  GrpoOptions options_;
  // Forked before the trainer allocates the model (rl/reward.hpp: the grading
  // process keeps a snapshot of this process as it is then).
  RewardGrader grader_;
  train::Trainer trainer_;
  bool root_ = true;
  parallel::Communicator& world_;
  PromptSet prompts_;
  PromptSet val_;
  std::optional<model::Model<float>> reference_;
  std::optional<train::MetricsWriter> metrics_;
  int64_t eos_id_ = -1;
  int64_t pad_id_ = 0;
};

}  // namespace

PromptSet load_prompts(const std::string& path, const io::Tokenizer& tokenizer,
                       const std::string& format, const std::string& prompt_template,
                       int64_t max_prompt_tokens, bool strict) {
  const orlib::eval::CodeKind kind = orlib::eval::parse_code_kind(format);
  JsonlOptions read;
  read.strict = strict;
  const std::vector<orlib::eval::Benchmark> benches =
      orlib::eval::load_benchmarks({path}, false, read);
  PromptSet out;
  out.skipped_lines = benches.front().read.skipped;
  for (const orlib::eval::BenchItem& item : benches.front().items) {
    if (item.truth.kind == orlib::eval::TruthKind::unknown) {
      ++out.unknown_truth;
      continue;
    }
    std::string content = orlib::eval::make_prompt(item.question, kind);
    if (!prompt_template.empty()) {
      content = prompt_template;
      const size_t at = content.find("{question}");
      content.replace(at, std::string("{question}").size(), item.question);
    }
    const nlohmann::json messages =
        nlohmann::json::array({{{"role", "user"}, {"content", content}}});
    PromptItem p;
    p.id = item.id;
    p.tokens = io::encode_chat_prompt(tokenizer, messages, path);
    p.truth = item.truth;
    if (static_cast<int64_t>(p.tokens.size()) > max_prompt_tokens) {
      ++out.too_long;
      continue;
    }
    out.items.push_back(std::move(p));
  }
  return out;
}

GrpoSummary run_grpo(const train::RunConfig& config, const GrpoOptions& options) {
  if (config.mode != train::DataMode::kGrpo)
    throw Error("run_grpo needs data.mode = \"grpo\"").field("data.mode");
  GrpoLoop loop(config, options);
  return loop.run();
}

std::string format_grpo_summary(const GrpoSummary& s) {
  char buf[512];
  const double total = s.generate_seconds + s.grade_seconds + s.train_seconds;
  std::snprintf(buf, sizeof buf,
                "grpo: %lld steps, %lld rollouts, mean reward %.3f, pass rate %.1f%%\n"
                "time: generate %.1f s (%.0f%%), grade (waited) %.1f s (%.0f%%), train %.1f s "
                "(%.0f%%); %.1f rollouts/s, %.1f generated tokens/s\n",
                static_cast<long long>(s.train.steps), static_cast<long long>(s.rollouts),
                s.mean_reward, 100 * s.pass_rate, s.generate_seconds,
                total > 0 ? 100 * s.generate_seconds / total : 0.0, s.grade_seconds,
                total > 0 ? 100 * s.grade_seconds / total : 0.0, s.train_seconds,
                total > 0 ? 100 * s.train_seconds / total : 0.0,
                s.train.seconds > 0 ? static_cast<double>(s.rollouts) / s.train.seconds : 0.0,
                s.generate_seconds > 0 ? s.generated_tokens / s.generate_seconds : 0.0);
  std::string out = buf;
  if (s.final_val_pass1 >= 0)
    out += "validation Pass@1 (greedy): " + format_value(s.final_val_pass1, "%.1f") + "%\n";
  if (!s.train.last_checkpoint.empty()) out += "checkpoint: " + s.train.last_checkpoint + "\n";
  if (!s.train.metrics_jsonl.empty()) out += "metrics: " + s.train.metrics_jsonl + "\n";
  return out;
}

}  // namespace trex::rl
