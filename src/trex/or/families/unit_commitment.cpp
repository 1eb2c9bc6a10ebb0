// Unit commitment: decide hour by hour which units (generators, gensets,
// boilers, pumps) run and how much each produces, meeting demand exactly at
// minimum fixed + variable + startup cost, with optional spinning-reserve,
// must-run and startup-limit side constraints. MILP.
//
// Generator: draws units from big/cheap/slow to small/expensive/quick archetypes,
// plants a merit-order commitment for a daily demand shape, and sets each
// period's demand inside the planted units' [min, max] output range.
#include <algorithm>
#include <cmath>

#include "trex/core/strings.hpp"
#include "trex/or/families/alg_writer.hpp"
#include "trex/or/families/family_list.hpp"
#include "trex/or/families/gmpl_writer.hpp"
#include "trex/or/families/rounding.hpp"
#include "trex/or/families/text.hpp"
#include "trex/or/families/themed.hpp"

namespace trex::orlib {
namespace {

struct Theme {
  std::string intro;               // {org} is replaced
  std::string unit_noun;           // "generator"
  std::string output_unit;         // "MW"
  std::string output_what;         // "electricity demand"
  std::string per_unit;            // "MWh", the unit the variable cost is quoted per
  std::vector<std::string> names;  // up to 5, from base-load to peaking units
  double capacity_scale;           // archetype capacities are multiplied by this
  double cost_scale;               // archetype costs are multiplied by this
  bool numbered;                   // names are numbered: use the first ones, without gaps
  bool table;                      // data as Markdown tables (else prose)
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"{org} operates a small power system and must schedule its generators for the coming "
       "hours.",
       "generator",
       "MW",
       "electricity demand",
       "MWh",
       {"Northside Coal", "Ridgeway CCGT", "Lakeshore CCGT", "Harbor Gas Engine",
        "Airport Turbine"},
       1.0,
       1.0,
       false,
       true},
      {"An island microgrid run by {org} is supplied by diesel gensets that must be scheduled "
       "hour by hour.",
       "genset",
       "kW",
       "load",
       "kWh",
       {"Genset A", "Genset B", "Genset C", "Genset D", "Genset E"},
       1.0,
       0.01,
       true,
       false},
      {"The boiler house of a {org} factory supplies process steam. The plant engineer must decide "
       "which boilers to fire in each hour.",
       "boiler",
       "tonnes of steam per hour",
       "steam demand",
       "tonne of steam",
       {"Boiler 1", "Boiler 2", "Boiler 3", "Boiler 4", "Boiler 5"},
       0.1,
       1.0,
       true,
       true},
      {"A water utility advised by {org} must decide which pumps to run at its main pumping "
       "station each hour so that the pumped flow matches the planned demand.",
       "pump",
       "cubic metres per hour",
       "flow demand",
       "cubic metre",
       {"Pump A", "Pump B", "Pump C", "Pump D", "Pump E"},
       1.0,
       0.01,
       true,
       false},
      {"{org} runs a district heating plant with several heat units and must schedule them to "
       "meet the heat demand of the town.",
       "heat unit",
       "MW",
       "heat demand",
       "MWh of heat",
       {"CHP Unit", "Biomass Boiler", "Gas Boiler North", "Gas Boiler South", "Electric Boiler"},
       0.5,
       1.0,
       false,
       true},
  };
  return t;
}

enum class Archetype { base, mid, peak };

struct Unit {
  std::string name, key;
  double pmin = 0, pmax = 0;  // output range when on
  double fixed = 0;           // cost per period on
  double var = 0;             // cost per unit of output
  double startup = 0;         // cost of a start
  int initially_on = 0;       // state before period 1
};

double round_to(double v, double step) {
  return step * std::round(v / step);
}
double cents(double v) {
  return std::round(v * 100) / 100;
}

class UnitCommitmentInstance : public ThemedInstance<themes> {
 public:
  std::vector<Unit> units;
  std::vector<double> demand;   // per period
  std::vector<double> reserve;  // per period; empty = no reserve requirement
  // Optional side constraints.
  int must_run_unit = -1, must_run_period = -1;
  int max_startups = -1;

  size_t n_units() const { return units.size(); }
  size_t periods() const { return demand.size(); }
  std::string period_key(size_t t) const { return std::to_string(t + 1); }
  int side_count() const { return (!reserve.empty()) + (must_run_unit >= 0) + (max_startups >= 0); }
  std::string out(double v) const { return text::num(v) + " " + theme().output_unit; }

