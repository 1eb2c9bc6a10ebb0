#include "trex/or/dataset/sft.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <optional>
#include <set>
#include <unordered_set>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/process_pool.hpp"
#include "trex/core/progress.hpp"
#include "trex/core/rng.hpp"
#include "trex/core/strings.hpp"
#include "trex/or/dataset/decontam.hpp"
#include "trex/or/dataset/gmpl_edit.hpp"
#include "trex/or/dataset/real_fault.hpp"
#include "trex/or/dataset/summary_file.hpp"
#include "trex/or/families/family.hpp"
#include "trex/or/solver/linear_model.hpp"
#include "trex/or/synth/verify.hpp"

namespace trex::orlib {

const char* const kSftSystemPrompt =
    "You are an operations-research modelling assistant. Work with three representations of an "
    "optimisation problem: the word problem, the algebraic formulation, and an executable GNU "
    "MathProg (GMPL) model. Put any executable model in a single ```mathprog fenced block with "
    "its data section, and end your answer with one line `Optimal objective: <value>` or "
    "`Status: infeasible` / `Status: unbounded`.";

std::string answer_value(double objective) {
  if (std::fabs(objective) < 5e-10) objective = 0.0;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", objective);
  return buf;
}

std::string objective_line(double objective) {
  return "Optimal objective: " + answer_value(objective);
}

Problem parse_problem(const json& r) {
  Problem p;
  try {
    p.id = r.at("id").get<std::string>();
    p.family = r.at("family").get<std::string>();
    p.problem_class = r.at("problem_class").get<std::string>();
    p.difficulty = r.at("difficulty").get<std::string>();
    p.nl_template = r.at("nl_template").get<int>();
    // Records written before composed phrasing have one form per template.
    p.surface_form = r.value("surface_form", "template-" + std::to_string(p.nl_template));
    p.nl = r.at("nl").get<std::string>();
    p.alg = r.at("alg").get<std::string>();
    p.gmpl = r.at("gmpl").get<std::string>();
    p.objective = r.at("objective").get<double>();
    p.size = r.value("size", json::object());
    p.variants = r.value("variants", std::vector<std::string>{});
  } catch (const json::exception& e) {
    throw Error(std::string("not a `trex or synth` record: ") + e.what());
  }
  require(r.value("status", std::string()) == "optimal", "problem " + p.id + " is not optimal");
  return p;
}

std::vector<Problem> load_problems(const std::string& path, const JsonlOptions& read,
                                   JsonlStats* stats) {
  std::vector<Problem> out;
  JsonlStats s = read_jsonl(path, read, [&](const json& r, long line) {
    try {
      out.push_back(parse_problem(r));
    } catch (Error& e) {
      throw e.file(path).line(line);
    }
  });
  require(!out.empty(),
          "no problems in " + path + (s.skipped > 0 ? " (" + s.summary() + ")" : std::string()));
  if (stats) *stats = std::move(s);
  return out;
}

const std::vector<TaskPlan>& sft_task_plan() {
  static const std::vector<TaskPlan> plan = {
      {"formulate", 0.45}, {"translate", 0.20}, {"repair", 0.20}, {"interpret", 0.15}};
  return plan;
}

std::vector<std::string> plan_tasks(int64_t n, uint64_t seed) {
  std::vector<std::string> tasks;
  int64_t assigned = 0;
  const auto& plan = sft_task_plan();
  for (size_t k = 0; k < plan.size(); ++k) {
    int64_t count =
        k + 1 == plan.size() ? n - assigned : static_cast<int64_t>(std::llround(plan[k].share * n));
    for (int64_t i = 0; i < count; ++i) tasks.push_back(plan[k].task);
    assigned += count;
  }
  Rng rng(seed, {0x7A5C});
  rng.shuffle(tasks);
  return tasks;
}

std::vector<std::string> choose_heldout_families(uint64_t seed, int count) {
  std::vector<std::pair<uint64_t, std::string>> keyed;
  for (const Family* f : all_families())
    keyed.emplace_back(hash_combine(mix64(seed ^ 0xFA11), hash_string(f->name())),
                       std::string(f->name()));
  std::sort(keyed.begin(), keyed.end());
  std::vector<std::string> out;
  for (int i = 0; i < count && i < static_cast<int>(keyed.size()); ++i)
    out.push_back(keyed[static_cast<size_t>(i)].second);
  std::sort(out.begin(), out.end());
  return out;
}

std::map<std::string, int> choose_heldout_templates(uint64_t seed) {
  std::map<std::string, int> out;
  for (const Family* f : all_families())
    out[std::string(f->name())] =
        static_cast<int>(hash_combine(mix64(seed ^ 0x7E3A), hash_string(f->name())) %
                         static_cast<uint64_t>(f->nl_templates()));
  return out;
}

std::string split_for(const Problem& p, uint64_t seed,
                      const std::vector<std::string>& heldout_families,
                      const std::map<std::string, int>& heldout_templates) {
  if (std::find(heldout_families.begin(), heldout_families.end(), p.family) !=
      heldout_families.end())
    return "heldout_family";
  auto it = heldout_templates.find(p.family);
  if (it != heldout_templates.end() && it->second == p.nl_template) return "heldout_template";
  uint64_t bucket = hash_combine(mix64(seed ^ 0x5B17), hash_string(p.id)) % 100;
  return bucket < 90 ? "train" : bucket < 95 ? "valid" : "test";
}

namespace {

struct Solved {
  std::string status;  // optimal | infeasible | unbounded
  double objective = 0.0;
};

// Translates and solves; nullopt (with `why`) on translation errors, time
// limits and solver errors.
std::optional<Solved> solve_text(const std::string& gmpl, double time_limit, std::string& why,
                                 std::optional<LinearModel::Sensitivity>* sens = nullptr,
                                 std::string* output = nullptr) {
  try {
    LinearModel model =
        LinearModel::from_mathprog(gmpl, "model.mod", LinearModel::Translator::checked_in_child);
    SolveOptions options;
    options.time_limit_seconds = time_limit;
    SolveResult r = model.solve_glpk(options);
    if (r.status == SolveStatus::time_limit || r.status == SolveStatus::error) {
      why = std::string(to_string(r.status)) + ": " + r.message;
      return std::nullopt;
    }
    Solved s{to_string(r.status), r.objective};
    if (r.status == SolveStatus::optimal) {
      if (sens) *sens = model.sensitivity();
      if (output) *output = r.output;
    }
    return s;
  } catch (const ModelError& e) {
    why = "translation error: " + e.message();
    return std::nullopt;
  }
}

std::string fence(const std::string& gmpl) {
  std::string body = gmpl;
  while (!body.empty() && body.back() == '\n') body.pop_back();
  return "```mathprog\n" + body + "\n```";
}

std::string final_line(const Solved& s) {
  return s.status == "optimal" ? objective_line(s.objective) : "Status: " + s.status;
}

std::string size_text(const Problem& p) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : p.size.items()) {
    if (k == "rows" || k == "columns" || k == "integer_columns" || k == "binary_columns" ||
        k == "nonzeros" || !v.is_number())
      continue;
    parts.push_back(replace_all(k, "_", " ") + " " + v.dump());
  }
  return join(parts, ", ");
}

