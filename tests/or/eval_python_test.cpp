// Python completions: PuLP models read through the probe (correct, wrong,
// infeasible, crashing), printed output, missing modules, interpreter errors.
#include <gtest/gtest.h>

#include <unistd.h>
#include "trex/core/error.hpp"

#include <cstdlib>
#include <map>

#include "test_paths.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/or/eval/eval.hpp"

namespace trex::orlib::eval {
namespace {

using nlohmann::json;

// PuLP comes from Debian's python3-pulp (scripts/install-deps.sh), so tests
// that need it use /usr/bin/python3.
const char* kDebianPython = "/usr/bin/python3";

bool debian_pulp_available() {
  return access(kDebianPython, X_OK) == 0 &&
         std::system("/usr/bin/python3 -c 'import pulp' >/dev/null 2>&1") == 0;
}

std::string python_for_tests() {
  return access(kDebianPython, X_OK) == 0 ? kDebianPython : "python3";
}

std::string fence(const std::string& code) {
  return "Solution:\n```python\n" + code + "```\n";
}

const char* kMix =
    "import pulp\n"
    "model = pulp.LpProblem('mix', pulp.LpMaximize)\n"
    "x = pulp.LpVariable('x', lowBound=0)\n"
    "y = pulp.LpVariable('y', lowBound=0)\n"
    "model += 3 * x + 2 * y\n"
    "model += x + y <= 4\n"
    "model += x + 3 * y <= 6\n"
    "model += x <= 3\n";

struct PyCase {
  std::string id;
  json answer;  // null: no solution
  std::string code;
  std::string verdict;
};

std::map<std::string, json> run_cases(const std::vector<PyCase>& cases, const std::string& python,
                                      double timeout, json* report_out = nullptr) {
  test::TempDir dir;
  {
    JsonlWriter b(dir.file("py.jsonl")), c(dir.file("c.jsonl"));
    for (const auto& pc : cases) {
      json rec = {{"id", pc.id}, {"answer", pc.answer}};
      rec["answer_status"] = pc.answer.is_null() ? "infeasible_or_unbounded" : "optimal";
      b.write(rec);
      c.write({{"id", pc.id}, {"completion", fence(pc.code)}});
    }
    b.commit();
    c.commit();
  }
  EvalOptions o;
  o.bench_paths = {dir.file("py.jsonl")};
  o.completions_path = dir.file("c.jsonl");
  o.out_dir = dir.file("out");
  o.jobs = 2;
  o.timeout = timeout;
  o.python = python;
  o.progress = false;
  o.memory_mb = 1024;
  json report = run_eval(o);
  if (report_out) *report_out = report;
  std::map<std::string, json> items;
  for (const auto& r : read_jsonl(dir.file("out/items.jsonl"))) items[r["id"]] = r;
  return items;
}

TEST(EvalPython, PulpCorrectWrongInfeasibleAndCrashing) {
  if (!debian_pulp_available())
    GTEST_SKIP() << "/usr/bin/python3 has no pulp (apt install python3-pulp)";
  std::vector<PyCase> cases = {
      {"correct", 11.0, std::string(kMix) + "model.solve()\n", "correct"},
      {"wrong", 12.0,
       std::string(kMix) +
           "model.solve()\nprint('Optimal objective:', pulp.value(model.objective))\n",
       "wrong_objective"},
      {"infeasible", 5.0,
       "import pulp\nm = pulp.LpProblem('p', pulp.LpMinimize)\nx = pulp.LpVariable('x', "
       "lowBound=0)\n"
       "m += x\nm += x <= -1\nm.solve()\nprint('Status:', pulp.LpStatus[m.status])\n",
       "infeasible"},
      {"infeasible_truth", nullptr,
       "import pulp\nm = pulp.LpProblem('p', pulp.LpMinimize)\nx = pulp.LpVariable('x', "
       "lowBound=0)\n"
       "m += x\nm += x <= -1\nm.solve()\n",
       "correct"},
      {"crash", 11.0, std::string(kMix) + "model.solve()\nprint(x.varValue / 0)\n",
       "runtime_error"},
      {"in_function", 11.0,
       "import pulp\n\ndef build():\n    m = pulp.LpProblem('mix', pulp.LpMaximize)\n"
       "    x = pulp.LpVariable('x', lowBound=0)\n    y = pulp.LpVariable('y', lowBound=0)\n"
       "    m += 3 * x + 2 * y\n    m += x + y <= 4\n    m += x + 3 * y <= 6\n    m += x <= 3\n"
       "    m.solve()\n\nbuild()\n",
       "correct"},
      // The probe reads the model, not a misleading print.
      {"misleading_print", 11.0, std::string(kMix) + "model.solve()\nprint('Objective: 999')\n",
       "correct"},
      {"integer", 9.0,
       "import pulp\nm = pulp.LpProblem('k', pulp.LpMaximize)\n"
       "a, b, c = (pulp.LpVariable('pick_' + n, cat='Binary') for n in 'abc')\n"
       "m += 5 * a + 4 * b + 3 * c\nm += 2 * a + 3 * b + c <= 5\nm.solve()\n",
       "correct"},
  };
  json report;
  auto items = run_cases(cases, kDebianPython, 20.0, &report);
  ASSERT_EQ(items.size(), cases.size());
  for (const auto& c : cases)
    EXPECT_EQ(items[c.id]["verdict"], c.verdict) << c.id << ": " << items[c.id]["detail"] << "\n"
                                                 << items[c.id]["stderr"];
  EXPECT_EQ(items["correct"]["objective_source"].get<std::string>().rfind("probe:pulp", 0), 0u)
      << items["correct"]["objective_source"];
  EXPECT_DOUBLE_EQ(items["misleading_print"]["objective"].get<double>(), 11.0);
  EXPECT_EQ(items["in_function"]["objective_source"], "probe:pulp(solved)");
  EXPECT_EQ(items["crash"]["detail"], "ZeroDivisionError: float division by zero");
  EXPECT_NE(items["crash"]["stderr"].get<std::string>().find("Traceback"), std::string::npos);
  EXPECT_EQ(report["python"]["modules"]["pulp"], true);
}

TEST(EvalPython, PrintedResultsErrorsAndMissingModules) {
  std::vector<PyCase> cases = {
      {"printed", 42.0, "a, b = 20, 22\nprint(f'The optimal objective value is {a + b:.2f}')\n",
       "correct"},
      {"no_best", nullptr, "print('No Best Solution')\n", "correct"},
      {"missing", 42.0, "import gurobipy_trex_absent as gp\nprint('objective 42')\n",
       "runtime_missing"},
      {"syntax", 42.0, "print('objective'\n", "syntax_error"},
      {"exit", 42.0, "import sys\nprint('objective: 42')\nsys.exit(2)\n", "runtime_error"},
      {"silent", 42.0, "x = 42\n", "wrong_objective"},
      {"timeout", 42.0, "import time\ntime.sleep(60)\n", "timeout"},
  };
  auto items = run_cases(cases, python_for_tests(), 2.0);
  for (const auto& c : cases)
    EXPECT_EQ(items[c.id]["verdict"], c.verdict) << c.id << ": " << items[c.id]["detail"];
  EXPECT_EQ(items["printed"]["objective_source"], "stdout:marker:objective");
  EXPECT_EQ(items["missing"]["detail"],
            "ModuleNotFoundError: No module named 'gurobipy_trex_absent'");
  EXPECT_EQ(items["exit"]["detail"], "sys.exit(2)");
}

TEST(EvalPython, UnusableInterpreterIsAClearError) {
  test::TempDir dir;
  {
    JsonlWriter b(dir.file("b.jsonl")), c(dir.file("c.jsonl"));
    b.write({{"id", 0}, {"answer", 1.0}});
    c.write({{"id", 0}, {"completion", fence("print(1)\n")}});
    b.commit();
    c.commit();
  }
  EvalOptions o;
  o.bench_paths = {dir.file("b.jsonl")};
  o.completions_path = dir.file("c.jsonl");
  o.out_dir = dir.file("out");
  o.python = "/nonexistent/python3";
  o.progress = false;
  try {
    run_eval(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field_name(), "--python");
  }
}

}  // namespace
}  // namespace trex::orlib::eval
