// Crash safety: the real `trex` binary is killed with SIGKILL at many points
// while it writes checkpoints (`trex train`), datasets (`trex or synth`,
// `or sft`, `or cpt`) and eval results (`trex or eval`). Kill points are
// deterministic (TREX_FAULT_KILL_AT=k: the k-th AtomicFile / checkpoint event,
// chosen from a traced reference run so that every kind of event on every
// file is hit) plus seeded random delays across the run. After each kill every
// output file must be the old complete file or the new complete one (parsed
// fully, compared with reference runs), a rerun (for training: --resume from
// the last checkpoint) must complete and give the uninterrupted result, and no
// temporary file may remain after it. The figures are printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "reliability/child_process.hpp"
#include "sanitized_build.hpp"
#include "test_paths.hpp"
#include "train/trainer_fixtures.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/checksum.hpp"
#include "trex/core/jsonl.hpp"

namespace {

namespace fs = std::filesystem;
using trex::test::ChildOptions;
using trex::test::ChildResult;
using trex::test::run_child;
using trex::test::TempDir;
using Snapshot = std::map<std::string, std::string>;  // relative path -> bytes

constexpr uint64_t kSeed = 20261204;

// How many deterministic kill points per writer (TREX_KILL_POINTS overrides,
// e.g. for a long soak run). Under the sanitizers a sample of 6: every trial
// there is a killed run, its inspection and a rerun at ASan speed.
size_t kill_point_cap(size_t fallback) {
  if (const char* v = std::getenv("TREX_KILL_POINTS")) return std::stoul(v);
  return trex::test::sanitizer_sample(fallback, 6);
}

Snapshot snapshot(const std::string& dir) {
  Snapshot s;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return s;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file())
      s[fs::relative(e.path(), dir).string()] = trex::read_file(e.path().string());
  return s;
}

void restore(const Snapshot& s, const std::string& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& [rel, bytes] : s) {
    const fs::path p = fs::path(dir) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
  }
}

bool is_temp(const std::string& rel) {
  return rel.find(".tmp.") != std::string::npos || rel.find(".tmp-") != std::string::npos;
}

// Run-dependent values (timings, memory) are dropped before comparing JSON.
bool is_timing_key(std::string key) {
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  auto ends = [&](const std::string& s) {
    return key.size() >= s.size() && key.compare(key.size() - s.size(), s.size(), s) == 0;
  };
  for (const char* part : {"second", "time", "wall", "rss", "elapsed"})
    if (key.find(part) != std::string::npos) return true;
  return ends("_s") || ends("_ms") || ends("per_s");
}
nlohmann::json strip_timings(const nlohmann::json& j) {
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [k, v] : j.items())
      if (!is_timing_key(k)) out[k] = strip_timings(v);
    return out;
  }
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : j) out.push_back(strip_timings(v));
    return out;
  }
  return j;
}

// The file in a run-independent form; throws when it does not parse (torn).
std::string normal_form(const std::string& rel, const std::string& bytes) {
  auto ends = [&](const std::string& s) {
    return rel.size() >= s.size() && rel.compare(rel.size() - s.size(), s.size(), s) == 0;
  };
  if (ends(".json")) return strip_timings(nlohmann::json::parse(bytes)).dump();
  if (ends(".jsonl")) {
    if (!bytes.empty() && bytes.back() != '\n') throw std::runtime_error("no final newline");
    std::string out, line;
    std::istringstream in(bytes);
    while (std::getline(in, line)) out += strip_timings(nlohmann::json::parse(line)).dump() + "\n";
    return out;
  }
  if (ends(".md")) {  // reports with timings in the text: numbers masked
    std::string out;  // every number (digits and points) becomes one '#'
    for (char c : bytes) {
      const bool number = std::isdigit(static_cast<unsigned char>(c)) || c == '.';
      if (!number)
        out += c;
      else if (out.empty() || out.back() != '#')
        out += '#';
    }
    return out;
  }
  return bytes;
}

// One traced AtomicFile / checkpoint event.
struct Event {
  long k = 0;
  std::string kind, path;
};
std::vector<Event> read_trace(const std::string& path) {
  std::vector<Event> events;
  std::ifstream in(path);
  Event e;
  while (in >> e.k >> e.kind >> e.path) events.push_back(e);
  return events;
}

