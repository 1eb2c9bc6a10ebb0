// Multi-period production and inventory planning: several products share one
// capacity in every period (machine or line hours with hours per unit, or a
// number of units, all products together), demand must be met on time, and
// goods made early are held in stock at a holding cost. Optional conditions:
// overtime at a premium, a capacity that varies by period, a storage limit on
// the total stock, an opening stock and a closing stock to leave at the end.
// Minimise production, holding and overtime costs. LP, or IP when the story
// makes whole units.
//
// Generator: draws seasonal demand that peaks in the second half, so the peak
// needs more than one period's capacity; plants the latest-possible production
// plan (a backward pass that pushes what a period cannot make into earlier
// periods, raising the capacity until the first period copes); and reads the
// storage limit off that plan, so it is feasible.
#include <algorithm>
#include <cmath>

#include "trex/core/error.hpp"
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
  std::string intro;  // {org}, {n} (a count), {periods} (plural period noun)
  std::string product_noun;
  std::vector<std::string> products;
  std::string unit, units;                // "unit"/"units", "tonne"/"tonnes"
  bool countable;                         // "120 bicycles" rather than "120 tonnes of urea"
  bool integer;                           // whole units only (IP)
  std::string period;                     // "month"
  std::vector<std::string> period_names;  // at least 8, in order: "January", "week 1"
  std::string site;                       // "the workshop"
  std::string resource;                   // "assembly labour"
  std::string hours;                      // unit of the resource: "hours"
  // Hours per unit are a multiple of this. 0: capacity counts units, all
  // products together; whole-unit stories use it, as hours per unit would make
  // the capacity rows knapsacks that GLPK's branch-and-bound can take minutes on.
  double usage_step;
  std::string store;    // "warehouse"
  double demand_scale;  // demand per period is about 30..120 times this
  double demand_step;   // and a multiple of this
};

const std::vector<std::string>& months_from_january() {
  static const std::vector<std::string> m = {"January", "February", "March", "April",
                                             "May",     "June",     "July",  "August"};
  return m;
}

std::vector<std::string> weeks() {
  std::vector<std::string> w;
  for (int i = 1; i <= 8; ++i) w.push_back("week " + std::to_string(i));
  return w;
}

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"{org} builds furniture to order and is planning the next {n} {periods}.",
       "product",
       {"dining table", "chair", "bookcase", "desk", "wardrobe", "bed frame", "sideboard",
        "coffee table"},
       "unit",
       "units",
       true,
       true,
       "month",
       months_from_january(),
       "the workshop",
       "",
       "",
       0,
       "showroom store",
       1,
       5},
      {"The fertiliser plant of {org} must plan its output for the {n} {periods} of the growing "
       "season.",
       "fertiliser",
       {"urea", "ammonium nitrate", "NPK blend", "potash", "superphosphate", "calcium nitrate"},
       "tonne",
       "tonnes",
       false,
       false,
       "month",
       {"March", "April", "May", "June", "July", "August", "September", "October"},
       "the plant",
       "reactor time",
       "hours",
       0.05,
       "silo",
       4,
       10},
      {"{org} assembles bicycles and has to schedule production for the coming {n} {periods}.",
       "model",
       {"city bike", "mountain bike", "e-bike", "road bike", "kids' bike", "cargo bike"},
       "unit",
       "units",
       true,
       true,
       "week",
       weeks(),
       "the assembly hall",
       "",
       "",
       0,
       "warehouse",
       1,
       5},
      {"Ahead of the holiday season, {org} is planning {n} {periods} of toy production.",
       "toy",
       {"building set", "doll house", "toy train", "puzzle box", "board game", "plush bear",
        "kite"},
       "unit",
       "units",
       true,
       true,
       "month",
       {"May", "June", "July", "August", "September", "October", "November", "December"},
       "the factory",
       "",
       "",
       0,
       "warehouse",
       4,
       10},
      {"{org} mixes paint in batches and is drawing up a production plan for the next {n} "
       "{periods}.",
       "paint",
       {"interior emulsion", "exterior gloss", "primer", "wood stain", "floor varnish",
        "masonry paint"},
       "kilolitre",
       "kilolitres",
       false,
       false,
       "week",
       weeks(),
       "the mixing hall",
       "mixing line time",
       "hours",
       0.1,
       "tank farm",
       1,
       5},
      {"The cannery of {org} packs soup in cases and needs a plan for the next {n} {periods}.",
       "soup",
       {"tomato soup", "minestrone", "chicken soup", "lentil soup", "pea soup", "mushroom soup"},
       "case",
       "cases",
       false,
       false,
       "month",
       {"September", "October", "November", "December", "January", "February", "March", "April"},
       "the cannery",
       "canning line time",
       "hours",
       0.01,
       "warehouse",
       20,
       50},
  };
  return t;
}

