// `trex or eval` on a completions file as real model dumps are: good lines
// interleaved with a lone UTF-16 surrogate escape (Python's json.dumps of
// undecodable bytes), raw invalid UTF-8, a truncated line, a 50 MiB line, a
// binary blob and a record without a completion. Every good line is graded,
// the repairable ones after U+FFFD replacement, every bad one is counted with
// its line number, the exit status says that lines were skipped, and --strict
// stops at the first bad line naming file:line.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/or/eval/eval.hpp"

namespace trex::orlib::eval {
namespace {

using nlohmann::json;

std::string model_with_objective(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return std::string("```mathprog\nvar x;\nminimize z: x;\ns.t. c: x = ") + buf + ";\nend;\n```";
}

// One completion line; `mark` in the serialised line is replaced by `raw`
// (bytes a JSON writer would never produce).
std::string line_with(json record, const std::string& mark = "", const std::string& raw = "") {
  std::string s = record.dump();
  if (!mark.empty()) {
    const size_t at = s.find(mark);
    EXPECT_NE(at, std::string::npos);
    s.replace(at, mark.size(), raw);
  }
  return s;
}

struct Dump {
  std::string bench;
  std::string completions;
  size_t big_bytes = 0;
};

// Benchmark: ids 0..7 with optimal objectives 10 + id, id 7 infeasible, and
// one truncated benchmark line at the end. Completions: see the comments.
Dump write_dump(const test::TempDir& dir) {
  Dump d;
  d.bench = dir.file("dump.jsonl");
  d.completions = dir.file("completions.jsonl");
  {
    std::string b;
    for (int i = 0; i < 7; ++i)
      b += json{{"id", i}, {"question", "q" + std::to_string(i)}, {"answer", 10.0 + i}}.dump() +
           "\n";
    b += json{{"id", 7}, {"question", "q7"}, {"answer", nullptr}, {"answer_status", "infeasible"}}
             .dump() +
         "\n";
    b += "{\"id\": 8, \"question\": \"q8\", \"ans\n";  // truncated benchmark line (line 9)
    write_file_atomic(d.bench, b);
  }
  std::ofstream out(d.completions, std::ios::binary);
  // 1: good, correct.
  out << line_with({{"id", 0}, {"completion", model_with_objective(10)}}) << "\n";
  // 2: good, wrong objective.
  out << line_with({{"id", 1}, {"completion", model_with_objective(99)}}) << "\n";
  // 3: a lone surrogate escape in the prose: repaired, graded correct.
  out << line_with({{"id", 2}, {"completion", "Bytes @S@ here.\n" + model_with_objective(12)}},
                   "@S@", "\\udcff")
      << "\n";
  // 4: truncated JSON (the dump was cut): skipped; item 3 gets no completion.
  out << R"({"id": 3, "completion": "```mathprog\nvar x;\nminimize z: x;\ns.t. c: x =)"
      << "\n";
  // 5: raw invalid UTF-8 in the prose (3 ill-formed sequences): repaired, graded correct.
  out << line_with({{"id", 4}, {"completion", "Latin-1 @U@ text.\n" + model_with_objective(14)}},
                   "@U@", "\xFF\xFE\xC3 ")
      << "\n";
  // 6: a binary blob (NUL and random bytes, no newline inside): skipped.
  {
    std::string blob;
    uint32_t state = 12345;
    for (int i = 0; i < 4096; ++i) {
      state = state * 1103515245u + 12345u;
      char c = static_cast<char>((state >> 16) & 0xFF);
      if (c == '\n') c = '\0';
      blob += c;
    }
    blob[0] = '\0';
    out << blob << "\n";
  }
  // 7: a 50 MiB line: 50 MiB of reasoning before the model; graded (lines up
  // to JsonlOptions::max_line_bytes = 256 MiB are read).
  {
    std::string padding;
    const std::string sentence = "Let me think about the constraints once more.\n";
    padding.reserve((size_t(50) << 20) + sentence.size());
    while (padding.size() < (size_t(50) << 20)) padding += sentence;
    std::string line = line_with({{"id", 5}, {"completion", padding + model_with_objective(15)}});
    d.big_bytes = line.size();
    out << line << "\n";
  }
  // 8: blank line (not counted).
  out << "\n";
  // 9: a record without any completion field: skipped.
  out << line_with({{"id", 6}, {"answer", 16}}) << "\n";
  // 10: good, a list of completions; the escaped backslash "\\udcff" is text.
  out << line_with({{"id", 6},
                    {"completions",
                     {"path C:\\udcff\n" + model_with_objective(16), model_with_objective(17)}}})
      << "\n";
  // 11: good, infeasible model for the infeasible item.
  out << line_with(
      {{"id", 7},
       {"completion", "```mathprog\nvar x >= 0;\nminimize z: x;\ns.t. c: x <= -1;\nend;\n```"}});
  // (no final newline)
  return d;
}

std::string eval_args(const Dump& d, const std::string& out_dir) {
  return "or eval --quiet --jobs 2 --timeout 20 --memory-mb 1024 --bench " + d.bench +
         " --completions " + d.completions + " --out " + out_dir;
}

TEST(EvalRealDump, EveryGoodLineGradedEveryBadOneCounted) {
  test::TempDir dir;
  const Dump d = write_dump(dir);
  ASSERT_GT(d.big_bytes, size_t(50) << 20);

  const test::CliRun r = test::run_trex(eval_args(d, dir.file("out")));
  ASSERT_EQ(r.exit_code, kExitRecordsSkipped) << r.output.substr(0, 4000);
  // The skipped lines are named on stderr with file:line.
  EXPECT_NE(r.output.find("completions.jsonl:4: invalid JSON"), std::string::npos)
      << r.output.substr(0, 4000);
  EXPECT_NE(r.output.find("completions.jsonl:6: invalid JSON"), std::string::npos);
  EXPECT_NE(r.output.find("completions.jsonl:9: record has no completion field"),
            std::string::npos);
  EXPECT_NE(r.output.find("dump.jsonl:9: invalid JSON"), std::string::npos);

  // Verdicts: one per graded sample, keyed by id (and sample).
  std::map<std::string, std::vector<std::string>> verdicts;
  for (const json& item : read_jsonl(dir.file("out/items.jsonl")))
    verdicts[item["id"].get<std::string>()].push_back(item["verdict"].get<std::string>());
  EXPECT_EQ(verdicts["0"], (std::vector<std::string>{"correct"}));
  EXPECT_EQ(verdicts["1"], (std::vector<std::string>{"wrong_objective"}));
  EXPECT_EQ(verdicts["2"], (std::vector<std::string>{"correct"}));  // repaired surrogate
  EXPECT_EQ(verdicts["3"], (std::vector<std::string>{"no_code"}));  // its line was truncated
  EXPECT_EQ(verdicts["4"], (std::vector<std::string>{"correct"}));  // repaired UTF-8
  EXPECT_EQ(verdicts["5"], (std::vector<std::string>{"correct"}));  // the 50 MiB line
  EXPECT_EQ(verdicts["6"], (std::vector<std::string>{"correct", "wrong_objective"}));
  EXPECT_EQ(verdicts["7"], (std::vector<std::string>{"correct"}));
  EXPECT_EQ(verdicts.count("8"), 0u);  // the truncated benchmark line is no item
  EXPECT_EQ(verdicts.size(), 8u);

  const json report = json::parse(read_file(dir.file("out/report.json")));
  const json& c = report["input"]["completions"];
  EXPECT_EQ(c["lines"], 10);  // non-blank lines
  EXPECT_EQ(c["records"], 7);
  EXPECT_EQ(c["skipped"], 3);
  EXPECT_EQ(c["repaired"], 2);
  EXPECT_EQ(c["replacements"], 4);  // 1 surrogate + 3 ill-formed UTF-8 sequences
  ASSERT_EQ(c["skipped_lines"].size(), 3u);
  EXPECT_EQ(c["skipped_lines"][0]["line"], 4);
  EXPECT_EQ(c["skipped_lines"][1]["line"], 6);
  EXPECT_EQ(c["skipped_lines"][2]["line"], 9);
  const json& b = report["input"]["benchmarks"][0];
  EXPECT_EQ(b["records"], 8);
  EXPECT_EQ(b["skipped"], 1);
  EXPECT_EQ(b["skipped_lines"][0]["line"], 9);
  EXPECT_EQ(report["skipped_lines"], 4);
  EXPECT_EQ(report["input"]["repaired_records"], 2);
  EXPECT_EQ(report["input"]["strict"], false);
  EXPECT_EQ(report["join"]["records"], 7);
  EXPECT_EQ(report["join"]["samples"], 8);
  EXPECT_EQ(report["benchmarks"]["dump"]["samples"], 8);
  EXPECT_EQ(report["benchmarks"]["dump"]["errors"]["correct"], 6);
  EXPECT_EQ(report["benchmarks"]["dump"]["missing"], 1);
  const std::string md = read_file(dir.file("out/report.md"));
  EXPECT_NE(md.find("## Input"), std::string::npos);
  EXPECT_NE(md.find("4 lines skipped, 2 records repaired"), std::string::npos) << md;

  // --strict: the first bad line of the first file read (the benchmark's line 9) stops the run.
  const test::CliRun s = test::run_trex(eval_args(d, dir.file("strict")) + " --strict");
  EXPECT_EQ(s.exit_code, 1) << s.output.substr(0, 4000);
  EXPECT_NE(s.output.find("dump.jsonl:9: invalid JSON"), std::string::npos)
      << s.output.substr(0, 4000);
  EXPECT_FALSE(std::filesystem::exists(dir.file("strict/report.json")));
}

TEST(EvalRealDump, StrictStopsAtTheFirstBadCompletionLine) {
  test::TempDir dir;
  const Dump d = write_dump(dir);
  // A clean benchmark, so that the completions file is the one that fails.
  std::string bench = read_file(d.bench);
  bench = bench.substr(0, bench.rfind("{\"id\": 8"));
  write_file_atomic(d.bench, bench);

  EvalOptions o;
  o.bench_paths = {d.bench};
  o.completions_path = d.completions;
  o.out_dir = dir.file("out");
  o.jobs = 2;
  o.timeout = 20;
  o.memory_mb = 1024;
  o.progress = false;
  o.strict = true;
  try {
    run_eval(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.line_number(), 4);  // lines 1-3 (one repaired) were accepted
    EXPECT_NE(std::string(e.what()).find("completions.jsonl:4: invalid JSON"), std::string::npos)
        << e.what();
  }

  const test::CliRun s = test::run_trex(eval_args(d, dir.file("strict")) + " --strict");
  EXPECT_EQ(s.exit_code, 1) << s.output.substr(0, 4000);
  EXPECT_NE(s.output.find("completions.jsonl:4: invalid JSON"), std::string::npos)
      << s.output.substr(0, 4000);
}

TEST(EvalRealDump, CleanAndRepairedOnlyFilesExitZero) {
  test::TempDir dir;
  write_file_atomic(dir.file("b.jsonl"), json{{"id", 0}, {"answer", 10.0}}.dump() + "\n" +
                                             json{{"id", 1}, {"answer", 11.0}}.dump() + "\n");
  // A repaired line is graded, not skipped: the exit status stays 0.
  write_file_atomic(dir.file("c.jsonl"),
                    line_with({{"id", 0}, {"completion", model_with_objective(10)}}) + "\n" +
                        line_with({{"id", 1}, {"completion", "x @S@\n" + model_with_objective(11)}},
                                  "@S@", "\\ud800") +
                        "\n");
  const test::CliRun r = test::run_trex("or eval --jobs 2 --timeout 20 --memory-mb 1024 --bench " +
                                        dir.file("b.jsonl") + " --completions " +
                                        dir.file("c.jsonl") + " --out " + dir.file("out"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("input: 0 lines skipped, 1 records repaired"), std::string::npos)
      << r.output;
  const json report = json::parse(read_file(dir.file("out/report.json")));
  EXPECT_EQ(report["skipped_lines"], 0);
  EXPECT_EQ(report["input"]["completions"]["repaired"], 1);
  EXPECT_EQ(report["benchmarks"]["b"]["errors"]["correct"], 2);
}

}  // namespace
}  // namespace trex::orlib::eval