// Kill points: one of every (event kind, file) class first (file names with
// digits collapsed, so every checkpoint's model.safetensors is one class),
// then random others, up to `cap`; seeded.
std::map<std::string, std::vector<long>> event_classes(const std::vector<Event>& events) {
  std::map<std::string, std::vector<long>> classes;
  for (const Event& e : events) {
    std::string name = fs::path(e.path).filename().string();
    for (char& c : name)
      if (std::isdigit(static_cast<unsigned char>(c))) c = '#';
    classes[e.kind + " " + name].push_back(e.k);
  }
  return classes;
}

std::vector<long> choose_points(const std::vector<Event>& events, size_t cap, uint64_t seed) {
  std::map<std::string, std::vector<long>> classes = event_classes(events);
  std::mt19937_64 rng(seed);
  std::vector<std::vector<long>> order;
  for (auto& [key, ks] : classes) order.push_back(ks);
  std::shuffle(order.begin(), order.end(), rng);
  std::set<long> chosen;
  for (const auto& ks : order) {
    if (chosen.size() >= cap) break;
    chosen.insert(ks[rng() % ks.size()]);
  }
  std::vector<long> rest;
  for (const Event& e : events)
    if (!chosen.count(e.k)) rest.push_back(e.k);
  std::shuffle(rest.begin(), rest.end(), rng);
  for (size_t i = 0; chosen.size() < cap && i < rest.size(); ++i) chosen.insert(rest[i]);
  return {chosen.begin(), chosen.end()};
}

ChildOptions traced(const std::string& trace) {
  ChildOptions o;
  o.env = {{"TREX_FAULT_TRACE", trace}};
  return o;
}

struct Figures {
  size_t events = 0;         // traced events of the reference run
  size_t classes = 0;        // of which (event kind, file) classes
  size_t points = 0;         // deterministic kill points tried
  size_t timed = 0;          // random-delay kills tried
  size_t landed = 0;         // of those, the child really died of SIGKILL
  size_t files_checked = 0;  // output files inspected after the kills
  size_t as_old = 0, as_new = 0;
  size_t corrupt = 0, lost = 0;
  size_t temps_after_kill = 0;  // temporaries a kill left (never at a target name)
  size_t reruns_equal = 0;      // reruns / resumes that gave the uninterrupted result
  size_t max_lost_steps = 0;    // training: steps redone after the resume
  std::vector<std::string> problems;

  void print(const std::string& writer) const {
    std::printf(
        "[kill] %s: %zu traced events in %zu classes; kill points %zu deterministic + %zu "
        "random-delay (%zu killed mid-run); files checked %zu",
        writer.c_str(), events, classes, points, timed, landed, files_checked);
    const bool training = writer.rfind("train", 0) == 0;
    if (training)
      std::printf(" (%zu complete checkpoint directories)", as_new);
    else
      std::printf(" (old %zu, new %zu)", as_old, as_new);
    std::printf(
        "; corrupt %zu, lost %zu; temp files left by kills %zu, 0 after the rerun; reruns equal "
        "to the uninterrupted run %zu/%zu",
        corrupt, lost, temps_after_kill, reruns_equal, points + timed);
    if (training) std::printf("; steps lost to a kill at most %zu", max_lost_steps);
    std::printf("\n");
    for (const auto& p : problems) std::printf("[kill]   problem: %s\n", p.c_str());
    std::fflush(stdout);
  }
};

// ---------------------------------------------------------------- datasets

struct DatasetWriter {
  std::string name;
  std::string out;       // the directory the command writes (reset per trial)
  std::string new_args;  // the run under test
  std::string old_args;  // the same command on other input: the "old" files already there
  size_t cap = 30;
  size_t timed = 3;
};

