// Shortest path from a source to a sink as a unit-flow LP (the constraint
// matrix is totally unimodular, so a basic optimum is a simple path), on
// two-way road maps (each road modelled as two arcs) or one-way networks, with
// optional closed-road, closed-node and must-visit side constraints. LP.
//
// Generator: places nodes on a map and links near neighbours, plants a
// west-to-east path so the sink is reachable, and only adds a side constraint
// after checking (Dijkstra) that a route satisfying all of them still exists.
// One-way networks only run eastwards (a DAG), which keeps the must-visit
// condition exact in the LP: with no cycles, every unit of flow must pass
// through the node.
#include <algorithm>
#include <cmath>

#include "trex/or/families/alg_writer.hpp"
#include "trex/or/families/family_list.hpp"
#include "trex/or/families/geometry.hpp"
#include "trex/or/families/gmpl_writer.hpp"
#include "trex/or/families/graph.hpp"
#include "trex/or/families/text.hpp"
#include "trex/or/families/themed.hpp"

namespace trex::orlib {
namespace {

enum class Layout { table, by_node, list };

struct Theme {
  std::string intro;        // {org}, {from} and {to} are replaced
  std::string node_noun;    // "town", "junction", "router"
  std::string link_noun;    // "road", "trail", "link"
  std::string length_name;  // "distance", "travel time", "latency"
  std::string unit;         // "km", "minutes", "ms"
  bool two_way;             // links usable in both directions
  int pool;                 // 0 cities, 1 landmarks, 2 stops
  Layout layout;
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"A courier van for {org} must drive from {from} to {to}.", "town", "road", "distance", "km",
       true, 0, Layout::table},
      {"A park ranger has to hike from {from} to {to} as quickly as possible to reach an injured "
       "walker.",
       "trail point", "trail", "walking time", "minutes", true, 1, Layout::by_node},
      {"{org} wants to route a video stream from its {from} data centre to its {to} data centre "
       "over one-way leased links with the lowest total latency.",
       "data centre", "link", "latency", "ms", false, 0, Layout::table},
      {"A delivery drone operated by {org} must fly from {from} to {to}. Airspace rules allow "
       "only the one-way corridors listed below.",
       "waypoint", "corridor", "flight time", "minutes", false, 0, Layout::list},
      {"A commuter wants to get from {from} to {to} by the fastest combination of one-way bus "
       "legs.",
       "stop", "bus leg", "travel time", "minutes", false, 2, Layout::by_node},
      {"An ambulance crew stationed at {from} is called to an emergency at {to} and needs the "
       "shortest way through the street network.",
       "junction", "street", "length", "metres", true, 2, Layout::list},
  };
  return t;
}

const std::vector<std::string>& landmarks() {
  static const std::vector<std::string> v = {
      "Eagle Rock",    "Pine Lake",  "Bear Cave",   "Fox Meadow",   "Owl Ridge",
      "Cedar Falls",   "Hawk Point", "Elk Pass",    "Moss Bridge",  "Wolf Creek",
      "Sunset Cliff",  "Fern Gully", "Aspen Grove", "Stone Arch",   "Lynx Hollow",
      "Echo Valley",   "Heron Pond", "Maple Hut",   "Granite Dome", "Willow Ford",
      "Raven Peak",    "Birch Camp", "Otter Bay",   "Thunder Gap",  "Crystal Spring",
      "Lookout Tower", "Old Mill",   "Badger Hill", "Misty Saddle", "Trout Pool"};
  return v;
}

const std::vector<std::string>& stops() {
  static const std::vector<std::string> v = {
      "Market Square", "Station Road",  "City Hall",    "Harbour Gate",  "Museum Lane",
      "Park Avenue",   "Hospital",      "University",   "Old Town",      "River Quay",
      "Stadium",       "Library Court", "Mill Street",  "Church Green",  "Airport Road",
      "Bridge End",    "Canal Street",  "Garden Plaza", "High Street",   "Kings Cross",
      "Lake View",     "North Gate",    "Orchard Way",  "Queens Park",   "Rose Hill",
      "South Pier",    "Tower Bridge",  "Union Square", "Victoria Road", "West End"};
  return v;
}

