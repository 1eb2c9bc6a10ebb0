// Code extraction from completions: fences, tags, sniffing, unfenced code.
#include <gtest/gtest.h>

#include "trex/core/error.hpp"

#include "trex/or/eval/extract.hpp"

namespace trex::orlib::eval {
namespace {

const char* kModel = "var x >= 0;\nmaximize z: x;\ns.t. c: x <= 4;\nend;\n";

TEST(EvalExtract, TaggedFencesByKind) {
  struct Case {
    std::string tag;
    CodeKind kind;
  };
  for (const Case& c : {Case{"python", CodeKind::python}, Case{"py", CodeKind::python},
                        Case{"mathprog", CodeKind::mathprog}, Case{"gmpl", CodeKind::mathprog},
                        Case{"ampl", CodeKind::mathprog}, Case{"lp", CodeKind::lp},
                        Case{"Python", CodeKind::python}, Case{"{.lp}", CodeKind::lp}}) {
    Extraction ex = extract_code("Model:\n```" + c.tag + "\nsome code\n```\nDone.", CodeKind::none);
    EXPECT_EQ(ex.kind, c.kind) << c.tag;
    EXPECT_EQ(ex.code, "some code\n") << c.tag;
    EXPECT_EQ(ex.blocks, 1);
  }
}

TEST(EvalExtract, UntaggedBlocksAreSniffed) {
  Extraction mp = extract_code(std::string("```\n") + kModel + "```\n");
  EXPECT_EQ(mp.kind, CodeKind::mathprog);
  EXPECT_EQ(mp.method, "fence:untagged+sniff");
  Extraction py = extract_code("```\nimport pulp\nm = pulp.LpProblem('a')\nprint(m)\n```");
  EXPECT_EQ(py.kind, CodeKind::python);
  Extraction lp =
      extract_code("```text\nMaximize\n obj: x + y\nSubject To\n c: x + y <= 3\nEnd\n```");
  EXPECT_EQ(lp.kind, CodeKind::lp);
  EXPECT_EQ(sniff_code("The answer is 42."), CodeKind::none);
}

TEST(EvalExtract, LastExecutableBlockWins) {
  std::string text =
      "First attempt:\n```python\nprint(1)\n```\nBetter:\n```python\nprint(2)\n```\n"
      "Output:\n```\nOptimal objective: 2\n```\n";
  Extraction ex = extract_code(text);
  EXPECT_EQ(ex.kind, CodeKind::python);
  EXPECT_EQ(ex.code, "print(2)\n");  // the trailing output block is not executable
  EXPECT_EQ(ex.blocks, 3);
  EXPECT_NE(ex.detail.find("2 executable blocks"), std::string::npos) << ex.detail;
}

TEST(EvalExtract, HintPrefersTheRequestedFormat) {
  std::string text = std::string("```mathprog\n") + kModel + "```\nRun it with:\n```python\n" +
                     "import subprocess\nsubprocess.run(['glpsol', '-m', 'model.mod'])\n```\n";
  EXPECT_EQ(extract_code(text, CodeKind::none).kind, CodeKind::python);
  Extraction hinted = extract_code(text, CodeKind::mathprog);
  EXPECT_EQ(hinted.kind, CodeKind::mathprog);
  EXPECT_EQ(hinted.code, kModel);
}

TEST(EvalExtract, ProseAroundCodeAndIndentedOrTildeFences) {
  std::string text =
      "Let x be the number of chairs.\n\n  ```python\n  x = 3\n  print(x)\n  ```\n\n"
      "This prints 3.";
  Extraction ex = extract_code(text);
  EXPECT_EQ(ex.kind, CodeKind::python);
  EXPECT_EQ(ex.code, "x = 3\nprint(x)\n");
  Extraction tilde = extract_code("~~~~lp\nMinimize\n obj: x\nSubject To\n c: x >= 1\nEnd\n~~~~\n");
  EXPECT_EQ(tilde.kind, CodeKind::lp);
  EXPECT_EQ(tilde.code, "Minimize\n obj: x\nSubject To\n c: x >= 1\nEnd\n");
}

TEST(EvalExtract, UnclosedFenceRunsToTheEnd) {
  Extraction ex = extract_code("Here:\n```python\nprint('objective: 5')\n");
  EXPECT_EQ(ex.kind, CodeKind::python);
  EXPECT_EQ(ex.code, "print('objective: 5')\n");
  EXPECT_EQ(ex.method, "fence:python+unclosed");
}

TEST(EvalExtract, SirlStyleTags) {
  std::string text =
      "<think>model it</think><model>max 3x</model>\n<python>\nprint('objective: 3')\n"
      "</python>";
  Extraction ex = extract_code(text);
  EXPECT_EQ(ex.kind, CodeKind::python);
  EXPECT_EQ(ex.method, "tag:<python>");
  EXPECT_EQ(ex.code, "\nprint('objective: 3')\n");
  // A fence inside the tag is taken as the fence.
  Extraction inner = extract_code("<python>\n```python\nprint(1)\n```\n</python>");
  EXPECT_EQ(inner.method, "fence:python");
  EXPECT_EQ(inner.code, "print(1)\n");
}

TEST(EvalExtract, MissingFences) {
  Extraction py = extract_code(
      "We use PuLP.\nimport pulp\nprob = pulp.LpProblem('p', pulp.LpMaximize)\nx = "
      "pulp.LpVariable('x', 0, 4)\nprob += x\nprob.solve()\nprint('Objective:', x.value())\n\n"
      "The result is the optimum.");
  EXPECT_EQ(py.kind, CodeKind::python);
  EXPECT_EQ(py.method, "unfenced");
  EXPECT_EQ(py.code.find("import pulp"), 0u);
  EXPECT_EQ(py.code.find("The result"), std::string::npos) << py.code;

  Extraction mp = extract_code(std::string("The model:\n\n") + kModel + "\nIt is small.");
  EXPECT_EQ(mp.kind, CodeKind::mathprog);
  EXPECT_EQ(mp.code, kModel);

  Extraction lp = extract_code("Maximize\n obj: 2 x\nSubject To\n c1: x <= 3\nEnd\nThat is all.");
  EXPECT_EQ(lp.kind, CodeKind::lp);
  EXPECT_EQ(lp.code, "Maximize\n obj: 2 x\nSubject To\n c1: x <= 3\nEnd\n");
}

TEST(EvalExtract, FailuresAreClassified) {
  Extraction empty = extract_code("   \n ");
  EXPECT_EQ(empty.kind, CodeKind::none);
  EXPECT_EQ(empty.failure, Category::no_code);
  Extraction prose = extract_code("I think the answer is 42 units of product A.");
  EXPECT_EQ(prose.failure, Category::no_code);
  Extraction json = extract_code("```json\n{\"x\": 1}\n```\n```julia\nusing JuMP\n```");
  EXPECT_EQ(json.failure, Category::extraction_failed);
  EXPECT_NE(json.detail.find("json"), std::string::npos);
  Extraction empty_block = extract_code("```python\n```\n");
  EXPECT_EQ(empty_block.failure, Category::extraction_failed);
}

TEST(EvalExtract, AmplCommandsAreDropped) {
  std::string ampl =
      "option solver cplex;\nreset;\nmodel prod.mod;\ndata prod.dat;\nvar x >= 0;\n"
      "maximize z: x;\ns.t. c: x <= 2;\nsolve;\ndisplay x;\ndata;\nend;\n";
  std::string mp = normalize_mathprog(ampl);
  EXPECT_EQ(mp.find("option"), std::string::npos);
  EXPECT_EQ(mp.find("reset"), std::string::npos);
  EXPECT_EQ(mp.find("prod.mod"), std::string::npos);
  EXPECT_EQ(mp.find("prod.dat"), std::string::npos);
  EXPECT_NE(mp.find("display x;"), std::string::npos);
  EXPECT_NE(mp.find("data;"), std::string::npos);
  Extraction ex = extract_code("```ampl\n" + ampl + "```");
  EXPECT_EQ(ex.kind, CodeKind::mathprog);
  EXPECT_EQ(ex.code, mp);
}

TEST(EvalExtract, FormatNames) {
  EXPECT_EQ(parse_code_kind("gmpl"), CodeKind::mathprog);
  EXPECT_EQ(parse_code_kind("auto"), CodeKind::none);
  EXPECT_THROW(parse_code_kind("julia"), Error);
  bool other = false;
  EXPECT_EQ(kind_for_tag("bash", other), CodeKind::none);
  EXPECT_TRUE(other);
  EXPECT_EQ(kind_for_tag("", other), CodeKind::none);
  EXPECT_FALSE(other);
}

}  // namespace
}  // namespace trex::orlib::eval
