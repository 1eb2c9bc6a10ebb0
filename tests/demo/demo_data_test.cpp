#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "cli_run.hpp"
#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/demo/demo_data.hpp"
#include "trex/io/tokenizer.hpp"
#include "trex/or/dataset/decontam.hpp"
#include "trex/or/dataset/entity_names.hpp"
#include "trex/or/eval/bench.hpp"
#include "trex/or/solver/linear_model.hpp"
#include "trex/or/synth/verify.hpp"
#include "trex/train/data/cpt.hpp"
#include "trex/train/data/sft.hpp"

namespace trex::demo {
using namespace trex::orlib;
namespace {

DemoDataOptions small_options(const std::string& out, uint64_t seed) {
  DemoDataOptions o;
  o.out_dir = out;
  o.seed = seed;
  o.sizes.sft_train = 24;
  o.sizes.sft_val = 4;
  o.sizes.test = 8;
  o.sizes.heldout_template = 8;
  o.sizes.heldout_family = 4;
  o.sizes.public_items = 4;
  o.sizes.cpt_problems = 30;
  o.sizes.side_constraint_rate = 0.0;
  o.sizes.max_chars = 2000;
  o.train_families = {"assignment", "bin_packing", "lot_sizing", "product_mix"};
  o.heldout_families = {"knapsack"};
  o.bench_dir = test::shared_dir() + "/or_bench";
  o.decontaminate = false;  // indexing all benchmark files costs ~1 s per build
  o.jobs = 0;
  o.show_progress = false;
  return o;
}

// One build shared by the tests that only read it.
struct Built {
  test::TempDir dir;
  DemoDataSummary summary;
  Built() { summary = build_demo_data(small_options(dir.path(), 5)); }
};
const Built& built() {
  static Built b;
  return b;
}

std::vector<json> lines(const std::string& path) {
  return read_jsonl(path);
}

std::string mathprog_block(const std::string& text) {
  const std::string open = "```mathprog\n";
  const size_t a = text.find(open);
  const size_t b = text.rfind("```");
  if (a == std::string::npos || b == std::string::npos || b <= a) return "";
  return text.substr(a + open.size(), b - a - open.size());
}

TEST(DemoData, TextNumbersReadThousandsPercentsAndSkipIdentifiers) {
  const auto v =
      text_numbers("Costs $1,250 and 3,4 units, 75% share, pattern P1, w275, -2.5 and 0.75.");
  const std::vector<double> expected = {1250, 3, 4, 75, -2.5, 0.75};
  EXPECT_EQ(v, expected);
}

TEST(DemoData, TextNumberSpansGiveWhereAndHowTheDataSectionWritesThem) {
  const std::string text = "Pay $1,250 or -2.5 for P1.";
  const auto spans = text_number_spans(text);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(text.substr(spans[0].begin, spans[0].end - spans[0].begin), "1,250");
  EXPECT_EQ(spans[0].digits, "1250");
  EXPECT_DOUBLE_EQ(spans[0].value, 1250);
  EXPECT_EQ(text.substr(spans[1].begin, spans[1].end - spans[1].begin), "-2.5");
  EXPECT_EQ(spans[1].digits, "-2.5");
}

TEST(DemoData, CopyDrillsListASpansElementsAndNumbersInOrderHandChecked) {
  const std::string first = "Zoe charges $411 for the Annual Report and $1,250 for the brochure.";
  const std::string second = "Umar charges -2.5 for the brochure.";
  const std::string question = first + "\n" + second + "\nNo values here.";
  const std::string data =
      "set A := Zoe Umar;\nset T := annual_report brochure;\nparam c : annual_report brochure "
      ":=\nZoe 411 1250\nUmar 7 -2.5;\nend;\n";
  const std::set<std::string> expected = {
      first + "\nin order: Zoe 411 annual_report 1250 brochure",
      second + "\nin order: Umar -2.5 brochure",
      first + "\n" + second + "\nin order: Zoe 411 annual_report 1250 brochure Umar -2.5 brochure"};
  const auto drills = copy_drills(question, data, 40, 7);
  ASSERT_EQ(drills.size(), 40u);
  // Spans start at a segment with a value and cover up to 3 segments, so the
  // value-less last line is never a span's first segment.
  EXPECT_EQ(std::set<std::string>(drills.begin(), drills.end()), expected);
  EXPECT_EQ(copy_drills(question, data, 40, 7), drills);
  EXPECT_TRUE(copy_drills("No numbers, no names.", data, 3, 7).empty());
}

TEST(DemoData, ReorderFollowsTheTextHandChecked) {
  // A product-mix instance: the text lists, per product, its two resource uses,
  // then price and cost; the family's data section is resource-major.
  const std::string question =
      "- Each chair uses 2 hours of sawing and 6 hours of sanding; it sells for $143.25 and costs "
      "$77.25.\n- Each table uses 1 hour of sawing and 10 hours of sanding; it sells for $133.5 "
      "and "
      "costs $38.5.\nAvailable: 180 hours of sawing and 1116 hours of sanding.";
  const std::string data =
      "\nset P := chair table;\nset R := sawing sanding;\nparam a : chair table :=\n  sawing 2 1\n"
      "  sanding 6 10;\nparam C :=\n  sawing 180\n  sanding 1116;\nparam price :=\n  chair 143.25\n"
      "  table 133.5;\nparam cost :=\n  chair 77.25\n  table 38.5;\n";
  const std::string expected =
      "set P := chair table;\nset R := sawing sanding;\n"
      "param a (tr) : sawing sanding :=\nchair 2 6\ntable 1 10;\n"
      "param : price cost :=\nchair 143.25 77.25\ntable 133.5 38.5;\n"
      "param C := sawing 180 sanding 1116;\n";
  const auto numbers = text_numbers(question);
  EXPECT_EQ(reorder_data_section(data, numbers), expected);
  EXPECT_LT(in_order_fraction(data_section_values(data), numbers), 0.7);
  EXPECT_DOUBLE_EQ(in_order_fraction(data_section_values(expected), numbers), 1.0);
  // The rewritten section is still valid GMPL with the same optimum.
  const std::string model =
      "set P;\nset R;\nparam a{R, P} >= 0;\nparam C{R} >= 0;\nparam price{P};\nparam cost{P};\n"
      "var x{P} >= 0;\nmaximize Profit: sum{p in P} (price[p] - cost[p]) * x[p];\n"
      "s.t. Cap{r in R}: sum{p in P} a[r, p] * x[p] <= C[r];\ndata;\n";
  auto a = LinearModel::from_mathprog(model + data + "end;\n").solve_glpk();
  auto b = LinearModel::from_mathprog(model + expected + "end;\n").solve_glpk();
  ASSERT_EQ(a.status, SolveStatus::optimal);
  ASSERT_EQ(b.status, SolveStatus::optimal);
  EXPECT_NEAR(a.objective, b.objective, 1e-9);
}

TEST(DemoData, PresetsAndBadInput) {
  EXPECT_EQ(demo_preset_sizes("default").sft_train, 2400);
  EXPECT_EQ(demo_preset_sizes("full").sft_train, 10000);
  EXPECT_THROW(demo_preset_sizes("huge"), Error);
  test::TempDir dir;
  DemoDataOptions o = small_options(dir.path(), 1);
  o.train_families = {"no_such_family"};
  EXPECT_THROW(build_demo_data(o), Error);
  o = small_options(dir.path(), 1);
  o.heldout_families = {"assignment"};
  EXPECT_THROW(build_demo_data(o), Error);
}

TEST(DemoData, SplitsAreDisjointAndHeldOutPropertiesHold) {
  const Built& b = built();
  const std::string d = b.dir.path();
  EXPECT_EQ(b.summary.split_sizes.at("sft_train"), 24);
  EXPECT_EQ(b.summary.split_sizes.at("test"), 8);
  EXPECT_EQ(b.summary.split_sizes.at("heldout_template"), 8);
  EXPECT_EQ(b.summary.split_sizes.at("heldout_family"), 4);
  EXPECT_EQ(b.summary.split_sizes.at("public"), 4);

  std::map<std::string, std::set<std::string>> ids;  // split -> problem ids
  std::set<std::string> trained_questions;
  std::map<std::string, std::set<int>> train_templates;
  for (const auto& r : lines(d + "/sft_train.jsonl")) {
    ids["sft_train"].insert(r["meta"]["problem_id"].get<std::string>());
    const std::string family = r["meta"]["family"];
    const int tmpl = r["meta"]["nl_template"];
    train_templates[family].insert(tmpl);
    EXPECT_NE(tmpl, b.summary.heldout_templates.at(family)) << "held-out template trained";
    EXPECT_NE(family, "knapsack");
  }
  for (const auto& r : lines(d + "/sft_val.jsonl")) ids["sft_val"].insert(r["meta"]["problem_id"]);
  std::set<std::string> cpt_ids;
  std::string cpt_text;
  for (const auto& r : lines(d + "/cpt.jsonl")) {
    cpt_ids.insert(r["meta"]["problem_id"].get<std::string>());
    cpt_text += r["text"].get<std::string>() + "\n";
  }
  EXPECT_EQ(cpt_ids.size(), 30u);
  for (const auto& id : ids["sft_train"]) EXPECT_TRUE(cpt_ids.count(id)) << id;
  for (const std::string split : {"test", "heldout_template", "heldout_family"}) {
    auto benches = eval::load_benchmarks({d + "/" + split + ".jsonl"});
    ASSERT_EQ(benches.size(), 1u);
    for (const auto& item : benches[0].items) {
      ids[split].insert(item.id);
      EXPECT_EQ(item.truth.status, "optimal");
      EXPECT_EQ(cpt_text.find(item.question), std::string::npos) << split << " question in CPT";
      EXPECT_FALSE(cpt_ids.count(item.id)) << split << " instance in CPT";
    }
  }
  for (const auto& r : lines(d + "/heldout_template.jsonl"))
    EXPECT_EQ(r["nl_template"].get<int>(),
              b.summary.heldout_templates.at(r["problem_type"].get<std::string>()));
  for (const auto& r : lines(d + "/heldout_family.jsonl"))
    EXPECT_EQ(r["problem_type"].get<std::string>(), "knapsack");
  for (const auto& r : lines(d + "/test.jsonl"))
    EXPECT_NE(r["nl_template"].get<int>(),
              b.summary.heldout_templates.at(r["problem_type"].get<std::string>()));
  // Pairwise disjoint by instance.
  std::set<std::string> all;
  size_t total = 0;
  for (const auto& [split, set] : ids) {
    total += set.size();
    all.insert(set.begin(), set.end());
  }
  EXPECT_EQ(all.size(), total);
  // Phrasing variety: several templates per trained family.
  for (const auto& [family, templates] : train_templates) EXPECT_GE(templates.size(), 2u) << family;
  // The public slice is a filtered copy with ids that name the source file.
  for (const auto& r : lines(d + "/public.jsonl")) {
    EXPECT_EQ(r["answer_status"], "optimal");
    EXPECT_NE(r["id"].get<std::string>().find(':'), std::string::npos);
  }
  EXPECT_EQ(lines(d + "/prompts/test.jsonl").size(), 8u);
}

TEST(DemoData, EveryTargetReSolvesToTheRecordedObjective) {
  const Built& b = built();
  int checked = 0;
  for (const std::string file : {"/sft_train.jsonl", "/sft_val.jsonl"})
    for (const auto& r : lines(b.dir.path() + file)) {
      const std::string target = r["messages"][1]["content"];
      const std::string model = mathprog_block(target);
      ASSERT_FALSE(model.empty());
      EXPECT_EQ(model.find("printf"), std::string::npos);  // compact: no print statement
      EXPECT_EQ(
          r["messages"][0]["content"].get<std::string>().rfind("Write a GNU MathProg model", 0),
          0u);
      auto result = LinearModel::from_mathprog(model).solve_glpk();
      ASSERT_EQ(result.status, SolveStatus::optimal) << r["meta"]["problem_id"];
      EXPECT_TRUE(objectives_agree(result.objective, r["meta"]["objective"].get<double>()))
          << r["meta"]["problem_id"];
      ++checked;
    }
  EXPECT_EQ(checked, 28);
  EXPECT_EQ(b.summary.verified_solves, 30 + 4 + 8 + 8 + 4);  // train+cpt, val, test, held-out
}

TEST(DemoData, AssignmentAndBinPackingDataFollowTheTextExactly) {
  const Built& b = built();
  int checked = 0;
  for (const auto& r : lines(b.dir.path() + "/sft_train.jsonl")) {
    const std::string family = r["meta"]["family"];
    if (family != "assignment" && family != "bin_packing") continue;
    const std::string question = r["messages"][0]["content"];
    const std::string model = mathprog_block(r["messages"][1]["content"]);
    const std::string data = model.substr(model.find("\ndata;\n") + 7);
    EXPECT_DOUBLE_EQ(in_order_fraction(data_section_values(data), text_numbers(question)), 1.0)
        << r["meta"]["problem_id"];
    ++checked;
  }
  EXPECT_GT(checked, 6);
  EXPECT_GT(b.summary.order_after.at("bin_packing"), b.summary.order_before.at("bin_packing"));
}

TEST(DemoData, SameSeedGivesIdenticalFiles) {
  const Built& b = built();
  test::TempDir again, other;
  build_demo_data(small_options(again.path(), 5));
  for (const std::string f : {"sft_train.jsonl", "sft_val.jsonl", "test.jsonl",
                              "heldout_template.jsonl", "heldout_family.jsonl", "public.jsonl",
                              "cpt.jsonl", "summary.json", "prompts/test.jsonl", "gold/test.jsonl"})
    EXPECT_EQ(read_file(b.dir.path() + "/" + f), read_file(again.path() + "/" + f)) << f;
  DemoDataOptions o = small_options(other.path(), 6);
  o.sizes.copy_drills = 2;
  build_demo_data(o);
  EXPECT_NE(read_file(b.dir.path() + "/sft_train.jsonl"),
            read_file(other.path() + "/sft_train.jsonl"));
  // Copy drills: two per trained problem, each a span of that problem's question.
  std::map<std::string, int> kinds;
  std::map<std::string, std::string> question_of;
  const auto docs = lines(other.path() + "/cpt.jsonl");
  for (const auto& d : docs) {
    const std::string kind = d["meta"]["kind"];
    ++kinds[kind];
    if (kind == "question_model") question_of[d["meta"]["problem_id"]] = d["text"];
  }
  EXPECT_EQ(kinds["question_model"], 30);
  EXPECT_EQ(kinds["formulation"], 30);
  EXPECT_EQ(kinds["copy_drill"], 60);
  for (const auto& d : docs) {
    if (d["meta"]["kind"] != "copy_drill") continue;
    const std::string text = d["text"];
    const size_t cut = text.rfind("\nin order: ");
    ASSERT_NE(cut, std::string::npos) << text;
    EXPECT_NE(question_of[d["meta"]["problem_id"]].find(text.substr(0, cut)), std::string::npos)
        << text;
  }
}

// Renamed entities: with every trained problem drawn, most are renamed and
// the rest counted; the evaluated splits and the copy drills are byte for byte
// those of the same build without renaming; a renamed SFT pair names other
// things than its unrenamed twin, and its question still mentions each of them.
TEST(DemoData, RenamedEntitiesChangeOnlyTrainedTexts) {
  test::TempDir plain_dir, renamed_dir;
  DemoDataOptions o = small_options(plain_dir.path(), 6);
  o.sizes.copy_drills = 2;
  build_demo_data(o);
  o.out_dir = renamed_dir.path();
  o.sizes.renamed_share = 1.0;
  const DemoDataSummary renamed = build_demo_data(o);
  int64_t renamed_count = 0;
  for (const auto& [source, n] : renamed.renamed) renamed_count += n;
  EXPECT_GE(renamed_count, 20);  // of 24 SFT + 6 CPT-only (23 at seed 6)
  EXPECT_EQ(renamed_count + renamed.renamed_skipped, 30);
  EXPECT_EQ(renamed.renamed.size(), 2u);  // both sources
  EXPECT_EQ(
      json::parse(read_file(renamed_dir.file("summary.json")))["renamed_entities"]["not_renamed"],
      renamed.renamed_skipped);

  for (const std::string f : {"test.jsonl", "heldout_template.jsonl", "heldout_family.jsonl",
                              "val.jsonl", "gold/test.jsonl", "gold/heldout_template.jsonl"})
    EXPECT_EQ(read_file(plain_dir.file(f)), read_file(renamed_dir.file(f))) << f;
  auto drills = [](const std::string& dir) {
    std::multiset<std::string> out;
    for (const auto& d : lines(dir + "/cpt.jsonl"))
      if (d["meta"]["kind"] == "copy_drill") out.insert(d["text"].get<std::string>());
    return out;
  };
  EXPECT_EQ(drills(plain_dir.path()), drills(renamed_dir.path()));
  EXPECT_EQ(drills(plain_dir.path()).size(), 60u);

  const auto plain = lines(plain_dir.file("sft_train.jsonl"));
  const auto other = lines(renamed_dir.file("sft_train.jsonl"));
  ASSERT_EQ(plain.size(), other.size());
  int differing = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_EQ(plain[i]["meta"]["problem_id"], other[i]["meta"]["problem_id"]);
    EXPECT_EQ(plain[i]["meta"]["objective"], other[i]["meta"]["objective"]);
    const std::string q0 = plain[i]["messages"][0]["content"],
                      q1 = other[i]["messages"][0]["content"];
    const std::string m0 = mathprog_block(plain[i]["messages"][1]["content"]);
    const std::string m1 = mathprog_block(other[i]["messages"][1]["content"]);
    const auto names0 = orlib::named_elements(q0, m0), names1 = orlib::named_elements(q1, m1);
    EXPECT_EQ(names0.size(), names1.size()) << q1;
    if (names0 != names1) ++differing;
  }
  EXPECT_GE(differing, 15);  // of 24 (18 at seed 6)
}

// Two benchmark questions planted in a benchmark directory: one trained
// problem's question word for word, and another's numbers under new words. The
// same build with that directory drops both problems (counted by kind), trains
// on neither (SFT set and CPT corpus), and still fills every quota.
TEST(DemoData, PlantedBenchmarkItemsAreDroppedFromTraining) {
  const Built& b = built();
  const std::string prefix = demo_user_prompt("");
  std::vector<std::string> questions;
  for (const auto& r : lines(b.dir.path() + "/sft_train.jsonl"))
    questions.push_back(r["messages"][0]["content"].get<std::string>().substr(prefix.size()));
  const std::string copied = questions[0];
  std::string renumbered;
  for (size_t i = 1; i < questions.size() && renumbered.empty(); ++i)
    if (number_signature(questions[i]).size() >= kSignatureMinNumbers &&
        number_signature(questions[i]) != number_signature(copied))
      renumbered = questions[i];
  ASSERT_FALSE(renumbered.empty());
  std::string paraphrase = "A planted paraphrase that keeps only the figures:";
  for (const std::string& number : number_signature(renumbered)) paraphrase += " " + number + ";";
  test::TempDir bench, out;
  write_file_atomic(bench.file("planted.jsonl"), json{{"question", copied}}.dump() + "\n" +
                                                     json{{"question", paraphrase}}.dump() + "\n");

  DemoDataOptions o = small_options(out.path(), 5);
  o.decontaminate = true;
  o.bench_dir = bench.path();
  o.sizes.public_items = 0;
  const DemoDataSummary s = build_demo_data(o);
  EXPECT_EQ(s.decontam_questions, 2);
  EXPECT_GE(s.decontam_ngram, 1);
  EXPECT_GE(s.decontam_signature, 1);
  EXPECT_EQ(s.split_sizes.at("sft_train"), 24);
  const json summary = json::parse(read_file(out.file("summary.json")));
  EXPECT_EQ(summary["decontamination"]["dropped_ngram"], s.decontam_ngram);
  EXPECT_EQ(summary["decontamination"]["dropped_number_signature"], s.decontam_signature);
  // The data report's diversity figures: every trained family, and the planted file.
  for (const std::string family : {"assignment", "bin_packing", "lot_sizing", "product_mix"}) {
    const json& f = summary["diversity"]["families"][family];
    EXPECT_GT(f["share"].get<double>(), 0.0) << family;
    EXPECT_LE(f["share"].get<double>(), 1.0) << family;
    EXPECT_GE(f["templates"].get<int>(), 1) << family;
  }
  EXPECT_EQ(summary["diversity"]["benchmarks"]["planted"]["texts"], 2);
  // As the JSONL files escape them, without the quotes.
  auto escaped = [](const std::string& text) {
    const std::string quoted = json(text).dump();
    return quoted.substr(1, quoted.size() - 2);
  };
  for (const std::string f : {"/sft_train.jsonl", "/sft_val.jsonl", "/cpt.jsonl"}) {
    const std::string text = read_file(out.path() + f);
    EXPECT_EQ(text.find(escaped(copied)), std::string::npos) << f;
    EXPECT_EQ(text.find(escaped(renumbered)), std::string::npos) << f;
  }
  // Without the planted directory the same seed trains on both (SFT set, CPT corpus).
  for (const std::string f : {"/sft_train.jsonl", "/cpt.jsonl"}) {
    const std::string text = read_file(b.dir.path() + f);
    EXPECT_NE(text.find(escaped(copied)), std::string::npos) << f;
    EXPECT_NE(text.find(escaped(renumbered)), std::string::npos) << f;
  }
}

TEST(DemoData, TrainLoadersReadTheSftSetAndCptCorpus) {
  const Built& b = built();
  std::vector<std::string> texts;
  for (const auto& r : lines(b.dir.path() + "/sft_train.jsonl"))
    texts.push_back(r["messages"][0]["content"].get<std::string>() + "\n" +
                    r["messages"][1]["content"].get<std::string>());
  io::TokenizerTrainOptions to;
  to.vocab_size = 600;
  to.show_progress = false;
  const io::Tokenizer tok = io::Tokenizer::train_from_texts(texts, to);
  train::SftLoaderOptions so;
  so.seq_len = 1024;
  so.overlong = train::OverlongPolicy::kDrop;
  auto sft = train::SftLoader::from_jsonl(b.dir.path() + "/sft_train.jsonl", tok, so);
  EXPECT_EQ(sft.stats().examples, 24);
  EXPECT_EQ(sft.stats().dropped, 0);  // every pair fits a 1024-token sequence
  EXPECT_GT(sft.stats().trained_tokens, sft.stats().tokens / 5);
  train::CptLoaderOptions co;
  co.seq_len = 256;
  auto cpt = train::CptLoader::from_jsonl(b.dir.path() + "/cpt.jsonl", tok, co);
  EXPECT_EQ(cpt.document_count(), 60);  // two documents per trained instance
  EXPECT_EQ(cpt.next_batch().position_ids.size(), 256u);
}

TEST(DemoData, CommandLineBuildsTheFilesAndRejectsBadOptions) {
  test::TempDir dir;
  const std::string out = dir.file("demo");
  auto ok = test::run_trex(
      "or demo-data --out " + out +
      " --sft-train 8 --sft-val 2 --test 4 --heldout-template 4 --heldout-family 2 --public 0"
      " --cpt-problems 8 --train-families assignment,bin_packing --heldout-families knapsack"
      " --jobs 0 --seed 3");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("sft_train 8"), std::string::npos) << ok.output;
  EXPECT_EQ(read_jsonl(out + "/sft_train.jsonl").size(), 8u);
  EXPECT_EQ(read_jsonl(out + "/prompts/heldout_family.jsonl").size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(out + "/public.jsonl"));
  const json summary = json::parse(read_file(out + "/summary.json"));
  EXPECT_EQ(summary["sizes"]["sft_train"], 8);
  EXPECT_EQ(summary["train_families"], json({"assignment", "bin_packing"}));

  auto bad = test::run_trex("or demo-data --out " + out + " --preset huge");
  EXPECT_NE(bad.exit_code, 0);
  bad = test::run_trex("or demo-data --out " + out + " --train-families nope --jobs 0 --quiet");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("nope"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace trex::demo
