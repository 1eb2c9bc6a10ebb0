// `trex or eval` end to end: report schema, metrics, joins, rules, prompts, CLI,
// the self-test, a small hostile corpus, and every shared benchmark file.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include "trex/core/error.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "cli_run.hpp"
#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/or/eval/corpora.hpp"
#include "trex/or/eval/eval.hpp"
#include "trex/or/eval/prompts.hpp"
#include "trex/or/eval/sandbox.hpp"
#include "trex/or/eval/selftest.hpp"

namespace trex::orlib::eval {
namespace {

using nlohmann::json;

void write_jsonl(const std::string& path, const std::vector<json>& records) {
  JsonlWriter w(path);
  for (const auto& r : records) w.write(r);
  w.commit();
}

std::string mathprog_with_objective(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return std::string("```mathprog\nvar x;\nminimize z: x;\ns.t. c: x = ") + buf + ";\nend;\n```";
}

const char* kInfeasible = "```mathprog\nvar x >= 0;\nminimize z: x;\ns.t. c: x <= -1;\nend;\n```";

EvalOptions options(const test::TempDir& dir, std::vector<std::string> benches) {
  EvalOptions o;
  o.bench_paths = std::move(benches);
  o.completions_path = dir.file("completions.jsonl");
  o.out_dir = dir.file("out");
  o.jobs = 2;
  o.timeout = 10;
  o.progress = false;
  o.memory_mb = 1024;
  return o;
}

std::vector<json> read_items(const std::string& path) {
  return read_jsonl(path);
}

TEST(EvalPipeline, ReportSchemaMetricsAndItems) {
  test::TempDir dir;
  write_jsonl(dir.file("alpha.jsonl"), {{{"id", 0},
                                         {"question", "q0"},
                                         {"answer", 10.0},
                                         {"answer_status", "optimal"},
                                         {"problem_type", "LP"}},
                                        {{"id", 1},
                                         {"question", "q1"},
                                         {"answer", 20.0},
                                         {"answer_status", "optimal"},
                                         {"problem_type", "IP"}},
                                        {{"id", 2},
                                         {"question", "q2"},
                                         {"answer", nullptr},
                                         {"answer_status", "unknown"},
                                         {"problem_type", "LP"}}});
  write_jsonl(dir.file("beta.jsonl"),
              {{{"id", "a"}, {"question", "qa"}, {"answer", 1.5}, {"answer_status", "optimal"}},
               {{"id", "b"},
                {"question", "qb"},
                {"answer", nullptr},
                {"answer_status", "infeasible_or_unbounded"}}});
  write_jsonl(dir.file("completions.jsonl"),
              {{{"id", 0}, {"source", "alpha"}, {"completion", mathprog_with_objective(10)}},
               {{"id", 1},
                {"source", "alpha"},
                {"completions", {mathprog_with_objective(20), mathprog_with_objective(21)}}},
               {{"id", 2}, {"source", "alpha"}, {"completion", mathprog_with_objective(5)}},
               {{"id", "a"},
                {"source", "beta"},
                {"completion", "```lp\nMaximize\n obj: x\nSubject To\n c: x <= 1.5\nEnd\n```"}},
               {{"id", "b"}, {"source", "beta"}, {"completion", kInfeasible}}});
  EvalOptions o = options(dir, {dir.file("alpha.jsonl"), dir.file("beta.jsonl")});
  o.k = 2;
  json report = run_eval(o);

  const json& a = report["benchmarks"]["alpha"];
  EXPECT_EQ(a["n"], 2);
  EXPECT_NEAR(a["pass@1"].get<double>(), 75.0, 1e-9);   // (1 + 1/2) / 2
  EXPECT_NEAR(a["pass@2"].get<double>(), 100.0, 1e-9);  // item 1 has a correct sample among 2
  EXPECT_EQ(a["excluded_unknown"], 1);
  EXPECT_EQ(a["samples"], 3);
  EXPECT_EQ(a["errors"]["correct"], 2);
  EXPECT_EQ(a["errors"]["wrong_objective"], 1);
  EXPECT_NEAR(a["execution_rate"].get<double>(), 100.0, 1e-9);
  EXPECT_NEAR(a["by_type"]["LP"]["pass@1"].get<double>(), 100.0, 1e-9);
  EXPECT_NEAR(a["by_type"]["IP"]["pass@1"].get<double>(), 50.0, 1e-9);
  const json& b = report["benchmarks"]["beta"];
  EXPECT_EQ(b["n"], 2);
  EXPECT_NEAR(b["pass@1"].get<double>(), 100.0, 1e-9);
  EXPECT_EQ(b["no_solution_items"], 1);
  EXPECT_FALSE(b.contains("by_type"));
  EXPECT_NEAR(report["macro"]["pass@1"].get<double>(), 87.5, 1e-9);
  EXPECT_EQ(report["micro"]["n"], 4);
  EXPECT_NEAR(report["micro"]["pass@1"].get<double>(), 87.5, 1e-9);
  EXPECT_EQ(report["settings"]["rule"], "rel1e-6");

  auto items = read_items(dir.file("out/items.jsonl"));
  ASSERT_EQ(items.size(), 6u);  // 5 samples + 1 excluded item
  EXPECT_EQ(items[0]["bench"], "alpha");
  EXPECT_EQ(items[0]["verdict"], "correct");
  EXPECT_EQ(items[0]["format"], "mathprog");
  EXPECT_NE(items[0]["code"].get<std::string>().find("minimize z: x;"), std::string::npos);
  EXPECT_EQ(items[0]["status"], "optimal");
  EXPECT_DOUBLE_EQ(items[0]["objective"].get<double>(), 10.0);
  EXPECT_TRUE(items[0].contains("stderr"));
  EXPECT_EQ(items[2]["sample"], 1);
  EXPECT_EQ(items[2]["verdict"], "wrong_objective");
  EXPECT_EQ(items[3]["verdict"], "excluded_unknown_truth");
  EXPECT_EQ(items[5]["verdict"], "correct");
  EXPECT_EQ(items[5]["status"], "infeasible");

  std::string md = read_file(dir.file("out/report.md"));
  EXPECT_NE(md.find("| alpha | 2 | 75.00 |"), std::string::npos) << md;
  EXPECT_NE(md.find("Error taxonomy"), std::string::npos);
  EXPECT_NE(md.find("By problem type"), std::string::npos);
}

TEST(EvalPipeline, JoinsOnQuestionsAndCommonFieldNames) {
  test::TempDir dir;
  write_jsonl(
      dir.file("gamma.jsonl"),
      {{{"id", 0},
        {"question", "A farmer has 10 acres of land to plant wheat and corn."},
        {"answer", 3.0}},
       {{"id", 1},
        {"question", "A bakery makes bread and cakes with 40 kg of flour."},
        {"answer", 4.0}},
       {{"id", 2},
        {"question", "A shop sells two kinds of tea in packs of 5 and 8."},
        {"answer", 5.0}},
       {{"id", 3}, {"question", "Minimise the cost of a diet with two foods."}, {"answer", 6.0}}});
  write_jsonl(dir.file("delta.jsonl"), {{{"id", 0}, {"question", "other"}, {"answer", 1.0}}});
  write_jsonl(
      dir.file("completions.jsonl"),
      {{{"question", "A farmer has 10 acres of land to plant  wheat and corn."},
        {"response", mathprog_with_objective(3)}},
       {{"prompt",
         "Solve this:\nA bakery makes bread and cakes with 40 kg of flour.\nAnswer in "
         "MathProg."},
        {"output", mathprog_with_objective(4)}},
       {{"problem_id", 2},
        {"source", "gamma"},
        {"choices",
         {{{"message", {{"role", "assistant"}, {"content", mathprog_with_objective(5)}}}}}}},
       {{"question_id", "3"},
        {"dataset", "gamma.jsonl"},
        {"messages",
         {{{"role", "user"}, {"content", "q"}},
          {{"role", "assistant"}, {"content", mathprog_with_objective(6)}}}}},
       {{"id", 0}, {"completion", "ambiguous: gamma/0 or delta/0"}},
       {{"id", 0}, {"source", "nowhere"}, {"completion", "unknown source"}}});
  json report = run_eval(options(dir, {dir.file("gamma.jsonl"), dir.file("delta.jsonl")}));
  EXPECT_NEAR(report["benchmarks"]["gamma"]["pass@1"].get<double>(), 100.0, 1e-9);
  EXPECT_EQ(report["join"]["by_question"], 2);
  EXPECT_EQ(report["join"]["by_id"], 2);
  EXPECT_EQ(report["join"]["ambiguous"], 1);
  EXPECT_EQ(report["join"]["unmatched"], 1);
  EXPECT_EQ(report["benchmarks"]["delta"]["missing"], 1);
  EXPECT_NEAR(report["benchmarks"]["delta"]["pass@1"].get<double>(), 0.0, 1e-9);
}

TEST(EvalPipeline, BadCompletionFilesNameTheLine) {
  test::TempDir dir;
  write_jsonl(dir.file("eps.jsonl"), {{{"id", 0}, {"answer", 1.0}}});
  write_file_atomic(dir.file("completions.jsonl"),
                    "{\"id\": 0, \"completion\": \"x\"}\n{\"id\": 1,\n");
  EvalOptions strict = options(dir, {dir.file("eps.jsonl")});
  strict.strict = true;
  try {
    run_eval(strict);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.line_number(), 2);
    EXPECT_NE(std::string(e.what()).find("completions.jsonl"), std::string::npos);
  }
  // Lenient (the default): the bad line is skipped and counted, the rest graded.
  json lenient = run_eval(options(dir, {dir.file("eps.jsonl")}));
  EXPECT_EQ(lenient["skipped_lines"], 1);
  EXPECT_EQ(lenient["input"]["completions"]["skipped_lines"][0]["line"], 2);
  EXPECT_EQ(lenient["samples"], 1);
  write_file_atomic(dir.file("completions.jsonl"), "{\"id\": 0, \"answer\": 3}\n");
  EXPECT_THROW(run_eval(strict), Error);
  EXPECT_EQ(run_eval(options(dir, {dir.file("eps.jsonl")}))["skipped_lines"], 1);
}

TEST(EvalPipeline, RulesDecideVerdicts) {
  test::TempDir dir;
  write_jsonl(dir.file("rules.jsonl"),
              {{{"id", 0}, {"answer", 1160.0}, {"answer_status", "optimal"}}});
  write_jsonl(dir.file("completions.jsonl"),
              {{{"id", 0}, {"completion", mathprog_with_objective(1160.4)}}});
  std::map<std::string, double> expected = {
      {"rel1e-6", 0.0}, {"rel1e-4", 0.0}, {"abs1e-2", 0.0}, {"orlm", 100.0}, {"mamo", 0.0}};
  for (const auto& [rule, pass] : expected) {
    EvalOptions o = options(dir, {dir.file("rules.jsonl")});
    o.rule = parse_rule(rule);
    json report = run_eval(o);
    EXPECT_NEAR(report["benchmarks"]["rules"]["pass@1"].get<double>(), pass, 1e-9) << rule;
  }
  write_jsonl(dir.file("completions.jsonl"),
              {{{"id", 0}, {"completion", mathprog_with_objective(1160.1)}}});
  EvalOptions o = options(dir, {dir.file("rules.jsonl")});
  o.rule = Rule::rel1e4;
  EXPECT_NEAR(run_eval(o)["micro"]["pass@1"].get<double>(), 100.0, 1e-9);  // 0.1/1161 < 1e-4
}

TEST(EvalPipeline, TaxonomyForModels) {
  test::TempDir dir;
  std::vector<json> bench, comps;
  std::vector<std::pair<std::string, std::string>> cases = {
      {"no_code", "No idea."},
      {"extraction_failed", "```json\n{}\n```"},
      {"syntax_error", "```mathprog\nvar x >= 0\nminimize z: x;\nend;\n```"},
      {"infeasible", kInfeasible},
      {"unbounded", "```mathprog\nvar x >= 0;\nmaximize z: x;\nend;\n```"},
      {"wrong_objective", mathprog_with_objective(8)},
      {"correct", mathprog_with_objective(7)},
      {"syntax_error", "```lp\nMaximize\n obj: x +\nEnd\n```"}};
  for (size_t i = 0; i < cases.size(); ++i) {
    bench.push_back({{"id", i}, {"answer", 7.0}, {"answer_status", "optimal"}});
    comps.push_back({{"id", i}, {"completion", cases[i].second}});
  }
  write_jsonl(dir.file("tax.jsonl"), bench);
  write_jsonl(dir.file("completions.jsonl"), comps);
  json report = run_eval(options(dir, {dir.file("tax.jsonl")}));
  auto items = read_items(dir.file("out/items.jsonl"));
  ASSERT_EQ(items.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(items[i]["verdict"], cases[i].first) << i << " " << items[i]["detail"];
  EXPECT_EQ(report["errors"]["syntax_error"], 2);
  EXPECT_NEAR(report["execution_rate"].get<double>(), 100.0 * 4 / 8, 1e-9);
  EXPECT_NE(items[2]["stderr"].get<std::string>().find("model.mod:2"), std::string::npos)
      << items[2]["stderr"];
}

TEST(EvalPrompts, EveryFormat) {
  test::TempDir dir;
  write_jsonl(dir.file("pb.jsonl"),
              {{{"id", 7}, {"question", "Maximise profit with 2 products."}, {"answer", 1.0}}});
  for (const char* f : {"mathprog", "lp", "python"}) {
    std::string out = dir.file(std::string("p_") + f + ".jsonl");
    EXPECT_EQ(write_prompts({dir.file("pb.jsonl")}, parse_code_kind(f), out), 1);
    auto r = read_jsonl(out).at(0);
    EXPECT_EQ(r["id"], "7");
    EXPECT_EQ(r["source"], "pb");
    EXPECT_EQ(r["format"], f);
    std::string p = r["prompt"];
    EXPECT_NE(p.find("Maximise profit with 2 products."), std::string::npos);
    EXPECT_NE(p.find(std::string("```") + f), std::string::npos) << p;
    EXPECT_EQ(r["messages"][0]["content"], p);
    EXPECT_EQ(p.find("{question}"), std::string::npos);
  }
  EXPECT_NE(make_prompt("q", CodeKind::python).find("Optimal objective: <value>"),
            std::string::npos);
  EXPECT_THROW(write_prompts({dir.file("pb.jsonl")}, CodeKind::none, dir.file("x.jsonl")), Error);
}

using test::run_trex;
using CliResult = test::CliRun;

TEST(EvalCli, CommandsHelpAndErrors) {
  for (const char* args : {"or prompts --help", "or eval --help", "or eval-hostile --help",
                           "or eval-goldfree --help", "or eval-throughput --help"}) {
    CliResult r = run_trex(args);
    EXPECT_EQ(r.exit_code, 0) << args << r.output;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << args;
  }
  test::TempDir dir;
  write_jsonl(dir.file("cli.jsonl"), {{{"id", 0}, {"question", "q"}, {"answer", 7.0}}});
  write_jsonl(dir.file("c.jsonl"), {{{"id", 0}, {"completion", mathprog_with_objective(7)}}});
  CliResult bad = run_trex("or eval --bench " + dir.file("cli.jsonl") + " --completions " +
                           dir.file("c.jsonl") + " --out " + dir.file("o") + " --rule rel9");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("rule"), std::string::npos) << bad.output;
  CliResult missing =
      run_trex("or eval --bench " + dir.file("cli.jsonl") + " --out " + dir.file("o"));
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("--completions"), std::string::npos) << missing.output;
  CliResult ok = run_trex("or eval --quiet --bench " + dir.file("cli.jsonl") + " --completions " +
                          dir.file("c.jsonl") + " --out " + dir.file("o") + " --rule orlm");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  json report = json::parse(read_file(dir.file("o/report.json")));
  EXPECT_NEAR(report["benchmarks"]["cli"]["pass@1"].get<double>(), 100.0, 1e-9);
  CliResult prompts = run_trex("or prompts --bench " + dir.file("cli.jsonl") +
                               " --format lp --out " + dir.file("p.jsonl"));
  EXPECT_EQ(prompts.exit_code, 0) << prompts.output;
  EXPECT_EQ(read_jsonl(dir.file("p.jsonl")).size(), 1u);
}

