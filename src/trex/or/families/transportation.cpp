// Transportation problem: ship a commodity from suppliers to customers at
// minimum cost. Balanced instances (total supply = total demand) ship
// everything with equality constraints; unbalanced ones have spare supply and
// use <= / >=. Side conditions: a forbidden route, a route capacity, a minimum
// share of one customer's requirement from one supplier. LP.
//
// Generator: plants a shipment plan (each customer served by one or two
// suppliers), takes demands from it and supplies from its row sums (plus spare
// capacity when unbalanced); every side condition is drawn so the plan meets it.
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

// How a theme shows its data more often than not.
enum class Layout { grid, split_tables, prose };

struct Theme {
  std::string intro;                         // {org}
  std::string supplier_noun, customer_noun;  // "cement plant", "construction site"
  std::string commodity;                     // "cement"
  std::string unit, units;                   // "tonne", "tonnes"
  std::string supply_word;                   // "produces", "can release"
  int demand_lo, demand_hi;
  double cost_base, cost_per_km;  // cost = base + per_km * distance
  int cost_decimals;
  Layout layout;  // a bias: other layouts appear too
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"{org} supplies ready-mix cement to construction sites from its regional plants.", "plant",
       "construction site", "cement", "tonne", "tonnes", "can produce", 20, 120, 3, 0.12, 0,
       Layout::grid},
      {"A grain cooperative managed by {org} must move this season's wheat from its storage "
       "elevators to flour mills.",
       "elevator", "mill", "wheat", "tonne", "tonnes", "holds", 40, 200, 1.5, 0.08, 2,
       Layout::prose},
      {"The regional water authority, advised by {org}, must deliver water from its reservoirs "
       "to towns during a dry month.",
       "reservoir", "town", "water", "megalitre", "megalitres", "can release", 30, 150, 5, 0.15, 2,
       Layout::split_tables},
      {"{org} distributes diesel from its refineries to fuel depots.", "refinery", "depot",
       "diesel", "thousand litres", "thousand litres", "can supply", 50, 300, 8, 0.2, 0,
       Layout::prose},
      {"A timber company, {org}, hauls logs from its forest yards to sawmills.", "forest yard",
       "sawmill", "logs", "cubic metre", "cubic metres", "has", 25, 140, 2, 0.1, 2, Layout::grid},
      {"{org} delivers gravel from quarries to road construction projects.", "quarry",
       "road project", "gravel", "tonne", "tonnes", "can deliver", 30, 160, 1, 0.06, 2,
       Layout::split_tables},
  };
  return t;
}

class TransportationInstance : public ComposedInstance<themes> {
 public:
  std::vector<std::string> sources, sinks;  // display names (towns), also MathProg symbols
  std::vector<double> supply, demand;
  std::vector<std::vector<double>> cost;  // cost[i][j]
  bool balanced = false;
  struct Route {
    size_t i, j;
    double value;
  };
  std::vector<Route> forbidden;   // value unused
  std::vector<Route> route_caps;  // x_ij <= value
  std::vector<Route> min_shares;  // x_ij >= value% of demand_j

  size_t m() const { return sources.size(); }
  size_t n() const { return sinks.size(); }

