#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/process_pool.hpp"
#include "trex/io/tokenizer.hpp"
#include "trex/or/dataset/collected.hpp"
#include "trex/or/dataset/cpt.hpp"
#include "trex/or/dataset/decontam.hpp"
#include "trex/or/families/family.hpp"
#include "trex/or/synth/synth.hpp"

namespace trex::orlib {
namespace {

TEST(DatasetPool, CrashedJobsAreReportedAndRetried) {
  std::map<int64_t, std::string> results;
  int crashes = 0;
  int64_t next = 0;
  std::vector<PoolItem> retries;
  ProcessPoolOptions options;
  options.workers = 2;
  ProcessPool pool(options, [](int, const PoolItem& job) -> std::string {
    if (job.id == 3 && job.attempt == 0) std::abort();
    return std::to_string(job.id * 10 + job.attempt);
  });
  pool.run(
      [&]() -> std::optional<PoolItem> {
        if (!retries.empty()) {
          PoolItem j = retries.back();
          retries.pop_back();
          return j;
        }
        if (next >= 10) return std::nullopt;
        PoolItem j;
        j.id = next++;
        return j;
      },
      [&](const PoolItem& job, PoolResult&& result) {
        if (result.status == PoolStatus::crashed) {
          ++crashes;
          PoolItem again = job;
          again.attempt += 1;
          retries.push_back(again);
          return;
        }
        results[job.id] = result.response;
      });
  EXPECT_EQ(crashes, 1);
  ASSERT_EQ(results.size(), 10u);
  EXPECT_EQ(results[3], "31");
  EXPECT_EQ(results[7], "70");
}

CptDocument doc(const std::string& text) {
  return {"test", text, json::object()};
}

TEST(DatasetCpt, ExactAndNearDuplicatesAreRemoved) {
  std::string base;
  for (int i = 0; i < 300; ++i) base += "word" + std::to_string(i) + " ";
  std::string near = base + "one extra tail";
  std::string other;
  for (int i = 0; i < 300; ++i) other += "token" + std::to_string(i * 7) + " ";
  std::vector<CptDocument> docs = {doc(base), doc(base), doc("  " + base), doc(near), doc(other)};
  auto [exact, near_count] = deduplicate(docs, 0.8);
  EXPECT_EQ(exact, 2);  // identical, and identical after whitespace normalisation
  EXPECT_EQ(near_count, 1);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].text, base);
  EXPECT_EQ(docs[1].text, other);
}

// `count` easy problems over every family into DIR/problems.jsonl.
void write_problems(const test::TempDir& dir, int64_t count, uint64_t seed) {
  SynthRequest r;
  r.count = count;
  r.families = all_families();
  r.settings.seed = seed;
  r.settings.mixed_difficulty = false;
  r.settings.difficulty = Difficulty::easy;
  r.settings.record_timings = false;
  r.jobs = 2;
  r.show_progress = false;
  JsonlWriter w(dir.file("problems.jsonl"));
  run_synth(r, [&](const std::string& rec) { w.write_line(rec); });
  w.commit();
}

TEST(DatasetCpt, CorpusHasEveryDocumentKind) {
  test::TempDir dir;
  write_problems(dir, static_cast<int64_t>(all_families().size()), 21);
  CptOptions o;
  o.problems_path = dir.file("problems.jsonl");
  o.out_dir = dir.file("cpt");
  CptSummary s = build_cpt(o);
  auto docs = read_jsonl(dir.file("cpt/corpus.jsonl"));
  EXPECT_EQ(static_cast<int64_t>(docs.size()), s.documents);
  std::map<std::string, int> kinds;
  int64_t bytes = 0;
  for (const auto& d : docs) {
    kinds[d["meta"]["kind"].get<std::string>()]++;
    bytes += static_cast<int64_t>(d["text"].get<std::string>().size());
    if (d["meta"]["kind"] == "glpk_example") {
      EXPECT_EQ(d["meta"]["license"], "GPL-3.0-or-later");
      EXPECT_NE(d["text"].get<std::string>().find("GNU General Public License"), std::string::npos);
    }
  }
  EXPECT_EQ(bytes, s.bytes);
  for (const char* k : {"worked_example", "lp_literacy", "error_fix", "family", "status_semantics",
                        "mathprog_reference"})
    EXPECT_GT(kinds[k], 0) << k;
  if (std::filesystem::is_directory(o.glpk_examples_dir)) {
    EXPECT_GT(kinds["glpk_example"], 10);
  }
  EXPECT_EQ(kinds["worked_example"], static_cast<int>(all_families().size()));

  // The manifest: every kept document under one source, each with its licence.
  const json manifest = json::parse(read_file(dir.file("cpt/summary.json")))["sources"];
  int64_t listed = 0;
  for (auto it = manifest.begin(); it != manifest.end(); ++it) {
    listed += it->at("documents").get<int64_t>();
    EXPECT_FALSE(it->at("license").get<std::string>().empty()) << it.key();
  }
  EXPECT_EQ(listed, s.documents);
  EXPECT_GT(manifest["trex-generated"]["documents"].get<int64_t>(), 0);
  EXPECT_EQ(manifest["lp-solve-doc"]["license"], "LGPL-2.1-or-later");
  const std::string lp_solve_dir = default_collected_sources().front().dir;
  if (std::filesystem::is_directory(lp_solve_dir)) {  // scripts/install-deps.sh installs it
    EXPECT_TRUE(manifest["lp-solve-doc"]["installed"].get<bool>());
    EXPECT_GT(manifest["lp-solve-doc"]["documents"].get<int64_t>(), 100);
  }
  // Every collected document comes from a listed collected source.
  int64_t collected = 0;
  for (const CollectedSource& source : default_collected_sources())
    collected += manifest[source.package]["documents"].get<int64_t>();
  EXPECT_EQ(kinds["collected"], collected);
  if (std::filesystem::exists("/usr/share/doc/glpk-doc/gmpl.pdf")) {
    EXPECT_EQ(manifest["glpk-doc"]["license"], "GFDL-1.3-no-invariants-or-later");
    EXPECT_GT(manifest["glpk-doc"]["documents"].get<int64_t>(), 60);
  }
}

