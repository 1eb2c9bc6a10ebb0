// The GRPO reward: the category -> reward table; hand-made completions graded
// in the sandbox (correct, wrong coefficient, syntax error, hangs, crashes,
// floods, the solver's time limit); the cache; start()/wait() overlapped with
// OpenMP work and with a thread that keeps a stdio lock.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "test_paths.hpp"
#include "trex/core/error.hpp"
#include "trex/rl/reward.hpp"

namespace trex::rl {
namespace {

using orlib::eval::Category;
using orlib::eval::GroundTruth;
using orlib::eval::TruthKind;

const char* kDebianPython = "/usr/bin/python3";

GroundTruth optimal(double value) {
  GroundTruth t;
  t.kind = TruthKind::optimal;
  t.value = value;
  t.status = "optimal";
  return t;
}

GroundTruth no_solution() {
  GroundTruth t;
  t.kind = TruthKind::no_solution;
  t.status = "infeasible";
  return t;
}

// The answer format of docs/or-answer-format.md; `profit_y` is y's profit
// (2 gives the truth, 11).
std::string mathprog_answer(const std::string& profit_y, const std::string& last_line = "") {
  return "Let x and y be the amounts made.\n\n```mathprog\n"
         "var x >= 0;\nvar y >= 0;\n"
         "maximize profit: 3 * x + " +
         profit_y +
         " * y;\n"
         "s.t. c1: x + y <= 4;\ns.t. c2: x + 3 * y <= 6;\ns.t. c3: x <= 3;\n"
         "solve;\nprintf \"Optimal objective: %.10g\\n\", profit;\nend;\n```\n\n" +
         (last_line.empty() ? "Optimal objective: 11" : last_line) + "\n";
}

const std::string kCorrect = mathprog_answer("2");
// Fenced ```gmpl, the other tag of the same language.
const std::string kWrongCoefficient = [] {
  std::string s = mathprog_answer("3", "Optimal objective: 12");
  return s.replace(s.find("```mathprog"), 11, "```gmpl");
}();
const std::string kSyntaxError =
    "```mathprog\nvar x >= 0;\nmaximize profit: 3 * x\ns.t. c1: x <= 4;\nend;\n```\n";
const std::string kProse = "The factory should make three of x and one of y, for a profit of 11.";

std::string python_answer(const std::string& code) {
  return "```python\n" + code + "```\n";
}

RewardOptions test_options(double seconds = 5.0) {
  RewardOptions o;
  o.correct = 1.0;
  o.wrong = 0.25;
  o.failure_penalty = -0.5;
  o.format_reward = 0.1;
  o.jobs = 2;
  o.run.limits.wall_seconds = seconds;
  o.run.limits.cpu_seconds = seconds;
  o.run.limits.memory_bytes = 1ull << 30;
  o.run.python = kDebianPython;
  return o;
}

std::vector<RewardRequest> requests_for(const std::vector<std::string>& completions,
                                        const GroundTruth& truth, const std::string& key = "p0") {
  std::vector<RewardRequest> out;
  for (const auto& c : completions) out.push_back({key, truth, c});
  return out;
}

bool have_debian_python() {
  return access(kDebianPython, X_OK) == 0;
}

TEST(GrpoReward, RewardOfMapsEveryCategory) {
  RewardOptions o;
  o.correct = 1.0;
  o.wrong = 0.25;
  o.failure_penalty = -0.5;
  o.format_reward = 0.1;
  struct Row {
    Category category;
    bool extracted;
    double reward;
  };
  const std::vector<Row> table = {
      {Category::no_code, false, -0.5},
      {Category::extraction_failed, false, -0.5},
      {Category::extraction_failed, true, -0.5},  // no executable block: no bonus
      {Category::syntax_error, true, -0.4},
      {Category::runtime_error, true, -0.4},
      {Category::runtime_missing, true, -0.4},
      {Category::timeout, true, -0.4},
      {Category::infeasible, true, 0.35},
      {Category::unbounded, true, 0.35},
      {Category::wrong_objective, true, 0.35},
      {Category::wrong_objective, false, 0.25},
      {Category::correct, true, 1.1},
      {Category::correct, false, 1.0},
  };
  for (const Row& r : table)
    EXPECT_DOUBLE_EQ(reward_of(r.category, r.extracted, o), r.reward)
        << orlib::eval::to_string(r.category) << " extracted=" << r.extracted;
  const RewardOptions defaults;
  EXPECT_DOUBLE_EQ(reward_of(Category::correct, true, defaults), 1.0);
  EXPECT_DOUBLE_EQ(reward_of(Category::wrong_objective, true, defaults), 0.0);
  EXPECT_DOUBLE_EQ(reward_of(Category::timeout, true, defaults), 0.0);
  EXPECT_EQ(defaults.rule, orlib::eval::Rule::rel1e6);
  EXPECT_EQ(defaults.run.limits.wall_seconds, 10.0);
  EXPECT_EQ(defaults.run.limits.cpu_seconds, 10.0);
}

TEST(GrpoReward, GradesHandMadeMathProgCompletions) {
  RewardGrader grader(test_options());
  std::vector<RewardRequest> batch =
      requests_for({kCorrect, kWrongCoefficient, kSyntaxError, kProse}, optimal(11.0));
  const std::string infeasible =
      "```mathprog\nvar x >= 0;\nminimize z: x;\ns.t. c: x <= -1;\nsolve;\nend;\n```\n"
      "Status: infeasible\n";
  batch.push_back({"p1", no_solution(), infeasible});
  batch.push_back({"p2", optimal(5.0), infeasible});
  const auto r = grader.grade(batch);
  ASSERT_EQ(r.size(), 6u);
  EXPECT_EQ(r[0].category, Category::correct) << r[0].detail;
  EXPECT_DOUBLE_EQ(r[0].reward, 1.1);
  EXPECT_TRUE(r[0].extracted);
  EXPECT_GT(r[0].wall_seconds, 0.0);
  EXPECT_EQ(r[1].category, Category::wrong_objective) << r[1].detail;
  EXPECT_DOUBLE_EQ(r[1].reward, 0.35);
  EXPECT_EQ(r[2].category, Category::syntax_error) << r[2].detail;
  EXPECT_DOUBLE_EQ(r[2].reward, -0.4);
  EXPECT_EQ(r[3].category, Category::no_code) << r[3].detail;
  EXPECT_FALSE(r[3].extracted);
  EXPECT_DOUBLE_EQ(r[3].reward, -0.5);
  EXPECT_EQ(r[4].category, Category::correct) << r[4].detail;  // infeasible truth, infeasible model
  EXPECT_EQ(r[5].category, Category::infeasible) << r[5].detail;
  EXPECT_DOUBLE_EQ(r[5].reward, 0.35);
  for (const auto& g : r) EXPECT_FALSE(g.cached);
  const RewardStats& s = grader.stats();
  EXPECT_EQ(s.graded, 6);
  EXPECT_EQ(s.sandbox_runs, 5);  // the prose never reaches the sandbox
  EXPECT_EQ(s.cache_hits, 0);
  EXPECT_EQ(s.categories[static_cast<size_t>(Category::correct)], 2);
  EXPECT_EQ(s.categories[static_cast<size_t>(Category::no_code)], 1);
  EXPECT_GT(s.seconds, 0.0);
}

// GLPK's branch and bound on Jeroslow's problem (2 * sum x = n, n odd, binary
// x) needs about 2^(n/2) nodes to prove it infeasible: with n = 41 it meets
// the solver's time limit (0.9 of the sandbox's) long before.
TEST(GrpoReward, SolverTimeLimitCostsThePenalty) {
  RewardGrader grader(test_options(3.0));
  const std::string jeroslow =
      "```mathprog\nparam n := 41;\nvar x{1..n} binary;\nmaximize z: x[1];\n"
      "s.t. even: sum{i in 1..n} 2 * x[i] = n;\nsolve;\nend;\n```\n";
  const auto r = grader.grade(requests_for({jeroslow}, no_solution()));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].category, Category::timeout) << r[0].detail;
  EXPECT_EQ(r[0].detail, "solver time limit");
  EXPECT_DOUBLE_EQ(r[0].reward, -0.4);
}

