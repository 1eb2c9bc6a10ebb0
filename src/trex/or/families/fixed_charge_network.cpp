// Fixed-charge multi-commodity network design: choose which links to open
// (fixed cost, capacity) and route several origin-destination commodities over
// them at a per-unit cost, with optional link-budget, exclusive-direction and
// committed-link side constraints. MILP.
//
// Generator: builds a connected map of two-way corridors (some one-way), plants
// a route for every commodity along a randomly weighted shortest path, opens
// those links and gives each a capacity at least its planted load.
#include <algorithm>
#include <cmath>

#include "trex/core/strings.hpp"
#include "trex/or/families/alg_writer.hpp"
#include "trex/or/families/family_list.hpp"
#include "trex/or/families/geometry.hpp"
#include "trex/or/families/gmpl_writer.hpp"
#include "trex/or/families/graph.hpp"
#include "trex/or/families/rounding.hpp"
#include "trex/or/families/text.hpp"
#include "trex/or/families/themed.hpp"

namespace trex::orlib {
namespace {

enum class Layout { table, by_origin, list };

struct Theme {
  std::string intro;               // {org} is replaced
  std::string node_noun;           // "terminal"
  std::string link_noun;           // "lane"
  std::string open_verb;           // "operate", "lease"
  std::string fixed_what;          // "fixed weekly cost of operating it"
  std::string unit;                // flow unit, plural
  std::string unit_one;            // flow unit, singular
  std::vector<std::string> goods;  // commodity names; empty = one flow per node pair
  std::string pair_flow;           // what flows between a node pair when `goods` is empty
  Layout layout;
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"{org} is redesigning its regional trucking network for next season and must decide which "
       "lanes between its terminals to operate.",
       "terminal",
       "lane",
       "operate",
       "fixed weekly cost if operated",
       "tonnes",
       "tonne",
       {"furniture", "appliances", "paper goods", "building materials", "beverages", "textiles",
        "auto parts", "electronics"},
       "",
       Layout::table},
      {"{org} is planning a fibre backbone and must choose which point-to-point links to lease. "
       "Each leased link carries traffic in one direction only.",
       "city",
       "link",
       "lease",
       "fixed monthly leasing cost",
       "Gbps",
       "Gbps",
       {},
       "traffic",
       Layout::by_origin},
      {"A relief organisation supported by {org} must set up supply routes between its depots and "
       "camps after an earthquake. A route has to be cleared and staffed before use.",
       "site",
       "route",
       "open",
       "fixed cost of clearing and staffing it",
       "tonnes",
       "tonne",
       {"drinking water", "food rations", "medicine", "tents", "blankets", "hygiene kits",
        "generators", "cooking fuel"},
       "",
       Layout::list},
      {"{org} wants to launch freight-rail services between several yards and must choose which "
       "one-way track services to run each week.",
       "yard",
       "service",
       "run",
       "fixed weekly cost of running it",
       "thousand tonnes",
       "thousand tonnes",
       {"grain", "coal", "steel coils", "containers", "timber", "fertiliser", "cement", "scrap"},
       "",
       Layout::by_origin},
      {"{org} is designing an overnight air-parcel network: it must decide which flight legs to "
       "schedule, and then route the parcel volume between cities over the scheduled legs.",
       "airport",
       "flight leg",
       "schedule",
       "fixed nightly cost of flying it",
       "tonnes",
       "tonne",
       {},
       "parcels",
       Layout::table},
  };
  return t;
}

struct Arc {
  size_t from = 0, to = 0;
  double fixed = 0, cost = 0, cap = 0;
};

struct Commodity {
  std::string name, key;
  size_t origin = 0, dest = 0;
  double demand = 0;
};

class FixedChargeInstance : public ComposedInstance<themes> {
 public:
  std::vector<std::string> names, keys;  // nodes
  std::vector<Arc> arcs;
  std::vector<Commodity> commodities;
  // Optional side constraints.
  int max_links = -1;                        // at most this many links opened
  std::pair<int, int> exclusive = {-1, -1};  // arcs that cannot both be opened
  int committed = -1;                        // arc that must be opened

  size_t n() const { return names.size(); }
  int side_count() const { return (max_links >= 0) + (exclusive.first >= 0) + (committed >= 0); }

