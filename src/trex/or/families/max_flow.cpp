// Maximum flow from a source to a sink through capacitated links, with an
// explicit flow-value variable and optional node-throughput, reduced-link and
// share-through-a-node side constraints. LP.
//
// Generator: places nodes on a map, links near neighbours (mostly eastwards),
// plants a source-to-sink chain so the flow is positive, and computes the max
// flow (Edmonds-Karp) to place side constraints where they bind while a
// positive flow stays feasible.
#include <algorithm>
#include <deque>

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

enum class Layout { table, by_node, list };

struct Theme {
  std::string intro;      // {org}, {from}, {to} are replaced
  std::string node_noun;  // intermediate nodes: "pumping station"
  std::string link_noun;  // "pipeline"
  std::string good;       // what flows: "crude oil"
  std::string unit;       // "thousand barrels per day"
  Layout layout;
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"{org} operates a crude-oil pipeline network from its oil field at {from} to the export "
       "terminal at {to}. Oil passes through intermediate pumping stations.",
       "pumping station", "pipeline", "crude oil", "thousand barrels per day", Layout::table},
      {"Emergency planners must estimate how many vehicles per hour can leave {from}, threatened "
       "by a wildfire, towards the safe assembly area at {to} over one-way evacuation lanes.",
       "junction", "evacuation lane", "traffic", "vehicles per hour", Layout::by_node},
      {"{org} needs to copy as much data as possible from its primary data centre in {from} to "
       "its backup site in {to} through its wide-area network of routers.",
       "router", "link", "data", "Gbps", Layout::list},
      {"The water utility of {to} draws treated water from the plant at {from}. Water reaches the "
       "city through a network of valves and one-way trunk mains.",
       "valve station", "main", "water", "megalitres per day", Layout::table},
      {"{org} ships iron ore by rail from its mine at {from} to the port at {to}. Trains run "
       "through rail junctions, and each track section has a daily capacity.",
       "rail junction", "track section", "ore", "thousand tonnes per day", Layout::by_node},
  };
  return t;
}

struct Arc {
  size_t from = 0, to = 0;
  double cap = 0;
};

// Edmonds-Karp max flow on a small graph; returns the flow value and the flow
// per arc. Nodes in `removed` carry no flow.
double max_flow(size_t n, const std::vector<Arc>& arcs, size_t s, size_t t,
                const std::vector<bool>& removed, std::vector<double>* arc_flow) {
  std::vector<std::vector<double>> residual(n, std::vector<double>(n, 0.0));
  for (const Arc& a : arcs)
    if (!removed[a.from] && !removed[a.to]) residual[a.from][a.to] += a.cap;
  const std::vector<std::vector<double>> original = residual;
  double total = 0;
  while (true) {
    std::vector<int> parent(n, -1);
    parent[s] = static_cast<int>(s);
    std::deque<size_t> queue = {s};
    while (!queue.empty() && parent[t] < 0) {
      size_t u = queue.front();
      queue.pop_front();
      for (size_t v = 0; v < n; ++v)
        if (parent[v] < 0 && residual[u][v] > 1e-9) {
          parent[v] = static_cast<int>(u);
          queue.push_back(v);
        }
    }
    if (parent[t] < 0) break;
    double push = 1e18;
    for (size_t v = t; v != s; v = static_cast<size_t>(parent[v]))
      push = std::min(push, residual[static_cast<size_t>(parent[v])][v]);
    for (size_t v = t; v != s; v = static_cast<size_t>(parent[v])) {
      residual[static_cast<size_t>(parent[v])][v] -= push;
      residual[v][static_cast<size_t>(parent[v])] += push;
    }
    total += push;
  }
  if (arc_flow) {
    // Net flow per node pair, attributed to the arc (there is at most one per direction).
    arc_flow->assign(arcs.size(), 0.0);
    for (size_t k = 0; k < arcs.size(); ++k) {
      const Arc& a = arcs[k];
      if (removed[a.from] || removed[a.to]) continue;
      double net = original[a.from][a.to] - residual[a.from][a.to];
      (*arc_flow)[k] = std::max(0.0, net);
    }
  }
  return total;
}