TEST(GrpoReward, HangsCrashesAndFloodsCostTheirRewardOnly) {
  if (!have_debian_python()) GTEST_SKIP() << kDebianPython << " is missing";
  RewardGrader grader(test_options(2.0));
  const std::vector<std::string> completions = {
      python_answer("while True:\n    pass\n"),
      python_answer("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"),
      python_answer("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"),
      python_answer("raise ValueError('no model')\n"),
      python_answer("print('Optimal objective: 11')\n"),
      kCorrect,
  };
  const auto start = std::chrono::steady_clock::now();
  const auto r = grader.grade(requests_for(completions, optimal(11.0)));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.size(), completions.size());
  EXPECT_EQ(r[0].category, Category::timeout) << r[0].detail;
  EXPECT_EQ(r[1].category, Category::runtime_error) << r[1].detail;
  EXPECT_EQ(r[2].category, Category::runtime_error) << r[2].detail;  // output limit
  EXPECT_EQ(r[3].category, Category::runtime_error) << r[3].detail;
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(r[static_cast<size_t>(i)].reward, -0.4) << i;
  EXPECT_EQ(r[4].category, Category::correct) << r[4].detail;
  EXPECT_EQ(r[5].category, Category::correct) << r[5].detail;
  EXPECT_LT(r[0].wall_seconds, 10.0);
  // The hang is stopped at its 2 s limit, not by the sandbox's 60 s worker grace.
  EXPECT_LT(seconds, 30.0);
}

