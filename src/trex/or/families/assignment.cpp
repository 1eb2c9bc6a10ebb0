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
#include <cctype>
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

// How a theme shows its data more often than not.
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
  Layout layout;  // a bias: the other layout appears too
  // How a task is named in prose: "the " + "contract", "the " + "first aid" + " station".
  std::string task_prefix, task_suffix;
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
       Layout::table,
       "",
       ""},
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
       Layout::prose,
       "the ",
       ""},
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
       Layout::table,
       "the ",
       " station"},
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
       Layout::table,
       "the ",
       ""},
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
       Layout::prose,
       "the ",
       ""},
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
       Layout::table,
       "",
       ""},
  };
  return t;
}

// A unit after a number: "1 point", "2 points".
std::string unit_after(double v, const std::string& unit) {
  if (v != 1 || unit.size() < 2 || unit.back() != 's') return unit;
  return unit.substr(0, unit.size() - 1);
}

class AssignmentInstance : public ComposedInstance<themes> {
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

  // "Alice", "the lathe", "team Alpha"
  std::string agent_label(size_t a) const { return theme().agent_prefix + agent_names[a]; }
  // "the contract", "the first aid station", "Northgate"
  std::string task_label(size_t t) const {
    return theme().task_prefix + task_names[t] + theme().task_suffix;
  }