std::string analysis(const Problem& p) {
  const Family& f = find_family(p.family);
  std::string text = "This is a " + to_lower(std::string(f.title())) + " problem";
  std::string cls = p.problem_class == "LP"   ? "a linear program (all variables continuous)"
                    : p.problem_class == "IP" ? "a pure integer program"
                                              : "a mixed-integer linear program";
  text += ", which I model as " + cls + ".";
  std::string sz = size_text(p);
  if (!sz.empty()) text += " Size: " + sz + ".";
  if (!p.variants.empty())
    text +=
        " Additional conditions to model: " + replace_all(join(p.variants, ", "), "_", " ") + ".";
  text +=
      " I first state the sets, parameters, decision variables, objective and constraints "
      "algebraically, then implement the same model with its data in GNU MathProg and solve it.";
  return text;
}

json base_meta(const Problem& p, const std::string& task, const std::string& in,
               const std::string& out) {
  return json{{"task", task},
              {"input_repr", in},
              {"output_repr", out},
              {"family", p.family},
              {"problem_id", p.id},
              {"problem_class", p.problem_class},
              {"difficulty", p.difficulty},
              {"nl_template", p.nl_template}};
}

json chat(const std::string& user, const std::string& assistant, json meta) {
  json messages = json::array({json{{"role", "system"}, {"content", kSftSystemPrompt}},
                               json{{"role", "user"}, {"content", user}},
                               json{{"role", "assistant"}, {"content", assistant}}});
  return json{{"messages", messages}, {"meta", std::move(meta)}};
}

std::string reject(const std::string& reason, const std::string& detail) {
  return "!" + reason + ": " + detail;
}

std::string limit_list(const std::vector<std::string>& items, size_t n) {
  std::vector<std::string> shown(
      items.begin(), items.begin() + static_cast<std::ptrdiff_t>(std::min(n, items.size())));
  std::string text = join(shown, "; ");
  if (items.size() > n) text += "; and " + std::to_string(items.size() - n) + " more";
  return text;
}

std::string fmt(double v) {
  return answer_value(v);
}

}  // namespace

