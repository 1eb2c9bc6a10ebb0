// p-median (minimise demand-weighted distance) or, in some instances, p-center
// (minimise the largest distance, epigraph variable): open exactly p of the
// candidate sites and assign every demand point to an open site. Optional
// conditions: two sites that cannot both be opened, a site that must be opened,
// a maximum service distance (p-median only). MILP.
//
// Generator: places points on a map, turns coordinates into integer distances
// (rounded Euclidean or Manhattan), plants a random set of p open sites and
// reads the side conditions off that plan.
#include <algorithm>
#include <cmath>

#include "trex/or/families/alg_writer.hpp"
#include "trex/or/families/draws.hpp"
#include "trex/or/families/family_list.hpp"
#include "trex/or/families/gmpl_writer.hpp"
#include "trex/or/families/text.hpp"
#include "trex/or/families/themed.hpp"

namespace trex::orlib {
namespace {

struct Theme {
  std::string intro;                    // {org}, {p}, {site}s, {point}s are replaced
  std::string site;                     // "clinic"
  std::string point;                    // "village"
  std::string weight;                   // "residents"
  std::string dist_unit;                // "km"
  std::string weighted_unit;            // unit of weight x distance, "person-km"
  std::vector<std::string> site_pool;   // empty: city names
  std::vector<std::string> point_pool;  // empty: city names
  std::vector<std::string> org_pool;    // empty: company names
  std::pair<int, int> weights;          // range
  int weight_step;
  bool manhattan;         // city-block distances (street grid) else straight-line
  bool weights_in_table;  // weights as a column of the distance table (else prose)
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"{org} plans to open {p} rural health clinics. Each candidate location below is a small "
       "town, and every village will be served by exactly one open clinic.",
       "clinic",
       "village",
       "residents",
       "km",
       "resident-km",
       {},
       {},
       {"The provincial health department", "A rural health charity", "The regional health board"},
       {200, 3000},
       50,
       false,
       true},
      {"{org} is placing {p} fire stations in a growing suburb. Each neighbourhood will be "
       "covered by exactly one open station.",
       "station",
       "neighbourhood",
       "households",
       "blocks",
       "household-blocks",
       {"Elm Street lot", "Library car park", "Old depot", "Church lane site", "Mall annex",
        "Water tower site", "Park corner", "School field", "Canal wharf", "Hospital plot",
        "Market square", "Rail yard"},
       {"Northgate", "Southfield", "Eastbrook", "Westview", "Hillcrest", "Lakeside", "Oak Hollow",
        "Pine Ridge", "Riverbend", "Meadowlands", "Stonebridge", "Kingsway", "Ashford", "Brookside",
        "Cedar Park", "Fairmont"},
       {"The city council", "The county fire authority", "The municipal emergency service"},
       {20, 400},
       10,
       true,
       false},
      {"{org} wants {p} parcel-locker hubs for its home-delivery service. Each delivery zone "
       "will be served from exactly one hub.",
       "hub",
       "zone",
       "orders per week",
       "km",
       "order-km",
       {},
       {},
       {},
       {30, 600},
       10,
       false,
       true},
      {"To cut travel for its field engineers, {org} will run {p} repair depots. Every "
       "telecom tower is maintained from exactly one open depot.",
       "depot",
       "tower",
       "expected call-outs per year",
       "km",
       "call-out-km",
       {},
       {"Tower A1", "Tower B2", "Tower C3", "Tower D4", "Tower E5", "Tower F6", "Tower G7",
        "Tower H8", "Tower J9", "Tower K10", "Tower L11", "Tower M12", "Tower N13", "Tower P14",
        "Tower Q15", "Tower R16"},
       {"Skyline Telecom", "NorthNet Mobile", "Vertex Wireless", "Beacon Networks"},
       {2, 40},
       1,
       false,
       false},
      {"{org} is choosing where to put {p} school-bus parking yards; each school is assigned to "
       "exactly one open yard, from which its buses start.",
       "yard",
       "school",
       "buses",
       "miles",
       "bus-miles",
       {},
       {"Lincoln Elementary", "Jefferson Middle", "Roosevelt High", "Oak Park Elementary",
        "Westside Middle", "Central High", "Maple Elementary", "Hillview Middle",
        "Riverside Elementary", "Eastwood High", "Parkside Elementary", "Northgate Middle",
        "Lakeshore Elementary", "Southfield High", "Cedar Elementary", "Valley Middle"},
       {"The Maple County school district", "The Riverton unified school district",
        "The Lakeside school board"},
       {1, 12},
       1,
       true,
       true},
      {"{org} will set up {p} regional spare-parts warehouses for its machines installed at "
       "customer plants. Each plant is supplied by exactly one open warehouse.",
       "warehouse",
       "plant",
       "deliveries per month",
       "km",
       "delivery-km",
       {},
       {},
       {},
       {2, 30},
       1,
       false,
       false},
  };
  return t;
}

