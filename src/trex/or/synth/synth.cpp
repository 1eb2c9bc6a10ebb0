#include "trex/or/synth/synth.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <optional>
#include <unordered_set>

#include "trex/core/error.hpp"
#include "trex/core/progress.hpp"
#include "trex/core/strings.hpp"

namespace trex::orlib {
namespace {

struct Task {
  int64_t index = 0;
  int attempt = 0;
};

struct FrameHeader {
  int64_t index;
  int32_t attempt;
  int32_t accepted;
  uint64_t nl_hash;
  double glpk_seconds;
  double cbc_seconds;
  uint32_t reason_len;
  uint32_t detail_len;
  uint32_t record_len;
};

bool write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool read_all(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

const Family& family_for(const SynthRequest& r, int64_t index) {
  return *r.families[static_cast<size_t>(index % static_cast<int64_t>(r.families.size()))];
}

VerifyOutcome run_task(const SynthRequest& r, const Task& t) {
  try {
    return build_and_verify(family_for(r, t.index), t.index, t.attempt, r.settings);
  } catch (const std::exception& e) {
    VerifyOutcome o;
    o.reject_reason = "internal_error";
    o.detail = e.what();
    return o;
  }
}

// One worker process: reads tasks from `task_fd`, writes result frames to `result_fd`.
[[noreturn]] void worker_main(const SynthRequest& r, int task_fd, int result_fd) {
  Task t;
  while (read_all(task_fd, &t, sizeof t)) {
    VerifyOutcome o = run_task(r, t);
    FrameHeader h{t.index,
                  t.attempt,
                  o.accepted ? 1 : 0,
                  o.nl_hash,
                  o.glpk_seconds,
                  o.cbc_seconds,
                  static_cast<uint32_t>(o.reject_reason.size()),
                  static_cast<uint32_t>(o.detail.size()),
                  static_cast<uint32_t>(o.record.size())};
    if (!write_all(result_fd, &h, sizeof h) ||
        !write_all(result_fd, o.reject_reason.data(), o.reject_reason.size()) ||
        !write_all(result_fd, o.detail.data(), o.detail.size()) ||
        !write_all(result_fd, o.record.data(), o.record.size()))
      break;
  }
  _exit(0);
}

class WorkerPool {
 public:
  WorkerPool(const SynthRequest& request, int jobs) : request_(request) {
    signal(SIGPIPE, SIG_IGN);
    workers_.resize(static_cast<size_t>(jobs));
    for (auto& w : workers_) start(w);
  }
  ~WorkerPool() {
    for (auto& w : workers_) stop(w);
  }

  size_t size() const { return workers_.size(); }
  bool idle(size_t i) const { return !workers_[i].busy; }

  void submit(size_t i, const Task& t) {
    Worker& w = workers_[i];
    w.busy = true;
    w.task = t;
    if (!write_all(w.task_fd, &t, sizeof t)) crashed_.push_back(i);
  }

  // Blocks until at least one result (or a crash report) is available.
  std::vector<std::pair<Task, VerifyOutcome>> wait() {
    std::vector<std::pair<Task, VerifyOutcome>> out;
    for (size_t i : crashed_) out.push_back(crash_outcome(i));
    crashed_.clear();
    if (!out.empty()) return out;
    std::vector<pollfd> fds;
    std::vector<size_t> owner;
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (!workers_[i].busy) continue;
      fds.push_back({workers_[i].result_fd, POLLIN, 0});
      owner.push_back(i);
    }
    if (fds.empty()) return out;
    int rc;
    do rc = poll(fds.data(), fds.size(), -1);
    while (rc < 0 && errno == EINTR);
    if (rc < 0) throw Error(std::string("poll failed: ") + std::strerror(errno));
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      size_t i = owner[k];
      Worker& w = workers_[i];
      FrameHeader h;
      if (!read_all(w.result_fd, &h, sizeof h)) {
        out.push_back(crash_outcome(i));
        continue;
      }
      VerifyOutcome o;
      o.accepted = h.accepted != 0;
      o.nl_hash = h.nl_hash;
      o.glpk_seconds = h.glpk_seconds;
      o.cbc_seconds = h.cbc_seconds;
      o.reject_reason.resize(h.reason_len);
      o.detail.resize(h.detail_len);
      o.record.resize(h.record_len);
      if (!read_all(w.result_fd, o.reject_reason.data(), h.reason_len) ||
          !read_all(w.result_fd, o.detail.data(), h.detail_len) ||
          !read_all(w.result_fd, o.record.data(), h.record_len)) {
        out.push_back(crash_outcome(i));
        continue;
      }
      w.busy = false;
      out.emplace_back(Task{h.index, h.attempt}, std::move(o));
    }
    return out;
  }

 private:
  struct Worker {
    pid_t pid = -1;
    int task_fd = -1;
    int result_fd = -1;
    bool busy = false;
    Task task;
  };