std::string python_for_tests() {
  if (access("/usr/bin/python3", X_OK) == 0) return "/usr/bin/python3";
  return "python3";
}

TEST(EvalSelfTest, BuiltinsAndGroundTruthsPass) {
  SelfTestOptions o;
  o.python = python_for_tests();
  o.timeout = 1.5;
  o.jobs = 2;
  std::string complexor = test::shared_dir() + "/or_bench/complexor_orthought.jsonl";
  if (std::filesystem::exists(complexor)) o.bench_paths = {complexor};
  SelfTestResult r = run_self_test(o);
  for (const auto& f : r.failure_lines) ADD_FAILURE() << f;
  EXPECT_EQ(r.failures, 0) << r.table;
  EXPECT_GE(r.json["builtin"].size(), 28u);
  if (!o.bench_paths.empty()) {
    const auto& t = r.json["truth_sanity"]["complexor_orthought"];
    EXPECT_EQ(t["optimal"], 16);
    EXPECT_EQ(t["no_solution"], 1);
    EXPECT_EQ(t["unknown_excluded"], 1);
    EXPECT_EQ(t["end_to_end_graded"], 17);
  }
}

TEST(EvalHostile, SmallCorpusIsFullyClassified) {
  test::TempDir dir;
  HostileOptions o;
  o.n = 64;
  o.out_dir = dir.path();
  // 3 s, not the 1 s a quiet machine needs: under CI load a Python start-up
  // alone has taken over a second, turning an expected verdict into a timeout.
  o.timeout = 3.0;
  o.python = python_for_tests();
  o.progress = false;
  {
    // Without a uid per slot the process limit is per user and shared: a fork
    // bomb could make a concurrent case's fork fail. One job keeps it exact.
    SandboxConfig c;
    Sandbox probe(c);
    o.jobs = probe.isolation().uid_per_slot ? 2 : 1;
  }
  // The bound is on what the harness adds: the process' peak before the run
  // (binary, test fixtures, earlier tests) is not the harness' doing, and under
  // ASan it alone is 270 MiB (shadow memory of a 350 MB instrumented binary).
  const long peak_before_kb = self_peak_rss_kb();
  json s = run_hostile(o);
  EXPECT_EQ(s["cases"], 64);
  EXPECT_EQ(s["classified"], 64);
  EXPECT_EQ(s["items_written"], 64);
  EXPECT_EQ(s["unexpected"], 0) << s["unexpected_examples"].dump(1);
  EXPECT_EQ(s["escaped_writes"], 0);
  // Measured growth: 6 MiB (Release), 34 MiB (ASan); a harness that buffered the
  // unbounded floods without the output cap would pass 128 MiB in 3 s.
  EXPECT_LT(s["harness_peak_rss_kb"].get<long>() - peak_before_kb, 128 * 1024);
  // Every kind appears and the timeouts, crashes and floods were seen.
  EXPECT_GE(s["per_kind"].size(), 55u);
  EXPECT_GT(s["verdicts"].value("timeout", 0), 3);
  EXPECT_GT(s["verdicts"].value("runtime_error", 0), 10);
  // The flood is killed at the output cap (runtime_error) unless, on a loaded
  // machine, the timeout comes first; the cap itself is tested with a
  // 20 s timeout in EvalSandbox.OutputIsCappedAndFloodsAreKilled.
  const json& flood = s["per_kind"]["py_output_flood"];
  EXPECT_EQ(flood.value("runtime_error", 0) + flood.value("timeout", 0), 1) << flood.dump();
  EXPECT_EQ(s["per_kind"]["mp_correct"].value("correct", 0), 1);
  EXPECT_TRUE(std::filesystem::exists(dir.file("eval/report.json")));
}

