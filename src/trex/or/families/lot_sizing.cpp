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

struct Theme {
  std::string intro;    // {org} -> organisation, {n} -> number of periods
  std::string product;  // "flour"
  std::string unit;     // singular: "tonne"
  std::string units;    // plural: "tonnes"
  std::string period;   // "week"
  std::string run;      // "milling run"
  text::Layout layout;  // the layout of the per-period data in half of the theme's texts
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"The flour mill of {org} supplies regional bakeries and is planning production for the "
       "next {n} weeks.",
       "flour", "tonne", "tonnes", "week", "milling run", text::Layout::columns},
      {"{org} makes an industrial solvent in a batch reactor. The planner has to decide in which "
       "of the next {n} months to run a batch and how much to make.",
       "solvent", "kilolitre", "kilolitres", "month", "batch", text::Layout::table},
      {"A craft brewery that supplies {org} is drawing up its brewing schedule for the next {n} "
       "weeks.",
       "lager", "hectolitre", "hectolitres", "week", "brew", text::Layout::bullets},
      {"The feed mill of {org} produces a pelleted cattle feed. The production manager is planning "
       "the next {n} days.",
       "cattle feed", "tonne", "tonnes", "day", "production run", text::Layout::table},
      {"{org} blends a liquid detergent on a line that has to be cleaned and set up before every "
       "production campaign. A plan for the next {n} weeks is needed.",
       "detergent", "cubic metre", "cubic metres", "week", "production campaign",
       text::Layout::rows},
  };
  return t;
}

bool all_equal(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [&](double x) { return x == v.front(); });
}

class LotSizingInstance : public ComposedInstance<themes> {
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
  std::string qty(const text::Style& style, double v) const {
    return style.num(v) + " " + (v == 1 ? theme().unit : theme().units);
  }

