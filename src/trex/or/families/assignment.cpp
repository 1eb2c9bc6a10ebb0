// Assignment problems: the classic assignment problem (each task to exactly one
// worker, each worker at most one task; minimise cost or maximise suitability)
// and the generalised assignment problem (agents with capacities, tasks whose
// resource use depends on the agent). Side conditions: a worker who cannot do a
// task, a worker who must be used, two tasks on the same / different agents. IP.
//
// Generator: plants an assignment (an injection for the classic problem, a
// load-balanced mapping for GAP), sets every agent capacity a little above its
// planted load, and draws each side condition so the planted assignment meets it.
#include <algorithm>
#include <cmath>

#include "trex/core/strings.hpp"
#include "trex/or/families/alg_writer.hpp"
#include "trex/or/families/draws.hpp"
#include "trex/or/families/family_list.hpp"
#include "trex/or/families/gmpl_writer.hpp"
#include "trex/or/families/text.hpp"
#include "trex/or/families/themed.hpp"

namespace trex::orlib {
namespace {

enum class Layout { table, prose };

struct Theme {
  bool gap;           // generalised assignment (else classic)
  bool maximize;      // classic only: maximise a score
  std::string intro;  // {org}
  std::string agent_noun, task_noun;
  std::vector<std::string> agents;  // empty: people's first names
  std::string agent_prefix;         // how an agent is named in prose: "the " + "lathe"
  std::vector<std::string> tasks;
  std::string value_name;  // "time", "fee", "suitability score", "cost"
  std::string value_unit;  // "minutes", "dollars", "points"
  int value_lo, value_hi;
  // GAP only: the agent-dependent resource and its capacity wording.
  std::string resource_name, resource_unit;
  int resource_lo, resource_hi;
  Layout layout;
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {false,
       false,
       "The IT support desk of {org} has a batch of tasks to hand out to its technicians.",
       "technician",
       "task",
       {},
       "",
       text::tasks(),
       "time",
       "minutes",
       12,
       95,
       "",
       "",
       0,
       0,
       Layout::table},
      {false,
       false,
       "A translation agency, {org}, has received several documents and must give each one to a "
       "freelance translator.",
       "translator",
       "document",
       {},
       "",
       {"contract", "user manual", "brochure", "website", "patent", "annual report", "subtitles",
        "menu", "press release", "user guide", "tender", "catalogue", "newsletter", "thesis"},
       "fee",
       "dollars",
       80,
       420,
       "",
       "",
       0,
       0,
       Layout::prose},
      {false,
       true,
       "The volunteer coordinator of a charity run sponsored by {org} must staff the event's "
       "stations.",
       "volunteer",
       "station",
       {},
       "",
       {"registration", "first aid", "catering", "parking", "information desk", "merchandise",
        "security", "cleanup", "ticketing", "stage crew", "water point", "finish line"},
       "suitability score",
       "points",
       1,
       10,
       "",
       "",
       0,
       0,
       Layout::table},
      {true,
       false,
       "{org} must allocate this week's machining jobs to its machines.",
       "machine",
       "job",
       {"lathe", "mill", "press", "router", "laser cutter", "waterjet", "grinder", "drill press"},
       "the ",
       {"bracket", "housing", "gear", "flange", "shaft", "valve body", "hinge", "panel", "bushing",
        "spacer", "manifold", "pulley", "clamp", "lever", "coupling", "sprocket"},
       "cost",
       "dollars",
       40,
       300,
       "processing time",
       "hours",
       2,
       14,
       Layout::table},
      {true,
       false,
       "{org} runs several consulting teams and must give each of its new client projects to "
       "exactly one team.",
       "team",
       "project",
       {"Alpha", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot"},
       "team ",
       text::projects(),
       "cost",
       "thousand dollars",
       10,
       90,
       "effort",
       "person-days",
       5,
       40,
       Layout::prose},
      {true,
       false,
       "The dispatcher at {org} must assign today's delivery zones to the available vans; each "
       "zone is served entirely by one van.",
       "van",
       "zone",
       {"Van 1", "Van 2", "Van 3", "Van 4", "Van 5", "Van 6"},
       "",
       {"Northgate", "Riverside", "Old Town", "Harbour", "Hillcrest", "Meadows", "Station",
        "University", "Airport", "Market", "Parkside", "Docklands", "Westend", "Eastfield"},
       "fuel cost",
       "dollars",
       15,
       80,
       "driving time",
       "minutes",
       30,
       150,
       Layout::table},
  };
  return t;
}

class AssignmentInstance : public ThemedInstance<themes> {
 public:
  std::vector<std::string> agent_names, agent_keys, task_names, task_keys;
  std::vector<std::vector<double>> value;  // value[a][t]: cost or score
  std::vector<std::vector<double>> use;    // GAP: use[a][t]
  std::vector<double> capacity;            // GAP: per agent
  struct Pair {
    size_t a, b;
  };
  std::vector<Pair> cannot;       // (agent, task): agent a may not do task b
  std::vector<size_t> must_work;  // classic with spare workers: agent must get a task
  std::vector<Pair> together;     // GAP: tasks a and b on the same agent
  std::vector<Pair> apart;        // GAP: tasks a and b on different agents