class Reference {
 public:
  Reference(Snapshot a, const Snapshot& b) : files_(std::move(a)) {
    for (const auto& [rel, bytes] : files_) {
      auto it = b.find(rel);
      EXPECT_NE(it, b.end()) << rel << " only in one reference run";
      if (it == b.end()) continue;
      if (it->second == bytes) {
        exact_.insert(rel);
      } else {
        EXPECT_EQ(normal_form(rel, bytes), normal_form(rel, it->second))
            << rel << ": two uninterrupted runs differ beyond timings";
      }
    }
  }
  bool has(const std::string& rel) const { return files_.count(rel) > 0; }
  // Byte-equal, or equal in normal form (two reference runs may or may not
  // print the same timings, so this never depends on whether they did).
  bool matches(const std::string& rel, const std::string& bytes) const {
    auto it = files_.find(rel);
    if (it == files_.end()) return false;
    if (it->second == bytes) return true;
    try {
      return normal_form(rel, bytes) == normal_form(rel, it->second);
    } catch (const std::exception&) {
      return false;
    }
  }
  const Snapshot& files() const { return files_; }
  size_t exact() const { return exact_.size(); }

 private:
  Snapshot files_;
  std::set<std::string> exact_;
};

void expect_rerun_gives_reference(const DatasetWriter& w, const Reference& ref, const Snapshot& old,
                                  const std::string& log, Figures& fig, const std::string& label) {
  const ChildResult again = run_child(w.new_args, log);
  if (again.exit_code != 0) {
    fig.problems.push_back(label + ": rerun failed: " + again.output);
    return;
  }
  const Snapshot now = snapshot(w.out);
  bool equal = true;
  for (const auto& [rel, bytes] : ref.files())
    if (!now.count(rel) || !ref.matches(rel, now.at(rel))) {
      equal = false;
      std::string where;
      if (now.count(rel)) {
        const std::string& a = now.at(rel);
        size_t i = 0;
        while (i < a.size() && i < bytes.size() && a[i] == bytes[i]) ++i;
        where = " at byte " + std::to_string(i) + ": \"" + a.substr(i > 20 ? i - 20 : 0, 60) +
                "\" vs \"" + bytes.substr(i > 20 ? i - 20 : 0, 60) + "\"";
      }
      fig.problems.push_back(label + ": after the rerun " + rel + " differs" + where);
    }
  for (const auto& [rel, bytes] : now) {
    if (is_temp(rel)) {
      equal = false;
      fig.problems.push_back(label + ": temp file left after the rerun: " + rel);
    } else if (!ref.has(rel) && !(old.count(rel) && old.at(rel) == bytes)) {
      equal = false;
      fig.problems.push_back(label + ": unexpected file after the rerun: " + rel);
    }
  }
  if (equal) fig.reruns_equal += 1;
}

// After a kill: every file is old or new, complete; nothing of the old lost.
void inspect(const DatasetWriter& w, const Reference& ref, const Reference& old_ref,
             const Snapshot& old, Figures& fig, const std::string& label) {
  const Snapshot now = snapshot(w.out);
  for (const auto& [rel, bytes] : now) {
    if (is_temp(rel)) {
      fig.temps_after_kill += 1;
      continue;
    }
    fig.files_checked += 1;
    if (ref.matches(rel, bytes)) {
      fig.as_new += 1;
    } else if (old.count(rel) && old_ref.matches(rel, bytes)) {
      fig.as_old += 1;
    } else {
      fig.corrupt += 1;
      fig.problems.push_back(label + ": " + rel + " (" + std::to_string(bytes.size()) +
                             " bytes) is neither the old nor the new file");
    }
  }
  for (const auto& [rel, bytes] : old)
    if (!now.count(rel)) {
      fig.lost += 1;
      fig.problems.push_back(label + ": " + rel + " was lost");
    }
}