double quarter_round(double v) {
  return std::max(0.25, std::round(v * 4) / 4);
}

class ProductionInventoryInstance : public ComposedInstance<themes> {
 public:
  std::vector<std::string> names, keys;     // products
  size_t periods = 0;                       // T
  std::vector<std::vector<double>> demand;  // demand[p][t]
  std::vector<double> usage;                // hours per unit, per product (1: unit capacity)
  std::vector<double> hours;                // regular capacity per period
  std::vector<double> cost, holding;        // per unit; holding per unit and period
  std::vector<double> opening;              // stock at the start, per product
  std::vector<double> closing;              // required stock at the end; empty: none
  double overtime = 0;                      // max overtime hours (units) per period; 0: none
  double overtime_cost = 0;                 // per overtime hour (unit)
  double storage = 0;                       // max total stock at a period's end; 0: none

  size_t n() const { return names.size(); }
  bool unit_capacity() const { return theme().usage_step == 0; }
  std::vector<std::string> period_keys() const { return numbered("", static_cast<int>(periods)); }
  const std::string& period_name(size_t t) const { return theme().period_names[t]; }
  bool constant_hours() const {
    return std::all_of(hours.begin(), hours.end(), [&](double h) { return h == hours.front(); });
  }
  bool any_opening() const {
    return std::any_of(opening.begin(), opening.end(), [](double v) { return v > 0; });
  }

