// The `trex` binary as a user runs it: help everywhere, clear errors for bad
// input, exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>

#include "cli_run.hpp"
#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/jsonl.hpp"

namespace trex {
namespace {

using test::run_trex;
using RunResult = test::CliRun;

TEST(Cli, HelpForEveryCommand) {
  for (const char* args : {"--help", "or --help", "or synth --help", "or solve --help",
                           "or families --help", "demo --help"}) {
    RunResult r = run_trex(args);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << args;
  }
  EXPECT_NE(run_trex("--version").output.find("trex "), std::string::npos);
}

TEST(Cli, SolveReportsBothSolvers) {
  test::TempDir dir;
  write_file_atomic(dir.file("ok.mod"),
                    "var x >= 0;\nmaximize z: x;\ns.t. c: 2 * x <= 7;\nsolve;\nend;\n");
  RunResult r = run_trex("or solve " + dir.file("ok.mod"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("GLPK: optimal, objective 3.5"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CBC : optimal, objective 3.5"), std::string::npos) << r.output;

  write_file_atomic(dir.file("ok.lp"),
                    "Minimize\n cost: 2 x + 3 y\nSubject To\n need: x + y >= 4\nEnd\n");
  r = run_trex("or solve " + dir.file("ok.lp"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("objective 8"), std::string::npos) << r.output;

  write_file_atomic(dir.file("inf.mod"), "var x >= 0;\nminimize z: x;\ns.t. c: x <= -1;\nend;\n");
  r = run_trex("or solve " + dir.file("inf.mod"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("GLPK: infeasible"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CBC : infeasible"), std::string::npos) << r.output;
}

TEST(Cli, MalformedModelsGiveAClearErrorNotACrash) {
  test::TempDir dir;
  write_file_atomic(dir.file("bad.mod"), "var x >= 0;\nminimize z: x\ns.t. c: x >= 1;\nend;\n");
  RunResult r = run_trex("or solve " + dir.file("bad.mod"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("bad.mod:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("trex: error:"), std::string::npos) << r.output;

  write_file_atomic(dir.file("bad.lp"),
                    "Maximize\n obj: x + y\nSubject To\n c1: x <= y + 1\nEnd\n");
  r = run_trex("or solve " + dir.file("bad.lp"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("bad.lp:4"), std::string::npos) << r.output;

  const char binary[] =
      "\x7f"
      "ELF\x01\x02\x00\xff\xfe garbage";
  write_file_atomic(dir.file("binary.mod"), std::string(binary, sizeof binary - 1));
  r = run_trex("or solve " + dir.file("binary.mod"));
  EXPECT_EQ(r.exit_code, 1) << r.output;

  r = run_trex("or solve " + dir.file("missing.mod"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("missing.mod"), std::string::npos) << r.output;
}

TEST(Cli, SynthValidatesArgumentsAndWritesSummary) {
  test::TempDir dir;
  RunResult r = run_trex("or synth --n 5 --out " + dir.file("x.jsonl") + " --shard 3/2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--shard"), std::string::npos) << r.output;
  r = run_trex("or synth --n 5 --out " + dir.file("x.jsonl") + " --families nope");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("unknown problem family 'nope'"), std::string::npos) << r.output;

  r = run_trex("or synth --n 6 --families knapsack --seed 3 --reproducible --quiet --out " +
               dir.file("k.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto records = read_jsonl(dir.file("k.jsonl"));
  EXPECT_EQ(records.size(), 6u);
  json summary = json::parse(read_file(dir.file("k.summary.json")));
  EXPECT_EQ(summary["written"], 6);
  EXPECT_EQ(summary["families"]["knapsack"]["accepted"], 6);
}

}  // namespace
}  // namespace trex
