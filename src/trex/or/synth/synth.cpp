#include "trex/or/synth/synth.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <optional>
#include <unordered_set>

#include "trex/core/error.hpp"
#include "trex/core/process_pool.hpp"
#include "trex/core/progress.hpp"
#include "trex/core/strings.hpp"

namespace trex::orlib {
namespace {

struct Task {
  int64_t index = 0;
  int attempt = 0;
};

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

std::string encode(const VerifyOutcome& o) {
  return MessageWriter()
      .put(o.accepted)
      .put(o.nl_hash)
      .put(o.glpk_seconds)
      .put(o.cbc_seconds)
      .put(o.reject_reason)
      .put(o.detail)
      .put(o.record)
      .take();
}

VerifyOutcome decode(const PoolResult& result) {
  VerifyOutcome o;
  if (!result.ok()) {
    o.reject_reason = result.status == PoolStatus::failed ? "internal_error" : "worker_crash";
    o.detail = result.error;
    return o;
  }
  MessageReader in(result.response);
  o.accepted = in.get<bool>();
  o.nl_hash = in.get<uint64_t>();
  o.glpk_seconds = in.get<double>();
  o.cbc_seconds = in.get<double>();
  o.reject_reason = in.get_string();
  o.detail = in.get_string();
  o.record = in.get_string();
  return o;
}

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

  ProcessPoolOptions pool_options;
  pool_options.workers = request.jobs;
  pool_options.limits.core_dumps = false;  // GLPK and CBC abort on internal errors
  ProcessPool pool(pool_options, [&](int, const PoolItem& item) {
    return encode(run_task(request, Task{item.id, item.attempt}));
  });
  pool.run(
      [&]() -> std::optional<PoolItem> {
        auto t = next_task();
        if (!t) return std::nullopt;
        PoolItem item;
        item.id = t->index;
        item.attempt = t->attempt;
        return item;
      },
      [&](const PoolItem& item, PoolResult&& result) {
        handle(Task{item.id, item.attempt}, decode(result));
        flush();
        if (progress)
          progress->update(summary.written, "rejected " + std::to_string(rejected_total));
      });
  if (next_write < hi) throw Error("internal: synth scheduler stalled");
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
