#include "trex/rl/reward.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "trex/core/error.hpp"
#include "trex/core/log.hpp"
#include "trex/core/process_pool.hpp"
#include "trex/core/rng.hpp"
#include "trex/core/strings.hpp"
#include "trex/or/eval/eval.hpp"
#include "trex/or/eval/sandbox.hpp"

// Fork safety: why a grading process forked once, not the Sandbox in this one.
//
// The sandbox forks a pool worker per task that runs library code before any
// exec (malloc, opendir, fflush(nullptr); for MathProg/LP the translator and
// the solver). Forked from a trainer whose other threads are running, a worker
// inherits every lock as it was at that instant. glibc resets its malloc,
// stdio-list, loader and NSS locks in the child, not the lock of each FILE,
// which fflush(nullptr) takes: a trainer thread inside fwrite at that instant
// (a log line, an AtomicFile) leaves the worker blocked until the pool kills it
// 60 s past the task's limit, and the rollout is graded runtime_missing
// (measured: 1 of 8 tasks while another thread kept a FILE busy; the parent's
// own fflush(nullptr) before each fork waited minutes for it as well). So do
// the environment lock (setenv in the task child) and our own mutexes (log).
// OpenMP is not the hazard: libgomp's team belongs to the thread that ran the
// parallel region, never the forking one. Per-task forks of a trainer also copy
// its page tables, make its GEMMs pay copy-on-write faults while a worker
// lives, count its mappings against the MathProg/LP child's address-space
// limit, and the Sandbox makes its owner a subreaper that kills the owner's
// unknown children when it is destroyed.
//
// So the grader forks once, at construction, from its own long-lived thread
// (the parent-death signal follows that thread). The grading process is
// single-threaded, owns the Sandbox and makes every later fork; batches and
// results cross a socket (ProcessPool, one long-lived worker), so this
// process's threads share nothing with it. Completions are extracted there too:
// a parser fault on a hostile completion cannot take the trainer down. A
// grading process that dies is replaced (forked from this process as it is
// then) and the batch retried once.

namespace trex::rl {
namespace eval = orlib::eval;

namespace {

// Requests to the grading process.
constexpr uint8_t kOpen = 0;
constexpr uint8_t kBatch = 1;
constexpr uint8_t kClose = 2;

// The pool kills a grading process that takes longer than this per batch:
// every task can take its wall time plus the sandbox's 60 s worker grace.
double batch_timeout(size_t tasks, int jobs, const eval::SandboxLimits& limits) {
  const double rounds = std::ceil(static_cast<double>(tasks) / std::max(1, jobs)) + 1.0;
  return 120.0 + rounds * (std::max(limits.wall_seconds, 20.0) + 61.0);
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// This process's virtual size in bytes (VmSize), 0 when unknown.
[[maybe_unused]] uint64_t virtual_size_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (starts_with(line, "VmSize:")) return std::stoull(line.substr(7)) << 10;
  return 0;
}

void check_request(const RewardRequest& r) {
  if (r.truth.kind == eval::TruthKind::unknown)
    throw Error("the ground truth of prompt '" + r.prompt_key + "' is unknown: it cannot be graded")
        .field("truth");
  if (r.truth.kind == eval::TruthKind::optimal && !std::isfinite(r.truth.value))
    throw Error("the optimal value of prompt '" + r.prompt_key + "' is not a finite number")
        .field("truth");
}

// What the grading process reports for one completion.
struct Verdict {
  eval::Category category = eval::Category::no_code;
  bool extracted = false;
  double wall_seconds = 0.0;
  std::string detail;
  // False for sandbox set-up failures (a fault of the harness, not of the
  // completion): they are not remembered.
  bool cacheable = true;
};

// ------------------------------------------------------------ grading process

// The grading process's state: its Sandbox and how Python runs.
class GradingProcess {
 public:
  explicit GradingProcess(const RewardOptions& options)
      : options_(options), sandbox_(sandbox_config(options)), settings_(options.run) {}

  std::string isolation() const { return sandbox_.isolation().describe(); }

