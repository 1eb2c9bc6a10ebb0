#include "trex/or/eval/eval.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/log.hpp"
#include "trex/core/progress.hpp"
#include "trex/core/strings.hpp"
#include "trex/or/eval/bench.hpp"
#include "trex/or/eval/report.hpp"
#include "trex/or/eval/runner.hpp"
#include "trex/or/eval/sandbox.hpp"

namespace trex::orlib::eval {
namespace {

constexpr size_t kMaxCodeBytes = 64u << 10;

struct Unit {
  enum Type : uint8_t { excluded, missing, run } type;
  uint32_t bench;
  uint32_t item;
  uint32_t sample;
};

struct Ready {
  std::string line;  // items.jsonl record
  Category category = Category::no_code;
  std::string kind;
  double wall = 0.0;
};

nlohmann::json truth_json(const GroundTruth& t) {
  nlohmann::json j;
  j["kind"] = to_string(t.kind);
  j["status"] = t.status;
  j["value"] = std::isfinite(t.value) ? nlohmann::json(t.value) : nlohmann::json(nullptr);
  return j;
}

nlohmann::json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

int default_jobs() {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return static_cast<int>(std::max(1L, cores));
}

nlohmann::json run_eval(const EvalOptions& o) {
  if (o.bench_paths.empty())
    throw Error("at least one benchmark file is required").field("--bench");
  if (o.completions_path.empty())
    throw Error("a completions file is required").field("--completions");
  if (o.out_dir.empty()) throw Error("an output directory is required").field("--out");
  if (o.k < 1) throw Error("must be at least 1").field("--k");
  if (!(o.timeout > 0)) throw Error("must be positive").field("--timeout");
  if (o.solver != "glpk" && o.solver != "cbc")
    throw Error("expected glpk or cbc").field("--solver");
  const auto start_time = std::chrono::steady_clock::now();

  JsonlOptions read;
  read.strict = o.strict;
  std::vector<Benchmark> benches = load_benchmarks(o.bench_paths, o.sentinel_as_unknown, read);
  JoinStats join;
  SampleTable samples = load_completions(o.completions_path, benches, join, read);
  nlohmann::json input = {{"strict", o.strict}};
  int64_t skipped_lines = 0, repaired_records = 0;
  auto note_input = [&](const JsonlStats& s) {
    skipped_lines += s.skipped;
    repaired_records += s.repaired;
    if (s.skipped > 0) {
      log::warn("or eval: ", s.path, ": ", s.summary());
      for (const auto& k : s.skips) log::warn("  ", s.path, ":", k.line, ": ", k.reason);
    } else if (s.repaired > 0) {
      log::info("or eval: ", s.path, ": ", s.summary());
    }
    return s.to_json();
  };
  input["benchmarks"] = nlohmann::json::array();
  for (const auto& b : benches) input["benchmarks"].push_back(note_input(b.read));
  input["completions"] = note_input(join.read);
  if (join.unmatched + join.ambiguous > 0) {
    log::warn("or eval: ", join.unmatched, " unmatched and ", join.ambiguous,
              " ambiguous completion records");
    for (const auto& e : join.examples) log::warn("  ", e);
  }

  // Units in output order, and whether any completion is Python.
  std::vector<Unit> units;
  bool any_python = false;
  for (uint32_t b = 0; b < benches.size(); ++b)
    for (uint32_t i = 0; i < benches[b].items.size(); ++i) {
      const auto& list = samples[b][i];
      if (benches[b].items[i].truth.kind == TruthKind::unknown) {
        units.push_back({Unit::excluded, b, i, 0});
        continue;
      }
      if (list.empty()) {
        units.push_back({Unit::missing, b, i, 0});
        continue;
      }
      for (uint32_t s = 0; s < list.size(); ++s) {
        units.push_back({Unit::run, b, i, s});
        if (!any_python && extract_code(list[s], o.format).kind == CodeKind::python)
          any_python = true;
      }
    }

  SandboxConfig sc;
  sc.jobs = o.jobs > 0 ? o.jobs : default_jobs();
  sc.uid_base = o.sandbox_uid;
  sc.temp_root = o.temp_root;
  Sandbox sandbox(sc);

  RunSettings settings;
  settings.solver = o.solver;
  settings.limits.wall_seconds = o.timeout;
  settings.limits.cpu_seconds = o.timeout;
  settings.limits.memory_bytes = o.memory_mb << 20;
  settings.limits.max_processes = o.max_processes;
  nlohmann::json python_info = nullptr;
  if (any_python) {
    settings.python = resolve_executable(o.python);
    if (settings.python.empty())
      throw Error("Python interpreter '" + o.python + "' not found").field("--python");
    settings.python_env = python_environment(settings.python);
    python_info = python_preflight(sandbox, settings);
    python_info["path"] = settings.python;
  }

  // Tallies.
  std::vector<BenchTally> tallies(benches.size());
  std::vector<std::vector<int>> tally_index(benches.size());
  for (size_t b = 0; b < benches.size(); ++b) {
    tallies[b].name = benches[b].name;
    tallies[b].path = benches[b].path;
    tallies[b].has_types = benches[b].has_types;
    tally_index[b].assign(benches[b].items.size(), -1);
    for (size_t i = 0; i < benches[b].items.size(); ++i) {
      const BenchItem& item = benches[b].items[i];
      if (item.truth.kind == TruthKind::unknown) {
        ++tallies[b].excluded_unknown;
        continue;
      }
      if (item.truth.kind == TruthKind::no_solution) ++tallies[b].no_solution_items;
      if (samples[b][i].empty()) ++tallies[b].missing;
      tally_index[b][i] = static_cast<int>(tallies[b].items.size());
      tallies[b].items.push_back({item.problem_type, 0, 0});
    }
  }

  ensure_parent_dir(o.out_dir + "/items.jsonl");
  JsonlWriter items_out(o.out_dir + "/items.jsonl");
  std::map<size_t, Ready> ready;
  std::map<size_t, Extraction> extractions;  // units running in the sandbox
  size_t next_unit = 0, next_emit = 0;
  const size_t window = 256 + 4 * static_cast<size_t>(sc.jobs);
  std::map<std::string, std::pair<int64_t, double>> by_kind;  // kind -> (samples, wall sum)
  std::optional<Progress> progress;
  if (o.progress) progress.emplace("or eval", static_cast<int64_t>(units.size()));
  int64_t correct_total = 0;

  auto base_record = [&](const Unit& u) {
    const Benchmark& bm = benches[u.bench];
    const BenchItem& item = bm.items[u.item];
    nlohmann::json j;
    j["bench"] = bm.name;
    j["id"] = item.id;
    j["sample"] = u.sample;
    j["problem_type"] =
        item.problem_type.empty() ? nlohmann::json(nullptr) : nlohmann::json(item.problem_type);
    j["truth"] = truth_json(item.truth);
    return j;
  };

  auto finish_sample = [&](size_t index, const Extraction& ex, const Outcome& out) {
    const Unit& u = units[index];
    const BenchItem& item = benches[u.bench].items[u.item];
    Category category =
        out.ran ? grade(o.rule, item.truth, out.status, out.objective) : out.category;
    nlohmann::json j = base_record(u);
    j["format"] = to_string(ex.kind);
    j["extraction"] =
        ex.kind == CodeKind::none ? nlohmann::json(nullptr) : nlohmann::json(ex.method);
    j["code"] = ex.code.size() > kMaxCodeBytes ? ex.code.substr(0, kMaxCodeBytes) + "\n[truncated]"
                                               : ex.code;
    j["status"] = to_string(out.status);
    j["objective"] = number_or_null(out.objective);
    j["objective_source"] = out.objective_source;
    j["verdict"] = to_string(category);
    j["correct"] = category == Category::correct;
    std::string detail = out.detail;
    if (!ex.detail.empty()) detail = detail.empty() ? ex.detail : detail + "; " + ex.detail;
    j["detail"] = detail;
    j["stderr"] = out.stderr_excerpt;
    j["stdout"] = out.stdout_excerpt;
    j["sandbox_end"] =
        out.sandbox_end.empty() ? nlohmann::json(nullptr) : nlohmann::json(out.sandbox_end);
    j["wall_s"] = out.wall_seconds;
    j["cpu_s"] = out.cpu_seconds;
    j["peak_rss_kb"] = out.peak_rss_kb;
    Ready r;
    r.line = dump_compact(j);
    r.category = category;
    r.kind = to_string(ex.kind);
    r.wall = out.wall_seconds;
    ready.emplace(index, std::move(r));
  };

  auto emit = [&]() {
    while (true) {
      auto it = ready.find(next_emit);
      if (it == ready.end()) break;
      const Unit& u = units[next_emit];
      items_out.write_line(it->second.line);
      if (u.type == Unit::run) {
        BenchTally& t = tallies[u.bench];
        ItemTally& it_tally = t.items[static_cast<size_t>(tally_index[u.bench][u.item])];
        it_tally.n += 1;
        const Category c = it->second.category;
        t.categories[static_cast<size_t>(c)] += 1;
        t.samples += 1;
        if (c == Category::correct) {
          it_tally.c += 1;
          ++correct_total;
        }
        auto& k = by_kind[it->second.kind];
        k.first += 1;
        k.second += it->second.wall;
      }
      ready.erase(it);
      ++next_emit;
      if (progress)
        progress->update(static_cast<int64_t>(next_emit),
                         "correct " + std::to_string(correct_total));
    }
  };

  // Produces the next sandbox task, settling units that need no execution on the way.
  auto next = [&]() -> std::optional<std::pair<int64_t, SandboxTask>> {
    while (next_unit < units.size()) {
      if (next_unit >= next_emit + window) return std::nullopt;
      const size_t index = next_unit++;
      const Unit& u = units[index];
      if (u.type != Unit::run) {
        nlohmann::json j = base_record(u);
        j["verdict"] = u.type == Unit::excluded ? "excluded_unknown_truth" : "no_code";
        j["correct"] = false;
        if (u.type == Unit::excluded) j["samples"] = samples[u.bench][u.item].size();
        j["detail"] = u.type == Unit::excluded ? "ground truth unknown: not scored"
                                               : "no completion for this item";
        Ready r;
        r.line = dump_compact(j);
        ready.emplace(index, std::move(r));  // missing items count as n = 0 in the tallies
        emit();
        continue;
      }
      Extraction ex = extract_code(samples[u.bench][u.item][u.sample], o.format);
      if (ex.kind == CodeKind::none) {
        Outcome out;
        out.category = ex.failure;
        finish_sample(index, ex, out);
        emit();
        continue;
      }
      SandboxTask task = make_task(ex, settings);
      extractions.emplace(index, std::move(ex));
      return std::make_pair(static_cast<int64_t>(index), std::move(task));
    }
    return std::nullopt;
  };
  auto done = [&](int64_t id, SandboxResult&& result) {
    const size_t index = static_cast<size_t>(id);
    auto it = extractions.find(index);
    Outcome out = interpret(it->second, std::move(result), o.solver);
    finish_sample(index, it->second, out);
    extractions.erase(it);
    emit();
  };
  sandbox.run(next, done);
  emit();
  if (next_emit != units.size()) throw Error("internal: evaluation ended with unsettled items");
  if (progress) progress->finish("correct " + std::to_string(correct_total));
  items_out.commit();

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  nlohmann::json extra;
  extra["settings"] = {{"rule", to_string(o.rule)},
                       {"rule_description", rule_description(o.rule)},
                       {"k", o.k},
                       {"timeout_s", o.timeout},
                       {"jobs", sc.jobs},
                       {"format", o.format == CodeKind::none ? "auto" : to_string(o.format)},
                       {"solver", o.solver},
                       {"memory_mb", o.memory_mb},
                       {"max_processes", o.max_processes},
                       {"sentinel_no_solution", o.sentinel_as_unknown ? "unknown" : "no_solution"},
                       {"completions", o.completions_path}};
  const IsolationInfo& iso = sandbox.isolation();
  extra["isolation"] = {{"summary", iso.describe()},
                        {"landlock_abi", iso.landlock_abi},
                        {"landlock_fs", iso.landlock_fs},
                        {"landlock_net", iso.landlock_net},
                        {"landlock_scope", iso.landlock_scope},
                        {"uid_per_slot", iso.uid_per_slot},
                        {"kernel_process_limit", iso.kernel_nproc},
                        {"pidfd", iso.pidfd}};
  extra["python"] = python_info;
  input["skipped_lines"] = skipped_lines;
  input["repaired_records"] = repaired_records;
  extra["input"] = input;
  extra["skipped_lines"] = skipped_lines;
  extra["join"] = {{"records", join.records},     {"samples", join.samples},
                   {"by_id", join.by_id},         {"by_question", join.by_question},
                   {"unmatched", join.unmatched}, {"ambiguous", join.ambiguous},
                   {"examples", join.examples}};
  nlohmann::json kinds = nlohmann::json::object();
  for (const auto& [kind, v] : by_kind)
    kinds[kind] = {{"samples", v.first},
                   {"mean_wall_s", v.first ? v.second / static_cast<double>(v.first) : 0.0}};
  int64_t total_samples = 0;
  for (const auto& t : tallies) total_samples += t.samples;
  extra["timing"] = {
      {"seconds", seconds},
      {"samples_per_second", seconds > 0 ? static_cast<double>(total_samples) / seconds : 0.0},
      {"by_format", kinds},
      {"harness_peak_rss_kb", self_peak_rss_kb()}};
  nlohmann::json report = build_report(tallies, o.k, extra);
  write_file_atomic(o.out_dir + "/report.json", report.dump(2) + "\n");
  write_file_atomic(o.out_dir + "/report.md", render_markdown(report));
  return report;
}

}  // namespace trex::orlib::eval