class PMedianInstance : public ThemedInstance<themes> {
 public:
  std::vector<std::string> site_names, site_keys;
  std::vector<std::string> point_names, point_keys;
  std::vector<double> weight;             // w_i (p-median only)
  std::vector<std::vector<double>> dist;  // d_{i,j}
  int p = 0;
  bool center = false;  // p-center objective
  std::vector<std::pair<int, int>> exclusive;
  int forced = -1;      // site that must be opened
  double max_dist = 0;  // 0 = no limit

  size_t m() const { return site_keys.size(); }
  size_t n() const { return point_keys.size(); }

  json size() const override {
    size_t side = exclusive.size() + (forced >= 0 ? 1 : 0) + (max_dist > 0 ? 1 : 0);
    return {{"demand_points", n()}, {"sites", m()}, {"p", p}, {"side_constraints", side}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v = {center ? "p_center" : "p_median"};
    if (!exclusive.empty()) v.push_back("mutual_exclusion");
    if (forced >= 0) v.push_back("forced_open");
    if (max_dist > 0) v.push_back("max_distance");
    return v;
  }

  std::string nl() const override {
    const Theme& th = theme();
    std::string out = text::fill(th.intro, {{"{org}", org}, {"{p}", std::to_string(p)}});
    out += " There are " + std::to_string(m()) + " candidate locations for a " + th.site + " (" +
           text::english_list(site_names) + ") and " + std::to_string(n()) + " " + th.point +
           "s to serve. ";
    out += std::string(th.manhattan ? "Travel follows the street grid, and the table gives the "
                                      "travel distance"
                                    : "The table gives the road distance") +
           " in " + th.dist_unit + " from each " + th.point + " (rows) to each candidate " +
           th.site + " (columns)";
    const bool weight_column = !center && th.weights_in_table;
    out += weight_column
               ? "; the last column is the number of " + th.weight + " of the " + th.point + ".\n\n"
               : ".\n\n";
    std::vector<std::string> header = {text::capitalize(th.point)};
    for (const auto& s : site_names) header.push_back(s);
    if (weight_column) header.push_back(text::capitalize(th.weight));
    std::vector<std::vector<std::string>> rows;
    for (size_t i = 0; i < n(); ++i) {
      std::vector<std::string> r = {point_names[i]};
      for (size_t j = 0; j < m(); ++j) r.push_back(text::num(dist[i][j]));
      if (weight_column) r.push_back(text::num(weight[i]));
      rows.push_back(r);
    }
    out += text::markdown_table(header, rows) + "\n";
    if (!center && !weight_column) {
      std::vector<std::string> parts;
      for (size_t i = 0; i < n(); ++i) parts.push_back(point_names[i] + " " + text::num(weight[i]));
      out += "The " + th.weight + " of the " + th.point + "s are: " + text::english_list(parts) +
             ".\n\n";
    }
    out += "Exactly " + std::to_string(p) + " of the candidate locations must be used. ";
    for (auto [a, b] : exclusive)
      out += site_names[a] + " and " + site_names[b] +
             " are too close to each other, so they "
             "cannot both be chosen. ";
    if (forced >= 0)
      out += "A " + th.site + " at " + site_names[static_cast<size_t>(forced)] +
             " has already been promised and must be among the chosen ones. ";
    if (max_dist > 0)
      out += "No " + th.point + " may be assigned to a " + th.site + " more than " +
             text::num(max_dist) + " " + th.dist_unit + " away. ";
    if (center)
      out += "The aim is fairness: choose the " + th.site +
             "s and the assignment so that the "
             "largest distance between any " +
             th.point + " and its assigned " + th.site +
             " is as small as possible. What is that smallest possible worst-case distance?";
    else
      out += "Choose the " + th.site + "s and assign every " + th.point +
             " to one of them so "
             "that the sum over all " +
             th.point + "s of (" + th.weight +
             " x distance to the "
             "assigned " +
             th.site + "), measured in " + th.weighted_unit +
             ", is as small as possible. What is the minimum total?";
    return out;
  }

  std::string alg() const override {
    const Theme& th = theme();
    AlgebraicFormulation f(center ? "p-center" : "p-median");
    f.set("$I = " + latex_set(point_keys) + "$", th.point + "s (demand points)");
    f.set("$J = " + latex_set(site_keys) + "$", "candidate " + th.site + " locations");
    f.parameter("$p$", "number of " + th.site + "s to open", std::to_string(p));
    f.parameter("$d_{i,j}$", "distance from $i$ to $j$ (" + th.dist_unit + "), rows $i$",
                latex_matrix(dist));
    if (!center) f.parameter("$w_i$", th.weight + " of $i$", latex_vector(weight));
    if (max_dist > 0)
      f.parameter("$R$", "maximum assignment distance (" + th.dist_unit + ")", text::num(max_dist));
    f.variable("$y_j \\in \\{0,1\\}$", "1 if a " + th.site + " is opened at $j$");
    if (center)
      f.variable("$x_{i,j} \\in \\{0,1\\}$", "1 if $i$ is assigned to $j$");
    else
      f.variable("$x_{i,j} \\in [0,1]$",
                 "share of $i$ assigned to $j$ (for fixed $y$ an optimal solution assigns each $i$ "
                 "wholly to its nearest open site)");
    if (center) {
      f.variable("$D \\ge 0$", "largest assignment distance");
      f.objective("\\min D", "Minimise the largest distance between a " + th.point +
                                 " and its assigned " + th.site);
    } else {
      f.objective("\\min \\sum_{i \\in I} \\sum_{j \\in J} w_i d_{i,j} x_{i,j}",
                  "Minimise the total weighted distance (" + th.weighted_unit + ")");
    }
    f.constraint("open exactly p", "\\sum_{j \\in J} y_j = p");
    f.constraint("assignment", "\\sum_{j \\in J} x_{i,j} = 1 \\quad \\forall i \\in I");
    f.constraint("only open sites", "x_{i,j} \\le y_j \\quad \\forall i \\in I, j \\in J");
    if (center)
      f.constraint("epigraph", "\\sum_{j \\in J} d_{i,j} x_{i,j} \\le D \\quad \\forall i \\in I");
    for (auto [a, b] : exclusive)
      f.constraint("exclusion", "y_{" + latex_name(site_keys[a]) + "} + y_{" +
                                    latex_name(site_keys[b]) + "} \\le 1");
    if (forced >= 0)
      f.constraint("forced site",
                   "y_{" + latex_name(site_keys[static_cast<size_t>(forced)]) + "} = 1");
    if (max_dist > 0)
      f.constraint("maximum distance",
                   "x_{i,j} = 0 \\quad \\forall i \\in I, j \\in J: d_{i,j} > R");
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model = "set I;\nset J;\nparam p integer > 0;\nparam d{I, J} >= 0;\n";
    if (!center) model += "param w{I} >= 0;\n";
    if (max_dist > 0) model += "param R >= 0;\n";
    model += center ? "var y{J} binary;\nvar x{I, J} binary;\n"
                    : "var y{J} binary;\nvar x{I, J} >= 0, <= 1;\n";
    if (center)
      model += "var D >= 0;\nminimize MaxDistance: D;\n";
    else
      model += "minimize WeightedDistance: sum{i in I, j in J} w[i] * d[i, j] * x[i, j];\n";
    model +=
        "s.t. OpenP: sum{j in J} y[j] = p;\n"
        "s.t. Assign{i in I}: sum{j in J} x[i, j] = 1;\n"
        "s.t. OnlyOpen{i in I, j in J}: x[i, j] <= y[j];\n";
    if (center) model += "s.t. Epigraph{i in I}: sum{j in J} d[i, j] * x[i, j] <= D;\n";
    for (size_t k = 0; k < exclusive.size(); ++k)
      model += "s.t. Exclusive" + std::to_string(k + 1) + ": y['" + site_keys[exclusive[k].first] +
               "'] + y['" + site_keys[exclusive[k].second] + "'] <= 1;\n";
    if (forced >= 0)
      model += "s.t. Forced: y['" + site_keys[static_cast<size_t>(forced)] + "'] = 1;\n";
    if (max_dist > 0) model += "s.t. MaxDistance{i in I, j in J: d[i, j] > R}: x[i, j] = 0;\n";
    GmplData data;
    data.set("I", point_keys).set("J", site_keys).param("p", p);
    data.param("d", point_keys, site_keys, dist);
    if (!center) data.param("w", point_keys, weight);
    if (max_dist > 0) data.param("R", max_dist);
    return compose_gmpl(model, center ? "MaxDistance" : "WeightedDistance", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    std::vector<double> y(m());
    double opened = 0;
    for (size_t j = 0; j < m(); ++j) {
      y[j] = s.value("y", {site_keys[j]});
      c.binary(y[j], "y[" + site_keys[j] + "]");
      opened += y[j];
    }
    c.eq(opened, p, "number of open sites");
    double total = 0, worst = 0;
    for (size_t i = 0; i < n(); ++i) {
      double share = 0, travel = 0;
      for (size_t j = 0; j < m(); ++j) {
        const std::string what = "x[" + point_keys[i] + "," + site_keys[j] + "]";
        double x = s.value("x", {point_keys[i], site_keys[j]});
        c.ge(x, 0, what + " nonnegative");
        if (center) c.binary(x, what);
        c.le(x, y[j], what + " assigned to a closed site");
        if (max_dist > 0 && dist[i][j] > max_dist)
          c.le(x, 0, what + " beyond the maximum distance");
        share += x;
        travel += dist[i][j] * x;
      }
      c.eq(share, 1, "assignment of " + point_keys[i]);
      worst = std::max(worst, travel);
      if (!center) total += weight[i] * travel;
    }
    for (auto [a, b] : exclusive)
      c.le(y[a] + y[b], 1, "exclusion " + site_keys[a] + "/" + site_keys[b]);
    if (forced >= 0) c.eq(y[static_cast<size_t>(forced)], 1, "forced site");
    if (center) c.ge(s.value("D"), worst, "D bounds every assignment distance");
    return c.result(center ? worst : total);
  }
};

class PMedianFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "p_median"; }
  std::string_view title() const override { return "p-median / p-center location"; }
  ProblemClass problem_class() const override { return ProblemClass::milp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<PMedianInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    const int m = size_for(rng, options.difficulty, {4, 5}, {5, 7}, {7, 9});
    const int n = size_for(rng, options.difficulty, {5, 7}, {7, 10}, {10, 14});
    inst->p = size_for(rng, options.difficulty, {2, 2}, {2, 3}, {2, std::min(4, m - 2)});
    inst->center = rng.bernoulli(0.25);
    inst->org = rng.pick(th.org_pool.empty() ? text::companies() : th.org_pool);
    if (th.site_pool.empty() && th.point_pool.empty()) {
      auto cities = text::pick_distinct(rng, text::cities(), static_cast<size_t>(m + n));
      inst->site_names.assign(cities.begin(), cities.begin() + m);
      inst->point_names.assign(cities.begin() + m, cities.end());
    } else {
      const auto& sites = th.site_pool.empty() ? text::cities() : th.site_pool;
      const auto& points = th.point_pool.empty() ? text::cities() : th.point_pool;
      inst->site_names = text::pick_distinct(rng, sites, static_cast<size_t>(m));
      inst->point_names = text::pick_distinct(rng, points, static_cast<size_t>(n));
    }
    inst->site_keys = text::symbols(inst->site_names);
    inst->point_keys = text::symbols(inst->point_names);

    // Integer coordinates on a 40 x 40 map; distances at least 1.
    auto point = [&] {
      return std::pair<int, int>{rng.uniform_int(0, 40), rng.uniform_int(0, 40)};
    };
    std::vector<std::pair<int, int>> site_at, point_at;
    for (int j = 0; j < m; ++j) site_at.push_back(point());
    for (int i = 0; i < n; ++i) point_at.push_back(point());
    for (int i = 0; i < n; ++i) {
      std::vector<double> row;
      const auto [px, py] = point_at[static_cast<size_t>(i)];
      for (int j = 0; j < m; ++j) {
        const auto [sx, sy] = site_at[static_cast<size_t>(j)];
        double dx = std::abs(sx - px), dy = std::abs(sy - py);
        double d = th.manhattan ? dx + dy : std::round(std::hypot(dx, dy));
        row.push_back(std::max(1.0, d));
      }
      inst->dist.push_back(row);
      int steps = (th.weights.second - th.weights.first) / th.weight_step;
      inst->weight.push_back(th.weights.first + th.weight_step * rng.uniform_int(0, steps));
    }
    if (inst->center) inst->weight.clear();

    // Planted plan: a random set of p sites, each point served by its nearest one.
    const auto open_idx = rng.sample(static_cast<size_t>(m), static_cast<size_t>(inst->p));
    std::vector<bool> open(static_cast<size_t>(m), false);
    for (size_t j : open_idx) open[j] = true;
    if (rng.bernoulli(options.side_constraint_rate)) {
      const auto pair = draw_distinct_pair(rng, m, 50, [&](int a, int b) {
        return !(open[static_cast<size_t>(a)] && open[static_cast<size_t>(b)]);
      });
      if (pair) inst->exclusive.push_back(in_order(*pair));
    }
    if (rng.bernoulli(options.side_constraint_rate))
      inst->forced = static_cast<int>(rng.pick(open_idx));
    if (!inst->center && rng.bernoulli(options.side_constraint_rate)) {
      double radius = 0;
      for (const auto& row : inst->dist) {
        double nearest = row[open_idx[0]];
        for (size_t j : open_idx) nearest = std::min(nearest, row[j]);
        radius = std::max(radius, nearest);
      }
      inst->max_dist = radius + rng.uniform_int(0, 3);
    }
    return inst;
  }
};

}  // namespace

const Family& p_median_family() {
  static const PMedianFamily family;
  return family;
}

}  // namespace trex::orlib