std::string make_sample(const std::vector<Problem>& problems, const std::string& task,
                        int64_t index, int attempt, uint64_t seed, double time_limit) {
  Rng rng(seed, {0x5F7, static_cast<uint64_t>(index), static_cast<uint64_t>(attempt)});
  const Problem& p = problems[rng.index(problems.size())];
  std::string why;
  // The reference model must reproduce the recorded optimum.
  std::optional<LinearModel::Sensitivity> sens;
  std::string printed;
  auto ref = solve_text(p.gmpl, time_limit, why, &sens, &printed);
  if (!ref) return reject("reference_unsolved", why);
  if (ref->status != "optimal" || !objectives_agree(ref->objective, p.objective))
    return reject("reference_mismatch", p.id);
  const Solved& base = *ref;

  if (task == "formulate") {
    json meta = base_meta(p, task, "nl", "gmpl");
    meta["also_output"] = json::array({"alg"});
    meta["status"] = "optimal";
    meta["objective"] = base.objective;
    meta["verified"] = {{"models_solved", 1}};
    std::string user = p.nl +
                       "\n\nFormulate this problem as a mathematical optimisation model, "
                       "implement it in GNU MathProg and report the optimal objective.";
    std::string assistant = "**Analysis.** " + analysis(p) + "\n\n**Algebraic formulation.**\n\n" +
                            trim(p.alg) + "\n\n**GNU MathProg model.**\n\n" + fence(p.gmpl) +
                            "\n\n" + final_line(base);
    return dump_compact(chat(user, assistant, meta));
  }

  if (task == "translate") {
    double u = rng.uniform();
    std::string in, out, user, assistant;
    if (u < 0.40) {
      in = "alg", out = "gmpl";
      user =
          "Translate this algebraic formulation, with its data, into an executable GNU MathProg "
          "model and solve it.\n\n" +
          trim(p.alg);
      assistant =
          "Here is the model in GNU MathProg, with one declaration per set, parameter and "
          "variable, the objective, one `s.t.` statement per constraint family, and the "
          "data section.\n\n" +
          fence(p.gmpl) + "\n\n" + final_line(base);
    } else if (u < 0.70) {
      in = "gmpl", out = "alg";
      user =
          "Write the algebraic formulation (sets, parameters, decision variables, objective, "
          "constraints) of this GNU MathProg model.\n\n" +
          fence(p.gmpl);
      assistant =
          trim(p.alg) + "\n\nSolving the model gives the optimum below.\n\n" + final_line(base);
    } else {
      in = u < 0.85 ? "alg" : "gmpl", out = "nl";
      std::string shown = in == "alg" ? trim(p.alg) : fence(p.gmpl);
      user = "Explain in plain words the decision problem that this " +
             std::string(in == "alg" ? "algebraic formulation" : "GNU MathProg model") +
             " describes, with all of its data.\n\n" + shown;
      assistant = trim(p.nl) + "\n\nThe optimal value of this problem is " + fmt(base.objective) +
                  ".\n\n" + final_line(base);
    }
    json meta = base_meta(p, task, in, out);
    meta["status"] = "optimal";
    meta["objective"] = base.objective;
    meta["verified"] = {{"models_solved", 1}};
    return dump_compact(chat(user, assistant, meta));
  }

  if (task == "repair") {
    const auto real = first_real_fault(p.gmpl, base.objective, time_limit, rng);
    if (!real) return reject("no_real_fault", p.id);
    const Fault& fault = real->fault;
    const FaultKind kind = fault.kind;
    const FaultSymptom& symptom = real->symptom;
    std::string feedback;
    std::string fault_status;
    double fault_objective = std::nan("");
    switch (symptom.kind) {
      case FaultSymptom::Kind::status:
        fault_status = to_string(symptom.status);
        feedback = "GLPK reports that the model is " + fault_status + ".";
        break;
      case FaultSymptom::Kind::objective:
        fault_status = to_string(symptom.status);
        fault_objective = symptom.objective;
        feedback = "The model solves, but its optimal objective " + fmt(symptom.objective) +
                   " disagrees with the expected " + fmt(base.objective) + ".";
        break;
      case FaultSymptom::Kind::translation_error:
        fault_status = "translation_error";
        feedback = "GLPK cannot translate the model:\n\n" + symptom.translation_error;
        break;
    }
    json meta = base_meta(p, task, "gmpl", "gmpl");
    meta["also_input"] = json::array({"nl"});
    meta["fault"] = {
        {"kind", to_string(kind)}, {"location", fault.location}, {"faulty_status", fault_status}};
    if (!std::isnan(fault_objective)) meta["fault"]["faulty_objective"] = fault_objective;
    meta["status"] = "optimal";
    meta["objective"] = base.objective;
    meta["verified"] = {{"models_solved", 2}, {"fault_real", true}, {"fix_matches", true}};
    std::string user = p.nl +
                       "\n\nThis GNU MathProg model is supposed to solve the problem "
                       "above, but something is wrong.\n\n" +
                       fence(fault.model) + "\n\n" + feedback +
                       "\n\nDiagnose the error and give the corrected model.";
    std::string assistant = "**Diagnosis** (" + fault.location + "). " + fault.diagnosis +
                            "\n\n**Corrected model.**\n\n" + fence(p.gmpl) + "\n\n" +
                            final_line(base);
    return dump_compact(chat(user, assistant, meta));
  }

  if (task == "interpret") {
    if (rng.uniform() < 0.6) {
      if (!sens) return reject("no_sensitivity", p.id);
      LinearModel::Sensitivity& s = *sens;
      std::vector<std::string> values, binding, duals, ranges;
      std::string solver_out =
          "GLPK: OPTIMAL\nObjective value: " + fmt(base.objective) + "\nNonzero variables:\n";
      int shown = 0;
      for (const auto& c : s.columns) {
        if (std::fabs(c.value) <= 1e-9) continue;
        values.push_back(c.name + " = " + fmt(c.value));
        if (shown++ < 60) solver_out += "  " + c.name + " = " + fmt(c.value) + "\n";
        if (c.has_range && ranges.size() < 5 && std::fabs(c.reduced_cost) <= 1e-9) {
          auto b = [](double v) {
            return std::isfinite(v) ? fmt(v) : std::string(v < 0 ? "-inf" : "+inf");
          };
          ranges.push_back("the cost coefficient of " + c.name + " (now " + fmt(c.objective_coef) +
                           ") can range over [" + b(c.coef_lower) + ", " + b(c.coef_upper) +
                           "] without changing the optimal basis");
        }
      }
      if (shown > 60) solver_out += "  ... (" + std::to_string(shown - 60) + " more)\n";
      solver_out += "Binding constraints:";
      for (const auto& r : s.rows) {
        if (!r.binding) continue;
        binding.push_back(r.name);
        if (s.has_duals && std::fabs(r.dual) > 1e-9) duals.push_back(r.name + ": " + fmt(r.dual));
      }
      solver_out += binding.empty() ? " none\n" : " " + limit_list(binding, 40) + "\n";
      if (s.has_duals)
        solver_out +=
            "Nonzero row duals: " + (duals.empty() ? std::string("none") : limit_list(duals, 40)) +
            "\n";
      solver_out += trim(printed);
      std::string user =
          "Here is a solved GNU MathProg model and the solver's output. Explain the "
          "solution: the optimal decisions, which constraints are binding and what "
          "the sensitivity information says.\n\n" +
          fence(p.gmpl) + "\n\nSolver output:\n\n```\n" + solver_out + "\n```";
      std::string assistant = "The model is solved to optimality with objective value " +
                              fmt(base.objective) +
                              ". The optimal decisions with nonzero values "
                              "are: " +
                              limit_list(values, 25) + ".\n\n";
      assistant += binding.empty() ? std::string("No constraint is binding at the optimum.")
                                   : "The binding constraints (satisfied with equality, so they "
                                     "limit the objective) are: " +
                                         limit_list(binding, 25) + ".";
      if (s.has_duals) {
        assistant +=
            duals.empty()
                ? "\n\nAll shadow prices are zero: relaxing any single constraint slightly "
                  "would not change the optimal objective."
                : "\n\nShadow prices (the change in the objective per unit increase of a "
                  "constraint's right-hand side, valid within its range): " +
                      limit_list(duals, 15) + ".";
        if (!ranges.empty()) assistant += "\n\nRanging: " + join(ranges, "; ") + ".";
      } else {
        assistant +=
            "\n\nThe model has integer variables, so LP shadow prices do not apply "
            "directly; the effect of changing a right-hand side has to be measured by "
            "re-solving the modified model.";
      }
      assistant += "\n\n" + final_line(base);
      json meta = base_meta(p, task, "gmpl", "nl");
      meta["subtask"] = "explain";
      meta["status"] = "optimal";
      meta["objective"] = base.objective;
      meta["binding_constraints"] = static_cast<int64_t>(binding.size());
      meta["shadow_prices"] = s.has_duals;
      meta["verified"] = {{"models_solved", 1}};
      return dump_compact(chat(user, assistant, meta));
    }
    auto values = data_values(p.gmpl);
    std::vector<size_t> usable;
    for (size_t k = 0; k < values.size(); ++k)
      if (values[k].value != 0.0) usable.push_back(k);
    if (usable.empty()) return reject("no_data_value", p.id);
    const DataValue& v = values[usable[rng.index(usable.size())]];
    static const double factors[] = {0.5, 0.8, 1.2, 1.5, 2.0};
    double factor = factors[rng.index(5)];
    double changed = v.value * factor;
    if (v.value == std::round(v.value)) changed = std::round(changed);
    if (changed == v.value) return reject("no_change", describe(v));
    std::string model = with_data_value(p.gmpl, v, changed);
    auto solved = solve_text(model, time_limit, why);
    if (!solved) return reject("whatif_unsolved", why);
    std::string user = p.nl +
                       "\n\nThe following GNU MathProg model solves this problem with optimal "
                       "objective " +
                       fmt(base.objective) + ".\n\n" + fence(p.gmpl) + "\n\nWhat if " +
                       describe(v) + " changes from " + fmt(v.value) + " to " + fmt(changed) +
                       "? Give the modified model and the new optimum.";
    std::string effect;
    if (solved->status != "optimal") {
      effect = "With this change the problem becomes " + solved->status + ".";
    } else {
      double d = solved->objective - base.objective;
      effect = std::fabs(d) <= 1e-6 * std::max(1.0, std::fabs(base.objective))
                   ? "The optimal objective does not change (" + fmt(solved->objective) + ")."
                   : "The optimal objective changes from " + fmt(base.objective) + " to " +
                         fmt(solved->objective) + " (" + (d > 0 ? "+" : "") + fmt(d) + ").";
    }
    std::string assistant = "Only the data changes: in the `data;` section the value of " +
                            describe(v) + " becomes " + fmt(changed) + ". " + effect + "\n\n" +
                            fence(model) + "\n\n" + final_line(*solved);
    json meta = base_meta(p, task, "gmpl", "gmpl");
    meta["also_input"] = json::array({"nl"});
    meta["subtask"] = "what_if";
    meta["change"] = {{"param", describe(v)}, {"from", v.value}, {"to", changed}};
    meta["baseline_objective"] = base.objective;
    meta["status"] = solved->status;
    if (solved->status == "optimal")
      meta["objective"] = solved->objective;
    else
      meta["objective"] = nullptr;
    meta["verified"] = {{"models_solved", 2}};
    return dump_compact(chat(user, assistant, meta));
  }
  throw Error("unknown task '" + task + "'");
}

