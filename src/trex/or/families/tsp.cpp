// Travelling salesman problem (MILP) with Miller-Tucker-Zemlin subtour
// elimination: visit every place exactly once and return to the start along the
// shortest closed tour. Distances are rounded Euclidean distances (symmetric).
//
// Generator: draws points, then plants a random tour; a closed direct road is
// chosen among pairs that are not neighbours on that tour, and a forced "next
// stop" among pairs that are, so the planted tour stays feasible.
#include <algorithm>

#include "trex/or/families/alg_writer.hpp"
#include "trex/or/families/draws.hpp"
#include "trex/or/families/family_list.hpp"
#include "trex/or/families/geometry.hpp"
#include "trex/or/families/gmpl_writer.hpp"
#include "trex/or/families/text.hpp"
#include "trex/or/families/themed.hpp"

namespace trex::orlib {
namespace {

enum class Layout { matrix, pairs, bullets };

struct Theme {
  std::string intro;              // {org} -> organisation, {start} -> start place
  std::string place;              // "city"
  std::string places;             // "cities"
  std::string start_name;         // fixed start place, or empty to draw the start from the pool
  std::vector<std::string> pool;  // place names (empty: text::cities())
  std::string unit;               // "km"
  double scale;                   // coordinates are drawn in [0, scale]
  std::string measure;            // "distance" / "travel time"
  std::string question;
  Layout layout;
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"A sales representative of {org} is based in {start} and has to visit every one of the "
       "other cities below exactly once before returning to {start}.",
       "city",
       "cities",
       "",
       {},
       "km",
       120,
       "road distance",
       "In which order should the cities be visited to make the round trip as short as possible, "
       "and how long is the shortest round trip?",
       Layout::matrix},
      {"A maintenance technician of {org} starts from the {start} and must inspect each of the "
       "wind turbine sites below once, then return to the base.",
       "site",
       "sites",
       "Service Base",
       {"North Ridge", "Eagle Hill", "Mill Creek", "Stony Point", "Cedar Flats", "Fox Hollow",
        "Pine Bluff", "Windy Gap", "Bear Lake", "Red Rock", "Sand Dunes", "Oak Valley"},
       "km",
       60,
       "driving distance",
       "Which inspection tour minimises the total driving distance, and what is that minimum "
       "distance?",
       Layout::pairs},
      {"A CNC drill at {org} must drill a set of holes in a circuit board. The drill head starts "
       "at the {start}, visits every hole exactly once and returns to the {start}.",
       "hole",
       "holes",
       "Home Position",
       {"H1", "H2", "H3", "H4", "H5", "H6", "H7", "H8", "H9", "H10", "H11", "H12"},
       "mm",
       80,
       "travel distance",
       "Find the drilling order that minimises the total travel distance of the drill head. What "
       "is the minimum distance?",
       Layout::matrix},
      {"A home-care nurse employed by {org} leaves the {start} in the morning, visits each of "
       "today's patients once and comes back to the {start}.",
       "patient",
       "patients",
       "Clinic",
       {},
       "minutes",
       40,
       "travel time",
       "In which order should the nurse visit the patients so that the total travel time is "
       "minimal, and what is the minimum total travel time?",
       Layout::bullets},
      {"A sightseeing bus sponsored by {org} leaves the {start}, stops once at each of the "
       "landmarks below and returns to the {start}.",
       "landmark",
       "landmarks",
       "Central Hotel",
       {"Old Town Square", "Castle", "Cathedral", "Harbour", "Botanic Garden", "Museum",
        "Opera House", "Market Hall", "Observatory", "Zoo", "City Park", "Lighthouse"},
       "km",
       25,
       "driving distance",
       "Plan the stop order that keeps the total driving distance as small as possible. What is "
       "the minimum total distance?",
       Layout::pairs},
  };
  return t;
}

class TspInstance : public ThemedInstance<themes> {
 public:
  std::vector<std::string> names, keys;  // names[0] is the start
  std::vector<std::vector<double>> dist;
  int closed_a = -1, closed_b = -1;  // no direct travel between these two (either way)
  int next_a = -1, next_b = -1;      // next_b must be visited immediately after next_a

  size_t n() const { return keys.size(); }
  int side_count() const { return (closed_a >= 0) + (next_a >= 0); }
  std::string amount(double v) const { return text::num(v) + " " + theme().unit; }
  // A place as used in running text: a named start base takes "the".
  std::string ref(size_t i) const {
    return i == 0 && !theme().start_name.empty() ? "the " + names[0] : names[i];
  }
  std::string ref(int i) const { return ref(static_cast<size_t>(i)); }