  // Batch request (after the op byte) -> response.
  std::string grade(MessageReader& in) {
    const uint64_t count = in.get<uint64_t>();
    std::vector<eval::GroundTruth> truths(count);
    std::vector<std::string> completions(count);
    for (uint64_t i = 0; i < count; ++i) {
      truths[i].kind = in.get<eval::TruthKind>();
      truths[i].value = in.get<double>();
      completions[i] = in.get_string();
    }
    std::vector<Verdict> verdicts(count);
    std::vector<eval::Extraction> extractions(count);
    std::vector<size_t> to_run;
    std::string python_note;
    for (size_t i = 0; i < count; ++i) {
      extractions[i] = eval::extract_code(completions[i], options_.format);
      const eval::Extraction& ex = extractions[i];
      Verdict& v = verdicts[i];
      if (ex.kind == eval::CodeKind::none) {
        v.category = ex.failure;
        v.detail = ex.detail;
        continue;
      }
      v.extracted = true;
      if (ex.kind == eval::CodeKind::python && !python_ready(python_note)) {
        v.category = eval::Category::runtime_missing;
        v.detail = "Python unavailable: " + python_error_;
        continue;
      }
      to_run.push_back(i);
    }
    size_t next_run = 0;
    sandbox_.run(
        [&]() -> std::optional<std::pair<int64_t, eval::SandboxTask>> {
          if (next_run == to_run.size()) return std::nullopt;
          const size_t i = to_run[next_run++];
          return std::make_pair(static_cast<int64_t>(i),
                                eval::make_task(extractions[i], settings_));
        },
        [&](int64_t id, eval::SandboxResult&& result) {
          const size_t i = static_cast<size_t>(id);
          const eval::Extraction& ex = extractions[i];
          const eval::Outcome out = eval::interpret(ex, std::move(result), settings_.solver);
          Verdict& v = verdicts[i];
          v.category = out.ran ? eval::grade(options_.rule, truths[i], out.status, out.objective)
                               : out.category;
          v.detail = out.detail;
          if (!ex.detail.empty())
            v.detail = v.detail.empty() ? ex.detail : v.detail + "; " + ex.detail;
          v.wall_seconds = out.wall_seconds;
          v.cacheable = out.sandbox_end != eval::to_string(eval::SandboxEnd::setup_failed);
        });
    MessageWriter out;
    out.put(static_cast<uint64_t>(to_run.size())).put(std::string_view(python_note));
    for (const Verdict& v : verdicts)
      out.put(v.category)
          .put(v.extracted)
          .put(v.wall_seconds)
          .put(std::string_view(v.detail))
          .put(v.cacheable);
    return out.take();
  }

 private:
  static eval::SandboxConfig sandbox_config(const RewardOptions& o) {
    eval::SandboxConfig c;
    c.jobs = o.jobs > 0 ? o.jobs : eval::default_jobs();
    c.uid_base = o.uid_base;
    c.temp_root = o.temp_root;
    return c;
  }

  // Checks the interpreter once, on the first Python completion; `note` gets
  // the reason when it cannot be used (the harness logs it).
  bool python_ready(std::string& note) {
    if (!python_checked_) {
      python_checked_ = true;
      const std::string name = settings_.python.empty() ? "python3" : settings_.python;
      try {
        settings_.python = eval::resolve_executable(name);
        if (settings_.python.empty()) throw Error("Python interpreter '" + name + "' not found");
        if (settings_.python_env.empty())
          settings_.python_env = eval::python_environment(settings_.python);
        eval::python_preflight(sandbox_, settings_);
      } catch (const std::exception& e) {
        python_error_ = e.what();
        note = python_error_;
      }
    }
    return python_error_.empty();
  }

  const RewardOptions& options_;
  eval::Sandbox sandbox_;
  eval::RunSettings settings_;
  bool python_checked_ = false;
  std::string python_error_;
};

// ------------------------------------------------------------ cache

struct CacheKey {
  std::string prompt_key;
  uint64_t completion_hash = 0;
  bool operator==(const CacheKey&) const = default;
};
struct CacheKeyHash {
  size_t operator()(const CacheKey& k) const {
    return static_cast<size_t>(hash_combine(hash_string(k.prompt_key), k.completion_hash));
  }
};

// Graded completions, least recently used dropped first.
class RolloutCache {
 public:
  explicit RolloutCache(size_t capacity) : capacity_(capacity) {}

  const GradedRollout* find(const CacheKey& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }

