#include "trex/or/eval/selftest.hpp"

#include <cmath>
#include <cstdio>
#include <map>

#include "trex/core/atomic_file.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/strings.hpp"
#include "trex/or/eval/bench.hpp"
#include "trex/or/eval/eval.hpp"
#include "trex/or/eval/scratch.hpp"

namespace trex::orlib::eval {
namespace {

std::string exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// A MathProg completion whose optimum is exactly `value`.
std::string fixed_objective_model(double value) {
  return "The objective is fixed at the answer.\n\n```mathprog\nvar x;\nminimize z: x;\n"
         "s.t. fix: x = " +
         exact(value) + ";\nsolve;\nend;\n```\n";
}

const char* const kInfeasibleModel =
    "```mathprog\nvar x >= 0;\nminimize z: x;\ns.t. c: x <= -1;\nsolve;\nend;\n```\n";

struct Case {
  const char* id;
  const char* group;  // mathprog | lp | python | pulp | text
  double truth;       // NaN: the truth is "no solution"
  std::string completion;
  Category expected;
};

const double kNoSolution = std::numeric_limits<double>::quiet_NaN();

const char* const kProductMix =
    "var x >= 0;\nvar y >= 0;\nmaximize profit: 3 * x + 2 * y;\ns.t. labour: x + y <= 4;\n"
    "s.t. machine: x + 3 * y <= 6;\ns.t. cap: x <= 3;\nsolve;\nend;\n";
const char* const kProductMixLp =
    "\\ product mix\nMaximize\n profit: 3 x + 2 y\nSubject To\n labour: x + y <= 4\n"
    " machine: x + 3 y <= 6\n cap: x <= 3\nEnd\n";
const char* const kPulpModel =
    "import pulp\n"
    "model = pulp.LpProblem('mix', pulp.LpMaximize)\n"
    "x = pulp.LpVariable('x', lowBound=0)\n"
    "y = pulp.LpVariable('y', lowBound=0)\n"
    "model += 3 * x + 2 * y\n"
    "model += x + y <= 4\n"
    "model += x + 3 * y <= 6\n"
    "model += x <= 3\n"
    "model.solve()\n";

std::vector<Case> builtin_cases() {
  auto fence = [](const char* tag, const std::string& code) {
    return std::string("Here is the model.\n\n```") + tag + "\n" + code + "```\n";
  };
  std::vector<Case> c;
  // GNU MathProg
  c.push_back({"mp_correct", "mathprog", 11, fence("mathprog", kProductMix), Category::correct});
  c.push_back(
      {"mp_wrong", "mathprog", 12, fence("mathprog", kProductMix), Category::wrong_objective});
  c.push_back({"mp_infeasible", "mathprog", 5, kInfeasibleModel, Category::infeasible});
  c.push_back(
      {"mp_infeasible_truth", "mathprog", kNoSolution, kInfeasibleModel, Category::correct});
  c.push_back({"mp_unbounded", "mathprog", 5,
               fence("gmpl", "var x >= 0;\nmaximize z: x;\ns.t. c: x >= 1;\nend;\n"),
               Category::unbounded});
  c.push_back({"mp_syntax", "mathprog", 11,
               fence("mathprog", "var x >= 0\nmaximize z: x;\ns.t. c: x <= 4;\nend;\n"),
               Category::syntax_error});
  c.push_back({"mp_ampl", "mathprog", 11,
               fence("ampl", std::string("option solver cplex;\n") + kProductMix),
               Category::correct});
  c.push_back({"mp_unfenced", "mathprog", 11,
               std::string("We maximize profit.\n\n") + kProductMix + "\nThe optimum is 11.\n",
               Category::correct});
  c.push_back({"mp_integer", "mathprog", 9,
               fence("mathprog",
                     "var a binary;\nvar b binary;\nvar c binary;\nmaximize v: 5*a + 4*b + 3*c;\n"
                     "s.t. w: 2*a + 3*b + c <= 5;\nsolve;\nend;\n"),
               Category::correct});
  // CPLEX LP
  c.push_back({"lp_correct", "lp", 11, fence("lp", kProductMixLp), Category::correct});
  c.push_back({"lp_wrong", "lp", 10, fence("lp", kProductMixLp), Category::wrong_objective});
  c.push_back({"lp_syntax", "lp", 11,
               fence("lp", "Maximize\n obj: 3 x +\nSubject To\n c1: x + <= 4\nEnd\n"),
               Category::syntax_error});
  c.push_back({"lp_infeasible", "lp", 1,
               fence("lp", "Minimize\n obj: x\nSubject To\n c1: x >= 2\n c2: x <= 1\nEnd\n"),
               Category::infeasible});
  // Python without a solver library
  c.push_back({"py_print_correct", "python", 11,
               fence("python", "total = 3 * 3 + 2 * 1\nprint(f'Optimal objective: {total}')\n"),
               Category::correct});
  c.push_back({"py_print_wrong", "python", 11, fence("python", "print('Optimal objective: 10')\n"),
               Category::wrong_objective});
  c.push_back({"py_crash", "python", 11, fence("python", "x = 1 / 0\nprint('objective', x)\n"),
               Category::runtime_error});
  c.push_back({"py_syntax", "python", 11, fence("python", "def f(:\n    return 1\n"),
               Category::syntax_error});
  c.push_back({"py_missing_module", "python", 11,
               fence("python", "import trex_no_such_solver_module\nprint('objective: 11')\n"),
               Category::runtime_missing});
  c.push_back(
      {"py_timeout", "python", 11, fence("python", "while True:\n    pass\n"), Category::timeout});
  c.push_back({"py_no_best_solution", "python", kNoSolution,
               fence("python", "print('No Best Solution')\n"), Category::correct});
  c.push_back(
      {"py_no_output", "python", 11, fence("python", "x = 11\n"), Category::wrong_objective});
  // PuLP (runtime_missing is expected when the interpreter has no PuLP)
  c.push_back({"pulp_correct", "pulp", 11, fence("python", kPulpModel), Category::correct});
  c.push_back({"pulp_in_function", "pulp", 11,
               fence("python",
                     "import pulp\n\ndef main():\n    m = pulp.LpProblem('mix', pulp.LpMaximize)\n"
                     "    x = pulp.LpVariable('x', lowBound=0)\n"
                     "    y = pulp.LpVariable('y', lowBound=0)\n"
                     "    m += 3 * x + 2 * y\n    m += x + y <= 4\n    m += x + 3 * y <= 6\n"
                     "    m += x <= 3\n    m.solve()\n    print('done')\n\n"
                     "if __name__ == '__main__':\n    main()\n"),
               Category::correct});
  c.push_back({"pulp_wrong", "pulp", 12, fence("python", kPulpModel), Category::wrong_objective});
  c.push_back({"pulp_infeasible", "pulp", 5,
               fence("python",
                     "import pulp\nmodel = pulp.LpProblem('inf', pulp.LpMinimize)\n"
                     "x = pulp.LpVariable('x', lowBound=0)\nmodel += x\nmodel += x <= -1\n"
                     "model.solve()\nprint('Status:', pulp.LpStatus[model.status])\n"),
               Category::infeasible});
  c.push_back(
      {"pulp_crash", "pulp", 11,
       fence("python", std::string(kPulpModel) + "raise RuntimeError('boom after solve')\n"),
       Category::runtime_error});
  // Text only
  c.push_back({"text_no_code", "text", 11, "I am not able to write the model for this problem.",
               Category::no_code});
  c.push_back({"text_json_only", "text", 11, "```json\n{\"x\": 3, \"y\": 1}\n```\n",
               Category::extraction_failed});
  return c;
}

struct Check {
  int64_t checks = 0;
  int64_t failures = 0;
  std::vector<std::string> lines;
  void expect(bool ok, const std::string& what) {
    ++checks;
    if (!ok) {
      ++failures;
      if (lines.size() < 200) lines.push_back(what);
    }
  }
};

EvalOptions eval_options(const SelfTestOptions& o, const std::string& bench,
                         const std::string& completions, const std::string& out) {
  EvalOptions e;
  e.bench_paths = {bench};
  e.completions_path = completions;
  e.out_dir = out;
  e.jobs = o.jobs;
  e.timeout = o.timeout;
  e.python = o.python;
  e.sandbox_uid = o.sandbox_uid;
  e.progress = o.progress;
  e.temp_root = o.temp_root;
  e.memory_mb = 2048;
  return e;
}

// Part 1: ground truths against themselves.
nlohmann::json truth_sanity(const SelfTestOptions& o, const ScratchDir& dir, Check& check) {
  nlohmann::json out = nlohmann::json::object();
  for (const Benchmark& b : load_benchmarks(o.bench_paths)) {
    int64_t optimal = 0, no_solution = 0, unknown = 0;
    const int64_t failures_before = check.failures;
    std::string completions = dir.file("truth_" + b.name + ".completions.jsonl");
    {
      JsonlWriter w(completions);
      for (const BenchItem& item : b.items) {
        const GroundTruth& t = item.truth;
        if (t.kind == TruthKind::unknown) {
          ++unknown;
          continue;
        }
        if (t.kind == TruthKind::optimal) {
          ++optimal;
          const double wrong = t.value + 1.0 + 0.5 * std::fabs(t.value);
          for (Rule r : all_rules()) {
            check.expect(
                objective_matches(r, t.value, t.value),
                b.name + "/" + item.id + ": " + to_string(r) + " rejects the truth itself");
            check.expect(!objective_matches(r, wrong, t.value),
                         b.name + "/" + item.id + ": " + to_string(r) + " accepts " + exact(wrong));
            check.expect(grade(r, t, Reported::infeasible, 0) == Category::infeasible,
                         b.name + "/" + item.id + ": infeasible report not graded infeasible");
          }
        } else {
          ++no_solution;
          for (Rule r : all_rules()) {
            check.expect(grade(r, t, Reported::infeasible, 0) == Category::correct,
                         b.name + "/" + item.id + ": infeasible report not correct");
            check.expect(grade(r, t, Reported::optimal, 1.0) == Category::wrong_objective,
                         b.name + "/" + item.id + ": objective accepted for a no-solution item");
          }
        }
        w.write({{"id", item.id},
                 {"source", b.name},
                 {"completion", t.kind == TruthKind::optimal ? fixed_objective_model(t.value)
                                                             : std::string(kInfeasibleModel)}});
      }
      w.commit();
    }
    // End to end: the sandboxed solver returns the truth, graded by every rule.
    std::string run_dir = dir.file("truth_" + b.name);
    run_eval(eval_options(o, b.path, completions, run_dir));
    int64_t graded = 0;
    read_jsonl(run_dir + "/items.jsonl", [&](const nlohmann::json& r, long) {
      if (r.value("verdict", "") == "excluded_unknown_truth") return;
      ++graded;
      const std::string where = b.name + "/" + r.value("id", "") + " end to end";
      GroundTruth t;
      t.kind = r["truth"]["kind"] == "optimal" ? TruthKind::optimal : TruthKind::no_solution;
      if (r["truth"]["value"].is_number()) t.value = r["truth"]["value"].get<double>();
      const std::string status = r.value("status", "none");
      Reported rep = status == "optimal"      ? Reported::optimal
                     : status == "infeasible" ? Reported::infeasible
                     : status == "unbounded"  ? Reported::unbounded
                                              : Reported::none;
      double obj = r["objective"].is_number() ? r["objective"].get<double>() : NAN;
      for (Rule rule : all_rules())
        check.expect(grade(rule, t, rep, obj) == Category::correct,
                     where + ": " + to_string(rule) + " verdict " +
                         to_string(grade(rule, t, rep, obj)) + " (" + r.value("detail", "") + ")");
    });
    check.expect(graded == optimal + no_solution, b.name + ": graded " + std::to_string(graded) +
                                                      " of " +
                                                      std::to_string(optimal + no_solution));
    out[b.name] = {{"optimal", optimal},
                   {"no_solution", no_solution},
                   {"unknown_excluded", unknown},
                   {"end_to_end_graded", graded},
                   {"failures", check.failures - failures_before}};
  }
  return out;
}

// Part 2: built-in cases, run as two evaluations (solver formats; Python).
nlohmann::json builtin_run(const SelfTestOptions& o, const ScratchDir& dir, Check& check) {
  std::vector<Case> cases = builtin_cases();
  nlohmann::json results = nlohmann::json::array();
  for (const char* part : {"models", "python"}) {
    const bool python = std::string(part) == "python";
    std::string bench = dir.file(std::string("builtin_") + part + ".jsonl");
    std::string comps = dir.file(std::string("builtin_") + part + ".completions.jsonl");
    {
      JsonlWriter bw(bench), cw(comps);
      for (const Case& c : cases) {
        const bool is_python = std::string(c.group) == "python" || std::string(c.group) == "pulp";
        if (is_python != python) continue;
        nlohmann::json rec = {{"id", c.id},
                              {"question", std::string("built-in case ") + c.id},
                              {"problem_type", c.group}};
        if (std::isnan(c.truth)) {
          rec["answer"] = nullptr;
          rec["answer_status"] = "infeasible_or_unbounded";
        } else {
          rec["answer"] = c.truth;
          rec["answer_status"] = "optimal";
        }
        bw.write(rec);
        cw.write({{"id", c.id}, {"completion", c.completion}});
      }
      bw.commit();
      cw.commit();
    }
    std::map<std::string, nlohmann::json> got;
    nlohmann::json report;
    try {
      report = run_eval(eval_options(o, bench, comps, dir.file(std::string("builtin_") + part)));
      read_jsonl(dir.file(std::string("builtin_") + part + "/items.jsonl"),
                 [&](const nlohmann::json& r, long) { got[r.value("id", "")] = r; });
    } catch (const std::exception& e) {
      check.expect(false, std::string(part) + " cases could not run: " + e.what());
      continue;
    }
    const bool pulp =
        report["python"].is_object() && report["python"]["modules"].value("pulp", false);
    for (const Case& c : cases) {
      auto it = got.find(c.id);
      if (it == got.end()) continue;
      Category expected = c.expected;
      std::string note;
      if (std::string(c.group) == "pulp" && !pulp) {
        expected = Category::runtime_missing;
        note = "PuLP not installed for this interpreter";
      }
      const std::string verdict = it->second.value("verdict", "");
      check.expect(verdict == to_string(expected), std::string("built-in ") + c.id + ": expected " +
                                                       to_string(expected) + ", got " + verdict +
                                                       " (" + it->second.value("detail", "") + ")");
      results.push_back({{"id", c.id},
                         {"group", c.group},
                         {"expected", to_string(expected)},
                         {"verdict", verdict},
                         {"ok", verdict == to_string(expected)},
                         {"objective", it->second["objective"]},
                         {"note", note}});
    }
  }
  return results;
}

}  // namespace

SelfTestResult run_self_test(const SelfTestOptions& o) {
  ScratchDir dir(o.out_dir, o.temp_root);
  Check check;
  SelfTestResult result;
  nlohmann::json truth = nlohmann::json::object();
  if (!o.bench_paths.empty()) truth = truth_sanity(o, dir, check);
  const int64_t truth_checks = check.checks, truth_failures = check.failures;
  nlohmann::json builtin = builtin_run(o, dir, check);
  result.checks = check.checks;
  result.failures = check.failures;
  result.failure_lines = check.lines;
  result.json = {
      {"checks", check.checks},       {"failures", check.failures},       {"truth_sanity", truth},
      {"truth_checks", truth_checks}, {"truth_failures", truth_failures}, {"builtin", builtin},
      {"failure_lines", check.lines}};
  std::string t;
  char line[256];
  if (!o.bench_paths.empty()) {
    std::snprintf(line, sizeof line, "%-36s %8s %8s %8s %8s %8s\n", "ground truth (all rules)",
                  "optimal", "no-sol", "unknown", "e2e", "fail");
    t += line;
    for (auto it = truth.begin(); it != truth.end(); ++it) {
      const auto& v = it.value();
      std::snprintf(line, sizeof line, "%-36s %8lld %8lld %8lld %8lld %8lld\n", it.key().c_str(),
                    static_cast<long long>(v["optimal"].get<int64_t>()),
                    static_cast<long long>(v["no_solution"].get<int64_t>()),
                    static_cast<long long>(v["unknown_excluded"].get<int64_t>()),
                    static_cast<long long>(v["end_to_end_graded"].get<int64_t>()),
                    static_cast<long long>(v["failures"].get<int64_t>()));
      t += line;
    }
    t += "\n";
  }
  std::snprintf(line, sizeof line, "%-22s %-9s %-18s %-18s %s\n", "built-in case", "group",
                "expected", "verdict", "");
  t += line;
  for (const auto& r : builtin) {
    std::snprintf(line, sizeof line, "%-22s %-9s %-18s %-18s %s %s\n",
                  r["id"].get<std::string>().c_str(), r["group"].get<std::string>().c_str(),
                  r["expected"].get<std::string>().c_str(), r["verdict"].get<std::string>().c_str(),
                  r["ok"].get<bool>() ? "ok" : "FAIL", r["note"].get<std::string>().c_str());
    t += line;
  }
  std::snprintf(line, sizeof line, "\nself-test: %lld checks, %lld failures\n",
                static_cast<long long>(check.checks), static_cast<long long>(check.failures));
  t += line;
  for (const auto& f : check.lines) t += "  FAIL " + f + "\n";
  result.table = t;
  if (!o.out_dir.empty())
    write_file_atomic(o.out_dir + "/self_test.json", result.json.dump(2) + "\n");
  return result;
}

}  // namespace trex::orlib::eval
