#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/process_pool.hpp"
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