// Correctness only: the rate (target 50/s per format on 2 cores) is a benchmark,
// `trex or eval-throughput`, because a timed assertion fails on a loaded machine.
TEST(EvalThroughput, BenchmarkSizedModelsAreGradedCorrectly) {
  ThroughputOptions o;
  o.n = 100;
  o.n_python = 4;
  o.jobs = 2;
  o.python = python_for_tests();
  json r = run_throughput(o);
  for (const char* k : {"mathprog", "lp", "python"}) {
    EXPECT_NEAR(r[k]["pass@1"].get<double>(), 100.0, 1e-9) << k << " " << r[k].dump();
    EXPECT_EQ(r[k]["errors"]["correct"], k == std::string("python") ? 4 : 100) << k;
  }
  for (const char* k : {"mathprog", "lp"}) {
    EXPECT_EQ(r[k]["completions"], 100) << k;
    EXPECT_GT(r[k]["per_second"].get<double>(), 0.0) << k;
  }
}

TEST(EvalBench, EverySharedFileWithGoldFreeCompletions) {
  const std::string bench_dir = test::shared_dir() + "/or_bench";
  if (!std::filesystem::exists(bench_dir)) GTEST_SKIP() << "no " << bench_dir;
  test::TempDir dir;
  // The first 25 records of every file (same stems), to keep the test fast;
  // `trex or eval` over the full files is in docs/or-eval.md.
  std::vector<std::string> files;
  int64_t unknown = 0, total = 0;
  for (const auto& e : std::filesystem::directory_iterator(bench_dir)) {
    if (e.path().extension() != ".jsonl") continue;
    std::vector<json> records = read_jsonl(e.path().string());
    records.resize(std::min<size_t>(records.size(), 25));
    total += static_cast<int64_t>(records.size());
    for (const auto& r : records) unknown += ground_truth(r).kind == TruthKind::unknown;
    std::string copy = dir.file(e.path().filename().string());
    write_jsonl(copy, records);
    files.push_back(copy);
  }
  ASSERT_GE(files.size(), 40u);
  std::sort(files.begin(), files.end());
  EXPECT_EQ(write_gold_free_completions(files, dir.file("completions.jsonl"), false), total);
  EvalOptions o = options(dir, files);
  json report = run_eval(o);
  EXPECT_EQ(report["benchmarks"].size(), files.size());
  int64_t excluded = 0;
  for (const auto& [name, b] : report["benchmarks"].items())
    excluded += b["excluded_unknown"].get<int64_t>();
  EXPECT_EQ(excluded, unknown);
  EXPECT_LT(report["micro"]["pass@1"].get<double>(), 5.0);
  EXPECT_GT(report["errors"]["no_code"].get<int64_t>(), 0);
  EXPECT_GT(report["errors"]["wrong_objective"].get<int64_t>(), 0);
  EXPECT_GT(report["errors"]["infeasible"].get<int64_t>(), 0);
  EXPECT_EQ(report["errors"]["runtime_error"], 0);
  EXPECT_EQ(report["join"]["unmatched"], 0);
}

}  // namespace
}  // namespace trex::orlib::eval
