#include <gtest/gtest.h>

#include <cmath>

#include "cli_run.hpp"
#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/or/solver/linear_model.hpp"

namespace trex::orlib {
namespace {

const char* kProductionLp = R"(
var x >= 0;
var y >= 0;
maximize profit: 3 * x + 2 * y;
s.t. wood: x + y <= 4;
s.t. labour: x + 3 * y <= 6;
s.t. xcap: x <= 3;
solve;
printf "Optimal objective: %g\n", profit;
end;
)";

TEST(Solver, LpOptimalBothSolversAgree) {
  LinearModel m = LinearModel::from_mathprog(kProductionLp);
  EXPECT_EQ(m.num_rows(), 4);  // MathProg keeps the objective as a free row
  EXPECT_EQ(m.num_cols(), 2);
  EXPECT_FALSE(m.is_mip());
  EXPECT_TRUE(m.maximize());
  SolveResult g = m.solve_glpk();
  SolveResult c = m.solve_cbc();
  ASSERT_EQ(g.status, SolveStatus::optimal) << g.message;
  ASSERT_EQ(c.status, SolveStatus::optimal) << c.message;
  EXPECT_NEAR(g.objective, 11.0, 1e-9);  // x = 3, y = 1
  EXPECT_NEAR(c.objective, 11.0, 1e-9);
  EXPECT_NEAR(g.x[0], 3.0, 1e-9);
  EXPECT_NEAR(c.x[1], 1.0, 1e-9);
  EXPECT_NE(g.output.find("Optimal objective: 11"), std::string::npos) << g.output;
  EXPECT_EQ(m.column_names(), (std::vector<std::string>{"x", "y"}));
}

TEST(Solver, MipOptimalWithObjectiveConstant) {
  LinearModel m = LinearModel::from_mathprog(R"(
var x integer >= 0, <= 10;
var y binary;
minimize cost: 10 + 2.5 * x + 4 * y;
s.t. need: x + 3 * y >= 4.5;
end;
)");
  ASSERT_TRUE(m.is_mip());
  EXPECT_EQ(m.num_binary(), 1);
  EXPECT_DOUBLE_EQ(m.objective_constant(), 10.0);
  SolveResult g = m.solve_glpk(), c = m.solve_cbc();
  ASSERT_EQ(g.status, SolveStatus::optimal);
  ASSERT_EQ(c.status, SolveStatus::optimal);
  // x = 2, y = 1: 10 + 5 + 4 = 19 beats x = 5, y = 0: 22.5.
  EXPECT_NEAR(g.objective, 19.0, 1e-9);
  EXPECT_NEAR(c.objective, 19.0, 1e-9);
}

TEST(Solver, InfeasibleLpAndMip) {
  for (const char* type : {"", " integer"}) {
    std::string text = std::string("var x >= 0") + type +
                       ";\nminimize z: x;\ns.t. a: x >= 5;\ns.t. b: x <= 3;\nend;\n";
    LinearModel m = LinearModel::from_mathprog(text);
    EXPECT_EQ(m.solve_glpk().status, SolveStatus::infeasible) << type;
    EXPECT_EQ(m.solve_cbc().status, SolveStatus::infeasible) << type;
  }
}

TEST(Solver, UnboundedLpAndMip) {
  for (const char* type : {"", " integer"}) {
    std::string text = std::string("var x >= 0") + type +
                       ";\nvar y >= 0;\nmaximize z: x + y;\ns.t. a: x - y <= 2;\nend;\n";
    LinearModel m = LinearModel::from_mathprog(text);
    EXPECT_EQ(m.solve_glpk().status, SolveStatus::unbounded) << type;
    EXPECT_EQ(m.solve_cbc().status, SolveStatus::unbounded) << type;
  }
}

TEST(Solver, MalformedMathProgNamesTheLine) {
  try {
    LinearModel::from_mathprog("var x >= 0;\nminimize z: x\ns.t. c: x >= 1;\nend;\n", "bad.mod");
    FAIL() << "expected ModelError";
  } catch (const ModelError& e) {
    std::string what = e.what();
    EXPECT_EQ(e.file_name(), "bad.mod");
    EXPECT_GE(e.line_number(), 2);
    EXPECT_NE(what.find("bad.mod:"), std::string::npos) << what;
    EXPECT_EQ(what.find("/tmp/trex-model"), std::string::npos) << "temp path leaked: " << what;
  }
}

// GLPK 5.0's translator asserts (abort()) on this fuzzer-found model; checked in
// a child, it is a ModelError naming the model, and the process goes on.
TEST(Solver, TranslatorCrashInChildIsAModelError) {
  const std::string path =
      trex::test::source_dir() + "/fuzz/known_crashes/mathprog/glpk-translator-abort";
  const std::string text = trex::read_file(path);
  try {
    LinearModel::from_mathprog(text, "crash.mod", LinearModel::Translator::checked_in_child);
    FAIL() << "expected ModelError";
  } catch (const ModelError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.file_name(), "crash.mod");
    EXPECT_NE(what.find("translator (GLPK) crashed"), std::string::npos) << what;
    EXPECT_NE(what.find("Aborted"), std::string::npos) << what;
  }
  // The same file through `trex or solve`: an error exit with the message, no abort.
  const trex::test::CliRun run = trex::test::run_trex("or solve " + path);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("crashed on this model"), std::string::npos) << run.output;
  // A model that merely has an error still gets the in-process, located message.
  try {
    LinearModel::from_mathprog("var x >= 0;\nminimize z: x\ns.t. c: x >= 1;\nend;\n", "bad.mod",
                               LinearModel::Translator::checked_in_child);
    FAIL() << "expected ModelError";
  } catch (const ModelError& e) {
    EXPECT_GE(e.line_number(), 2);
  }
  // And a good one translates as before.
  LinearModel ok =
      LinearModel::from_mathprog("var x >= 0;\nminimize z: x;\ns.t. c: x >= 1;\nend;\n", "ok.mod",
                                 LinearModel::Translator::checked_in_child);
  EXPECT_EQ(ok.num_cols(), 1);
}

