// Capacitated vehicle routing (MILP): vehicles of one capacity leave a depot,
// serve every customer exactly once and return; at most K vehicles. Two-index
// arc formulation with load-based MTZ constraints; some instances add time
// windows, service times and a return deadline (VRPTW, big-M time linking).
//
// Generator: draws customers and demands, plants a partition of the customers
// into routes, sets the capacity just above the heaviest planted route and, for
// VRPTW, places each time window around the planted arrival time.
#include <algorithm>
#include <cmath>

#include "trex/or/families/alg_writer.hpp"
#include "trex/or/families/draws.hpp"
#include "trex/or/families/family_list.hpp"
#include "trex/or/families/geometry.hpp"
#include "trex/or/families/gmpl_writer.hpp"
#include "trex/or/families/rounding.hpp"
#include "trex/or/families/text.hpp"
#include "trex/or/families/themed.hpp"

namespace trex::orlib {
namespace {

enum class Layout { matrix, pairs, bullets };

struct Theme {
  std::string intro;              // {org} -> organisation, {depot} -> depot name
  std::string depot;              // depot display name
  std::string customer;           // "store"
  std::vector<std::string> pool;  // customer names (empty: text::cities())
  std::string load;               // demand unit, plural: "crates"
  std::string vehicle;            // "van"
  bool pickup;                    // customers hand loads over instead of receiving them
  std::string unit;               // distance unit when there are no time windows
  double scale;                   // coordinates in [0, scale]
  Layout layout;
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"{org} delivers groceries from its {depot} to stores in nearby towns.",
       "Central Warehouse",
       "store",
       {},
       "crates",
       "van",
       false,
       "km",
       60,
       Layout::matrix},
      {"A heating-oil supplier working with {org} serves farms from its {depot}.",
       "Fuel Depot",
       "farm",
       {"Oak Farm", "Willow Farm", "Hilltop Farm", "Meadow Farm", "Brook Farm", "Elm Farm",
        "Ridge Farm", "Maple Farm", "Clover Farm", "Pond Farm", "Orchard Farm", "Heather Farm"},
       "drums",
       "tanker",
       false,
       "km",
       40,
       Layout::pairs},
      {"The medical courier service of {org} picks up specimen boxes at clinics and brings them "
       "to the {depot}.",
       "Central Lab",
       "clinic",
       {"Northside Clinic", "Harbour Clinic", "Parkview Clinic", "Hillcrest Clinic",
        "Riverside Clinic", "Lakeside Clinic", "Westgate Clinic", "Eastwood Clinic",
        "Southport Clinic", "Greenfield Clinic", "Kingsway Clinic", "Station Clinic"},
       "specimen boxes",
       "courier car",
       true,
       "km",
       30,
       Layout::bullets},
      {"A food bank supported by {org} distributes meal boxes from its {depot} to shelters.",
       "Food Bank",
       "shelter",
       {"Hope House", "Safe Haven", "New Start", "Harbor Light", "Bridge Shelter", "Open Door",
        "Family Place", "Warm Hearth", "Oak Lodge", "Unity Shelter", "Dove House", "Cedar House"},
       "meal boxes",
       "truck",
       false,
       "km",
       35,
       Layout::matrix},
      {"{org} bakes pastries for local cafes and delivers them every morning from its {depot}.",
       "Main Bakery",
       "cafe",
       {"Cafe Luna", "Bean There", "Daily Grind", "Corner Cup", "Brew Lab", "Cafe Nova",
        "Mocha Joe", "Latte Lane", "Espresso Bar", "Tea Garden", "Cafe Roma", "Book Nook"},
       "trays",
       "delivery van",
       false,
       "km",
       25,
       Layout::pairs},
  };
  return t;
}

class CvrpInstance : public ThemedInstance<themes> {
 public:
  std::vector<std::string> names, keys;   // index 0 is the depot
  std::vector<double> demand;             // index 0 unused (0)
  std::vector<std::vector<double>> dist;  // distances, or travel times with windows
  double capacity = 0;
  int vehicles = 0;
  bool windows = false;
  std::vector<double> open, close, service;  // per node, index 0 unused
  double horizon = 0;
  int closed_a = -1, closed_b = -1;  // customers without a direct road between them
  int first_stop = -1;               // customer that must be the first stop of its route

