#include <gtest/gtest.h>

#include <map>
#include <set>

#include "cli_run.hpp"
#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/strings.hpp"
#include "trex/or/dataset/decontam.hpp"
#include "trex/or/dataset/diversity.hpp"
#include "trex/or/dataset/gmpl_edit.hpp"
#include "trex/or/dataset/sft.hpp"
#include "trex/or/families/family.hpp"
#include "trex/or/solver/linear_model.hpp"
#include "trex/or/synth/synth.hpp"

namespace trex::orlib {
namespace {

// A small problem file: two easy instances per family.
const std::string& problems_file() {
  static test::TempDir dir;
  static std::string path = [] {
    SynthRequest r;
    r.count = static_cast<int64_t>(2 * all_families().size());
    r.families = all_families();
    r.settings.seed = 11;
    r.settings.mixed_difficulty = false;
    r.settings.difficulty = Difficulty::easy;
    r.settings.record_timings = false;
    r.jobs = 2;
    r.show_progress = false;
    std::string p = dir.file("problems.jsonl");
    JsonlWriter w(p);
    run_synth(r, [&](const std::string& rec) { w.write_line(rec); });
    w.commit();
    return p;
  }();
  return path;
}

struct Solved {
  std::string status;
  double objective = 0.0;
};

Solved solve(const std::string& gmpl) {
  LinearModel m = LinearModel::from_mathprog(gmpl);
  SolveResult r = m.solve_glpk();
  return {to_string(r.status), r.objective};
}

std::string mathprog_block(const std::string& text) {
  size_t open = text.find("```mathprog\n");
  if (open == std::string::npos) return {};
  size_t close = text.find("\n```", open + 12);
  return text.substr(open + 12, close - open - 12);
}

std::string last_line(const std::string& text) {
  size_t nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

SftOptions small_options(const std::string& out, int jobs) {
  SftOptions o;
  o.problems_path = problems_file();
  o.n = 80;
  o.seed = 3;
  o.out_dir = out;
  o.bench_dir = "";
  o.jobs = jobs;
  o.show_progress = false;
  return o;
}

const char* kSplits[] = {"train", "valid", "test", "heldout_template", "heldout_family"};

std::map<std::string, std::vector<json>> read_splits(const std::string& dir) {
  std::map<std::string, std::vector<json>> out;
  for (const char* s : kSplits) out[s] = read_jsonl(dir + "/" + s + ".jsonl");
  return out;
}

TEST(DatasetSft, TaskPlanHasExactShares) {
  auto tasks = plan_tasks(10000, 1);
  std::map<std::string, int> counts;
  for (const auto& t : tasks) counts[t]++;
  EXPECT_EQ(counts["formulate"], 4500);
  EXPECT_EQ(counts["translate"], 2000);
  EXPECT_EQ(counts["repair"], 2000);
  EXPECT_EQ(counts["interpret"], 1500);
  EXPECT_NE(plan_tasks(100, 1), plan_tasks(100, 2));
}

TEST(DatasetSft, RecordsParseAndEveryAssistantModelReSolvesToMeta) {
  test::TempDir out;
  SftSummary summary = build_sft(small_options(out.path(), 2));
  EXPECT_EQ(summary.written, 80);
  auto splits = read_splits(out.path());
  int64_t total = 0, checked_models = 0;
  std::set<std::string> tasks, inputs, outputs;
  for (const auto& [name, records] : splits) {
    for (const json& r : records) {
      ++total;
      ASSERT_EQ(r["messages"].size(), 3u);
      EXPECT_EQ(r["messages"][0]["role"], "system");
      EXPECT_EQ(r["messages"][1]["role"], "user");
      EXPECT_EQ(r["messages"][2]["role"], "assistant");
      const json& m = r["meta"];
      EXPECT_EQ(m["split"], name);
      tasks.insert(m["task"].get<std::string>());
      inputs.insert(m["input_repr"].get<std::string>());
      outputs.insert(m["output_repr"].get<std::string>());
      std::string answer = r["messages"][2]["content"];
      std::string line = last_line(answer);
      if (m["status"] == "optimal") {
        ASSERT_EQ(line.rfind("Optimal objective: ", 0), 0u) << line;
        EXPECT_TRUE(objectives_agree(std::stod(line.substr(19)), m["objective"].get<double>()));
      } else {
        EXPECT_EQ(line, "Status: " + m["status"].get<std::string>());
      }
      std::string model = mathprog_block(answer);
      if (!model.empty()) {
        Solved s = solve(model);
        EXPECT_EQ(s.status, m["status"]);
        if (s.status == "optimal") {
          EXPECT_TRUE(objectives_agree(s.objective, m["objective"]));
        }
        ++checked_models;
      }
      if (m["task"] == "repair") {
        // Only kinds whose symptom can be a translation error may fail to translate.
        if (m["fault"]["faulty_status"] == "translation_error") {
          std::string kind = m["fault"]["kind"];
          EXPECT_TRUE(kind == "syntax_error" || kind == "swapped_indices" ||
                      kind == "wrong_coefficient")
              << kind;
        }
        // The faulty model in the user message really is faulty.
        std::string faulty = mathprog_block(r["messages"][1]["content"]);
        ASSERT_FALSE(faulty.empty());
        bool real = false;
        try {
          Solved s = solve(faulty);
          real = s.status != "optimal" || !objectives_agree(s.objective, m["objective"]);
        } catch (const ModelError&) {
          real = true;
        }
        EXPECT_TRUE(real) << m.dump();
      }
    }
  }
  EXPECT_EQ(total, 80);
  EXPECT_GT(checked_models, 40);
  EXPECT_EQ(tasks.size(), 4u);
  EXPECT_EQ(inputs, (std::set<std::string>{"alg", "gmpl", "nl"}));
  EXPECT_EQ(outputs, (std::set<std::string>{"alg", "gmpl", "nl"}));
  std::string card = read_file(out.path() + "/README.md");
  EXPECT_NE(card.find("| formulate | 36 |"), std::string::npos) << card;
}

TEST(DatasetSft, SplitsAreDisjointByInstanceTemplateAndFamily) {
  test::TempDir out;
  build_sft(small_options(out.path(), 2));
  auto splits = read_splits(out.path());
  std::map<std::string, std::string> split_of_problem;
  for (const auto& [name, records] : splits)
    for (const json& r : records) {
      auto [it, inserted] =
          split_of_problem.emplace(r["meta"]["problem_id"].get<std::string>(), name);
      EXPECT_EQ(it->second, name) << "instance in two splits";
    }
  std::set<std::string> train_families;
  std::set<std::pair<std::string, int>> train_templates;
  for (const json& r : splits["train"]) {
    train_families.insert(r["meta"]["family"].get<std::string>());
    train_templates.insert(
        {r["meta"]["family"].get<std::string>(), r["meta"]["nl_template"].get<int>()});
  }
  auto held = choose_heldout_families(3, 2);
  ASSERT_EQ(held.size(), 2u);
  for (const auto& f : held) EXPECT_EQ(train_families.count(f), 0u);
  EXPECT_FALSE(splits["heldout_family"].empty());
  for (const json& r : splits["heldout_family"])
    EXPECT_EQ(train_families.count(r["meta"]["family"].get<std::string>()), 0u);
  for (const json& r : splits["heldout_template"])
    EXPECT_EQ(train_templates.count(
                  {r["meta"]["family"].get<std::string>(), r["meta"]["nl_template"].get<int>()}),
              0u);
  EXPECT_FALSE(splits["train"].empty());
}

TEST(DatasetSft, SameSeedGivesSameFilesAcrossWorkerCounts) {
  test::TempDir a, b, c;
  build_sft(small_options(a.path(), 2));
  build_sft(small_options(b.path(), 0));
  SftOptions other = small_options(c.path(), 2);
  other.seed = 4;
  build_sft(other);
  bool differs = false;
  for (const char* s : kSplits) {
    std::string name = std::string("/") + s + ".jsonl";
    EXPECT_EQ(read_file(a.path() + name), read_file(b.path() + name)) << s;
    differs = differs || read_file(a.path() + name) != read_file(c.path() + name);
  }
  EXPECT_TRUE(differs);
}

TEST(DatasetFaults, InjectedFaultsAreRealAndRepairsVerify) {
  auto problems = load_problems(problems_file());
  std::map<FaultKind, int> real, applied;
  for (size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    Solved ref = solve(p.gmpl);
    ASSERT_EQ(ref.status, "optimal");
    ASSERT_TRUE(objectives_agree(ref.objective, p.objective));  // the repair target verifies
    for (FaultKind kind : all_fault_kinds()) {
      Rng rng(9, {i, static_cast<uint64_t>(kind)});
      auto fault = inject_fault(p.gmpl, kind, rng);
      if (!fault) continue;
      applied[kind]++;
      EXPECT_NE(fault->model, p.gmpl);
      EXPECT_FALSE(fault->diagnosis.empty());
      bool is_real;
      try {
        LinearModel m = LinearModel::from_mathprog(fault->model);
        SolveOptions o;
        o.time_limit_seconds = 5;
        SolveResult r = m.solve_glpk(o);
        is_real = r.status != SolveStatus::optimal || !objectives_agree(r.objective, p.objective);
      } catch (const ModelError&) {
        is_real = true;
      }
      if (kind == FaultKind::syntax_error) {
        EXPECT_THROW(LinearModel::from_mathprog(fault->model), ModelError);
      }
      real[kind] += is_real;
      if (!may_fail_translation(kind)) {
        EXPECT_NO_THROW(LinearModel::from_mathprog(fault->model)) << to_string(kind) << "\n"
                                                                  << fault->model;
      }
    }
  }
  for (FaultKind kind : all_fault_kinds()) {
    EXPECT_GT(applied[kind], 0) << to_string(kind);
    EXPECT_GT(real[kind], 0) << to_string(kind);
  }
  EXPECT_EQ(real[FaultKind::syntax_error], applied[FaultKind::syntax_error]);
}

TEST(DatasetFaults, DataValuesAreFoundAndReplaced) {
  std::string model =
      "set J;\nparam f{J};\nparam K;\nvar x{J} >= 0;\nminimize C: sum{j in J} f[j] * x[j];\n"
      "s.t. Cap: sum{j in J} x[j] >= K;\n\nsolve;\n\ndata;\n\nset J := a b;\n"
      "param f :=\n  a 3\n  b 5;\nparam K := 4;\n\nend;\n";
  auto values = data_values(model);
  ASSERT_EQ(values.size(), 3u);
  EXPECT_EQ(describe(values[0]), "f[a]");
  EXPECT_EQ(values[1].value, 5);
  EXPECT_EQ(describe(values[2]), "K");
  EXPECT_EQ(solve(model).objective, 12);
  EXPECT_EQ(solve(with_data_value(model, values[0], 1)).objective, 4);
  EXPECT_EQ(solve(with_data_value(model, values[2], 6)).objective, 18);
  EXPECT_EQ(constraint_names(model), std::vector<std::string>{"Cap"});
}

TEST(DatasetDecontam, MaxNgramOverlap) {
  NgramIndex index(4);
  index.add_question("q1", "A factory makes chairs and tables from wood and labour every week.");
  index.add_question("q2", "Ships carry containers between ports at minimum total cost.");
  EXPECT_EQ(index.questions(), 2u);
  auto full = index.max_overlap(
      "Intro. A factory makes chairs and tables from wood and labour every week. End");
  EXPECT_DOUBLE_EQ(full.fraction, 1.0);
  EXPECT_EQ(full.source, "q1");
  auto part = index.max_overlap("ships carry containers between ports, quickly");
  EXPECT_NEAR(part.fraction, 2.0 / 6.0, 1e-12);  // 2 of q2's 6 four-grams
  EXPECT_EQ(index.max_overlap("nothing in common here at all").fraction, 0.0);
}

TEST(DatasetDecontam, NumbersAreNormalisedAndSmallIntegersLeftOut) {
  EXPECT_EQ(numbers_of("Costs 1,200 and 3.50 dollars, 15% off, x1 and 007 units; 12,34"),
            (std::vector<std::string>{"1200", "3.5", "15", "7", "12", "34"}));
  EXPECT_EQ(number_signature("3 machines, 10 hours, 250 units at 4.25 each, 250 again, 1,000"),
            (std::vector<std::string>{"1000", "250", "4.25"}));
  // Integers under 100 identify nothing; decimals do, however small.
  EXPECT_EQ(number_signature("45 days, 99 units, 100 kg, 0.5 h"),
            (std::vector<std::string>{"0.5", "100"}));
}

TEST(DatasetDecontam, ANumberSignatureCatchesAParaphraseOfTheSameInstance) {
  NgramIndex index(8);
  index.add_question("bench.jsonl:7",
                     "A bakery sells cakes for $12.50 and pies for $15.75; flour 350 kg, sugar "
                     "120 kg, oven time 480 minutes. How many of each maximise revenue?");
  index.add_question("bench.jsonl:9", "Only small numbers: 4, 5, 12, 40 and 99 units.");
  EXPECT_EQ(index.signed_questions(), 1u);
  // Every word changed, the instance's numbers kept: not an n-gram match, a signature one.
  const std::string paraphrase =
      "Each cake earns 12.50 and each pie 15.75. Stock: 350 units of flour, 120 of sugar; the "
      "oven runs 480 min per week.";
  EXPECT_EQ(index.max_overlap(paraphrase).fraction, 0.0);
  const NgramIndex::Overlap numbers = index.max_signature_share(paraphrase);
  EXPECT_DOUBLE_EQ(numbers.fraction, 1.0);
  EXPECT_EQ(numbers.source, "bench.jsonl:7");
  // Another instance of the same story (two numbers changed) stays below the share.
  EXPECT_LT(
      index.max_signature_share("cakes 12.50, pies 15.75, flour 300, sugar 100, oven 480").fraction,
      kSignatureShare);
  // A number-rich text holding the five among eight others of its own (5 < 0.4 x 13)
  // is not that instance: a table that happens to contain them.
  EXPECT_EQ(index
                .max_signature_share("12.50 15.75 350 120 480 and 101 202 303 404 505 606 707 "
                                     "808 in a long table")
                .fraction,
            0.0);
  // With fewer others (5 of 12) it matches.
  EXPECT_DOUBLE_EQ(
      index.max_signature_share("12.50 15.75 350 120 480 with 101 202 303 404 505 606 707")
          .fraction,
      1.0);
}

// A build whose benchmark directory holds `question` alone.
SftSummary build_with_planted(const std::string& question, const std::string& bench_dir,
                              const std::string& out_dir) {
  JsonlWriter w(bench_dir + "/planted.jsonl");
  w.write_line(json{{"question", question}}.dump());
  w.commit();
  SftOptions o = small_options(out_dir, 2);
  o.bench_dir = bench_dir;
  return build_sft(o);
}

TEST(DatasetDecontam, PlantedBenchmarkItemsAreDroppedAndCounted) {
  test::TempDir clean;
  build_sft(small_options(clean.path(), 2));
  // Records of the clean build planted as benchmark questions: one verbatim,
  // one as its numbers alone under other words.
  std::string verbatim, numbers_only;
  for (const json& r : read_jsonl(clean.file("train.jsonl"))) {
    const std::string user = r["messages"][1]["content"];
    if (verbatim.empty()) verbatim = user;
    const std::vector<std::string> signature = number_signature(user);
    if (numbers_only.empty() && signature.size() >= kSignatureMinNumbers + 2) {
      numbers_only = "An unrelated story whose figures are";
      for (const std::string& n : signature) numbers_only += " " + n + " then";
    }
  }
  ASSERT_FALSE(verbatim.empty());
  ASSERT_FALSE(numbers_only.empty());

  test::TempDir bench1, out1;
  const SftSummary by_words = build_with_planted(verbatim, bench1.path(), out1.path());
  EXPECT_EQ(by_words.written, 80);
  EXPECT_GE(by_words.decontam_dropped, 1);
  for (const auto& [name, records] : read_splits(out1.path()))
    for (const json& r : records) EXPECT_NE(r["messages"][1]["content"], verbatim) << name;

  test::TempDir bench2, out2;
  const SftSummary by_numbers = build_with_planted(numbers_only, bench2.path(), out2.path());
  EXPECT_EQ(by_numbers.written, 80);
  EXPECT_EQ(by_numbers.bench_signed_questions, 1u);
  EXPECT_EQ(by_numbers.decontam_dropped, 0);  // no word 8-gram in common
  EXPECT_GE(by_numbers.decontam_numbers_dropped, 1);
  NgramIndex planted;
  planted.add_directory(bench2.path());
  for (const auto& [name, records] : read_splits(out2.path()))
    for (const json& r : records) {
      std::string text;
      for (const json& m : r["messages"])
        if (m["role"] != "system") text += m["content"].get<std::string>() + "\n";
      EXPECT_LT(planted.max_signature_share(text).fraction, kSignatureShare) << name;
    }
  const json report = json::parse(read_file(out2.file("summary.json")));
  EXPECT_EQ(report["decontam_numbers_dropped"], by_numbers.decontam_numbers_dropped);
  // The diversity report names the planted benchmark file next to the families.
  EXPECT_EQ(report["diversity"]["benchmarks"]["planted"]["texts"], 1);
  EXPECT_NE(read_file(out2.file("README.md")).find("| benchmark planted | - | - | - | 1 | "),
            std::string::npos);
}

// 4-gram diversity, hand-checked: "a b c d" twice and "b c d e", "b c d f"
// once each give 3 distinct of 4.
TEST(DatasetDiversity, DistinctNgramShareHandChecked) {
  const NgramDiversity d = ngram_diversity({"A b, c d e.", "a B c D f", "x y"}, 1);
  EXPECT_EQ(d.texts, 3);
  EXPECT_EQ(d.total, 4);
  EXPECT_EQ(d.distinct, 3);
  EXPECT_DOUBLE_EQ(d.share(), 0.75);
  EXPECT_EQ(ngram_diversity({}, 1).share(), 0.0);
  EXPECT_EQ(ngram_diversity({"a b c d"}, 1, 2).total, 3);
  EXPECT_THROW(ngram_diversity({"a"}, 1, 0), Error);
}

// One template with new numbers scores well below texts that share no wording;
// a larger set is sampled down to the same size, reproducibly by seed.
TEST(DatasetDiversity, TemplatedTextScoresBelowVariedTextOnEqualSamples) {
  std::vector<std::string> templated, varied;
  for (int i = 0; i < 300; ++i) {
    templated.push_back("A factory makes " + std::to_string(i) +
                        " chairs and tables each week and sells every chair for " +
                        std::to_string(2 * i + 7) + " dollars.");
    std::string text;
    for (int w = 0; w < 16; ++w) text += "w" + std::to_string(i * 16 + w) + " ";
    varied.push_back(text);
  }
  const NgramDiversity t = ngram_diversity(templated, 3), v = ngram_diversity(varied, 3);
  EXPECT_EQ(t.texts, static_cast<int64_t>(kDiversitySample));
  EXPECT_EQ(v.texts, static_cast<int64_t>(kDiversitySample));
  EXPECT_DOUBLE_EQ(v.share(), 1.0);
  // 13 4-grams a text: 7 fixed, 4 with the first number, 2 with the second, both unique.
  EXPECT_EQ(t.total, 200 * 13);
  EXPECT_EQ(t.distinct, 7 + 200 * 6);
  EXPECT_EQ(ngram_diversity(templated, 3).distinct, t.distinct);
}

// Surface forms: a template family has one per template; product_mix, which
// composes its text clause by clause, has nearly one per text.
TEST(DatasetDiversity, SurfaceFormsCountTemplatesAndComposedWordings) {
  TextFormCounter hand;
  hand.add(0, "a");
  hand.add(0, "a");
  hand.add(1, "b");
  hand.add(1, "c");
  EXPECT_EQ(hand.counts().texts, 4);
  EXPECT_EQ(hand.counts().templates, 2);
  EXPECT_EQ(hand.counts().surface_forms, 3);

  const Family& family = find_family("product_mix");
  TextFormCounter composed;
  std::set<uint64_t> raw;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    Rng rng(seed, {11});
    auto inst = family.generate(rng, GenOptions{});
    composed.add(inst->nl_template(), hex64(inst->surface_form()));
    raw.insert(inst->surface_form());
    EXPECT_EQ(inst->surface_form(), inst->surface_form());  // a property of the instance
  }
  EXPECT_LE(composed.counts().templates, family.nl_templates());
  EXPECT_GE(composed.counts().surface_forms, 55);
  EXPECT_EQ(composed.counts().surface_forms, static_cast<int64_t>(raw.size()));
}

// `trex or diversity` on a synth file: one row per family with its texts,
// templates and surface forms, benchmarks beside them, the same figures as JSON;
// a bad line is skipped, counted, and exit status 3.
TEST(DatasetDiversity, CommandReportsFamiliesAndBenchmarks) {
  test::TempDir dir;
  SynthRequest req;
  req.count = 12;
  req.families = {&find_family("product_mix"), &find_family("knapsack")};
  req.settings.seed = 3;
  req.settings.record_timings = false;
  req.jobs = 0;
  req.show_progress = false;
  std::string lines;
  run_synth(req, [&](const std::string& r) { lines += r + "\n"; });
  write_file_atomic(dir.file("problems.jsonl"), lines + "{not json\n");
  const test::CliRun run =
      test::run_trex("or diversity --problems " + dir.file("problems.jsonl") + " --bench-dir " +
                     test::shared_dir() + "/or_bench" + " --json " + dir.file("d.json"));
  EXPECT_EQ(run.exit_code, 3) << run.output;
  EXPECT_NE(run.output.find("product_mix"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("nl4opt_sirl"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("1 line skipped (line 13"), std::string::npos) << run.output;
  const json d = json::parse(read_file(dir.file("d.json")));
  EXPECT_EQ(d["families"]["product_mix"]["all_texts"].get<int>() +
                d["families"]["knapsack"]["all_texts"].get<int>(),
            12);
  EXPECT_EQ(d["families"]["product_mix"]["surface_forms"],
            d["families"]["product_mix"]["all_texts"]);  // composed: one form per text here
  EXPECT_GE(d["benchmarks"].size(), 5u);
}

// Every public benchmark file with questions gets a figure on the common sample size.
TEST(DatasetDiversity, PublicBenchmarksHaveAFigureEach) {
  const auto figures = benchmark_diversity(test::shared_dir() + "/or_bench", 1);
  ASSERT_GE(figures.size(), 5u);
  for (const auto& [file, d] : figures) {
    EXPECT_GT(d.texts, 0) << file;
    EXPECT_LE(d.texts, static_cast<int64_t>(kDiversitySample)) << file;
    EXPECT_GT(d.share(), 0.0) << file;
    EXPECT_LE(d.share(), 1.0) << file;
  }
  EXPECT_THROW(benchmark_diversity("no/such/dir", 1), Error);
}

TEST(DatasetSensitivity, ShadowPricesBindingRowsAndRanges) {
  LinearModel m = LinearModel::from_mathprog(
      "var x >= 0;\nvar y >= 0;\nmaximize Z: 3 * x + 2 * y;\ns.t. A: x + y <= 4;\n"
      "s.t. B: x + 3 * y <= 9;\ns.t. C: x <= 3;\nsolve;\nend;\n");
  SolveResult r = m.solve_glpk();
  ASSERT_EQ(r.status, SolveStatus::optimal);
  EXPECT_NEAR(r.objective, 11, 1e-9);
  auto s = m.sensitivity();
  EXPECT_TRUE(s.has_duals);
  std::map<std::string, LinearModel::RowSensitivity> rows;
  for (const auto& row : s.rows) rows[row.name] = row;
  EXPECT_NEAR(rows["A"].dual, 2, 1e-9);
  EXPECT_NEAR(rows["C"].dual, 1, 1e-9);
  EXPECT_NEAR(rows["B"].dual, 0, 1e-9);
  EXPECT_TRUE(rows["A"].binding);
  EXPECT_TRUE(rows["C"].binding);
  EXPECT_FALSE(rows["B"].binding);
  ASSERT_EQ(s.columns.size(), 2u);
  EXPECT_TRUE(s.columns[1].has_range);
  EXPECT_NEAR(s.columns[1].value, 1, 1e-9);
  // y stays optimal while its coefficient is in [0, 3] (slope between C and A).
  EXPECT_NEAR(s.columns[1].coef_lower, 0, 1e-9);
  EXPECT_NEAR(s.columns[1].coef_upper, 3, 1e-9);
}

TEST(DatasetSensitivity, MipHasBindingRowsButNoDuals) {
  LinearModel m = LinearModel::from_mathprog(
      "var x integer >= 0;\nmaximize Z: x;\ns.t. A: 2 * x <= 7;\nsolve;\nend;\n");
  ASSERT_EQ(m.solve_glpk().status, SolveStatus::optimal);
  auto s = m.sensitivity();
  EXPECT_FALSE(s.has_duals);
  EXPECT_NEAR(s.columns[0].value, 3, 1e-9);
  for (const auto& row : s.rows)
    if (row.name == "A") {
      EXPECT_FALSE(row.binding);
    }
}

}  // namespace
}  // namespace trex::orlib