  void start(Worker& w) {
    int task_pipe[2], result_pipe[2];
    if (pipe(task_pipe) != 0 || pipe(result_pipe) != 0)
      throw Error(std::string("pipe failed: ") + std::strerror(errno));
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0) throw Error(std::string("fork failed: ") + std::strerror(errno));
    if (pid == 0) {
      ::close(task_pipe[1]);
      ::close(result_pipe[0]);
      for (auto& other : workers_) {  // do not hold siblings' pipes open
        if (other.task_fd >= 0) ::close(other.task_fd);
        if (other.result_fd >= 0) ::close(other.result_fd);
      }
      worker_main(request_, task_pipe[0], result_pipe[1]);
    }
    ::close(task_pipe[0]);
    ::close(result_pipe[1]);
    w.pid = pid;
    w.task_fd = task_pipe[1];
    w.result_fd = result_pipe[0];
    w.busy = false;
  }

  void stop(Worker& w) {
    if (w.task_fd >= 0) ::close(w.task_fd);
    if (w.result_fd >= 0) ::close(w.result_fd);
    w.task_fd = w.result_fd = -1;
    if (w.pid > 0) {
      int status = 0;
      if (w.busy) kill(w.pid, SIGKILL);
      waitpid(w.pid, &status, 0);
    }
    w.pid = -1;
  }

  std::pair<Task, VerifyOutcome> crash_outcome(size_t i) {
    Worker& w = workers_[i];
    Task t = w.task;
    int status = 0;
    ::close(w.task_fd);
    ::close(w.result_fd);
    w.task_fd = w.result_fd = -1;
    kill(w.pid, SIGKILL);
    waitpid(w.pid, &status, 0);
    VerifyOutcome o;
    o.reject_reason = "worker_crash";
    o.detail = WIFSIGNALED(status)
                   ? "worker killed by signal " + std::to_string(WTERMSIG(status))
                   : "worker exited with status " + std::to_string(WEXITSTATUS(status));
    start(w);
    return {t, o};
  }

  const SynthRequest& request_;
  std::vector<Worker> workers_;
  std::vector<size_t> crashed_;
};

}  // namespace

std::pair<int64_t, int64_t> shard_range(int64_t n, int shard_index, int shard_count) {
  require(shard_count >= 1 && shard_index >= 0 && shard_index < shard_count,
          "shard must be i/k with 0 <= i < k");
  return {n * shard_index / shard_count, n * (shard_index + 1) / shard_count};
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  size_t m = values.size() / 2;
  return values.size() % 2 ? values[m] : 0.5 * (values[m - 1] + values[m]);
}

SynthSummary run_synth(const SynthRequest& request,
                       const std::function<void(const std::string&)>& sink) {
  require(!request.families.empty(), "no families selected");
  require(request.count >= 0, "--n must be non-negative");
  auto start_time = std::chrono::steady_clock::now();
  SynthSummary summary;
  auto [lo, hi] = shard_range(request.count, request.shard_index, request.shard_count);
  summary.first_index = lo;
  summary.end_index = hi;
  for (const Family* f : request.families) summary.families[std::string(f->name())];

  std::deque<Task> retries;
  int64_t next_new = lo;
  int64_t next_write = lo;
  std::map<int64_t, std::pair<Task, VerifyOutcome>> ready;
  std::unordered_set<uint64_t> seen;
  int64_t rejected_total = 0;
  std::optional<Progress> progress;
  if (request.show_progress) progress.emplace("or synth", hi - lo);

  std::optional<WorkerPool> pool;
  if (request.jobs > 0) pool.emplace(request, request.jobs);
  const int64_t lookahead = 8 * std::max(1, request.jobs) + 64;

  auto next_task = [&]() -> std::optional<Task> {
    if (!retries.empty()) {
      Task t = retries.front();
      retries.pop_front();
      return t;
    }
    if (next_new < hi && next_new < next_write + lookahead) return Task{next_new++, 0};
    return std::nullopt;
  };
  auto retry = [&](const Task& t, const VerifyOutcome& why) {
    if (t.attempt + 1 >= request.max_attempts) {
      const auto& stats = summary.families[std::string(family_for(request, t.index).name())];
      throw Error("family '" + std::string(family_for(request, t.index).name()) +
                  "' produced no acceptable instance for index " + std::to_string(t.index) +
                  " in " + std::to_string(request.max_attempts) + " attempts; last rejection: " +
                  why.reject_reason + " (" + why.detail + "); first: " + stats.example_rejection);
    }
    retries.push_back(Task{t.index, t.attempt + 1});
  };
  auto handle = [&](const Task& t, VerifyOutcome o) {
    FamilyStats& stats = summary.families[std::string(family_for(request, t.index).name())];
    if (!o.accepted) {
      stats.rejected[o.reject_reason] += 1;
      if (stats.example_rejection.empty())
        stats.example_rejection = o.reject_reason + ": " + o.detail.substr(0, 500);
      ++rejected_total;
      retry(t, o);
      return;
    }
    ready.emplace(t.index, std::make_pair(t, std::move(o)));
  };
  auto flush = [&]() {
    while (true) {
      auto it = ready.find(next_write);
      if (it == ready.end()) return;
      auto [t, o] = std::move(it->second);
      ready.erase(it);
      FamilyStats& stats = summary.families[std::string(family_for(request, t.index).name())];
      if (!seen.insert(o.nl_hash).second) {
        stats.rejected["duplicate_nl"] += 1;
        ++summary.duplicates;
        ++rejected_total;
        retry(t, o);
        return;
      }
      stats.accepted += 1;
      stats.glpk_seconds.push_back(o.glpk_seconds);
      stats.cbc_seconds.push_back(o.cbc_seconds);
      sink(o.record);
      ++summary.written;
      ++next_write;
    }
  };

  while (next_write < hi) {
    if (pool) {
      for (size_t i = 0; i < pool->size(); ++i) {
        if (!pool->idle(i)) continue;
        auto t = next_task();
        if (!t) break;
        pool->submit(i, *t);
      }
      for (auto& [t, o] : pool->wait()) handle(t, std::move(o));
    } else {
      auto t = next_task();
      if (!t) throw Error("internal: synth scheduler stalled");
      handle(*t, run_task(request, *t));
    }
    flush();
    if (progress) progress->update(summary.written, "rejected " + std::to_string(rejected_total));
  }
  if (progress) progress->finish("rejected " + std::to_string(rejected_total));
  summary.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  return summary;
}

