#include "trex/or/dataset/cpt.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/process_pool.hpp"
#include "trex/core/rng.hpp"
#include "trex/core/strings.hpp"
#include "trex/io/tokenizer.hpp"
#include "trex/or/dataset/decontam.hpp"
#include "trex/or/dataset/gmpl_edit.hpp"
#include "trex/or/dataset/real_fault.hpp"
#include "trex/or/dataset/summary_file.hpp"
#include "trex/or/families/family.hpp"
#include "trex/or/solver/linear_model.hpp"
#include "trex/or/synth/verify.hpp"

namespace trex::orlib {
namespace {

struct FamilyNotes {
  const char* tricks;
  const char* mistakes;
};

// Standard modelling tricks and common mistakes per family.
const std::map<std::string, FamilyNotes>& family_notes() {
  static const std::map<std::string, FamilyNotes> notes = {
      {"knapsack",
       {"Binary selection variables; several knapsacks need an assignment variable per "
        "item and knapsack plus an 'at most one knapsack' row per item; conflicts "
        "between items become x[i] + x[j] <= 1.",
        "Declaring the selection continuous (the LP relaxation takes fractions of "
        "items); summing weights over the wrong index; forgetting that an item may "
        "go into at most one knapsack."}},
      {"product_mix",
       {"One continuous production variable per product; resource rows "
        "sum_p a[r,p] x[p] <= b[r]; market limits as variable bounds; minimum "
        "batch sizes need a binary and a derived big-M equal to the largest "
        "feasible production.",
        "Profit per unit versus revenue per unit; resource usage per unit entered "
        "in the wrong units (minutes vs hours); flipped capacity rows."}},
      {"diet",
       {"Continuous quantities per food; nutrient rows with lower (and sometimes upper) "
        "bounds; per-food upper limits as bounds.",
        "Using <= for a minimum requirement; mixing per-100g and per-serving nutrient "
        "data; missing upper bounds on nutrients that have them."}},
      {"transportation",
       {"Flow variables x[i,j] >= 0; supply rows <= s[i] and demand rows >= d[j] "
        "(or = for balanced problems); route capacities as bounds.",
        "Swapping the indices of the cost matrix c[i,j]; using = for supplies "
        "when total supply exceeds demand (infeasible); forgetting forbidden "
        "routes."}},
      {"assignment",
       {"Binary x[i,j]; every worker at most/exactly one task and every task exactly "
        "one worker; the LP relaxation is integral for the pure problem, side "
        "constraints break that.",
        "Assigning rows instead of columns (swapped indices); equality on both "
        "sides when there are more workers than tasks (infeasible)."}},
      {"portfolio",
       {"Fractions or amounts per asset with a budget equality; a risk measure made "
        "linear (e.g. mean absolute deviation with auxiliary variables, or a worst-case "
        "scenario bound via an epigraph variable); sector caps as sums.",
        "Treating percentages as fractions inconsistently; missing the budget "
        "equality; maximising return without the risk limit."}},
      {"min_cost_flow",
       {"Arc flows with capacities; flow conservation at every node: outflow - "
        "inflow = supply; total supply equals total demand.",
        "Sign convention of the balance row; reversed arcs; forgetting "
        "transshipment nodes with zero balance."}},
      {"shortest_path",
       {"Unit flow from source to sink with conservation rows (+1 at the source, "
        "-1 at the sink, 0 elsewhere); the LP is integral.",
        "Wrong sign at source or sink (infeasible); treating an undirected edge "
        "as a single directed arc."}},
      {"max_flow",
       {"Arc flows bounded by capacities, conservation at inner nodes, objective the "
        "net outflow of the source (or a return arc from sink to source).",
        "Counting inflow into the source; missing conservation rows for inner "
        "nodes (unbounded)."}},
      {"fixed_charge_network",
       {"Flows plus binary open decisions; the big-M link x[a] <= u[a] y[a] "
        "with M the arc capacity (or the total demand when uncapacitated).",
        "Dropping the link (fixed costs never paid); an M that is too "
        "small and cuts off optimal flows."}},
      {"set_cover",
       {"Binary choice per set; a covering row sum_{s containing e} x[s] >= 1 per "
        "element.",
        "Using = 1 (partitioning, a different problem); iterating "
        "over the wrong membership index."}},
      {"unit_commitment",
       {"On/off binaries per unit and period, output bounded by min/max times "
        "the on variable, start-up variables u[t] >= on[t] - on[t-1], demand "
        "(and reserve) rows per period.",
        "Forgetting the minimum output when on; start-up logic off by one "
        "period; output not linked to the on variable."}},
      {"bin_packing",
       {"Binary assignment x[i,b] and bin-used y[b]; capacity row sum_i w[i] "
        "x[i,b] <= C y[b]; symmetry breaking y[b] >= y[b+1].",
        "Capacity row without y[b] (bins never counted); items allowed in two "
        "bins."}},
      {"facility_location",
       {"Open binaries y[j], assignment or flow x[i,j]; capacity linked to "
        "y; the strong link x[i,j] <= d[i] y[j] tightens the relaxation.",
        "Missing link between service and opening (big-M omitted); "
        "demand satisfied with <= instead of =."}},
      {"p_median",
       {"Binary open y[j] with sum y = p; assignment x[i,j] <= y[j]; each customer "
        "assigned once.",
        "Forgetting the p equality; weighting distances by the "
        "wrong demand index."}},
      {"cutting_stock",
       {"Patterns or per-roll assignment: integer counts of pieces cut from each "
        "roll with a length row per roll and a demand row per piece size.",
        "Length row ignoring kerf or waste rules; integrality dropped (fractional "
        "rolls)."}},
      {"logical_transport",
       {"Transportation with binary route-use variables and logical "
        "conditions (if-then as y1 <= y2, at most k of a set) linked to flows "
        "by x <= M y with M the route capacity.",
        "Logical implication written the wrong way round; missing flow-use "
        "link."}},
      {"lot_sizing",
       {"Production, inventory and setup variables per period; inventory balance "
        "I[t-1] + x[t] - d[t] = I[t]; setup link x[t] <= M y[t] with M the remaining "
        "demand.",
        "Balance off by one period; a big-M smaller than demand; "
        "setup cost charged without the link."}},
      {"shift_scheduling",
       {"Integer staff per shift start; coverage row per period summing the "
        "shifts that cover it.",
        "Wrong coverage pattern (shift length off "
        "by one); continuous staff numbers."}},
      {"job_shop",
       {"Start times, precedence within a job, disjunctive machine constraints with a "
        "binary order variable and big-M equal to the horizon; makespan via an epigraph "
        "variable C >= start + duration.",
        "Big-M too small (cuts feasible schedules); missing one side of the disjunction; "
        "minimising the sum of completions instead of the maximum."}},
      {"tsp",
       {"Binary arc variables, one in and one out per city, Miller-Tucker-Zemlin order "
        "variables u[i] - u[j] + n x[i,j] <= n - 1 to forbid subtours.",
        "Dropping MTZ (subtours appear); applying MTZ to the depot as well (infeasible)."}},
      {"cvrp",
       {"Arc binaries, degree rows, vehicle count at the depot, load variables with MTZ-style "
        "capacity propagation q[j] >= q[i] + d[j] - Q (1 - x[i,j]).",
        "Load propagation without the big-M slack; vehicles counted on one side of the "
        "depot only."}},
  };
  return notes;
}

std::string first_paragraphs(const std::string& text, size_t max_chars) {
  if (text.size() <= max_chars) return text;
  size_t cut = text.rfind("\n\n", max_chars);
  if (cut == std::string::npos || cut < max_chars / 3) cut = text.rfind(". ", max_chars);
  return text.substr(0, cut == std::string::npos ? max_chars : cut + 1);
}

std::string fence(const std::string& lang, const std::string& body) {
  std::string b = body;
  while (!b.empty() && b.back() == '\n') b.pop_back();
  return "```" + lang + "\n" + b + "\n```\n";
}

std::string num(double v) {
  return answer_value(v);
}

}  // namespace

CptDocument family_document(const std::string& family,
                            const std::vector<const Problem*>& examples) {
  const Family& f = find_family(family);
  std::string t = "# Modelling " + std::string(f.title()) + " problems\n\n";
  t += "Problem class: " + std::string(to_string(f.problem_class())) + ".\n\n## The story\n\n";
  if (!examples.empty()) t += first_paragraphs(examples.front()->nl, 1500) + "\n\n";
  t += "## Variables and constraint families\n\nA typical formulation:\n\n";
  if (!examples.empty()) t += first_paragraphs(examples.front()->alg, 4000) + "\n\n";
  auto it = family_notes().find(family);
  if (it != family_notes().end()) {
    t += "## Standard modelling tricks\n\n" + std::string(it->second.tricks) + "\n\n";
    t += "## Common mistakes\n\n" + std::string(it->second.mistakes) + "\n\n";
  }
  t += "## Variants seen in practice\n\n";
  std::set<std::string> variants;
  for (const Problem* p : examples)
    for (const auto& v : p->variants) variants.insert(v);
  if (variants.empty()) t += "The basic model without side conditions.\n";
  for (const auto& v : variants) t += "- " + replace_all(v, "_", " ") + "\n";
  if (examples.size() > 1) {
    t += "\n## A second instance\n\n" + first_paragraphs(examples[1]->nl, 1500) + "\n\n" +
         fence("mathprog", examples[1]->gmpl) + "\nIts optimal objective is " +
         num(examples[1]->objective) + ".\n";
  }
  return {"family", t, json{{"family", family}, {"source", "trex-generated"}}};
}

CptDocument worked_example(const Problem& p, const json& record) {
  const Family& f = find_family(p.family);
  std::string t = "# Worked example: " + std::string(f.title()) + " (" + p.difficulty + ")\n\n";
  t += "## Problem\n\n" + p.nl + "\n\n## Algebraic formulation\n\n" + p.alg + "\n\n";
  t += "## GNU MathProg model\n\n" + fence("mathprog", p.gmpl) + "\n";
  t += "## CPLEX LP file\n\nGLPK writes the same model as a CPLEX LP file:\n\n" +
       fence("lp", record.value("lp", std::string())) + "\n";
  t += "## Solver results\n\n";
  if (record.contains("solvers")) {
    for (const auto& [name, s] : record["solvers"].items()) {
      t += "- " + name + ": status " + s.value("status", std::string("?"));
      if (s.contains("objective") && s["objective"].is_number())
        t += ", objective " + num(s["objective"].get<double>());
      t += "\n";
    }
  }
  t += "\nThe model prints:\n\n```\n" + objective_line(p.objective) + "\n```\n\n";
  t += "## The solution explained\n\n";
  t += "Both solvers prove optimality with objective " + num(p.objective) + ". ";
  std::vector<std::string> values;
  if (record.contains("x_ref"))
    for (const auto& [k, v] : record["x_ref"].items())
      if (v.is_number()) values.push_back(k + " = " + num(v.get<double>()));
  if (values.empty()) {
    t += "All decision variables are zero.\n";
  } else {
    t += "The decision variables with nonzero values are:\n\n";
    for (size_t i = 0; i < values.size() && i < 80; ++i) t += "- " + values[i] + "\n";
    if (values.size() > 80) t += "- ... and " + std::to_string(values.size() - 80) + " more\n";
    t += "\nEvery other variable is zero at the optimum.\n";
  }
  return {"worked_example", t,
          json{{"family", p.family}, {"problem_id", p.id}, {"source", "trex-generated"}}};
}

CptDocument lp_literacy(const Problem& p, const std::string& lp) {
  std::string t =
      "# Reading a CPLEX LP file: " + std::string(find_family(p.family).title()) + "\n\n";
  int rows = 0, generals = 0, binaries = 0, bounds = 0;
  std::string section;
  for (const auto& raw : split(lp, '\n')) {
    std::string line = trim(raw);
    std::string low = to_lower(line);
    if (low == "subject to" || low == "bounds" || low == "generals" || low == "binaries" ||
        low == "end" || starts_with(low, "minimize") || starts_with(low, "maximize")) {
      section = low;
      continue;
    }
    if (line.empty() || line[0] == '\\') continue;
    if (section == "subject to" && line.find(':') != std::string::npos) ++rows;
    if (section == "bounds") ++bounds;
    if (section == "generals") generals += static_cast<int>(split(line, ' ').size());
    if (section == "binaries") binaries += static_cast<int>(split(line, ' ').size());
  }
  t += "An LP file lists the objective (`Minimize` or `Maximize` with a named expression), the "
       "rows under `Subject To` (one `name: expression sense rhs` each, constants moved to the "
       "right-hand side), the `Bounds` section (variables default to `0 <= x < +inf`; `-inf <= x` "
       "or `x free` relaxes that), and the `Generals` and `Binaries` sections that mark integer "
       "and 0/1 variables. GLPK names the columns after the MathProg variables, with the indices "
       "in parentheses (`x(P1,R2)` for `x[P1,R2]`), and keeps a constant objective term only as "
       "a comment.\n\n";
  t += "This file, written by GLPK from a MathProg model, has " + std::to_string(rows) +
       " constraint rows, " + std::to_string(bounds) + " bound lines, " + std::to_string(generals) +
       " general-integer and " + std::to_string(binaries) +
       " binary variable names. Its optimal "
       "objective is " +
       num(p.objective) + ".\n\n" + fence("lp", lp);
  return {"lp_literacy", t,
          json{{"family", p.family}, {"problem_id", p.id}, {"source", "trex-generated"}}};
}

std::vector<CptDocument> reference_documents() {
  std::vector<CptDocument> out;
  json meta{{"source", "trex-written"}};
  out.push_back(
      {"status_semantics",
       "# Solver status semantics (GLPK and CBC)\n\n"
       "- **Optimal**: a feasible solution was found and proven optimal (for a MIP: within "
       "the default gap tolerance). The objective value and the variable values are "
       "meaningful. In GLPK this is `GLP_OPT`; `glp_mip_status` reports it for MIPs.\n"
       "- **Infeasible**: no assignment satisfies every constraint. Typical causes: a "
       "flipped inequality, an equality where an inequality was meant, demand exceeding "
       "capacity, a big-M too small. GLPK reports `GLP_NOFEAS` (or `PROBLEM HAS NO "
       "PRIMAL FEASIBLE SOLUTION`); CBC reports proven infeasible.\n"
       "- **Unbounded**: the objective can improve without limit. Typical causes: a "
       "missing constraint family, a sign error in the objective, a variable without the "
       "bound it needs. GLPK's simplex reports `GLP_UNBND` (no dual feasible "
       "solution); for a MIP, an unbounded relaxation shows up as `GLP_ENODFS`.\n"
       "- **Time limit**: the solver stopped before proving optimality; the best solution "
       "(if any) is only an upper (minimisation) or lower (maximisation) bound. It must "
       "not be reported as optimal.\n"
       "- **Translation error**: the MathProg translator rejected the model text before "
       "any solver ran; GLPK names the file and line (`model.mod:12: syntax error in "
       "variable statement`). Fix the text, not the data.\n\n"
       "A correct answer states exactly one of these outcomes. When a model that should "
       "be feasible reports infeasible or unbounded, the model is wrong, not the solver: "
       "check constraint senses, missing rows, variable types and units.\n",
       meta});
  out.push_back({"mathprog_reference",
                 "# GNU MathProg in one page\n\n"
                 "A model is a sequence of statements, each ending with `;`:\n\n"
                 "- `set I;` declares a set; `set A within I cross I;` a set of pairs.\n"
                 "- `param c{I, J} >= 0;` declares indexed data, optionally with `integer`, "
                 "`binary`, bounds or `default 0`.\n"
                 "- `var x{I, J} >= 0;` declares variables; add `integer` or `binary` for integer "
                 "variables.\n"
                 "- `minimize Cost: sum{i in I, j in J} c[i, j] * x[i, j];` (or `maximize`) names "
                 "the objective.\n"
                 "- `s.t. Supply{i in I}: sum{j in J} x[i, j] <= s[i];` declares one constraint "
                 "per element of the indexing set (`subject to` is the long form).\n"
                 "- `solve;` ends the model part; statements after it (`printf`, `display`) run on "
                 "the optimal solution.\n"
                 "- `data;` starts the data section: `set I := a b c;`, `param s := a 10 b 20;`, "
                 "tables `param c : j1 j2 := i1 3 4 i2 5 6;`; `end;` closes the file.\n\n"
                 "Indexing expressions use braces: `sum{i in I}`; parentheses there are a syntax "
                 "error. Subscripts use brackets `x[i, j]` in the declared order; swapping them "
                 "either fails translation (`out of domain`) or silently reads the wrong data "
                 "when both sets share elements. Non-linear products of two variables are not "
                 "allowed; linearise them (big-M with a binary, McCormick bounds) instead.\n",
                 meta});
  return out;
}

std::pair<int64_t, int64_t> deduplicate(std::vector<CptDocument>& docs, double jaccard) {
  constexpr int kHashes = 32, kBands = 8, kRows = kHashes / kBands;
  std::unordered_set<uint64_t> exact;
  std::vector<std::array<uint64_t, kHashes>> kept_sigs;
  std::vector<std::unordered_map<uint64_t, std::vector<size_t>>> bands(kBands);
  std::vector<CptDocument> kept;
  int64_t exact_dups = 0, near_dups = 0;
  for (auto& d : docs) {
    std::string norm = normalize_text(d.text);
    if (!exact.insert(hash_string(norm)).second) {
      ++exact_dups;
      continue;
    }
    auto words = words_of(norm);
    std::array<uint64_t, kHashes> sig;
    sig.fill(UINT64_MAX);
    std::vector<uint64_t> wh(words.size());
    for (size_t i = 0; i < words.size(); ++i) wh[i] = hash_string(words[i]);
    const size_t shingles = wh.size() < 5 ? (wh.empty() ? 0 : 1) : wh.size() - 4;
    for (size_t i = 0; i < shingles; ++i) {
      uint64_t h = 0;
      for (size_t k = i; k < std::min(wh.size(), i + 5); ++k) h = hash_combine(h, wh[k]);
      for (int k = 0; k < kHashes; ++k)
        sig[static_cast<size_t>(k)] = std::min(
            sig[static_cast<size_t>(k)], mix64(h ^ (0x9E37ULL * static_cast<uint64_t>(k + 1))));
    }
    bool near = false;
    std::vector<uint64_t> keys(kBands);
    for (int b = 0; b < kBands && !near; ++b) {
      uint64_t key = static_cast<uint64_t>(b);
      for (int r = 0; r < kRows; ++r)
        key = hash_combine(key, sig[static_cast<size_t>(b * kRows + r)]);
      keys[static_cast<size_t>(b)] = key;
      auto it = bands[static_cast<size_t>(b)].find(key);
      if (it == bands[static_cast<size_t>(b)].end()) continue;
      for (size_t other : it->second) {
        int same = 0;
        for (int k = 0; k < kHashes; ++k)
          same += sig[static_cast<size_t>(k)] == kept_sigs[other][static_cast<size_t>(k)];
        if (static_cast<double>(same) / kHashes >= jaccard) {
          near = true;
          break;
        }
      }
    }
    if (near) {
      ++near_dups;
      continue;
    }
    size_t id = kept.size();
    for (int b = 0; b < kBands; ++b)
      bands[static_cast<size_t>(b)][keys[static_cast<size_t>(b)]].push_back(id);
    kept_sigs.push_back(sig);
    kept.push_back(std::move(d));
  }
  docs = std::move(kept);
  return {exact_dups, near_dups};
}

namespace {

// Line-level difference between two models: the first differing line of each.
std::pair<std::string, std::string> changed_lines(const std::string& a, const std::string& b) {
  auto la = split(a, '\n'), lb = split(b, '\n');
  size_t i = 0;
  while (i < la.size() && i < lb.size() && la[i] == lb[i]) ++i;
  return {i < la.size() ? la[i] : "", i < lb.size() ? lb[i] : ""};
}

// An error -> fix narrative for problem `p`; "!" + reason when the fault is not real.
std::string narrative(const Problem& p, uint64_t seed, int64_t index, double time_limit) {
  Rng rng(seed, {0xC97, static_cast<uint64_t>(index)});
  const auto real = first_real_fault(p.gmpl, p.objective, time_limit, rng);
  if (!real) return "!no_real_fault";
  const Fault& fault = real->fault;
  const FaultKind kind = fault.kind;
  const FaultSymptom& symptom = real->symptom;
  std::string observed;
  switch (symptom.kind) {
    case FaultSymptom::Kind::status:
      observed = "GLPK reports the model " + std::string(to_string(symptom.status)) + ".";
      break;
    case FaultSymptom::Kind::objective:
      observed = "The model solves, but the optimum is " + num(symptom.objective) +
                 " instead of the expected " + num(p.objective) + ".";
      break;
    case FaultSymptom::Kind::translation_error:
      observed =
          "GLPK stops while translating the model:\n\n```\n" + symptom.translation_error + "\n```";
      break;
  }
  auto [bad, good] = changed_lines(fault.model, p.gmpl);
  std::string t = "# Debugging a " + to_lower(std::string(find_family(p.family).title())) +
                  " model: " + replace_all(to_string(kind), "_", " ") + "\n\n";
  t += "A modeller wrote a GNU MathProg model for this problem:\n\n" +
       first_paragraphs(p.nl, 1200) + "\n\n## Symptom\n\n" + observed + "\n\n## Diagnosis\n\n" +
       fault.diagnosis + "\n\n";
  const bool deletion =
      kind == FaultKind::dropped_constraint || kind == FaultKind::missing_big_m_link;
  if (!deletion && (!bad.empty() || !good.empty()))
    t += "The faulty line:\n\n```\n" + bad + "\n```\n\nThe correct line:\n\n```\n" + good +
         "\n```\n\n";
  t += "## Fixed model\n\n" + fence("mathprog", p.gmpl) +
       "\nAfter the fix the model solves to "
       "optimality with objective " +
       num(p.objective) + ".\n";
  return json{{"text", t}, {"kind", to_string(kind)}}.dump();
}

std::vector<CptDocument> glpk_example_documents(const std::string& dir) {
  std::vector<CptDocument> out;
  if (dir.empty() || !std::filesystem::is_directory(dir)) return out;
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    auto ext = e.path().extension().string();
    if (ext == ".mod" || ext == ".dat" || ext == ".lp") paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  for (const auto& path : paths) {
    std::string text = read_file(path.string());
    if (text.size() > 400000) continue;
    std::string rel = std::filesystem::relative(path, dir).string();
    std::string kind = path.extension() == ".lp"    ? "LP file"
                       : path.extension() == ".dat" ? "MathProg data file"
                                                    : "GNU MathProg model";
    std::string t = "# GLPK example: " + rel + "\n\nThis " + kind +
                    " is one of the examples "
                    "distributed with GLPK (GNU Linear Programming Kit, Debian package glpk-utils, "
                    "Copyright (C) 2000-2020 Free Software Foundation, Inc.; licensed under the "
                    "GNU General Public License version 3 or later).\n\n" +
                    fence(path.extension() == ".lp" ? "lp" : "mathprog", text);
    out.push_back({"glpk_example", t,
                   json{{"source", "glpk-utils examples"},
                        {"file", rel},
                        {"license", "GPL-3.0-or-later"},
                        {"copyright", "2000-2020 Free Software Foundation, Inc."}}});
  }
  return out;
}

}  // namespace

CptSummary build_cpt(const CptOptions& options) {
  require(!options.out_dir.empty(), "an output directory is required");
  auto start = std::chrono::steady_clock::now();
  CptSummary summary;
  std::optional<io::Tokenizer> tokenizer;
  if (!options.tokenizer_path.empty()) {  // loaded first: a bad path fails before the work
    tokenizer = io::Tokenizer::load(options.tokenizer_path);
    summary.tokens = 0;
    summary.token_measure = "tokens of " + options.tokenizer_path + " (vocabulary " +
                            std::to_string(tokenizer->vocab_size()) + ")";
  } else {
    summary.token_measure = "bytes/4 (no tokenizer given)";
  }
  std::vector<json> records;
  std::vector<Problem> problems;
  JsonlOptions read;
  read.strict = options.strict;
  summary.input = read_jsonl(options.problems_path, read, [&](const json& r, long line) {
    Problem p;
    try {
      p = parse_problem(r);
      if (auto lp = r.find("lp"); lp != r.end() && !lp->is_string())
        throw Error("field 'lp' is not a string");
    } catch (Error& e) {
      throw e.file(options.problems_path).line(line);
    }
    problems.push_back(std::move(p));
    records.push_back(r);
  });
  require(!problems.empty(),
          "no problems in " + options.problems_path +
              (summary.input.skipped > 0 ? " (" + summary.input.summary() + ")" : std::string()));

  // Error -> fix narratives: faulty models are solved in worker processes.
  const int64_t n_narr = static_cast<int64_t>(problems.size()) * options.narratives_per_problem;
  std::vector<std::string> narratives(static_cast<size_t>(n_narr));
  int64_t next_job = 0;
  ProcessPoolOptions pool_options;
  pool_options.workers = options.jobs;
  pool_options.limits.core_dumps = false;  // GLPK aborts on some faulty models
  ProcessPool pool(pool_options, [&](int, const PoolItem& job) {
    const Problem& p = problems[static_cast<size_t>(job.id) % problems.size()];
    return narrative(p, options.seed, job.id, options.time_limit_seconds);
  });
  pool.run(
      [&]() -> std::optional<PoolItem> {
        if (next_job >= n_narr) return std::nullopt;
        PoolItem job;
        job.id = next_job++;
        return job;
      },
      [&](const PoolItem& job, PoolResult&& result) {
        if (!result.ok() || result.response.empty() || result.response[0] == '!') {
          ++summary.narratives_rejected;
          return;
        }
        narratives[static_cast<size_t>(job.id)] = std::move(result.response);
      });

  std::vector<CptDocument> docs = reference_documents();
  std::map<std::string, std::vector<const Problem*>> by_family;
  for (const auto& p : problems) by_family[p.family].push_back(&p);
  for (const auto& [family, list] : by_family) {
    // Several expositions per family, each with different example instances.
    for (size_t k = 0; k < list.size() && k < 40; k += 2) {
      std::vector<const Problem*> examples = {list[k]};
      if (k + 1 < list.size()) examples.push_back(list[k + 1]);
      docs.push_back(family_document(family, examples));
    }
  }
  for (auto& d : glpk_example_documents(options.glpk_examples_dir)) docs.push_back(std::move(d));
  summary.sources["glpk-utils examples"] = {"glpk-utils", "GPL-3.0-or-later",
                                            "2000-2020 Free Software Foundation, Inc."};
  for (const CollectedSource& source : options.collected_sources) {
    CollectedStats stats;
    CptSourceStats& entry = summary.sources[source.package];
    entry.package = source.package;
    entry.license = source.license;
    entry.copyright = source.copyright;
    entry.installed = std::filesystem::is_directory(source.dir);
    for (CollectedDocument& c : collected_documents(source, &stats))
      docs.push_back({"collected", std::move(c.text),
                      json{{"source", source.package},
                           {"file", c.file},
                           {"license", source.license},
                           {"copyright", source.copyright}}});
    entry.files = stats.files;
    entry.too_short = stats.too_short;
    entry.failed = stats.failed;
    entry.errors = stats.errors;
  }
  for (size_t i = 0; i < problems.size(); ++i) {
    docs.push_back(worked_example(problems[i], records[i]));
    docs.push_back(lp_literacy(problems[i], records[i].value("lp", std::string())));
  }
  for (size_t k = 0; k < narratives.size(); ++k) {
    if (narratives[k].empty()) continue;
    json n = json::parse(narratives[k]);
    const Problem& p = problems[k % problems.size()];
    docs.push_back({"error_fix", n["text"].get<std::string>(),
                    json{{"family", p.family},
                         {"problem_id", p.id},
                         {"fault", n["kind"]},
                         {"source", "trex-generated"}}});
  }
  std::tie(summary.exact_duplicates, summary.near_duplicates) =
      deduplicate(docs, options.near_duplicate_jaccard);
  if (!options.bench_dir.empty()) {
    NgramIndex index;
    index.add_directory(options.bench_dir);
    summary.bench_questions = index.questions();
    std::vector<CptDocument> clean;
    for (CptDocument& d : docs) {
      if (index.max_overlap(d.text).fraction > options.decontam_threshold) {
        ++summary.decontam_dropped;
      } else if (index.max_signature_share(d.text).fraction >= kSignatureShare) {
        ++summary.decontam_numbers_dropped;
      } else {
        clean.push_back(std::move(d));
      }
    }
    docs = std::move(clean);
  }

  std::filesystem::create_directories(options.out_dir);
  JsonlWriter writer((std::filesystem::path(options.out_dir) / "corpus.jsonl").string());
  for (auto& d : docs) {
    d.meta["kind"] = d.kind;
    writer.write(json{{"text", d.text}, {"meta", d.meta}});
    auto& k = summary.kinds[d.kind];
    k.documents += 1;
    k.bytes += static_cast<int64_t>(d.text.size());
    CptSourceStats& source = summary.sources[d.meta.value("source", std::string("trex-generated"))];
    source.documents += 1;
    source.bytes += static_cast<int64_t>(d.text.size());
    summary.documents += 1;
    summary.bytes += static_cast<int64_t>(d.text.size());
    if (tokenizer) {
      const auto n = static_cast<int64_t>(tokenizer->encode(d.text).size());
      k.tokens = std::max<int64_t>(k.tokens, 0) + n;
      source.tokens = std::max<int64_t>(source.tokens, 0) + n;
      summary.tokens += n;
    }
  }
  writer.commit();
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  json kinds = json::object();
  for (const auto& [k, s] : summary.kinds) {
    kinds[k] = {{"documents", s.documents}, {"bytes", s.bytes}, {"tokens_equiv", s.bytes / 4}};
    if (s.tokens >= 0) kinds[k]["tokens"] = s.tokens;
  }
  // The corpus manifest: every source with its licence and what it gave.
  json sources = json::object();
  for (const auto& [name, src] : summary.sources) {
    json entry{{"documents", src.documents}, {"bytes", src.bytes}, {"tokens_equiv", src.bytes / 4}};
    if (src.tokens >= 0) entry["tokens"] = src.tokens;
    if (!src.license.empty()) {
      entry["package"] = src.package;
      entry["license"] = src.license;
      entry["copyright"] = src.copyright;
    } else {
      entry["license"] = name == "trex-written" ? "written in this repository (its licence)"
                                                : "generated by trex from the problems file";
    }
    if (src.files > 0 || !src.installed) {
      entry["files_read"] = src.files;
      entry["too_short"] = src.too_short;
      entry["installed"] = src.installed;
      if (src.failed > 0) {
        entry["failed"] = src.failed;
        entry["errors"] = src.errors;
      }
    }
    sources[name] = entry;
  }
  json sj{{"documents", summary.documents},
          {"sources", sources},
          {"bytes", summary.bytes},
          {"tokens_equiv", summary.bytes / 4},
          {"token_measure", summary.token_measure},
          {"kinds", kinds},
          {"exact_duplicates_removed", summary.exact_duplicates},
          {"near_duplicates_removed", summary.near_duplicates},
          {"near_duplicate_jaccard", options.near_duplicate_jaccard},
          {"narratives_rejected", summary.narratives_rejected},
          {"bench_dir", options.bench_dir},
          {"bench_questions", summary.bench_questions},
          {"decontam_threshold", options.decontam_threshold},
          {"decontam_dropped", summary.decontam_dropped},
          {"decontam_numbers_dropped", summary.decontam_numbers_dropped}};
  write_summary_file(options.out_dir, std::move(sj), summary.seconds, options.problems_path,
                     summary.input);
  return summary;
}

std::string format_cpt_summary(const CptSummary& s) {
  // Real token counts when a tokenizer was given, else bytes/4.
  const bool counted = s.tokens >= 0;
  const char* tokens_header = counted ? "           tokens" : "  tokens(bytes/4)";
  std::string out =
      std::string("kind                 documents        bytes ") + tokens_header + "\n";
  auto row = [&](const std::string& name, int64_t docs, int64_t bytes, int64_t tokens) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%-20s %9lld %12lld %17lld\n", name.c_str(),
                  static_cast<long long>(docs), static_cast<long long>(bytes),
                  static_cast<long long>(counted ? std::max<int64_t>(tokens, 0) : bytes / 4));
    return std::string(buf);
  };
  for (const auto& [k, v] : s.kinds) out += row(k, v.documents, v.bytes, v.tokens);
  out += row("total", s.documents, s.bytes, s.tokens);
  out +=
      std::string("\nsource               documents        bytes ") + tokens_header + "  licence\n";
  for (const auto& [name, v] : s.sources) {
    std::string line = row(name, v.documents, v.bytes, v.tokens);
    line.pop_back();
    line += "  " + (!v.license.empty()       ? v.license
                    : name == "trex-written" ? std::string("written in this repository")
                                             : std::string("generated"));
    if (!v.installed)
      line += " (not installed: scripts/install-deps.sh installs " + v.package + ")";
    out += line + "\n";
    for (const std::string& e : v.errors) out += "  failed: " + e + "\n";
  }
  out += "removed: " + std::to_string(s.exact_duplicates) + " exact duplicates, " +
         std::to_string(s.near_duplicates) +
         " near duplicates; narratives rejected (fault not "
         "real): " +
         std::to_string(s.narratives_rejected) + "; " + format_fixed(s.seconds, 1) + " s\n";
  out += s.bench_questions > 0
             ? "decontamination against " + std::to_string(s.bench_questions) +
                   " benchmark questions: " + std::to_string(s.decontam_dropped) +
                   " documents dropped by word 8-grams, " +
                   std::to_string(s.decontam_numbers_dropped) + " by number signature\n"
             : "decontamination: off (no --bench-dir)\n";
  out += "problems file: " + s.input.summary() + "\n";
  return out;
}

}  // namespace trex::orlib