  void insert(const CacheKey& key, const GradedRollout& value) {
    if (capacity_ == 0) return;
    if (auto it = index_.find(key); it != index_.end()) {
      it->second->second = value;
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    order_.emplace_front(key, value);
    index_.emplace(key, order_.begin());
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

 private:
  using Entry = std::pair<CacheKey, GradedRollout>;
  size_t capacity_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<CacheKey, std::list<Entry>::iterator, CacheKeyHash> index_;
};

struct Batch {
  std::vector<GradedRollout> results;
  RewardStats stats;
};

}  // namespace

// ------------------------------------------------------------ engine

// The grader's thread, its job queue, the socket to the grading process and
// the cache. Everything but post() and `pending` runs on that thread.
class RewardGrader::Engine {
 public:
  explicit Engine(const RewardOptions& options) : options_(options), cache_(options.cache_entries) {
    thread_ = std::thread([this] { loop(); });
  }

  ~Engine() {
    // Jobs run in order: a batch in flight ends first.
    post([this] { close(); }).wait();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

  template <typename Fn>
  auto post(Fn fn) -> std::future<decltype(fn())> {
    auto task = std::make_shared<std::packaged_task<decltype(fn())()>>(std::move(fn));
    auto future = task->get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back([task] { (*task)(); });
    }
    wake_.notify_one();
    return future;
  }

  // Forks the grading process and creates its sandbox; returns its isolation.
  std::string open() {
    ProcessPoolOptions po;
    po.workers = 1;
    po.process_per_item = false;   // one long-lived grading process
    po.limits.core_dumps = false;  // it is a copy of this process
    pool_ = std::make_unique<ProcessPool>(
        po, [this](int, const PoolItem& item) { return serve(item); });
    const std::string response = call(std::string(1, static_cast<char>(kOpen)), 300.0);
    MessageReader in(response);
    return in.get_string();
  }

  Batch run(std::vector<RewardRequest> requests) {
    const auto start = Clock::now();
    Batch batch;
    batch.results.resize(requests.size());
    // Requests answered by the cache, the first of each key (sent), and copies of those.
    std::vector<CacheKey> keys(requests.size());
    std::vector<size_t> sent;                       // request index of each completion sent
    std::vector<std::pair<size_t, size_t>> copies;  // (request, sent slot)
    std::unordered_map<CacheKey, size_t, CacheKeyHash> slot_of;
    for (size_t i = 0; i < requests.size(); ++i) {
      keys[i] = {requests[i].prompt_key, hash_string(requests[i].completion)};
      if (const GradedRollout* hit = cache_.find(keys[i])) {
        batch.results[i] = *hit;
        batch.results[i].cached = true;
        ++batch.stats.cache_hits;
        continue;
      }
      auto [it, fresh] = slot_of.emplace(keys[i], sent.size());
      if (fresh)
        sent.push_back(i);
      else
        copies.emplace_back(i, it->second);
    }
    if (!sent.empty()) {
      MessageWriter out;
      out.put(kBatch).put(static_cast<uint64_t>(sent.size()));
      for (size_t i : sent)
        out.put(requests[i].truth.kind)
            .put(requests[i].truth.value)
            .put(std::string_view(requests[i].completion));
      const int jobs = options_.jobs > 0 ? options_.jobs : eval::default_jobs();
      const std::string response =
          call(out.take(), batch_timeout(sent.size(), jobs, options_.run.limits));
      MessageReader in(response);
      batch.stats.sandbox_runs = static_cast<int64_t>(in.get<uint64_t>());
      if (std::string note = in.get_string(); !note.empty())
        log::warn("rl reward: Python completions are graded runtime_missing: ", note);
      for (size_t i : sent) {
        GradedRollout& g = batch.results[i];
        g.category = in.get<eval::Category>();
        g.extracted = in.get<bool>();
        g.wall_seconds = in.get<double>();
        g.detail = in.get_string();
        const bool cacheable = in.get<bool>();
        g.reward = reward_of(g.category, g.extracted, options_);
        if (cacheable) cache_.insert(keys[i], g);
      }
    }
    for (const auto& [i, slot] : copies) {
      batch.results[i] = batch.results[sent[slot]];
      batch.results[i].cached = true;
      ++batch.stats.cache_hits;
    }
    batch.stats.graded = static_cast<int64_t>(requests.size());
    for (const GradedRollout& g : batch.results)
      ++batch.stats.categories[static_cast<size_t>(g.category)];
    batch.stats.seconds = seconds_since(start);
    return batch;
  }

  std::optional<std::future<Batch>> pending;  // the caller's thread only

