// Min-cost flow / transshipment on a sources -> hubs -> sinks network, with
// optional throughput and lane-limit side constraints. LP.
//
// Generator: builds a random connected directed network, routes every sink's
// demand along random paths first (the planted flow), then sets supplies and
// arc capacities with slack above that flow, so the planted flow stays feasible.
#include <algorithm>

#include "trex/core/strings.hpp"
#include "trex/or/families/alg_writer.hpp"
#include "trex/or/families/family_list.hpp"
#include "trex/or/families/gmpl_writer.hpp"
#include "trex/or/families/graph.hpp"
#include "trex/or/families/rounding.hpp"
#include "trex/or/families/text.hpp"
#include "trex/or/families/themed.hpp"

namespace trex::orlib {
namespace {

enum class Layout { table, by_origin, lane_list };

struct Theme {
  std::string intro;              // {org} is replaced by an organisation name
  std::string source, hub, sink;  // role nouns (singular); plural adds "s"
  std::string unit, unit_one;     // flow unit, plural and singular
  std::string lane;               // "lane", "pipeline", ...
  Layout layout;
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"{org} produces cement at its plants and ships it through distribution depots to "
       "builders' merchants.",
       "plant", "depot", "merchant", "tonnes", "tonne", "lane", Layout::table},
      {"{org} moves diesel from its refineries through storage terminals to regional filling "
       "stations.",
       "refinery", "terminal", "station", "thousand litres", "thousand litres",
       "pipeline or truck "
       "route",
       Layout::by_origin},
      {"A farming cooperative sends fresh produce from its farms via packing houses to city "
       "markets; {org} runs the trucks for it.",
       "farm", "packing house", "market", "tonnes", "tonne", "road link", Layout::lane_list},
      {"The regional water authority must route tomorrow's water from its reservoirs through "
       "pumping stations to the districts it serves.",
       "reservoir", "pumping station", "district", "megalitres", "megalitre", "main",
       Layout::table},
      {"After a flood, {org} is coordinating relief: supplies leave the collection centres, pass "
       "through staging camps and must reach the shelters.",
       "collection centre", "staging camp", "shelter", "tonnes", "tonne", "route",
       Layout::by_origin},
  };
  return t;
}

struct Arc {
  size_t from = 0, to = 0;
  double cost = 0, cap = 0;
};

class MinCostFlowInstance : public ComposedInstance<themes> {
 public:
  std::vector<std::string> cities;                // display name of each node
  std::vector<std::string> keys;                  // MathProg symbols
  size_t n_sources = 0, n_hubs = 0, n_sinks = 0;  // nodes ordered sources, hubs, sinks
  std::vector<double> supply;                     // per source
  std::vector<double> demand;                     // per sink
  std::vector<Arc> arcs;                          // sorted by (from, to)
  // Optional side constraints (-1 = absent).
  int hub_min_node = -1;
  double hub_min = 0;
  int source_min_node = -1;
  double source_min = 0;
  int limited_arc = -1;
  double limited_fraction = 0;

  size_t nodes() const { return n_sources + n_hubs + n_sinks; }
  bool is_source(size_t v) const { return v < n_sources; }
  bool is_hub(size_t v) const { return v >= n_sources && v < n_sources + n_hubs; }
  int side_count() const {
    return (hub_min_node >= 0) + (source_min_node >= 0) + (limited_arc >= 0);
  }

  std::string role(size_t v) const {
    return is_source(v) ? theme().source : is_hub(v) ? theme().hub : theme().sink;
  }
  // "Leeds plant": the node's city and role ("the" goes before it).
  std::string label_of(size_t v) const { return cities[v] + " " + role(v); }

