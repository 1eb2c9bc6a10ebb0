// Single-item lot sizing over a finite horizon (MILP): per-period demand, setup
// and unit costs, a holding cost, an optional production capacity and, in some
// instances, backorders that must be cleared by the end of the horizon.
//
// Generator: draws demand, plants a plan of production runs (each run covers the
// demand up to the next run; the first one also builds any safety stock) and
// sets the capacity and the optional limits around that plan, so it is feasible.
#include <algorithm>
#include <cmath>
#include <limits>

#include "trex/core/strings.hpp"
#include "trex/or/families/alg_writer.hpp"
#include "trex/or/families/family_list.hpp"
#include "trex/or/families/gmpl_writer.hpp"
#include "trex/or/families/rounding.hpp"
#include "trex/or/families/text.hpp"
#include "trex/or/families/themed.hpp"

namespace trex::orlib {
namespace {

enum class Layout { table, bullets, prose };

struct Theme {
  std::string intro;     // {org} -> organisation, {n} -> number of periods
  std::string product;   // "flour"
  std::string unit;      // singular: "tonne"
  std::string units;     // plural: "tonnes"
  std::string period;    // "week"
  std::string run;       // "milling run"
  std::string question;  // closing question; {period} -> period noun
  Layout layout;
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"The flour mill of {org} supplies regional bakeries and is planning production for the "
       "next {n} weeks.",
       "flour", "tonne", "tonnes", "week", "milling run",
       "How many tonnes should be milled in each week so that the total cost is as small as "
       "possible, and what is that minimum total cost?",
       Layout::prose},
      {"{org} makes an industrial solvent in a batch reactor. The planner has to decide in which "
       "of the next {n} months to run a batch and how much to make.",
       "solvent", "kilolitre", "kilolitres", "month", "batch",
       "Find a production plan that minimises the total of setup, production and holding costs "
       "(and backorder costs, if any). Report the minimum total cost.",
       Layout::table},
      {"A craft brewery that supplies {org} is drawing up its brewing schedule for the next {n} "
       "weeks.",
       "lager", "hectolitre", "hectolitres", "week", "brew",
       "In which weeks should the brewery brew, and how much, to keep its total cost to a "
       "minimum? State the minimum total cost.",
       Layout::bullets},
      {"The feed mill of {org} produces a pelleted cattle feed. The production manager is planning "
       "the next {n} days.",
       "cattle feed", "tonne", "tonnes", "day", "production run",
       "Determine the production quantity for every day that minimises the total cost, and give "
       "that minimum cost.",
       Layout::table},
      {"{org} blends a liquid detergent on a line that has to be cleaned and set up before every "
       "production campaign. A plan for the next {n} weeks is needed.",
       "detergent", "cubic metre", "cubic metres", "week", "production campaign",
       "What production plan has the lowest total cost over the {n} weeks, and what is that "
       "cost?",
       Layout::prose},
  };
  return t;
}

bool all_equal(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [&](double x) { return x == v.front(); });
}

class LotSizingInstance : public ThemedInstance<themes> {
 public:
  std::vector<double> demand;     // d_t
  std::vector<double> setup;      // f_t
  std::vector<double> unit_cost;  // c_t
  double holding = 0;             // h, per unit per period
  double initial_stock = 0;       // I_0
  double capacity = 0;            // C; 0 = uncapacitated
  bool backlog = false;
  double backlog_cost = 0;  // per unit per period
  double min_stock = 0;     // safety stock s; 0 = none
  double warehouse = 0;     // W; 0 = none
  int max_setups = 0;       // K; 0 = none
  int shutdown = 0;         // 1-based period without production; 0 = none

  size_t n() const { return demand.size(); }
  std::vector<std::string> keys() const { return numbered("", static_cast<int>(n())); }
  int side_count() const {
    return (min_stock > 0) + (warehouse > 0) + (max_setups > 0) + (shutdown > 0);
  }

  // Big-M of the setup link: a run never needs to produce more than the demand
  // it can still serve (plus the safety stock), nor more than the capacity.
  std::vector<double> big_m() const {
    std::vector<double> m(n());
    double total = 0;
    for (double d : demand) total += d;
    double remaining = total;
    for (size_t t = 0; t < n(); ++t) {
      double bound = backlog ? total : remaining + min_stock;
      m[t] = capacity > 0 ? std::min(capacity, bound) : bound;
      remaining -= demand[t];
    }
    return m;
  }