 private:
  void loop() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  // One request to the grading process; a fresh process and one retry when it died.
  std::string call(const std::string& request, double timeout_seconds) {
    for (int attempt = 0;; ++attempt) {
      PoolItem item;
      item.request = request;
      item.timeout_seconds = timeout_seconds;
      PoolResult r = pool_->run_one(std::move(item));
      if (r.ok()) return std::move(r.response);
      if (r.status == PoolStatus::failed) throw Error("rl reward: grading failed: " + r.error);
      if (attempt >= 1)
        throw Error(std::string("rl reward: the grading process ") + to_string(r.status) +
                    " twice in a row: " + r.error);
      log::warn("rl reward: the grading process ", to_string(r.status), " (", r.error,
                "); forking a fresh one and retrying");
    }
  }

  void close() {
    if (!pool_) return;
    try {
      call(std::string(1, static_cast<char>(kClose)), 120.0);
    } catch (const std::exception& e) {
      log::warn("rl reward: closing the grading process: ", e.what());
    }
    pool_.reset();
  }

  // In the grading process (a fork of this one: `process_` is set only there).
  std::string serve(const PoolItem& item) {
    MessageReader in(item.request);
    const uint8_t op = in.get<uint8_t>();
    if (op == kClose) {
      process_.reset();  // removes the sandbox directory, frees the uids
      return {};
    }
    if (!process_) process_ = std::make_unique<GradingProcess>(options_);
    if (op == kOpen) return MessageWriter().put(std::string_view(process_->isolation())).take();
    return process_->grade(in);
  }

  const RewardOptions& options_;
  RolloutCache cache_;
  std::unique_ptr<ProcessPool> pool_;
  std::unique_ptr<GradingProcess> process_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

// ------------------------------------------------------------ public

eval::RunSettings rollout_run_settings() {
  eval::RunSettings s;
  s.limits.wall_seconds = 10.0;
  s.limits.cpu_seconds = 10.0;
  return s;
}

double reward_of(eval::Category category, bool extracted, const RewardOptions& o) {
  double reward = category == eval::Category::correct ? o.correct
                  : eval::executed(category)          ? o.wrong
                                                      : o.failure_penalty;
  const bool block =
      category != eval::Category::no_code && category != eval::Category::extraction_failed;
  if (extracted && block) reward += o.format_reward;
  return reward;
}

RewardGrader::RewardGrader(RewardOptions options) : options_(std::move(options)) {
  const eval::SandboxLimits& lim = options_.run.limits;
  if (!(lim.wall_seconds > 0) || !(lim.cpu_seconds > 0))
    throw Error("sandbox time limits must be positive").field("run.limits");
  if (options_.run.solver != "glpk" && options_.run.solver != "cbc")
    throw Error("expected glpk or cbc").field("run.solver");
  if (options_.jobs < 0) throw Error("must be 0 (online cores) or more").field("jobs");
#if !defined(__SANITIZE_ADDRESS__)  // under ASan the sandbox sets no address-space limit
  if (const uint64_t size = virtual_size_bytes(); size > lim.memory_bytes / 2)
    log::warn("rl reward: this process maps ", size >> 20, " MiB; MathProg/LP tasks run in ",
              "copies of it under a ", lim.memory_bytes >> 20,
              " MiB address-space limit and may fail: build the RewardGrader earlier");
#endif
  engine_ = std::make_unique<Engine>(options_);
  isolation_ = engine_->post([e = engine_.get()] { return e->open(); }).get();
}

RewardGrader::~RewardGrader() = default;

bool RewardGrader::in_flight() const {
  return engine_->pending.has_value();
}

std::vector<GradedRollout> RewardGrader::grade(const std::vector<RewardRequest>& requests) {
  start(requests);
  return wait();
}

void RewardGrader::start(std::vector<RewardRequest> requests) {
  if (in_flight()) throw Error("rl reward: a batch is already in flight: wait() for it first");
  for (const RewardRequest& r : requests) check_request(r);
  engine_->pending = engine_->post(
      [e = engine_.get(), r = std::move(requests)]() mutable { return e->run(std::move(r)); });
}

std::vector<GradedRollout> RewardGrader::wait() {
  if (!in_flight()) throw Error("rl reward: no batch in flight: start() one first");
  std::future<Batch> future = std::move(*engine_->pending);
  engine_->pending.reset();
  Batch batch = future.get();
  stats_.graded += batch.stats.graded;
  stats_.cache_hits += batch.stats.cache_hits;
  stats_.sandbox_runs += batch.stats.sandbox_runs;
  for (size_t c = 0; c < stats_.categories.size(); ++c)
    stats_.categories[c] += batch.stats.categories[c];
  stats_.seconds += batch.stats.seconds;
  return std::move(batch.results);
}

}  // namespace trex::rl