namespace {

struct LengthStats {
  std::vector<double> values;
  std::string row(const std::string& name) const {
    if (values.empty()) return "| " + name + " | 0 | | | | |\n";
    std::vector<double> v = values;
    std::sort(v.begin(), v.end());
    auto q = [&](double f) {
      return v[static_cast<size_t>(f * static_cast<double>(v.size() - 1))];
    };
    double sum = 0;
    for (double x : v) sum += x;
    return "| " + name + " | " + format_fixed(sum / static_cast<double>(v.size()), 0) + " | " +
           format_number(v.front()) + " | " + format_number(q(0.5)) + " | " +
           format_number(q(0.9)) + " | " + format_number(v.back()) + " |\n";
  }
};

std::string pct(int64_t part, int64_t whole) {
  return whole == 0
             ? "0"
             : format_fixed(100.0 * static_cast<double>(part) / static_cast<double>(whole), 1);
}

}  // namespace

namespace {

std::string diversity_section(const SftSummary& summary) {
  std::string md = "\n## Surface-form diversity of the problem texts\n\n";
  md += "Distinct word " + std::to_string(kDiversityNgram) + "-grams / all word " +
        std::to_string(kDiversityNgram) + "-grams over a sample of up to " +
        std::to_string(kDiversitySample) +
        " question texts per row (same sample size for every row: the share falls as a sample "
        "grows), and the number of distinct wordings (surface forms: the text apart from its "
        "names and numbers) among all of a family's texts. A template family has one form per "
        "template; a composed family varies clause by clause. The benchmarks' questions are "
        "written by people.\n\n| texts | all texts | NL templates | surface forms | texts "
        "sampled | distinct " +
        std::to_string(kDiversityNgram) + "-grams / total |\n|---|---|---|---|---|---|\n";
  for (const auto& [family, d] : summary.family_diversity) {
    const TextForms& f = summary.family_forms.at(family);
    md += "| family " + family + " | " + std::to_string(f.texts) + " | " +
          std::to_string(f.templates) + " | " + std::to_string(f.surface_forms) + " | " +
          std::to_string(d.texts) + " | " + format_fixed(d.share(), 3) + " |\n";
  }
  for (const auto& [file, d] : summary.bench_diversity)
    md += "| benchmark " + file + " | - | - | - | " + std::to_string(d.texts) + " | " +
          format_fixed(d.share(), 3) + " |\n";
  return md;
}

}  // namespace