  json size() const override {
    return {{"sources", n_sources},
            {"hubs", n_hubs},
            {"sinks", n_sinks},
            {"arcs", arcs.size()},
            {"side_constraints", side_count()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v;
    if (hub_min_node >= 0) v.push_back("hub_min_throughput");
    if (source_min_node >= 0) v.push_back("source_min_shipment");
    if (limited_arc >= 0) v.push_back("lane_fraction_limit");
    return v;
  }

  std::vector<std::string> labels(size_t first, size_t count) const {
    std::vector<std::string> out;
    for (size_t v = first; v < first + count; ++v) out.push_back(cities[v]);
    return out;
  }

  std::string compose(text::Style& style) const override {
    const Theme& th = theme();
    text::Composer text(style);
    const std::string lanes = text::plural(th.lane);
    auto amount = [&](double v) { return style.num(v) + " " + (v == 1 ? th.unit_one : th.unit); };
    auto say = [&](const std::string& form) {
      return text::capitalize(
          text::fill(form, {{"{source}", th.source},
                            {"{sources}", text::plural(th.source)},
                            {"{a_source}", text::article(th.source)},
                            {"{hub}", th.hub},
                            {"{hubs}", text::plural(th.hub)},
                            {"{the_hubs}", "the " + (n_hubs == 1 ? th.hub : text::plural(th.hub))},
                            {"{sink}", th.sink},
                            {"{sinks}", text::plural(th.sink)},
                            {"{lane}", th.lane},
                            {"{lanes}", lanes},
                            {"{a_lane}", text::article(th.lane)},
                            {"{unit}", th.unit},
                            {"{unit_one}", th.unit_one}}));
    };
    text.fact(text::fill(th.intro, {{"{org}", org}}));
    text.fact(text::fill(
        style.pick({"The network has {p} ({plist}), {h} ({hlist}) and {c} ({clist}).",
                    "There are {p} ({plist}), {h} ({hlist}) and {c} ({clist}).",
                    "Flow starts at {p} ({plist}), may pass through {h} ({hlist}) and ends at {c} "
                    "({clist})."}),
        {{"{p}", style.count_of(static_cast<long>(n_sources), th.source)},
         {"{h}", style.count_of(static_cast<long>(n_hubs), th.hub)},
         {"{c}", style.count_of(static_cast<long>(n_sinks), th.sink)},
         {"{plist}", text::english_list(labels(0, n_sources))},
         {"{hlist}", text::english_list(labels(n_sources, n_hubs))},
         {"{clist}", text::english_list(labels(n_sources + n_hubs, n_sinks))}}));
    // Some stories name no organisation; a fact about one would come from nowhere.
    const bool named_org = th.intro.find("{org}") != std::string::npos;
    if (named_org) text.distractors(org, 1, 0.25);
    text.paragraph(false);

    // Supply and demand: one table of all locations (the table theme's
    // layout, a bias), or the sources' supplies and the sinks' demands as
    // records in any layout.
    const bool location_table = style.chance(th.layout == Layout::table ? 0.5 : 0.15);
    if (location_table) {
      std::vector<std::vector<std::string>> rows;
      for (size_t v = 0; v < nodes(); ++v) {
        std::string sup = is_source(v) ? style.num(supply[v]) : "-";
        std::string dem =
            !is_source(v) && !is_hub(v) ? style.num(demand[v - n_sources - n_hubs]) : "-";
        rows.push_back({cities[v], text::capitalize(role(v)), sup, dem});
      }
      text.block(text::markdown_table({"Location", "Role", "Supply available (" + th.unit + ")",
                                       "Required delivery (" + th.unit + ")"},
                                      rows));
    } else {
      auto records = [&](size_t first, size_t count, const std::vector<double>& values,
                         const std::string& header, const std::string& label,
                         std::initializer_list<const char*> forms) {
        text::Records r;
        r.row_header = text::capitalize(role(first));
        text::Attribute a;
        a.header = header + " (" + th.unit + ")";
        a.label = label + " in " + th.unit;
        for (size_t k = 0; k < count; ++k) {
          r.names.push_back(cities[first + k]);
          r.row_subjects.push_back("the " + label_of(first + k));
          a.cells.push_back(style.num(values[k]));
          a.phrases.push_back(text::fill(style.pick(forms), {{"{q}", amount(values[k])}}));
        }
        r.attributes.push_back(std::move(a));
        return r;
      };
      const text::Records sources =
          records(0, n_sources, supply, "Supply", "supplies",
                  {"can send out at most {q}", "has {q} available", "can supply up to {q}"});
      const text::Records sinks =
          records(n_sources + n_hubs, n_sinks, demand, "Required", "requirements",
                  {"needs exactly {q}", "requires {q}", "must receive {q}"});
      auto any_layout = [&]() {
        return style.layout({text::Layout::table, text::Layout::bullets, text::Layout::rows,
                             text::Layout::columns});
      };
      const text::Layout source_layout = any_layout();
      text.block(text::render_records(style, source_layout, sources));
      const text::Layout sink_layout = any_layout();
      text.block(text::render_records(style, sink_layout, sinks));
    }

    // The lanes in the data's order: a Markdown table, one line per origin or
    // one line per lane. The theme's layout is a bias.
    int layout = static_cast<int>(th.layout);
    if (!style.chance(0.5)) layout = style.choose(3);
    const std::string per = " per " + th.unit_one;
    if (layout == static_cast<int>(Layout::table)) {
      text.block(say(style.pick({"Only the following one-way {lanes} can be used:",
                                 "The usable {lanes}, each one-way, are:",
                                 "Each {lane} below is one-way; no others exist:"})));
      std::vector<std::vector<std::string>> rows;
      for (const Arc& a : arcs)
        rows.push_back({cities[a.from], cities[a.to], style.num(a.cap), style.num(a.cost)});
      text.block(text::markdown_table(
          {"From", "To", "Capacity (" + th.unit + ")", "Cost per " + th.unit_one + " ($)"}, rows));
    } else if (layout == static_cast<int>(Layout::by_origin)) {
      text.block(
          say(style.pick({"The available one-way {lanes}, with their capacity and cost, are:",
                          "These one-way {lanes} are available (capacity and cost):",
                          "One-way {lanes} by origin, with capacity and cost:"})));
      const bool bullets = style.chance(0.6);
      const std::string bullet = style.pick({"- ", "* "});
      const std::string leg_form = style.pick(
          {"the {to} (up to {cap} at {cost}{per})", "the {to} ({cap} at most, {cost}{per})"});
      std::string lines;
      for (size_t v = 0; v < nodes(); ++v) {
        std::vector<std::string> legs;
        for (const Arc& a : arcs)
          if (a.from == v)
            legs.push_back(text::fill(leg_form, {{"{to}", label_of(a.to)},
                                                 {"{cap}", amount(a.cap)},
                                                 {"{cost}", style.money(a.cost)},
                                                 {"{per}", per}}));
        if (legs.empty()) continue;
        lines += (bullets ? bullet : "") + "From the " + label_of(v) + " to " +
                 text::english_list(legs) + ".\n";
      }
      text.block(lines);
    } else {
      text.block(say(style.pick({"Each {lane} is one-way:", "The {lanes} (all one-way):",
                                 "These one-way {lanes} can be used:"})));
      const bool bullets = style.chance(0.6);
      const std::string bullet = style.pick({"- ", "* "});
      const std::string form =
          bullets ? style.pick({"{from} -> {to}: capacity {cap}, cost {cost}{per}",
                                "{from} to {to}: up to {cap} at {cost}{per}"})
                  : style.pick({"The {lane} from the {from} to the {to} carries up to {cap} at "
                                "{cost}{per}.",
                                "From the {from} to the {to}: at most {cap}, {cost}{per}."});
      std::string lines;
      for (const Arc& a : arcs)
        lines += (bullets ? bullet : "") +
                 text::capitalize(text::fill(form, {{"{lane}", th.lane},
                                                    {"{from}", label_of(a.from)},
                                                    {"{to}", label_of(a.to)},
                                                    {"{cap}", amount(a.cap)},
                                                    {"{cost}", style.money(a.cost)},
                                                    {"{per}", per}})) +
                 "\n";
      text.block(lines);
    }

    text.fact(say(style.pick({"Each {source} may ship out at most its supply.",
                              "No {source} can send out more than it has available.",
                              "What {a_source} {source} ships out is limited by its supply."})));
    text.fact(
        say(style.pick({"Each {hub} passes on everything it receives (nothing is kept there).",
                        "Nothing is stored at {the_hubs}: what comes in goes out.",
                        "At every {hub}, inflow equals outflow."})));
    text.fact(
        say(style.pick({"Each {sink} must receive exactly its required amount.",
                        "Every {sink} gets exactly what it requires, no more and no less.",
                        "The deliveries to each {sink} must match its requirement exactly."})));
    text.fact(say(style.pick({"No {lane} may carry more than its capacity.",
                              "The amount on {a_lane} {lane} cannot exceed its capacity.",
                              "Each {lane} carries at most its capacity."})));
    text.fact(say(style.pick({"Amounts may be fractional.", "Amounts need not be whole numbers.",
                              "Fractional amounts are allowed."})));
    if (hub_min_node >= 0)
      text.fact(text::capitalize(text::fill(
          style.pick({"to keep its crew busy, the {v} must handle (receive) at least {q}.",
                      "the {v} must receive at least {q}, to keep its crew busy.",
                      "at least {q} must pass through the {v}."}),
          {{"{v}", label_of(static_cast<size_t>(hub_min_node))}, {"{q}", amount(hub_min)}})));
    if (source_min_node >= 0)
      text.fact(text::capitalize(text::fill(
          style.pick({"under a take-or-pay contract, the {v} must ship out at least {q}.",
                      "a take-or-pay contract obliges the {v} to ship out at least {q}.",
                      "the {v} has to send out at least {q} (a take-or-pay contract)."}),
          {{"{v}", label_of(static_cast<size_t>(source_min_node))}, {"{q}", amount(source_min)}})));
    if (limited_arc >= 0) {
      const Arc& a = arcs[static_cast<size_t>(limited_arc)];
      text.fact(text::capitalize(text::fill(
          style.pick({"because of maintenance work, the {lane} from the {a} to the {b} may carry "
                      "at most {p} of its capacity.",
                      "maintenance limits the {lane} from the {a} to the {b} to {p} of its "
                      "capacity.",
                      "only {p} of the capacity of the {lane} from the {a} to the {b} is "
                      "available, because of maintenance."}),
          {{"{lane}", th.lane},
           {"{a}", label_of(a.from)},
           {"{b}", label_of(a.to)},
           {"{p}", style.percent(limited_fraction * 100)}})));
    }
    if (named_org) text.distractors(org, 1, 0.2);
    text.paragraph();
    // Drawn in statement order: argument evaluation order differs between compilers.
    const std::string task = style.pick(
        {"how much to send along each " + th.lane, "the amount on each " + th.lane, "a flow plan"});
    const std::string goal = style.pick({"minimise the total transport cost",
                                         "meet every requirement at the lowest transport cost"});
    const std::string value =
        style.pick({"the minimum cost in dollars", "the minimum total transport cost",
                    "the lowest possible total cost"});
    text.fact(text::question(style, task, goal, value));
    return text.text();
  }

  std::string alg() const override {
    AlgebraicFormulation f("Minimum-cost flow (transshipment)");
    std::vector<std::string> src(keys.begin(), keys.begin() + static_cast<long>(n_sources));
    std::vector<std::string> hub(keys.begin() + static_cast<long>(n_sources),
                                 keys.begin() + static_cast<long>(n_sources + n_hubs));
    std::vector<std::string> snk(keys.begin() + static_cast<long>(n_sources + n_hubs), keys.end());
    f.set("$P = " + latex_set(src) + "$", text::plural(theme().source) + " (supply nodes)");
    f.set("$H = " + latex_set(hub) + "$", text::plural(theme().hub) + " (transshipment nodes)");
    f.set("$C = " + latex_set(snk) + "$", text::plural(theme().sink) + " (demand nodes)");
    f.set("$A = " + graph::latex_arc_set(arcs, keys) + "$",
          "one-way " + text::plural(theme().lane) + " $(i,j)$");
    f.parameter("$s_p$", "supply of $p \\in P$ (" + theme().unit + ")", latex_vector(supply));
    f.parameter("$d_c$", "required delivery to $c \\in C$ (" + theme().unit + ")",
                latex_vector(demand));
    f.parameter("$u_{ij}$", "capacity of arc $(i,j)$ (" + theme().unit + ", in the order of $A$)",
                latex_vector(graph::values(arcs, &Arc::cap)));
    f.parameter("$c_{ij}$",
                "cost per " + theme().unit_one +
                    " on arc $(i,j)$ (dollars, in the "
                    "order of $A$)",
                latex_vector(graph::values(arcs, &Arc::cost)));
    f.variable("$x_{ij} \\ge 0$", "amount sent along arc $(i,j)$ (continuous)");
    f.objective("\\min \\sum_{(i,j) \\in A} c_{ij} x_{ij}", "Minimise the total transport cost");
    f.constraint("supply",
                 "\\sum_{(p,j) \\in A} x_{pj} - \\sum_{(i,p) \\in A} x_{ip} \\le s_p "
                 "\\quad \\forall p \\in P");
    f.constraint("transshipment",
                 "\\sum_{(i,h) \\in A} x_{ih} = \\sum_{(h,j) \\in A} x_{hj} "
                 "\\quad \\forall h \\in H");
    f.constraint("demand",
                 "\\sum_{(i,c) \\in A} x_{ic} - \\sum_{(c,j) \\in A} x_{cj} = d_c "
                 "\\quad \\forall c \\in C");
    f.constraint("capacity", "x_{ij} \\le u_{ij} \\quad \\forall (i,j) \\in A");
    if (hub_min_node >= 0)
      f.constraint("hub minimum throughput",
                   "\\sum_{(i," + latex_name(keys[static_cast<size_t>(hub_min_node)]) +
                       ") \\in A} x_{i," + latex_name(keys[static_cast<size_t>(hub_min_node)]) +
                       "} \\ge " + text::num(hub_min));
    if (source_min_node >= 0)
      f.constraint("take-or-pay minimum",
                   "\\sum_{(" + latex_name(keys[static_cast<size_t>(source_min_node)]) +
                       ",j) \\in A} x_{" + latex_name(keys[static_cast<size_t>(source_min_node)]) +
                       ",j} \\ge " + text::num(source_min));
    if (limited_arc >= 0) {
      const Arc& a = arcs[static_cast<size_t>(limited_arc)];
      std::string idx = latex_name(keys[a.from]) + "," + latex_name(keys[a.to]);
      f.constraint("reduced lane capacity",
                   "x_{" + idx + "} \\le " + text::num(limited_fraction) + " \\, u_{" + idx + "}");
    }
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model =
        "set SOURCES;\nset HUBS;\nset SINKS;\nset NODES := SOURCES union HUBS union SINKS;\n"
        "set ARCS within NODES cross NODES;\n"
        "param supply{SOURCES} >= 0;\nparam demand{SINKS} >= 0;\n"
        "param cap{ARCS} >= 0;\nparam cost{ARCS} >= 0;\n"
        "var x{(i, j) in ARCS} >= 0, <= cap[i, j];\n"
        "minimize TotalCost: sum{(i, j) in ARCS} cost[i, j] * x[i, j];\n"
        "s.t. Supply{p in SOURCES}: sum{(i, j) in ARCS: i = p} x[i, j]\n"
        "  - sum{(i, j) in ARCS: j = p} x[i, j] <= supply[p];\n"
        "s.t. Transship{h in HUBS}: sum{(i, j) in ARCS: j = h} x[i, j]\n"
        "  = sum{(i, j) in ARCS: i = h} x[i, j];\n"
        "s.t. Demand{c in SINKS}: sum{(i, j) in ARCS: j = c} x[i, j]\n"
        "  - sum{(i, j) in ARCS: i = c} x[i, j] = demand[c];\n";
    if (hub_min_node >= 0)
      model += "s.t. HubMinimum: sum{(i, j) in ARCS: j = '" +
               keys[static_cast<size_t>(hub_min_node)] + "'} x[i, j] >= " + text::num(hub_min) +
               ";\n";
    if (source_min_node >= 0)
      model += "s.t. SourceMinimum: sum{(i, j) in ARCS: i = '" +
               keys[static_cast<size_t>(source_min_node)] +
               "'} x[i, j] >= " + text::num(source_min) + ";\n";
    if (limited_arc >= 0) {
      const Arc& a = arcs[static_cast<size_t>(limited_arc)];
      std::string idx = "['" + keys[a.from] + "', '" + keys[a.to] + "']";
      model +=
          "s.t. LaneLimit: x" + idx + " <= " + text::num(limited_fraction) + " * cap" + idx + ";\n";
    }
    std::vector<std::string> src(keys.begin(), keys.begin() + static_cast<long>(n_sources));
    std::vector<std::string> hub(keys.begin() + static_cast<long>(n_sources),
                                 keys.begin() + static_cast<long>(n_sources + n_hubs));
    std::vector<std::string> snk(keys.begin() + static_cast<long>(n_sources + n_hubs), keys.end());
    GmplData data;
    data.set("SOURCES", src)
        .set("HUBS", hub)
        .set("SINKS", snk)
        .set_of_tuples("ARCS", graph::gmpl_tuples(arcs, keys));
    data.param("supply", src, supply).param("demand", snk, demand);
    data.param_sparse("cap", graph::gmpl_values(arcs, keys, &Arc::cap));
    data.param_sparse("cost", graph::gmpl_values(arcs, keys, &Arc::cost));
    return compose_gmpl(model, "TotalCost", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    std::vector<double> x(arcs.size());
    std::vector<double> out(nodes(), 0.0), in(nodes(), 0.0);
    double objective = 0;
    for (size_t k = 0; k < arcs.size(); ++k) {
      const Arc& a = arcs[k];
      x[k] = s.value("x", {keys[a.from], keys[a.to]});
      std::string name = "x[" + keys[a.from] + "," + keys[a.to] + "]";
      c.ge(x[k], 0, name + " >= 0");
      c.le(x[k], a.cap, "capacity of " + name);
      out[a.from] += x[k];
      in[a.to] += x[k];
      objective += a.cost * x[k];
    }
    for (size_t v = 0; v < nodes(); ++v) {
      if (is_source(v))
        c.le(out[v] - in[v], supply[v], "supply at " + keys[v]);
      else if (is_hub(v))
        c.eq(in[v], out[v], "conservation at " + keys[v]);
      else
        c.eq(in[v] - out[v], demand[v - n_sources - n_hubs], "demand at " + keys[v]);
    }
    if (hub_min_node >= 0)
      c.ge(in[static_cast<size_t>(hub_min_node)], hub_min, "minimum throughput");
    if (source_min_node >= 0)
      c.ge(out[static_cast<size_t>(source_min_node)], source_min, "take-or-pay minimum");
    if (limited_arc >= 0) {
      const Arc& a = arcs[static_cast<size_t>(limited_arc)];
      c.le(x[static_cast<size_t>(limited_arc)], limited_fraction * a.cap, "reduced lane capacity");
    }
    return c.result(objective);
  }
};

class MinCostFlowFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "min_cost_flow"; }
  std::string_view title() const override { return "Minimum-cost flow (transshipment network)"; }
  ProblemClass problem_class() const override { return ProblemClass::lp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<MinCostFlowInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    inst->org = rng.pick(text::companies());
    const size_t np =
        static_cast<size_t>(size_for(rng, options.difficulty, {2, 2}, {2, 3}, {3, 4}));
    const size_t nh =
        static_cast<size_t>(size_for(rng, options.difficulty, {1, 2}, {2, 3}, {3, 4}));
    const size_t nc =
        static_cast<size_t>(size_for(rng, options.difficulty, {3, 4}, {4, 6}, {6, 9}));
    // Capacity and supply slack above the planted flow; harder = tighter.
    const double slack = options.difficulty == Difficulty::easy     ? 0.6
                         : options.difficulty == Difficulty::medium ? 0.45
                                                                    : 0.3;
    inst->n_sources = np;
    inst->n_hubs = nh;
    inst->n_sinks = nc;
    const size_t n = np + nh + nc;
    inst->cities = text::pick_distinct(rng, text::cities(), n);
    inst->keys = text::symbols(inst->cities);

    // Network: sources -> hubs (-> hubs) -> sinks, plus a few direct source -> sink arcs.
    std::vector<std::vector<bool>> adj(n, std::vector<bool>(n, false));
    auto add = [&](size_t a, size_t b) { adj[a][b] = true; };
    const size_t h0 = np, c0 = np + nh;
    for (size_t p = 0; p < np; ++p)
      for (size_t h = h0; h < c0; ++h)
        if (rng.bernoulli(0.55)) add(p, h);
    for (size_t p = 0; p < np; ++p) add(p, h0 + rng.index(nh));  // every source reaches a hub
    for (size_t h = h0; h < c0; ++h) add(rng.index(np), h);      // every hub is fed by a source
    for (size_t a = h0; a < c0; ++a)
      for (size_t b = h0; b < c0; ++b)
        if (a != b && !adj[b][a] && rng.bernoulli(0.2)) add(a, b);
    for (size_t h = h0; h < c0; ++h)
      for (size_t c = c0; c < n; ++c)
        if (rng.bernoulli(0.35)) add(h, c);
    for (size_t c = c0; c < n; ++c) add(h0 + rng.index(nh), c);  // every sink is reachable
    for (size_t p = 0; p < np; ++p)
      for (size_t c = c0; c < n; ++c)
        if (rng.bernoulli(0.1)) add(p, c);
    std::vector<std::vector<int>> arc_id(n, std::vector<int>(n, -1));
    for (size_t a = 0; a < n; ++a)
      for (size_t b = 0; b < n; ++b)
        if (adj[a][b]) {
          arc_id[a][b] = static_cast<int>(inst->arcs.size());
          Arc arc;
          arc.from = a;
          arc.to = b;
          inst->arcs.push_back(arc);
        }
    auto& arcs = inst->arcs;

    // Planted flow: each sink's demand travels along one or two random paths.
    std::vector<double> flow(arcs.size(), 0.0);
    auto route = [&](size_t sink, double amount) {
      size_t v = sink;
      std::vector<bool> visited(n, false);
      visited[v] = true;
      while (v >= np) {  // walk backwards until a source is reached
        std::vector<size_t> preds;
        for (size_t u = 0; u < n; ++u)
          if (adj[u][v] && !visited[u] && (u < np || (u >= h0 && u < c0))) preds.push_back(u);
        size_t u = rng.pick(preds);
        flow[static_cast<size_t>(arc_id[u][v])] += amount;
        visited[u] = true;
        v = u;
      }
    };
    for (size_t c = c0; c < n; ++c) {
      const double d = 5.0 * rng.uniform_int(4, 24);
      inst->demand.push_back(d);
      if (d >= 40 && rng.bernoulli(0.4)) {
        const double first = 5.0 * rng.uniform_int(1, static_cast<int>(d / 5) - 1);
        route(c, first);
        route(c, d - first);
      } else {
        route(c, d);
      }
    }
    std::vector<double> out(n, 0.0), in(n, 0.0);
    for (size_t k = 0; k < arcs.size(); ++k) {
      out[arcs[k].from] += flow[k];
      in[arcs[k].to] += flow[k];
    }
    for (size_t p = 0; p < np; ++p)
      inst->supply.push_back(out[p] > 0 ? round_up(out[p] * (1.05 + rng.uniform(0.0, slack)), 5)
                                        : 5.0 * rng.uniform_int(6, 20));
    for (size_t k = 0; k < arcs.size(); ++k) {
      Arc& a = arcs[k];
      a.cap = flow[k] > 0 ? round_up(flow[k] * (1.0 + rng.uniform(0.0, slack)), 5)
                          : 5.0 * rng.uniform_int(4, 30);
      const bool direct = a.from < np && a.to >= c0;
      const bool hub_to_hub = a.from >= h0 && a.to < c0;
      a.cost = direct       ? rng.uniform_int(16, 40) / 2.0
               : hub_to_hub ? rng.uniform_int(2, 10) / 2.0
                            : rng.uniform_int(3, 24) / 2.0;
    }

    // Optional side constraints, each satisfied by the planted flow.
    if (rng.bernoulli(options.side_constraint_rate)) {
      std::vector<size_t> used;
      for (size_t h = h0; h < c0; ++h)
        if (in[h] > 0) used.push_back(h);
      if (!used.empty()) {
        size_t h = rng.pick(used);
        double m = round_down(in[h] * rng.uniform(0.5, 1.0), 5);
        if (m > 0) {
          inst->hub_min_node = static_cast<int>(h);
          inst->hub_min = m;
        }
      }
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      std::vector<size_t> used;
      for (size_t p = 0; p < np; ++p)
        if (out[p] > 0) used.push_back(p);
      if (!used.empty()) {
        size_t p = rng.pick(used);
        double m = round_down(out[p] * rng.uniform(0.5, 1.0), 5);
        if (m > 0) {
          inst->source_min_node = static_cast<int>(p);
          inst->source_min = m;
        }
      }
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      std::vector<size_t> used;
      for (size_t k = 0; k < arcs.size(); ++k)
        if (flow[k] > 0) used.push_back(k);
      size_t k = rng.pick(used);
      const double fraction = rng.pick(std::vector<double>{0.5, 0.6, 0.75, 0.8});
      if (flow[k] > fraction * arcs[k].cap) arcs[k].cap = round_up(flow[k] / fraction, 5);
      inst->limited_arc = static_cast<int>(k);
      inst->limited_fraction = fraction;
    }
    return inst;
  }
};

}  // namespace

const Family& min_cost_flow_family() {
  static const MinCostFlowFamily family;
  return family;
}

}  // namespace trex::orlib
