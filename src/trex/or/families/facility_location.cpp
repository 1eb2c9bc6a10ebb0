// Capacitated facility location: open sites (fixed cost, capacity) and ship
// divisible amounts to customers at per-unit costs, with optional limits on the
// number of open sites, mutually exclusive sites and a minimum throughput for
// every open site. MILP.
//
// Generator: plants a set S of open sites whose capacities add up to at least
// 1.2 x total demand (every single site is too small to serve everybody), and a
// proportional split of every customer's demand over S; side constraints are
// read off that plan.
#include <algorithm>
#include <cmath>

#include "trex/core/strings.hpp"
#include "trex/or/families/alg_writer.hpp"
#include "trex/or/families/draws.hpp"
#include "trex/or/families/family_list.hpp"
#include "trex/or/families/gmpl_writer.hpp"
#include "trex/or/families/text.hpp"
#include "trex/or/families/themed.hpp"

namespace trex::orlib {
namespace {

struct Theme {
  std::string intro;                       // {org} is replaced by an organisation name
  std::string site;                        // "warehouse"
  std::string customer;                    // "store"
  std::string unit;                        // "pallets"
  std::string unit_one;                    // "pallet"
  std::string period;                      // "per week"
  std::vector<std::string> customer_pool;  // empty: city names
  std::vector<std::string> org_pool;       // empty: company names
  double cost_rate;            // transport cost per unit per 10 distance units; < 1 gives cents
  std::pair<int, int> demand;  // demand range
  int demand_step;
  bool tables;  // Markdown tables (else prose)
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"{org} is redesigning its retail distribution network. It can rent warehouses in several "
       "candidate cities and must supply its stores from the warehouses it opens.",
       "warehouse",
       "store",
       "pallets",
       "pallet",
       "per week",
       {},
       {},
       1.0,
       {20, 90},
       5,
       true},
      {"{org} is deciding where to operate blood banks that supply the hospitals in its area.",
       "blood bank",
       "hospital",
       "units of blood",
       "unit of blood",
       "per week",
       {"St Mary",        "General",  "Children's",   "Riverside",  "University",
        "Memorial",       "Mercy",    "Sacred Heart", "Northside",  "Lakeview",
        "Good Samaritan", "Valley",   "Hillcrest",    "St Luke",    "Royal",
        "Community",      "Veterans", "Harbor",       "Pine Grove", "Westgate"},
       {"The regional blood service", "The county health board", "The Red Cross chapter",
        "The hospital trust"},
       0.5,
       {30, 150},
       10,
       false},
      {"{org} wants to serve its online customers from a few data centres. Each candidate data "
       "centre has a daily fixed cost and a limited serving capacity, and each customer region "
       "generates a steady load.",
       "data centre",
       "region",
       "million requests",
       "million requests",
       "per day",
       {"Pacific Northwest", "California", "Mountain West", "Texas", "Great Plains", "Midwest",
        "Great Lakes", "Southeast", "Florida", "Mid-Atlantic", "New England", "New York", "Ontario",
        "Quebec", "Mexico North", "Mexico South", "Caribbean", "Alaska"},
       {},
       0.2,
       {10, 60},
       2,
       true},
      {"{org} delivers kegs of beer to bars and is choosing which delivery depots to run next "
       "year.",
       "depot",
       "bar",
       "kegs",
       "keg",
       "per week",
       {"The Anchor",  "Red Lion",     "Crown and Kettle", "Blue Door",        "The Ferryman",
        "Old Mill",    "Golden Hind",  "Fox and Hounds",   "Hop House",        "Green Man",
        "The Lantern", "Brass Monkey", "Black Swan",       "Rose and Thistle", "The Granary",
        "Kings Head",  "Wheatsheaf",   "The Railway",      "Silver Birch",     "Copper Kettle"},
       {"Riverbend Brewing", "The Hop Yard brewery", "Old Town Ales", "Kettle Creek Brewery"},
       1.5,
       {10, 40},
       2,
       false},
      {"{org} must store this season's grain harvest of its member farms. It can rent storage "
       "silos at several locations, and every farm's harvest has to be trucked to open silos.",
       "silo",
       "farm",
       "tonnes",
       "tonne",
       "this season",
       {"Hillside Farm", "Oak Farm",    "Meadowbrook",  "Sunny Acres", "Willow Farm",
        "Stony Creek",   "Maple Farm",  "Elm Ridge",    "Clearwater",  "Brookside",
        "Fox Hollow",    "Cedar Farm",  "Golden Field", "Pine Hill",   "Mill Farm",
        "Red Barn",      "High Meadow", "Long Acre",    "Ashgrove",    "Birch Farm"},
       {"The Prairie Grain Cooperative", "The Valley Farmers Union", "Golden Plains Co-op",
        "The Northern Grain Pool"},
       0.6,
       {40, 200},
       10,
       true},
      {"{org} wants to prepare school lunches in a few central kitchens and deliver them to its "
       "schools.",
       "kitchen",
       "school",
       "meals",
       "meal",
       "per day",
       {"Lincoln Elementary", "Jefferson Middle", "Roosevelt High", "Oak Park Elementary",
        "Westside Middle", "Central High", "Maple Elementary", "Hillview Middle",
        "Riverside Elementary", "Eastwood High", "Parkside Elementary", "Northgate Middle",
        "Lakeshore Elementary", "Southfield High", "Cedar Elementary", "Valley Middle",
        "Brookfield Elementary", "Summit High"},
       {"The Maple County school district", "The Riverton unified school district",
        "The Lakeside school board", "The city education department"},
       0.1,
       {100, 400},
       10,
       false},
  };
  return t;
}