Figures run_dataset_kills(const DatasetWriter& w, const TempDir& tmp) {
  Figures fig;
  const std::string log = tmp.file(w.name + ".log");
  ChildResult r = run_child(w.old_args, log);
  EXPECT_EQ(r.exit_code, 0) << w.old_args << "\n" << r.output;
  const Snapshot old = snapshot(w.out);
  EXPECT_FALSE(old.empty());
  // The old files as a "reference" of their own (for JSON-level equality).
  const Reference old_ref(old, old);

  const std::string trace = tmp.file(w.name + ".trace");
  restore(old, w.out);
  r = run_child(w.new_args, log, traced(trace));
  EXPECT_EQ(r.exit_code, 0) << w.new_args << "\n" << r.output;
  const double reference_seconds = r.seconds;
  const Snapshot first = snapshot(w.out);
  restore(old, w.out);
  r = run_child(w.new_args, log);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const Reference ref(first, snapshot(w.out));
  for (const auto& [rel, bytes] : first)
    EXPECT_FALSE(old.count(rel) && old.at(rel) == bytes) << rel << ": old and new are the same";

  const std::vector<Event> events = read_trace(trace);
  fig.events = events.size();
  fig.classes = event_classes(events).size();
  EXPECT_GT(events.size(), 3u);
  const std::vector<long> points = choose_points(events, kill_point_cap(w.cap), kSeed);
  std::mt19937_64 rng(kSeed + 1);
  std::uniform_real_distribution<double> delay(0.0, reference_seconds);
  std::vector<std::pair<long, double>> trials;
  for (long k : points) trials.push_back({k, -1.0});
  for (size_t i = 0; i < trex::test::sanitizer_sample(w.timed, 1); ++i)
    trials.push_back({0, delay(rng)});
  for (const auto& [k, after] : trials) {
    const std::string label =
        k > 0 ? "kill at event " + std::to_string(k) : "kill after " + std::to_string(after) + " s";
    restore(old, w.out);
    ChildOptions o;
    if (k > 0)
      o.env = {{"TREX_FAULT_KILL_AT", std::to_string(k)}};
    else
      o.kill_after_seconds = after;
    const ChildResult killed = run_child(w.new_args, log, o);
    if (k > 0) {
      fig.points += 1;
      if (!killed.killed) fig.problems.push_back(label + ": the child was not killed");
    } else {
      fig.timed += 1;
    }
    if (killed.killed) fig.landed += 1;
    inspect(w, ref, old_ref, old, fig, label);
    expect_rerun_gives_reference(w, ref, old, log, fig, label);
  }
  fig.print(w.name);
  return fig;
}

void expect_clean(const Figures& fig) {
  EXPECT_EQ(fig.corrupt, 0u);
  EXPECT_EQ(fig.lost, 0u);
  EXPECT_EQ(fig.reruns_equal, fig.points + fig.timed);
  EXPECT_TRUE(fig.problems.empty());
  EXPECT_GT(fig.points, 0u);
}