  size_t nodes() const { return keys.size(); }
  size_t customers() const { return keys.size() - 1; }
  int side_count() const { return (closed_a >= 0) + (first_stop >= 0); }
  std::string unit() const { return windows ? "minutes" : theme().unit; }
  std::string measure() const { return windows ? "travel time" : "distance"; }
  std::string depot_ref() const { return "the " + names[0]; }
  std::vector<std::string> customer_keys() const { return {keys.begin() + 1, keys.end()}; }
  template <typename T>
  std::vector<T> tail(const std::vector<T>& v) const {
    return {v.begin() + 1, v.end()};
  }
  double big_m() const {
    double dmax = 0, smax = 0;
    for (const auto& r : dist) dmax = std::max(dmax, *std::max_element(r.begin(), r.end()));
    for (size_t i = 1; i < nodes(); ++i) smax = std::max(smax, service[i]);
    return horizon + smax + dmax;
  }

  json size() const override {
    return {{"customers", customers()},
            {"vehicles", vehicles},
            {"time_windows", windows},
            {"side_constraints", side_count()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v = {windows ? "vrptw" : "cvrp"};
    if (closed_a >= 0) v.push_back("closed_road");
    if (first_stop >= 0) v.push_back("first_stop");
    return v;
  }

  std::string nl() const override {
    const Theme& th = theme();
    std::string out = text::fill(th.intro, {{"{org}", org}, {"{depot}", names[0]}}) + " ";
    out += "Today " + std::to_string(customers()) + " " + th.customer + "s must be served. Up to " +
           std::to_string(vehicles) + " identical " + th.vehicle +
           "s are available, each able to "
           "carry at most " +
           text::num(capacity) + " " + th.load + ". Every " + th.vehicle + " that is used leaves " +
           depot_ref() + ", visits some " + th.customer + "s and returns to " + depot_ref() +
           "; each " + th.customer + " is served by exactly one visit.";

    const std::string tu = unit();
    std::string requests;
    if (th.layout == Layout::matrix) {
      std::vector<std::string> header = {text::capitalize(th.customer), text::capitalize(th.load)};
      if (windows) {
        header.push_back("Earliest start (min)");
        header.push_back("Latest start (min)");
        header.push_back("Service time (min)");
      }
      std::vector<std::vector<std::string>> rows;
      for (size_t i = 1; i < nodes(); ++i) {
        std::vector<std::string> r = {names[i], text::num(demand[i])};
        if (windows) {
          r.push_back(text::num(open[i]));
          r.push_back(text::num(close[i]));
          r.push_back(text::num(service[i]));
        }
        rows.push_back(r);
      }
      out += "\n\n" + text::markdown_table(header, rows) + "\n";
      out += "The " + measure() + "s (" + tu +
             ") between locations are the same in both "
             "directions:\n\n";
      out += text::markdown_matrix(names, dist) + "\n";
    } else {
      out += "\n\n";
      for (size_t i = 1; i < nodes(); ++i) {
        out += "- " + names[i] + (th.pickup ? " has " : " needs ") + text::num(demand[i]) + " " +
               th.load + (th.pickup ? " to collect" : "");
        if (windows)
          out += "; service must start between minute " + text::num(open[i]) + " and minute " +
                 text::num(close[i]) + " and takes " + text::num(service[i]) + " minutes";
        out += ".\n";
      }
      out += "\n";
      if (th.layout == Layout::pairs) {
        std::vector<std::string> parts;
        for (size_t i = 0; i < nodes(); ++i)
          for (size_t j = i + 1; j < nodes(); ++j)
            parts.push_back(names[i] + " - " + names[j] + ": " + text::num(dist[i][j]));
        out += "The " + measure() + "s in " + tu + " (the same in both directions) are " +
               text::english_list(parts) + ".\n\n";
      } else {
        out += "The " + measure() + "s in " + tu + " are the same in both directions:\n\n";
        for (size_t i = 0; i + 1 < nodes(); ++i) {
          std::vector<std::string> parts;
          for (size_t j = i + 1; j < nodes(); ++j)
            parts.push_back(text::num(dist[i][j]) + " to " + names[j]);
          out += "- From " + (i == 0 ? depot_ref() : names[i]) + ": " + text::english_list(parts) +
                 "\n";
        }
        out += "\n";
      }
    }
    if (windows)
      out += "All " + th.vehicle + "s leave " + depot_ref() +
             " at minute 0 and must be back by "
             "minute " +
             text::num(horizon) + ". A " + th.vehicle + " that arrives before a " + th.customer +
             "'s earliest start waits; service may not start after the latest "
             "start. ";
    if (closed_a >= 0)
      out += "The direct road between " + names[static_cast<size_t>(closed_a)] + " and " +
             names[static_cast<size_t>(closed_b)] + " is closed, so no " + th.vehicle +
             " may drive directly from one to the other. ";
    if (first_stop >= 0)
      out += names[static_cast<size_t>(first_stop)] + " must be the first stop of the " +
             th.vehicle + " that serves it. ";
    out += "How should the " + th.customer + "s be assigned to " + th.vehicle +
           "s and in which "
           "order should each " +
           th.vehicle + " visit them so that the total " + measure() + " of all " + th.vehicle +
           "s is as small as possible? What is the minimum total " + measure() + "?";
    return out;
  }

  std::string alg() const override {
    AlgebraicFormulation f(windows ? "Vehicle routing with capacities and time windows"
                                   : "Capacitated vehicle routing (load-based MTZ)");
    f.set("$C = " + latex_set(customer_keys()) + "$", theme().customer + "s");
    f.set("$N = \\{" + latex_name(keys[0]) + "\\} \\cup C$",
          "locations, with depot $0 = " + latex_name(keys[0]) + "$");
    f.parameter("$d_{i,j}$", measure() + " from $i$ to $j$ (" + unit() + ")", latex_matrix(dist));
    f.parameter("$q_i$", "demand of customer $i$ (" + theme().load + ")",
                latex_vector(tail(demand)));
    f.parameter("$Q$", "vehicle capacity", text::num(capacity));
    f.parameter("$K$", "number of vehicles", std::to_string(vehicles));
    if (windows) {
      f.parameter("$a_i, e_i$", "earliest and latest service start at $i$",
                  latex_vector(tail(open)) + ", " + latex_vector(tail(close)));
      f.parameter("$s_i$", "service time at $i$", latex_vector(tail(service)));
      f.parameter("$H$", "time by which every vehicle is back at the depot", text::num(horizon));
      f.parameter("$\\bar{M} = H + \\max_i s_i + \\max_{i,j} d_{i,j}$", "big-M of the time links",
                  text::num(big_m()));
    }
    f.variable("$b_{i,j} \\in \\{0,1\\}$", "1 if a vehicle drives directly from $i$ to $j$");
    f.variable("$q_i \\le u_i \\le Q$", std::string("load ") +
                                            (theme().pickup ? "collected" : "delivered") +
                                            " by the vehicle up to and including $i$");
    if (windows) f.variable("$a_i \\le t_i \\le e_i$", "service start time at $i$");
    f.objective("\\min \\sum_{i \\ne j} d_{i,j} b_{i,j}", "Minimise the total " + measure());
    f.constraint("leave once", "\\sum_{j \\in N, j \\ne i} b_{i,j} = 1 \\quad \\forall i \\in C");
    f.constraint("enter once", "\\sum_{i \\in N, i \\ne j} b_{i,j} = 1 \\quad \\forall j \\in C");
    f.constraint("fleet size", "\\sum_{j \\in C} b_{0,j} \\le K");
    f.constraint(
        "vehicle lower bound (valid inequality)",
        "\\sum_{j \\in C} b_{0,j} \\ge \\lceil \\textstyle\\sum_{i \\in C} q_i / Q \\rceil");
    f.constraint("load (MTZ)",
                 "u_j \\ge u_i + q_j - Q(1 - b_{i,j}) \\quad \\forall i, j \\in C, i \\ne j");
    if (windows) {
      f.constraint("time from depot",
                   "t_j \\ge d_{0,j} - \\bar{M}(1 - b_{0,j}) \\quad \\forall j \\in C");
      f.constraint("time between customers",
                   "t_j \\ge t_i + s_i + d_{i,j} - \\bar{M}(1 - b_{i,j}) \\quad \\forall i, j \\in "
                   "C, i \\ne j");
      f.constraint("return by H",
                   "t_i + s_i + d_{i,0} \\le H + \\bar{M}(1 - b_{i,0}) \\quad \\forall i \\in C");
    }
    if (closed_a >= 0) {
      std::string a = latex_name(keys[static_cast<size_t>(closed_a)]);
      std::string b = latex_name(keys[static_cast<size_t>(closed_b)]);
      f.constraint("closed road", "b_{" + a + "," + b + "} + b_{" + b + "," + a + "} = 0");
    }
    if (first_stop >= 0)
      f.constraint("first stop",
                   "b_{0," + latex_name(keys[static_cast<size_t>(first_stop)]) + "} = 1");
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model =
        "set C;\nparam depot symbolic;\nset N := {depot} union C;\nparam d{N, N} >= 0;\n"
        "param q{C} > 0;\nparam Q > 0;\nparam K integer > 0;\n";
    if (windows)
      model +=
          "param a{C} >= 0;\nparam e{C} >= 0;\nparam s{C} >= 0;\nparam H > 0;\n"
          "param BigM := H + max{i in C} s[i] + max{i in N, j in N} d[i, j];\n";
    model +=
        "var b{i in N, j in N: i != j} binary;\n"
        "var u{i in C} >= q[i], <= Q;\n";
    if (windows) model += "var t{i in C} >= a[i], <= e[i];\n";
    model +=
        "minimize TotalDistance: sum{i in N, j in N: i != j} d[i, j] * b[i, j];\n"
        "s.t. Leave{i in C}: sum{j in N: j != i} b[i, j] = 1;\n"
        "s.t. Enter{j in C}: sum{i in N: i != j} b[i, j] = 1;\n"
        "s.t. Fleet: sum{j in C} b[depot, j] <= K;\n"
        "# valid inequality: enough vehicles for the total demand (tightens the relaxation)\n"
        "s.t. MinVehicles: sum{j in C} b[depot, j] >= ceil(sum{i in C} q[i] / Q);\n"
        "# load-based MTZ: loads grow along a route, which also rules out subtours\n"
        "s.t. Load{i in C, j in C: i != j}: u[j] >= u[i] + q[j] - Q * (1 - b[i, j]);\n";
    if (windows)
      model +=
          "s.t. FromDepot{j in C}: t[j] >= d[depot, j] - BigM * (1 - b[depot, j]);\n"
          "s.t. Travel{i in C, j in C: i != j}:\n"
          "  t[j] >= t[i] + s[i] + d[i, j] - BigM * (1 - b[i, j]);\n"
          "s.t. ReturnBy{i in C}: t[i] + s[i] + d[i, depot] <= H + BigM * (1 - b[i, depot]);\n";
    if (closed_a >= 0) {
      const auto& a = keys[static_cast<size_t>(closed_a)];
      const auto& b = keys[static_cast<size_t>(closed_b)];
      model += "s.t. ClosedRoad: b['" + a + "', '" + b + "'] + b['" + b + "', '" + a + "'] = 0;\n";
    }
    if (first_stop >= 0)
      model += "s.t. FirstStop: b[depot, '" + keys[static_cast<size_t>(first_stop)] + "'] = 1;\n";
    const auto ck = customer_keys();
    GmplData data;
    data.set("C", ck).raw("param depot := " + keys[0] + ";");
    data.param("d", keys, keys, dist).param("q", ck, tail(demand));
    data.param("Q", capacity).param("K", vehicles);
    if (windows) {
      data.param("a", ck, tail(open)).param("e", ck, tail(close)).param("s", ck, tail(service));
      data.param("H", horizon);
    }
    return compose_gmpl(model, "TotalDistance", data);
  }

  CheckResult check(const Solution& sol) const override {
    Checker c;
    const size_t n = nodes();
    std::vector<std::vector<double>> b(n, std::vector<double>(n, 0.0));
    double objective = 0;
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) {
        if (i == j) continue;
        b[i][j] = sol.value("b", {keys[i], keys[j]});
        c.binary(b[i][j], "b[" + keys[i] + "," + keys[j] + "]");
        objective += dist[i][j] * b[i][j];
      }
    for (size_t i = 1; i < n; ++i) {
      double out = 0, in = 0;
      for (size_t j = 0; j < n; ++j) {
        out += b[i][j];
        in += b[j][i];
      }
      c.eq(out, 1, "departures from " + keys[i]);
      c.eq(in, 1, "arrivals at " + keys[i]);
    }
    double routes = 0;
    for (size_t j = 1; j < n; ++j) routes += b[0][j];
    c.le(routes, vehicles, "vehicles used");
    if (c.ok()) {
      // Follow every route from the depot; each must close at the depot and the
      // routes together must visit every customer exactly once.
      auto successor = [&](size_t i) {
        for (size_t j = 0; j < n; ++j)
          if (j != i && b[i][j] > 0.5) return j;
        return i;
      };
      std::vector<int> visits(n, 0);
      for (size_t first = 1; first < n; ++first) {
        if (b[0][first] < 0.5) continue;
        double load = 0, clock = 0;
        size_t prev = 0, cur = first;
        for (size_t steps = 0; cur != 0 && steps < n; ++steps) {
          ++visits[cur];
          load += demand[cur];
          if (windows) {
            clock = std::max(clock + dist[prev][cur], open[cur]);
            c.le(clock, close[cur], "latest service start at " + keys[cur]);
            clock += service[cur];
          }
          prev = cur;
          cur = successor(cur);
        }
        c.le(load, capacity, "load of the route starting with " + keys[first]);
        if (windows)
          c.le(clock + dist[prev][0], horizon, "return of the route starting with " + keys[first]);
      }
      for (size_t i = 1; i < n; ++i)
        if (visits[i] != 1)
          c.fail(keys[i] + " is visited " + std::to_string(visits[i]) +
                 " times by routes from the depot (subtour)");
    }
    if (closed_a >= 0) {
      size_t a = static_cast<size_t>(closed_a), bb = static_cast<size_t>(closed_b);
      c.le(b[a][bb] + b[bb][a], 0, "closed road " + keys[a] + "-" + keys[bb]);
    }
    if (first_stop >= 0)
      c.eq(b[0][static_cast<size_t>(first_stop)], 1,
           "first stop " + keys[static_cast<size_t>(first_stop)]);
    return c.result(objective);
  }
};

class CvrpFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "cvrp"; }
  std::string_view title() const override {
    return "Capacitated vehicle routing (optionally with time windows)";
  }
  ProblemClass problem_class() const override { return ProblemClass::milp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<CvrpInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    inst->org = rng.pick(text::companies());
    const Difficulty diff = options.difficulty;
    // Time windows prune the search a lot; plain CVRP with load-based MTZ is slow
    // for CBC beyond six customers, so it stays smaller.
    inst->windows = rng.bernoulli(0.35);
    const size_t m =
        static_cast<size_t>(inst->windows ? size_for(rng, diff, {3, 4}, {5, 6}, {6, 7})
                                          : size_for(rng, diff, {3, 4}, {4, 5}, {5, 6}));
    const size_t n = m + 1;

    inst->names = {th.depot};
    for (const auto& nm : text::pick_distinct(rng, th.pool.empty() ? text::cities() : th.pool, m))
      inst->names.push_back(nm);
    inst->keys = text::symbols(inst->names);

    // Depot near the middle, customers around it; rounded Euclidean distances.
    std::vector<geometry::Point> pts = {
        {th.scale * rng.uniform(0.35, 0.65), th.scale * rng.uniform(0.35, 0.65)}};
    geometry::add_spread_points(rng, th.scale, n, pts);
    inst->dist = geometry::rounded_distances(pts);
    inst->demand.assign(n, 0.0);
    for (size_t i = 1; i < n; ++i) inst->demand[i] = rng.uniform_int(2, 12);

    // Planted routes: the customers in random order, cut into 2 or 3 non-empty routes.
    std::vector<size_t> order;
    for (size_t i = 1; i < n; ++i) order.push_back(i);
    rng.shuffle(order);
    const size_t route_count =
        std::min(m, static_cast<size_t>(diff == Difficulty::easy ? 2 : rng.uniform_int(2, 3)));
    std::vector<size_t> cuts = rng.sample(m - 1, route_count - 1);
    for (auto& c : cuts) c += 1;
    std::sort(cuts.begin(), cuts.end());
    cuts.push_back(m);
    std::vector<std::vector<size_t>> routes;
    size_t begin = 0;
    for (size_t cut : cuts) {
      routes.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(begin),
                          order.begin() + static_cast<std::ptrdiff_t>(cut));
      begin = cut;
    }
    double heaviest = 0, total = 0;
    for (const auto& r : routes) {
      double load = 0;
      for (size_t i : r) load += inst->demand[i];
      heaviest = std::max(heaviest, load);
      total += load;
    }
    // Capacity at or slightly above the heaviest planted route, but below the total
    // demand so that one vehicle cannot serve everyone.
    inst->capacity = std::min(round_up(heaviest * rng.uniform(1.0, 1.2), 5.0), total - 1);
    inst->capacity = std::max(inst->capacity, heaviest);
    inst->vehicles = static_cast<int>(routes.size()) + rng.uniform_int(0, 1);

    if (inst->windows) {
      inst->open.assign(n, 0.0);
      inst->close.assign(n, 0.0);
      inst->service.assign(n, 0.0);
      for (size_t i = 1; i < n; ++i) inst->service[i] = 5.0 * rng.uniform_int(1, 3);
      double latest_return = 0;
      for (const auto& r : routes) {
        double clock = 0;
        size_t prev = 0;
        for (size_t i : r) {
          clock += inst->dist[prev][i];
          inst->open[i] = std::max(0.0, 5.0 * std::floor((clock - rng.uniform(0, 20)) / 5.0));
          inst->close[i] = round_up(clock + rng.uniform(5, 30), 5.0);
          clock += inst->service[i];
          prev = i;
        }
        latest_return = std::max(latest_return, clock + inst->dist[prev][0]);
      }
      // The horizon also covers every window, so the big-M links stay valid.
      double horizon = latest_return + rng.uniform(0, 30);
      for (size_t i = 1; i < n; ++i)
        horizon = std::max(horizon, inst->close[i] + inst->service[i] + inst->dist[i][0]);
      inst->horizon = round_up(horizon, 10.0);
    }

    const double rate = options.side_constraint_rate;
    if (rng.bernoulli(rate)) {
      const auto& r = routes[rng.index(routes.size())];
      inst->first_stop = static_cast<int>(r.front());
    }
    if (m >= 4 && rng.bernoulli(rate)) {
      auto adjacent = [&](size_t a, size_t b) {
        for (const auto& r : routes)
          for (size_t k = 0; k + 1 < r.size(); ++k)
            if ((r[k] == a && r[k + 1] == b) || (r[k] == b && r[k + 1] == a)) return true;
        return false;
      };
      // Customers are nodes 1..m.
      const auto apart = draw_distinct_pair(
          rng, m, 50, [&](size_t a, size_t b) { return !adjacent(a + 1, b + 1); });
      if (apart) {
        const auto [a, b] = in_order(*apart);
        inst->closed_a = static_cast<int>(1 + a);
        inst->closed_b = static_cast<int>(1 + b);
      }
    }
    return inst;
  }
};

}  // namespace

const Family& cvrp_family() {
  static const CvrpFamily family;
  return family;
}

}  // namespace trex::orlib