  json size() const override {
    return {{"units", n_units()}, {"periods", periods()}, {"side_constraints", side_count()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v;
    if (!reserve.empty()) v.push_back("spinning_reserve");
    if (must_run_unit >= 0) v.push_back("must_run");
    if (max_startups >= 0) v.push_back("startup_limit");
    return v;
  }

  std::string nl() const override {
    const Theme& th = theme();
    std::string body = replace_all(th.intro, "{org}", org) + " ";
    body += "The plan covers " + std::to_string(periods()) + " consecutive hours (hours 1 to " +
            std::to_string(periods()) + "). There are " + std::to_string(n_units()) + " " +
            th.unit_noun + "s. A " + th.unit_noun +
            " that is on in an hour must produce between "
            "its minimum and maximum output (in " +
            th.output_unit +
            "); one that is off produces "
            "nothing. Running costs a fixed amount per hour on plus a variable cost per " +
            th.per_unit + " produced, and switching a " + th.unit_noun +
            " on when it was off in the previous hour costs its startup cost.\n\n";
    if (th.table) {
      std::vector<std::vector<std::string>> rows;
      for (const Unit& u : units)
        rows.push_back({u.name, text::num(u.pmin), text::num(u.pmax), text::money(u.fixed),
                        text::money(u.var), text::money(u.startup), u.initially_on ? "on" : "off"});
      body += text::markdown_table(
                  {text::capitalize(th.unit_noun), "Min output (" + th.output_unit + ")",
                   "Max output (" + th.output_unit + ")", "Fixed cost per hour",
                   "Cost per " + th.per_unit, "Startup cost", "State before hour 1"},
                  rows) +
              "\n";
      std::vector<std::string> header = {"Hour"};
      std::vector<std::string> row = {text::capitalize(th.output_what) + " (" + th.output_unit +
                                      ")"};
      std::vector<std::string> reserve_row = {"Spinning reserve (" + th.output_unit + ")"};
      for (size_t t = 0; t < periods(); ++t) {
        header.push_back(period_key(t));
        row.push_back(text::num(demand[t]));
        if (!reserve.empty()) reserve_row.push_back(text::num(reserve[t]));
      }
      std::vector<std::vector<std::string>> rows2 = {row};
      if (!reserve.empty()) rows2.push_back(reserve_row);
      body += text::markdown_table(header, rows2) + "\n";
    } else {
      for (const Unit& u : units)
        body += "- " + u.name + ": between " + text::num(u.pmin) + " and " + out(u.pmax) +
                " when on; " + text::money(u.fixed) + " per hour on, " + text::money(u.var) +
                " per " + th.per_unit + ", startup " + text::money(u.startup) + "; it is " +
                (u.initially_on ? "on" : "off") + " just before hour 1.\n";
      std::vector<std::string> d;
      for (size_t t = 0; t < periods(); ++t)
        d.push_back(out(demand[t]) + " in hour " + period_key(t));
      body += "\nThe " + th.output_what + " is " + text::english_list(d) + ".";
      if (!reserve.empty()) {
        std::vector<std::string> r;
        for (size_t t = 0; t < periods(); ++t)
          r.push_back(out(reserve[t]) + " in hour " + period_key(t));
        body += " The spinning reserve requirement is " + text::english_list(r) + ".";
      }
      body += "\n\n";
    }
    body += "In every hour the total output must equal the " + th.output_what + " exactly. ";
    if (!reserve.empty())
      body += "In addition, the combined maximum output of the " + th.unit_noun +
              "s that are on must cover the demand plus the spinning reserve of that hour. ";
    if (must_run_unit >= 0)
      body += units[static_cast<size_t>(must_run_unit)].name + " must be on in hour " +
              period_key(static_cast<size_t>(must_run_period)) + " (a maintenance test). ";
    if (max_startups >= 0)
      body += "To limit wear, at most " + std::to_string(max_startups) + " startup" +
              (max_startups == 1 ? "" : "s") + " in total are allowed over the plan. ";
    body += "Each " + th.unit_noun +
            " is either on or off for a whole hour, while outputs may "
            "be fractional. Which " +
            th.unit_noun +
            "s should run in each hour, and at what "
            "output, to minimise the total cost? What is the minimum total cost in dollars?";
    return body;
  }

  std::string alg() const override {
    AlgebraicFormulation f("Unit commitment");
    std::vector<std::string> keys;
    std::vector<double> pmin, pmax, fixed, var, startup, u0;
    for (const Unit& u : units) {
      keys.push_back(u.key);
      pmin.push_back(u.pmin);
      pmax.push_back(u.pmax);
      fixed.push_back(u.fixed);
      var.push_back(u.var);
      startup.push_back(u.startup);
      u0.push_back(u.initially_on);
    }
    const std::string unit = theme().output_unit;
    f.set("$G = " + latex_set(keys) + "$", theme().unit_noun + "s");
    f.set("$T = \\{1, \\dots, " + std::to_string(periods()) + "\\}$", "hours");
    f.parameter("$D_t$", theme().output_what + " in hour $t$ (" + unit + ")", latex_vector(demand));
    f.parameter("$\\underline{P}_g, \\overline{P}_g$",
                "minimum and maximum output when on (" + unit + ")",
                latex_vector(pmin) + ", " + latex_vector(pmax));
    f.parameter("$F_g$", "fixed cost per hour on (dollars)", latex_vector(fixed));
    f.parameter("$C_g$", "variable cost per " + theme().per_unit + " (dollars)", latex_vector(var));
    f.parameter("$S_g$", "startup cost (dollars)", latex_vector(startup));
    f.parameter("$u_{g,0}$", "state before hour 1 (1 = on)", latex_vector(u0));
    if (!reserve.empty())
      f.parameter("$R_t$", "spinning reserve in hour $t$ (" + unit + ")", latex_vector(reserve));
    f.variable("$u_{g,t} \\in \\{0,1\\}$", "1 if $g$ is on in hour $t$");
    f.variable("$p_{g,t} \\ge 0$", "output of $g$ in hour $t$ (continuous)");
    f.variable("$s_{g,t} \\in \\{0,1\\}$", "1 if $g$ is started up in hour $t$");
    f.objective(
        "\\min \\sum_{g \\in G} \\sum_{t \\in T} \\big( F_g u_{g,t} + C_g p_{g,t} + "
        "S_g s_{g,t} \\big)",
        "Minimise fixed, variable and startup costs");
    f.constraint("demand", "\\sum_{g \\in G} p_{g,t} = D_t \\quad \\forall t \\in T");
    f.constraint("output range",
                 "\\underline{P}_g u_{g,t} \\le p_{g,t} \\le \\overline{P}_g "
                 "u_{g,t} \\quad \\forall g, t");
    f.constraint("startup", "s_{g,t} \\ge u_{g,t} - u_{g,t-1} \\quad \\forall g, t");
    if (!reserve.empty())
      f.constraint("spinning reserve",
                   "\\sum_{g \\in G} \\overline{P}_g u_{g,t} \\ge D_t + R_t "
                   "\\quad \\forall t \\in T");
    if (must_run_unit >= 0)
      f.constraint("must run", "u_{" + latex_name(units[static_cast<size_t>(must_run_unit)].key) +
                                   "," + period_key(static_cast<size_t>(must_run_period)) +
                                   "} = 1");
    if (max_startups >= 0)
      f.constraint("startup limit", "\\sum_{g \\in G} \\sum_{t \\in T} s_{g,t} \\le " +
                                        std::to_string(max_startups));
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model =
        "set G;\nparam T integer > 0;\nset PERIODS := 1..T;\n"
        "param demand{PERIODS} >= 0;\n"
        "param pmin{G} >= 0;\nparam pmax{G} >= 0;\nparam fixed{G} >= 0;\nparam var{G} >= 0;\n"
        "param startup{G} >= 0;\nparam u0{G} binary;\n";
    if (!reserve.empty()) model += "param reserve{PERIODS} >= 0;\n";
    model +=
        "var u{G, PERIODS} binary;\nvar p{G, PERIODS} >= 0;\nvar s{G, PERIODS} binary;\n"
        "minimize TotalCost: sum{g in G, t in PERIODS}\n"
        "  (fixed[g] * u[g, t] + var[g] * p[g, t] + startup[g] * s[g, t]);\n"
        "s.t. Demand{t in PERIODS}: sum{g in G} p[g, t] = demand[t];\n"
        "s.t. MinOutput{g in G, t in PERIODS}: p[g, t] >= pmin[g] * u[g, t];\n"
        "s.t. MaxOutput{g in G, t in PERIODS}: p[g, t] <= pmax[g] * u[g, t];\n"
        "s.t. Startup{g in G, t in PERIODS}:\n"
        "  s[g, t] >= u[g, t] - (if t = 1 then u0[g] else u[g, t - 1]);\n";
    if (!reserve.empty())
      model +=
          "s.t. Reserve{t in PERIODS}: sum{g in G} pmax[g] * u[g, t] >= demand[t] + "
          "reserve[t];\n";
    if (must_run_unit >= 0)
      model += "s.t. MustRun: u['" + units[static_cast<size_t>(must_run_unit)].key + "', " +
               period_key(static_cast<size_t>(must_run_period)) + "] = 1;\n";
    if (max_startups >= 0)
      model += "s.t. StartupLimit: sum{g in G, t in PERIODS} s[g, t] <= " +
               std::to_string(max_startups) + ";\n";
    std::vector<std::string> keys, tkeys;
    std::vector<double> pmin, pmax, fixed, var, startup, u0;
    for (const Unit& u : units) {
      keys.push_back(u.key);
      pmin.push_back(u.pmin);
      pmax.push_back(u.pmax);
      fixed.push_back(u.fixed);
      var.push_back(u.var);
      startup.push_back(u.startup);
      u0.push_back(u.initially_on);
    }
    for (size_t t = 0; t < periods(); ++t) tkeys.push_back(period_key(t));
    GmplData data;
    data.set("G", keys).param("T", static_cast<double>(periods())).param("demand", tkeys, demand);
    data.param("pmin", keys, pmin).param("pmax", keys, pmax).param("fixed", keys, fixed);
    data.param("var", keys, var).param("startup", keys, startup).param("u0", keys, u0);
    if (!reserve.empty()) data.param("reserve", tkeys, reserve);
    return compose_gmpl(model, "TotalCost", data);
  }

  CheckResult check(const Solution& sol) const override {
    Checker c;
    double objective = 0, starts = 0;
    std::vector<double> produced(periods(), 0.0), online_max(periods(), 0.0);
    for (size_t g = 0; g < n_units(); ++g) {
      const Unit& unit = units[g];
      double previous = unit.initially_on;
      for (size_t t = 0; t < periods(); ++t) {
        const std::string tk = period_key(t);
        const std::string at = "[" + unit.key + "," + tk + "]";
        const double u = sol.value("u", {unit.key, tk});
        const double p = sol.value("p", {unit.key, tk});
        const double s = sol.value("s", {unit.key, tk});
        c.binary(u, "u" + at);
        c.binary(s, "s" + at);
        c.ge(p, unit.pmin * u, "minimum output of " + unit.key + " in hour " + tk);
        c.le(p, unit.pmax * u, "maximum output of " + unit.key + " in hour " + tk);
        c.ge(s, u - previous, "startup of " + unit.key + " in hour " + tk);
        produced[t] += p;
        online_max[t] += unit.pmax * u;
        starts += s;
        objective += unit.fixed * u + unit.var * p + unit.startup * s;
        previous = u;
      }
    }
    for (size_t t = 0; t < periods(); ++t) {
      c.eq(produced[t], demand[t], "demand in hour " + period_key(t));
      if (!reserve.empty())
        c.ge(online_max[t], demand[t] + reserve[t], "spinning reserve in hour " + period_key(t));
    }
    if (must_run_unit >= 0)
      c.eq(sol.value("u", {units[static_cast<size_t>(must_run_unit)].key,
                           period_key(static_cast<size_t>(must_run_period))}),
           1, "must-run unit");
    if (max_startups >= 0) c.le(starts, max_startups, "startup limit");
    return c.result(objective);
  }
};

class UnitCommitmentFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "unit_commitment"; }
  std::string_view title() const override { return "Unit commitment"; }
  ProblemClass problem_class() const override { return ProblemClass::milp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<UnitCommitmentInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    inst->org = rng.pick(text::companies());
    const size_t ng =
        static_cast<size_t>(size_for(rng, options.difficulty, {2, 3}, {3, 4}, {4, 5}));
    const size_t nt =
        static_cast<size_t>(size_for(rng, options.difficulty, {3, 4}, {4, 6}, {6, 8}));

    // Units: the first is base load, the last a peaker, the rest mid-merit or base.
    const double step = 10.0 * th.capacity_scale;  // output granularity
    std::vector<size_t> slots = rng.sample(th.names.size(), ng);
    if (th.numbered)
      for (size_t g = 0; g < ng; ++g) slots[g] = g;
    std::sort(slots.begin(), slots.end());  // names are ordered base -> peak
    for (size_t g = 0; g < ng; ++g) {
      const Archetype type = g == 0               ? Archetype::base
                             : g + 1 == ng        ? Archetype::peak
                             : rng.bernoulli(0.7) ? Archetype::mid
                                                  : Archetype::base;
      Unit u;
      u.name = th.names[slots[g]];
      u.key = text::symbol(u.name);
      double pmax = 0, min_share = 0, fixed = 0, var = 0, startup = 0;
      switch (type) {
        case Archetype::base:
          pmax = rng.uniform_int(25, 40) * 10.0;
          min_share = rng.uniform(0.4, 0.5);
          fixed = rng.uniform_int(40, 90) * 10.0;
          var = rng.uniform_int(18, 28);
          startup = rng.uniform_int(20, 50) * 100.0;
          break;
        case Archetype::mid:
          pmax = rng.uniform_int(15, 25) * 10.0;
          min_share = rng.uniform(0.3, 0.4);
          fixed = rng.uniform_int(20, 50) * 10.0;
          var = rng.uniform_int(30, 42);
          startup = rng.uniform_int(8, 20) * 100.0;
          break;
        case Archetype::peak:
          pmax = rng.uniform_int(5, 12) * 10.0;
          min_share = rng.uniform(0.15, 0.25);
          fixed = rng.uniform_int(5, 15) * 10.0;
          var = rng.uniform_int(55, 90);
          startup = rng.uniform_int(10, 40) * 10.0;
          break;
      }
      u.pmax = std::max(step, round_to(pmax * th.capacity_scale, step));
      u.pmin = std::clamp(round_to(u.pmax * min_share, step), step, u.pmax - step);
      u.fixed = cents(fixed * th.cost_scale);
      u.var = cents(var * th.cost_scale);
      u.startup = cents(startup * th.cost_scale);
      u.initially_on = g == 0 || rng.bernoulli(0.3) ? 1 : 0;
      inst->units.push_back(u);
    }
    auto& units = inst->units;
    double total_max = 0;
    for (const Unit& u : units) total_max += u.pmax;

    // Planted commitment: a daily shape of target load, units committed in
    // merit order (with the odd skip) until they cover it with a margin.
    std::vector<std::vector<int>> on(ng, std::vector<int>(nt, 0));
    const double phase = rng.uniform(0.0, 6.283);
    std::vector<double> headroom(nt, 0.0);
    for (size_t t = 0; t < nt; ++t) {
      const double shape = 0.55 + 0.25 * std::sin(phase + 6.283 * static_cast<double>(t) / 8.0);
      const double target = total_max * std::clamp(shape + rng.uniform(-0.08, 0.08), 0.2, 0.9);
      double lo = 0, hi = 0;
      for (size_t g = 0; g < ng; ++g) {
        if (hi >= target * 1.1) break;
        if (g > 0 && g + 1 < ng && rng.bernoulli(0.2)) continue;  // a skipped unit
        on[g][t] = 1;
        lo += units[g].pmin;
        hi += units[g].pmax;
      }
      if (hi < target) {  // skipped too much: commit everything left
        for (size_t g = 0; g < ng; ++g)
          if (!on[g][t]) {
            on[g][t] = 1;
            lo += units[g].pmin;
            hi += units[g].pmax;
          }
      }
      const double d = std::clamp(round_to(target, step), lo, hi);
      inst->demand.push_back(d);
      headroom[t] = hi - d;
    }

    // Optional side constraints, each satisfied by the planted commitment.
    if (rng.bernoulli(options.side_constraint_rate)) {
      bool any = false;
      for (size_t t = 0; t < nt; ++t) {
        const double r = round_down(headroom[t] * rng.uniform(0.4, 1.0), step);
        inst->reserve.push_back(r);
        any = any || r > 0;
      }
      if (!any) inst->reserve.clear();
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      std::vector<std::pair<size_t, size_t>> running;
      for (size_t g = 1; g < ng; ++g)
        for (size_t t = 0; t < nt; ++t)
          if (on[g][t]) running.push_back({g, t});
      if (!running.empty()) {
        auto [g, t] = rng.pick(running);
        inst->must_run_unit = static_cast<int>(g);
        inst->must_run_period = static_cast<int>(t);
      }
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      int starts = 0;
      for (size_t g = 0; g < ng; ++g)
        for (size_t t = 0; t < nt; ++t)
          if (on[g][t] && !(t == 0 ? units[g].initially_on : on[g][t - 1])) ++starts;
      if (starts >= 1) inst->max_startups = starts;
    }
    return inst;
  }
};

}  // namespace

const Family& unit_commitment_family() {
  static const UnitCommitmentFamily family;
  return family;
}

}  // namespace trex::orlib