  json size() const override {
    return {{"products", n()},
            {"periods", periods},
            {"side_constraints", (overtime > 0) + (storage > 0) + !closing.empty()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v;
    if (theme().integer) v.push_back("integer_units");
    if (overtime > 0) v.push_back("overtime");
    if (storage > 0) v.push_back("storage_limit");
    if (!closing.empty()) v.push_back("closing_stock");
    if (!constant_hours()) v.push_back("varying_capacity");
    return v;
  }

  // "120 chairs" / "1 chair" for countable goods; "120 tonnes of urea" otherwise.
  std::string qty_of(const text::Style& style, double v, size_t p) const {
    const Theme& th = theme();
    if (th.countable) return style.num(v) + " " + (v == 1 ? names[p] : text::plural(names[p]));
    return style.num(v) + " " + (v == 1 ? th.unit : th.units) + " of " + names[p];
  }
  std::string amount(const text::Style& style, double v) const {
    const Theme& th = theme();
    return style.num(v) + " " + (v == 1 ? th.unit : th.units);
  }

  std::string compose(text::Style& style) const override {
    const Theme& th = theme();
    text::Composer text(style);
    const std::string periods_word = text::plural(th.period);
    const bool plural_subject = th.countable;  // "Chairs need ..." vs "Urea needs ..."
    auto verb = [&](const char* singular, const char* plural) {
      return std::string(plural_subject ? plural : singular);
    };

    text.fact(text::fill(th.intro, {{"{org}", org},
                                    {"{n}", style.count(static_cast<long>(periods))},
                                    {"{periods}", periods_word}}));
    std::vector<std::string> display;
    for (size_t p = 0; p < n(); ++p)
      display.push_back(th.countable ? text::plural(names[p]) : names[p]);
    text.fact(text::fill(
        n() == 1 ? style.pick({"It makes a single {noun}: {list}.",
                               "Only one {noun} is involved: {list}."})
                 : style.pick({"It makes {k} {nouns}: {list}.", "The {nouns} are {list}.",
                               "There are {k} {nouns} to plan ({list})."}),
        {{"{noun}", th.product_noun},
         {"{nouns}", text::plural(th.product_noun)},
         {"{k}", style.count(static_cast<long>(n()))},
         {"{list}", text::english_list(display)}}));
    // One distractor at most: two can contradict each other (two founding years).
    text.distractors(org, 1, 0.3);
    text.paragraph(false);

    // Per-product data.
    text::Records products;
    products.row_header = text::capitalize(th.product_noun);
    products.names = display;
    for (size_t p = 0; p < n(); ++p) products.row_subjects.push_back(display[p]);
    const std::string per = "per " + th.unit;
    if (!unit_capacity()) {
      text::Attribute a;
      a.header = text::capitalize(th.resource) + " (" + th.hours + " " + per + ")";
      a.label = th.hours + " of " + th.resource + " " + per;
      for (size_t p = 0; p < n(); ++p) {
        a.cells.push_back(style.num(usage[p]));
        a.phrases.push_back(verb("needs ", "need ") + style.num(usage[p]) + " " +
                            (usage[p] == 1 ? "hour" : th.hours) + " of " + th.resource + " " + per);
      }
      products.attributes.push_back(std::move(a));
    }
    {
      text::Attribute a;
      a.header = "Production cost ($ " + per + ")";
      a.label = "production costs in dollars " + per;
      for (size_t p = 0; p < n(); ++p) {
        a.cells.push_back(style.num(cost[p]));
        a.phrases.push_back(verb("costs ", "cost ") + style.money(cost[p]) + " " + per +
                            " to make");
      }
      products.attributes.push_back(std::move(a));
    }
    {
      text::Attribute a;
      a.header = "Holding cost ($ " + per + " per " + th.period + ")";
      a.label = "holding costs in dollars " + per + " per " + th.period;
      for (size_t p = 0; p < n(); ++p) {
        a.cells.push_back(style.num(holding[p]));
        a.phrases.push_back(verb("costs ", "cost ") + style.money(holding[p]) + " " + per +
                            " per " + th.period + " in stock");
      }
      products.attributes.push_back(std::move(a));
    }
    if (any_opening()) {
      text::Attribute a;
      a.header = "Opening stock (" + th.units + ")";
      a.label = "opening stocks in " + th.units;
      for (size_t p = 0; p < n(); ++p) {
        a.cells.push_back(style.num(opening[p]));
        a.phrases.push_back(opening[p] > 0 ? "start with " + amount(style, opening[p]) + " in stock"
                                           : "start with none in stock");
        if (!plural_subject) a.phrases.back().replace(0, 5, "starts");
      }
      products.attributes.push_back(std::move(a));
    }
    if (!closing.empty()) {
      text::Attribute a;
      a.header = "Closing stock required (" + th.units + ")";
      a.label = "required closing stocks in " + th.units;
      for (size_t p = 0; p < n(); ++p) {
        a.cells.push_back(style.num(closing[p]));
        a.phrases.push_back("must end with at least " + amount(style, closing[p]) + " in stock");
      }
      products.attributes.push_back(std::move(a));
    }
    // One product reads badly as "respectively" columns.
    const text::Layout product_layout =
        n() == 1 ? style.layout({text::Layout::table, text::Layout::bullets, text::Layout::rows})
                 : style.layout({text::Layout::table, text::Layout::bullets, text::Layout::rows,
                                 text::Layout::columns});
    text.block(text::render_records(style, product_layout, products));
    if (!any_opening())
      text.fact(
          style.pick({"Nothing is in stock at the start.",
                      "The " + th.store + " is empty at the start of " + period_name(0) + "."}));

    // Per-period data: orders, and the hours when they vary.
    const bool varying = !constant_hours();
    const text::Layout period_layout = style.layout(
        {text::Layout::table, text::Layout::bullets, text::Layout::rows, text::Layout::columns});
    text::Records orders;
    orders.row_header = text::capitalize(th.period);
    for (size_t t = 0; t < periods; ++t) {
      orders.names.push_back(period_name(t));
      orders.row_subjects.push_back("in " + period_name(t) + ",");
    }
    const bool per_product_columns =
        period_layout == text::Layout::table || period_layout == text::Layout::columns;
    if (per_product_columns) {
      for (size_t p = 0; p < n(); ++p) {
        text::Attribute a;
        a.header = "Demand: " + display[p] + " (" + th.units + ")";
        a.label = th.countable ? "numbers of " + display[p] + " ordered"
                               : "orders of " + names[p] + " in " + th.units;
        for (size_t t = 0; t < periods; ++t) a.cells.push_back(style.num(demand[p][t]));
        a.phrases.resize(periods);
        orders.attributes.push_back(std::move(a));
      }
    } else {
      text::Attribute a;
      const std::string ordering = style.pick({"customers order ", "orders call for "});
      for (size_t t = 0; t < periods; ++t) {
        std::vector<std::string> parts;
        for (size_t p = 0; p < n(); ++p) parts.push_back(qty_of(style, demand[p][t], p));
        a.phrases.push_back(ordering + text::english_list(parts));
      }
      a.cells.resize(periods);
      orders.attributes.push_back(std::move(a));
    }
    if (varying) {
      text::Attribute a;
      if (unit_capacity()) {
        a.header = "Capacity (" + th.units + ")";
        a.label = "capacities in " + th.units;
      } else {
        a.header = text::capitalize(th.resource) + " available (" + th.hours + ")";
        a.label = th.hours + " of " + th.resource + " available";
      }
      for (size_t t = 0; t < periods; ++t) {
        a.cells.push_back(style.num(hours[t]));
        a.phrases.push_back(unit_capacity()
                                ? th.site + " can make at most " + amount(style, hours[t])
                                : th.site + " has " + style.num(hours[t]) + " " + th.hours +
                                      " of " + th.resource);
      }
      orders.attributes.push_back(std::move(a));
    }
    if (!varying)
      text.fact(text::fill(
          unit_capacity()
              ? style.pick({"Every {period}, {site} can make at most {h} {units} in total.",
                            "{Site} has room for {h} {units} of output per {period}, all {nouns} "
                            "together.",
                            "At most {h} {units} can be made in each {period}."})
              : style.pick({"Every {period}, {site} has {h} {hours} of {resource}.",
                            "{Site} can use {h} {hours} of {resource} in each {period}.",
                            "Regular capacity is {h} {hours} of {resource} per {period}."}),
          {{"{period}", th.period},
           {"{site}", th.site},
           {"{Site}", text::capitalize(th.site)},
           {"{h}", style.num(hours.front())},
           {"{hours}", th.hours},
           {"{units}", th.units},
           {"{nouns}", text::plural(th.product_noun)},
           {"{resource}", th.resource}}));
    text.paragraph(false);
    text.fact(style.pick({"The orders are:", "Demand by " + th.period + ":",
                          "The expected orders are as follows."}));
    text.paragraph(false);
    text.block(text::render_records(style, period_layout, orders));

    if (overtime > 0)
      text.fact(text::fill(
          unit_capacity()
              ? style.pick({"On top of that, up to {o} more {units} can be made on overtime in "
                            "any {period}, at an extra {c} per {unit}.",
                            "Overtime adds up to {o} {units} of capacity per {period}, at {c} "
                            "extra per {unit}."})
              : style.pick({"On top of regular time, up to {o} {hours} of overtime can be worked "
                            "in any {period}, at {c} per hour.",
                            "Overtime is possible: at most {o} extra {hours} per {period}, each "
                            "costing {c}.",
                            "{Site} may add up to {o} {hours} of overtime per {period}; an "
                            "overtime hour costs {c}."}),
          {{"{o}", style.num(overtime)},
           {"{units}", th.units},
           {"{unit}", th.unit},
           {"{hours}", th.hours},
           {"{period}", th.period},
           {"{c}", style.money(overtime_cost)},
           {"{Site}", text::capitalize(th.site)}}));
    if (storage > 0)
      text.fact(text::fill(
          style.pick({"The {store} holds at most {s} in total at the end of any {period}.",
                      "No more than {s} can be in stock at the end of a {period}, all {nouns} "
                      "together.",
                      "Storage is limited: the {store} has room for {s} at the end of each "
                      "{period}."}),
          {{"{store}", th.store},
           {"{s}", amount(style, storage)},
           {"{period}", th.period},
           {"{nouns}", text::plural(th.product_noun)}}));
    text.fact(text::fill(
        style.pick({"Demand must be met on time; goods made early can be stored.",
                    "Late deliveries are not allowed, but stock carries over to the next "
                    "{period}.",
                    "Each {period}'s orders must come from that {period}'s production or from "
                    "stock."}),
        {{"{period}", th.period}}));
    if (th.integer)
      text.fact(style.pick({"Only whole " + th.units + " can be made and stored.",
                            "Production and stock are counted in whole " + th.units + "."}));
    text.paragraph();
    const std::string costs =
        overtime > 0 ? "production, holding and overtime costs" : "production and holding costs";
    // "how much potash" for a single product, not "how much of each fertiliser".
    const std::string what = n() > 1        ? "how much of each " + th.product_noun
                             : th.countable ? "how many " + display[0]
                                            : "how much " + names[0];
    text.fact(text::question(
        style,
        style.pick({what + " to make in each " + th.period + " and how much to keep in stock",
                    "a production and inventory plan for every " + th.period,
                    "the production quantities and stock levels for each " + th.period}),
        style.pick({"minimise the total of " + costs, "keep the total of " + costs +
                                                          " as low "
                                                          "as possible"}),
        style.pick({"the minimum total cost", "the lowest total cost in dollars",
                    "the optimal total cost"})));
    return text.text();
  }

  std::string alg() const override {
    const Theme& th = theme();
    AlgebraicFormulation f("Multi-period production and inventory planning");
    f.set("$P = " + latex_set(keys) + "$", text::plural(th.product_noun));
    f.set(
        "$T = \\{1,\\dots," + std::to_string(periods) + "\\}$",
        text::plural(th.period) + " (" + period_name(0) + " to " + period_name(periods - 1) + ")");
    f.parameter("$d_{p,t}$", "demand for $p$ in " + th.period + " $t$ (" + th.units + ")",
                latex_matrix(demand));
    const bool units = unit_capacity();
    if (!units)
      f.parameter("$a_p$", th.hours + " of " + th.resource + " per " + th.unit + " of $p$",
                  latex_vector(usage));
    f.parameter("$H_t$",
                (units ? th.units + " that can be made" : "regular " + th.hours + " available") +
                    " in " + th.period + " $t$",
                latex_vector(hours));
    f.parameter("$c_p$", "production cost per " + th.unit + " (dollars)", latex_vector(cost));
    f.parameter("$h_p$", "holding cost per " + th.unit + " and " + th.period + " (dollars)",
                latex_vector(holding));
    f.parameter("$I^0_p$", "opening stock", latex_vector(opening));
    if (overtime > 0) {
      f.parameter("$O$",
                  "overtime " + (units ? th.units : th.hours) + " available per " + th.period,
                  text::num(overtime));
      f.parameter("$c^{o}$", "extra cost per overtime " + (units ? th.unit : "hour") + " (dollars)",
                  text::num(overtime_cost));
    }
    if (storage > 0) f.parameter("$S$", "storage capacity (" + th.units + ")", text::num(storage));
    if (!closing.empty()) f.parameter("$F_p$", "required closing stock", latex_vector(closing));
    const std::string domain = th.integer ? "\\in \\mathbb{Z}_{\\ge 0}" : "\\ge 0";
    f.variable("$x_{p,t} " + domain + "$", th.units + " of $p$ made in " + th.period + " $t$");
    f.variable("$I_{p,t} " + domain + "$",
               "stock of $p$ at the end of " + th.period + " $t$ ($I_{p,0} = I^0_p$)");
    if (overtime > 0)
      f.variable("$o_t \\ge 0$",
                 "overtime " + (units ? th.units : th.hours) + " in " + th.period + " $t$");
    f.objective("\\min \\sum_{p \\in P} \\sum_{t \\in T} (c_p x_{p,t} + h_p I_{p,t})" +
                    std::string(overtime > 0 ? " + \\sum_{t \\in T} c^{o} o_t" : ""),
                "Minimise the total cost");
    f.constraint("stock balance",
                 "I_{p,t-1} + x_{p,t} - d_{p,t} = I_{p,t} \\quad \\forall p \\in P, t \\in T");
    f.constraint("capacity",
                 std::string(units ? "\\sum_{p \\in P} x_{p,t}" : "\\sum_{p \\in P} a_p x_{p,t}") +
                     " \\le H_t" + std::string(overtime > 0 ? " + o_t" : "") +
                     " \\quad \\forall t \\in T");
    if (overtime > 0) f.constraint("overtime limit", "o_t \\le O \\quad \\forall t \\in T");
    if (storage > 0)
      f.constraint("storage", "\\sum_{p \\in P} I_{p,t} \\le S \\quad \\forall t \\in T");
    if (!closing.empty())
      f.constraint("closing stock",
                   "I_{p," + std::to_string(periods) + "} \\ge F_p \\quad \\forall p \\in P");
    return f.markdown();
  }

  std::string gmpl() const override {
    const bool integer = theme().integer;
    std::string model =
        "set P;\nparam n integer > 0;\nset T := 1..n;\nparam d{P, T} >= 0;\n"
        "param H{T} >= 0;\nparam c{P} >= 0;\nparam h{P} >= 0;\nparam I0{P} >= 0;\n";
    if (!unit_capacity()) model += "param a{P} >= 0;\n";
    if (overtime > 0) model += "param O >= 0;\nparam oc >= 0;\n";
    if (storage > 0) model += "param S >= 0;\n";
    if (!closing.empty()) model += "param F{P} >= 0;\n";
    model += std::string("var x{P, T} >= 0") + (integer ? " integer" : "") + ";\n";
    // Stock is whole when production is (the data are whole numbers): declaring
    // it integer too only gives GLPK's branch-and-bound more to branch on.
    model += "var I{P, T} >= 0;\n";
    if (overtime > 0) model += "var o{T} >= 0, <= O;\n";
    model += "minimize Cost: sum{p in P, t in T} (c[p] * x[p, t] + h[p] * I[p, t])";
    model += overtime > 0 ? " + sum{t in T} oc * o[t];\n" : ";\n";
    model +=
        "s.t. Balance{p in P, t in T}: (if t = 1 then I0[p] else I[p, t - 1]) + x[p, t] - d[p, "
        "t] = I[p, t];\n";
    model += std::string("s.t. Capacity{t in T}: sum{p in P} ") +
             (unit_capacity() ? "x[p, t]" : "a[p] * x[p, t]") + " <= H[t]" +
             (overtime > 0 ? " + o[t]" : "") + ";\n";
    if (storage > 0) model += "s.t. Storage{t in T}: sum{p in P} I[p, t] <= S;\n";
    if (!closing.empty()) model += "s.t. Closing{p in P}: I[p, n] >= F[p];\n";

    GmplData data;
    data.set("P", keys).param("n", static_cast<double>(periods));
    data.param("d", keys, period_keys(), demand);
    if (!unit_capacity()) data.param("a", keys, usage);
    data.param("H", period_keys(), hours);
    data.param("c", keys, cost).param("h", keys, holding).param("I0", keys, opening);
    if (overtime > 0) data.param("O", overtime).param("oc", overtime_cost);
    if (storage > 0) data.param("S", storage);
    if (!closing.empty()) data.param("F", keys, closing);
    return compose_gmpl(model, "Cost", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    const bool integer = theme().integer;
    const std::vector<std::string> tk = period_keys();
    double objective = 0;
    std::vector<std::vector<double>> stock(n(), std::vector<double>(periods));
    for (size_t t = 0; t < periods; ++t) {
      double used = 0, stocked = 0;
      for (size_t p = 0; p < n(); ++p) {
        const std::string at = keys[p] + "," + tk[t];
        const double x = s.value("x", {keys[p], tk[t]});
        const double inv = s.value("I", {keys[p], tk[t]});
        stock[p][t] = inv;
        c.ge(x, 0, "x[" + at + "] nonnegative");
        c.ge(inv, 0, "stock I[" + at + "] nonnegative");
        if (integer) {
          c.integral(x, "x[" + at + "]");
          c.integral(inv, "I[" + at + "]");
        }
        const double before = t == 0 ? opening[p] : stock[p][t - 1];
        c.eq(before + x - demand[p][t], inv, "stock balance of " + at);
        used += usage[p] * x;
        stocked += inv;
        objective += cost[p] * x + holding[p] * inv;
      }
      double extra = 0;
      if (overtime > 0) {
        extra = s.value("o", {tk[t]});
        c.ge(extra, 0, "overtime o[" + tk[t] + "] nonnegative");
        c.le(extra, overtime, "overtime limit in period " + tk[t]);
        objective += overtime_cost * extra;
      }
      c.le(used, hours[t] + extra, "capacity in period " + tk[t]);
      if (storage > 0) c.le(stocked, storage, "storage limit in period " + tk[t]);
    }
    for (size_t p = 0; p < closing.size(); ++p)
      c.ge(stock[p][periods - 1], closing[p], "closing stock of " + keys[p]);
    return c.result(objective);
  }
};

class ProductionInventoryFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "production_inventory"; }
  std::string_view title() const override {
    return "Multi-period production and inventory (shared capacity, overtime, storage)";
  }
  ProblemClass problem_class() const override { return ProblemClass::lp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<ProductionInventoryInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    const size_t n = static_cast<size_t>(size_for(rng, options.difficulty, {1, 2}, {2, 3}, {3, 4}));
    const size_t periods =
        static_cast<size_t>(size_for(rng, options.difficulty, {3, 3}, {4, 6}, {6, 8}));
    inst->org = rng.pick(text::companies());
    inst->names = text::pick_distinct(rng, th.products, n);
    for (const auto& nm : inst->names) inst->keys.push_back(text::symbol(nm));
    inst->periods = periods;

    // Demand: a base level per product times a seasonal factor with one peak.
    const double step = th.demand_step;
    // The peak falls in the second half, so earlier periods can build stock for it.
    const size_t peak = periods / 2 + rng.index(periods - periods / 2);
    std::vector<double> season(periods);
    for (size_t t = 0; t < periods; ++t) {
      const double distance = std::fabs(static_cast<double>(t) - static_cast<double>(peak));
      season[t] = std::max(0.4, 1.6 - 0.3 * distance) * rng.uniform(0.85, 1.15);
    }
    inst->demand.assign(n, std::vector<double>(periods));
    for (size_t p = 0; p < n; ++p) {
      inst->usage.push_back(th.usage_step == 0
                                ? 1.0
                                : std::round(th.usage_step * rng.uniform_int(2, 10) * 100) / 100);
      const double base = rng.uniform(30, 120) * th.demand_scale;
      for (size_t t = 0; t < periods; ++t)
        inst->demand[p][t] =
            std::max(step, round_up(base * season[t] * rng.uniform(0.9, 1.1), step));
    }
    double total_required = 0;  // capacity the whole horizon's demand needs
    for (size_t t = 0; t < periods; ++t)
      for (size_t p = 0; p < n; ++p) total_required += inst->usage[p] * inst->demand[p][t];
    const double mean = total_required / static_cast<double>(periods);

    // Opening stock for some products, closing stock as a side condition.
    inst->opening.assign(n, 0.0);
    if (rng.bernoulli(options.difficulty == Difficulty::easy ? 0.3 : 0.5))
      for (size_t p = 0; p < n; ++p)
        if (rng.bernoulli(0.7))
          inst->opening[p] = round_down(inst->demand[p][0] * rng.uniform(0.2, 0.6), step);
    if (rng.bernoulli(options.side_constraint_rate)) {
      inst->closing.assign(n, 0.0);
      for (size_t p = 0; p < n; ++p)
        inst->closing[p] =
            std::max(step, round_down(inst->demand[p][periods - 1] * rng.uniform(0.1, 0.4), step));
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      inst->overtime = round_up(mean * rng.uniform(0.1, 0.25), 5);
      inst->overtime_cost = th.usage_step == 0 ? rng.uniform_int(4, 30) : rng.uniform_int(18, 45);
    }

    // Regular capacity below the average requirement, so the peak cannot be made
    // in its own period; raised until the first period copes with everything the
    // later ones cannot make.
    const double hour_step = mean > 400 ? 10 : 5;
    const bool varying = options.difficulty != Difficulty::easy && rng.bernoulli(0.5);
    inst->hours.assign(periods, 0.0);
    for (size_t t = 0; t < periods; ++t)
      inst->hours[t] = round_up(
          mean * (varying ? rng.uniform(0.8, 1.1) : 1.0) * rng.uniform(0.85, 1.0), hour_step);
    if (!varying) std::fill(inst->hours.begin(), inst->hours.end(), inst->hours.front());
    std::vector<std::vector<double>> plan;
    for (int attempt = 0;; ++attempt) {
      if (plant(*inst, plan)) break;
      if (attempt >= 60) throw Error("production_inventory: no feasible plan");
      for (double& h : inst->hours) h = round_up(h * 1.05, hour_step);
    }

    // Stock levels of the plan; the storage limit sits a little above their peak.
    double peak_stock = 0;
    std::vector<double> level = inst->opening;
    for (size_t t = 0; t < periods; ++t) {
      double total = 0;
      for (size_t p = 0; p < n; ++p) {
        level[p] += plan[p][t] - inst->demand[p][t];
        total += level[p];
      }
      peak_stock = std::max(peak_stock, total);
    }
    if (rng.bernoulli(options.side_constraint_rate) && peak_stock > 0)
      inst->storage = round_up(peak_stock * rng.uniform(1.0, 1.3) + 1, step);

    // Costs: labour for the hours a unit needs plus materials; holding a unit
    // for a period costs a few percent of that.
    for (size_t p = 0; p < n; ++p) {
      const double c =
          std::round((inst->usage[p] * rng.uniform(10, 25) + rng.uniform(5, 40)) * 2) / 2;
      inst->cost.push_back(c);
      inst->holding.push_back(quarter_round(c * rng.uniform(0.03, 0.12)));
    }
    return inst;
  }

 private:
  // The latest-possible plan for the regular hours (plus overtime): what a
  // period cannot make moves to the period before. False when the opening
  // stock cannot absorb what is still missing before the first period.
  static bool plant(const ProductionInventoryInstance& inst,
                    std::vector<std::vector<double>>& plan) {
    const size_t n = inst.n(), periods = inst.periods;
    const bool whole = inst.theme().integer;
    plan.assign(n, std::vector<double>(periods, 0.0));
    std::vector<double> carry(n, 0.0);
    for (size_t t = periods; t-- > 0;) {
      double left = inst.hours[t] + inst.overtime;
      for (size_t p = 0; p < n; ++p) {
        double need = inst.demand[p][t] + carry[p];
        if (t + 1 == periods && !inst.closing.empty()) need += inst.closing[p];
        double q = std::min(need, left / inst.usage[p]);
        if (whole) q = std::floor(q + 1e-9);
        q = std::max(0.0, q);
        plan[p][t] = q;
        left -= q * inst.usage[p];
        carry[p] = need - q;
      }
    }
    for (size_t p = 0; p < n; ++p)
      if (carry[p] > inst.opening[p] + 1e-9) return false;
    return true;
  }
};

}  // namespace

const Family& production_inventory_family() {
  static const ProductionInventoryFamily family;
  return family;
}

}  // namespace trex::orlib
