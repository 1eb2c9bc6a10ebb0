#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/rng.hpp"
#include "trex/core/strings.hpp"

namespace trex {
namespace {

TEST(Rng, SameSeedAndStreamGiveSameSequence) {
  Rng a(42, {1, 2}), b(42, {1, 2});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
}

TEST(Rng, DifferentStreamsDiffer) {
  Rng a(42, {1, 2}), b(42, {1, 3}), c(43, {1, 2});
  int same_b = 0, same_c = 0;
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.next_u64();
    same_b += x == b.next_u64();
    same_c += x == c.next_u64();
  }
  EXPECT_EQ(same_b, 0);
  EXPECT_EQ(same_c, 0);
}

TEST(Rng, ChildDoesNotAdvanceParentAndIsStable) {
  Rng a(7);
  Rng c1 = a.child(5);
  Rng b(7);
  EXPECT_EQ(a.next_u64(), b.next_u64());
  Rng c2 = Rng(7).child(5);
  EXPECT_EQ(c1.next_u64(), c2.next_u64());
}

TEST(Rng, UniformIntCoversRangeUniformly) {
  Rng r(3);
  std::vector<int> counts(6, 0);
  const int n = 60000;
  for (int i = 0; i < n; ++i) {
    int v = r.uniform_int(1, 6);
    ASSERT_GE(v, 1);
    ASSERT_LE(v, 6);
    counts[static_cast<size_t>(v - 1)]++;
  }
  for (int c : counts) EXPECT_NEAR(c, n / 6.0, 5 * std::sqrt(n / 6.0));
}

TEST(Rng, UniformMeanAndNormalMoments) {
  Rng r(11);
  double sum = 0, sum_n = 0, sum_n2 = 0;
  const int n = 50000;
  for (int i = 0; i < n; ++i) {
    double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    double z = r.normal();
    sum_n += z;
    sum_n2 += z * z;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.01);
  EXPECT_NEAR(sum_n / n, 0.0, 0.03);
  EXPECT_NEAR(sum_n2 / n, 1.0, 0.03);
}

TEST(Rng, SampleGivesDistinctIndices) {
  Rng r(5);
  auto s = r.sample(20, 20);
  std::set<size_t> unique(s.begin(), s.end());
  EXPECT_EQ(unique.size(), 20u);
  EXPECT_THROW(r.sample(3, 4), std::invalid_argument);
}

TEST(Strings, FormatNumberRoundTrips) {
  for (double v : {0.0, 1.0, -3.0, 0.1, 12.5, 1e-7, 123456789.125, 2.0 / 3.0}) {
    std::string s = format_number(v);
    EXPECT_EQ(std::stod(s), v) << s;
  }
  EXPECT_EQ(format_number(42.0), "42");
  EXPECT_EQ(format_number(-7.0), "-7");
  EXPECT_EQ(format_fixed(12.50, 2), "12.5");
  EXPECT_EQ(format_fixed(-0.0001, 2), "0");
}

TEST(Strings, SplitTrimJoin) {
  EXPECT_EQ(split("a,b,,c", ','), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(trim("  x y \n"), "x y");
  EXPECT_EQ(join({"a", "b"}, "-"), "a-b");
  EXPECT_EQ(replace_all("aXbXc", "X", "--"), "a--b--c");
}

TEST(Error, FormatsFileLineAndField) {
  Error e("bad value");
  e.file("data.jsonl").line(12).field("objective");
  EXPECT_STREQ(e.what(), "data.jsonl:12: field 'objective': bad value");
  EXPECT_EQ(e.line_number(), 12);
  EXPECT_STREQ(Error("plain").what(), "plain");
}

TEST(AtomicFile, CommitReplacesAndAbandonLeavesOldContent) {
  test::TempDir dir;
  std::string path = dir.file("sub/out.txt");
  write_file_atomic(path, "first");
  EXPECT_EQ(read_file(path), "first");
  {
    AtomicFile f(path);
    f.write("second, never committed");
  }  // destructor abandons the write
  EXPECT_EQ(read_file(path), "first");
  size_t files = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir.file("sub"))) ++files;
  EXPECT_EQ(files, 1u) << "temporary file left behind";
  write_file_atomic(path, "third");
  EXPECT_EQ(read_file(path), "third");
}

TEST(Jsonl, RoundTripAndErrorsNameTheLine) {
  test::TempDir dir;
  std::string path = dir.file("x.jsonl");
  {
    JsonlWriter w(path);
    w.write({{"a", 1}});
    w.write({{"b", "two"}});
    w.commit();
    EXPECT_EQ(w.count(), 2u);
  }
  auto records = read_jsonl(path);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1]["b"], "two");

  std::ofstream(dir.file("bad.jsonl")) << "{\"a\": 1}\n\n{\"a\": \n";
  try {
    read_jsonl(dir.file("bad.jsonl"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.line_number(), 3);
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trex

#include "trex/core/thread_pool.hpp"

namespace trex {
namespace {

TEST(ThreadPool, ParallelForVisitsEveryIndexOnce) {
  ThreadPool pool(3);
  std::vector<int> hits(1000, 0);
  pool.parallel_for(0, 1000, [&](int64_t i) { hits[static_cast<size_t>(i)] += 1; });
  for (int h : hits) ASSERT_EQ(h, 1);
  pool.parallel_for(5, 5, [&](int64_t) { FAIL(); });
}

TEST(ThreadPool, ExceptionsPropagate) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(0, 100,
                                 [](int64_t i) {
                                   if (i == 57) throw Error("boom");
                                 }),
               Error);
  int64_t sum = 0;
  std::mutex m;
  pool.parallel_for(0, 10, [&](int64_t i) {
    std::lock_guard<std::mutex> lock(m);
    sum += i;
  });
  EXPECT_EQ(sum, 45);
}

}  // namespace
}  // namespace trex