TEST(GrpoReward, MissingPythonLeavesMathProgGrading) {
  RewardOptions o = test_options();
  o.run.python = "/nonexistent/python3";
  RewardGrader grader(o);
  const auto r = grader.grade(
      requests_for({python_answer("print('Optimal objective: 11')\n"), kCorrect}, optimal(11.0)));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].category, Category::runtime_missing);
  EXPECT_TRUE(r[0].extracted);
  EXPECT_NE(r[0].detail.find("/nonexistent/python3"), std::string::npos) << r[0].detail;
  EXPECT_DOUBLE_EQ(r[0].reward, -0.4);
  EXPECT_EQ(r[1].category, Category::correct) << r[1].detail;
}

TEST(GrpoReward, CacheAnswersRepeatsWithoutRunning) {
  RewardGrader grader(test_options());
  const auto batch = requests_for({kCorrect, kWrongCoefficient}, optimal(11.0));
  const auto first = grader.grade(batch);
  EXPECT_EQ(grader.stats().sandbox_runs, 2);
  const auto second = grader.grade(batch);
  EXPECT_EQ(grader.stats().sandbox_runs, 2);
  EXPECT_EQ(grader.stats().cache_hits, 2);
  EXPECT_EQ(grader.stats().graded, 4);
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_FALSE(first[i].cached);
    EXPECT_TRUE(second[i].cached);
    EXPECT_EQ(second[i].category, first[i].category);
    EXPECT_DOUBLE_EQ(second[i].reward, first[i].reward);
  }
  // The same completion for another prompt is graded against that prompt's truth.
  const auto other = grader.grade(requests_for({kCorrect}, optimal(12.0), "p-other"));
  EXPECT_FALSE(other[0].cached);
  EXPECT_EQ(other[0].category, Category::wrong_objective);
  EXPECT_EQ(grader.stats().sandbox_runs, 3);
}

TEST(GrpoReward, DuplicatesInABatchRunOnce) {
  RewardGrader grader(test_options());
  const auto r = grader.grade(requests_for(
      {kCorrect, kCorrect, kWrongCoefficient, kCorrect, kProse, kProse}, optimal(11.0)));
  ASSERT_EQ(r.size(), 6u);
  EXPECT_EQ(grader.stats().sandbox_runs, 2);
  EXPECT_EQ(grader.stats().cache_hits, 3);
  const std::vector<bool> cached = {false, true, false, true, false, true};
  for (size_t i = 0; i < r.size(); ++i) EXPECT_EQ(r[i].cached, cached[i]) << i;
  EXPECT_EQ(r[1].category, Category::correct);
  EXPECT_EQ(r[3].category, Category::correct);
  EXPECT_DOUBLE_EQ(r[3].reward, r[0].reward);
  EXPECT_EQ(r[2].category, Category::wrong_objective);
}