struct Arc {
  size_t from = 0, to = 0;
  double length = 0;
};

class ShortestPathInstance : public ComposedInstance<themes> {
 public:
  std::vector<std::string> names;  // display names
  std::vector<std::string> keys;   // MathProg symbols
  std::vector<Arc> arcs;           // two-way themes: arcs 2k and 2k+1 are the same road
  size_t source = 0, sink = 0;
  // Optional side constraints (-1 = absent).
  int closed_arc = -1;   // index of a closed arc (two-way: both directions close)
  int closed_node = -1;  // node that cannot be entered
  int via_node = -1;     // node the route must pass (one-way themes only)

  size_t n() const { return names.size(); }
  int side_count() const { return (closed_arc >= 0) + (closed_node >= 0) + (via_node >= 0); }
  // Arcs that the closed road blocks (both directions for two-way themes).
  std::vector<size_t> closed_arcs() const {
    std::vector<size_t> out;
    if (closed_arc < 0) return out;
    const size_t k = static_cast<size_t>(closed_arc);
    if (theme().two_way) {
      out.push_back(k - k % 2);
      out.push_back(k - k % 2 + 1);
    } else {
      out.push_back(k);
    }
    return out;
  }

  json size() const override {
    return {{"nodes", n()},
            {"arcs", arcs.size()},
            {"two_way", theme().two_way},
            {"side_constraints", side_count()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v;
    if (closed_arc >= 0) v.push_back("closed_link");
    if (closed_node >= 0) v.push_back("closed_node");
    if (via_node >= 0) v.push_back("must_visit");
    return v;
  }

  // "12 km", "1 minute", "35 metres"
  std::string len(const text::Style& style, double v) const {
    const std::string& unit = theme().unit;
    const bool singular = v == 1 && (unit == "minutes" || unit == "metres");
    return style.num(v) + " " + (singular ? unit.substr(0, unit.size() - 1) : unit);
  }

  std::string compose(text::Style& style) const override {
    const Theme& th = theme();
    text::Composer text(style);
    const std::string links = text::plural(th.link_noun), nodes = text::plural(th.node_noun);
    const size_t step = th.two_way ? 2 : 1;  // two-way links are described once
    const std::string kind = th.two_way ? "two-way" : "one-way";
    auto say = [&](const std::string& form) {
      return text::capitalize(text::fill(form, {{"{link}", th.link_noun},
                                                {"{links}", links},
                                                {"{node}", th.node_noun},
                                                {"{nodes}", nodes},
                                                {"{kind}", kind},
                                                {"{length}", th.length_name},
                                                {"{Length}", text::capitalize(th.length_name)},
                                                {"{lengths}", text::plural(th.length_name)},
                                                {"{unit}", th.unit},
                                                {"{s}", names[source]},
                                                {"{t}", names[sink]}}));
    };
    text.fact(
        text::fill(th.intro, {{"{org}", org}, {"{from}", names[source]}, {"{to}", names[sink]}}));
    text.fact(text::fill(say(style.pick({"The network has {n} and {a}.",
                                         "There are {n} in the network, joined by {a}.",
                                         "The map shows {n} connected by {a}."})),
                         {{"{n}", style.count_of(static_cast<long>(n()), th.node_noun)},
                          {"{a}", style.count_of(static_cast<long>(arcs.size() / step),
                                                 kind + " " + th.link_noun)}}));
    // Some stories name no organisation; a fact about one would come from nowhere.
    const bool named_org = th.intro.find("{org}") != std::string::npos;
    if (named_org) text.distractors(org, 1, 0.25);
    text.paragraph(false);

    // The links in the data's order: a Markdown table, one line per node or
    // one line per link. The theme's layout is a bias.
    int layout = static_cast<int>(th.layout);
    if (!style.chance(0.5)) layout = style.choose(3);
    if (th.two_way)
      text.fact(say(style.pick({"Each {link} is listed once and can be used both ways.",
                                "Every {link} can be travelled in either direction, with the same "
                                "{length} both ways; each is listed once.",
                                "The {links} are two-way and listed once each."})));
    if (layout == static_cast<int>(Layout::table)) {
      text.fact(say(style.pick(
          {"The {length} of each {link} is given in {unit}:", "{Length} of each {link}, in {unit}:",
           "The table lists the {links} with their {length} in {unit}:"})));
      text.paragraph(false);
      std::vector<std::vector<std::string>> rows;
      for (size_t k = 0; k < arcs.size(); k += step)
        rows.push_back({names[arcs[k].from], names[arcs[k].to], style.num(arcs[k].length)});
      text.block(text::markdown_table({th.two_way ? "Between" : "From", th.two_way ? "And" : "To",
                                       text::capitalize(th.length_name) + " (" + th.unit + ")"},
                                      rows));
    } else if (layout == static_cast<int>(Layout::by_node)) {
      text.paragraph(false);
      const bool bullets = style.chance(0.6);
      const std::string bullet = style.pick({"- ", "* "});
      std::string lines;
      for (size_t v = 0; v < n(); ++v) {
        std::vector<std::string> legs;
        for (size_t k = 0; k < arcs.size(); k += step)
          if (arcs[k].from == v)
            legs.push_back(names[arcs[k].to] + " (" + len(style, arcs[k].length) + ")");
        if (legs.empty()) continue;
        const std::string list = text::english_list(legs);
        const std::string what = legs.size() == 1
                                     ? text::article(th.link_noun) + " " + th.link_noun + " to "
                                     : links + " to ";
        lines += (bullets ? bullet : "") + "From " + names[v] +
                 (th.two_way ? " there " + std::string(legs.size() == 1 ? "is " : "are ") + what
                             : " you can go to ") +
                 list + ".\n";
      }
      text.block(lines);
    } else {
      text.paragraph(false);
      const bool bullets = style.chance(0.6);
      const std::string bullet = style.pick({"- ", "* "});
      const std::string arrow = th.two_way ? " <-> " : " -> ";
      const std::string form =
          bullets
              ? "{from}" + arrow + "{to}: {len}"
              : style.pick({th.two_way
                                ? "The {link} between {from} and {to} has {a} {length} of {len}."
                                : "The {link} from {from} to {to} has {a} {length} of {len}.",
                            th.two_way ? "Between {from} and {to} the {length} is {len}."
                                       : "From {from} to {to} the {length} is {len}."});
      std::string lines;
      for (size_t k = 0; k < arcs.size(); k += step)
        lines += (bullets ? bullet : "") +
                 text::fill(form, {{"{link}", th.link_noun},
                                   {"{a}", text::article(th.length_name)},
                                   {"{length}", th.length_name},
                                   {"{from}", names[arcs[k].from]},
                                   {"{to}", names[arcs[k].to]},
                                   {"{len}", len(style, arcs[k].length)}}) +
                 "\n";
      text.block(lines);
    }

    text.fact(say(style.pick({"The {length} of a route is the sum over its {links}.",
                              "A route's total {length} adds up the {length} of every {link} it "
                              "uses.",
                              "Along a route, the {lengths} of its {links} add up."})));
    if (closed_arc >= 0) {
      const Arc& a = arcs[static_cast<size_t>(closed_arc)];
      const std::vector<std::string> forms =
          th.two_way ? std::vector<std::string>{"today the {link} between {a} and {b} is closed in "
                                                "both directions.",
                                                "the {link} between {a} and {b} cannot be used "
                                                "today, in either direction."}
                     : std::vector<std::string>{"today the {link} from {a} to {b} is closed.",
                                                "the {link} from {a} to {b} cannot be used today."};
      text.fact(text::capitalize(
          text::fill(style.pick(forms),
                     {{"{link}", th.link_noun}, {"{a}", names[a.from]}, {"{b}", names[a.to]}})));
    }
    if (closed_node >= 0)
      text.fact(text::capitalize(text::fill(
          style.pick({"the {node} {v} is closed today and cannot be passed through.",
                      "{v} is closed today: the route may not pass through it.",
                      "the route must avoid {v}, which is closed today."}),
          {{"{node}", th.node_noun}, {"{v}", names[static_cast<size_t>(closed_node)]}})));
    if (via_node >= 0)
      text.fact(text::capitalize(text::fill(
          style.pick({"the route must pass through {v} on the way.",
                      "on the way, the route has to visit {v}.", "{v} must be on the route."}),
          {{"{v}", names[static_cast<size_t>(via_node)]}})));
    if (named_org) text.distractors(org, 1, 0.2);
    text.paragraph();
    // Drawn in statement order: argument evaluation order differs between compilers.
    const std::string task =
        style.pick({"the route from " + names[source] + " to " + names[sink],
                    "which " + links + " to take from " + names[source] + " to " + names[sink],
                    "a path from " + names[source] + " to " + names[sink]});
    const std::string goal =
        style.pick({"minimise the total " + th.length_name,
                    "make the total " + th.length_name + " as small as possible"});
    const std::string value =
        style.pick({"the minimum total " + th.length_name + " in " + th.unit,
                    "the " + th.length_name + " of the best route, in " + th.unit,
                    "the smallest total " + th.length_name});
    text.fact(text::question(style, task, goal, value));
    return text.text();
  }

  std::string alg() const override {
    AlgebraicFormulation f("Shortest path as a unit flow");
    f.set("$N = " + latex_set(keys) + "$", text::plural(theme().node_noun));
    f.set("$A = " + graph::latex_arc_set(arcs, keys) + "$",
          theme().two_way
              ? "directed arcs (each two-way " + theme().link_noun + " appears in both directions)"
              : "one-way " + text::plural(theme().link_noun));
    f.parameter("$\\ell_{ij}$",
                theme().length_name + " of arc $(i,j)$ (" + theme().unit + ", in the order of $A$)",
                latex_vector(graph::values(arcs, &Arc::length)));
    f.parameter("$s = " + latex_name(keys[source]) + ", t = " + latex_name(keys[sink]) + "$",
                "start and destination");
    f.parameter("$b_i$", "net outflow: $b_s = 1$, $b_t = -1$, $b_i = 0$ otherwise");
    f.variable("$0 \\le x_{ij} \\le 1$",
               "1 if arc $(i,j)$ is on the route (the LP has an integral optimum)");
    f.objective("\\min \\sum_{(i,j) \\in A} \\ell_{ij} x_{ij}",
                "Minimise the total " + theme().length_name);
    f.constraint("flow balance",
                 "\\sum_{(i,j) \\in A} x_{ij} - \\sum_{(j,i) \\in A} x_{ji} = b_i "
                 "\\quad \\forall i \\in N");
    for (size_t k : closed_arcs())
      f.constraint("closed " + theme().link_noun, "x_{" + latex_name(keys[arcs[k].from]) + "," +
                                                      latex_name(keys[arcs[k].to]) + "} = 0");
    if (closed_node >= 0) {
      std::string v = latex_name(keys[static_cast<size_t>(closed_node)]);
      f.constraint("closed " + theme().node_noun,
                   "\\sum_{(i," + v + ") \\in A} x_{i," + v + "} = 0");
    }
    if (via_node >= 0) {
      std::string v = latex_name(keys[static_cast<size_t>(via_node)]);
      f.constraint("must visit", "\\sum_{(i," + v + ") \\in A} x_{i," + v + "} \\ge 1");
    }
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model =
        "set NODES;\nset ARCS within NODES cross NODES;\n"
        "param len{ARCS} >= 0;\nparam source symbolic in NODES;\nparam sink symbolic in NODES;\n"
        "var x{ARCS} >= 0, <= 1;\n"
        "minimize TotalLength: sum{(i, j) in ARCS} len[i, j] * x[i, j];\n"
        "s.t. Balance{v in NODES}: sum{(i, j) in ARCS: i = v} x[i, j]\n"
        "  - sum{(i, j) in ARCS: j = v} x[i, j]\n"
        "  = (if v = source then 1 else if v = sink then -1 else 0);\n";
    int counter = 0;
    for (size_t k : closed_arcs())
      model += "s.t. Closed" + std::to_string(++counter) + ": x['" + keys[arcs[k].from] + "', '" +
               keys[arcs[k].to] + "'] = 0;\n";
    if (closed_node >= 0)
      model += "s.t. ClosedNode: sum{(i, j) in ARCS: j = '" +
               keys[static_cast<size_t>(closed_node)] + "'} x[i, j] = 0;\n";
    if (via_node >= 0)
      model += "s.t. MustVisit: sum{(i, j) in ARCS: j = '" + keys[static_cast<size_t>(via_node)] +
               "'} x[i, j] >= 1;\n";
    GmplData data;
    data.set("NODES", keys).set_of_tuples("ARCS", graph::gmpl_tuples(arcs, keys));
    data.param_sparse("len", graph::gmpl_values(arcs, keys, &Arc::length));
    data.raw("param source := " + keys[source] + ";").raw("param sink := " + keys[sink] + ";");
    return compose_gmpl(model, "TotalLength", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    std::vector<double> x(arcs.size()), net(n(), 0.0), in(n(), 0.0);
    double objective = 0;
    for (size_t k = 0; k < arcs.size(); ++k) {
      const Arc& a = arcs[k];
      x[k] = s.value("x", {keys[a.from], keys[a.to]});
      const std::string name = "x[" + keys[a.from] + "," + keys[a.to] + "]";
      c.ge(x[k], 0, name + " >= 0");
      c.le(x[k], 1, name + " <= 1");
      net[a.from] += x[k];
      net[a.to] -= x[k];
      in[a.to] += x[k];
      objective += a.length * x[k];
    }
    for (size_t v = 0; v < n(); ++v)
      c.eq(net[v], v == source ? 1.0 : v == sink ? -1.0 : 0.0, "flow balance at " + keys[v]);
    for (size_t k : closed_arcs())
      c.eq(x[k], 0, "closed arc " + keys[arcs[k].from] + "->" + keys[arcs[k].to]);
    if (closed_node >= 0)
      c.eq(in[static_cast<size_t>(closed_node)], 0,
           "closed node " + keys[static_cast<size_t>(closed_node)]);
    if (via_node >= 0)
      c.ge(in[static_cast<size_t>(via_node)], 1,
           "must visit " + keys[static_cast<size_t>(via_node)]);
    return c.result(objective);
  }
};

class ShortestPathFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "shortest_path"; }
  std::string_view title() const override { return "Shortest path (unit-flow LP)"; }
  ProblemClass problem_class() const override { return ProblemClass::lp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<ShortestPathInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    inst->org = rng.pick(text::companies());
    const size_t n =
        static_cast<size_t>(size_for(rng, options.difficulty, {6, 8}, {9, 12}, {13, 17}));
    const std::vector<std::string>& pool = th.pool == 0   ? text::cities()
                                           : th.pool == 1 ? landmarks()
                                                          : stops();
    inst->names = text::pick_distinct(rng, pool, n);
    inst->keys = text::symbols(inst->names);

    // Map positions, sorted west to east; the source is the westernmost node.
    std::vector<geometry::Point> pos = geometry::random_points(rng, n, 100.0, 60.0);
    std::sort(pos.begin(), pos.end());
    // Keep the extremes apart so the route needs several links.
    pos.front().first = rng.uniform(0.0, 5.0);
    pos.back().first = rng.uniform(95.0, 100.0);
    const double scale = th.unit == "metres" ? 20.0 : th.unit == "ms" ? 0.3 : 0.8;
    auto length = [&](size_t a, size_t b) {
      double d = geometry::distance(pos[a], pos[b]);
      return std::max(1.0, std::round(d * scale * rng.uniform(1.05, 1.4)));
    };
    std::vector<std::vector<bool>> linked(n, std::vector<bool>(n, false));
    auto link = [&](size_t a, size_t b) {
      if (th.two_way && a > b) std::swap(a, b);
      if (a == b || linked[a][b] || (a == 0 && b == n - 1)) return;
      linked[a][b] = true;
      const double d = length(a, b);
      inst->arcs.push_back({a, b, d});
      if (th.two_way) inst->arcs.push_back({b, a, d});
    };
    // Planted route: an increasing chain from source to sink.
    const std::vector<size_t> chain = graph::planted_chain(rng, n);
    for (size_t i = 0; i + 1 < chain.size(); ++i) link(chain[i], chain[i + 1]);
    // Near neighbours (eastwards only for one-way networks).
    const size_t degree = options.difficulty == Difficulty::easy ? 2 : 3;
    for (size_t v = 0; v < n; ++v) {
      const std::vector<size_t> near =
          geometry::nearest_first(pos, v, [&](size_t w) { return th.two_way || w > v; });
      for (size_t i = 0; i < std::min(degree, near.size()); ++i)
        if (i < 2 || rng.bernoulli(0.5)) link(v, near[i]);
    }
    inst->source = 0;
    inst->sink = n - 1;
    // List links by origin so the text does not reveal the planted route first.
    std::vector<Arc> links;
    for (size_t k = 0; k < inst->arcs.size(); k += th.two_way ? 2 : 1)
      links.push_back(inst->arcs[k]);
    graph::sort_by_ends(links);
    inst->arcs.clear();
    for (const Arc& a : links) {
      inst->arcs.push_back(a);
      if (th.two_way) inst->arcs.push_back({a.to, a.from, a.length});
    }

    // Side constraints, each kept only if a feasible route remains.
    const auto& arcs = inst->arcs;
    const std::vector<graph::Ends> ends = graph::ends(arcs);
    const std::vector<double> lengths = graph::values(arcs, &Arc::length);
    std::vector<bool> arc_blocked(arcs.size(), false), node_blocked(n, false);
    auto route = [&](size_t from, size_t to) {
      return graph::shortest_path(n, ends, lengths, from, to, arc_blocked, node_blocked);
    };
    auto best = [&]() { return route(0, n - 1); };
    if (rng.bernoulli(options.side_constraint_rate)) {
      std::vector<size_t> path = best();
      const size_t k = rng.pick(path);
      const size_t first = th.two_way ? k - k % 2 : k;
      const size_t count = th.two_way ? 2 : 1;
      for (size_t i = first; i < first + count; ++i) arc_blocked[i] = true;
      if (!best().empty()) {
        inst->closed_arc = static_cast<int>(k);
      } else {
        for (size_t i = first; i < first + count; ++i) arc_blocked[i] = false;
      }
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      std::vector<size_t> path = best();
      if (path.size() >= 2) {
        const size_t v = arcs[path[rng.index(path.size() - 1)]].to;  // an interior node
        node_blocked[v] = true;
        if (!best().empty())
          inst->closed_node = static_cast<int>(v);
        else
          node_blocked[v] = false;
      }
    }
    if (!th.two_way && rng.bernoulli(options.side_constraint_rate)) {
      std::vector<size_t> path = best();
      std::vector<bool> on_path(n, false);
      for (size_t k : path) on_path[arcs[k].to] = true;
      std::vector<size_t> candidates;
      for (size_t v = 1; v + 1 < n; ++v)
        if (!on_path[v] && !node_blocked[v] && !route(0, v).empty() && !route(v, n - 1).empty())
          candidates.push_back(v);
      if (!candidates.empty()) inst->via_node = static_cast<int>(rng.pick(candidates));
    }
    return inst;
  }
};

}  // namespace

const Family& shortest_path_family() {
  static const ShortestPathFamily family;
  return family;
}

}  // namespace trex::orlib
