// Flow shop / job shop scheduling (MILP, disjunctive big-M): jobs pass through
// the machines along a fixed route (the same route for every job in a flow
// shop); each machine handles one operation at a time. Minimise the makespan or,
// in some instances, the weighted sum of job completion times.
//
// Generator: draws routes and processing times, then builds a feasible schedule
// by dispatching the operations in a random order; release dates, due dates and
// a forced order on one machine are derived from that schedule.
#include <algorithm>
#include <cmath>

#include "trex/core/strings.hpp"
#include "trex/or/families/alg_writer.hpp"
#include "trex/or/families/family_list.hpp"
#include "trex/or/families/gmpl_writer.hpp"
#include "trex/or/families/text.hpp"
#include "trex/or/families/themed.hpp"

namespace trex::orlib {
namespace {

enum class Layout { table, bullets, prose };

struct Theme {
  std::string intro;  // {org} -> organisation
  std::string job;    // singular: "order"
  std::string jobs;   // plural
  std::vector<std::string> job_names;
  std::vector<std::string> machines;  // at least 3
  std::string unit;                   // "minutes"
  std::string unit_one;               // "minute"
  int time_step;                      // processing times are multiples of this
  bool fixed_order;                   // the machines have a natural order: always a flow shop
  Layout layout;
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"The machine shop of {org} has a set of part orders to finish today.",
       "part",
       "parts",
       {"gear housing", "pump shaft", "valve body", "bracket", "flange", "spindle", "coupling",
        "bearing cap"},
       {"lathe", "milling machine", "drill press"},
       "minutes",
       "minute",
       5,
       false,
       Layout::table},
      {"A print shop working for {org} has several print jobs waiting.",
       "print job",
       "print jobs",
       {"brochure", "annual report", "catalogue", "poster", "menu", "invitation", "calendar",
        "magazine"},
       {"printing press", "folding machine", "binding machine"},
       "hours",
       "hour",
       1,
       false,
       Layout::prose},
      {"The fleet garage of {org} must service several vehicles.",
       "vehicle",
       "vehicles",
       {"van", "SUV", "sedan", "pickup", "coupe", "minibus", "hatchback", "estate car"},
       {"diagnostics bay", "repair bay", "paint booth"},
       "hours",
       "hour",
       1,
       true,
       Layout::bullets},
      {"The quality laboratory of {org} has to analyse a batch of samples.",
       "sample",
       "samples",
       {"blood panel", "soil sample", "water sample", "tissue sample", "food sample", "DNA kit",
        "urine panel", "air filter"},
       {"centrifuge", "spectrometer", "sequencer"},
       "minutes",
       "minute",
       5,
       false,
       Layout::table},
      {"A post-production studio has several projects for {org} to finish.",
       "project",
       "projects",
       {"documentary", "trailer", "music video", "commercial", "short film", "training video",
        "web episode", "wedding film"},
       {"editing suite", "grading suite", "sound studio"},
       "hours",
       "hour",
       1,
       false,
       Layout::prose},
      {"The bakery of {org} plans its early-morning production.",
       "batch",
       "batches",
       {"sourdough batch", "croissant batch", "baguette batch", "muffin batch", "rye batch",
        "bagel batch", "brioche batch", "pretzel batch"},
       {"mixer", "oven", "packing line"},
       "minutes",
       "minute",
       5,
       true,
       Layout::bullets},
  };
  return t;
}

class JobShopInstance : public ThemedInstance<themes> {
 public:
  bool flow_shop = false;
  bool weighted = false;  // weighted completion time instead of makespan
  std::vector<std::string> job_names, job_keys, machine_names, machine_keys;
  std::vector<std::vector<double>> time;   // p[j][m]
  std::vector<std::vector<size_t>> route;  // route[j] = machine indices in visiting order
  std::vector<double> weight;              // w_j (weighted variant)
  int release_job = -1;
  double release = 0;
  int due_job = -1;
  double due = 0;
  int order_machine = -1;
  size_t order_first = 0, order_second = 0;  // on order_machine: first before second