TEST(CollectedText, HtmlToTextHandChecked) {
  const std::string html =
      "<!DOCTYPE html><html><HEAD><TITLE>Absolute &amp; values</TITLE>"
      "<style>BODY { margin:0 }</style></HEAD><body><!-- a comment <p> -->"
      "<h1><u>Absolute   values</u></h1>\n<P>Linear\n   constraints are of the form:</P>"
      "<pre>a1 x1 +  a2 x2 &lt;= max\n  -x &gt;= 0</pre>"
      "<ul><li>one &#233;l&#xE8;ve</li><li>two&nbsp;&amp; three</li></ul>"
      "<table><tr><td>x</td><td>y</td></tr></table><script>var a = '<p>';</script>"
      "A &unknown; & end<br>last</body></html>";
  EXPECT_EQ(html_to_text(html),
            "# Absolute values\n\nLinear constraints are of the form:\n\n"
            "a1 x1 +  a2 x2 <= max\n  -x >= 0\n\n"
            "- one \u00e9l\u00e8ve\n- two & three\n\nx y\n\nA &unknown; & end\nlast\n");
  EXPECT_EQ(html_title(html), "Absolute & values");
  // Numeric entities outside Unicode's scalar values become U+FFFD.
  EXPECT_EQ(html_to_text("<p>a&#xD800;b&#99999999;c&#x41;</p>"), "a\uFFFDb\uFFFDcA\n");
  EXPECT_EQ(html_title("<p>no title</p>"), "");
}

TEST(CollectedText, PagesOfASourceBecomeDocumentsWithTheirLicence) {
  test::TempDir dir;
  const std::string long_text(500, 'w');
  std::filesystem::create_directories(dir.file("sub"));
  // Windows-1252 bytes (as in older pages) become UTF-8: "\xa9" -> "©", "\x93..\x94" -> “..”.
  write_file_atomic(dir.file("a.htm"),
                    "<title>Page A</title><p>" + long_text + "</p><p>\xa9 \x93q\x94</p>");
  write_file_atomic(dir.file("sub/b.html"),
                    "<title>Page B</title><h1>Page B</h1><p>" + long_text + "</p>");
  write_file_atomic(dir.file("index.htm"), "<title>Index</title><p>short</p>");
  write_file_atomic(dir.file("notes.txt"), long_text);
  const CollectedSource source{"Test guide", "test-doc", dir.path(), "MIT", "The authors"};
  CollectedStats stats;
  const std::vector<CollectedDocument> docs = collected_documents(source, &stats);
  EXPECT_EQ(stats.files, 3);
  EXPECT_EQ(stats.too_short, 1);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].file, "a.htm");
  EXPECT_EQ(docs[0].text,
            "# Page A\n\n(From the Test guide, Debian package test-doc; licence "
            "MIT.)\n\n" +
                long_text + "\n\n\u00a9 \u201cq\u201d\n");
  EXPECT_EQ(docs[1].file, "sub/b.html");  // its heading already names it: no second title
  EXPECT_EQ(docs[1].text.rfind("(From the Test guide", 0), 0u);

  // A source that is not installed gives nothing, and the manifest says so.
  test::TempDir out;
  write_problems(out, 2, 5);
  CptOptions o;
  o.problems_path = out.file("problems.jsonl");
  o.out_dir = out.file("cpt");
  o.glpk_examples_dir = "";
  o.collected_sources = {source, {"Absent guide", "absent-doc", out.file("none"), "MIT", "-"}};
  const CptSummary s = build_cpt(o);
  EXPECT_EQ(s.kinds.at("collected").documents, 2);
  EXPECT_EQ(s.sources.at("test-doc").documents, 2);
  EXPECT_FALSE(s.sources.at("absent-doc").installed);
  EXPECT_EQ(s.sources.at("absent-doc").documents, 0);
  EXPECT_NE(
      format_cpt_summary(s).find("not installed: scripts/install-deps.sh installs absent-doc"),
      std::string::npos);
}