class MaxFlowInstance : public ComposedInstance<themes> {
 public:
  std::vector<std::string> names;  // display names
  std::vector<std::string> keys;   // MathProg symbols
  std::vector<Arc> arcs;
  size_t source = 0, sink = 0;
  // Optional side constraints (-1 = absent).
  int limited_node = -1;  // inflow of this node <= node_limit
  double node_limit = 0;
  int reduced_arc = -1;  // flow <= reduced_fraction * capacity
  double reduced_fraction = 0;
  int share_node = -1;  // inflow of this node <= share * total flow
  double share = 0;

  size_t n() const { return names.size(); }
  int side_count() const { return (limited_node >= 0) + (reduced_arc >= 0) + (share_node >= 0); }
  std::string node_label(size_t v) const {
    if (v == source || v == sink) return names[v];
    return "the " + theme().node_noun + " at " + names[v];
  }

  json size() const override {
    return {{"nodes", n()}, {"arcs", arcs.size()}, {"side_constraints", side_count()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v;
    if (limited_node >= 0) v.push_back("node_throughput_limit");
    if (reduced_arc >= 0) v.push_back("reduced_link_capacity");
    if (share_node >= 0) v.push_back("max_share_through_node");
    return v;
  }

  std::string compose(text::Style& style) const override {
    const Theme& th = theme();
    text::Composer text(style);
    const std::string links = text::plural(th.link_noun);
    auto rate = [&](double v) { return style.num(v) + " " + th.unit; };
    auto say = [&](const std::string& form) {
      return text::capitalize(text::fill(form, {{"{link}", th.link_noun},
                                                {"{links}", links},
                                                {"{a_link}", text::article(th.link_noun)},
                                                {"{node}", th.node_noun},
                                                {"{nodes}", text::plural(th.node_noun)},
                                                {"{a_node}", text::article(th.node_noun)},
                                                {"{good}", th.good},
                                                {"{unit}", th.unit},
                                                {"{s}", names[source]},
                                                {"{t}", names[sink]}}));
    };
    text.fact(
        text::fill(th.intro, {{"{org}", org}, {"{from}", names[source]}, {"{to}", names[sink]}}));
    std::vector<std::string> middle;
    for (size_t v = 0; v < n(); ++v)
      if (v != source && v != sink) middle.push_back(names[v]);
    text.fact(text::fill(
        say(style.pick({"Besides {s} and {t}, the network has {k} ({list}) and {a}, each with a "
                        "maximum capacity in {unit}.",
                        "Between {s} and {t} lie {k}: {list}. They are connected by {a}, each "
                        "with a capacity in {unit}.",
                        "The network consists of {s}, {t}, {k} ({list}) and {a}; every {link} "
                        "has a maximum capacity, in {unit}.",
                        "{s} and {t} are joined through {k} ({list}) by {a} of limited "
                        "capacity (in {unit})."})),
        {{"{k}", style.count_of(static_cast<long>(middle.size()), th.node_noun)},
         {"{a}", style.count_of(static_cast<long>(arcs.size()), "one-way " + th.link_noun)},
         {"{list}", text::english_list(middle)}}));
    // Some stories name no organisation; a fact about one would come from nowhere.
    if (th.intro.find("{org}") != std::string::npos) text.distractors(org, 1, 0.25);
    text.paragraph(false);

    // The links in the data's order: a Markdown table, one line per origin or
    // one line per link. The theme's layout is a bias.
    int layout = static_cast<int>(th.layout);
    if (!style.chance(0.5)) layout = style.choose(3);
    if (layout == static_cast<int>(Layout::table)) {
      if (style.chance(0.5))
        text.block(say(style.pick(
            {"The {links} and their capacities:", "Capacity of each {link}, in {unit}:"})));
      std::vector<std::vector<std::string>> rows;
      for (const Arc& a : arcs) rows.push_back({names[a.from], names[a.to], style.num(a.cap)});
      text.block(text::markdown_table({"From", "To", "Capacity (" + th.unit + ")"}, rows));
    } else if (layout == static_cast<int>(Layout::by_node)) {
      const bool bullets = style.chance(0.6);
      const std::string bullet = style.pick({"- ", "* "});
      std::string lines;
      for (size_t v = 0; v < n(); ++v) {
        std::vector<std::string> legs;
        for (const Arc& a : arcs)
          if (a.from == v) legs.push_back(names[a.to] + " (" + style.num(a.cap) + ")");
        if (legs.empty()) continue;
        const std::string list = text::english_list(legs);
        lines += bullets ? bullet + "Out of " + names[v] + ": to " + list + ".\n"
                         : "Out of " + names[v] + ", " +
                               (legs.size() == 1
                                    ? text::article(th.link_noun) + " " + th.link_noun + " goes"
                                    : links + " go") +
                               " to " + list + ".\n";
      }
      text.block(lines);
      text.block(say(style.pick({"(Capacities in brackets are in {unit}.)",
                                 "The numbers in brackets are capacities in {unit}.",
                                 "Capacities, in brackets, are given in {unit}."})));
    } else {
      const bool bullets = style.chance(0.6);
      const std::string bullet = style.pick({"- ", "* "});
      const std::string form =
          bullets
              ? style.pick({"{Link} {from} -> {to}: at most {cap}", "{from} to {to}: up to {cap}"})
              : style.pick({"The {link} from {from} to {to} carries at most {cap}.",
                            "From {from} to {to}, the {link} can take up to {cap}."});
      std::string lines;
      for (const Arc& a : arcs)
        lines += (bullets ? bullet : "") +
                 text::fill(form, {{"{Link}", text::capitalize(th.link_noun)},
                                   {"{link}", th.link_noun},
                                   {"{from}", names[a.from]},
                                   {"{to}", names[a.to]},
                                   {"{cap}", rate(a.cap)}}) +
                 "\n";
      text.block(lines);
    }

    text.fact(say(style.pick({"Whatever flows into {a_node} {node} must flow out of it again.",
                              "Nothing is stored at the {nodes}: what comes in goes out.",
                              "At every {node}, inflow equals outflow."})));
    text.fact(say(style.pick({"No {link} may carry more than its capacity.",
                              "The flow on {a_link} {link} cannot exceed its capacity.",
                              "Each {link} carries at most its capacity."})));
    text.fact(say(style.pick({"Flows may be fractional.", "Flows need not be whole numbers.",
                              "Fractional flows are allowed."})));
    if (limited_node >= 0)
      text.fact(text::capitalize(text::fill(
          style.pick({"{v} can handle at most {q} in total.",
                      "no more than {q} in total can pass through {v}.",
                      "the total inflow of {v} is limited to {q}."}),
          {{"{v}", node_label(static_cast<size_t>(limited_node))}, {"{q}", rate(node_limit)}})));
    if (reduced_arc >= 0) {
      const Arc& a = arcs[static_cast<size_t>(reduced_arc)];
      text.fact(text::capitalize(text::fill(
          style.pick({"because of repairs, the {link} from {a} to {b} may only be used up to {p} "
                      "of its capacity.",
                      "repairs limit the {link} from {a} to {b} to {p} of its capacity.",
                      "during maintenance, at most {p} of the capacity of the {link} from {a} to "
                      "{b} is available."}),
          {{"{link}", th.link_noun},
           {"{a}", names[a.from]},
           {"{b}", names[a.to]},
           {"{p}", style.percent(reduced_fraction * 100)}})));
    }
    if (share_node >= 0)
      text.fact(text::capitalize(text::fill(
          style.pick({"for resilience, at most {p} of the total {good} flow may pass through {v}.",
                      "no more than {p} of the total flow may go through {v}, for resilience.",
                      "to limit the risk of a single failure, {v} may carry at most {p} of the "
                      "total flow."}),
          {{"{good}", th.good},
           {"{v}", node_label(static_cast<size_t>(share_node))},
           {"{p}", style.percent(share * 100)}})));
    if (th.intro.find("{org}") != std::string::npos) text.distractors(org, 1, 0.2);
    text.paragraph();
    // Drawn in statement order: argument evaluation order differs between compilers.
    const std::string task = style.pick({"how to route the " + th.good + " through the network",
                                         "the flow on each " + th.link_noun,
                                         "a routing of the " + th.good + " over the " + links});
    const std::string goal = style.pick(
        {"maximise the " + th.good + " flow from " + names[source] + " to " + names[sink],
         "send as much " + th.good + " as possible from " + names[source] + " to " + names[sink]});
    const std::string value =
        style.pick({"the maximum flow in " + th.unit, "the largest possible " + th.good + " flow",
                    "the maximum " + th.good + " flow, in " + th.unit});
    text.fact(text::question(style, task, goal, value));
    return text.text();
  }

  std::string alg() const override {
    AlgebraicFormulation f("Maximum flow");
    f.set("$N = " + latex_set(keys) + "$", "nodes");
    f.set("$A = " + graph::latex_arc_set(arcs, keys) + "$", "one-way " + theme().link_noun + "s");
    f.parameter("$u_{ij}$", "capacity of arc $(i,j)$ (" + theme().unit + ", in the order of $A$)",
                latex_vector(graph::values(arcs, &Arc::cap)));
    f.parameter("$s = " + latex_name(keys[source]) + ", t = " + latex_name(keys[sink]) + "$",
                "source and sink");
    f.variable("$x_{ij} \\ge 0$", "flow on arc $(i,j)$ (continuous)");
    f.variable("$v \\ge 0$", "total flow from $s$ to $t$");
    f.objective("\\max v", "Maximise the flow from source to sink");
    f.constraint("flow balance",
                 "\\sum_{(i,j) \\in A} x_{ij} - \\sum_{(j,i) \\in A} x_{ji} = "
                 "\\begin{cases} v & i = s \\\\ -v & i = t \\\\ 0 & \\text{otherwise} "
                 "\\end{cases} \\quad \\forall i \\in N");
    f.constraint("capacity", "x_{ij} \\le u_{ij} \\quad \\forall (i,j) \\in A");
    if (limited_node >= 0) {
      std::string k = latex_name(keys[static_cast<size_t>(limited_node)]);
      f.constraint("node throughput",
                   "\\sum_{(i," + k + ") \\in A} x_{i," + k + "} \\le " + text::num(node_limit));
    }
    if (reduced_arc >= 0) {
      const Arc& a = arcs[static_cast<size_t>(reduced_arc)];
      std::string idx = latex_name(keys[a.from]) + "," + latex_name(keys[a.to]);
      f.constraint("reduced capacity",
                   "x_{" + idx + "} \\le " + text::num(reduced_fraction) + " \\, u_{" + idx + "}");
    }
    if (share_node >= 0) {
      std::string k = latex_name(keys[static_cast<size_t>(share_node)]);
      f.constraint("maximum share", "\\sum_{(i," + k + ") \\in A} x_{i," + k + "} \\le " +
                                        text::num(share) + " \\, v");
    }
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model =
        "set NODES;\nset ARCS within NODES cross NODES;\n"
        "param cap{ARCS} >= 0;\nparam source symbolic in NODES;\nparam sink symbolic in NODES;\n"
        "var x{(i, j) in ARCS} >= 0, <= cap[i, j];\nvar flow >= 0;\n"
        "maximize TotalFlow: flow;\n"
        "s.t. Balance{v in NODES}: sum{(i, j) in ARCS: i = v} x[i, j]\n"
        "  - sum{(i, j) in ARCS: j = v} x[i, j]\n"
        "  = (if v = source then flow else if v = sink then -flow else 0);\n";
    if (limited_node >= 0)
      model += "s.t. NodeLimit: sum{(i, j) in ARCS: j = '" +
               keys[static_cast<size_t>(limited_node)] + "'} x[i, j] <= " + text::num(node_limit) +
               ";\n";
    if (reduced_arc >= 0) {
      const Arc& a = arcs[static_cast<size_t>(reduced_arc)];
      std::string idx = "['" + keys[a.from] + "', '" + keys[a.to] + "']";
      model += "s.t. ReducedLink: x" + idx + " <= " + text::num(reduced_fraction) + " * cap" + idx +
               ";\n";
    }
    if (share_node >= 0)
      model += "s.t. MaxShare: sum{(i, j) in ARCS: j = '" + keys[static_cast<size_t>(share_node)] +
               "'} x[i, j] <= " + text::num(share) + " * flow;\n";
    GmplData data;
    data.set("NODES", keys).set_of_tuples("ARCS", graph::gmpl_tuples(arcs, keys));
    data.param_sparse("cap", graph::gmpl_values(arcs, keys, &Arc::cap));
    data.raw("param source := " + keys[source] + ";").raw("param sink := " + keys[sink] + ";");
    return compose_gmpl(model, "TotalFlow", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    const double v = s.value("flow");
    c.ge(v, 0, "flow >= 0");
    std::vector<double> x(arcs.size()), net(n(), 0.0), in(n(), 0.0);
    for (size_t k = 0; k < arcs.size(); ++k) {
      const Arc& a = arcs[k];
      x[k] = s.value("x", {keys[a.from], keys[a.to]});
      const std::string name = "x[" + keys[a.from] + "," + keys[a.to] + "]";
      c.ge(x[k], 0, name + " >= 0");
      c.le(x[k], a.cap, "capacity of " + name);
      net[a.from] += x[k];
      net[a.to] -= x[k];
      in[a.to] += x[k];
    }
    for (size_t u = 0; u < n(); ++u)
      c.eq(net[u], u == source ? v : u == sink ? -v : 0.0, "flow balance at " + keys[u]);
    if (limited_node >= 0)
      c.le(in[static_cast<size_t>(limited_node)], node_limit, "node throughput limit");
    if (reduced_arc >= 0)
      c.le(x[static_cast<size_t>(reduced_arc)],
           reduced_fraction * arcs[static_cast<size_t>(reduced_arc)].cap, "reduced link capacity");
    if (share_node >= 0) c.le(in[static_cast<size_t>(share_node)], share * v, "maximum share");
    return c.result(v);
  }
};

class MaxFlowFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "max_flow"; }
  std::string_view title() const override { return "Maximum flow"; }
  ProblemClass problem_class() const override { return ProblemClass::lp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<MaxFlowInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    inst->org = rng.pick(text::companies());
    const size_t n =
        static_cast<size_t>(size_for(rng, options.difficulty, {5, 7}, {8, 11}, {12, 15}));
    inst->names = text::pick_distinct(rng, text::cities(), n);
    inst->keys = text::symbols(inst->names);

    // Positions sorted west to east: the source is node 0, the sink node n-1.
    std::vector<geometry::Point> pos = geometry::random_points(rng, n, 100.0, 60.0);
    std::sort(pos.begin(), pos.end());
    std::vector<std::vector<bool>> linked(n, std::vector<bool>(n, false));
    auto link = [&](size_t a, size_t b) {
      if (a == b || linked[a][b] || linked[b][a] || (a == 0 && b == n - 1)) return;
      linked[a][b] = true;
      inst->arcs.push_back({a, b, 0});
    };
    const std::vector<size_t> chain = graph::planted_chain(rng, n);
    for (size_t i = 0; i + 1 < chain.size(); ++i) link(chain[i], chain[i + 1]);
    for (size_t v = 0; v + 1 < n; ++v) {
      const std::vector<size_t> near = geometry::nearest_first(pos, v);
      for (size_t i = 0; i < std::min<size_t>(3, near.size()); ++i) {
        const size_t w = near[i];
        // Mostly eastwards; an occasional westward link adds a cycle.
        if (w > v && (i < 2 || rng.bernoulli(0.6)))
          link(v, w);
        else if (w < v && w != 0 && rng.bernoulli(0.15))
          link(v, w);
      }
    }
    // Every intermediate node gets an incoming and an outgoing link.
    auto nearest = [&](size_t v, bool east) {
      size_t best = v;
      double best_d = 1e18;
      for (size_t w = 0; w < n; ++w) {
        if (east ? w <= v : w >= v) continue;
        double d = geometry::distance(pos[v], pos[w]);
        if (d < best_d) {
          best_d = d;
          best = w;
        }
      }
      return best;
    };
    for (size_t v = 1; v + 1 < n; ++v) {
      bool has_in = false, has_out = false;
      for (const Arc& a : inst->arcs) {
        has_in = has_in || a.to == v;
        has_out = has_out || a.from == v;
      }
      if (!has_in) link(nearest(v, false), v);
      if (!has_out) link(v, nearest(v, true));
    }
    graph::sort_by_ends(inst->arcs);
    for (Arc& a : inst->arcs) {
      // Links at the ends are wider so the bottleneck lies inside the network.
      const bool end = a.from == 0 || a.to == n - 1;
      a.cap = 5.0 * (end ? rng.uniform_int(8, 30) : rng.uniform_int(2, 20));
    }
    inst->source = 0;
    inst->sink = n - 1;

    // Side constraints placed on the unconstrained max flow so they tend to bind.
    const auto& arcs = inst->arcs;
    const std::vector<bool> none(n, false);
    std::vector<double> flow;
    max_flow(n, arcs, 0, n - 1, none, &flow);
    std::vector<double> through(n, 0.0);
    for (size_t k = 0; k < arcs.size(); ++k) through[arcs[k].to] += flow[k];
    if (rng.bernoulli(options.side_constraint_rate)) {
      std::vector<size_t> busy;
      for (size_t v = 1; v + 1 < n; ++v)
        if (through[v] >= 20) busy.push_back(v);
      if (!busy.empty()) {
        const size_t v = rng.pick(busy);
        inst->limited_node = static_cast<int>(v);
        inst->node_limit = round_down(through[v] * rng.uniform(0.5, 0.85), 5);
      }
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      std::vector<size_t> used;
      for (size_t k = 0; k < arcs.size(); ++k)
        if (flow[k] > 0) used.push_back(k);
      inst->reduced_arc = static_cast<int>(rng.pick(used));
      inst->reduced_fraction = rng.pick(std::vector<double>{0.25, 0.4, 0.5, 0.6, 0.75});
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      // Only nodes that can be bypassed: a positive flow must avoid them.
      std::vector<size_t> bypassable;
      for (size_t v = 1; v + 1 < n; ++v) {
        if (through[v] <= 0 || static_cast<int>(v) == inst->limited_node) continue;
        std::vector<bool> removed(n, false);
        removed[v] = true;
        if (max_flow(n, arcs, 0, n - 1, removed, nullptr) > 0) bypassable.push_back(v);
      }
      if (!bypassable.empty()) {
        inst->share_node = static_cast<int>(rng.pick(bypassable));
        inst->share = rng.pick(std::vector<double>{0.3, 0.4, 0.5, 0.6});
      }
    }
    return inst;
  }
};

}  // namespace

const Family& max_flow_family() {
  static const MaxFlowFamily family;
  return family;
}

}  // namespace trex::orlib