std::string dataset_card(const std::map<std::string, std::vector<json>>& splits,
                         const SftSummary& summary, const SftOptions& options,
                         const std::vector<double>& overlaps) {
  std::map<std::string, int64_t> by_task, by_repr, by_family_task, by_difficulty_task, by_subtask;
  std::map<std::string, int64_t> by_fault, by_input, by_output;
  std::set<std::string> families, tasks;
  LengthStats user_len, assistant_len, total_len;
  int64_t total = 0, models_solved = 0;
  for (const auto& [split, records] : splits) {
    for (const json& r : records) {
      const json& m = r["meta"];
      std::string task = m["task"];
      ++total;
      ++by_task[task];
      ++by_repr[task + " | " + m["input_repr"].get<std::string>() + " -> " +
                m["output_repr"].get<std::string>()];
      ++by_input[m["input_repr"].get<std::string>()];
      ++by_output[m["output_repr"].get<std::string>()];
      families.insert(m["family"].get<std::string>());
      tasks.insert(task);
      ++by_family_task[m["family"].get<std::string>() + "\t" + task];
      ++by_difficulty_task[m["difficulty"].get<std::string>() + "\t" + task];
      if (m.contains("subtask")) ++by_subtask[task + "/" + m["subtask"].get<std::string>()];
      if (m.contains("fault")) ++by_fault[m["fault"]["kind"].get<std::string>()];
      models_solved += m["verified"]["models_solved"].get<int64_t>();
      double u = static_cast<double>(r["messages"][1]["content"].get<std::string>().size());
      double a = static_cast<double>(r["messages"][2]["content"].get<std::string>().size());
      user_len.values.push_back(u);
      assistant_len.values.push_back(a);
      total_len.values.push_back(u + a + static_cast<double>(std::string(kSftSystemPrompt).size()));
    }
  }
  std::string md = "# T-Rex OR SFT set\n\n";
  md += "Generated by `trex or sft --problems " + options.problems_path + " --n " +
        std::to_string(options.n) + " --seed " + std::to_string(options.seed) +
        "`. Chat JSONL "
        "(`messages` + `meta`); answer format in docs/or-answer-format.md. Every model in an "
        "assistant message was re-solved with GLPK and matches `meta.status`/`meta.objective`; "
        "every repair sample's faulty model was verified faulty (translation error, different "
        "status or different objective).\n\n";
  md += "- records: " + std::to_string(total) + "\n";
  md += "- models solved for verification: " + std::to_string(models_solved) + "\n";
  md += "- problems file: " + summary.input.summary() + "\n";
  md += "- generation time: " + format_fixed(summary.seconds, 1) + " s with " +
        std::to_string(options.jobs) + " worker processes\n\n";
  md += "## Splits\n\n| split | records |\n|---|---|\n";
  for (const auto& [name, count] : summary.split_sizes)
    md += "| " + name + " | " + std::to_string(count) + " |\n";
  md += "\nSplits are disjoint by problem instance. Held-out families (never in train): " +
        join(summary.heldout_families, ", ") +
        ". Held-out NL template per family (never in train): ";
  std::vector<std::string> tpl;
  for (const auto& [f, t] : summary.heldout_templates) tpl.push_back(f + "=" + std::to_string(t));
  md += join(tpl, ", ") + ".\n\n";
  md += "## Tasks\n\n| task | records | share % | planned % |\n|---|---|---|---|\n";
  for (const auto& p : sft_task_plan())
    md += "| " + p.task + " | " + std::to_string(by_task[p.task]) + " | " +
          pct(by_task[p.task], total) + " | " + format_number(100 * p.share) + " |\n";
  md += "\n| task / subtask | records |\n|---|---|\n";
  for (const auto& [k, c] : by_subtask) md += "| " + k + " | " + std::to_string(c) + " |\n";
  md +=
      "\n## Task x representation (input -> output)\n\n| task | input -> output | records "
      "|\n|---|---|---|\n";
  for (const auto& [k, c] : by_repr) md += "| " + k + " | " + std::to_string(c) + " |\n";
  md += "\n| representation | as input | as output |\n|---|---|---|\n";
  for (const char* r : {"nl", "alg", "gmpl"})
    md += std::string("| ") + r + " | " + std::to_string(by_input[r]) + " | " +
          std::to_string(by_output[r]) + " |\n";
  md += "\n## Repair faults (all verified)\n\n| fault | records |\n|---|---|\n";
  for (const auto& [k, c] : by_fault) md += "| " + k + " | " + std::to_string(c) + " |\n";
  auto table = [&](const std::string& title, const std::map<std::string, int64_t>& cells,
                   const std::set<std::string>& rows) {
    std::string t = "\n## " + title + " x task\n\n| " + to_lower(title) + " |";
    for (const auto& p : sft_task_plan()) t += " " + p.task + " |";
    t += " total |\n|---|";
    for (size_t i = 0; i <= sft_task_plan().size(); ++i) t += "---|";
    t += "\n";
    for (const auto& row : rows) {
      t += "| " + row + " |";
      int64_t sum = 0;
      for (const auto& p : sft_task_plan()) {
        auto it = cells.find(row + "\t" + p.task);
        int64_t c = it == cells.end() ? 0 : it->second;
        sum += c;
        t += " " + std::to_string(c) + " |";
      }
      t += " " + std::to_string(sum) + " |\n";
    }
    return t;
  };
  md += table("Family", by_family_task, families);
  md += table("Difficulty", by_difficulty_task, {"easy", "medium", "hard"});
  md +=
      "\n## Lengths (characters; tokens: no tokenizer yet, bytes/4 is the stand-in)\n\n"
      "| text | mean | min | median | p90 | max |\n|---|---|---|---|---|---|\n";
  md += user_len.row("user message") + assistant_len.row("assistant message") +
        total_len.row("whole record (incl. system)");
  md += diversity_section(summary);
  md += "\n## De-duplication and decontamination\n\n";
  md +=
      "- duplicates (identical messages, or the same task, representations, instance and "
      "variation) rejected and regenerated: " +
      std::to_string(summary.duplicates) + "\n";
  if (options.bench_dir.empty()) {
    md += "- decontamination: disabled\n";
  } else {
    std::vector<double> o = overlaps;
    std::sort(o.begin(), o.end());
    auto q = [&](double f) {
      return o.empty() ? 0.0 : o[static_cast<size_t>(f * static_cast<double>(o.size() - 1))];
    };
    md += "- benchmark questions indexed: " + std::to_string(summary.bench_questions) + " from " +
          std::to_string(summary.bench_files) + " files in " + options.bench_dir + "\n";
    md += "- measure: fraction of a benchmark question's distinct word " +
          std::to_string(kDecontamNgram) +
          "-grams found in the record (all messages), maximum "
          "over all questions\n";
    md += "- threshold: records with overlap > " + format_number(options.decontam_threshold) +
          " are dropped and regenerated\n";
    md += "- dropped: " + std::to_string(summary.decontam_dropped) + "\n";
    md += "- number signatures: " + std::to_string(summary.bench_signed_questions) +
          " questions with >= " + std::to_string(kSignatureMinNumbers) +
          " distinct numbers other than 0..10; records containing >= " +
          format_number(kSignatureShare) + " of one signature are dropped and regenerated: " +
          std::to_string(summary.decontam_numbers_dropped) + "\n";
    md += "- overlap of kept records: median " + format_fixed(q(0.5), 4) + ", p99 " +
          format_fixed(q(0.99), 4) + ", max " + format_fixed(o.empty() ? 0.0 : o.back(), 4) + "\n";
  }
  md +=
      "\n## Rejections during generation (all regenerated with another draw)\n\n| reason | count "
      "|\n|---|---|\n";
  for (const auto& [k, c] : summary.rejected) md += "| " + k + " | " + std::to_string(c) + " |\n";
  return md;
}