  std::string compose(text::Style& style) const override {
    const Theme& th = theme();
    text::Composer text(style);
    const std::string N = std::to_string(n());
    const std::string periods = text::plural(th.period);
    const std::string a_run = text::article(th.run) + " " + th.run;
    const auto fill = [&](const std::string& pattern) {
      return text::fill(pattern, {{"{period}", th.period},
                                  {"{periods}", periods},
                                  {"{in}", in()},
                                  {"{a run}", a_run},
                                  {"{A run}", text::capitalize(a_run)},
                                  {"{run}", th.run},
                                  {"{unit}", th.unit},
                                  {"{units}", th.units},
                                  {"{product}", th.product},
                                  {"{N}", N}});
    };
    text.fact(text::fill(th.intro, {{"{org}", org}, {"{n}", style.count(static_cast<long>(n()))}}));
    text.distractors(org, 1, 0.25);
    text.fact(fill(
        style.pick({"The data for each {period} are:", "Per {period}, the forecast is as follows.",
                    "The planning data by {period} are given below."})));
    text.paragraph(false);

    // A cost that is the same in every period may be stated once instead of per period.
    const bool setup_once = all_equal(setup) && style.chance(0.6);
    const bool unit_once = all_equal(unit_cost) && style.chance(0.6);
    text::Records records;
    records.row_header = text::capitalize(th.period);
    const std::string subject = style.pick({"{p} has", "for {p} there is"});
    for (size_t t = 0; t < n(); ++t) {
      records.names.push_back(th.period + " " + std::to_string(t + 1));
      records.row_subjects.push_back(replace_all(subject, "{p}", records.names.back()));
    }
    const text::Layout layout = style.chance(0.5)
                                    ? th.layout
                                    : style.layout({text::Layout::table, text::Layout::bullets,
                                                    text::Layout::rows, text::Layout::columns});
    // Columns of per-period data read best as series over the periods ("40, 55 and
    // 70 tonnes in weeks 1 to 3, respectively"): "week 1 40" would run two numbers together.
    std::vector<std::string> series;
    auto column = [&](const std::string& header, const std::string& label,
                      const std::vector<double>& values, const std::string& phrase, bool money,
                      std::initializer_list<const char*> series_forms) {
      text::Attribute a;
      a.header = header;
      a.label = label;
      std::vector<std::string> listed;
      for (double v : values) {
        a.cells.push_back(style.num(v));
        a.phrases.push_back(replace_all(phrase, "{v}", money ? style.money(v) : qty(style, v)));
        listed.push_back(money ? style.money(v) : style.num(v));
      }
      records.attributes.push_back(std::move(a));
      if (layout == text::Layout::columns)
        series.push_back(
            text::fill(fill(style.pick(series_forms)), {{"{list}", text::english_list(listed)}}));
    };
    column("Demand (" + th.units + ")", "demands in " + th.units, demand,
           style.pick({"a demand of {v}", "a forecast demand of {v}", "demand for {v}"}), false,
           {"Demand for {product} in {periods} 1 to {N} is forecast at {list} {units}, "
            "respectively.",
            "The forecast demands for {periods} 1 to {N} are {list} {units}.",
            "Over {periods} 1 to {N}, the demand is {list} {units}, respectively."});
    if (!setup_once)
      column("Setup cost ($)", "setup costs in dollars", setup,
             fill(style.pick({"a setup cost of {v}", "a {run} setup cost of {v}",
                              "a setup cost of {v} per {run}"})),
             true,
             {"Setting up {a run} costs {list} in {periods} 1 to {N}, respectively.",
              "The setup costs for {periods} 1 to {N} are {list}."});
    if (!unit_once)
      column(
          "Production cost ($ per " + th.unit + ")", "production costs in dollars per " + th.unit,
          unit_cost,
          fill(style.pick({"a production cost of {v} per {unit}", "a unit cost of {v} per {unit}",
                           "a variable cost of {v} per {unit}"})),
          true,
          {"The production cost per {unit} is {list} in {periods} 1 to {N}, respectively.",
           "Per {unit}, production costs {list} in {periods} 1 to {N}."});
    text.block(layout == text::Layout::columns ? join(series, " ")
                                               : text::render_records(style, layout, records));

    if (setup_once)
      text.fact(replace_all(
          fill(style.pick(
              {"Each {run} costs {v} to set up, regardless of how much it produces.",
               "Setting up {a run} costs {v} {in} every {period}, whatever the quantity.",
               "The setup cost of {a run} is {v}, the same {in} every {period} and "
               "independent of its size."})),
          "{v}", style.money(setup[0])));
    else
      text.fact(fill(style.pick(
          {"The setup cost is paid once for every {period} {in} which {a run} takes place, "
           "whatever its size; the production cost is paid for every {unit} made.",
           "A {period}'s setup cost is incurred once if {a run} takes place {in} it, no matter "
           "how much is produced; the production cost applies to every {unit} made.",
           "Setup costs are fixed charges per {run}, independent of its size, while production "
           "costs are paid per {unit}."})));
    if (unit_once)
      text.fact(
          replace_all(fill(style.pick({"Every {unit} produced costs {v}.",
                                       "The production cost is {v} per {unit} {in} every {period}.",
                                       "Making one {unit} costs {v}, whatever the {period}."})),
                      "{v}", style.money(unit_cost[0])));
    if (initial_stock > 0)
      text.fact(replace_all(
          fill(
              style.pick({"At the start of {period} 1 there are {q} in stock.",
                          "The opening stock at the start of {period} 1 is {q}.",
                          "The warehouse already holds {q} of {product} when {period} 1 begins."})),
          "{q}", qty(style, initial_stock)));
    else
      text.fact(fill(style.pick({"There is no stock at the start of {period} 1.",
                                 "The warehouse is empty at the start of {period} 1.",
                                 "No {product} is in stock when {period} 1 begins."})));
    text.fact(fill(style.pick(
        {"Nothing can be produced {in} a {period} without {a run} {in} that {period}.",
         "Production {in} a {period} is only possible if {a run} is set up {in} that {period}.",
         "A {period} without {a run} has no production."})));
    if (capacity > 0)
      text.fact(replace_all(
          fill(style.pick({"{A run} can produce at most {q}.", "The capacity of {a run} is {q}.",
                           "No {run} can make more than {q}."})),
          "{q}", qty(style, capacity)));
    else
      text.fact(
          fill(style.pick({"There is no limit on how much {a run} can produce.",
                           "{A run} can be of any size.", "Production capacity is unlimited."})));
    const std::string per_unit = style.money(holding) + " per " + th.unit;
    text.fact(text::fill(
        fill(style.pick({"Stock left over at the end of a {period} (including the last one) costs "
                         "{h} per {period} to hold.",
                         "Holding stock costs {h} per {period}, charged on the stock at the end "
                         "of every {period}, the last one included.",
                         "Every {unit} in stock at the end of a {period}, including the final "
                         "one, incurs a holding cost of {m} per {period}."})),
        {{"{h}", per_unit}, {"{m}", style.money(holding)}}));
    text.paragraph();
    if (backlog)
      text.fact(text::fill(
          fill(style.pick(
              {"Demand may be backordered: every {unit} of demand still unmet at the end of a "
               "{period} costs {m} per {period}, but all demand must be delivered by the end of "
               "{period} {N}.",
               "Late delivery is allowed at a backorder cost of {b} per {period}, charged on "
               "demand still unmet at the end of each {period}; everything must be delivered by "
               "the end of {period} {N}.",
               "Shortages can be carried forward as backorders, which cost {b} for every {period} "
               "they are still open at a {period}'s end; no backorders may remain after {period} "
               "{N}."})),
          {{"{b}", style.money(backlog_cost) + " per " + th.unit},
           {"{m}", style.money(backlog_cost)}}));
    else
      text.fact(
          fill(style.pick({"Demand must be met in full {in} the {period} it occurs; no "
                           "backorders.",
                           "Backorders are not allowed: each {period}'s demand must be met "
                           "on time.",
                           "Every {period}'s demand has to be satisfied {in} that {period}, "
                           "from stock or production."})));
    if (min_stock > 0)
      text.fact(replace_all(
          fill(style.pick({"As safety stock, at least {q} must be on hand at the end of every "
                           "{period}.",
                           "The stock at the end of each {period} may not fall below {q}.",
                           "A safety stock of {q} must be kept at the end of every {period}."})),
          "{q}", qty(style, min_stock)));
    if (warehouse > 0)
      text.fact(replace_all(
          fill(style.pick({"Storage space limits the stock at the end of any {period} to at most "
                           "{q}.",
                           "At most {q} can be stored at the end of a {period}.",
                           "The warehouse holds no more than {q} at the end of any {period}."})),
          "{q}", qty(style, warehouse)));
    if (max_setups > 0)
      text.fact(text::fill(
          style.pick({"Because of crew availability, at most {k} can take place over the whole "
                      "horizon.",
                      "There is crew for no more than {k} in total over the {n} {periods}.",
                      "At most {k} may be scheduled over the planning horizon."}),
          {{"{k}", style.count_of(max_setups, th.run)},
           {"{n}", style.count(static_cast<long>(n()))},
           {"{periods}", periods}}));
    if (shutdown > 0)
      text.fact(replace_all(
          fill(style.pick({"The line is down for maintenance {in} {period} {s}, so nothing can be "
                           "produced then.",
                           "Maintenance stops production {in} {period} {s}.",
                           "No {run} is possible {in} {period} {s} because of planned "
                           "maintenance."})),
          "{s}", std::to_string(shutdown)));
    text.fact(fill(style.pick(
        {"Quantities of {product} may be fractional, while running or not running {in} a given "
         "{period} is a yes/no decision.",
         "Production quantities can be fractional, but whether {a run} takes place {in} a "
         "{period} is a yes/no decision.",
         "The amount produced may be any non-negative number; {a run} either happens {in} a "
         "{period} or it does not."})));
    text.distractors(org, 1, 0.2);
    text.paragraph();
    const std::string costs = backlog ? "setup, production, holding and backorder costs"
                                      : "setup, production and holding costs";
    text.fact(text::question(
        style,
        fill(style.pick({"how much {product} to produce {in} each {period}",
                         "{in} which {periods} to schedule {a run} and how much to make",
                         "a production plan for the " + N + " {periods}"})),
        style.pick({"minimise the total cost (" + costs + ")",
                    "keep the total of " + costs + " as small as possible"}),
        style.pick({"the minimum total cost", "the lowest achievable total cost",
                    "the minimum total cost in dollars"})));
    return text.text();
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
