#include "trex/or/eval/prompts.hpp"

#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/strings.hpp"
#include "trex/or/eval/bench.hpp"

namespace trex::orlib::eval {
namespace {

const char* const kMathProg =
    "You are an expert in operations research and mathematical optimization.\n"
    "\n"
    "Formulate the optimization problem below as a mathematical model and write the complete "
    "model in GNU MathProg (GMPL), the modelling language of GLPK.\n"
    "\n"
    "Requirements:\n"
    "- Put the whole model, including all data, in ONE code block fenced with ```mathprog and "
    "```.\n"
    "- Declare every decision variable with `var` (add `integer` or `binary` where the problem "
    "needs whole numbers or yes/no decisions).\n"
    "- Write exactly one objective (`maximize` or `minimize`) that is the quantity the question "
    "asks for, and the constraints with `s.t.`.\n"
    "- End the model with `solve;` and `end;`. Do not read or write files.\n"
    "- The model is solved with GLPK and its optimal objective value is graded. If the problem "
    "has no feasible solution, still write the model: GLPK will report it infeasible.\n"
    "\n"
    "Problem:\n"
    "{question}\n";

const char* const kLp =
    "You are an expert in operations research and mathematical optimization.\n"
    "\n"
    "Formulate the optimization problem below as a mathematical model and write it as a CPLEX "
    "LP file with all numbers filled in.\n"
    "\n"
    "Requirements:\n"
    "- Put the whole model in ONE code block fenced with ```lp and ```.\n"
    "- Use the sections `Maximize` or `Minimize` (one objective, the quantity the question asks "
    "for), `Subject To`, optionally `Bounds`, `General` (integer variables) and `Binary`, and "
    "finish with `End`.\n"
    "- Name constraints like `c1: 2 x + 3 y <= 10`. Variable names use letters, digits and "
    "underscores; write a space between a coefficient and its variable. Variables are "
    "non-negative unless `Bounds` says otherwise.\n"
    "- The model is solved with GLPK and its optimal objective value is graded. If the problem "
    "has no feasible solution, still write the model: the solver will report it infeasible.\n"
    "\n"
    "Problem:\n"
    "{question}\n";

const char* const kPython =
    "You are an expert in operations research and mathematical optimization.\n"
    "\n"
    "Formulate the optimization problem below as a mathematical model and write a complete "
    "Python script that builds and solves it with an optimization library (for example PuLP, "
    "Pyomo, gurobipy, coptpy, PySCIPOpt, highspy, OR-Tools or python-mip).\n"
    "\n"
    "Requirements:\n"
    "- Put the whole script in ONE code block fenced with ```python and ```.\n"
    "- The script must run as it is, without input or files, solve the model, and print the "
    "optimal objective value on its own line as `Optimal objective: <value>`.\n"
    "- If the problem is infeasible or unbounded, print `No Best Solution` instead.\n"
    "- Keep the solved model in a module-level variable (for example `model`).\n"
    "\n"
    "Problem:\n"
    "{question}\n";

}  // namespace

const std::string& prompt_template(CodeKind format) {
  static const std::string mathprog = kMathProg, lp = kLp, python = kPython;
  switch (format) {
    case CodeKind::mathprog:
      return mathprog;
    case CodeKind::lp:
      return lp;
    case CodeKind::python:
      return python;
    case CodeKind::none:
      break;
  }
  throw Error("prompts need a format: mathprog, lp or python").field("--format");
}

std::string make_prompt(const std::string& question, CodeKind format) {
  const std::string& t = prompt_template(format);
  const size_t at = t.find("{question}");
  return t.substr(0, at) + trim(question) + t.substr(at + std::string("{question}").size());
}

int64_t write_prompts(const std::vector<std::string>& bench_paths, CodeKind format,
                      const std::string& out_path) {
  prompt_template(format);  // validates the format before any file is read
  if (bench_paths.empty()) throw Error("at least one benchmark file is required").field("--bench");
  std::vector<Benchmark> benches = load_benchmarks(bench_paths);
  JsonlWriter out(out_path);
  for (const Benchmark& b : benches)
    for (const BenchItem& item : b.items) {
      if (trim(item.question).empty())
        throw Error("item '" + item.id + "' has no question text").file(b.path).field("question");
      std::string prompt = make_prompt(item.question, format);
      nlohmann::json r;
      r["id"] = item.id;
      r["source"] = b.name;
      r["format"] = to_string(format);
      r["prompt"] = prompt;
      r["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", prompt}}});
      out.write(r);
    }
  out.commit();
  return static_cast<int64_t>(out.count());
}

}  // namespace trex::orlib::eval