TEST(GrpoReward, CacheIsBoundedLeastRecentlyUsedFirst) {
  RewardOptions o = test_options();
  o.cache_entries = 2;
  RewardGrader grader(o);
  auto one = [&](const std::string& c) {
    return grader.grade(requests_for({c}, optimal(11.0)))[0];
  };
  const std::string a = kCorrect, b = kWrongCoefficient, c = mathprog_answer("1");
  one(a);
  one(b);
  EXPECT_TRUE(one(a).cached);   // a is now the most recent, b the least
  EXPECT_FALSE(one(c).cached);  // evicts b
  EXPECT_TRUE(one(a).cached);
  EXPECT_FALSE(one(b).cached);
  EXPECT_EQ(grader.stats().sandbox_runs, 4);

  o.cache_entries = 0;  // no cache: repeats run again, duplicates of a batch still once
  RewardGrader uncached(o);
  uncached.grade(requests_for({a, a}, optimal(11.0)));
  uncached.grade(requests_for({a}, optimal(11.0)));
  EXPECT_EQ(uncached.stats().sandbox_runs, 2);
  EXPECT_EQ(uncached.stats().cache_hits, 1);
}

TEST(GrpoReward, UnknownTruthIsRefusedBeforeAnyWork) {
  RewardGrader grader(test_options());
  auto batch = requests_for({kCorrect}, optimal(11.0));
  batch.push_back({"p-unknown", GroundTruth{}, kCorrect});
  EXPECT_THROW(grader.grade(batch), Error);
  EXPECT_FALSE(grader.in_flight());
  EXPECT_EQ(grader.stats().graded, 0);
  EXPECT_EQ(grader.grade(requests_for({kCorrect}, optimal(11.0)))[0].category, Category::correct);
}

std::vector<RewardRequest> mixed_batch() {
  std::vector<RewardRequest> batch;
  for (int k = 0; k < 6; ++k) {
    // Distinct completions (no cache hits): y's profit 2 is right, the others wrong.
    const std::string profit = k % 3 == 0 ? "2" : std::to_string(k) + ".5";
    batch.push_back({"p" + std::to_string(k), optimal(11.0), mathprog_answer(profit)});
  }
  batch.push_back({"p-syntax", optimal(11.0), kSyntaxError});
  batch.push_back({"p-prose", optimal(11.0), kProse});
  return batch;
}

TEST(GrpoReward, StartWaitOverlapsOpenMpWorkAndEqualsGrade) {
  const auto batch = mixed_batch();
  RewardGrader blocking(test_options());
  const auto expected = blocking.grade(batch);

  RewardGrader overlapped(test_options());
  overlapped.start(batch);
  EXPECT_TRUE(overlapped.in_flight());
  EXPECT_THROW(overlapped.start(batch), Error);
  EXPECT_THROW(overlapped.grade(batch), Error);
  // A GEMM-like OpenMP loop on this thread while the batch is graded.
  const int n = 192;
  std::vector<double> a(n * n, 1.0 / n), b(n * n, 2.0), c(n * n, 0.0);
  double checksum = 0;
  for (int round = 0; round < 20; ++round) {
#pragma omp parallel for
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < n; ++k)
        for (int j = 0; j < n; ++j) c[i * n + j] += a[i * n + k] * b[k * n + j];
  }
  for (double v : c) checksum += v;
  EXPECT_DOUBLE_EQ(checksum, 20.0 * 2.0 * n * n);
  const auto got = overlapped.wait();
  EXPECT_FALSE(overlapped.in_flight());
  EXPECT_THROW(overlapped.wait(), Error);

  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].category, expected[i].category) << i << ": " << got[i].detail;
    EXPECT_DOUBLE_EQ(got[i].reward, expected[i].reward) << i;
    EXPECT_EQ(got[i].cached, expected[i].cached) << i;
  }
  EXPECT_EQ(got[0].category, Category::correct);
  EXPECT_EQ(got[1].category, Category::wrong_objective);
  EXPECT_EQ(overlapped.stats().sandbox_runs, blocking.stats().sandbox_runs);
  EXPECT_EQ(overlapped.stats().categories, blocking.stats().categories);
}