  json size() const override {
    return {{"suppliers", m()},
            {"customers", n()},
            {"routes", m() * n()},
            {"side_constraints", forbidden.size() + route_caps.size() + min_shares.size()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v = {balanced ? "balanced" : "unbalanced"};
    if (!forbidden.empty()) v.push_back("forbidden_route");
    if (!route_caps.empty()) v.push_back("route_capacity");
    if (!min_shares.empty()) v.push_back("min_share");
    return v;
  }

  // "the Leeds plant"; a town is named by its name alone.
  std::string place(const std::string& name, const std::string& noun) const {
    return noun == "town" ? name : "the " + name + " " + noun;
  }
  std::string src(size_t i) const { return place(sources[i], theme().supplier_noun); }
  std::string dst(size_t j) const { return place(sinks[j], theme().customer_noun); }

  std::string compose(text::Style& style) const override {
    const Theme& th = theme();
    text::Composer text(style);
    const std::string suppliers = text::plural(th.supplier_noun);
    const std::string customers = text::plural(th.customer_noun);
    auto qty = [&](double v) { return style.num(v) + " " + (v == 1 ? th.unit : th.units); };
    text.fact(text::fill(th.intro, {{"{org}", org}}));
    text.fact(text::fill(
        style.pick({"There are {m} ({slist}) and {n} ({clist}).",
                    "It has {m} ({slist}) and serves {n}: {clist}.",
                    "The {suppliers} are at {slist}, and the {customers} to serve are {clist}.",
                    "Its {m} ({slist}) serve {n} ({clist})."}),
        {{"{m}", style.count_of(static_cast<long>(m()), th.supplier_noun)},
         {"{n}", style.count_of(static_cast<long>(n()), th.customer_noun)},
         {"{suppliers}", suppliers},
         {"{customers}", customers},
         {"{slist}", text::english_list(sources)},
         {"{clist}", text::english_list(sinks)}}));
    text.distractors(org, 1, 0.25);
    text.paragraph(false);

    // Supply and demand as per-entity records (any layout).
    auto amounts = [&](const std::vector<std::string>& names, const std::string& noun,
                       const std::vector<double>& values, const std::string& header,
                       const std::string& label, std::initializer_list<const char*> forms) {
      text::Records r;
      r.row_header = text::capitalize(noun);
      r.names = names;
      text::Attribute a;
      a.header = header + " (" + th.units + ")";
      a.label = label + " (in " + th.units + ")";
      for (size_t k = 0; k < names.size(); ++k) {
        r.row_subjects.push_back(place(names[k], noun));
        a.cells.push_back(style.num(values[k]));
        a.phrases.push_back(text::fill(style.pick(forms), {{"{q}", qty(values[k])},
                                                           {"{supply}", th.supply_word},
                                                           {"{commodity}", th.commodity}}));
      }
      r.attributes.push_back(std::move(a));
      return r;
    };
    const text::Records supply_records =
        amounts(sources, th.supplier_noun, supply, "Available", "amounts available",
                {"{supply} {q}", "{supply} {q} of {commodity}", "has {q} available"});
    const text::Records demand_records =
        amounts(sinks, th.customer_noun, demand, "Required", "requirements",
                {"requires {q}", "needs {q}", "has ordered {q}", "asks for {q}"});
    auto any_layout = [&]() {
      return style.layout(
          {text::Layout::table, text::Layout::bullets, text::Layout::rows, text::Layout::columns});
    };

    // The cost matrix: a Markdown table, or one sentence or bullet per
    // supplier listing its costs in the customers' order.
    const std::string per_unit = "per " + th.unit;
    // "$3 to York, $4 to Hull and $5 to Bath" ("$3 per tonne to York, ..." with `per`).
    auto cost_row = [&](size_t i, bool per) {
      std::vector<std::string> parts;
      for (size_t j = 0; j < n(); ++j)
        parts.push_back(style.money(cost[i][j]) + (per && j == 0 ? " " + per_unit : "") + " to " +
                        sinks[j]);
      return text::english_list(parts);
    };
    auto cost_table = [&]() {
      std::vector<std::string> header = {style.pick({"From \\ To", "Origin \\ Destination"})};
      for (const auto& s : sinks) header.push_back(s);
      std::vector<std::vector<std::string>> rows;
      for (size_t i = 0; i < m(); ++i) {
        std::vector<std::string> row = {sources[i]};
        for (size_t j = 0; j < n(); ++j) row.push_back(style.num(cost[i][j]));
        rows.push_back(std::move(row));
      }
      return text::markdown_table(header, rows);
    };
    auto cost_caption = [&]() {
      return text::fill(
          style.pick({"Shipping costs in dollars {per}:",
                      "The cost of shipping one {unit} of {commodity} on each route, in dollars:",
                      "The table gives the shipping cost in dollars {per} from each {supplier} "
                      "(rows) to each {customer} (columns):"}),
          {{"{per}", per_unit},
           {"{unit}", th.unit},
           {"{commodity}", th.commodity},
           {"{supplier}", th.supplier_noun},
           {"{customer}", th.customer_noun}});
    };
    auto cost_prose = [&]() {
      std::string out;
      if (style.chance(0.5)) {
        out = text::fill(style.pick({"Shipping costs {per}:\n", "Cost of shipping one {unit}:\n",
                                     "What one {unit} costs to ship on each route:\n"}),
                         {{"{per}", per_unit}, {"{unit}", th.unit}});
        const std::string bullet = style.pick({"- ", "* "});
        const std::string form = style.pick({"From {s}: {costs}.", "{S}: {costs}."});
        for (size_t i = 0; i < m(); ++i)
          out += bullet +
                 text::fill(form, {{"{s}", sources[i]},
                                   {"{S}", text::capitalize(sources[i])},
                                   {"{costs}", cost_row(i, false)}}) +
                 "\n";
        return out;
      }
      const std::string form = style.pick({"Shipping one {unit} from {src} costs {costs}.",
                                           "From {src}, a {unit} costs {costs} to ship.",
                                           "Per {unit}, shipping from {src} costs {costs}."});
      for (size_t i = 0; i < m(); ++i)
        out +=
            text::capitalize(text::fill(
                form, {{"{unit}", th.unit}, {"{src}", src(i)}, {"{costs}", cost_row(i, false)}})) +
            "\n";
      return out;
    };

    int layout = static_cast<int>(th.layout);
    if (!style.chance(0.5)) layout = style.choose(3);
    if (layout == static_cast<int>(Layout::grid)) {
      // One table: costs, supply in the last column, demand in the last row.
      text.fact(text::fill(
          style.pick({"The table gives the shipping cost in dollars {per} of {commodity} on each "
                      "route, the amount each {supplier} {supply} (last column) and the amount "
                      "each {customer} requires (last row), all in {units}.",
                      "Below are the shipping costs (dollars {per}) on every route, with each "
                      "{supplier}'s available {commodity} in the last column and each "
                      "{customer}'s requirement in the last row, in {units}."}),
          {{"{per}", per_unit},
           {"{commodity}", th.commodity},
           {"{supplier}", th.supplier_noun},
           {"{customer}", th.customer_noun},
           {"{supply}", th.supply_word},
           {"{units}", th.units}}));
      text.paragraph(false);
      std::vector<std::string> header = {"From \\ To"};
      for (const auto& s : sinks) header.push_back(s);
      header.push_back(style.pick({"Supply", "Available"}));
      std::vector<std::vector<std::string>> rows;
      for (size_t i = 0; i < m(); ++i) {
        std::vector<std::string> row = {sources[i]};
        for (size_t j = 0; j < n(); ++j) row.push_back(style.num(cost[i][j]));
        row.push_back(style.num(supply[i]));
        rows.push_back(std::move(row));
      }
      std::vector<std::string> last = {style.pick({"Demand", "Required"})};
      for (size_t j = 0; j < n(); ++j) last.push_back(style.num(demand[j]));
      last.push_back("");
      rows.push_back(std::move(last));
      text.block(text::markdown_table(header, rows));
    } else if (layout == static_cast<int>(Layout::split_tables)) {
      text.block(text::render_records(style, any_layout(), supply_records));
      text.block(text::render_records(style, any_layout(), demand_records));
      if (style.chance(0.5)) {
        text.block(cost_caption());
        text.block(cost_table());
      } else {
        text.block(cost_prose());
      }
    } else {
      // One line per supplier with its amount and its costs.
      const bool bullets = style.chance(0.6);
      const std::string bullet = style.pick({"- ", "* "});
      const std::string form =
          style.pick({"{Src} {supply} {q}; shipping from it costs {costs_per}.",
                      "{Src} {supply} {q}, and shipping one {unit} from it costs {costs}.",
                      "{Src} {supply} {q}. Shipping one {unit} from it costs {costs}."});
      std::string lines;
      for (size_t i = 0; i < m(); ++i)
        lines += (bullets ? bullet : "") +
                 text::fill(form, {{"{Src}", text::capitalize(src(i))},
                                   {"{supply}", th.supply_word},
                                   {"{q}", qty(supply[i])},
                                   {"{unit}", th.unit},
                                   {"{costs}", cost_row(i, false)},
                                   {"{costs_per}", cost_row(i, true)}}) +
                 "\n";
      text.block(lines);
      text.block(text::render_records(style, any_layout(), demand_records));
    }

    if (balanced)
      text.fact(text::fill(
          style.pick({"Total supply equals total demand, so every {supplier} must ship exactly "
                      "its available amount and every {customer} must receive exactly its "
                      "requirement.",
                      "Supply and demand are balanced: each {supplier} ships out everything it "
                      "has, and each {customer} receives exactly what it requires.",
                      "The totals match, so every {supplier} ships all it has and every "
                      "{customer} gets exactly its requirement, no more and no less."}),
          {{"{supplier}", th.supplier_noun},
           {"{customer}", th.customer_noun},
           {"{commodity}", th.commodity}}));
    else
      text.fact(text::fill(
          style.pick({"{A} {supplier} may ship less than it has available, and every {customer} "
                      "must receive at least its requirement.",
                      "There is spare supply: {a} {supplier} need not ship everything it has, but "
                      "every {customer} must get at least what it requires.",
                      "Total supply exceeds total demand: {a} {supplier} may ship less than it "
                      "has, but each {customer} must receive at least its requirement."}),
          {{"{A}", text::capitalize(text::article(th.supplier_noun))},
           {"{a}", text::article(th.supplier_noun)},
           {"{supplier}", th.supplier_noun},
           {"{customer}", th.customer_noun},
           {"{commodity}", th.commodity}}));
    for (const auto& r : forbidden)
      text.fact(text::fill(
          style.pick({"The road from {s} to {d} is closed, so nothing may be shipped on that "
                      "route.",
                      "Nothing can be shipped from {s} to {d}: the route is closed.",
                      "The route from {s} to {d} cannot be used."}),
          {{"{s}", src(r.i)}, {"{d}", dst(r.j)}}));
    for (const auto& r : route_caps)
      text.fact(text::capitalize(
          text::fill(style.pick({"at most {q} can be shipped from {s} to {d}.",
                                 "the route from {s} to {d} can carry no more than {q}.",
                                 "shipments from {s} to {d} are limited to {q}."}),
                     {{"{q}", qty(r.value)}, {"{s}", src(r.i)}, {"{d}", dst(r.j)}})));
    for (const auto& r : min_shares)
      text.fact(text::capitalize(text::fill(
          style.pick({"under a long-term contract, at least {p} of {d}'s requirement must come "
                      "from {s}.",
                      "{s} must supply at least {p} of the requirement of {d}.",
                      "a contract obliges {s} to cover at least {p} of {d}'s requirement."}),
          {{"{p}", style.percent(r.value)}, {"{s}", src(r.i)}, {"{d}", dst(r.j)}})));
    text.fact(
        style.pick({"Shipments may be fractional.", "Amounts shipped need not be whole numbers.",
                    "Any non-negative amount, fractions included, may be shipped on a "
                    "route."}));
    text.distractors(org, 1, 0.2);
    text.paragraph();
    const std::string task = style.pick({"how much to ship on each route",
                                         "how many " + th.units + " to send from each " +
                                             th.supplier_noun + " to each " + th.customer_noun,
                                         "a shipping plan"});
    const std::string value =
        style.pick({"the minimum total cost in dollars", "the minimum shipping cost",
                    "the lowest possible total cost"});
    text.fact(text::question(style, task, "minimise the total shipping cost", value));
    return text.text();
  }

  std::string alg() const override {
    const Theme& th = theme();
    AlgebraicFormulation f(std::string("Transportation problem (") +
                           (balanced ? "balanced" : "unbalanced") + ")");
    f.set("$S = " + latex_set(sources) + "$", text::plural(th.supplier_noun));
    f.set("$C = " + latex_set(sinks) + "$", text::plural(th.customer_noun));
    f.parameter("$a_i$", "amount available at $i$ (" + th.units + ")", latex_vector(supply));
    f.parameter("$d_j$", "requirement of $j$ (" + th.units + ")", latex_vector(demand));
    f.parameter("$c_{i,j}$", "shipping cost from $i$ to $j$ (dollars per " + th.unit + ")",
                latex_matrix(cost));
    f.variable("$x_{i,j} \\ge 0$", th.units + " shipped from $i$ to $j$");
    f.objective("\\min \\sum_{i \\in S} \\sum_{j \\in C} c_{i,j} x_{i,j}",
                "Minimise the total shipping cost");
    const std::string rel_s = balanced ? "=" : "\\le", rel_d = balanced ? "=" : "\\ge";
    f.constraint("supply", "\\sum_{j \\in C} x_{i,j} " + rel_s + " a_i \\quad \\forall i \\in S");
    f.constraint("demand", "\\sum_{i \\in S} x_{i,j} " + rel_d + " d_j \\quad \\forall j \\in C");
    auto var = [&](const Route& r) {
      return "x_{" + latex_name(sources[r.i]) + "," + latex_name(sinks[r.j]) + "}";
    };
    for (const auto& r : forbidden) f.constraint("closed route", var(r) + " = 0");
    for (const auto& r : route_caps)
      f.constraint("route capacity", var(r) + " \\le " + text::num(r.value));
    for (const auto& r : min_shares)
      f.constraint("minimum share", var(r) + " \\ge \\frac{" + text::num(r.value) + "}{100} d_{" +
                                        latex_name(sinks[r.j]) + "}");
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model =
        "set S;\nset C;\nparam a{S} >= 0;\nparam d{C} >= 0;\nparam c{S, C} >= 0;\n"
        "var x{S, C} >= 0;\n"
        "minimize TotalCost: sum{i in S, j in C} c[i, j] * x[i, j];\n";
    model += std::string("s.t. Supply{i in S}: sum{j in C} x[i, j] ") + (balanced ? "=" : "<=") +
             " a[i];\n";
    model += std::string("s.t. Demand{j in C}: sum{i in S} x[i, j] ") + (balanced ? "=" : ">=") +
             " d[j];\n";
    auto var = [&](const Route& r) { return "x['" + sources[r.i] + "', '" + sinks[r.j] + "']"; };
    for (size_t k = 0; k < forbidden.size(); ++k)
      model += "s.t. Closed" + std::to_string(k + 1) + ": " + var(forbidden[k]) + " = 0;\n";
    for (size_t k = 0; k < route_caps.size(); ++k)
      model += "s.t. RouteCap" + std::to_string(k + 1) + ": " + var(route_caps[k]) +
               " <= " + text::num(route_caps[k].value) + ";\n";
    for (size_t k = 0; k < min_shares.size(); ++k)
      model += "s.t. MinShare" + std::to_string(k + 1) + ": " + var(min_shares[k]) +
               " >= " + text::num(min_shares[k].value) + " / 100 * d['" + sinks[min_shares[k].j] +
               "'];\n";
    GmplData data;
    data.set("S", sources).set("C", sinks).param("a", sources, supply).param("d", sinks, demand);
    data.param("c", sources, sinks, cost);
    return compose_gmpl(model, "TotalCost", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    std::vector<std::vector<double>> x(m(), std::vector<double>(n()));
    double objective = 0;
    for (size_t i = 0; i < m(); ++i)
      for (size_t j = 0; j < n(); ++j) {
        x[i][j] = s.value("x", {sources[i], sinks[j]});
        c.ge(x[i][j], 0, "x[" + sources[i] + "," + sinks[j] + "] nonnegative");
        objective += cost[i][j] * x[i][j];
      }
    for (size_t i = 0; i < m(); ++i) {
      double shipped = 0;
      for (size_t j = 0; j < n(); ++j) shipped += x[i][j];
      if (balanced)
        c.eq(shipped, supply[i], "supply of " + sources[i]);
      else
        c.le(shipped, supply[i], "supply of " + sources[i]);
    }
    for (size_t j = 0; j < n(); ++j) {
      double received = 0;
      for (size_t i = 0; i < m(); ++i) received += x[i][j];
      if (balanced)
        c.eq(received, demand[j], "demand of " + sinks[j]);
      else
        c.ge(received, demand[j], "demand of " + sinks[j]);
    }
    for (const auto& r : forbidden)
      c.eq(x[r.i][r.j], 0, "closed route " + sources[r.i] + "->" + sinks[r.j]);
    for (const auto& r : route_caps)
      c.le(x[r.i][r.j], r.value, "route capacity " + sources[r.i] + "->" + sinks[r.j]);
    for (const auto& r : min_shares)
      c.ge(x[r.i][r.j], r.value / 100 * demand[r.j],
           "minimum share " + sources[r.i] + "->" + sinks[r.j]);
    return c.result(objective);
  }
};

class TransportationFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "transportation"; }
  std::string_view title() const override {
    return "Transportation (balanced/unbalanced, closed routes, route caps, contract shares)";
  }
  ProblemClass problem_class() const override { return ProblemClass::lp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<TransportationInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    const size_t m = static_cast<size_t>(size_for(rng, options.difficulty, {2, 3}, {3, 4}, {4, 6}));
    const size_t n = static_cast<size_t>(size_for(rng, options.difficulty, {3, 4}, {4, 6}, {6, 9}));
    inst->org = rng.pick(text::companies());
    auto towns = text::pick_distinct(rng, text::cities(), m + n);
    inst->sources.assign(towns.begin(), towns.begin() + static_cast<std::ptrdiff_t>(m));
    inst->sinks.assign(towns.begin() + static_cast<std::ptrdiff_t>(m), towns.end());
    inst->balanced = rng.bernoulli(0.4);

    // Costs grow with the distance between random map positions (km).
    std::vector<std::pair<double, double>> pos_s(m), pos_c(n);
    for (auto& p : pos_s) p = {rng.uniform(0, 300), rng.uniform(0, 300)};
    for (auto& p : pos_c) p = {rng.uniform(0, 300), rng.uniform(0, 300)};
    const double scale = std::pow(10.0, th.cost_decimals);
    inst->cost.assign(m, std::vector<double>(n));
    for (size_t i = 0; i < m; ++i)
      for (size_t j = 0; j < n; ++j) {
        double km = std::hypot(pos_s[i].first - pos_c[j].first, pos_s[i].second - pos_c[j].second);
        double c = (th.cost_base + th.cost_per_km * km) * rng.uniform(0.85, 1.15);
        inst->cost[i][j] = std::max(1.0 / scale, std::round(c * scale) / scale);
      }

    // Planted plan: customer j's main supplier covers every supplier at least once (n >= m);
    // a second supplier takes part of the demand now and then.
    std::vector<size_t> main(n);
    for (size_t j = 0; j < n; ++j) main[j] = j < m ? j : rng.index(m);
    rng.shuffle(main);
    std::vector<std::vector<double>> plan(m, std::vector<double>(n, 0.0));
    for (size_t j = 0; j < n; ++j) {
      double d = rng.uniform_int(th.demand_lo, th.demand_hi);
      inst->demand.push_back(d);
      if (m > 1 && rng.bernoulli(0.4)) {
        size_t other = rng.index(m - 1);
        if (other >= main[j]) ++other;
        double part = std::round(d * rng.uniform(0.2, 0.6));
        plan[other][j] = part;
        plan[main[j]][j] = d - part;
      } else {
        plan[main[j]][j] = d;
      }
    }
    for (size_t i = 0; i < m; ++i) {
      double row = 0;
      for (size_t j = 0; j < n; ++j) row += plan[i][j];
      if (!inst->balanced) row += std::round(row * rng.uniform(0.1, 0.5)) + rng.uniform_int(5, 20);
      inst->supply.push_back(row);
    }

    // Optional side conditions, each satisfied by the plan.
    if (rng.bernoulli(options.side_constraint_rate)) {
      // Close the cheapest unused route: the one most likely to matter.
      double best = 1e300;
      TransportationInstance::Route pick{0, 0, 0};
      for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < n; ++j)
          if (plan[i][j] == 0 && inst->cost[i][j] < best) {
            best = inst->cost[i][j];
            pick = {i, j, 0};
          }
      if (best < 1e300) inst->forbidden.push_back(pick);
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      // Cap the cheapest route into a random customer.
      size_t j = rng.index(n), i = 0;
      for (size_t k = 1; k < m; ++k)
        if (inst->cost[k][j] < inst->cost[i][j]) i = k;
      bool closed = false;
      for (const auto& r : inst->forbidden) closed = closed || (r.i == i && r.j == j);
      double cap = std::max(plan[i][j], std::round(inst->demand[j] * rng.uniform(0.2, 0.6)));
      if (!closed && cap > 0) inst->route_caps.push_back({i, j, cap});
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      for (int attempt = 0; attempt < 20; ++attempt) {
        size_t i = rng.index(m), j = rng.index(n);
        double share = 100 * plan[i][j] / inst->demand[j];
        double pct = std::floor(share * rng.uniform(0.5, 1.0) / 5) * 5;
        if (pct < 5) continue;
        inst->min_shares.push_back({i, j, pct});
        break;
      }
    }
    return inst;
  }
};

}  // namespace

const Family& transportation_family() {
  static const TransportationFamily family;
  return family;
}

}  // namespace trex::orlib