nlohmann::json summary_json(const SynthSummary& s) {
  nlohmann::json j;
  j["first_index"] = s.first_index;
  j["end_index"] = s.end_index;
  j["written"] = s.written;
  j["duplicates_regenerated"] = s.duplicates;
  j["seconds"] = s.seconds;
  int64_t rejected = 0;
  for (const auto& [name, f] : s.families) {
    int64_t fam_rejected = 0;
    for (const auto& [reason, count] : f.rejected) fam_rejected += count;
    rejected += fam_rejected;
    j["families"][name] = {
        {"accepted", f.accepted},
        {"rejected", f.rejected},
        {"rejection_rate",
         f.accepted + fam_rejected > 0
             ? static_cast<double>(fam_rejected) / static_cast<double>(f.accepted + fam_rejected)
             : 0.0},
        {"median_glpk_seconds", median(f.glpk_seconds)},
        {"median_cbc_seconds", median(f.cbc_seconds)},
        {"max_glpk_seconds", f.glpk_seconds.empty()
                                 ? 0.0
                                 : *std::max_element(f.glpk_seconds.begin(), f.glpk_seconds.end())},
        {"max_cbc_seconds", f.cbc_seconds.empty()
                                ? 0.0
                                : *std::max_element(f.cbc_seconds.begin(), f.cbc_seconds.end())},
        {"example_rejection", f.example_rejection}};
  }
  j["rejected"] = rejected;
  j["rejection_rate"] = s.written + rejected > 0 ? static_cast<double>(rejected) /
                                                       static_cast<double>(s.written + rejected)
                                                 : 0.0;
  return j;
}

std::string format_summary(const SynthSummary& s) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-22s %8s %8s %7s %10s %10s  %s\n", "family", "accepted",
                "rejected", "rej%", "glpk med", "cbc med", "rejections by reason");
  out += line;
  int64_t total_acc = 0, total_rej = 0;
  std::vector<double> all_g, all_c;
  for (const auto& [name, f] : s.families) {
    int64_t rej = 0;
    std::vector<std::string> reasons;
    for (const auto& [reason, count] : f.rejected) {
      rej += count;
      reasons.push_back(reason + "=" + std::to_string(count));
    }
    total_acc += f.accepted;
    total_rej += rej;
    all_g.insert(all_g.end(), f.glpk_seconds.begin(), f.glpk_seconds.end());
    all_c.insert(all_c.end(), f.cbc_seconds.begin(), f.cbc_seconds.end());
    double rate = f.accepted + rej
                      ? 100.0 * static_cast<double>(rej) / static_cast<double>(f.accepted + rej)
                      : 0;
    std::snprintf(line, sizeof line, "%-22s %8lld %8lld %6.1f%% %8.1fms %8.1fms  %s\n",
                  name.c_str(), static_cast<long long>(f.accepted), static_cast<long long>(rej),
                  rate, 1e3 * median(f.glpk_seconds), 1e3 * median(f.cbc_seconds),
                  join(reasons, " ").c_str());
    out += line;
  }
  double rate = total_acc + total_rej ? 100.0 * static_cast<double>(total_rej) /
                                            static_cast<double>(total_acc + total_rej)
                                      : 0;
  std::snprintf(line, sizeof line, "%-22s %8lld %8lld %6.1f%% %8.1fms %8.1fms\n", "TOTAL",
                static_cast<long long>(total_acc), static_cast<long long>(total_rej), rate,
                1e3 * median(all_g), 1e3 * median(all_c));
  out += line;
  std::snprintf(line, sizeof line, "%lld records in %.1f s (%.1f records/s)\n",
                static_cast<long long>(s.written), s.seconds,
                s.seconds > 0 ? static_cast<double>(s.written) / s.seconds : 0.0);
  out += line;
  return out;
}

}  // namespace trex::orlib
