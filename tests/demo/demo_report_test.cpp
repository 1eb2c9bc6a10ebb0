#include <gtest/gtest.h>

#include <regex>

#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/demo/demo_report.hpp"

namespace trex::demo {
namespace {

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(DemoReport, NiceTicksCoverTheRange) {
  AxisTicks t = nice_ticks(0.3, 9.7);
  EXPECT_DOUBLE_EQ(t.lo, 0.0);
  EXPECT_DOUBLE_EQ(t.hi, 10.0);
  EXPECT_DOUBLE_EQ(t.step, 2.0);
  t = nice_ticks(2.31, 2.87);
  EXPECT_NEAR(t.step, 0.2, 1e-12);  // 0.56 / 5 = 0.112 -> the next nice step
  EXPECT_NEAR(t.lo, 2.2, 1e-12);
  EXPECT_NEAR(t.hi, 3.0, 1e-12);
  t = nice_ticks(5.0, 5.0);  // a flat series still gets a non-empty axis
  EXPECT_LT(t.lo, 5.0);
  EXPECT_GT(t.hi, 5.0);
}

TEST(DemoReport, SvgIsWellFormedWithOneLinePerSeriesAndScalesKnownPoints) {
  std::vector<CurveSeries> series = {
      {"CPT train", {{0, 0}, {50, 5}, {100, 10}}, false},
      {"CPT val", {{0, 10}, {100, 0}}, true},
      {"SFT train", {{50, std::nan("")}, {60, 4}}, false},  // non-finite point dropped
  };
  SvgChart chart;
  chart.title = "Loss <CPT & SFT>";
  const std::string svg = loss_curves_svg(series, chart);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_EQ(count_of(svg, "<svg "), 1u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(count_of(svg, "<text"), count_of(svg, "</text>"));
  EXPECT_EQ(count_of(svg, "<g "), count_of(svg, "</g>"));
  EXPECT_EQ(count_of(svg, "<polyline"), 3u);
  EXPECT_NE(svg.find("Loss &lt;CPT &amp; SFT&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("Loss <CPT"), std::string::npos);
  // x and y ticks 0..100 and 0..10: the plot area is [72, 736] x [44, 384].
  EXPECT_NE(svg.find("points=\"72.00,384.00 404.00,214.00 736.00,44.00\""), std::string::npos);
  EXPECT_NE(svg.find("points=\"72.00,44.00 736.00,384.00\""), std::string::npos);
  EXPECT_NE(svg.find("points=\"470.40,248.00\""), std::string::npos);  // the one finite point
  EXPECT_EQ(count_of(svg, "stroke-dasharray"), 2u);  // the val line and its legend entry
  EXPECT_NE(svg.find(">100</text>"), std::string::npos);
  // No data at all still gives a valid document.
  const std::string none = loss_curves_svg({}, chart);
  EXPECT_NE(none.find("no data"), std::string::npos);
  EXPECT_EQ(count_of(none, "<polyline"), 0u);
}

TEST(DemoReport, ReadsLossSeriesToleratingMissingFields) {
  test::TempDir dir;
  write_file_atomic(dir.file("m.jsonl"),
                    "{\"step\": 1, \"loss\": 3.5, \"lm_loss\": 3.4}\n"
                    "{\"step\": 2, \"lm_loss\": 3.0}\n"
                    "{\"step\": 3, \"val_loss\": 3.2}\n"
                    "{\"step\": 4, \"loss\": null, \"tokens_per_s\": 100}\n"
                    "{\"loss\": 2.5}\n");
  auto s = read_loss_series(dir.file("m.jsonl"), "SFT");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].label, "SFT train");
  ASSERT_EQ(s[0].points.size(), 3u);
  EXPECT_DOUBLE_EQ(s[0].points[1].y, 3.0);
  EXPECT_DOUBLE_EQ(s[0].points[2].x, 4.0);  // no step: the record's position
  EXPECT_EQ(s[1].label, "SFT val");
  ASSERT_EQ(s[1].points.size(), 1u);
  EXPECT_TRUE(s[1].dashed);
  EXPECT_THROW(read_loss_series(dir.file("missing.jsonl"), "x"), Error);
  write_file_atomic(dir.file("bad.jsonl"), "{\"step\": 1}\nnot json\n");
  EXPECT_THROW(read_loss_series(dir.file("bad.jsonl"), "x"), Error);
}

TEST(DemoReport, Pass1TableFromEvalReports) {
  test::TempDir dir;
  // One eval run over several splits (benchmarks keyed by file stem) ...
  write_file_atomic(dir.file("base.json"),
                    R"({"benchmarks": {"test": {"n": 80, "pass@1": 2.5, "execution_rate": 40.0},
                        "heldout_family": {"n": 60, "pass@1": 0.0}},
                        "micro": {"n": 140, "pass@1": 1.4}})");
  // ... or one run per split (its only benchmark is used).
  write_file_atomic(
      dir.file("sft_test.json"),
      R"({"benchmarks": {"demo_test": {"n": 80, "pass@1": 47.5}}, "micro": {"n": 80, "pass@1": 47.5}})");
  write_file_atomic(dir.file("sft_family.json"),
                    R"({"benchmarks": {"heldout_family": {"n": 60, "pass@1": 1.6666}}})");
  write_file_atomic(dir.file("broken.json"), R"({"benchmarks": {}})");
  DemoReportInputs in;
  in.base_reports = {{"test", dir.file("base.json")}, {"heldout_family", dir.file("base.json")}};
  in.sft_reports = {{"test", dir.file("sft_test.json")},
                    {"heldout_family", dir.file("sft_family.json")}};
  in.figures = {{"CPT tokens/s", "5120"}, {"SFT MFU", "3.1 %"}};
  in.charts = {{"CPT loss", "cpt_loss.svg"}};
  in.data_summary = {{"train_families", {"assignment", "lot_sizing"}},
                     {"heldout_families", {"knapsack"}},
                     {"split_sizes", {{"test", 80}}},
                     {"diversity",
                      {{"ngram", 4},
                       {"sample", 200},
                       {"families", {{"assignment", {{"share", 0.21}, {"templates", 5}}}}},
                       {"benchmarks", {{"nl4opt", {{"share", 0.7}}}}}}},
                     {"data_order_before", {{"assignment", 0.5}}},
                     {"data_order_after", {{"assignment", 1.0}}}};
  const std::string md = demo_report_markdown(in);
  EXPECT_NE(md.find("| test | 80 | 2.5 | 47.5 | +45.0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| heldout_family | 60 | 0.0 | 1.7 | +1.7 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| heldout_template | - | - | - | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("| public | - | - | - | - |"), std::string::npos);
  EXPECT_NE(md.find("| SFT MFU | 3.1 % |"), std::string::npos);
  EXPECT_NE(md.find("![CPT loss](cpt_loss.svg)"), std::string::npos);
  EXPECT_NE(md.find("- held-out families: knapsack"), std::string::npos);
  EXPECT_NE(md.find("| assignment | 0.500 | 1.000 |"), std::string::npos);
  EXPECT_NE(md.find("- question diversity (distinct word 4-grams / all, samples of up to 200 "
                    "questions): trained assignment 0.210 (5 templates); benchmarks nl4opt "
                    "0.700\n"),
            std::string::npos)
      << md;
  write_demo_report(dir.file("report.md"), in);
  EXPECT_EQ(read_file(dir.file("report.md")), md);
  EXPECT_EQ(md.find("What you are looking at"), std::string::npos);  // no opening sentences

  // The two opening sentences: what was trained, then the headline gain on the test split.
  in.what_was_trained = "What you are looking at: a demo model.";
  const std::string opened = demo_report_markdown(in);
  EXPECT_EQ(opened.find("# T-Rex demo\n\nWhat you are looking at: a demo model. Headline: "
                        "zero-shot Pass@1 on the 80 problems of the test split (unseen instances "
                        "of the trained problem kinds) went from 2.5 % for the CPT-only base to "
                        "47.5 % after SFT (+45.0 points).\n\n"),
            0u)
      << opened;
  in.headline_split = "public";  // not evaluated: said so, no figure made up
  EXPECT_NE(demo_report_markdown(in).find("on the public split is not available"),
            std::string::npos);

  Pass1Cell c = read_pass1(dir.file("base.json"), "test");
  EXPECT_TRUE(c.present);
  EXPECT_EQ(c.n, 80);
  EXPECT_DOUBLE_EQ(c.execution_rate, 40.0);
  in.sft_reports["test"] = dir.file("broken.json");
  EXPECT_THROW(demo_report_markdown(in), Error);
  in.sft_reports["test"] = dir.file("absent.json");
  EXPECT_THROW(demo_report_markdown(in), Error);
}

TEST(DemoReport, DataLineRecallCountsReproducedReferenceLines) {
  test::TempDir dir;
  // Gold: item a has 3 data lines (one repeated twice), b has 2, c has 1.
  write_file_atomic(
      dir.file("gold.jsonl"),
      R"({"id": "a", "completion": "set X;\ndata;\nset X := p q;\nparam v := p 1 q 2;\nparam v := p 1 q 2;\nend;\n"})"
      "\n"
      R"({"id": "b", "completion": "data;\nset X := r;\nparam w := r 7;\nend;"})"
      "\n"
      R"({"id": "c", "completion": "data;\nparam z := 3;\nend;"})"
      "\n");
  // a: the repeated line is generated once (counts once), extra spaces are
  // collapsed; b: exact, in the `completions` form; c: no completion at all.
  write_file_atomic(
      dir.file("gen.jsonl"),
      R"({"id": "a", "completion": "```mathprog\nset X;\ndata;\nset  X :=   p q;\nparam v := p 1 q 2;\nparam w := 5;\nend;\n```"})"
      "\n"
      R"({"id": "b", "completions": ["data;\nset X := r;\nparam w := r 7;\nend;", "ignored"]})"
      "\n");
  const DataLineRecall r = data_line_recall(dir.file("gen.jsonl"), dir.file("gold.jsonl"));
  EXPECT_EQ(r.items, 3);
  EXPECT_EQ(r.lines, 6);
  EXPECT_EQ(r.reproduced, 4);  // a: 2 of 3, b: 2 of 2, c: 0 of 1
  EXPECT_EQ(r.exact_items, 1);
  EXPECT_DOUBLE_EQ(r.percent(), 100.0 * 4 / 6);

  write_file_atomic(dir.file("bad.jsonl"), "{\"id\": \"a\"}\n");
  try {
    data_line_recall(dir.file("bad.jsonl"), dir.file("gold.jsonl"));
    FAIL() << "a line without a completion must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("completion"), std::string::npos) << e.what();
  }
}

TEST(DemoReport, ReportShowsDataLineTableOnlyWhenGiven) {
  DemoReportInputs in;
  in.splits = {"test", "public"};
  EXPECT_EQ(demo_report_markdown(in).find("data-section lines"), std::string::npos);
  in.base_data_lines["test"] = 12.5;
  in.sft_data_lines["test"] = 87.5;
  const std::string md = demo_report_markdown(in);
  const std::string table = md.substr(md.find("data-section lines"));
  EXPECT_NE(table.find("| test | 12.5 | 87.5 |"), std::string::npos) << md;
  EXPECT_EQ(table.find("| public |"), std::string::npos) << md;  // no figures: no row
}

}  // namespace
}  // namespace trex::demo