// A worker forked from a process whose other thread is inside stdio keeps that
// FILE's lock taken forever (glibc does not reset per-FILE locks at fork), and
// the sandbox's worker calls fflush(nullptr). The grading process forks every
// worker from itself, so a trainer thread writing a file at the wrong moment
// cannot stall a rollout.
TEST(GrpoReward, GradesWhileAnotherThreadHoldsAFileLock) {
  RewardGrader grader(test_options());
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    while (!stop.load()) {
      flockfile(file);
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
      while (std::chrono::steady_clock::now() < until) {
      }
      funlockfile(file);
    }
  });
  const auto batch = mixed_batch();
  grader.start(batch);
  const auto r = grader.wait();
  stop = true;
  writer.join();
  std::fclose(file);
  ASSERT_EQ(r.size(), batch.size());
  for (size_t i = 0; i < 6; ++i)
    EXPECT_EQ(r[i].category, i % 3 == 0 ? Category::correct : Category::wrong_objective)
        << i << ": " << r[i].detail;
  EXPECT_EQ(r[6].category, Category::syntax_error);
  EXPECT_LT(grader.stats().seconds, 40.0);  // a stalled worker would take 60 s more
}

// A temporary parent for sandbox directories that the sandbox uids (root runs
// tasks as other users) can pass through.
void open_for_sandbox_uids(const test::TempDir& dir) {
  namespace fs = std::filesystem;
  fs::permissions(dir.path(),
                  fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
}

// This process's children (the grading process is one).
std::vector<pid_t> children_of_this_process() {
  std::vector<pid_t> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream file(task.path() / "children");
    pid_t pid;
    while (file >> pid) out.push_back(pid);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(GrpoReward, AFreshGradingProcessReplacesADeadOne) {
  if (!std::filesystem::exists("/proc/self/task/" + std::to_string(gettid()) + "/children"))
    GTEST_SKIP() << "kernel without /proc/PID/task/TID/children";
  test::TempDir root;  // the killed process cannot remove its sandbox directory
  open_for_sandbox_uids(root);
  RewardOptions o = test_options();
  o.temp_root = root.path();
  const std::vector<pid_t> before = children_of_this_process();
  RewardGrader grader(o);
  const std::vector<pid_t> after = children_of_this_process();
  std::vector<pid_t> started;
  std::set_difference(after.begin(), after.end(), before.begin(), before.end(),
                      std::back_inserter(started));
  ASSERT_EQ(started.size(), 1u);
  ASSERT_EQ(kill(started[0], SIGKILL), 0);
  const auto r = grader.grade(requests_for({kCorrect, kSyntaxError}, optimal(11.0)));
  EXPECT_EQ(r[0].category, Category::correct) << r[0].detail;
  EXPECT_EQ(r[1].category, Category::syntax_error) << r[1].detail;
}

TEST(GrpoReward, LeavesNoSandboxDirectoryBehind) {
  test::TempDir root;
  open_for_sandbox_uids(root);
  {
    RewardOptions o = test_options();
    o.temp_root = root.path();
    RewardGrader grader(o);
    EXPECT_FALSE(std::filesystem::is_empty(root.path()));  // the sandbox's directory
    EXPECT_EQ(grader.grade(requests_for({kCorrect}, optimal(11.0)))[0].category, Category::correct);
  }
  EXPECT_TRUE(std::filesystem::is_empty(root.path()));
}

// Not a performance assertion: prints what a MathProg rollout costs here.
TEST(GrpoReward, SecondsPerMathProgRollout) {
  RewardGrader grader(test_options());
  std::vector<RewardRequest> batch;
  for (int k = 0; k < 16; ++k)
    batch.push_back({"p" + std::to_string(k), optimal(11.0), mathprog_answer(std::to_string(k))});
  const auto r = grader.grade(batch);
  const RewardStats& s = grader.stats();
  EXPECT_EQ(s.sandbox_runs, 16);
  std::printf("[ timing ] %lld MathProg rollouts in %.3f s with 2 jobs: %.4f s per rollout\n",
              static_cast<long long>(s.sandbox_runs), s.seconds,
              s.seconds / static_cast<double>(s.sandbox_runs));
  EXPECT_EQ(r[2].category, Category::correct);
}

}  // namespace
}  // namespace trex::rl