  size_t jobs() const { return job_keys.size(); }
  size_t machines() const { return machine_keys.size(); }
  int side_count() const { return (release_job >= 0) + (due_job >= 0) + (order_machine >= 0); }
  size_t last_machine(size_t j) const { return route[j].back(); }
  size_t first_machine(size_t j) const { return route[j].front(); }
  std::string dur(double v) const {
    return text::num(v) + " " + (v == 1 ? theme().unit_one : theme().unit);
  }

  json size() const override {
    return {{"jobs", jobs()}, {"machines", machines()}, {"side_constraints", side_count()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v = {flow_shop ? "flow_shop" : "job_shop",
                                  weighted ? "weighted_completion" : "makespan"};
    if (release_job >= 0) v.push_back("release_date");
    if (due_job >= 0) v.push_back("due_date");
    if (order_machine >= 0) v.push_back("forced_order");
    return v;
  }

  std::string route_text(size_t j) const {
    std::vector<std::string> steps;
    for (size_t m : route[j])
      steps.push_back("the " + machine_names[m] + " (" + dur(time[j][m]) + ")");
    return text::english_list(steps, "and finally");
  }

  std::string nl() const override {
    const Theme& th = theme();
    std::string out = replace_all(th.intro, "{org}", org) + " ";
    std::vector<std::string> mnames;
    for (const auto& m : machine_names) mnames.push_back("the " + m);
    out += "There are " + std::to_string(jobs()) + " " + th.jobs + " (" +
           text::english_list(job_names) + ") and " + std::to_string(machines()) +
           " machines: " + text::english_list(mnames) + ". ";
    if (flow_shop) {
      out += "Every " + th.job +
             " visits the machines in the same order: " + text::english_list(mnames, "and then") +
             ".";
      std::vector<std::string> header = {text::capitalize(th.job)};
      for (const auto& m : machine_names)
        header.push_back(text::capitalize(m) + " (" + th.unit + ")");
      if (th.layout == Layout::table) {
        std::vector<std::vector<std::string>> rows;
        for (size_t j = 0; j < jobs(); ++j) {
          std::vector<std::string> r = {job_names[j]};
          for (size_t m = 0; m < machines(); ++m) r.push_back(text::num(time[j][m]));
          rows.push_back(r);
        }
        out += " Processing times:\n\n" + text::markdown_table(header, rows) + "\n";
      } else {
        out += " The processing times are:\n\n";
        for (size_t j = 0; j < jobs(); ++j) {
          std::vector<std::string> parts;
          for (size_t m = 0; m < machines(); ++m)
            parts.push_back(dur(time[j][m]) + " on the " + machine_names[m]);
          out += "- " + text::capitalize(job_names[j]) + ": " + text::english_list(parts) + "\n";
        }
        out += "\n";
      }
    } else {
      out += "Each " + th.job + " has its own route through the machines.";
      if (th.layout == Layout::table) {
        std::vector<std::string> header = {text::capitalize(th.job)};
        for (size_t k = 0; k < machines(); ++k)
          header.push_back("Step " + std::to_string(k + 1) + " (machine, " + th.unit + ")");
        std::vector<std::vector<std::string>> rows;
        for (size_t j = 0; j < jobs(); ++j) {
          std::vector<std::string> r = {job_names[j]};
          for (size_t m : route[j]) r.push_back(machine_names[m] + ", " + text::num(time[j][m]));
          rows.push_back(r);
        }
        out += "\n\n" + text::markdown_table(header, rows) + "\n";
      } else if (th.layout == Layout::bullets) {
        out += "\n\n";
        for (size_t j = 0; j < jobs(); ++j)
          out += "- The " + job_names[j] + " goes to " + route_text(j) + ".\n";
        out += "\n";
      } else {
        out += " ";
        for (size_t j = 0; j < jobs(); ++j)
          out += "The " + job_names[j] + " needs " + route_text(j) + ", in that order. ";
        out += "\n\n";
      }
    }
    out += "A machine can work on only one " + th.job +
           " at a time, an operation cannot be "
           "interrupted once started, and a " +
           th.job +
           " cannot start on its next machine "
           "before it has finished on the previous one. ";
    if (release_job >= 0)
      out += "The " + job_names[static_cast<size_t>(release_job)] + " only becomes available " +
             dur(release) + " after the start; all other " + th.jobs +
             " are available immediately. ";
    else
      out += "All " + th.jobs + " are available at time 0. ";
    if (due_job >= 0)
      out += "The " + job_names[static_cast<size_t>(due_job)] +
             " must be completely finished at "
             "most " +
             dur(due) + " after the start. ";
    if (order_machine >= 0)
      out += "On the " + machine_names[static_cast<size_t>(order_machine)] + ", the " +
             job_names[order_first] + " must be processed before the " + job_names[order_second] +
             ". ";
    out +=
        "Times are measured in " + th.unit + " from the start and need not be whole numbers.\n\n";
    if (weighted) {
      std::vector<std::string> ws;
      for (size_t j = 0; j < jobs(); ++j)
        ws.push_back(text::num(weight[j]) + " for the " + job_names[j]);
      out += "The " + th.jobs + " have priority weights of " + text::english_list(ws) +
             ". Schedule the operations so that the weighted sum of the completion times (weight "
             "times the moment the " +
             th.job +
             " leaves its last machine) is as small as "
             "possible. What is the minimum weighted sum?";
    } else {
      out += "Schedule the operations so that all " + th.jobs +
             " are finished as early as "
             "possible. What is the minimum makespan (the time at which the last " +
             th.job + " is finished)?";
    }
    return out;
  }

  std::vector<std::vector<double>> seq() const {
    std::vector<std::vector<double>> s(jobs(), std::vector<double>(machines()));
    for (size_t j = 0; j < jobs(); ++j)
      for (size_t k = 0; k < machines(); ++k) s[j][route[j][k]] = static_cast<double>(k + 1);
    return s;
  }
  double total_time() const {
    double t = 0;
    for (const auto& r : time)
      for (double v : r) t += v;
    return t;
  }

  std::string alg() const override {
    AlgebraicFormulation f(std::string(flow_shop ? "Flow shop" : "Job shop") +
                           " scheduling (disjunctive formulation)");
    f.set("$J = " + latex_set(job_keys) + "$", theme().jobs);
    f.set("$M = " + latex_set(machine_keys) + "$", "machines");
    f.parameter("$p_{j,m}$", "processing time of $j$ on $m$ (" + theme().unit + ")",
                latex_matrix(time));
    f.parameter("$o_{j,m}$", "position of machine $m$ in the route of $j$", latex_matrix(seq()));
    if (weighted) f.parameter("$w_j$", "priority weight of $j$", latex_vector(weight));
    if (release_job >= 0)
      f.parameter("$r$", "release time of the " + job_names[static_cast<size_t>(release_job)],
                  text::num(release));
    if (due_job >= 0)
      f.parameter("$D$", "due time of the " + job_names[static_cast<size_t>(due_job)],
                  text::num(due));
    f.parameter(release_job >= 0 ? "$\\bar{M} = \\sum_{j,m} p_{j,m} + r$"
                                 : "$\\bar{M} = \\sum_{j,m} p_{j,m}$",
                "big-M of the disjunctions", text::num(big_m()));
    f.variable("$S_{j,m} \\ge 0$", "start time of $j$ on machine $m$");
    f.variable("$y_{j,k,m} \\in \\{0,1\\}$", "1 if $j$ precedes $k$ on machine $m$ ($j < k$)");
    if (weighted)
      f.variable("$C_j \\ge 0$", "completion time of $j$");
    else
      f.variable("$C_{\\max} \\ge 0$", "makespan");
    if (weighted)
      f.objective("\\min \\sum_{j \\in J} w_j C_j",
                  "Minimise the weighted sum of completion times");
    else
      f.objective("\\min C_{\\max}", "Minimise the makespan");
    f.constraint("route",
                 "S_{j,m'} \\ge S_{j,m} + p_{j,m} \\quad \\forall j \\in J, "
                 "m, m' \\in M: o_{j,m'} = o_{j,m} + 1");
    f.constraint(weighted ? "completion" : "makespan",
                 std::string(weighted ? "C_j" : "C_{\\max}") +
                     " \\ge S_{j,m} + p_{j,m} \\quad \\forall j \\in J, m \\in M: o_{j,m} = |M|");
    f.constraint("disjunction 1",
                 "S_{j,m} + p_{j,m} \\le S_{k,m} + \\bar{M}(1 - y_{j,k,m}) "
                 "\\quad \\forall j < k, m \\in M");
    f.constraint("disjunction 2",
                 "S_{k,m} + p_{k,m} \\le S_{j,m} + \\bar{M} y_{j,k,m} "
                 "\\quad \\forall j < k, m \\in M");
    if (release_job >= 0) {
      size_t j = static_cast<size_t>(release_job);
      f.constraint("release", "S_{" + latex_name(job_keys[j]) + "," +
                                  latex_name(machine_keys[first_machine(j)]) + "} \\ge r");
    }
    if (due_job >= 0) {
      size_t j = static_cast<size_t>(due_job);
      std::string jm = latex_name(job_keys[j]) + "," + latex_name(machine_keys[last_machine(j)]);
      f.constraint("due date", "S_{" + jm + "} + p_{" + jm + "} \\le D");
    }
    if (order_machine >= 0) {
      std::string m = latex_name(machine_keys[static_cast<size_t>(order_machine)]);
      std::string a = latex_name(job_keys[order_first]) + "," + m;
      f.constraint("forced order", "S_{" + a + "} + p_{" + a + "} \\le S_{" +
                                       latex_name(job_keys[order_second]) + "," + m + "}");
    }
    return f.markdown();
  }

  // Every semi-active schedule ends by the latest release plus the total work.
  double big_m() const { return total_time() + (release_job >= 0 ? release : 0); }

  std::string gmpl() const override {
    std::string model =
        "set J;\nset M;\nset PAIRS within J cross J;\nparam p{J, M} > 0;\n"
        "param seq{J, M} integer, >= 1, <= card(M);\n";
    if (weighted) model += "param w{J} > 0;\n";
    if (release_job >= 0) model += "param r >= 0;\n";
    if (due_job >= 0) model += "param D >= 0;\n";
    model += std::string("param BigM := sum{j in J, m in M} p[j, m]") +
             (release_job >= 0 ? " + r;\n" : ";\n");
    model += "var S{J, M} >= 0;\nvar y{PAIRS, M} binary;\n";
    if (weighted)
      model +=
          "var C{J} >= 0;\nminimize WeightedCompletion: sum{j in J} w[j] * C[j];\n"
          "s.t. Completion{j in J, m in M: seq[j, m] = card(M)}: C[j] >= S[j, m] + p[j, m];\n";
    else
      model +=
          "var Cmax >= 0;\nminimize Makespan: Cmax;\n"
          "s.t. Finish{j in J, m in M: seq[j, m] = card(M)}: Cmax >= S[j, m] + p[j, m];\n";
    model +=
        "s.t. Route{j in J, m in M, k in M: seq[j, k] = seq[j, m] + 1}:\n"
        "  S[j, k] >= S[j, m] + p[j, m];\n"
        "s.t. FirstBefore{(j, k) in PAIRS, m in M}:\n"
        "  S[j, m] + p[j, m] <= S[k, m] + BigM * (1 - y[j, k, m]);\n"
        "s.t. SecondBefore{(j, k) in PAIRS, m in M}:\n"
        "  S[k, m] + p[k, m] <= S[j, m] + BigM * y[j, k, m];\n";
    if (release_job >= 0) {
      size_t j = static_cast<size_t>(release_job);
      model += "s.t. Release: S['" + job_keys[j] + "', '" + machine_keys[first_machine(j)] +
               "'] >= r;\n";
    }
    if (due_job >= 0) {
      size_t j = static_cast<size_t>(due_job);
      std::string jm = "['" + job_keys[j] + "', '" + machine_keys[last_machine(j)] + "']";
      model += "s.t. DueDate: S" + jm + " + p" + jm + " <= D;\n";
    }
    if (order_machine >= 0) {
      const std::string& m = machine_keys[static_cast<size_t>(order_machine)];
      std::string a = "['" + job_keys[order_first] + "', '" + m + "']";
      model += "s.t. ForcedOrder: S" + a + " + p" + a + " <= S['" + job_keys[order_second] +
               "', '" + m + "'];\n";
    }
    std::vector<std::vector<std::string>> pairs;
    for (size_t j = 0; j < jobs(); ++j)
      for (size_t k = j + 1; k < jobs(); ++k) pairs.push_back({job_keys[j], job_keys[k]});
    GmplData data;
    data.set("J", job_keys).set("M", machine_keys).set_of_tuples("PAIRS", pairs);
    data.param("p", job_keys, machine_keys, time).param("seq", job_keys, machine_keys, seq());
    if (weighted) data.param("w", job_keys, weight);
    if (release_job >= 0) data.param("r", release);
    if (due_job >= 0) data.param("D", due);
    return compose_gmpl(model, weighted ? "WeightedCompletion" : "Makespan", data);
  }

  CheckResult check(const Solution& sol) const override {
    Checker c;
    std::vector<std::vector<double>> s(jobs(), std::vector<double>(machines()));
    for (size_t j = 0; j < jobs(); ++j)
      for (size_t m = 0; m < machines(); ++m) {
        s[j][m] = sol.value("S", {job_keys[j], machine_keys[m]});
        c.ge(s[j][m], 0, "start of " + job_keys[j] + " on " + machine_keys[m]);
      }
    for (size_t j = 0; j < jobs(); ++j)
      for (size_t k = 1; k < machines(); ++k) {
        size_t a = route[j][k - 1], b = route[j][k];
        c.ge(s[j][b], s[j][a] + time[j][a],
             "route of " + job_keys[j] + " (" + machine_keys[a] + " before " + machine_keys[b] +
                 ")");
      }
    // No two operations overlap on a machine: one of them ends before the other starts.
    for (size_t m = 0; m < machines(); ++m)
      for (size_t j = 0; j < jobs(); ++j)
        for (size_t k = j + 1; k < jobs(); ++k) {
          double overlap = std::min(s[j][m] + time[j][m] - s[k][m], s[k][m] + time[k][m] - s[j][m]);
          c.le(overlap, 0,
               "overlap of " + job_keys[j] + " and " + job_keys[k] + " on " + machine_keys[m]);
        }
    std::vector<double> done(jobs());
    for (size_t j = 0; j < jobs(); ++j) done[j] = s[j][last_machine(j)] + time[j][last_machine(j)];
    if (release_job >= 0) {
      size_t j = static_cast<size_t>(release_job);
      c.ge(s[j][first_machine(j)], release, "release of " + job_keys[j]);
    }
    if (due_job >= 0)
      c.le(done[static_cast<size_t>(due_job)], due,
           "due date of " + job_keys[static_cast<size_t>(due_job)]);
    if (order_machine >= 0) {
      size_t m = static_cast<size_t>(order_machine);
      c.le(s[order_first][m] + time[order_first][m], s[order_second][m],
           "order of " + job_keys[order_first] + " and " + job_keys[order_second]);
    }
    double objective = 0;
    for (size_t j = 0; j < jobs(); ++j)
      objective = weighted ? objective + weight[j] * done[j] : std::max(objective, done[j]);
    return c.result(objective);
  }
};

class JobShopFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "job_shop"; }
  std::string_view title() const override {
    return "Job shop / flow shop scheduling (makespan or weighted completion)";
  }
  ProblemClass problem_class() const override { return ProblemClass::milp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<JobShopInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    inst->org = rng.pick(text::companies());
    const Difficulty diff = options.difficulty;
    const size_t n = static_cast<size_t>(size_for(rng, diff, {2, 3}, {3, 3}, {3, 4}));
    const size_t m = static_cast<size_t>(size_for(rng, diff, {2, 2}, {2, 3}, {3, 3}));
    inst->flow_shop = th.fixed_order || rng.bernoulli(0.4);
    inst->weighted = rng.bernoulli(0.3);

    inst->job_names = text::pick_distinct(rng, th.job_names, n);
    inst->job_keys = text::symbols(inst->job_names);
    std::vector<size_t> machine_ids(th.machines.size());
    for (size_t i = 0; i < machine_ids.size(); ++i) machine_ids[i] = i;
    machine_ids.resize(m);  // machines keep their natural (flow) order
    for (size_t i : machine_ids) inst->machine_names.push_back(th.machines[i]);
    inst->machine_keys = text::symbols(inst->machine_names);

    for (size_t j = 0; j < n; ++j) {
      std::vector<double> row;
      for (size_t k = 0; k < m; ++k) row.push_back(th.time_step * rng.uniform_int(1, 9));
      inst->time.push_back(row);
      std::vector<size_t> r(m);
      for (size_t k = 0; k < m; ++k) r[k] = k;
      inst->route.push_back(r);
      if (inst->weighted) inst->weight.push_back(rng.uniform_int(1, 5));
    }
    // Job shop: random routes, redrawn until at least two jobs differ.
    for (int attempt = 0; !inst->flow_shop && attempt < 20; ++attempt) {
      for (auto& r : inst->route) rng.shuffle(r);
      if (std::any_of(inst->route.begin(), inst->route.end(),
                      [&](const auto& r) { return r != inst->route.front(); }))
        break;
    }
    const double rate = options.side_constraint_rate;
    if (rng.bernoulli(rate)) {
      inst->release_job = static_cast<int>(rng.index(n));
      inst->release = th.time_step * rng.uniform_int(1, 6);
    }

    // Planted schedule: dispatch the operations in a random interleaving of the jobs.
    std::vector<size_t> order;
    for (size_t j = 0; j < n; ++j)
      for (size_t k = 0; k < m; ++k) order.push_back(j);
    rng.shuffle(order);
    std::vector<size_t> next(n, 0);
    std::vector<double> job_ready(n, 0), machine_ready(m, 0);
    std::vector<std::vector<size_t>> machine_sequence(m);
    if (inst->release_job >= 0) job_ready[static_cast<size_t>(inst->release_job)] = inst->release;
    for (size_t j : order) {
      size_t mach = inst->route[j][next[j]++];
      double start = std::max(job_ready[j], machine_ready[mach]);
      job_ready[j] = machine_ready[mach] = start + inst->time[j][mach];
      machine_sequence[mach].push_back(j);
    }
    if (rng.bernoulli(rate)) {
      inst->due_job = static_cast<int>(rng.index(n));
      inst->due =
          job_ready[static_cast<size_t>(inst->due_job)] + th.time_step * rng.uniform_int(0, 3);
    }
    if (rng.bernoulli(rate)) {
      size_t mach = rng.index(m);
      const auto& seq = machine_sequence[mach];
      size_t a = rng.index(seq.size() - 1);
      inst->order_machine = static_cast<int>(mach);
      inst->order_first = seq[a];
      inst->order_second = seq[a + 1 + rng.index(seq.size() - a - 1)];
    }
    return inst;
  }
};

}  // namespace

const Family& job_shop_family() {
  static const JobShopFamily family;
  return family;
}

}  // namespace trex::orlib
