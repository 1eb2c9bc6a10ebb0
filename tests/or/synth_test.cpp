#include <gtest/gtest.h>

#include <set>

#include "trex/core/jsonl.hpp"
#include "trex/or/families/family.hpp"
#include "trex/or/solver/linear_model.hpp"
#include "trex/or/synth/synth.hpp"

namespace trex::orlib {
namespace {

SynthRequest small_request(int64_t n, int jobs) {
  SynthRequest r;
  r.count = n;
  r.families = all_families();
  r.settings.seed = 5;
  r.settings.record_timings = false;
  r.jobs = jobs;
  r.show_progress = false;
  return r;
}

std::vector<std::string> run(const SynthRequest& r, SynthSummary* summary = nullptr) {
  std::vector<std::string> out;
  SynthSummary s = run_synth(r, [&](const std::string& rec) { out.push_back(rec); });
  if (summary) *summary = s;
  return out;
}

TEST(Synth, SameSeedGivesIdenticalRecordsAcrossWorkerCounts) {
  auto n = static_cast<int64_t>(2 * all_families().size());
  auto serial = run(small_request(n, 0));
  auto parallel = run(small_request(n, 2));
  ASSERT_EQ(serial.size(), static_cast<size_t>(n));
  EXPECT_EQ(serial, parallel);
  auto again = run(small_request(n, 2));
  EXPECT_EQ(parallel, again);
  SynthRequest other = small_request(n, 2);
  other.settings.seed = 6;
  EXPECT_NE(run(other), parallel);
}

TEST(Synth, ShardsConcatenateToTheUnshardedRun) {
  const int64_t n = 30;
  auto full = run(small_request(n, 2));
  std::vector<std::string> joined;
  for (int i = 0; i < 4; ++i) {
    SynthRequest r = small_request(n, 2);
    r.shard_index = i;
    r.shard_count = 4;
    auto part = run(r);
    EXPECT_EQ(static_cast<int64_t>(part.size()),
              shard_range(n, i, 4).second - shard_range(n, i, 4).first);
    joined.insert(joined.end(), part.begin(), part.end());
  }
  EXPECT_EQ(joined, full);
  EXPECT_THROW(shard_range(n, 4, 4), Error);
}

TEST(Synth, RecordsCarryEveryFieldAndReverify) {
  SynthSummary summary;
  auto records = run(small_request(static_cast<int64_t>(all_families().size()), 2), &summary);
  std::set<std::string> families, ids, texts;
  for (const auto& text : records) {
    json r = json::parse(text);
    for (const char* field :
         {"id", "family", "difficulty", "size", "nl_template", "surface_form", "nl", "alg", "gmpl",
          "lp", "status", "objective", "solvers", "x_ref", "checks", "seed", "generator_version"})
      ASSERT_TRUE(r.contains(field)) << field;
    EXPECT_EQ(r["status"], "optimal");
    EXPECT_EQ(r["solvers"]["glpk"]["status"], "optimal");
    EXPECT_EQ(r["solvers"]["cbc"]["status"], "optimal");
    EXPECT_TRUE(r["checks"]["checker_glpk"].get<bool>());
    EXPECT_FALSE(r["x_ref"].empty());
    families.insert(r["family"]);
    EXPECT_TRUE(ids.insert(r["id"]).second);
    EXPECT_TRUE(texts.insert(normalize_text(r["nl"])).second);
    // Anyone can re-verify a record from its own text.
    LinearModel m = LinearModel::from_mathprog(r["gmpl"].get<std::string>());
    SolveResult g = m.solve_glpk();
    ASSERT_EQ(g.status, SolveStatus::optimal);
    EXPECT_TRUE(objectives_agree(g.objective, r["objective"].get<double>()));
    LinearModel lp = LinearModel::from_lp(r["lp"].get<std::string>());
    EXPECT_TRUE(objectives_agree(lp.solve_cbc().objective + m.objective_constant(),
                                 r["objective"].get<double>()))
        << r["id"];
  }
  EXPECT_EQ(families.size(), all_families().size()) << "round-robin covers every family";
  EXPECT_EQ(summary.written, static_cast<int64_t>(records.size()));
}

TEST(Synth, MedianAndShardRange) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(median({4, 1, 2, 3}), 2.5);
  using Range = std::pair<int64_t, int64_t>;
  EXPECT_EQ(shard_range(10, 0, 3), Range(0, 3));
  EXPECT_EQ(shard_range(10, 2, 3), Range(6, 10));
}

TEST(Synth, NormalizeTextCollapsesCaseAndSpace) {
  EXPECT_EQ(normalize_text("  Hello\n\tWORLD  x "), "hello world x");
}

}  // namespace
}  // namespace trex::orlib