// pdftotext -layout output as the GLPK manuals give it: page numbers, contents
// leaders, title-page glyphs and form feeds go; hyphenated words are rejoined
// (lower-case continuations only); code keeps its lines and indentation.
TEST(CollectedText, PdfLayoutTextIsCleanedAndCutAtSections) {
  const std::string raw =
      "M                              L\n"
      "Modeling Language\n"
      "1 Introduction . . . . . . . . . . . . 6\n"
      "\n\n\n"
      "3.1    Numeric expressions\n"
      "   A numeric expression is a rule for computing a single numeric value repre-\n"
      "sented as a floating-point number, the coe\uFB03cient of a San-\n"
      "Diego route.\n"
      "                                 12\n"
      "\f   s.t. supply{i in I}: sum{j in J} x[i,j] <= a[i];\n"
      "end;\n"
      "3.2    Symbolic expressions\n"
      "   A symbolic expression is a rule.\n";
  const std::string clean = clean_pdf_text(raw);
  EXPECT_EQ(clean,
            "Modeling Language\n\n"
            "3.1    Numeric expressions\n"
            "   A numeric expression is a rule for computing a single numeric value represented\n"
            "as a floating-point number, the coefficient of a San-\n"
            "Diego route.\n"
            "   s.t. supply{i in I}: sum{j in J} x[i,j] <= a[i];\n"
            "end;\n"
            "3.2    Symbolic expressions\n"
            "   A symbolic expression is a rule.\n");
  // Cut at each numbered heading; with a minimum size, short sections merge forward.
  const std::vector<std::string> each = manual_sections(clean, 1, 1000);
  ASSERT_EQ(each.size(), 3u);
  EXPECT_EQ(each[0], "Modeling Language\n");
  EXPECT_EQ(each[1].rfind("3.1    Numeric expressions\n", 0), 0u);
  EXPECT_EQ(each[2], "3.2    Symbolic expressions\n   A symbolic expression is a rule.\n");
  const std::vector<std::string> merged = manual_sections(clean, 200, 1000);
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(merged[0] + merged[1], each[0] + "\n" + each[1] + each[2]);
  // A long section is cut at line breaks near the maximum.
  for (const std::string& part : manual_sections(clean, 1, 120)) EXPECT_LE(part.size(), 121u);
  EXPECT_THROW(pdf_to_text("no/such/file.pdf"), Error);
}

// The installed GLPK manuals (scripts/install-deps.sh) become one document per section.
TEST(CollectedText, GlpkManualsBecomeSectionDocuments) {
  const CollectedSource* glpk = nullptr;
  for (const CollectedSource& s : default_collected_sources())
    if (s.package == "glpk-doc") glpk = &s;
  ASSERT_NE(glpk, nullptr);
  EXPECT_EQ(glpk->license, "GFDL-1.3-no-invariants-or-later");
  if (!std::filesystem::exists(glpk->dir + "/gmpl.pdf")) GTEST_SKIP() << "glpk-doc not installed";
  CollectedSource gmpl = *glpk;
  gmpl.files = {"gmpl.pdf", "missing.pdf"};
  CollectedStats stats;
  const std::vector<CollectedDocument> docs = collected_documents(gmpl, &stats);
  EXPECT_EQ(stats.files, 2);
  EXPECT_EQ(stats.failed, 1);
  ASSERT_EQ(stats.errors.size(), 1u);
  EXPECT_NE(stats.errors[0].find("missing.pdf"), std::string::npos);
  ASSERT_GE(docs.size(), 30u);
  bool saw_transport_model = false;
  for (const CollectedDocument& d : docs) {
    EXPECT_EQ(d.file.rfind("gmpl.pdf#", 0), 0u);
    EXPECT_LE(d.text.size(), kMaxManualSectionChars + 400);
    EXPECT_NE(d.text.find("licence GFDL-1.3-no-invariants-or-later"), std::string::npos);
    EXPECT_EQ(d.text.find('\f'), std::string::npos);
    EXPECT_EQ(d.text.find(". . . . ."), std::string::npos);
    saw_transport_model |=
        d.text.find("s.t. supply{i in I}: sum{j in J} x[i,j] <= a[i];") != std::string::npos;
  }
  EXPECT_TRUE(saw_transport_model);  // the manual's example model, with its line intact
}