  std::string compose(text::Style& style) const override {
    const Theme& th = theme();
    text::Composer text(style);
    const std::string agents = text::plural(th.agent_noun), tasks = text::plural(th.task_noun);
    // "35 minutes", "1 point", "$120", "$45 thousand" / "45 thousand dollars"
    auto amount = [&](double v, const std::string& unit) {
      if (unit == "dollars") return style.money(v);
      if (unit == "thousand dollars") {
        const std::string m = style.money(v);
        const size_t word = m.find(" dollar");
        return word == std::string::npos ? m + " thousand"
                                         : m.substr(0, word) + " thousand dollars";
      }
      return style.num(v) + " " + unit_after(v, unit);
    };
    text.fact(text::fill(th.intro, {{"{org}", org}}));
    text.fact(text::fill(style.pick({"There are {m} ({alist}) and {n} ({tlist}).",
                                     "The {agents} available are {alist}; the {n} are {tlist}.",
                                     "In all, {m} ({alist}) are available for {n}: {tlist}."}),
                         {{"{m}", style.count_of(static_cast<long>(m()), th.agent_noun)},
                          {"{n}", style.count_of(static_cast<long>(n()), th.task_noun)},
                          {"{agents}", agents},
                          {"{alist}", text::english_list(agent_names)},
                          {"{tlist}", text::english_list(task_names)}}));
    text.distractors(org, 1, 0.25);
    text.paragraph(false);

    // A matrix of agent x task values: a Markdown table, or one line per agent
    // listing its values in the tasks' order.
    auto matrix_table = [&](const std::vector<std::vector<double>>& data) {
      std::vector<std::string> header = {text::capitalize(th.agent_noun) + " \\ " +
                                         text::capitalize(th.task_noun)};
      for (const auto& t : task_names) header.push_back(t);
      std::vector<std::vector<std::string>> rows;
      for (size_t a = 0; a < m(); ++a) {
        std::vector<std::string> row = {agent_names[a]};
        for (size_t t = 0; t < n(); ++t) row.push_back(style.num(data[a][t]));
        rows.push_back(std::move(row));
      }
      return text::markdown_table(header, rows);
    };
    // `cell(a, t)` is "35 minutes for Audit"; `sentence` is a per-agent sentence
    // form with {agent} and {list}, used when the lines are not bullets.
    auto agent_lines = [&](auto cell, const std::string& sentence) {
      const bool bullets = style.chance(0.5);
      const std::string bullet = style.pick({"- ", "* "});
      std::string out;
      for (size_t a = 0; a < m(); ++a) {
        std::vector<std::string> parts;
        for (size_t t = 0; t < n(); ++t) parts.push_back(cell(a, t));
        const std::string list = text::english_list(parts);
        out += bullets ? bullet + text::capitalize(agent_label(a)) + ": " + list + ".\n"
                       : text::capitalize(text::fill(
                             sentence, {{"{agent}", agent_label(a)}, {"{list}", list}})) +
                             "\n";
      }
      return out;
    };
    const std::string value_unit = "(in " + th.value_unit + ")";
    const bool value_as_table = style.chance(th.layout == Layout::table ? 0.7 : 0.3);
    const bool bracketed = gap() && !value_as_table && style.chance(0.5);
    if (value_as_table) {
      text.block(
          text::fill(style.pick({"The table gives the {value} {unit} of each {agent}-{task} pair:",
                                 "{Value} {unit} by {agent} (rows) and {task} (columns):",
                                 "The {value} {unit} when a {agent} takes a {task}:"}),
                     {{"{value}", th.value_name},
                      {"{Value}", text::capitalize(th.value_name)},
                      {"{unit}", value_unit},
                      {"{agent}", th.agent_noun},
                      {"{task}", th.task_noun}}));
      text.block(matrix_table(value));
    } else {
      std::string caption = text::fill(
          style.pick({"For each {agent}, the {value} of each {task}", "{Value} by {agent}",
                      "The {value} depends on which {agent} takes a {task}"}),
          {{"{value}", th.value_name},
           {"{Value}", text::capitalize(th.value_name)},
           {"{agent}", th.agent_noun},
           {"{task}", th.task_noun}});
      if (bracketed)
        caption += text::fill(style.pick({", with the {resource} it would take in brackets",
                                          " (in brackets: the {resource} the {task} would take)"}),
                              {{"{resource}", th.resource_name}, {"{task}", th.task_noun}});
      text.block(caption + ":");
      text.block(agent_lines(
          [&](size_t a, size_t t) {
            std::string p = amount(value[a][t], th.value_unit) + " for " + task_label(t);
            if (bracketed) p += " (" + amount(use[a][t], th.resource_unit) + ")";
            return p;
          },
          "{agent}'s " + text::plural(th.value_name) + " are {list}."));
    }
    if (gap() && !bracketed) {
      if (style.chance(th.layout == Layout::table ? 0.7 : 0.3)) {
        text.block(text::fill(
            style.pick({"The {resource} {unit} that each {task} takes depends on the {agent}:",
                        "{Resource} {unit} by {agent} (rows) and {task} (columns):",
                        "How much {resource} each {task} takes on each {agent}, {unit}:"}),
            {{"{resource}", th.resource_name},
             {"{Resource}", text::capitalize(th.resource_name)},
             {"{unit}", "(in " + th.resource_unit + ")"},
             {"{agent}", th.agent_noun},
             {"{task}", th.task_noun}}));
        text.block(matrix_table(use));
      } else {
        text.block(text::fill(style.pick({"The {resource} each {task} would take:",
                                          "{Resource} needed, by {agent}:"}),
                              {{"{resource}", th.resource_name},
                               {"{Resource}", text::capitalize(th.resource_name)},
                               {"{agent}", th.agent_noun},
                               {"{task}", th.task_noun}}));
        text.block(agent_lines(
            [&](size_t a, size_t t) {
              return amount(use[a][t], th.resource_unit) + " for " + task_label(t);
            },
            "{agent} would need {list}."));
      }
    }
    if (gap()) {
      text::Records r;
      r.row_header = text::capitalize(th.agent_noun);
      r.names = agent_names;
      text::Attribute cap;
      cap.header = text::capitalize(th.resource_name) + " available (" + th.resource_unit + ")";
      cap.label = th.resource_unit + " of " + th.resource_name + " available";
      for (size_t a = 0; a < m(); ++a) {
        r.row_subjects.push_back(agent_label(a));
        cap.cells.push_back(style.num(capacity[a]));
        cap.phrases.push_back(text::fill(
            style.pick({"has {q} of {resource} available", "can handle at most {q} of {resource}",
                        "is limited to {q} of {resource}"}),
            {{"{q}", amount(capacity[a], th.resource_unit)}, {"{resource}", th.resource_name}}));
      }
      r.attributes.push_back(std::move(cap));
      // Names that end in a digit ("Van 1") would run into their value in a
      // "Van 1 152" list, so they never take the columns layout.
      const bool numbered = std::isdigit(static_cast<unsigned char>(agent_names[0].back()));
      const text::Layout layout =
          numbered ? style.layout({text::Layout::table, text::Layout::bullets, text::Layout::rows})
                   : style.layout({text::Layout::table, text::Layout::bullets, text::Layout::rows,
                                   text::Layout::columns});
      text.block(text::render_records(style, layout, r));
    }

    auto say = [&](std::initializer_list<const char*> forms) {
      return text::capitalize(text::fill(style.pick(forms), {{"{agent}", th.agent_noun},
                                                             {"{agents}", agents},
                                                             {"{task}", th.task_noun},
                                                             {"{tasks}", tasks},
                                                             {"{resource}", th.resource_name}}));
    };
    if (gap()) {
      text.fact(say({"Every {task} must be given to exactly one {agent}.",
                     "Each {task} goes to exactly one {agent}.",
                     "A {task} is handled by exactly one {agent}."}));
      text.fact(
          say({"The total {resource} of the {tasks} given to a {agent} cannot exceed what "
               "it has available.",
               "A {agent} cannot be given more {resource} than it has available.",
               "The {tasks} given to a {agent} must fit within its available {resource}."}));
    } else if (square()) {
      text.fact(
          say({"Every {task} must be given to exactly one {agent}, and every {agent} takes "
               "exactly one {task}.",
               "Each {agent} gets exactly one {task}, and each {task} exactly one {agent}.",
               "The assignment is one-to-one: every {agent} takes exactly one {task}, and "
               "every {task} goes to exactly one {agent}."}));
    } else {
      text.fact(
          say({"Every {task} must be given to exactly one {agent}, and each {agent} can "
               "take at most one {task} (some will have none).",
               "Each {task} goes to exactly one {agent}; no {agent} takes more than one, so "
               "some {agents} stay without a {task}.",
               "Each {agent} can take at most one {task}, and every {task} needs exactly "
               "one {agent}; with more {agents} than {tasks}, some get none."}));
    }
    for (const auto& p : cannot)
      text.fact(text::capitalize(
          text::fill(style.pick({"{a} cannot take {t}.", "{t} may not be given to {a}.",
                                 "giving {t} to {a} is not allowed."}),
                     {{"{a}", agent_label(p.a)}, {"{t}", task_label(p.b)}})));
    for (size_t a : must_work)
      text.fact(text::capitalize(text::fill(
          style.pick({"{a} must be given a {task}.", "{a} must receive one of the {tasks}.",
                      "{a} may not be left without a {task}."}),
          {{"{a}", agent_label(a)}, {"{task}", th.task_noun}, {"{tasks}", tasks}})));
    for (const auto& p : together)
      text.fact(text::capitalize(text::fill(
          style.pick({"{x} and {y} must go to the same {agent}.",
                      "the same {agent} must take both {x} and {y}.",
                      "{x} and {y} have to be handled by one and the same {agent}."}),
          {{"{x}", task_label(p.a)}, {"{y}", task_label(p.b)}, {"{agent}", th.agent_noun}})));
    for (const auto& p : apart)
      text.fact(text::capitalize(
          text::fill(style.pick({"{x} and {y} must go to different {agents}.",
                                 "no {agent} may take both {x} and {y}.",
                                 "{x} and {y} cannot be given to the same {agent}."}),
                     {{"{x}", task_label(p.a)},
                      {"{y}", task_label(p.b)},
                      {"{agent}", th.agent_noun},
                      {"{agents}", agents}})));
    text.fact(say({"Each {task} is assigned whole (no splitting).",
                   "A {task} cannot be split between {agents}.", "{tasks} cannot be split."}));
    text.distractors(org, 1, 0.2);
    text.paragraph();
    const std::string best = th.maximize ? "maximum" : "minimum";
    const std::string task =
        style.pick({"which " + th.agent_noun + " should take each " + th.task_noun,
                    "an assignment of " + tasks + " to " + agents,
                    "which " + th.task_noun + " goes to which " + th.agent_noun});
    const std::string reported = style.pick(
        {"the " + best + " total " + th.value_name + " in " + th.value_unit,
         "the " + best + " total " + th.value_name, "the optimal total " + th.value_name});
    text.fact(text::question(
        style, task,
        std::string(th.maximize ? "maximise" : "minimise") + " the total " + th.value_name,
        reported));
    return text.text();
  }

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