  json size() const override {
    return {{"periods", n()},
            {"capacitated", capacity > 0},
            {"backlog", backlog},
            {"side_constraints", side_count()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v = {capacity > 0 ? "capacitated" : "uncapacitated"};
    if (backlog) v.push_back("backlog");
    if (min_stock > 0) v.push_back("min_stock");
    if (warehouse > 0) v.push_back("warehouse_limit");
    if (max_setups > 0) v.push_back("max_setups");
    if (shutdown > 0) v.push_back("shutdown");
    return v;
  }

  // Preposition for a single period: "in week 3", "on day 3".
  std::string in() const { return theme().period == "day" ? "on" : "in"; }
  std::string per_unit(double v) const { return text::money(v) + " per " + theme().unit; }
  std::string qty(double v) const { return text::num(v) + " " + theme().units; }

  // "40, 55 and 70" for a per-period series.
  static std::string series(const std::vector<double>& v, bool money) {
    std::vector<std::string> parts;
    for (double x : v) parts.push_back(money ? text::money(x) : text::num(x));
    return text::english_list(parts);
  }

  std::string data_text() const {
    const Theme& th = theme();
    const std::string P = text::capitalize(th.period);
    std::string out;
    if (th.layout == Layout::table) {
      std::vector<std::string> header = {P, "Demand (" + th.units + ")", "Setup cost ($)",
                                         "Production cost ($ per " + th.unit + ")"};
      std::vector<std::vector<std::string>> rows;
      for (size_t t = 0; t < n(); ++t)
        rows.push_back({std::to_string(t + 1), text::num(demand[t]), text::num(setup[t]),
                        text::num(unit_cost[t])});
      out += "\n\n" + text::markdown_table(header, rows) + "\n";
      out += "The setup cost is paid once for every " + th.period + " " + in() + " which a " +
             th.run + " takes place, whatever its size; the production cost is paid for every " +
             th.unit + " made.";
    } else if (th.layout == Layout::bullets) {
      out += " The forecast per " + th.period + " is:\n\n";
      for (size_t t = 0; t < n(); ++t)
        out += "- " + P + " " + std::to_string(t + 1) + ": demand of " + qty(demand[t]) + "; a " +
               th.run + " costs " + text::money(setup[t]) + " to set up and each " + th.unit +
               " produced costs " + text::money(unit_cost[t]) + ".\n";
      out += "\nThe setup cost is incurred once for every " + th.period + " with a " + th.run +
             ", no matter how much is produced.";
    } else {
      out += " Demand for " + th.product + " in " + th.period + "s 1 to " + std::to_string(n()) +
             " is forecast at " + series(demand, false) + " " + th.units + " respectively. ";
      if (all_equal(setup))
        out += "Each " + th.run + " costs " + text::money(setup[0]) +
               " to set up, regardless of how much it produces";
      else
        out += "Setting up a " + th.run + " costs " + series(setup, true) + " in " + th.period +
               "s 1 to " + std::to_string(n()) +
               " respectively, regardless of how much it produces";
      out += ". ";
      if (all_equal(unit_cost))
        out += "Every " + th.unit + " produced costs " + text::money(unit_cost[0]) + ".";
      else
        out += "The variable production cost is " + series(unit_cost, true) + " per " + th.unit +
               " in " + th.period + "s 1 to " + std::to_string(n()) + " respectively.";
    }
    return out;
  }

  std::string nl() const override {
    const Theme& th = theme();
    const std::string N = std::to_string(n());
    std::string out = text::fill(th.intro, {{"{org}", org}, {"{n}", N}});
    out += data_text() + "\n\n";
    if (initial_stock > 0)
      out += "At the start of " + th.period + " 1 there are " + qty(initial_stock) + " in stock. ";
    else
      out += "There is no stock at the start of " + th.period + " 1. ";
    out += "Nothing can be produced " + in() + " a " + th.period + " without a " + th.run + " " +
           in() + " that " + th.period + ". ";
    if (capacity > 0)
      out += "A " + th.run + " can produce at most " + qty(capacity) + ". ";
    else
      out += "There is no limit on how much a " + th.run + " can produce. ";
    out += "Stock left over at the end of a " + th.period + " (including the last one) costs " +
           per_unit(holding) + " per " + th.period + " to hold. ";
    if (backlog)
      out += "Demand may be backordered: every " + th.unit +
             " of demand still unmet at the end of "
             "a " +
             th.period + " costs " + per_unit(backlog_cost) + " per " + th.period +
             ", but all demand must be delivered by the end of " + th.period + " " + N + ". ";
    else
      out += "Demand must be met in full " + in() + " the " + th.period +
             " it occurs; no backorders. ";
    if (min_stock > 0)
      out += "As safety stock, at least " + qty(min_stock) +
             " must be on hand at the end of every " + th.period + ". ";
    if (warehouse > 0)
      out += "Storage space limits the stock at the end of any " + th.period + " to at most " +
             qty(warehouse) + ". ";
    if (max_setups > 0)
      out += "Because of crew availability, at most " + std::to_string(max_setups) + " " + th.run +
             "s can take place over the whole horizon. ";
    if (shutdown > 0)
      out += "The line is down for maintenance " + in() + " " + th.period + " " +
             std::to_string(shutdown) + ", so nothing can be produced then. ";
    out += "Quantities of " + th.product + " may be fractional, while running or not running " +
           in() + " a given " + th.period + " is a yes/no decision.\n\n";
    out += replace_all(th.question, "{n}", N);
    return out;
  }

  std::string alg() const override {
    AlgebraicFormulation f(backlog ? "Lot sizing with backorders" : "Lot sizing");
    f.set("$T = \\{1,\\dots," + std::to_string(n()) + "\\}$",
          "planning periods (" + theme().period + "s)");
    f.parameter("$d_t$", "demand in period $t$ (" + theme().units + ")", latex_vector(demand));
    f.parameter("$f_t$", "setup cost in period $t$ ($)", latex_vector(setup));
    f.parameter("$c_t$", "unit production cost in period $t$ ($ per " + theme().unit + ")",
                latex_vector(unit_cost));
    f.parameter("$h$", "holding cost per " + theme().unit + " per period", text::num(holding));
    f.parameter("$I_0$", "initial stock", text::num(initial_stock));
    if (capacity > 0) f.parameter("$C$", "capacity of a production run", text::num(capacity));
    if (backlog)
      f.parameter("$b$", "backorder cost per " + theme().unit + " per period",
                  text::num(backlog_cost));
    if (min_stock > 0) f.parameter("$s$", "safety stock", text::num(min_stock));
    if (warehouse > 0) f.parameter("$W$", "storage limit", text::num(warehouse));
    if (max_setups > 0)
      f.parameter("$K$", "maximum number of production runs", std::to_string(max_setups));
    std::string bound =
        backlog ? "\\sum_{u \\in T} d_u"
                : std::string("\\sum_{u \\in T: u \\ge t} d_u") + (min_stock > 0 ? " + s" : "");
    f.parameter("$M_t = " + (capacity > 0 ? "\\min(C, " + bound + ")" : bound) + "$",
                "largest useful production in period $t$", latex_vector(big_m()));
    f.variable("$q_t \\ge 0$", "quantity produced in period $t$");
    f.variable("$I_t \\ge 0$", "stock at the end of period $t$");
    if (backlog) f.variable("$B_t \\ge 0$", "backordered demand at the end of period $t$");
    f.variable("$y_t \\in \\{0,1\\}$", "1 if production is set up in period $t$");
    f.objective(std::string("\\min \\sum_{t \\in T} (f_t y_t + c_t q_t + h I_t") +
                    (backlog ? " + b B_t)" : ")"),
                std::string(backlog ? "Minimise setup, production, holding and backorder costs"
                                    : "Minimise setup, production and holding costs"));
    if (backlog) {
      f.constraint("balance",
                   "I_{t-1} - B_{t-1} + q_t - I_t + B_t = d_t \\quad \\forall t \\in T"
                   " \\quad (B_0 = 0)");
      f.constraint("no final backorders", "B_{" + std::to_string(n()) + "} = 0");
    } else {
      f.constraint("balance", "I_{t-1} + q_t - I_t = d_t \\quad \\forall t \\in T");
    }
    f.constraint("setup", "q_t \\le M_t y_t \\quad \\forall t \\in T");
    if (min_stock > 0) f.constraint("safety stock", "I_t \\ge s \\quad \\forall t \\in T");
    if (warehouse > 0) f.constraint("storage", "I_t \\le W \\quad \\forall t \\in T");
    if (max_setups > 0) f.constraint("run limit", "\\sum_{t \\in T} y_t \\le K");
    if (shutdown > 0) f.constraint("shutdown", "q_{" + std::to_string(shutdown) + "} = 0");
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model =
        "param n integer > 0;\nset T := 1..n;\nparam d{T} >= 0;\nparam f{T} >= 0;\n"
        "param c{T} >= 0;\nparam h >= 0;\nparam I0 >= 0;\n";
    if (capacity > 0) model += "param C > 0;\n";
    if (backlog) model += "param b >= 0;\n";
    if (min_stock > 0) model += "param s >= 0;\n";
    if (warehouse > 0) model += "param W >= 0;\n";
    if (max_setups > 0) model += "param K integer >= 0;\n";
    std::string bound =
        backlog ? "sum{u in T} d[u]"
                : std::string("sum{u in T: u >= t} d[u]") + (min_stock > 0 ? " + s" : "");
    model += "param M{t in T} := " + (capacity > 0 ? "min(C, " + bound + ")" : bound) + ";\n";
    model += "var q{T} >= 0;\nvar I{T} >= 0;\nvar y{T} binary;\n";
    if (backlog) model += "var B{T} >= 0;\n";
    model += "minimize TotalCost: sum{t in T} (f[t] * y[t] + c[t] * q[t] + h * I[t]" +
             std::string(backlog ? " + b * B[t]);\n" : ");\n");
    if (backlog) {
      model +=
          "s.t. Balance{t in T}: (if t = 1 then I0 else I[t-1] - B[t-1]) + q[t] - I[t] + B[t] "
          "= d[t];\n"
          "s.t. NoFinalBackorder: B[n] = 0;\n";
    } else {
      model += "s.t. Balance{t in T}: (if t = 1 then I0 else I[t-1]) + q[t] - I[t] = d[t];\n";
    }
    model += "s.t. Setup{t in T}: q[t] <= M[t] * y[t];\n";
    if (min_stock > 0) model += "s.t. SafetyStock{t in T}: I[t] >= s;\n";
    if (warehouse > 0) model += "s.t. Storage{t in T}: I[t] <= W;\n";
    if (max_setups > 0) model += "s.t. RunLimit: sum{t in T} y[t] <= K;\n";
    if (shutdown > 0) model += "s.t. Shutdown: q[" + std::to_string(shutdown) + "] = 0;\n";

    const auto k = keys();
    GmplData data;
    data.param("n", static_cast<double>(n()));
    data.param("d", k, demand).param("f", k, setup).param("c", k, unit_cost);
    data.param("h", holding).param("I0", initial_stock);
    if (capacity > 0) data.param("C", capacity);
    if (backlog) data.param("b", backlog_cost);
    if (min_stock > 0) data.param("s", min_stock);
    if (warehouse > 0) data.param("W", warehouse);
    if (max_setups > 0) data.param("K", max_setups);
    return compose_gmpl(model, "TotalCost", data);
  }

  CheckResult check(const Solution& sol) const override {
    Checker c;
    const auto k = keys();
    double objective = 0;
    double prev_stock = initial_stock, prev_backlog = 0;
    int runs = 0;
    for (size_t t = 0; t < n(); ++t) {
      const std::string tag = "period " + k[t];
      double q = sol.value("q", {k[t]}), inv = sol.value("I", {k[t]}), y = sol.value("y", {k[t]});
      double back = backlog ? sol.value("B", {k[t]}) : 0.0;
      c.ge(q, 0, "production in " + tag);
      c.ge(inv, 0, "stock in " + tag);
      c.ge(back, 0, "backorders in " + tag);
      c.binary(y, "setup in " + tag);
      c.eq(prev_stock - prev_backlog + q - inv + back, demand[t], "balance in " + tag);
      // Production needs a run; a run is limited by the capacity.
      const double limit =
          y > 0.5 ? (capacity > 0 ? capacity : std::numeric_limits<double>::max()) : 0.0;
      c.le(q, limit, "production without setup or above capacity in " + tag);
      if (min_stock > 0) c.ge(inv, min_stock, "safety stock in " + tag);
      if (warehouse > 0) c.le(inv, warehouse, "storage limit in " + tag);
      if (shutdown == static_cast<int>(t) + 1) c.le(q, 0, "production during shutdown in " + tag);
      if (y > 0.5) ++runs;
      objective += setup[t] * y + unit_cost[t] * q + holding * inv + backlog_cost * back;
      prev_stock = inv;
      prev_backlog = back;
    }
    if (backlog) c.le(prev_backlog, 0, "backorders left at the end of the horizon");
    if (max_setups > 0) c.le(runs, max_setups, "number of production runs");
    return c.result(objective);
  }
};

class LotSizingFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "lot_sizing"; }
  std::string_view title() const override {
    return "Lot sizing (capacitated or uncapacitated, with optional backorders)";
  }
  ProblemClass problem_class() const override { return ProblemClass::milp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<LotSizingInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    inst->org = rng.pick(text::companies());
    const size_t n =
        static_cast<size_t>(size_for(rng, options.difficulty, {4, 6}, {6, 9}, {9, 12}));
    const double rate = options.side_constraint_rate;

    for (size_t t = 0; t < n; ++t) inst->demand.push_back(5.0 * rng.uniform_int(4, 30));
    const double base_setup = 10.0 * rng.uniform_int(10, 60);
    const bool vary_setup = rng.bernoulli(0.5);
    for (size_t t = 0; t < n; ++t)
      inst->setup.push_back(
          vary_setup ? std::max(50.0, base_setup + 10.0 * rng.uniform_int(-10, 10)) : base_setup);
    const double base_unit = rng.uniform_int(3, 12);
    const bool vary_unit = rng.bernoulli(0.5);
    for (size_t t = 0; t < n; ++t)
      inst->unit_cost.push_back(vary_unit ? std::max(1.0, base_unit + rng.uniform_int(-2, 2))
                                          : base_unit);
    inst->holding = 0.5 * rng.uniform_int(2, 8);
    if (rng.bernoulli(0.5))
      inst->initial_stock = 5.0 * std::floor(inst->demand[0] * rng.uniform(0.2, 0.8) / 5.0);
    inst->backlog = rng.bernoulli(0.3);
    if (inst->backlog) inst->backlog_cost = 2 * inst->holding + rng.uniform_int(1, 4);
    // A safety stock makes no sense together with backorders.
    if (!inst->backlog && rng.bernoulli(rate)) inst->min_stock = 5.0 * rng.uniform_int(2, 6);

    // Planted plan: a run in period 1 (the initial stock never covers d_1) and
    // in a random subset of later periods; each run covers the demand up to the
    // next run, and the first one also builds the safety stock.
    std::vector<bool> run(n, false);
    run[0] = true;
    for (size_t t = 1; t < n; ++t) run[t] = rng.bernoulli(0.45);
    std::vector<double> lot(n, 0.0), stock(n, 0.0);
    for (size_t t = 0; t < n; ++t) {
      if (!run[t]) continue;
      for (size_t u = t; u < n && (u == t || !run[u]); ++u) lot[t] += inst->demand[u];
    }
    lot[0] += inst->min_stock - inst->initial_stock;
    double level = inst->initial_stock;
    for (size_t t = 0; t < n; ++t) {
      level += lot[t] - inst->demand[t];
      stock[t] = level;
    }
    const double max_lot = *std::max_element(lot.begin(), lot.end());
    if (rng.bernoulli(0.6)) inst->capacity = round_up(max_lot * rng.uniform(1.0, 1.3), 5.0);

    if (rng.bernoulli(rate)) {
      const double max_stock = *std::max_element(stock.begin(), stock.end());
      if (max_stock > 0) inst->warehouse = round_up(max_stock * rng.uniform(1.0, 1.25), 5.0);
    }
    if (rng.bernoulli(rate)) {
      int runs = static_cast<int>(std::count(run.begin(), run.end(), true));
      int limit = runs + rng.uniform_int(0, 1);
      if (limit < static_cast<int>(n)) inst->max_setups = limit;
    }
    if (rng.bernoulli(rate)) {
      std::vector<int> idle;
      for (size_t t = 1; t < n; ++t)
        if (!run[t]) idle.push_back(static_cast<int>(t) + 1);
      if (!idle.empty()) inst->shutdown = rng.pick(idle);
    }
    return inst;
  }
};

}  // namespace

const Family& lot_sizing_family() {
  static const LotSizingFamily family;
  return family;
}

}  // namespace trex::orlib