// With a tokenizer the manifest counts real tokens: per kind and per source they
// add up to the total, which is the sum over the corpus lines' encodings.
TEST(DatasetCpt, ATokenizerGivesRealTokenCounts) {
  test::TempDir dir;
  write_problems(dir, 3, 31);
  io::TokenizerTrainOptions t;
  t.vocab_size = 400;
  t.show_progress = false;
  const io::Tokenizer tokenizer =
      io::Tokenizer::train_from_texts({"minimize cost: sum of x; s.t. supply and demand"}, t);
  tokenizer.save(dir.file("tokenizer.json"));
  CptOptions o;
  o.problems_path = dir.file("problems.jsonl");
  o.out_dir = dir.file("cpt");
  o.glpk_examples_dir = "";
  o.collected_sources = {};
  o.jobs = 0;
  o.tokenizer_path = dir.file("tokenizer.json");
  const CptSummary s = build_cpt(o);
  int64_t encoded = 0;
  for (const json& d : read_jsonl(dir.file("cpt/corpus.jsonl")))
    encoded += static_cast<int64_t>(tokenizer.encode(d["text"].get<std::string>()).size());
  EXPECT_EQ(s.tokens, encoded);
  EXPECT_GT(s.tokens, s.bytes / 8);  // a 400-id vocabulary compresses little
  int64_t by_kind = 0, by_source = 0;
  for (const auto& [k, v] : s.kinds) by_kind += v.tokens;
  for (const auto& [k, v] : s.sources) by_source += std::max<int64_t>(v.tokens, 0);
  EXPECT_EQ(by_kind, s.tokens);
  EXPECT_EQ(by_source, s.tokens);
  const json summary = json::parse(read_file(dir.file("cpt/summary.json")));
  EXPECT_NE(summary["token_measure"].get<std::string>().find("tokenizer.json"), std::string::npos);
  EXPECT_EQ(summary["sources"]["trex-generated"]["tokens"], s.sources.at("trex-generated").tokens);
  EXPECT_NE(format_cpt_summary(s).find("           tokens"), std::string::npos);
  o.tokenizer_path = dir.file("no-such-tokenizer.json");
  EXPECT_THROW(build_cpt(o), Error);
}

TEST(DatasetCpt, DocumentsMatchingABenchmarkAreDroppedAndCounted) {
  test::TempDir dir;
  write_problems(dir, 6, 23);
  CptOptions o;
  o.problems_path = dir.file("problems.jsonl");
  o.glpk_examples_dir = "";
  o.jobs = 0;
  o.out_dir = dir.file("clean");
  const CptSummary clean = build_cpt(o);
  EXPECT_EQ(clean.bench_questions, 0u);
  // Plant one document verbatim and another as its numbers alone.
  std::string verbatim, numbers_only;
  for (const auto& d : read_jsonl(dir.file("clean/corpus.jsonl"))) {
    const std::string text = d["text"];
    if (verbatim.empty() && d["meta"]["kind"] == "worked_example") verbatim = text;
    const std::vector<std::string> signature = number_signature(text);
    if (numbers_only.empty() && d["meta"]["kind"] == "family" &&
        signature.size() >= kSignatureMinNumbers + 2) {
      numbers_only = "Figures of some story:";
      for (const std::string& n : signature) numbers_only += " " + n + " and";
    }
  }
  ASSERT_FALSE(verbatim.empty());
  ASSERT_FALSE(numbers_only.empty());
  std::filesystem::create_directories(dir.file("bench"));
  JsonlWriter bench(dir.file("bench/planted.jsonl"));
  bench.write_line(nlohmann::json{{"question", verbatim}}.dump());
  bench.write_line(nlohmann::json{{"question", numbers_only}}.dump());
  bench.commit();
  o.bench_dir = dir.file("bench");
  o.out_dir = dir.file("decontaminated");
  const CptSummary s = build_cpt(o);
  EXPECT_EQ(s.bench_questions, 2u);
  EXPECT_GE(s.decontam_dropped, 1);
  EXPECT_GE(s.decontam_numbers_dropped, 1);
  EXPECT_EQ(s.documents + s.decontam_dropped + s.decontam_numbers_dropped, clean.documents);
  for (const auto& d : read_jsonl(dir.file("decontaminated/corpus.jsonl")))
    EXPECT_NE(d["text"].get<std::string>(), verbatim);
  const auto report = nlohmann::json::parse(read_file(dir.file("decontaminated/summary.json")));
  EXPECT_EQ(report["decontam_numbers_dropped"], s.decontam_numbers_dropped);
}

}  // namespace
}  // namespace trex::orlib