TEST(Solver, NonLinearMathProgIsRejectedWithReason) {
  try {
    LinearModel::from_mathprog("var x >= 0;\nvar y >= 0;\nminimize z: x * y;\nend;\n", "nl.mod");
    FAIL() << "expected ModelError";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("multiplication of linear forms"), std::string::npos)
        << e.what();
    EXPECT_EQ(e.line_number(), 3);
  }
}

TEST(Solver, MissingDataIsAGenerationError) {
  EXPECT_THROW(LinearModel::from_mathprog(
                   "param n;\nvar x{1..n} >= 0;\nminimize z: sum{i in 1..n} x[i];\nend;\n"),
               ModelError);
}

TEST(Solver, CplexLpReadAndRoundTrip) {
  LinearModel m = LinearModel::from_lp(R"(\ a small LP
Maximize
 obj: 3 x + 2 y
Subject To
 wood: x + y <= 4
 labour: x + 3 y <= 6
Bounds
 x <= 3
End
)");
  SolveResult g = m.solve_glpk();
  ASSERT_EQ(g.status, SolveStatus::optimal);
  EXPECT_NEAR(g.objective, 11.0, 1e-9);
  LinearModel again = LinearModel::from_lp(m.to_cplex_lp());
  EXPECT_NEAR(again.solve_cbc().objective, 11.0, 1e-9);

  LinearModel from_mod = LinearModel::from_mathprog(kProductionLp);
  std::string lp = from_mod.to_cplex_lp();
  EXPECT_NE(lp.find("Maximize"), std::string::npos);
  EXPECT_NE(lp.find("Subject To"), std::string::npos);
  EXPECT_NEAR(LinearModel::from_lp(lp).solve_glpk().objective, 11.0, 1e-9);
}

TEST(Solver, MalformedLpNamesTheLine) {
  // A variable on the right-hand side is not CPLEX LP (CBC's reader silently mis-parses it).
  try {
    LinearModel::from_lp("Maximize\n obj: x + y\nSubject To\n c1: x <= y + 1\nEnd\n", "rhs.lp");
    FAIL() << "expected ModelError";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.line_number(), 4) << e.what();
    EXPECT_NE(std::string(e.what()).find("rhs.lp:4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(LinearModel::from_lp("this is not an LP file\n"), ModelError);
  EXPECT_THROW(LinearModel::from_lp_file("/nonexistent/model.lp"), ModelError);
  EXPECT_THROW(LinearModel::from_mathprog_file("/nonexistent/model.mod"), ModelError);
}

TEST(Solver, TimeLimitIsReported) {
  // GLPK's own tiling example needs far more than a second of branch-and-cut.
  const std::string path = "/usr/share/doc/glpk-utils/examples/tiling.mod";
  LinearModel m = LinearModel::from_mathprog_file(path);
  SolveOptions fast;
  fast.time_limit_seconds = 0.3;
  SolveResult g = m.solve_glpk(fast);
  EXPECT_EQ(g.status, SolveStatus::time_limit) << g.message;
  EXPECT_LT(g.seconds, 5.0);
  SolveResult c = m.solve_cbc(fast);
  EXPECT_EQ(c.status, SolveStatus::time_limit) << c.message;
  EXPECT_LT(c.seconds, 5.0);
}

}  // namespace
}  // namespace trex::orlib