// A problem file for the dataset builders: `or synth` itself, one per family.
std::string synth_problems(const TempDir& tmp, int seed) {
  const std::string path = tmp.file("problems-" + std::to_string(seed) + ".jsonl");
  const ChildResult r =
      run_child("or synth --n 60 --difficulty easy --seed " + std::to_string(seed) +
                    " --reproducible --quiet --jobs 0 --out " + path,
                tmp.file("problems.log"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return path;
}

TEST(KillSynth, EveryFileIsOldOrNewAndRerunsComplete) {
  TempDir tmp;
  const std::string out = tmp.file("synth");
  auto args = [&](int seed) {
    return "or synth --n 8 --families knapsack,diet --seed " + std::to_string(seed) +
           " --reproducible --quiet --jobs 0 --out " + out + "/records.jsonl";
  };
  expect_clean(run_dataset_kills(
      {.name = "synth", .out = out, .new_args = args(3), .old_args = args(4), .cap = 40}, tmp));
}

TEST(KillSft, EveryFileIsOldOrNewAndRerunsComplete) {
  TempDir tmp;
  const std::string problems = synth_problems(tmp, 11);
  const std::string out = tmp.file("sft");
  // 28 samples: with 24 families, 24 left the test split empty for both seeds,
  // so old and new test.jsonl were the same file.
  auto args = [&](int seed) {
    return "or sft --problems " + problems + " --n 28 --seed " + std::to_string(seed) +
           " --bench-dir '' --jobs 0 --quiet --out " + out;
  };
  expect_clean(run_dataset_kills(
      {.name = "sft", .out = out, .new_args = args(3), .old_args = args(4), .cap = 34}, tmp));
}

TEST(KillCpt, EveryFileIsOldOrNewAndRerunsComplete) {
  if (trex::test::kSanitizedBuild)
    GTEST_SKIP() << "~4 min under the sanitizers even with 6 kill points: the Release suite runs "
                    "this; KillSynth, KillSft and KillEval run the same write protocol here";
  TempDir tmp;
  const std::string problems_new = synth_problems(tmp, 21);
  const std::string problems_old = synth_problems(tmp, 22);
  const std::string out = tmp.file("cpt");
  auto args = [&](const std::string& problems) {
    return "or cpt --problems " + problems +
           " --glpk-examples '' --bench-dir '' --jobs 0 --quiet --out " + out;
  };
  expect_clean(run_dataset_kills({.name = "cpt",
                                  .out = out,
                                  .new_args = args(problems_new),
                                  .old_args = args(problems_old),
                                  .cap = 24},
                                 tmp));
}

TEST(KillEval, EveryFileIsOldOrNewAndRerunsComplete) {
  TempDir tmp;
  // A small benchmark and MathProg completions (right for some items, wrong for others).
  std::string bench, completions, wrong;
  for (int i = 0; i < 6; ++i) {
    bench += nlohmann::json{{"id", i}, {"question", "q" + std::to_string(i)}, {"answer", 3.0 + i}}
                 .dump() +
             "\n";
    auto model = [](double v) {
      return "```mathprog\nvar x >= 0;\nmaximize z: x;\ns.t. c: x <= " + std::to_string(v) +
             ";\nsolve;\nend;\n```";
    };
    completions += nlohmann::json{{"id", i}, {"completion", model(3.0 + i)}}.dump() + "\n";
    wrong += nlohmann::json{{"id", i}, {"completion", model(i % 2 ? 3.0 + i : 1.0)}}.dump() + "\n";
  }
  trex::write_file_atomic(tmp.file("bench.jsonl"), bench);
  trex::write_file_atomic(tmp.file("right.jsonl"), completions);
  trex::write_file_atomic(tmp.file("wrong.jsonl"), wrong);
  const std::string out = tmp.file("eval");
  auto args = [&](const std::string& c) {
    return "or eval --quiet --bench " + tmp.file("bench.jsonl") + " --completions " + tmp.file(c) +
           " --jobs 1 --out " + out;
  };
  expect_clean(run_dataset_kills({.name = "eval",
                                  .out = out,
                                  .new_args = args("right.jsonl"),
                                  .old_args = args("wrong.jsonl"),
                                  .cap = 24},
                                 tmp));
}

// ---------------------------------------------------------------- training

// How the training run under test is launched and which process is killed.
struct TrainLaunch {
  std::string format = "whole";  // checkpoint_format
  size_t kill_points = 30;
  size_t timed_kills = 3;
  int ranks = 1;        // > 1: mpiexec -n ranks, DP = ranks with ZeRO-1
  int killed_rank = 0;  // with ranks > 1: the rank the deterministic points kill

  ChildOptions options() const {
    ChildOptions o;
    if (ranks == 1) return o;
    o.launcher = {TREX_MPIEXEC,
                  "-n",
                  std::to_string(ranks),
                  "--oversubscribe",
                  "--bind-to",
                  "none",
                  "--mca",
                  "btl",
                  "self,vader",
                  "--mca",
                  "btl_vader_single_copy_mechanism",
                  "none"};
    // Open MPI's own allocations outlive MPI_Finalize: no leak report from the
    // ranks of a sanitizer build (as for the mpi.* tests).
    o.env = {{"TREX_FAULT_RANK", std::to_string(killed_rank)},
             {"ASAN_OPTIONS", "detect_leaks=0"},
             {"OMP_NUM_THREADS", "1"},
             {"OMPI_ALLOW_RUN_AS_ROOT", "1"},
             {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
    return o;
  }
};

// The run's checkpoints survive kills: `format` "whole" or "sharded" (the
// files a multi-rank run writes; on one rank from its one writer, the commit
// protocol being the same), on one rank or under mpiexec with one rank killed.
void kill_training(const TrainLaunch& launch) {
  const std::string& format = launch.format;
  TempDir tmp;
  trex::test::write_tiny_training_data(tmp.path());
  const int steps = 3;
  nlohmann::json run = trex::test::tiny_cpt_run_json(steps, 16);
  run["schedule"] = {{"peak_lr", 3e-3}, {"min_lr", 3e-4}, {"warmup_steps", 1}};
  run["checkpoint_interval"] = 1;
  run["keep_checkpoints"] = 2;
  run["checkpoint_format"] = format;
  if (launch.ranks > 1) {
    run["parallel"] = {{"dp", launch.ranks}, {"zero", 1}};
    run["global_batch"] = launch.ranks;
  }
  trex::write_file_atomic(tmp.file("run.json"), run.dump(2));
  const std::string out = tmp.file("out");
  const std::string ckpts = out + "/checkpoints";
  const std::string args = "train --quiet --config " + tmp.file("run.json");
  const std::string log = tmp.file("train.log");
  const std::string final_name = "step-0000000" + std::to_string(steps);

  const std::string trace = tmp.file("train.trace");
  ChildOptions reference_options = launch.options();
  reference_options.env.push_back({"TREX_FAULT_TRACE", trace});
  ChildResult r = run_child(args, log, reference_options);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double reference_seconds = r.seconds;
  const Snapshot reference = snapshot(ckpts + "/" + final_name);
  if (format == "sharded") {
    const std::string of = "-of-0000" + std::to_string(launch.ranks) + ".safetensors";
    for (int rank = 0; rank < launch.ranks; ++rank) {
      ASSERT_TRUE(reference.count("model-0000" + std::to_string(rank + 1) + of));
      ASSERT_TRUE(reference.count("optimizer-0000" + std::to_string(rank + 1) + of));
    }
    ASSERT_TRUE(reference.count("optimizer.safetensors.index.json"));
  } else {
    ASSERT_TRUE(reference.count("model.safetensors"));
  }
  ASSERT_TRUE(reference.count("manifest.json"));
  std::vector<double> reference_loss;
  for (const auto& m : trex::read_jsonl(out + "/metrics.jsonl"))
    reference_loss.push_back(m["loss"].get<double>());
  ASSERT_EQ(reference_loss.size(), static_cast<size_t>(steps));

  Figures fig;
  const std::vector<Event> events = read_trace(trace);
  fig.events = events.size();
  fig.classes = event_classes(events).size();
  const std::vector<long> points = choose_points(events, kill_point_cap(launch.kill_points), kSeed);
  std::mt19937_64 rng(kSeed + 2);
  std::uniform_real_distribution<double> delay(0.0, reference_seconds);
  std::vector<std::pair<long, double>> trials;
  for (long k : points) trials.push_back({k, -1.0});
  for (size_t i = 0; i < trex::test::sanitizer_sample(launch.timed_kills, 1); ++i)
    trials.push_back({0, delay(rng)});

  for (const auto& [k, after] : trials) {
    const std::string label =
        k > 0 ? "kill at event " + std::to_string(k) : "kill after " + std::to_string(after) + " s";
    fs::remove_all(out);
    ChildOptions o = launch.options();
    if (k > 0)
      o.env.push_back({"TREX_FAULT_KILL_AT", std::to_string(k)});
    else
      o.kill_after_seconds = after;
    const ChildResult killed = run_child(args, log, o);
    // Under mpiexec the launcher reports the killed rank and ends the job.
    const bool died = killed.killed || (launch.ranks > 1 && killed.exit_code != 0);
    if (k > 0) {
      fig.points += 1;
      if (!died) fig.problems.push_back(label + ": the child was not killed");
    } else {
      fig.timed += 1;
    }
    if (died) fig.landed += 1;

    // Every checkpoint directory is complete (its manifest verifies); `latest`
    // names one of them.
    int64_t latest_step = 0;
    std::error_code ec;
    if (fs::exists(ckpts, ec))
      for (const auto& e : fs::directory_iterator(ckpts)) {
        const std::string name = e.path().filename().string();
        if (is_temp(name)) {
          fig.temps_after_kill += 1;
        } else if (name == "latest") {
          fig.files_checked += 1;
          std::string target = trex::read_file(e.path().string());
          while (!target.empty() && target.back() == '\n') target.pop_back();
          if (!fs::is_directory(ckpts + "/" + target)) {
            fig.lost += 1;
            fig.problems.push_back(label + ": latest names a missing " + target);
          } else {
            latest_step = std::stoll(target.substr(5));
          }
        } else if (e.is_directory()) {
          try {
            const trex::ManifestCheck check = trex::verify_checksum_manifest(e.path().string());
            if (!check.has_manifest) throw std::runtime_error("no manifest");
            fig.files_checked += check.files.size() + 1;
            fig.as_new += 1;
          } catch (const std::exception& x) {
            fig.corrupt += 1;
            fig.problems.push_back(label + ": " + name + ": " + x.what());
          }
        }
      }
    // Steps trained before the kill (metrics records) beyond the last checkpoint.
    size_t trained = 0;
    if (fs::exists(out + "/metrics.jsonl")) {
      std::ifstream in(out + "/metrics.jsonl");
      std::string line;
      while (std::getline(in, line))
        if (!nlohmann::json::parse(line, nullptr, false).is_discarded()) trained += 1;
    }
    const size_t lost_steps =
        trained > static_cast<size_t>(latest_step) ? trained - static_cast<size_t>(latest_step) : 0;
    fig.max_lost_steps = std::max(fig.max_lost_steps, lost_steps);
    if (lost_steps > 1)  // checkpoint_interval
      fig.problems.push_back(label + ": " + std::to_string(lost_steps) + " steps lost");

    // Resume (or, before the first checkpoint, start again) and compare.
    const bool resume = fs::exists(ckpts + "/latest");
    const ChildResult again = run_child(args + (resume ? " --resume" : ""), log, launch.options());
    if (again.exit_code != 0) {
      fig.problems.push_back(label + ": the " + (resume ? "resume" : "rerun") +
                             " failed: " + again.output);
      continue;
    }
    bool equal = snapshot(ckpts + "/" + final_name) == reference;
    if (!equal) fig.problems.push_back(label + ": the final checkpoint differs");
    const auto lines = trex::read_jsonl(out + "/metrics.jsonl");
    if (lines.size() != reference_loss.size()) {
      equal = false;
      fig.problems.push_back(label + ": metrics.jsonl has " + std::to_string(lines.size()) +
                             " records");
    } else {
      for (size_t i = 0; i < lines.size(); ++i)
        if (lines[i]["step"] != i + 1 || lines[i]["loss"].get<double>() != reference_loss[i]) {
          equal = false;
          fig.problems.push_back(label + ": metrics record " + std::to_string(i + 1) + " differs");
        }
    }
    for (const auto& e : fs::directory_iterator(ckpts))
      if (is_temp(e.path().filename().string())) {
        equal = false;
        fig.problems.push_back(label + ": left after the resume: " + e.path().string());
      }
    if (equal) fig.reruns_equal += 1;
  }
  fig.print("train (" + format + " checkpoints" +
            (launch.ranks > 1 ? ", " + std::to_string(launch.ranks) + " ranks, rank " +
                                    std::to_string(launch.killed_rank) + " killed"
                              : std::string()) +
            ")");
  expect_clean(fig);
}

TEST(KillTrain, CheckpointsStayLoadableAndResumeGivesTheUninterruptedRun) {
  kill_training({.format = "whole"});
}

TEST(KillTrain, ShardedCheckpointsStayLoadableAndResumeGivesTheUninterruptedRun) {
  kill_training({.format = "sharded"});
}

// Two writers under mpiexec: killing either one while it writes its shard
// (or rank 0 while it commits) never loses the previous checkpoint.
// A timed kill ends every process of the run before run_child returns, also
// one that left the launcher's process group and session (as Open MPI's ranks
// leave mpiexec's group): otherwise the checks below would inspect files a
// still-running rank writes.
TEST(ChildProcess, ATimedKillLeavesNothingOfTheRunAlive) {
  TempDir tmp;
  const std::string pid_file = tmp.file("escaped.pid");
  ChildOptions o;
  o.launcher = {"/bin/sh", "-c", "setsid sleep 60 & echo $! > " + pid_file + "; sleep 60", "sh"};
  o.kill_after_seconds = 1.0;
  const ChildResult r = run_child("--version", tmp.file("log"), o);
  EXPECT_TRUE(r.killed);
  std::ifstream in(pid_file);
  long escaped = 0;
  ASSERT_TRUE(in >> escaped) << "the child wrote no pid";
  ASSERT_GT(escaped, 0);
  const bool alive = kill(static_cast<pid_t>(escaped), 0) == 0;
  if (alive) kill(static_cast<pid_t>(escaped), SIGKILL);
  EXPECT_FALSE(alive) << "process " << escaped << " outlived the kill";
}

TEST(KillTrain, ShardedSaveOfTwoRanksSurvivesAKilledRank) {
  for (int rank : {1, 0})
    kill_training({.format = "sharded",
                   .kill_points = 8,
                   .timed_kills = rank == 0 ? 1u : 0u,
                   .ranks = 2,
                   .killed_rank = rank});
}

}  // namespace