  bool gap() const { return theme().gap; }
  size_t m() const { return agent_keys.size(); }
  size_t n() const { return task_keys.size(); }
  // Classic with as many workers as tasks: every worker gets exactly one task.
  bool square() const { return !gap() && m() == n(); }

  json size() const override {
    return {
        {"agents", m()},
        {"tasks", n()},
        {"side_constraints", cannot.size() + must_work.size() + together.size() + apart.size()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v = {gap() ? "generalized" : "classic"};
    if (theme().maximize) v.push_back("maximize_score");
    if (!cannot.empty()) v.push_back("forbidden_pair");
    if (!must_work.empty()) v.push_back("must_assign_worker");
    if (!together.empty()) v.push_back("same_agent");
    if (!apart.empty()) v.push_back("different_agents");
    return v;
  }

  std::string value_text(double v) const {
    const Theme& th = theme();
    if (th.value_unit == "dollars") return text::money(v);
    if (th.value_unit == "thousand dollars") return text::money(v) + " thousand";
    return text::num(v) + " " + th.value_unit;
  }

  std::string matrix_table(const std::vector<std::vector<double>>& data) const {
    std::vector<std::string> header = {text::capitalize(theme().agent_noun) + " \\ " +
                                       text::capitalize(theme().task_noun)};
    for (const auto& t : task_names) header.push_back(t);
    std::vector<std::vector<std::string>> rows;
    for (size_t a = 0; a < m(); ++a) {
      std::vector<std::string> row = {agent_names[a]};
      for (size_t t = 0; t < n(); ++t) row.push_back(text::num(data[a][t]));
      rows.push_back(row);
    }
    return text::markdown_table(header, rows);
  }

  std::string nl() const override {
    const Theme& th = theme();
    std::string out = replace_all(th.intro, "{org}", org) + " ";
    out += "There are " + std::to_string(m()) + " " + th.agent_noun + "s (" +
           text::english_list(agent_names) + ") and " + std::to_string(n()) + " " + th.task_noun +
           "s (" + text::english_list(task_names) + ").";
    const std::string value_caption = th.value_name + " (in " + th.value_unit + ") of each " +
                                      th.agent_noun + "-" + th.task_noun + " pair";
    if (th.layout == Layout::table) {
      out += " The table gives the " + value_caption + ":\n\n" + matrix_table(value) + "\n";
      if (gap()) {
        out += "The " + th.resource_name + " (in " + th.resource_unit + ") that each " +
               th.task_noun + " takes depends on the " + th.agent_noun + ":\n\n" +
               matrix_table(use) + "\n";
      }
    } else {
      out += "\n\n";
      for (size_t a = 0; a < m(); ++a) {
        std::vector<std::string> parts;
        for (size_t t = 0; t < n(); ++t) {
          std::string p = value_text(value[a][t]) + " for the " + task_names[t];
          if (gap()) p += " (" + text::num(use[a][t]) + " " + th.resource_unit + ")";
          parts.push_back(p);
        }
        out += "- " + text::capitalize(agent_label(a)) + ": " + text::english_list(parts) + ".\n";
      }
      out += "\n";
      if (!gap())
        out += "Each amount is the " + th.value_name + " the " + th.agent_noun + " would charge. ";
      else
        out += "Each entry is the " + th.value_name + " of giving the " + th.task_noun +
               " to that " + th.agent_noun + ", with the " + th.resource_name +
               " it would take in brackets. ";
    }
    if (gap()) {
      std::vector<std::string> caps;
      for (size_t a = 0; a < m(); ++a)
        caps.push_back(agent_label(a) + " " + text::num(capacity[a]));
      out += "The " + th.resource_name + " available (in " + th.resource_unit +
             ") is: " + text::english_list(caps) + ". Every " + th.task_noun +
             " must be given to exactly one " + th.agent_noun + ", and the total " +
             th.resource_name + " of the " + th.task_noun + "s given to a " + th.agent_noun +
             " cannot exceed what it has available. ";
    } else if (square()) {
      out += "Every " + th.task_noun + " must be given to exactly one " + th.agent_noun +
             ", and every " + th.agent_noun + " takes exactly one " + th.task_noun + ". ";
    } else {
      out += "Every " + th.task_noun + " must be given to exactly one " + th.agent_noun +
             ", and each " + th.agent_noun + " can take at most one " + th.task_noun +
             " (some will have none). ";
    }
    for (const auto& p : cannot)
      out += text::capitalize(agent_label(p.a)) + " cannot take the " + task_names[p.b] + ". ";
    for (size_t a : must_work)
      out += text::capitalize(agent_label(a)) + " must be given a " + th.task_noun + ". ";
    for (const auto& p : together)
      out += "The " + task_names[p.a] + " and the " + task_names[p.b] + " must go to the same " +
             th.agent_noun + ". ";
    for (const auto& p : apart)
      out += "The " + task_names[p.a] + " and the " + task_names[p.b] + " must go to different " +
             th.agent_noun + "s. ";
    out += "Each " + th.task_noun + " is assigned whole (no splitting). ";
    out += "Which assignment " + std::string(th.maximize ? "maximises" : "minimises") +
           " the total " + th.value_name + ", and what is that total?";
    return out;
  }

  // "Alice", "the lathe", "team Alpha"
  std::string agent_label(size_t a) const { return theme().agent_prefix + agent_names[a]; }

  std::string alg() const override {
    const Theme& th = theme();
    AlgebraicFormulation f(gap() ? "Generalised assignment problem" : "Assignment problem");
    f.set("$A = " + latex_set(agent_keys) + "$", th.agent_noun + "s");
    f.set("$T = " + latex_set(task_keys) + "$", th.task_noun + "s");
    f.parameter("$c_{a,t}$", th.value_name + " when $a$ does $t$ (" + th.value_unit + ")",
                latex_matrix(value));
    if (gap()) {
      f.parameter("$r_{a,t}$", th.resource_name + " $t$ takes on $a$ (" + th.resource_unit + ")",
                  latex_matrix(use));
      f.parameter("$R_a$", th.resource_name + " available on $a$", latex_vector(capacity));
    }
    f.variable("$x_{a,t} \\in \\{0,1\\}$", "1 if $t$ is assigned to $a$");
    f.objective(std::string(th.maximize ? "\\max" : "\\min") +
                    " \\sum_{a \\in A} \\sum_{t \\in T} c_{a,t} x_{a,t}",
                std::string(th.maximize ? "Maximise" : "Minimise") + " the total " + th.value_name);
    f.constraint("each task once", "\\sum_{a \\in A} x_{a,t} = 1 \\quad \\forall t \\in T");
    if (gap())
      f.constraint("capacity",
                   "\\sum_{t \\in T} r_{a,t} x_{a,t} \\le R_a \\quad \\forall a \\in A");
    else
      f.constraint(square() ? "each worker exactly once" : "each worker at most once",
                   std::string("\\sum_{t \\in T} x_{a,t} ") + (square() ? "=" : "\\le") +
                       " 1 \\quad \\forall a \\in A");
    for (const auto& p : cannot)
      f.constraint("forbidden pair", "x_{" + latex_name(agent_keys[p.a]) + "," +
                                         latex_name(task_keys[p.b]) + "} = 0");
    for (size_t a : must_work)
      f.constraint("worker used", "\\sum_{t \\in T} x_{" + latex_name(agent_keys[a]) + ",t} = 1");
    for (const auto& p : together)
      f.constraint("same agent", "x_{a," + latex_name(task_keys[p.a]) + "} = x_{a," +
                                     latex_name(task_keys[p.b]) + "} \\quad \\forall a \\in A");
    for (const auto& p : apart)
      f.constraint("different agents", "x_{a," + latex_name(task_keys[p.a]) + "} + x_{a," +
                                           latex_name(task_keys[p.b]) +
                                           "} \\le 1 \\quad \\forall a \\in A");
    return f.markdown();
  }

  std::string gmpl() const override {
    const Theme& th = theme();
    std::string model = "set A;\nset T;\nparam c{A, T};\n";
    if (gap()) model += "param r{A, T} >= 0;\nparam R{A} >= 0;\n";
    model += "var x{A, T} binary;\n";
    model += std::string(th.maximize ? "maximize" : "minimize") +
             " Total: sum{a in A, t in T} c[a, t] * x[a, t];\n";
    model += "s.t. EachTask{t in T}: sum{a in A} x[a, t] = 1;\n";
    if (gap())
      model += "s.t. Capacity{a in A}: sum{t in T} r[a, t] * x[a, t] <= R[a];\n";
    else
      model += std::string("s.t. EachWorker{a in A}: sum{t in T} x[a, t] ") +
               (square() ? "=" : "<=") + " 1;\n";
    for (size_t k = 0; k < cannot.size(); ++k)
      model += "s.t. Cannot" + std::to_string(k + 1) + ": x['" + agent_keys[cannot[k].a] + "', '" +
               task_keys[cannot[k].b] + "'] = 0;\n";
    for (size_t k = 0; k < must_work.size(); ++k)
      model += "s.t. MustWork" + std::to_string(k + 1) + ": sum{t in T} x['" +
               agent_keys[must_work[k]] + "', t] = 1;\n";
    for (size_t k = 0; k < together.size(); ++k)
      model += "s.t. Together" + std::to_string(k + 1) + "{a in A}: x[a, '" +
               task_keys[together[k].a] + "'] = x[a, '" + task_keys[together[k].b] + "'];\n";
    for (size_t k = 0; k < apart.size(); ++k)
      model += "s.t. Apart" + std::to_string(k + 1) + "{a in A}: x[a, '" + task_keys[apart[k].a] +
               "'] + x[a, '" + task_keys[apart[k].b] + "'] <= 1;\n";
    GmplData data;
    data.set("A", agent_keys).set("T", task_keys).param("c", agent_keys, task_keys, value);
    if (gap()) data.param("r", agent_keys, task_keys, use).param("R", agent_keys, capacity);
    return compose_gmpl(model, "Total", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    std::vector<std::vector<double>> x(m(), std::vector<double>(n()));
    double objective = 0;
    for (size_t a = 0; a < m(); ++a)
      for (size_t t = 0; t < n(); ++t) {
        x[a][t] = s.value("x", {agent_keys[a], task_keys[t]});
        c.binary(x[a][t], "x[" + agent_keys[a] + "," + task_keys[t] + "]");
        objective += value[a][t] * x[a][t];
      }
    for (size_t t = 0; t < n(); ++t) {
      double sum = 0;
      for (size_t a = 0; a < m(); ++a) sum += x[a][t];
      c.eq(sum, 1, "task " + task_keys[t] + " assigned once");
    }
    for (size_t a = 0; a < m(); ++a) {
      double count = 0, load = 0;
      for (size_t t = 0; t < n(); ++t) {
        count += x[a][t];
        if (gap()) load += use[a][t] * x[a][t];
      }
      if (gap())
        c.le(load, capacity[a], "capacity of " + agent_keys[a]);
      else if (square())
        c.eq(count, 1, "worker " + agent_keys[a] + " exactly once");
      else
        c.le(count, 1, "worker " + agent_keys[a] + " at most once");
    }
    for (const auto& p : cannot)
      c.eq(x[p.a][p.b], 0, "forbidden pair " + agent_keys[p.a] + "/" + task_keys[p.b]);
    for (size_t a : must_work) {
      double count = 0;
      for (size_t t = 0; t < n(); ++t) count += x[a][t];
      c.eq(count, 1, "worker " + agent_keys[a] + " must be used");
    }
    for (const auto& p : together)
      for (size_t a = 0; a < m(); ++a)
        c.eq(x[a][p.a], x[a][p.b], "same agent for " + task_keys[p.a] + "/" + task_keys[p.b]);
    for (const auto& p : apart)
      for (size_t a = 0; a < m(); ++a)
        c.le(x[a][p.a] + x[a][p.b], 1,
             "different agents for " + task_keys[p.a] + "/" + task_keys[p.b]);
    return c.result(objective);
  }
};

class AssignmentFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "assignment"; }
  std::string_view title() const override {
    return "Assignment (classic and generalised, with pairing side constraints)";
  }
  ProblemClass problem_class() const override { return ProblemClass::ip; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<AssignmentInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    size_t m, n;
    if (th.gap) {
      m = static_cast<size_t>(size_for(rng, options.difficulty, {2, 3}, {3, 4}, {4, 5}));
      n = static_cast<size_t>(size_for(rng, options.difficulty, {4, 6}, {6, 9}, {10, 13}));
    } else {
      n = static_cast<size_t>(size_for(rng, options.difficulty, {3, 4}, {4, 6}, {7, 9}));
      m = n + static_cast<size_t>(rng.bernoulli(0.5) ? 0 : rng.uniform_int(1, 2));
    }
    m = std::min(m, th.agents.empty() ? text::people().size() : th.agents.size());
    n = std::min(n, th.tasks.size());
    inst->org = rng.pick(text::companies());
    if (th.agents.empty())
      inst->agent_names = text::pick_distinct(rng, text::people(), m);
    else
      inst->agent_names.assign(th.agents.begin(),
                               th.agents.begin() + static_cast<std::ptrdiff_t>(m));
    inst->task_names = text::pick_distinct(rng, th.tasks, n);
    inst->agent_keys = text::symbols(inst->agent_names);
    inst->task_keys = text::symbols(inst->task_names);

    inst->value.assign(m, std::vector<double>(n));
    for (auto& row : inst->value)
      for (auto& v : row) v = rng.uniform_int(th.value_lo, th.value_hi);

    // Planted assignment: task t -> agent owner[t].
    std::vector<size_t> owner(n);
    if (th.gap) {
      // Deal tasks out in random order so every agent gets a share of the work.
      for (size_t t = 0; t < n; ++t) owner[t] = t % m;
      rng.shuffle(owner);
      inst->use.assign(m, std::vector<double>(n));
      for (size_t a = 0; a < m; ++a) {
        // Agents differ in speed; a task's use on an agent scales with that speed.
        double speed = rng.uniform(0.8, 1.25);
        for (size_t t = 0; t < n; ++t)
          inst->use[a][t] = std::max<double>(
              th.resource_lo, std::round(rng.uniform_int(th.resource_lo, th.resource_hi) * speed));
      }
      for (size_t a = 0; a < m; ++a) {
        double load = 0;
        for (size_t t = 0; t < n; ++t)
          if (owner[t] == a) load += inst->use[a][t];
        inst->capacity.push_back(std::ceil(load * rng.uniform(1.05, 1.35)) + rng.uniform_int(0, 3));
      }
    } else {
      auto agents = rng.sample(m, n);
      for (size_t t = 0; t < n; ++t) owner[t] = agents[t];
    }

    // Optional side conditions, each satisfied by the planted assignment.
    if (rng.bernoulli(options.side_constraint_rate)) {
      // Forbid the agent's best pair among those the plan does not use: it would tempt the solver.
      double best = th.maximize ? -1e300 : 1e300;
      AssignmentInstance::Pair pick{0, 0};
      for (size_t a = 0; a < m; ++a)
        for (size_t t = 0; t < n; ++t) {
          if (owner[t] == a) continue;
          double v = inst->value[a][t];
          if (th.maximize ? v > best : v < best) {
            best = v;
            pick = {a, t};
          }
        }
      inst->cannot.push_back(pick);
    }
    if (!th.gap && m > n && rng.bernoulli(options.side_constraint_rate)) {
      size_t t = rng.index(n);
      inst->must_work.push_back(owner[t]);
    }
    if (th.gap && rng.bernoulli(options.side_constraint_rate)) {
      const auto pair =
          draw_distinct_pair(rng, n, 30, [&](size_t a, size_t b) { return owner[a] == owner[b]; });
      if (pair) {
        const auto [a, b] = in_order(*pair);
        inst->together.push_back({a, b});
      }
    }
    if (th.gap && rng.bernoulli(options.side_constraint_rate)) {
      const auto pair =
          draw_distinct_pair(rng, n, 30, [&](size_t a, size_t b) { return owner[a] != owner[b]; });
      if (pair) {
        const auto [a, b] = in_order(*pair);
        inst->apart.push_back({a, b});
      }
    }
    return inst;
  }
};

}  // namespace

const Family& assignment_family() {
  static const AssignmentFamily family;
  return family;
}

}  // namespace trex::orlib