  json size() const override {
    return {{"nodes", n()},
            {"arcs", arcs.size()},
            {"commodities", commodities.size()},
            {"side_constraints", side_count()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v;
    if (max_links >= 0) v.push_back("link_budget");
    if (exclusive.first >= 0) v.push_back("exclusive_links");
    if (committed >= 0) v.push_back("committed_link");
    return v;
  }

  std::string compose(text::Style& style) const override {
    const Theme& th = theme();
    text::Composer text(style);
    const std::string nodes = text::plural(th.node_noun), links = text::plural(th.link_noun);
    auto amount = [&](double v) { return style.num(v) + " " + (v == 1 ? th.unit_one : th.unit); };
    auto say = [&](const std::string& form) {
      return text::capitalize(text::fill(form, {{"{link}", th.link_noun},
                                                {"{links}", links},
                                                {"{a_link}", text::article(th.link_noun)},
                                                {"{node}", th.node_noun},
                                                {"{nodes}", nodes},
                                                {"{open}", th.open_verb},
                                                {"{fixed_what}", th.fixed_what},
                                                {"{unit}", th.unit},
                                                {"{unit_one}", th.unit_one}}));
    };
    text.fact(text::fill(th.intro, {{"{org}", org}}));
    text.fact(text::fill(
        style.pick({"There are {n} ({list}).", "The network connects {n}: {list}.",
                    "The {nodes} involved are {list}.", "The {nodes} in the network are {list}."}),
        {{"{n}", style.count_of(static_cast<long>(n()), th.node_noun)},
         {"{nodes}", nodes},
         {"{list}", text::english_list(names)}}));
    text.distractors(org, 1, 0.25);
    text.paragraph(false);

    // The flows to deliver, in the data's order: a table, bullets or sentences.
    const bool named = !th.goods.empty();
    auto flow_of = [&](const Commodity& k) { return amount(k.demand) + " of " + k.name; };
    const int flow_layout = style.choose(3);
    if (flow_layout == 0) {
      text.block(
          style.pick({"The following flows must be delivered:", "These flows have to be delivered:",
                      "The demand to be carried over the network:"}));
      std::vector<std::string> header;
      if (named) header.push_back(style.pick({"Commodity", "Flow"}));
      header.push_back("From");
      header.push_back("To");
      header.push_back("Amount (" + th.unit + ")");
      std::vector<std::vector<std::string>> rows;
      for (const Commodity& k : commodities) {
        std::vector<std::string> row;
        if (named) row.push_back(k.name);
        row.push_back(names[k.origin]);
        row.push_back(names[k.dest]);
        row.push_back(style.num(k.demand));
        rows.push_back(std::move(row));
      }
      text.block(text::markdown_table(header, rows));
    } else if (flow_layout == 1) {
      std::string lines = style.pick({"The following flows must be delivered:\n",
                                      "Flows to deliver:\n", "The network has to carry:\n"});
      const std::string bullet = style.pick({"- ", "* "});
      const std::string form =
          named ? style.pick({"{q} of {name} from {o} to {d}", "{Name}: {q} from {o} to {d}"})
                : "{q} of {name} from {o} to {d}";
      for (const Commodity& k : commodities)
        lines += bullet +
                 text::fill(form, {{"{q}", amount(k.demand)},
                                   {"{name}", k.name},
                                   {"{Name}", text::capitalize(k.name)},
                                   {"{o}", names[k.origin]},
                                   {"{d}", names[k.dest]}}) +
                 "\n";
      text.block(lines);
    } else {
      const std::string form =
          style.pick({"{o} must send {flow} to {d}.", "From {o} to {d}, {flow} must be delivered.",
                      "{d} needs {flow} from {o}."});
      std::string lines;
      for (const Commodity& k : commodities)
        lines +=
            text::capitalize(text::fill(
                form, {{"{flow}", flow_of(k)}, {"{o}", names[k.origin]}, {"{d}", names[k.dest]}})) +
            "\n";
      text.block(lines);
    }

    // Candidate links, in the data's order: a Markdown table, one line per
    // origin, or one line per link. The theme's layout is a bias.
    text.fact(say(style.pick(
        {"Each candidate {link} is one-way and has a {fixed_what}, a capacity shared by all "
         "flows, and a cost per {unit_one} carried.",
         "A candidate {link} runs in one direction only; it comes with a {fixed_what}, a "
         "capacity that all flows share, and a cost for every {unit_one} it carries.",
         "Every candidate {link} is one-way, with a {fixed_what}, a capacity for all flows "
         "together and a per-{unit_one} cost."})));
    int layout = static_cast<int>(th.layout);
    if (!style.chance(0.5)) layout = style.choose(3);
    const std::string per = " per " + th.unit_one;
    if (layout == static_cast<int>(Layout::table)) {
      text.fact(
          say(style.pick({"The candidates are:", "The candidate {links} are:", "Here they are:"})));
      text.paragraph(false);
      std::vector<std::vector<std::string>> rows;
      for (const Arc& a : arcs)
        rows.push_back(
            {names[a.from], names[a.to], style.num(a.fixed), style.num(a.cap), style.num(a.cost)});
      text.block(text::markdown_table({"From", "To", "Fixed cost ($)", "Capacity (" + th.unit + ")",
                                       "Cost per " + th.unit_one + " ($)"},
                                      rows));
    } else if (layout == static_cast<int>(Layout::by_origin)) {
      text.paragraph(false);
      const bool bullets = style.chance(0.6);
      const std::string bullet = style.pick({"- ", "* "});
      const std::string leg_form =
          style.pick({"to {to} (fixed {fixed}, capacity {cap}, {cost}{per})",
                      "to {to} ({fixed} fixed, up to {cap}, {cost}{per})"});
      std::string lines;
      for (size_t v = 0; v < n(); ++v) {
        std::vector<std::string> legs;
        for (const Arc& a : arcs)
          if (a.from == v)
            legs.push_back(text::fill(leg_form, {{"{to}", names[a.to]},
                                                 {"{fixed}", style.money(a.fixed)},
                                                 {"{cap}", amount(a.cap)},
                                                 {"{cost}", style.money(a.cost)},
                                                 {"{per}", per}}));
        if (legs.empty()) continue;
        const std::string list = text::english_list(legs);
        lines += bullets ? bullet + "From " + names[v] + ": " + list + ".\n"
                         : "From " + names[v] + ", " +
                               (legs.size() == 1
                                    ? text::article(th.link_noun) + " " + th.link_noun + " can run "
                                    : links + " can run ") +
                               list + ".\n";
      }
      text.block(lines);
    } else {
      text.paragraph(false);
      const bool bullets = style.chance(0.6);
      const std::string bullet = style.pick({"- ", "* "});
      const std::string form =
          bullets ? style.pick({"{from} -> {to}: fixed cost {fixed}, up to {cap}, {cost}{per}",
                                "{from} to {to}: {fixed} fixed, capacity {cap}, {cost}{per}"})
                  : style.pick({"The {link} from {from} to {to} has a fixed cost of {fixed}, "
                                "carries up to {cap} and costs {cost}{per}.",
                                "From {from} to {to}: {fixed} to {open}, room for {cap}, "
                                "{cost}{per}."});
      std::string lines;
      for (const Arc& a : arcs)
        lines += (bullets ? bullet : "") +
                 text::fill(form, {{"{link}", th.link_noun},
                                   {"{from}", names[a.from]},
                                   {"{to}", names[a.to]},
                                   {"{fixed}", style.money(a.fixed)},
                                   {"{cap}", amount(a.cap)},
                                   {"{cost}", style.money(a.cost)},
                                   {"{per}", per},
                                   {"{open}", th.open_verb}}) +
                 "\n";
      text.block(lines);
    }

    text.fact(say(style.pick(
        {"{a_link} {link} can only carry flow if it is opened: you {open} it or not, there is no "
         "partial "
         "opening.",
         "Only opened {links} can carry flow, and {a_link} {link} is either opened in full or not "
         "at "
         "all.",
         "Flow may use {a_link} {link} only if it is opened, and opening is all or nothing."})));
    text.fact(say(style.pick({"Flows may be split over several paths and may be fractional.",
                              "A flow can be split over several routes, and amounts need not be "
                              "whole numbers.",
                              "Each flow may use more than one path, in fractional amounts."})));
    if (max_links >= 0) {
      // The limit stays in digits, like every number of the model.
      const std::string k =
          std::to_string(max_links) + " " + (max_links == 1 ? th.link_noun : links);
      text.fact(
          text::fill(style.pick({"At most {k} can be opened.", "No more than {k} may be opened.",
                                 "The budget covers at most {k}."}),
                     {{"{k}", k}}));
    }
    if (exclusive.first >= 0) {
      const Arc& a = arcs[static_cast<size_t>(exclusive.first)];
      const Arc& b = arcs[static_cast<size_t>(exclusive.second)];
      std::vector<std::string> forms = {
          "the {link} from {a} to {b} and the {link} from {c} to {d} "
          "cannot both be opened.",
          "at most one of the {links} {a} -> {b} and {c} -> {d} may be "
          "opened."};
      // Two directions of one corridor read as such.
      if (a.from == b.to && a.to == b.from)
        forms.push_back("only one direction of the {link} between {a} and {b} may be opened.");
      text.fact(text::capitalize(text::fill(style.pick(forms), {{"{link}", th.link_noun},
                                                                {"{links}", links},
                                                                {"{a}", names[a.from]},
                                                                {"{b}", names[a.to]},
                                                                {"{c}", names[b.from]},
                                                                {"{d}", names[b.to]}})));
    }
    if (committed >= 0) {
      const Arc& a = arcs[static_cast<size_t>(committed)];
      text.fact(text::capitalize(text::fill(
          style.pick({"the {link} from {a} to {b} is already contracted and must be opened.",
                      "the {link} {a} -> {b} has to be opened in any case.",
                      "a contract commits {a} -> {b}: that {link} must be opened."}),
          {{"{link}", th.link_noun}, {"{a}", names[a.from]}, {"{b}", names[a.to]}})));
    }
    text.distractors(org, 1, 0.2);
    text.paragraph();
    // Drawn in statement order: argument evaluation order differs between compilers.
    const std::string task = style.pick(
        {"which " + links + " to " + th.open_verb + " and how to route each flow",
         "which " + links + " to open and how much of each flow to send on each " + th.link_noun,
         "a network design and a routing of the flows"});
    const std::string goal = style.pick({"minimise the total cost (fixed costs of the opened " +
                                             links + " plus the cost of the amounts carried)",
                                         "minimise the fixed costs plus the transport costs"});
    const std::string value =
        style.pick({"the minimum total cost in dollars", "the lowest possible total cost",
                    "the optimal total cost"});
    text.fact(text::question(style, task, goal, value));
    return text.text();
  }

  std::string alg() const override {
    AlgebraicFormulation f("Fixed-charge multi-commodity network design");
    std::vector<std::string> ckeys, od;
    std::vector<double> demand;
    for (const Commodity& k : commodities) {
      ckeys.push_back(k.key);
      demand.push_back(k.demand);
      od.push_back(graph::latex_pair(keys[k.origin], keys[k.dest]));
    }
    f.set("$N = " + latex_set(keys) + "$", text::plural(theme().node_noun));
    f.set("$A = " + graph::latex_arc_set(arcs, keys) + "$",
          "candidate one-way " + theme().link_noun + "s");
    f.set("$K = " + latex_set(ckeys) + "$", "commodities (flows to deliver)");
    f.parameter("$(o_k, t_k)$", "origin and destination of $k$", "$(" + join(od, ", ") + ")$");
    f.parameter("$d_k$", "amount of $k$ to deliver (" + theme().unit + ")", latex_vector(demand));
    f.parameter("$f_{ij}$", "fixed cost of opening $(i,j)$ (dollars, in the order of $A$)",
                latex_vector(graph::values(arcs, &Arc::fixed)));
    f.parameter("$c_{ij}$", "cost per " + theme().unit_one + " on $(i,j)$ (dollars)",
                latex_vector(graph::values(arcs, &Arc::cost)));
    f.parameter("$u_{ij}$", "capacity of $(i,j)$ (" + theme().unit + ")",
                latex_vector(graph::values(arcs, &Arc::cap)));
    f.variable("$x^k_{ij} \\ge 0$", "amount of $k$ routed on $(i,j)$ (continuous)");
    f.variable("$y_{ij} \\in \\{0,1\\}$", "1 if $(i,j)$ is opened");
    f.objective(
        "\\min \\sum_{(i,j) \\in A} \\Big( f_{ij} y_{ij} + c_{ij} \\sum_{k \\in K} "
        "x^k_{ij} \\Big)",
        "Minimise fixed plus variable cost");
    f.constraint("flow balance",
                 "\\sum_{(i,j) \\in A} x^k_{ij} - \\sum_{(j,i) \\in A} x^k_{ji} = "
                 "\\begin{cases} d_k & i = o_k \\\\ -d_k & i = t_k \\\\ 0 & \\text{otherwise} "
                 "\\end{cases} \\quad \\forall k \\in K, i \\in N");
    f.constraint("capacity and opening",
                 "\\sum_{k \\in K} x^k_{ij} \\le u_{ij} y_{ij} \\quad \\forall (i,j) \\in A");
    // Valid for every cycle-free routing (optimal ones, as costs are positive);
    // it tightens the LP bound and keeps branch-and-bound small.
    f.constraint("strong linking",
                 "x^k_{ij} \\le d_k y_{ij} \\quad \\forall k \\in K, (i,j) \\in A");
    if (max_links >= 0)
      f.constraint("link budget", "\\sum_{(i,j) \\in A} y_{ij} \\le " + std::to_string(max_links));
    if (exclusive.first >= 0) {
      const Arc& a = arcs[static_cast<size_t>(exclusive.first)];
      const Arc& b = arcs[static_cast<size_t>(exclusive.second)];
      f.constraint("exclusive links",
                   "y_{" + latex_name(keys[a.from]) + "," + latex_name(keys[a.to]) + "} + y_{" +
                       latex_name(keys[b.from]) + "," + latex_name(keys[b.to]) + "} \\le 1");
    }
    if (committed >= 0) {
      const Arc& a = arcs[static_cast<size_t>(committed)];
      f.constraint("committed link",
                   "y_{" + latex_name(keys[a.from]) + "," + latex_name(keys[a.to]) + "} = 1");
    }
    return f.markdown();
  }

  std::string arc_ref(size_t k) const {
    return "['" + keys[arcs[k].from] + "', '" + keys[arcs[k].to] + "']";
  }

  std::string gmpl() const override {
    std::string model =
        "set NODES;\nset ARCS within NODES cross NODES;\nset COMM;\n"
        "param orig{COMM} symbolic in NODES;\nparam dest{COMM} symbolic in NODES;\n"
        "param demand{COMM} >= 0;\n"
        "param fixed{ARCS} >= 0;\nparam cost{ARCS} >= 0;\nparam cap{ARCS} >= 0;\n"
        "var x{COMM, ARCS} >= 0;\nvar y{ARCS} binary;\n"
        "minimize TotalCost: sum{(i, j) in ARCS} (fixed[i, j] * y[i, j]\n"
        "  + cost[i, j] * sum{k in COMM} x[k, i, j]);\n"
        "s.t. Balance{k in COMM, v in NODES}: sum{(i, j) in ARCS: i = v} x[k, i, j]\n"
        "  - sum{(i, j) in ARCS: j = v} x[k, i, j]\n"
        "  = (if v = orig[k] then demand[k] else if v = dest[k] then -demand[k] else 0);\n"
        "s.t. Capacity{(i, j) in ARCS}: sum{k in COMM} x[k, i, j] <= cap[i, j] * y[i, j];\n"
        "s.t. Strong{k in COMM, (i, j) in ARCS}: x[k, i, j] <= demand[k] * y[i, j];\n";
    if (max_links >= 0)
      model +=
          "s.t. LinkBudget: sum{(i, j) in ARCS} y[i, j] <= " + std::to_string(max_links) + ";\n";
    if (exclusive.first >= 0)
      model += "s.t. Exclusive: y" + arc_ref(static_cast<size_t>(exclusive.first)) + " + y" +
               arc_ref(static_cast<size_t>(exclusive.second)) + " <= 1;\n";
    if (committed >= 0)
      model += "s.t. Committed: y" + arc_ref(static_cast<size_t>(committed)) + " = 1;\n";
    std::vector<std::string> ckeys;
    std::vector<double> demand;
    std::string orig = "param orig :=", dest = "param dest :=";
    for (const Commodity& k : commodities) {
      ckeys.push_back(k.key);
      demand.push_back(k.demand);
      orig += " " + k.key + " " + keys[k.origin];
      dest += " " + k.key + " " + keys[k.dest];
    }
    GmplData data;
    data.set("NODES", keys)
        .set_of_tuples("ARCS", graph::gmpl_tuples(arcs, keys))
        .set("COMM", ckeys);
    data.raw(orig + ";").raw(dest + ";").param("demand", ckeys, demand);
    data.param_sparse("fixed", graph::gmpl_values(arcs, keys, &Arc::fixed));
    data.param_sparse("cost", graph::gmpl_values(arcs, keys, &Arc::cost));
    data.param_sparse("cap", graph::gmpl_values(arcs, keys, &Arc::cap));
    return compose_gmpl(model, "TotalCost", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    double objective = 0;
    std::vector<double> y(arcs.size()), load(arcs.size(), 0.0);
    for (size_t a = 0; a < arcs.size(); ++a) {
      const std::string& from = keys[arcs[a].from];
      const std::string& to = keys[arcs[a].to];
      y[a] = s.value("y", {from, to});
      c.binary(y[a], "y[" + from + "," + to + "]");
      objective += arcs[a].fixed * y[a];
    }
    for (const Commodity& k : commodities) {
      std::vector<double> net(n(), 0.0);
      for (size_t a = 0; a < arcs.size(); ++a) {
        const std::string& from = keys[arcs[a].from];
        const std::string& to = keys[arcs[a].to];
        const double x = s.value("x", {k.key, from, to});
        c.ge(x, 0, "x[" + k.key + "," + from + "," + to + "] >= 0");
        c.le(x, k.demand * y[a], "strong linking of " + k.key + " on " + from + "->" + to);
        net[arcs[a].from] += x;
        net[arcs[a].to] -= x;
        load[a] += x;
        objective += arcs[a].cost * x;
      }
      for (size_t v = 0; v < n(); ++v)
        c.eq(net[v],
             v == k.origin ? k.demand
             : v == k.dest ? -k.demand
                           : 0.0,
             "balance of " + k.key + " at " + keys[v]);
    }
    for (size_t a = 0; a < arcs.size(); ++a)
      c.le(load[a], arcs[a].cap * y[a],
           "capacity of " + keys[arcs[a].from] + "->" + keys[arcs[a].to]);
    if (max_links >= 0) {
      double opened = 0;
      for (double v : y) opened += v;
      c.le(opened, max_links, "link budget");
    }
    if (exclusive.first >= 0)
      c.le(y[static_cast<size_t>(exclusive.first)] + y[static_cast<size_t>(exclusive.second)], 1,
           "exclusive links");
    if (committed >= 0) c.eq(y[static_cast<size_t>(committed)], 1, "committed link");
    return c.result(objective);
  }
};

class FixedChargeFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "fixed_charge_network"; }
  std::string_view title() const override { return "Fixed-charge multi-commodity network design"; }
  ProblemClass problem_class() const override { return ProblemClass::milp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<FixedChargeInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    inst->org = rng.pick(text::companies());
    const size_t n = static_cast<size_t>(size_for(rng, options.difficulty, {4, 5}, {5, 6}, {6, 8}));
    const size_t nk =
        static_cast<size_t>(size_for(rng, options.difficulty, {2, 2}, {2, 3}, {3, 4}));
    inst->names = text::pick_distinct(rng, text::cities(), n);
    inst->keys = text::symbols(inst->names);

    // Corridors between near neighbours, connected through a chain over all nodes.
    const std::vector<geometry::Point> pos = geometry::random_points(rng, n, 100.0, 70.0);
    auto dist = [&](size_t a, size_t b) { return geometry::distance(pos[a], pos[b]); };
    std::vector<std::vector<bool>> corridor(n, std::vector<bool>(n, false));
    std::vector<size_t> order(n);
    for (size_t v = 0; v < n; ++v) order[v] = v;
    rng.shuffle(order);
    for (size_t i = 0; i + 1 < n; ++i)
      corridor[order[i]][order[i + 1]] = corridor[order[i + 1]][order[i]] = true;
    for (size_t v = 0; v < n; ++v) {
      const std::vector<size_t> near = geometry::nearest_first(pos, v);
      for (size_t i = 0; i < std::min<size_t>(2, near.size()); ++i)
        corridor[v][near[i]] = corridor[near[i]][v] = true;
    }
    // Each corridor gives two one-way candidates; some directions are dropped,
    // but never along the connecting chain (that keeps every pair reachable).
    std::vector<std::vector<bool>> chain(n, std::vector<bool>(n, false));
    for (size_t i = 0; i + 1 < n; ++i)
      chain[order[i]][order[i + 1]] = chain[order[i + 1]][order[i]] = true;
    for (size_t a = 0; a < n; ++a)
      for (size_t b = a + 1; b < n; ++b) {
        if (!corridor[a][b]) continue;
        const bool drop = !chain[a][b] && rng.bernoulli(0.35);
        const bool keep_ab = !drop || rng.bernoulli(0.5);
        const double d = dist(a, b);
        for (int dir = 0; dir < 2; ++dir) {
          if (drop && (dir == 0) != keep_ab) continue;
          Arc arc;
          arc.from = dir == 0 ? a : b;
          arc.to = dir == 0 ? b : a;
          arc.fixed = 10.0 * std::round(d * rng.uniform(0.5, 1.5) + rng.uniform_int(2, 10));
          arc.cost = std::max(0.5, std::round(d * rng.uniform(0.1, 0.3) * 2) / 2);
          inst->arcs.push_back(arc);
        }
      }
    graph::sort_by_ends(inst->arcs);
    auto& arcs = inst->arcs;
    const std::vector<graph::Ends> ends = graph::ends(arcs);

    // Commodities with distinct origin-destination pairs, routed on randomly
    // weighted shortest paths (the planted design).
    std::vector<std::string> goods = th.goods;
    rng.shuffle(goods);
    std::vector<double> load(arcs.size(), 0.0);
    std::vector<std::vector<bool>> used_pair(n, std::vector<bool>(n, false));
    for (size_t k = 0; k < nk; ++k) {
      Commodity c;
      do {
        c.origin = rng.index(n);
        c.dest = rng.index(n);
      } while (c.origin == c.dest || used_pair[c.origin][c.dest]);
      used_pair[c.origin][c.dest] = true;
      c.demand = 5.0 * rng.uniform_int(2, 12);
      if (goods.empty()) {
        c.name = th.pair_flow;
        c.key = inst->keys[c.origin] + "_to_" + inst->keys[c.dest];
      } else {
        c.name = goods[k];
        c.key = text::symbol(goods[k]);
      }
      std::vector<double> w(arcs.size());
      for (size_t a = 0; a < arcs.size(); ++a)
        w[a] = dist(arcs[a].from, arcs[a].to) * rng.uniform(0.7, 1.5);
      for (size_t a : graph::shortest_path(n, ends, w, c.origin, c.dest)) load[a] += c.demand;
      inst->commodities.push_back(c);
    }
    int opened = 0;
    for (size_t a = 0; a < arcs.size(); ++a) {
      if (load[a] > 0) {
        arcs[a].cap = round_up(load[a] * rng.uniform(1.0, 1.5), 10);
        ++opened;
      } else {
        arcs[a].cap = 10.0 * rng.uniform_int(4, 12);
      }
    }

    // Optional side constraints, each satisfied by the planted design.
    if (rng.bernoulli(options.side_constraint_rate)) inst->max_links = opened;
    if (rng.bernoulli(options.side_constraint_rate)) {
      std::vector<std::pair<int, int>> pairs;  // both directions of a corridor
      for (size_t a = 0; a < arcs.size(); ++a)
        for (size_t b = a + 1; b < arcs.size(); ++b)
          if (arcs[a].from == arcs[b].to && arcs[a].to == arcs[b].from &&
              !(load[a] > 0 && load[b] > 0))
            pairs.push_back({static_cast<int>(a), static_cast<int>(b)});
      if (!pairs.empty()) inst->exclusive = rng.pick(pairs);
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      std::vector<int> candidates;
      for (size_t a = 0; a < arcs.size(); ++a)
        if (static_cast<int>(a) != inst->exclusive.first &&
            static_cast<int>(a) != inst->exclusive.second && (load[a] > 0 || inst->max_links < 0))
          candidates.push_back(static_cast<int>(a));
      if (!candidates.empty()) inst->committed = rng.pick(candidates);
    }
    return inst;
  }
};

}  // namespace

const Family& fixed_charge_network_family() {
  static const FixedChargeFamily family;
  return family;
}

}  // namespace trex::orlib