  json size() const override { return {{"places", n()}, {"side_constraints", side_count()}}; }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v;
    if (closed_a >= 0) v.push_back("closed_road");
    if (next_a >= 0) v.push_back("forced_successor");
    return v;
  }

  std::string nl() const override {
    const Theme& th = theme();
    std::string out = text::fill(th.intro, {{"{org}", org}, {"{start}", names[0]}});
    std::vector<std::string> others;
    for (size_t i = 1; i < n(); ++i) others.push_back(names[i]);
    out += " The " + std::to_string(n() - 1) + " " + th.places + " are " +
           text::english_list(others) + ". ";
    out += "The " + th.measure + "s (in " + th.unit + ") are the same in both directions";
    if (th.layout == Layout::matrix) {
      out += ":\n\n" + text::markdown_matrix(names, dist) + "\n";
    } else if (th.layout == Layout::pairs) {
      out += ": ";
      std::vector<std::string> parts;
      for (size_t i = 0; i < n(); ++i)
        for (size_t j = i + 1; j < n(); ++j)
          parts.push_back(names[i] + " to " + names[j] + " " + amount(dist[i][j]));
      out += text::english_list(parts, "and") + ".\n\n";
    } else {
      out += ":\n\n";
      for (size_t i = 0; i + 1 < n(); ++i) {
        std::vector<std::string> parts;
        for (size_t j = i + 1; j < n(); ++j)
          parts.push_back(amount(dist[i][j]) + " to " + names[j]);
        out += "- From " + ref(i) + ": " + text::english_list(parts) + "\n";
      }
      out += "\n";
    }
    if (closed_a >= 0)
      out += "The direct connection between " + ref(closed_a) + " and " + ref(closed_b) +
             " is closed, so the tour may not go directly "
             "from one to the other in either direction. ";
    if (next_a >= 0)
      out += text::capitalize(ref(next_b)) + " must be visited immediately after " + ref(next_a) +
             ". ";
    out += "Each " + th.place +
           " is visited exactly once and the tour is a single closed loop "
           "starting and ending at " +
           ref(size_t{0}) + ".\n\n";
    out += th.question;
    return out;
  }

  std::string alg() const override {
    AlgebraicFormulation f("Travelling salesman problem (MTZ formulation)");
    f.set("$N = " + latex_set(keys) + "$", "places, with start $s = " + latex_name(keys[0]) + "$");
    f.parameter("$d_{i,j}$", theme().measure + " from $i$ to $j$ (" + theme().unit + ")",
                latex_matrix(dist));
    f.parameter("$n = |N|$", "number of places", std::to_string(n()));
    f.variable("$b_{i,j} \\in \\{0,1\\}$",
               "1 if the tour goes directly from $i$ to $j$ ($i \\ne j$)");
    f.variable("$1 \\le u_i \\le n - 1$", "position of $i$ in the tour ($i \\ne s$)");
    f.objective("\\min \\sum_{i \\ne j} d_{i,j} b_{i,j}", "Minimise the total " + theme().measure);
    f.constraint("leave once", "\\sum_{j \\ne i} b_{i,j} = 1 \\quad \\forall i \\in N");
    f.constraint("enter once", "\\sum_{i \\ne j} b_{i,j} = 1 \\quad \\forall j \\in N");
    f.constraint("subtour elimination",
                 "u_i - u_j + n b_{i,j} \\le n - 1 \\quad \\forall i \\ne j, \\; i, j \\ne s");
    f.constraint("no two-place loops (valid inequality)",
                 "b_{i,j} + b_{j,i} \\le 1 \\quad \\forall i, j \\in N, i < j");
    if (closed_a >= 0) {
      std::string a = latex_name(keys[static_cast<size_t>(closed_a)]);
      std::string b = latex_name(keys[static_cast<size_t>(closed_b)]);
      f.constraint("closed road", "b_{" + a + "," + b + "} + b_{" + b + "," + a + "} = 0");
    }
    if (next_a >= 0)
      f.constraint("forced successor", "b_{" + latex_name(keys[static_cast<size_t>(next_a)]) + "," +
                                           latex_name(keys[static_cast<size_t>(next_b)]) + "} = 1");
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model =
        "set N;\nparam start symbolic in N;\nparam n := card(N);\nparam d{N, N} >= 0;\n"
        "var b{i in N, j in N: i != j} binary;\n"
        "var u{i in N: i != start} >= 1, <= n - 1;\n"
        "minimize TotalDistance: sum{i in N, j in N: i != j} d[i, j] * b[i, j];\n"
        "s.t. Leave{i in N}: sum{j in N: j != i} b[i, j] = 1;\n"
        "s.t. Enter{j in N}: sum{i in N: i != j} b[i, j] = 1;\n"
        "# Miller-Tucker-Zemlin: no subtour that avoids the start\n"
        "s.t. MTZ{i in N, j in N: i != j and i != start and j != start}:\n"
        "  u[i] - u[j] + n * b[i, j] <= n - 1;\n"
        "# valid inequality: no two-place loops (tightens the relaxation)\n"
        "s.t. NoTwoCycle{i in N, j in N: i < j}: b[i, j] + b[j, i] <= 1;\n";
    if (closed_a >= 0) {
      const auto& a = keys[static_cast<size_t>(closed_a)];
      const auto& b = keys[static_cast<size_t>(closed_b)];
      model += "s.t. ClosedRoad: b['" + a + "', '" + b + "'] + b['" + b + "', '" + a + "'] = 0;\n";
    }
    if (next_a >= 0)
      model += "s.t. ForcedNext: b['" + keys[static_cast<size_t>(next_a)] + "', '" +
               keys[static_cast<size_t>(next_b)] + "'] = 1;\n";
    GmplData data;
    data.set("N", keys).raw("param start := " + keys[0] + ";").param("d", keys, keys, dist);
    return compose_gmpl(model, "TotalDistance", data);
  }

  CheckResult check(const Solution& sol) const override {
    Checker c;
    std::vector<std::vector<double>> b(n(), std::vector<double>(n(), 0.0));
    double objective = 0;
    for (size_t i = 0; i < n(); ++i)
      for (size_t j = 0; j < n(); ++j) {
        if (i == j) continue;
        b[i][j] = sol.value("b", {keys[i], keys[j]});
        c.binary(b[i][j], "b[" + keys[i] + "," + keys[j] + "]");
        objective += dist[i][j] * b[i][j];
      }
    for (size_t i = 0; i < n(); ++i) {
      double out = 0, in = 0;
      for (size_t j = 0; j < n(); ++j) {
        out += b[i][j];
        in += b[j][i];
      }
      c.eq(out, 1, "departures from " + keys[i]);
      c.eq(in, 1, "arrivals at " + keys[i]);
    }
    // Follow the tour from the start: it must pass every place once and close.
    if (c.ok()) {
      std::vector<bool> seen(n(), false);
      size_t cur = 0, steps = 0;
      do {
        seen[cur] = true;
        size_t next = cur;
        for (size_t j = 0; j < n(); ++j)
          if (j != cur && b[cur][j] > 0.5) next = j;
        cur = next;
        ++steps;
      } while (cur != 0 && !seen[cur] && steps <= n());
      if (cur != 0 || steps != n())
        c.fail("the tour from " + keys[0] + " closes after " + std::to_string(steps) + " of " +
               std::to_string(n()) + " places (subtour)");
    }
    if (closed_a >= 0) {
      size_t a = static_cast<size_t>(closed_a), bb = static_cast<size_t>(closed_b);
      c.le(b[a][bb] + b[bb][a], 0, "closed road " + keys[a] + "-" + keys[bb]);
    }
    if (next_a >= 0)
      c.eq(b[static_cast<size_t>(next_a)][static_cast<size_t>(next_b)], 1,
           "forced successor " + keys[static_cast<size_t>(next_a)] + "->" +
               keys[static_cast<size_t>(next_b)]);
    return c.result(objective);
  }
};

class TspFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "tsp"; }
  std::string_view title() const override {
    return "Travelling salesman (MTZ subtour elimination)";
  }
  ProblemClass problem_class() const override { return ProblemClass::milp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<TspInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    inst->org = rng.pick(text::companies());
    const size_t n = static_cast<size_t>(size_for(rng, options.difficulty, {4, 5}, {6, 7}, {8, 9}));

    if (th.start_name.empty()) {
      const auto& pool = th.pool.empty() ? text::cities() : th.pool;
      inst->names = text::pick_distinct(rng, pool, n);
    } else {
      inst->names = {th.start_name};
      const auto& pool = th.pool.empty() ? text::people() : th.pool;
      for (const auto& nm : text::pick_distinct(rng, pool, n - 1)) inst->names.push_back(nm);
      if (th.place == "hole")
        std::sort(inst->names.begin() + 1, inst->names.end(),
                  [](const std::string& a, const std::string& b) {
                    return std::stoi(a.substr(1)) < std::stoi(b.substr(1));
                  });
    }
    inst->keys = text::symbols(inst->names);

    std::vector<geometry::Point> pts;
    geometry::add_spread_points(rng, th.scale, n, pts);
    inst->dist = geometry::rounded_distances(pts);

    // Planted tour: the start followed by the other places in random order.
    std::vector<size_t> tour(n);
    for (size_t i = 0; i < n; ++i) tour[i] = i;
    rng.shuffle(tour);
    std::rotate(tour.begin(), std::find(tour.begin(), tour.end(), size_t{0}), tour.end());
    std::vector<size_t> succ(n);
    for (size_t k = 0; k < n; ++k) succ[tour[k]] = tour[(k + 1) % n];

    const double rate = options.side_constraint_rate;
    if (rng.bernoulli(rate)) {
      size_t k = rng.index(n - 1);  // not the return to the start
      inst->next_a = static_cast<int>(tour[k]);
      inst->next_b = static_cast<int>(succ[tour[k]]);
    }
    if (n >= 5 && rng.bernoulli(rate)) {
      const auto apart = draw_distinct_pair(
          rng, n, 50, [&](size_t a, size_t b) { return succ[a] != b && succ[b] != a; });
      if (apart) {
        const auto [a, b] = in_order(*apart);
        inst->closed_a = static_cast<int>(a);
        inst->closed_b = static_cast<int>(b);
      }
    }
    return inst;
  }
};

}  // namespace

const Family& tsp_family() {
  static const TspFamily family;
  return family;
}

}  // namespace trex::orlib