class FacilityLocationInstance : public ThemedInstance<themes> {
 public:
  std::vector<std::string> site_names, site_keys;
  std::vector<std::string> cust_names, cust_keys;
  std::vector<double> fixed;              // f_j
  std::vector<double> capacity;           // Q_j
  std::vector<double> demand;             // d_i
  std::vector<std::vector<double>> cost;  // c_{i,j}
  int max_open = 0;                       // 0 = no limit
  std::vector<std::pair<int, int>> exclusive;
  double min_throughput = 0;  // 0 = none

  size_t m() const { return site_keys.size(); }
  size_t n() const { return cust_keys.size(); }

  json size() const override {
    size_t side = exclusive.size() + (max_open > 0 ? 1 : 0) + (min_throughput > 0 ? 1 : 0);
    return {{"sites", m()}, {"customers", n()}, {"side_constraints", side}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v;
    if (max_open > 0) v.push_back("max_open_sites");
    if (!exclusive.empty()) v.push_back("mutual_exclusion");
    if (min_throughput > 0) v.push_back("min_throughput");
    return v;
  }

  std::string qty(double v) const { return text::num(v) + " " + theme().unit; }

  std::string nl() const override {
    const Theme& th = theme();
    std::string out = replace_all(th.intro, "{org}", org) + "\n\n";
    if (th.tables) {
      std::vector<std::vector<std::string>> rows;
      for (size_t j = 0; j < m(); ++j)
        rows.push_back({site_names[j], text::money(fixed[j]), text::num(capacity[j])});
      out += "Candidate " + th.site + "s (fixed cost " + th.period + " if opened, capacity in " +
             th.unit + " " + th.period + "):\n\n";
      out += text::markdown_table(
          {text::capitalize(th.site), "Fixed cost", "Capacity (" + th.unit + ")"}, rows);
      rows.clear();
      for (size_t i = 0; i < n(); ++i) rows.push_back({cust_names[i], text::num(demand[i])});
      out += "\nDemand of each " + th.customer + " (" + th.unit + " " + th.period + "):\n\n";
      out +=
          text::markdown_table({text::capitalize(th.customer), "Demand (" + th.unit + ")"}, rows);
      rows.clear();
      std::vector<std::string> header = {text::capitalize(th.customer) + " / " + th.site};
      for (const auto& s : site_names) header.push_back(s);
      for (size_t i = 0; i < n(); ++i) {
        std::vector<std::string> r = {cust_names[i]};
        for (size_t j = 0; j < m(); ++j) r.push_back(text::money(cost[i][j]));
        rows.push_back(r);
      }
      out += "\nCost of delivering one " + th.unit_one + " from each " + th.site + " to each " +
             th.customer + ":\n\n";
      out += text::markdown_table(header, rows);
    } else {
      for (size_t j = 0; j < m(); ++j)
        out += "- Operating a " + th.site + " in " + site_names[j] + " costs " +
               text::money(fixed[j]) + " " + th.period + "; it can handle up to " +
               qty(capacity[j]) + " " + th.period + ".\n";
      out += "\nThe " + th.customer + "s need ";
      std::vector<std::string> needs;
      for (size_t i = 0; i < n(); ++i) needs.push_back(qty(demand[i]) + " (" + cust_names[i] + ")");
      out += text::english_list(needs) + " " + th.period + ".\n\n";
      out += "Delivery costs, in dollars per " + th.unit_one + ", are:\n";
      for (size_t i = 0; i < n(); ++i) {
        std::vector<std::string> parts;
        for (size_t j = 0; j < m(); ++j)
          parts.push_back(text::num(cost[i][j]) + " from " + site_names[j]);
        out += "- to " + cust_names[i] + ": " + text::english_list(parts) + "\n";
      }
    }
    out += "\nA " + th.customer + "'s demand may be split between several open " + th.site +
           "s, and delivered quantities do not have to be whole numbers. Nothing can be "
           "delivered from a " +
           th.site + " that is not opened, and the total delivered from a " + th.site +
           " may not exceed its capacity. ";
    if (max_open > 0)
      out += "At most " + std::to_string(max_open) + " " + th.site + "s may be opened. ";
    for (auto [a, b] : exclusive)
      out += "The " + th.site + "s in " + site_names[a] + " and " + site_names[b] +
             " cannot both be opened. ";
    if (min_throughput > 0)
      out += "Any " + th.site + " that is opened must deliver at least " + qty(min_throughput) +
             " " + th.period + " in total. ";
    out += "Which " + th.site + "s should be opened, and how should the " + th.customer +
           "s be supplied, to meet all demand at the minimum total (fixed plus delivery) cost " +
           th.period + "?";
    return out;
  }

  std::string alg() const override {
    const Theme& th = theme();
    AlgebraicFormulation f("Capacitated facility location");
    f.set("$I = " + latex_set(cust_keys) + "$", th.customer + "s");
    f.set("$J = " + latex_set(site_keys) + "$", "candidate " + th.site + "s");
    f.parameter("$f_j$", "fixed cost of opening $j$ (dollars)", latex_vector(fixed));
    f.parameter("$Q_j$", "capacity of $j$ (" + th.unit + ")", latex_vector(capacity));
    f.parameter("$d_i$", "demand of $i$ (" + th.unit + ")", latex_vector(demand));
    f.parameter("$c_{i,j}$", "cost per unit delivered from $j$ to $i$ (dollars), rows $i$",
                latex_matrix(cost));
    if (max_open > 0)
      f.parameter("$K$", "maximum number of open " + th.site + "s", std::to_string(max_open));
    if (min_throughput > 0)
      f.parameter("$L$", "minimum throughput of an open " + th.site + " (" + th.unit + ")",
                  text::num(min_throughput));
    f.variable("$x_{i,j} \\ge 0$", "amount delivered from $j$ to $i$ (" + th.unit + ")");
    f.variable("$y_j \\in \\{0,1\\}$", "1 if $j$ is opened");
    f.objective(
        "\\min \\sum_{j \\in J} f_j y_j + \\sum_{i \\in I} \\sum_{j \\in J} c_{i,j} x_{i,j}",
        "Minimise fixed plus delivery cost");
    f.constraint("demand", "\\sum_{j \\in J} x_{i,j} = d_i \\quad \\forall i \\in I");
    f.constraint("capacity", "\\sum_{i \\in I} x_{i,j} \\le Q_j y_j \\quad \\forall j \\in J");
    f.constraint("link (strengthening, big-M $= d_i$)",
                 "x_{i,j} \\le d_i y_j \\quad \\forall i \\in I, j \\in J");
    if (max_open > 0) f.constraint("open limit", "\\sum_{j \\in J} y_j \\le K");
    for (auto [a, b] : exclusive)
      f.constraint("exclusion", "y_{" + latex_name(site_keys[a]) + "} + y_{" +
                                    latex_name(site_keys[b]) + "} \\le 1");
    if (min_throughput > 0)
      f.constraint("minimum throughput",
                   "\\sum_{i \\in I} x_{i,j} \\ge L y_j \\quad \\forall j \\in J");
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model =
        "set I;\nset J;\nparam f{J} >= 0;\nparam Q{J} >= 0;\nparam d{I} >= 0;\n"
        "param c{I, J} >= 0;\n";
    if (max_open > 0) model += "param K integer > 0;\n";
    if (min_throughput > 0) model += "param L >= 0;\n";
    model +=
        "var x{I, J} >= 0;\nvar y{J} binary;\n"
        "minimize TotalCost: sum{j in J} f[j] * y[j] + sum{i in I, j in J} c[i, j] * x[i, j];\n"
        "s.t. Demand{i in I}: sum{j in J} x[i, j] = d[i];\n"
        "s.t. Capacity{j in J}: sum{i in I} x[i, j] <= Q[j] * y[j];\n"
        "s.t. Link{i in I, j in J}: x[i, j] <= d[i] * y[j];\n";
    if (max_open > 0) model += "s.t. OpenLimit: sum{j in J} y[j] <= K;\n";
    for (size_t k = 0; k < exclusive.size(); ++k)
      model += "s.t. Exclusive" + std::to_string(k + 1) + ": y['" + site_keys[exclusive[k].first] +
               "'] + y['" + site_keys[exclusive[k].second] + "'] <= 1;\n";
    if (min_throughput > 0)
      model += "s.t. MinThroughput{j in J}: sum{i in I} x[i, j] >= L * y[j];\n";
    GmplData data;
    data.set("I", cust_keys).set("J", site_keys);
    data.param("f", site_keys, fixed).param("Q", site_keys, capacity).param("d", cust_keys, demand);
    data.param("c", cust_keys, site_keys, cost);
    if (max_open > 0) data.param("K", max_open);
    if (min_throughput > 0) data.param("L", min_throughput);
    return compose_gmpl(model, "TotalCost", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    std::vector<double> y(m()), load(m());
    double objective = 0;
    for (size_t j = 0; j < m(); ++j) {
      y[j] = s.value("y", {site_keys[j]});
      c.binary(y[j], "y[" + site_keys[j] + "]");
      objective += fixed[j] * y[j];
    }
    for (size_t i = 0; i < n(); ++i) {
      double served = 0;
      for (size_t j = 0; j < m(); ++j) {
        double x = s.value("x", {cust_keys[i], site_keys[j]});
        c.ge(x, 0, "x[" + cust_keys[i] + "," + site_keys[j] + "] nonnegative");
        served += x;
        load[j] += x;
        objective += cost[i][j] * x;
      }
      c.eq(served, demand[i], "demand of " + cust_keys[i]);
    }
    int open = 0;
    for (size_t j = 0; j < m(); ++j) {
      c.le(load[j], capacity[j] * y[j], "capacity of " + site_keys[j]);
      if (min_throughput > 0) c.ge(load[j], min_throughput * y[j], "throughput of " + site_keys[j]);
      if (y[j] > 0.5) ++open;
    }
    if (max_open > 0) c.le(open, max_open, "number of open sites");
    for (auto [a, b] : exclusive)
      c.le(y[a] + y[b], 1, "exclusion " + site_keys[a] + "/" + site_keys[b]);
    return c.result(objective);
  }
};

class FacilityLocationFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "facility_location"; }
  std::string_view title() const override { return "Capacitated facility location"; }
  ProblemClass problem_class() const override { return ProblemClass::milp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<FacilityLocationInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    // Kept small: CBC spends most of its time in root cuts on these models.
    const int m = size_for(rng, options.difficulty, {3, 3}, {4, 5}, {5, 6});
    const int n = size_for(rng, options.difficulty, {4, 6}, {5, 8}, {7, 10});
    const int planted_open = size_for(rng, options.difficulty, {2, 2}, {2, 3}, {2, 3});
    inst->org = rng.pick(th.org_pool.empty() ? text::companies() : th.org_pool);
    if (th.customer_pool.empty()) {
      auto cities = text::pick_distinct(rng, text::cities(), static_cast<size_t>(m + n));
      inst->site_names.assign(cities.begin(), cities.begin() + m);
      inst->cust_names.assign(cities.begin() + m, cities.end());
    } else {
      inst->site_names = text::pick_distinct(rng, text::cities(), static_cast<size_t>(m));
      inst->cust_names = text::pick_distinct(rng, th.customer_pool, static_cast<size_t>(n));
    }
    inst->site_keys = text::symbols(inst->site_names);
    inst->cust_keys = text::symbols(inst->cust_names);

    // Locations on a 100 x 100 map; unit costs grow with distance.
    auto point = [&] {
      return std::pair<double, double>{rng.uniform(0, 100), rng.uniform(0, 100)};
    };
    std::vector<std::pair<double, double>> site_at, cust_at;
    for (int j = 0; j < m; ++j) site_at.push_back(point());
    for (int i = 0; i < n; ++i) cust_at.push_back(point());
    double total = 0;
    for (int i = 0; i < n; ++i) {
      int steps = (th.demand.second - th.demand.first) / th.demand_step;
      double d = th.demand.first + th.demand_step * rng.uniform_int(0, steps);
      inst->demand.push_back(d);
      total += d;
      std::vector<double> row;
      for (int j = 0; j < m; ++j) {
        auto [sx, sy] = site_at[static_cast<size_t>(j)];
        auto [cx, cy] = cust_at[static_cast<size_t>(i)];
        double dist = std::hypot(sx - cx, sy - cy);
        double unit = (1 + dist / 10) * th.cost_rate;
        row.push_back(th.cost_rate >= 1 ? std::round(unit) : std::round(unit * 20) / 20);
      }
      inst->cost.push_back(row);
    }
    // Fixed costs comparable to serving a share of the demand.
    const double typical_transport = total * th.cost_rate * 5;
    for (int j = 0; j < m; ++j) {
      double f = typical_transport * rng.uniform(0.15, 0.45);
      const double grain = f >= 1000 ? 50 : 10;
      inst->fixed.push_back(std::max(grain, std::round(f / grain) * grain));
    }
    // Planted open set: capacities of S add up to >= 1.2 x total demand.
    const auto open_idx = rng.sample(static_cast<size_t>(m), static_cast<size_t>(planted_open));
    std::vector<bool> open(static_cast<size_t>(m), false);
    for (size_t j : open_idx) open[j] = true;
    const double step = th.demand_step * 2;
    for (int j = 0; j < m; ++j) {
      double share = total / planted_open;
      double q = open[static_cast<size_t>(j)] ? 1.2 * share * rng.uniform(1.0, 1.25)
                                              : share * rng.uniform(0.8, 1.4);
      inst->capacity.push_back(std::ceil(std::min(q, 0.9 * total) / step) * step);
    }
    double planted_capacity = 0;
    for (size_t j : open_idx) planted_capacity += inst->capacity[j];

    if (rng.bernoulli(options.side_constraint_rate)) inst->max_open = planted_open;
    if (rng.bernoulli(options.side_constraint_rate)) {
      const auto pair = draw_distinct_pair(rng, m, 50, [&](int a, int b) {
        return !(open[static_cast<size_t>(a)] && open[static_cast<size_t>(b)]);
      });
      if (pair) inst->exclusive.push_back(in_order(*pair));
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      // The planted split serves d_i * Q_j / Q(S) from each j in S.
      double least = total;
      for (size_t j : open_idx)
        least = std::min(least, total * inst->capacity[j] / planted_capacity);
      double floor_step = std::floor(0.5 * least / step) * step;
      if (floor_step > 0) inst->min_throughput = floor_step;
    }
    return inst;
  }
};

}  // namespace

const Family& facility_location_family() {
  static const FacilityLocationFamily family;
  return family;
}

}  // namespace trex::orlib