SftSummary build_sft(const SftOptions& options) {
  require(!options.out_dir.empty(), "an output directory is required");
  require(options.n > 0, "--n must be positive");
  auto start = std::chrono::steady_clock::now();
  JsonlOptions read;
  read.strict = options.strict;
  SftSummary summary;
  std::vector<Problem> problems = load_problems(options.problems_path, read, &summary.input);
  NgramIndex index;
  const bool decontam = !options.bench_dir.empty();
  if (decontam) {
    index.add_directory(options.bench_dir);
    summary.bench_questions = index.questions();
    summary.bench_signed_questions = index.signed_questions();
    summary.bench_files = index.files();
    summary.bench_diversity = benchmark_diversity(options.bench_dir, options.seed);
  }
  {
    std::map<std::string, std::vector<std::string>> texts;
    std::map<std::string, TextFormCounter> forms;
    for (const Problem& p : problems) {
      texts[p.family].push_back(p.nl);
      forms[p.family].add(p.nl_template, p.surface_form);
    }
    for (const auto& [family, nl] : texts) {
      summary.family_diversity[family] = ngram_diversity(nl, options.seed);
      summary.family_forms[family] = forms[family].counts();
    }
  }
  const std::vector<std::string> tasks = plan_tasks(options.n, options.seed);
  const double threshold = options.decontam_threshold;

  // Worker: build the sample, then score it against the benchmarks.
  auto work = [&](int, const PoolItem& job) -> std::string {
    std::string record = make_sample(problems, tasks[static_cast<size_t>(job.id)], job.id,
                                     job.attempt, options.seed, options.time_limit_seconds);
    if (record.empty() || record[0] == '!' || !decontam) return record;
    json r = json::parse(record);
    std::string text;
    for (const auto& m : r["messages"])
      if (m["role"] != "system") text += m["content"].get<std::string>() + "\n";
    auto o = index.max_overlap(text);
    if (o.fraction > threshold)
      return reject("decontam", format_fixed(o.fraction, 4) + " vs " + o.source);
    const auto numbers = index.max_signature_share(text);
    if (numbers.fraction >= kSignatureShare)
      return reject("decontam_numbers",
                    format_fixed(numbers.fraction, 4) + " of the numbers of " + numbers.source);
    r["meta"]["max_bench_overlap"] = std::round(o.fraction * 1e6) / 1e6;
    return dump_compact(r);
  };

  std::vector<std::string> records(static_cast<size_t>(options.n));
  std::deque<PoolItem> retries;
  int64_t next_new = 0, next_commit = 0;
  std::map<int64_t, std::pair<PoolItem, std::string>> ready;
  std::unordered_set<uint64_t> seen;
  std::optional<Progress> progress;
  if (options.show_progress) progress.emplace("or sft", options.n);

  auto retry = [&](const PoolItem& job, const std::string& why) {
    if (job.attempt + 1 >= options.max_attempts)
      throw Error("sample " + std::to_string(job.id) + " (" + tasks[static_cast<size_t>(job.id)] +
                  ") failed " + std::to_string(options.max_attempts) + " attempts; last: " + why);
    PoolItem again;
    again.id = job.id;
    again.attempt = job.attempt + 1;
    retries.push_back(again);
  };
  auto next = [&]() -> std::optional<PoolItem> {
    if (!retries.empty()) {
      PoolItem j = retries.front();
      retries.pop_front();
      return j;
    }
    if (next_new >= options.n) return std::nullopt;
    PoolItem j;
    j.id = next_new++;
    return j;
  };
  auto done = [&](const PoolItem& job, PoolResult&& outcome) {
    const bool crashed =
        outcome.status == PoolStatus::crashed || outcome.status == PoolStatus::timed_out;
    std::string result = outcome.status == PoolStatus::failed ? "!internal_error: " + outcome.error
                                                              : std::move(outcome.response);
    if (crashed || result.empty() || result[0] == '!') {
      std::string reason = crashed ? "worker_crash" : result.substr(1, result.find(':') - 1);
      summary.rejected[reason] += 1;
      if (reason == "decontam") summary.decontam_dropped += 1;
      if (reason == "decontam_numbers") summary.decontam_numbers_dropped += 1;
      retry(job, crashed ? "worker crash" : result);
      return;
    }
    ready[job.id] = {job, std::move(result)};
    while (!ready.empty() && ready.begin()->first == next_commit) {
      auto [j, rec] = std::move(ready.begin()->second);
      ready.erase(ready.begin());
      json r = json::parse(rec);
      // One record per (task, representations, instance, variation): exact message
      // duplicates and same-instance repeats with other wording are both rejected.
      const json& m = r["meta"];
      std::string key = m["task"].get<std::string>() + "|" + m["input_repr"].get<std::string>() +
                        "|" + m["output_repr"].get<std::string>() + "|" +
                        m["problem_id"].get<std::string>() + "|" + m.value("subtask", "") + "|" +
                        (m.contains("fault") ? m["fault"].dump() : "") + "|" +
                        (m.contains("change") ? m["change"].dump() : "");
      if (!seen.insert(hash_string(key)).second ||
          !seen.insert(hash_string(dump_compact(r["messages"]))).second) {
        summary.duplicates += 1;
        summary.rejected["duplicate"] += 1;
        retry(j, "duplicate");
        return;
      }
      records[static_cast<size_t>(next_commit)] = std::move(rec);
      ++next_commit;
      if (progress) progress->update(next_commit);
    }
  };
  ProcessPoolOptions pool_options;
  pool_options.workers = options.jobs;
  pool_options.limits.core_dumps = false;  // GLPK aborts on some faulty models
  ProcessPool(pool_options, work).run(next, done);
  require(next_commit == options.n, "internal error: not every sample was committed");
  if (progress) progress->finish();

  summary.heldout_families = choose_heldout_families(options.seed, options.heldout_families);
  summary.heldout_templates = choose_heldout_templates(options.seed);
  std::map<std::string, const Problem*> by_id;
  for (const auto& p : problems) by_id[p.id] = &p;
  std::map<std::string, std::vector<json>> splits;
  for (const char* s : {"train", "valid", "test", "heldout_template", "heldout_family"}) splits[s];
  std::vector<double> overlaps;
  for (const auto& rec : records) {
    json r = json::parse(rec);
    const Problem& p = *by_id.at(r["meta"]["problem_id"].get<std::string>());
    std::string split =
        split_for(p, options.seed, summary.heldout_families, summary.heldout_templates);
    r["meta"]["split"] = split;
    if (r["meta"].contains("max_bench_overlap"))
      overlaps.push_back(r["meta"]["max_bench_overlap"].get<double>());
    splits[split].push_back(std::move(r));
  }
  std::filesystem::create_directories(options.out_dir);
  for (const auto& [name, recs] : splits) {
    JsonlWriter w((std::filesystem::path(options.out_dir) / (name + ".jsonl")).string());
    for (const auto& r : recs) w.write(r);
    w.commit();
    summary.split_sizes[name] = static_cast<int64_t>(recs.size());
  }
  summary.written = options.n;
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  json sj{{"records", summary.written},
          {"split_sizes", summary.split_sizes},
          {"heldout_families", summary.heldout_families},
          {"heldout_templates", summary.heldout_templates},
          {"rejected", summary.rejected},
          {"duplicates", summary.duplicates},
          {"decontam_dropped", summary.decontam_dropped},
          {"decontam_numbers_dropped", summary.decontam_numbers_dropped},
          {"bench_signed_questions", summary.bench_signed_questions},
          {"decontam_threshold", options.decontam_threshold},
          {"decontam_ngram", kDecontamNgram},
          {"bench_questions", summary.bench_questions},
          {"diversity",
           diversity_json(summary.family_diversity, summary.family_forms, summary.bench_diversity)},
          {"seed", options.seed}};
  write_summary_file(options.out_dir, std::move(sj), summary.seconds, options.problems_path,
                     summary.input);
  SftSummary card_summary = summary;
  write_file_atomic((std::filesystem::path(options.out_dir) / "README.md").string(),
                    dataset_card(splits, card_summary, options, overlaps));
  return summary;
}

}  // namespace trex::orlib
